"""On the GPU: can the engines' own Triton attention kernels (packed by
scripts/h200/pack_engine_triton.sh into .device-triton/) load without the engines, and does
SGLang's decode kernel agree with a float64 reference on a gpt-oss decode shard (window 128,
sinks) and a Gemma-2 one (soft-cap 50)? One line per check; the exit status is 0 only when all
pass. Writes $OUT/engine-triton-probe-$GPU_TAG.txt when OUT is set.

    python scripts/h200/engine_triton_probe.py
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import torch

PACK = Path(os.environ.get("ATTNBENCH_ENGINE_TRITON", ".device-triton")).resolve()


def _package(name: str, path: Path | None) -> None:
    mod = types.ModuleType(name)
    mod.__path__ = [str(path)] if path else []  # type: ignore[attr-defined]
    sys.modules[name] = mod


def stub_sglang() -> None:
    """Stub parents of the kernel files: the real environ.py, five helpers of srt.utils."""
    root = PACK / "sglang"
    for name, sub in [
        ("sglang", ""),
        ("sglang.kernels", "kernels"),
        ("sglang.kernels.ops", "kernels/ops"),
        ("sglang.kernels.ops.attention", "kernels/ops/attention"),
        ("sglang.srt", "srt"),
    ]:
        _package(name, root / sub)
    utils = types.ModuleType("sglang.srt.utils")
    utils.is_hip = lambda: False  # type: ignore[attr-defined]
    utils.is_cuda = lambda: True  # type: ignore[attr-defined]
    utils.is_gfx95_supported = lambda: False  # type: ignore[attr-defined]
    utils.is_gfx1250_supported = lambda: False  # type: ignore[attr-defined]
    utils.get_device_core_count = (  # type: ignore[attr-defined]
        lambda device_id=0: torch.cuda.get_device_properties(device_id).multi_processor_count
    )
    sys.modules["sglang.srt.utils"] = utils


def reference(q, k, v, lens, scale, window, sinks, cap):
    out = []
    for b, n in enumerate(lens):
        kb = k[b, :n].double()
        vb = v[b, :n].double()
        group = q.shape[1] // k.shape[2]
        kk = kb.repeat_interleave(group, dim=1)
        vv = vb.repeat_interleave(group, dim=1)
        s = torch.einsum("hd,nhd->hn", q[b].double(), kk) * scale
        if cap:
            s = cap * torch.tanh(s / cap)
        if window >= 0:
            s[:, : max(0, n - 1 - window)] = -torch.inf
        m = s.amax(-1, keepdim=True)
        if sinks is not None:
            m = torch.maximum(m, sinks.double()[:, None])
        p = torch.exp(s - m)
        den = p.sum(-1, keepdim=True)
        if sinks is not None:
            den = den + torch.exp(sinks.double()[:, None] - m)
        out.append(torch.einsum("hn,nhd->hd", p / den, vv))
    return torch.stack(out)


def sglang_decode(heads, kv_heads, dim, window, use_sinks, cap) -> str:
    from sglang.kernels.ops.attention.decode_attention import decode_attention_fwd

    torch.manual_seed(0)
    lens = [300, 1000, 70, 4096]
    bs, maxn, dev = len(lens), max(lens), "cuda"
    q = torch.randn(bs, heads, dim, device=dev, dtype=torch.bfloat16)
    k = torch.randn(bs, maxn, kv_heads, dim, device=dev, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    sinks = torch.randn(heads, device=dev, dtype=torch.float32) if use_sinks else None
    # token-granular cache (page size 1), as SGLang's triton backend; a window reads only the
    # last window + 1 tokens (SGLang's window_kv_indices)
    starts = [b * maxn for b in range(bs)]
    first = [max(0, n - 1 - window) if window >= 0 else 0 for n in lens]
    idx = torch.cat(
        [torch.arange(s + f, s + n) for s, f, n in zip(starts, first, lens, strict=True)]
    ).to(dev)
    indptr = torch.tensor(
        [0, *torch.tensor([n - f for n, f in zip(lens, first, strict=True)]).cumsum(0).tolist()],
        device=dev,
        dtype=torch.int32,
    )
    splits = 8
    logits = torch.empty(bs, heads, splits, dim, device=dev, dtype=torch.float32)
    lse = torch.empty(bs, heads, splits, device=dev, dtype=torch.float32)
    o = torch.empty_like(q)
    scale = dim**-0.5
    decode_attention_fwd(
        q,
        k.view(-1, kv_heads, dim),
        v.view(-1, kv_heads, dim),
        o,
        indptr,
        idx.int(),
        logits,
        lse,
        torch.full((bs,), splits, device=dev, dtype=torch.int32),
        splits,
        scale,
        1.0,
        1.0,
        logit_cap=cap,
        sinks=sinks,
    )
    ref = reference(q, k, v, lens, scale, window, sinks, cap)
    err = (o.double() - ref).abs().max().item()
    return f"{'ok' if err < 2e-2 else 'FAIL'} max_abs_err={err:.2e}"


def main() -> int:
    lines, ok = [], True
    try:
        stub_sglang()
        for label, args in [
            ("gpt-oss window+sinks", (64, 8, 64, 127, True, 0.0)),
            ("gpt-oss full+sinks", (64, 8, 64, -1, True, 0.0)),
            ("gemma-2 window+softcap", (16, 8, 256, 4095, False, 50.0)),
        ]:
            line = sglang_decode(*args)
            ok &= line.startswith("ok")
            lines.append(f"sglang 0.5.23 decode_attention_fwd {label}: {line}")
    except Exception as e:  # one line per failure, no traceback
        ok = False
        lines.append(f"sglang 0.5.23 triton: {type(e).__name__}: {e}")
    try:
        _package("vllm", PACK / "vllm")
        import importlib

        importlib.import_module("vllm.v1.attention.ops.triton_unified_attention")
        lines.append("vllm 0.34.0 triton_unified_attention: imports")
    except Exception as e:
        ok = False
        lines.append(f"vllm 0.34.0 triton_unified_attention: {type(e).__name__}: {e}")
    text = "\n".join([torch.cuda.get_device_name(), *lines])
    print(text)
    if os.environ.get("OUT"):
        tag = os.environ.get("GPU_TAG", "gpu")
        Path(os.environ["OUT"], f"engine-triton-probe-{tag}.txt").write_text(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
