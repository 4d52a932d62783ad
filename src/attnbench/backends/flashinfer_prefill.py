"""FlashInfer prefill paths: paged prefill/append/tree, ragged prefill, cascade.

FP8 KV (0.7.4 prefill.py `run`):
- fp16/bf16 query (fa2, and auto, which then resolves to fa2): `k_scale`/`v_scale` keywords;
  `k_scale` folds into `sm_scale`, `v_scale` scales the output after the kernel, in place.
- fa3: its fp8 kernel needs q in the KV cache's fp8 dtype (`static_assert(is_same_v<DTypeQ,
  DTypeKV>)`), so plan quantises q per tensor and `run` passes the three scales positionally
  (`run(q8, kv, q_scale, k_scale, v_scale)`): the kernel folds them (`StandardFP8Attention`)
  and multiplies P in fp8, so the row's precision is the fp8 dtype and the reference uses
  the quantised query (`q_effective`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from attnbench.backends.base import PlannedRun
from attnbench.backends.flashinfer_common import (
    WORKSPACE_BYTES,
    knob_details,
    logits_kwargs,
    output_buffer,
    quantize_query,
    workspace,
)
from attnbench.backends.flashinfer_rules import Route, cascade_levels, cascade_shared_pages
from attnbench.workload.inputs import AttentionInputs, torch_dtype
from attnbench.workload.spec import WorkloadSpec


class _Query:
    """The query a route feeds the kernel and the scale arguments `run` passes with it."""

    def __init__(self, route: Route, spec: WorkloadSpec, inputs: AttentionInputs) -> None:
        self.q = inputs.q
        self.q_effective: torch.Tensor | None = None
        self.args: tuple[float, ...] = ()
        self.kwargs: dict[str, float] = {}
        if route.fp8_query:
            self.q, q_scale, self.q_effective = quantize_query(inputs.q, spec.kv_dtype)
            self.args = (q_scale, inputs.k_scale, inputs.v_scale)
        elif spec.is_fp8:
            self.kwargs = {"k_scale": inputs.k_scale, "v_scale": inputs.v_scale}

    def plan_dtypes(self, spec: WorkloadSpec) -> dict[str, torch.dtype]:
        return {
            "q_data_type": self.q.dtype,
            "kv_data_type": torch_dtype(spec.kv_dtype),
            "o_data_type": torch_dtype(spec.dtype),
        }


def _split_kwargs(route: Route, knobs: dict[str, object]) -> dict[str, Any]:
    """fa2's split-KV knobs (the fa3 planner takes none)."""
    if route.backend != "fa2":
        return {}
    return {
        "disable_split_kv": bool(knobs.get("disable_split_kv", False)),
        "fixed_split_size": knobs.get("fixed_split_size"),
    }


def _window_kwargs(spec: WorkloadSpec) -> dict[str, Any]:
    """`plan(window_left=)` for a sliding window (every prefill planner takes it), with the
    soft-cap and the model's softmax scale (`logits_kwargs`)."""
    window = {"window_left": spec.window_left} if spec.window_left >= 0 else {}
    return window | logits_kwargs(spec)


def _details(
    api: str, route: Route, spec: WorkloadSpec, knobs: dict[str, object], version: str
) -> dict[str, Any]:
    return {
        "api": api,
        "backend_requested": route.backend,
        "kernel": "prefill",
        "fp8_query": route.fp8_query,
        "flashinfer": version,
        **logits_kwargs(spec),
        **knob_details(route, knobs),
    }


def plan_paged(
    route: Route, spec: WorkloadSpec, inputs: AttentionInputs, knobs: dict[str, object]
) -> PlannedRun:
    """`BatchPrefillWithPagedKVCacheWrapper` over the paged cache: every kind it serves."""
    import flashinfer

    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
        workspace(inputs.device), spec.kv_layout, backend=route.backend
    )
    query = _Query(route, spec, inputs)
    plan_kwargs: dict[str, Any] = {
        **query.plan_dtypes(spec),
        **_split_kwargs(route, knobs),
        **_window_kwargs(spec),
        "causal": spec.causal and not route.custom_mask,
    }
    if route.custom_mask:
        if inputs.custom_mask is None:
            raise ValueError("kind=tree needs inputs.custom_mask")
        plan_kwargs["custom_mask"] = inputs.custom_mask  # flat bool; plan packs it

    def replan() -> None:
        wrapper.plan(
            inputs.qo_indptr,
            inputs.kv_indptr,
            inputs.kv_indices,
            inputs.kv_last_page_len,
            spec.num_qo_heads,
            spec.num_kv_heads,
            spec.head_dim,
            spec.page_size,
            **plan_kwargs,
        )

    replan()
    out = output_buffer(spec, inputs)
    q, kv_cache, args, kwargs = query.q, inputs.kv_cache, query.args, query.kwargs

    def run() -> torch.Tensor:
        result: torch.Tensor = wrapper.run(q, kv_cache, *args, out=out, **kwargs)
        return result

    details = _details(
        "BatchPrefillWithPagedKVCacheWrapper", route, spec, knobs, str(flashinfer.__version__)
    )
    details["custom_mask"] = route.custom_mask
    return _planned(wrapper, route, spec, query, run, replan, out, details)


def gather_kv(inputs: AttentionInputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """K and V of every request, contiguous: what a prefill has before it writes the cache.

    Returns:
        (k, v, kv_indptr): k and v `[total_kv, num_kv_heads, head_dim]` in the cache dtype,
        kv_indptr `[batch_size + 1]` int32 in tokens.
    """
    ks, vs = [], []
    for b in range(inputs.spec.batch_size):
        k, v = inputs.request_kv(b)
        ks.append(k.view(torch.uint8))  # cat through uint8: fp8 cat support varies
        vs.append(v.view(torch.uint8))
    dtype = inputs.kv_cache.dtype
    lens = [0, *inputs.spec.kv_lens]
    indptr = torch.tensor(lens, dtype=torch.int64).cumsum(0).to(torch.int32)
    return (
        torch.cat(ks).view(dtype).contiguous(),
        torch.cat(vs).view(dtype).contiguous(),
        indptr.to(inputs.device),
    )


def plan_ragged(
    route: Route, spec: WorkloadSpec, inputs: AttentionInputs, knobs: dict[str, object]
) -> PlannedRun:
    """`BatchPrefillWithRaggedKVCacheWrapper` over K/V gathered contiguously (NHD) here."""
    import flashinfer

    k, v, kv_indptr = gather_kv(inputs)
    wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(
        workspace(inputs.device), "NHD", backend=route.backend
    )
    query = _Query(route, spec, inputs)
    plan_kwargs: dict[str, Any] = {
        **query.plan_dtypes(spec),
        **_split_kwargs(route, knobs),
        **_window_kwargs(spec),
        "causal": spec.causal,
    }

    def replan() -> None:
        wrapper.plan(
            inputs.qo_indptr,
            kv_indptr,
            spec.num_qo_heads,
            spec.num_kv_heads,
            spec.head_dim,
            **plan_kwargs,
        )

    replan()
    out = output_buffer(spec, inputs)
    q, args, kwargs = query.q, query.args, query.kwargs

    def run() -> torch.Tensor:
        result: torch.Tensor = wrapper.run(q, k, v, *args, out=out, **kwargs)
        return result

    details = _details(
        "BatchPrefillWithRaggedKVCacheWrapper", route, spec, knobs, str(flashinfer.__version__)
    )
    details["kv_contiguous"] = True
    details["gathered_kv_bytes"] = 2 * k.numel() * k.element_size()
    return _planned(wrapper, route, spec, query, run, replan, out, details)


def plan_cascade(route: Route, spec: WorkloadSpec, inputs: AttentionInputs) -> PlannedRun:
    """Two-level `MultiLevelCascadeAttentionWrapper`: shared prefix pages, then the rest.

    Its `run(q, paged_kv_cache)` takes no `out` (each level allocates its output and LSE,
    which graph capture tolerates) and no fp8 scales (the rules keep fp8 away).
    """
    import flashinfer

    shared_pages = cascade_shared_pages(spec)
    if isinstance(shared_pages, str):
        raise ValueError(shared_pages)
    level0, indptr1, indices1 = cascade_levels(
        inputs.kv_indptr.tolist(), inputs.kv_indices.tolist(), shared_pages
    )
    dev = inputs.device

    def i32(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int32, device=dev)

    qo_indptr = [i32([0, spec.total_q]), inputs.qo_indptr]
    kv_indptr = [i32([0, shared_pages]), i32(indptr1)]
    kv_indices = [i32(level0), i32(indices1)]
    last_page_len = [i32([spec.page_size]), inputs.kv_last_page_len]
    wrapper = flashinfer.MultiLevelCascadeAttentionWrapper(2, workspace(dev), spec.kv_layout)

    def replan() -> None:
        wrapper.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            last_page_len,
            spec.num_qo_heads,
            spec.num_kv_heads,
            spec.head_dim,
            spec.page_size,
            causal=spec.causal,  # the wrapper applies it to the last level only
            **logits_kwargs(spec),
            q_data_type=torch_dtype(spec.dtype),
            kv_data_type=torch_dtype(spec.kv_dtype),
        )

    replan()
    q, kv_cache = inputs.q, inputs.kv_cache

    def run() -> torch.Tensor:
        result: torch.Tensor = wrapper.run(q, kv_cache)
        return result

    levels = getattr(wrapper, "_batch_prefill_wrappers", [])
    resolved = "+".join(str(getattr(w, "_backend", "?")) for w in levels) or "cascade"
    return PlannedRun(
        run=run,
        resolved=f"cascade:{resolved}",
        details={
            "api": "MultiLevelCascadeAttentionWrapper",
            "kernel": "prefill",
            "shared_pages": shared_pages,
            "unique_pages": len(indices1),
            "flashinfer": str(flashinfer.__version__),
        },
        workspace_bytes=WORKSPACE_BYTES,
        replan=replan,
    )


def _planned(
    wrapper: Any,
    route: Route,
    spec: WorkloadSpec,
    query: Any,
    run: Callable[[], torch.Tensor],
    replan: Callable[[], None],
    out: torch.Tensor,
    details: dict[str, Any],
) -> PlannedRun:
    """The PlannedRun of a prefill wrapper: what ran (the wrapper's resolved backend), the fp8
    query it saw and, when q is fp8, the fp8 error budget."""
    return PlannedRun(
        run=run,
        resolved=str(getattr(wrapper, "_backend", route.backend)),
        details=details,
        out=out,
        q_effective=query.q_effective,
        precision=spec.kv_dtype if route.fp8_query else "",
        workspace_bytes=WORKSPACE_BYTES,
        replan=replan,
    )
