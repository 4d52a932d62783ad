"""FlexAttention (`torch.nn.attention.flex_attention`) over the packed, unpadded batch.

The whole batch is one sequence: q `[1, Hq, total_q, D]` and K/V `[1, Hkv, total_kv, D]`
gathered from the pages in plan, with a document-style `mask_mod` built from per-token request
ids and positions (`masks.token_ids`): a query sees keys of its own request, bottom-right
causal (within spec.window_left keys before it, under a sliding window), or for kind=tree the
whole context plus its tree ancestors. Attention sinks (spec.sinks) are one more key, after the
packed batch, with a zero value: every query may see it (`mask_mod`), and a `score_mod` replaces
its score with the head's sink logit, so the softmax denominator gains exp(sink) and the output
nothing, as the reference's `cat([QK, S])` softmax. Logit soft-capping (spec.logits_soft_cap,
Gemma-2) is a `score_mod` too: the scaled score s becomes cap * tanh(s / cap), as the reference
computes it (soft-capping and sinks never meet: no model has both). The block mask is built in
plan (`create_block_mask`, compiled on GPU so the full Q x KV mask is never materialised) and
rebuilding it is the per-step plan (`replan`). `flex_attention` is compiled once per process
(`torch.compile`), with a recompile limit high enough for a sweep's shapes: a fall-back to the
eager implementation would time a different (score-materialising) algorithm.

Knobs: `compiled` (False: eager reference implementation, for tests), `block_m`/`block_n`
(kernel_options BLOCK_M/BLOCK_N on GPU; 0 = the library's choice).

Under 128 query rows Inductor lowers to its flex-decoding kernel, which packs a KV head's
query group into one tile of BLOCK_M = next_pow2(total_q x group) rows; above the block mask's
128-row Q block it finds no valid config (`NoValidChoicesError`, H200, torch 2.11: prefill of
70 rows x group 4, decode of 16 x group 16). `flex_kernel_backend` then asks for the main
Triton kernel (BACKEND="TRITON"), and the row says which kernel ran.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import cache
from typing import Any, cast

import torch

from attnbench.backends import kvgather
from attnbench.backends.base import PlannedRun, Unsupported
from attnbench.backends.features import missing_feature
from attnbench.backends.masks import TokenIds, token_ids
from attnbench.measure.hardware import DeviceInfo
from attnbench.workload.inputs import AttentionInputs
from attnbench.workload.spec import WorkloadSpec

EAGER_SCORES_BUDGET_BYTES = 4 << 30
"""The eager implementation materialises fp32 scores `[Hq, total_q, total_kv]`."""
RECOMPILE_LIMIT = 512
Q_BLOCK_SIZE = 128
"""`create_block_mask`'s default Q (and KV) block: the sparse tile the kernels step over."""


def flex_kernel_backend(total_q: int, group_size: int, q_block_size: int = Q_BLOCK_SIZE) -> str:
    """The kernel_options BACKEND to ask for: "AUTO" (Inductor picks), or "TRITON" where its
    flex-decoding kernel would need a query tile of next_pow2(total_q x group_size) rows that
    does not divide the block mask's Q block (torch's lowering then has no valid choice)."""
    if total_q >= q_block_size:
        return "AUTO"  # the main kernel already
    rows = max(1 << max(total_q * group_size - 1, 0).bit_length(), 16)
    return "AUTO" if q_block_size % rows == 0 else "TRITON"


def flex_available() -> str | None:
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except ImportError:
        return f"torch {torch.__version__} has no FlexAttention (needs torch >= 2.5)"
    return None


@cache
def compiled_flex() -> Callable[..., torch.Tensor]:
    """`torch.compile(flex_attention)`, once per process."""
    import torch._dynamo
    from torch.nn.attention.flex_attention import flex_attention

    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(int(getattr(cfg, name)), RECOMPILE_LIMIT))
            break
    for name in ("accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(int(getattr(cfg, name)), 4 * RECOMPILE_LIMIT))
            break
    if hasattr(cfg, "fail_on_recompile_limit_hit"):
        cfg.fail_on_recompile_limit_hit = True  # never time the eager fall-back silently
    fn: Callable[..., torch.Tensor] = torch.compile(flex_attention, dynamic=False)
    return fn


def make_mask_mod(
    spec: WorkloadSpec, ids: TokenIds, sink_key: int | None = None
) -> Callable[..., torch.Tensor]:
    """mask_mod(b, h, q_idx, kv_idx) -> bool tensor, over the packed batch (see module doc);
    with `sink_key`, every query also sees that key (ids must then cover it: `with_sink_key`)."""
    base = _base_mask_mod(spec, ids)
    if sink_key is None:
        return base
    sink = sink_key

    def with_sink(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> torch.Tensor:
        seen: torch.Tensor = (kv_idx == sink) | base(b, h, q_idx, kv_idx)
        return seen

    return with_sink


def with_sink_key(ids: TokenIds) -> TokenIds:
    """`ids` with one more key that belongs to no request (request -1, node -1, position 0)."""
    one = torch.ones(1, dtype=ids.kv_req.dtype, device=ids.kv_req.device)
    return replace(
        ids,
        kv_req=torch.cat([ids.kv_req, -one]),
        kv_pos=torch.cat([ids.kv_pos, 0 * one]),
        kv_node=torch.cat([ids.kv_node, -one]),
    )


def sink_score_mod(sink_key: int, sinks: torch.Tensor) -> Callable[..., torch.Tensor]:
    """score_mod: the sink key's score becomes the head's sink logit (`sinks` [Hq], fp32)."""

    def sink_score(score: Any, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> torch.Tensor:
        out: torch.Tensor = torch.where(kv_idx == sink_key, sinks[h].to(score.dtype), score)
        return out

    return sink_score


def soft_cap_score_mod(cap: float) -> Callable[..., torch.Tensor]:
    """score_mod: Gemma-2's logit soft-cap, cap * tanh(score / cap), on the scaled score."""

    def capped(score: Any, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> torch.Tensor:
        out: torch.Tensor = torch.tanh(score / cap) * cap
        return out

    return capped


def _base_mask_mod(spec: WorkloadSpec, ids: TokenIds) -> Callable[..., torch.Tensor]:
    q_req, q_pos, q_node = ids.q_req, ids.q_pos, ids.q_node
    kv_req, kv_pos, kv_node = ids.kv_req, ids.kv_pos, ids.kv_node
    tree = ids.tree

    if tree is not None:

        def tree_mask(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> torch.Tensor:
            node = kv_node[kv_idx]
            ancestor = tree[q_node[q_idx], node.clamp(min=0)]
            return (q_req[q_idx] == kv_req[kv_idx]) & ((node < 0) | ancestor)

        return tree_mask
    if spec.window_left >= 0:
        window = spec.window_left

        def window_mask(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> torch.Tensor:
            same = q_req[q_idx] == kv_req[kv_idx]
            delta = q_pos[q_idx] - kv_pos[kv_idx]
            return same & (delta >= 0) & (delta <= window)

        return window_mask
    if spec.causal:

        def causal_mask(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> torch.Tensor:
            same = q_req[q_idx] == kv_req[kv_idx]
            return same & (kv_pos[kv_idx] <= q_pos[q_idx])

        return causal_mask

    def document_mask(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> torch.Tensor:
        return q_req[q_idx] == kv_req[kv_idx]

    return document_mask


def build_block_mask(
    spec: WorkloadSpec, ids: TokenIds, device: torch.device, sink_key: int | None = None
) -> Any:
    from torch.nn.attention.flex_attention import create_block_mask

    kw: dict[str, Any] = {"device": device}
    if device.type == "cuda" and "_compile" in inspect.signature(create_block_mask).parameters:
        kw["_compile"] = True
    mask_mod = make_mask_mod(spec, ids, sink_key)
    kv_len = spec.total_kv + (sink_key is not None)
    return create_block_mask(mask_mod, None, None, spec.total_q, kv_len, **kw)


class FlexBackend:
    name = "flex"
    devices = ("cpu", "cuda")
    knobs: Mapping[str, tuple[object, ...]] = {
        "compiled": (True, False),
        "block_m": (0, 64, 128),
        "block_n": (0, 64, 128),
    }

    def available(self) -> str | None:
        return flex_available()

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> Unsupported | None:
        if device.kind not in self.devices:
            return Unsupported(f"flex runs on cpu or cuda, not {device.kind}")
        if why := missing_feature(self.name, spec, ("window", "sinks", "softcap")):
            return why
        if spec.is_fp8:
            return Unsupported("flex has no fp8 KV path (dequantising in plan is no fp8 kernel)")
        if spec.kv_dtype != spec.dtype:
            return Unsupported(f"q dtype {spec.dtype} and KV dtype {spec.kv_dtype} differ")
        return None

    def plan(
        self,
        spec: WorkloadSpec,
        inputs: AttentionInputs,
        knobs: Mapping[str, object] | None = None,
    ) -> PlannedRun:
        from torch.nn.attention.flex_attention import flex_attention

        chosen = {k: v[0] for k, v in self.knobs.items()} | dict(knobs or {})
        compiled = bool(chosen["compiled"])
        scores = spec.num_qo_heads * spec.total_q * spec.total_kv * 4
        if not compiled and scores > EAGER_SCORES_BUDGET_BYTES:
            raise MemoryError(f"eager flex would materialise {scores / 2**30:.1f} GiB of scores")
        dev = inputs.device
        q4, k4, v4, ids, sink_key, score_mod = _operands(spec, inputs)
        block_mask = build_block_mask(spec, ids, dev, sink_key)
        options, main_kernel = _kernel_options(spec, chosen, compiled, dev)
        eager = cast(Callable[..., Any], flex_attention)
        fn: Callable[..., Any] = compiled_flex() if compiled else eager
        kw: dict[str, Any] = {
            "block_mask": block_mask,
            "scale": spec.sm_scale,
            "enable_gqa": spec.group_size > 1,
        }
        if score_mod is not None:
            kw["score_mod"] = score_mod
        if options or main_kernel:
            kw["kernel_options"] = options | (_main_kernel_option() if main_kernel else {})

        def run() -> torch.Tensor:
            out: torch.Tensor = fn(q4, k4, v4, **kw)
            return out

        run()  # compile here, not in a timed call

        def replan() -> None:
            build_block_mask(spec, ids, dev, sink_key)

        def unpack(out: torch.Tensor) -> torch.Tensor:
            return out[0].transpose(0, 1)

        details: dict[str, str | int | float | bool] = {
            "compiled": compiled,
            "kv_cache": "packed",
            "mask": _mask_name(spec, ids),
            "block_sparsity": round(_sparsity(block_mask), 4),
        }
        if spec.sinks:
            details["sinks"] = "score_mod-key"
        if spec.logits_soft_cap > 0:
            details["soft_cap"] = "score_mod-tanh"
        details.update({k.lower(): v for k, v in options.items()})
        if main_kernel:
            details["flex_kernel"] = "main (flex-decoding has no valid tile)"
        return PlannedRun(
            run=run,
            resolved="flex" + ("" if compiled else "-eager"),
            details=details,
            unpack=unpack,
            graph_safe=compiled and dev.type == "cuda",
            replan=replan,
        )


_Operands = tuple[
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    TokenIds,
    int | None,
    Callable[..., torch.Tensor] | None,
]


def _operands(spec: WorkloadSpec, inputs: AttentionInputs) -> _Operands:
    """q, k, v as flex takes them ([1, H, tokens, D], the KV packed), the token ids, and with
    sinks the extra all-zero key that carries them (its index) with its score_mod; a soft-cap
    gives the tanh score_mod."""
    dev = inputs.device
    k, v = kvgather.packed_kv(inputs)  # [total_kv, Hkv, D]
    q4 = inputs.q.transpose(0, 1).unsqueeze(0).contiguous()  # [1, Hq, total_q, D]
    k4 = k.transpose(0, 1).unsqueeze(0).contiguous()
    v4 = v.transpose(0, 1).unsqueeze(0).contiguous()
    ids = token_ids(spec, dev)
    sink_key: int | None = None
    score_mod: Callable[..., torch.Tensor] | None = None
    if spec.sinks:
        assert inputs.sinks is not None, "spec.sinks needs inputs.sinks"
        sink_key = spec.total_kv
        zero = k4.new_zeros(1, k4.shape[1], 1, k4.shape[3])
        k4, v4 = torch.cat([k4, zero], dim=2), torch.cat([v4, zero], dim=2)
        ids = with_sink_key(ids)
        score_mod = sink_score_mod(sink_key, inputs.sinks.to(dev, torch.float32))
    if spec.logits_soft_cap > 0:
        score_mod = soft_cap_score_mod(spec.logits_soft_cap)
    return q4, k4, v4, ids, sink_key, score_mod


def _kernel_options(
    spec: WorkloadSpec, chosen: Mapping[str, object], compiled: bool, dev: torch.device
) -> tuple[dict[str, int], bool]:
    """The tile sizes the knobs ask for (CUDA only), and whether to ask Inductor for the main
    kernel (compiled on CUDA, where flex-decoding has no valid tile)."""
    options: dict[str, int] = {}
    if dev.type == "cuda":
        for knob, option in (("block_m", "BLOCK_M"), ("block_n", "BLOCK_N")):
            if chosen[knob]:
                options[option] = int(str(chosen[knob]))
    main_kernel = compiled and dev.type == "cuda"
    main_kernel &= flex_kernel_backend(spec.total_q, spec.group_size) != "AUTO"
    return options, main_kernel


def _main_kernel_option() -> dict[str, Any]:
    """Ask Inductor for the main flex_attention kernel: BACKEND="TRITON" (torch >= 2.10), the
    legacy FORCE_USE_FLEX_ATTENTION before it."""
    from torch.nn.attention.flex_attention import FlexKernelOptions

    if "BACKEND" in getattr(FlexKernelOptions, "__annotations__", {}):
        return {"BACKEND": "TRITON"}
    return {"FORCE_USE_FLEX_ATTENTION": True}


def _mask_name(spec: WorkloadSpec, ids: TokenIds) -> str:
    if ids.tree is not None:
        return "tree"
    if spec.window_left >= 0:
        return f"window{spec.window_left}"
    return "causal" if spec.causal else "document"


def _sparsity(block_mask: Any) -> float:
    """Fraction of (q block, kv block) tiles the kernel skips, 0..1 (-1 if unknown)."""
    try:
        dense = block_mask.to_dense()  # [B, H, q_blocks, kv_blocks], nonzero = computed
        return 1.0 - float((dense != 0).float().mean())
    except Exception:
        return -1.0


def backends() -> list[FlexBackend]:
    return [FlexBackend()]
