"""Quantisation error of attention: fp64 attention on dequantised K/V vs on the original K/V.

For each (data kind, format, scheme) the study quantises K and V, dequantises them, and runs the
same fp64 attention as on the originals, so every difference is the cache's rounding, none of it
a kernel's. A `bf16` row (K/V rounded to bfloat16) gives the 16-bit cache's error for scale.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from attnbench.fp8study.data import make_qkv
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
    shape: dict[str, Any] = dict(
        num_queries=cfg.num_queries,
        num_qo_heads=cfg.num_qo_heads,
        num_kv_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        seed=cfg.seed,
        device=device,
    )
    calib_tokens = cfg.calibration_tokens or cfg.num_tokens
    records: list[dict[str, Any]] = []
    for kind in cfg.data_kinds:
        data = make_qkv(kind, num_tokens=cfg.num_tokens, sample_seed=cfg.seed, **shape)
        calib = make_qkv(
            kind,
            num_tokens=calib_tokens,
            sample_seed=cfg.seed + CALIBRATION_SEED_OFFSET,
            **shape,
        )
        ref = dense_attention(data.q, data.k, data.v)
        sm = 1.0 / math.sqrt(cfg.head_dim)
        base = {"data": kind, "num_tokens": cfg.num_tokens, "calibration_tokens": calib_tokens}

        k16, v16 = data.k.to(torch.bfloat16).double(), data.v.to(torch.bfloat16).double()
        records.append(
            {
                **base,
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
        )
        for fmt_name in cfg.formats:
            fmt = fp8_format(fmt_name)
            for scheme in cfg.schemes:
                ks, vs = kv_schemes(scheme)
                kq = quantize_calibrated(data.k, ks, fmt.dtype, calib.k)
                vq = quantize_calibrated(data.v, vs, fmt.dtype, calib.v)
                kd, vd = kq.dequantize(torch.float64), vq.dequantize(torch.float64)
                out = dense_attention(data.q, kd, vd)
                logit_err = _logit_max_abs_err(data.q, data.k, kd, sm)
                records.append(
                    {
                        **base,
                        "format": fmt.name,
                        "scheme": scheme,
                        "k_scheme": ks,
                        "v_scheme": vs,
                        **error_metrics(out, ref),
                        "logits_max_abs_err": logit_err,
                        "k_rel_l2_err": _rel(kd, data.k),
                        "v_rel_l2_err": _rel(vd, data.v),
                        "k": kq.stats.as_dict(),
                        "v": vq.stats.as_dict(),
                    }
                )
    return records


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
