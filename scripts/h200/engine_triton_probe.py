"""On the GPU: can the engines' own Triton attention kernels (packed by
scripts/h200/pack_engine_triton.sh into .device-triton/) load without the engines, and does
SGLang's decode kernel agree with a float64 reference on a gpt-oss decode shard (window 128,
sinks) and a Gemma-2 one (soft-cap 50), and does vLLM's unified_attention (TRITON_ATTN) on a
paged cache (block 16) with the same shapes? The engines' parents are stubbed (vllm.envs,
vllm.platforms, vllm.logger: what the two kernel files read from them, nothing more). One line
per check; the exit status is 0 only when all pass. Writes $OUT/engine-triton-probe-$GPU_TAG.txt
when OUT is set.

    python scripts/h200/engine_triton_probe.py
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from attnbench.backends.engine_triton_load import (
    pack_dir,
    sglang_decode_attention,
    vllm_unified_attention,
)

PACK = pack_dir()


def vllm_decode(heads, kv_heads, dim, window, use_sinks, cap, split_kv: bool) -> str:
    """One decode step through unified_attention as vLLM's TritonAttentionImpl calls it:
    window (w - 1, 0), soft-cap 0 for none, sinks per query head, 3D (split-KV) scratch of 16
    segments when the batch is under MIN_LAUNCH_GRID_SIZE_2D // kv_heads (128 // kv_heads)."""
    unified_attention = vllm_unified_attention(PACK)

    torch.manual_seed(0)
    lens = [300, 1000, 70, 4096]
    bs, block, dev = len(lens), 16, "cuda"
    blocks_per_seq = -(-max(lens) // block)
    q = torch.randn(bs, heads, dim, device=dev, dtype=torch.bfloat16)
    k = torch.randn(bs, blocks_per_seq * block, kv_heads, dim, device=dev, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    sinks = torch.randn(heads, device=dev, dtype=torch.float32) if use_sinks else None
    perm = torch.randperm(bs * blocks_per_seq, device=dev)  # a shuffled block table
    k_cache = torch.empty(bs * blocks_per_seq, block, kv_heads, dim, device=dev, dtype=k.dtype)
    v_cache = torch.empty_like(k_cache)
    k_cache[perm] = k.view(-1, block, kv_heads, dim)
    v_cache[perm] = v.view(-1, block, kv_heads, dim)
    block_table = perm.view(bs, blocks_per_seq).int()
    out = torch.empty_like(q)
    segments = 16
    scratch = dict(
        softmax_segm_output=torch.empty(
            bs, heads, segments, 1 << (dim - 1).bit_length(), device=dev, dtype=torch.float32
        ),
        softmax_segm_max=torch.empty(bs, heads, segments, device=dev, dtype=torch.float32),
        softmax_segm_expsum=torch.empty(bs, heads, segments, device=dev, dtype=torch.float32),
    )
    scale = dim**-0.5
    unified_attention(
        q=q,
        k=k_cache,
        v=v_cache,
        out=out,
        cu_seqlens_q=torch.arange(bs + 1, device=dev, dtype=torch.int32),
        max_seqlen_q=1,
        seqused_k=torch.tensor(lens, device=dev, dtype=torch.int32),
        max_seqlen_k=max(lens),
        softmax_scale=scale,
        causal=True,
        window_size=(window, 0) if window >= 0 else (-1, -1),
        block_table=block_table,
        softcap=cap,
        q_descale=None,
        k_descale=None,
        v_descale=None,
        seq_threshold_3D=(128 // kv_heads) if split_kv else 0,
        num_par_softmax_segments=segments,
        sinks=sinks,
        **scratch,
    )
    ref = reference(q, k, v, lens, scale, window, sinks, cap)
    err = (out.double() - ref).abs().max().item()
    return f"{'ok' if err < 2e-2 else 'FAIL'} max_abs_err={err:.2e}"


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
    decode_attention_fwd = sglang_decode_attention(PACK)

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
        for label, args in [
            ("gpt-oss window+sinks", (64, 8, 64, 127, True, 0.0)),
            ("gpt-oss full+sinks", (64, 8, 64, -1, True, 0.0)),
            ("gemma-2 window+softcap", (16, 8, 256, 4095, False, 50.0)),
        ]:
            for batch_3d in (True, False):
                line = vllm_decode(*args, split_kv=batch_3d)
                ok &= line.startswith("ok")
                path = "3D (split-KV)" if batch_3d else "2D"
                lines.append(f"vllm 0.34.0 unified_attention {path} {label}: {line}")
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
