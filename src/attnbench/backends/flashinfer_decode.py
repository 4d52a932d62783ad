"""FlashInfer decode paths: `BatchDecodeWithPagedKVCacheWrapper` and XQA.

Both read the paged cache as it is (NHD or HND, the 5-D `[num_pages, 2, ...]` tensor). The
decode wrapper is built in CUDA-graph mode by default (`use_cuda_graph=True` with fixed
indptr/indices/last_page_len buffers), as serving engines build it; `plan` fills them.

FP8 KV (0.7.4, decode.py `run`): `k_scale` multiplies `sm_scale` on the host, `v_scale`
scales the output after the kernel (`out *= v_scale`, in place, so `run` stays
allocation-free). XQA takes them fused: `bmm1_scale = k_scale * sm_scale`,
`bmm2_scale = v_scale`. Soft-cap and the model's softmax scale: `plan(logits_soft_cap=,
sm_scale=)` (`flashinfer_common.logits_kwargs`); XQA and cuDNN take no soft-cap (the rules
refuse it there).

FP8 KV with one scale per (token, KV head) (the fp8 study's `token` scheme): inputs that carry
`extras["k_cache_sf"]` and `extras["v_cache_sf"]` (float32 `[num_pages, page_size,
num_kv_heads]`, real = stored * sf) are planned with `use_token_head_sf=True` and run with
`kv_cache_sf=(k_sf, v_sf)`.

Sliding window: `plan(window_left=)` (the run inherits it); XQA takes `window_left` per call
(its `sliding_win_size` = window_left + 1). Sinks: XQA and trtllm-gen take `sinks=` in float32
`[num_qo_heads]` (`flashinfer_rules.SINK_VARIANTS`; the rules refuse them elsewhere).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from attnbench.backends.base import PlannedRun
from attnbench.backends.flashinfer_common import (
    WORKSPACE_BYTES,
    dense_block_tables,
    knob_details,
    logits_kwargs,
    output_buffer,
    workspace,
    xqa_causal_mask,
)
from attnbench.backends.flashinfer_rules import Route
from attnbench.workload.inputs import AttentionInputs, torch_dtype
from attnbench.workload.spec import WorkloadSpec


def plan_decode(
    route: Route, spec: WorkloadSpec, inputs: AttentionInputs, knobs: dict[str, object]
) -> PlannedRun:
    """Build and plan a `BatchDecodeWithPagedKVCacheWrapper` for `route`."""
    import flashinfer

    use_graph = bool(knobs.get("use_cuda_graph", True))
    buffers: dict[str, torch.Tensor] = {}
    if use_graph:
        buffers = {
            "paged_kv_indptr_buffer": torch.empty_like(inputs.kv_indptr),
            "paged_kv_indices_buffer": torch.empty_like(inputs.kv_indices),
            "paged_kv_last_page_len_buffer": torch.empty_like(inputs.kv_last_page_len),
        }
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        workspace(inputs.device),
        spec.kv_layout,
        use_cuda_graph=use_graph,
        use_tensor_cores=route.use_tensor_cores,
        backend=route.backend,
        **buffers,
    )
    token_sf = token_head_scales(inputs)
    plan_kwargs = _decode_plan_kwargs(route, spec, knobs, token_head_sf=token_sf is not None)

    def replan() -> None:
        wrapper.plan(
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
    extra = _run_kwargs(spec, inputs, token_sf)
    q, kv_cache = inputs.q, inputs.kv_cache

    def run() -> torch.Tensor:
        result: torch.Tensor = wrapper.run(q, kv_cache, out=out, **extra)
        return result

    details = _decode_details(route, spec, wrapper, knobs)
    if token_sf is not None:
        details["kv_scales"] = "token-head"
    return PlannedRun(
        run=run,
        resolved=str(wrapper.resolved_backend),
        details=details,
        out=out,
        workspace_bytes=WORKSPACE_BYTES,
        plan_mode="cuda-graph" if use_graph else "eager",
        replan=replan,
    )


def _decode_details(
    route: Route, spec: WorkloadSpec, wrapper: Any, knobs: dict[str, object]
) -> dict[str, str | int | float | bool]:
    """The row's details: the API, the backend asked for and the kernel the planned wrapper
    resolved to, the library version, logits options and knobs."""
    import flashinfer

    kernel = "decode-cuda-core"
    if route.use_tensor_cores or wrapper.use_tensor_cores:
        kernel = "decode-tensor-core"
    if wrapper.resolved_backend in ("cudnn", "trtllm-gen", "xqa"):
        kernel = wrapper.resolved_backend
    details: dict[str, str | int | float | bool] = {
        "api": "BatchDecodeWithPagedKVCacheWrapper",
        "backend_requested": route.backend,
        "kernel": kernel,
        "use_tensor_cores": bool(wrapper.use_tensor_cores),
        "q_len_per_req": route.q_len_per_req,
        "flashinfer": str(flashinfer.__version__),
        **logits_kwargs(spec),
        **knob_details(route, knobs),
    }
    return details


def _decode_plan_kwargs(
    route: Route, spec: WorkloadSpec, knobs: dict[str, object], *, token_head_sf: bool
) -> dict[str, Any]:
    """The decode wrapper's `plan` keywords past the shape: dtypes, queries per request, logits
    options, window, token-head scales, and the split knobs the tensor-core planner takes."""
    plan_kwargs: dict[str, Any] = {
        "q_data_type": torch_dtype(spec.dtype),
        "kv_data_type": torch_dtype(spec.kv_dtype),
        "q_len_per_req": route.q_len_per_req,
        **logits_kwargs(spec),
    }
    if spec.window_left >= 0:
        plan_kwargs["window_left"] = spec.window_left
    if token_head_sf:
        plan_kwargs["use_token_head_sf"] = True
    if route.use_tensor_cores and route.backend == "fa2":
        # Only the tensor-core (fa2 prefill) planner takes these; the CUDA-core one
        # rejects fixed_split_size and ignores disable_split_kv.
        plan_kwargs["disable_split_kv"] = bool(knobs.get("disable_split_kv", False))
        plan_kwargs["fixed_split_size"] = knobs.get("fixed_split_size")
    return plan_kwargs


def _run_kwargs(
    spec: WorkloadSpec,
    inputs: AttentionInputs,
    token_sf: tuple[torch.Tensor, torch.Tensor] | None,
) -> dict[str, Any]:
    """The wrapper's `run` keywords: the fp8 scales (per tensor, or token-head scale factors)
    and the sinks."""
    extra: dict[str, Any] = {"k_scale": inputs.k_scale, "v_scale": inputs.v_scale}
    if not spec.is_fp8:
        extra = {}
    if token_sf is not None:
        extra = {"kv_cache_sf": token_sf}
    if inputs.sinks is not None:
        extra["sinks"] = sink_tensor(inputs)
    return extra


def token_head_scales(inputs: AttentionInputs) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The per-(token, KV head) K and V scales the inputs carry, if any (see the module
    docstring)."""
    k_sf, v_sf = inputs.extras.get("k_cache_sf"), inputs.extras.get("v_cache_sf")
    return (k_sf, v_sf) if k_sf is not None and v_sf is not None else None


def sink_tensor(inputs: AttentionInputs) -> torch.Tensor:
    """The case's sink logits as FlashInfer's XQA and trtllm-gen kernels take them: float32
    `[num_qo_heads]` (the bf16 values, exactly)."""
    assert inputs.sinks is not None
    return inputs.sinks.float().contiguous()


def xqa_kernel(spec: WorkloadSpec, sm: int, q_len: int) -> str:
    """Which XQA kernel runs (0.7.4 xqa.py): the SM90 fp8 GMMA one or the generic one."""
    if spec.kv_dtype != "fp8_e4m3" or sm // 10 != 9 or spec.head_dim > 256:
        return "mha"
    if q_len > 1 and q_len * spec.group_size <= 32:  # SWAP_AB specialisation
        return "mha"
    if q_len > 1 and (spec.sinks or spec.window_left >= 0):  # xqa.py: generic kernel then
        return "mha"
    return "mha_sm90"


def plan_xqa(
    route: Route,
    spec: WorkloadSpec,
    inputs: AttentionInputs,
    sm: int,
    knobs: Mapping[str, object] | None = None,
) -> PlannedRun:
    """Call `xqa_batch_decode_with_kv_cache` on a dense block table built here; knob
    `enable_pdl` (default on, as the library on SM90) sets programmatic dependent launch."""
    import flashinfer
    from flashinfer.decode import xqa_batch_decode_with_kv_cache

    q_len = route.q_len_per_req
    enable_pdl = bool((knobs or {}).get("enable_pdl", True))
    block_tables = dense_block_tables(inputs)
    max_seq_len = block_tables.shape[1] * spec.page_size
    mask = xqa_causal_mask(spec.batch_size, q_len, inputs.device) if q_len > 1 else None

    def replan() -> None:
        # XQA has no planner: the per-step host work is the dense page table.
        block_tables.copy_(dense_block_tables(inputs))

    ws = workspace(inputs.device, "xqa")
    out = output_buffer(spec, inputs)
    bmm1_scale = inputs.k_scale * spec.sm_scale
    bmm2_scale = inputs.v_scale
    q, kv_cache, seq_lens = inputs.q, inputs.kv_cache, inputs.kv_lens
    sinks = sink_tensor(inputs) if inputs.sinks is not None else None
    # xqa_batch_decode_with_kv_cache views q as [batch, q_len, heads, dim] for q_len > 1 and
    # unsqueezes `out` the same way: hand it the same 4-D view of the fixed output.
    out_arg = (
        out.view(spec.batch_size, q_len, spec.num_qo_heads, spec.head_dim) if q_len > 1 else out
    )

    def run() -> torch.Tensor:
        xqa_batch_decode_with_kv_cache(
            q,
            kv_cache,
            ws,
            block_tables,
            seq_lens,
            max_seq_len,
            bmm1_scale=bmm1_scale,
            bmm2_scale=bmm2_scale,
            window_left=spec.window_left,
            out=out_arg,
            sinks=sinks,
            kv_layout=spec.kv_layout,
            q_len_per_req=q_len,
            mask=mask,
            enable_pdl=enable_pdl,
        )
        return out

    kernel = xqa_kernel(spec, sm, q_len)
    return PlannedRun(
        run=run,
        resolved="xqa",
        details={
            "api": "xqa_batch_decode_with_kv_cache",
            "kernel": kernel,
            "q_len_per_req": q_len,
            "enable_pdl": enable_pdl,
            "flashinfer": str(flashinfer.__version__),
        },
        out=out,
        # The SM90 fp8 kernel multiplies in fp8 (q quantised inside, P in fp8).
        precision=spec.kv_dtype if kernel == "mha_sm90" else "",
        workspace_bytes=WORKSPACE_BYTES,
        replan=replan,
    )
