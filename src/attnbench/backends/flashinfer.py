"""FlashInfer (flashinfer-python 0.7.4): one backend variant per kernel family it offers.

    flashinfer:fa2         decode: CUDA-core decode kernel; prefill/append/tree: fa2 paged prefill
    flashinfer:tc          decode wrapper on tensor cores (q_len_per_req > 1 for MTP / chains)
    flashinfer:fa3         fa3 (SM90) paged prefill kernel for decode/prefill/append/shared prefix
    flashinfer:cudnn       decode wrapper, backend="cudnn" (fp16/bf16 only)
    flashinfer:auto        the library's defaults; the row records what `auto` resolved to
    flashinfer:xqa         TensorRT-LLM XQA decode (what trtllm_batch_decode runs on SM90)
    flashinfer:trtllm-gen  decode wrapper, backend="trtllm-gen" (SM100/SM103 only)
    flashinfer:ragged-fa2  prefill over contiguous K/V (gathered from the pages in plan), fa2
    flashinfer:ragged-fa3  the same with fa3
    flashinfer:cascade     shared prefix: MultiLevelCascadeAttentionWrapper, 2 levels

Which variant serves which case, and why not, is in `flashinfer_rules` (pure, tested on CPU),
the library's known bugs, refused in `check`, in `flashinfer_bugs`; the calls are in
`flashinfer_decode` and `flashinfer_prefill`. `flashinfer` itself is imported
only inside `available()` and `plan()`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from attnbench.backends.base import PlannedRun, Unsupported, UnsupportedCase
from attnbench.backends.flashinfer_bugs import bug_refusal
from attnbench.backends.flashinfer_rules import INSTALL_HINT, VARIANTS, Route, resolve_knobs, route
from attnbench.measure.hardware import DeviceInfo
from attnbench.workload.inputs import AttentionInputs
from attnbench.workload.spec import WorkloadSpec

__all__ = ["FlashInferBackend", "backends"]


class FlashInferBackend:
    """One FlashInfer variant, `flashinfer:<short>` (see the module docstring)."""

    devices: tuple[str, ...] = ("cuda",)

    def __init__(self, short: str) -> None:
        summary, knobs = VARIANTS[short]
        self.short = short
        self.name = f"flashinfer:{short}"
        self.summary = summary
        self.knobs: Mapping[str, tuple[object, ...]] = knobs

    def __repr__(self) -> str:
        return f"FlashInferBackend({self.short!r})"

    def available(self) -> str | None:
        """None if flashinfer imports here, else why not, with the install hint."""
        why = _import_error()
        if why is not None:
            return why
        import flashinfer

        if self.short == "xqa" and not hasattr(flashinfer.decode, "xqa_batch_decode_with_kv_cache"):
            return (
                f"flashinfer {flashinfer.__version__} has no "
                f"decode.xqa_batch_decode_with_kv_cache; {INSTALL_HINT}>=0.7.4"
            )
        return None

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> Unsupported | None:
        found = route(self.short, spec, device)
        if isinstance(found, Unsupported):
            return found
        if (bug := bug_refusal(self.short, found, spec)) is not None:  # flashinfer_bugs
            return bug
        if found.backend == "cudnn" and not _has_cudnn_frontend():
            return Unsupported(
                "FlashInfer's cuDNN decode needs nvidia-cudnn-frontend (without it FlashInfer "
                "loads prebuilt bf16 cubins that it must download; on the H200 that failed with "
                "'Failed to load cubin for decode'); pip install nvidia-cudnn-frontend"
            )
        return None

    def plan(
        self,
        spec: WorkloadSpec,
        inputs: AttentionInputs,
        knobs: Mapping[str, object] | None = None,
    ) -> PlannedRun:
        """Build the wrapper for this case's route, plan it, and return the zero-argument run."""
        from attnbench.measure.hardware import detect

        values = resolve_knobs(self.knobs, knobs)
        info = detect(str(inputs.device))
        found = route(self.short, spec, info)
        if isinstance(found, Unsupported):
            raise UnsupportedCase(f"{self.name} cannot run this case: {found.reason}")
        return _plan_route(found, spec, inputs, values, info.sm)


def _plan_route(
    found: Route, spec: WorkloadSpec, inputs: AttentionInputs, knobs: dict[str, object], sm: int
) -> PlannedRun:
    from attnbench.backends import flashinfer_decode, flashinfer_prefill

    if found.api == "decode":
        return flashinfer_decode.plan_decode(found, spec, inputs, knobs)
    if found.api == "xqa":
        return flashinfer_decode.plan_xqa(found, spec, inputs, sm, knobs)
    if found.api == "paged":
        return flashinfer_prefill.plan_paged(found, spec, inputs, knobs)
    if found.api == "ragged":
        return flashinfer_prefill.plan_ragged(found, spec, inputs, knobs)
    return flashinfer_prefill.plan_cascade(found, spec, inputs)


@functools.cache
def _import_error() -> str | None:
    """Why `import flashinfer` fails here (None if it works); tried once per process."""
    try:
        import flashinfer  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install failing on import
        why = " ".join(str(exc).split())[:240]
        return f"flashinfer not importable ({type(exc).__name__}: {why}); {INSTALL_HINT}"
    return None


@functools.cache
def _has_cudnn_frontend() -> bool:
    """FlashInfer's own answer (`flashinfer.cudnn.decode.CUDNN_AVAILABLE`, i.e. whether
    `import cudnn` works), not whether some `cudnn` module can be found: on the H200 a findable
    but unimportable `cudnn` sent FlashInfer down its cubin fallback all the same."""
    try:
        from flashinfer.cudnn import decode
    except Exception:  # no flashinfer, or a build without the cuDNN module
        return False
    return bool(getattr(decode, "CUDNN_AVAILABLE", False))


def backends() -> list[FlashInferBackend]:
    """Every FlashInfer variant, in a stable order."""
    return [FlashInferBackend(short) for short in VARIANTS]
