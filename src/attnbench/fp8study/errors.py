"""Quantisation error of attention: fp64 attention on dequantised K/V vs on the original K/V.

For each (data kind, format, scheme) the study quantises K and V, dequantises them, and runs the
same fp64 attention as on the originals, so every difference is the cache's rounding, none of it
a kernel's. A `bf16` row (K/V rounded to bfloat16) gives the 16-bit cache's error for scale.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from attnbench.fp8study.data import QKV, QKVShape, make_qkv
from attnbench.run.kernel_error import error_metrics
from attnbench.workload.quant import Scheme, fp8_format, kv_schemes, quantize_calibrated

if TYPE_CHECKING:
    from attnbench.fp8study.config import StudyConfig

CALIBRATION_SEED_OFFSET = 1_000_003


def dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(head_dim)) v over every key (decode: no mask), in q's dtype.

    Args:
        q: `[num_queries, num_qo_heads, head_dim]`.
        k, v: `[num_tokens, num_kv_heads, head_dim]`; query head h reads KV head h // group.

    Returns:
        `[num_queries, num_qo_heads, head_dim]`.
    """
    nq, hq, d = q.shape
    hkv = k.shape[1]
    qg = q.reshape(nq, hkv, hq // hkv, d)
    logits = torch.einsum("qhgd,lhd->hgql", qg, k.to(q.dtype)) / math.sqrt(d)
    probs = torch.softmax(logits, dim=-1)
    out = torch.einsum("hgql,lhd->qhgd", probs, v.to(q.dtype))
    return out.reshape(nq, hq, d)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    norm = float(torch.linalg.vector_norm(b))
    return float(torch.linalg.vector_norm(a - b)) / norm if norm else 0.0


def error_study(cfg: StudyConfig) -> list[dict[str, Any]]:
    """One record per (data kind, format, scheme) plus one `bf16` record per data kind."""
    device = torch.device(cfg.device)
    shape = QKVShape(
        cfg.num_tokens, cfg.num_queries, cfg.num_qo_heads, cfg.num_kv_heads, cfg.head_dim
    )
    calib_tokens = cfg.calibration_tokens or cfg.num_tokens
    calib_shape = replace(shape, num_tokens=calib_tokens)
    calib_seed = cfg.seed + CALIBRATION_SEED_OFFSET
    records: list[dict[str, Any]] = []
    for kind in cfg.data_kinds:
        data = make_qkv(kind, shape, seed=cfg.seed, sample_seed=cfg.seed, device=device)
        calib = make_qkv(kind, calib_shape, seed=cfg.seed, sample_seed=calib_seed, device=device)
        ref = dense_attention(data.q, data.k, data.v)
        base = {"data": kind, "num_tokens": cfg.num_tokens, "calibration_tokens": calib_tokens}
        records.append(base | _bf16_record(data, ref))
        for fmt_name in cfg.formats:
            fmt = fp8_format(fmt_name)
            records += [
                base | _fp8_record((data, calib), ref, fmt, scheme, cfg.head_dim)
                for scheme in cfg.schemes
            ]
    return records


def _bf16_record(data: QKV, ref: torch.Tensor) -> dict[str, Any]:
    """The error of a bf16 KV cache (round to nearest, no scale)."""
    k16, v16 = data.k.to(torch.bfloat16).double(), data.v.to(torch.bfloat16).double()
    return {
        "format": "bf16",
        "scheme": "none",
        "k_scheme": "none",
        "v_scheme": "none",
        **error_metrics(dense_attention(data.q, k16, v16), ref),
        "k_rel_l2_err": _rel(k16, data.k),
        "v_rel_l2_err": _rel(v16, data.v),
        "k": None,
        "v": None,
    }


def _fp8_record(
    data_and_calib: tuple[QKV, QKV], ref: torch.Tensor, fmt: Any, scheme: Scheme, head_dim: int
) -> dict[str, Any]:
    """The error of an fp8 KV cache in `fmt` under `scheme`, its scales calibrated on `calib`."""
    data, calib = data_and_calib
    ks, vs = kv_schemes(scheme)
    kq = quantize_calibrated(data.k, ks, fmt.dtype, calib.k)
    vq = quantize_calibrated(data.v, vs, fmt.dtype, calib.v)
    kd, vd = kq.dequantize(torch.float64), vq.dequantize(torch.float64)
    out = dense_attention(data.q, kd, vd)
    return {
        "format": fmt.name,
        "scheme": scheme,
        "k_scheme": ks,
        "v_scheme": vs,
        **error_metrics(out, ref),
        "logits_max_abs_err": _logit_max_abs_err(data.q, data.k, kd, 1.0 / math.sqrt(head_dim)),
        "k_rel_l2_err": _rel(kd, data.k),
        "v_rel_l2_err": _rel(vd, data.v),
        "k": kq.stats.as_dict(),
        "v": vq.stats.as_dict(),
    }


def _logit_max_abs_err(q: torch.Tensor, k: torch.Tensor, kd: torch.Tensor, sm: float) -> float:
    """max |q.k - q.k_dequantised| * sm over every (query, head, key)."""
    nq, hq, d = q.shape
    hkv = k.shape[1]
    qg = q.reshape(nq, hkv, hq // hkv, d)
    diff = torch.einsum("qhgd,lhd->hgql", qg, k - kd) * sm
    return float(diff.abs().amax())


def schemes_for(scheme: Scheme) -> str:
    """Readable `K:scheme V:scheme` label."""
    ks, vs = kv_schemes(scheme)
    return ks if ks == vs else f"K {ks}, V {vs}"
