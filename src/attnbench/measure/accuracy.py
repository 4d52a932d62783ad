"""The accuracy gate: a backend's output against the fp64 reference, with a data-derived budget.

Budget (after attention-gym's low-precision-reference idea): a correct kernel that computes in
fp32 and writes its output in dtype D cannot be more accurate than the reference rounded to D,
and should not be much less. So the budget is

    format_rel_l2_err = rel_l2(round_D(ref), ref)          (measured on this case's reference)
    rel_l2_budget     = factor(D) * format_rel_l2_err

where D is the lowest precision on the kernel's output path (the output dtype, or fp8 when the
kernel multiplies P in fp8, as FA3's fp8 path does). Rounding to fp8 follows the case's scheme:
one per-tensor scale mapping the tensor's largest magnitude onto the format's largest value
(`workload.quant.per_tensor_scale`, as `make_inputs` scales the fp8 cache and FA3 and FlashInfer
scale q), so the budget does not depend on the output's magnitude.

factor is BUDGET_FACTOR (4) for 16 bits, whose rounding error is small beside fp32's
accumulation differences, and FP8_BUDGET_FACTOR (1.75) for fp8, whose own error dominates: a
kernel twice as far from the reference as the format's rounding fails. On the committed H200
rows the fp8 kernels sit at 0.6-1.46x the format's error (FA3 0.6-0.9x, XQA, which also
quantises q inside the kernel, 1.2-1.46x). Any NaN or Inf fails the gate outright.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from attnbench.workload.inputs import torch_dtype
from attnbench.workload.quant import FP8_MAX, dequantize, per_tensor_scale, quantize

BUDGET_FACTOR = 4.0
FP8_BUDGET_FACTOR = 1.75
ABS_FLOOR = 1e-6


@dataclass(frozen=True)
class Accuracy:
    max_abs_err: float
    rel_l2_err: float
    """||out - ref|| / ||ref|| over the whole output."""
    cosine: float
    budget: float
    nonfinite: int
    passed: bool
    precision: str
    format_rel_l2_err: float | None = None
    """The reference rounded to `precision` (the case's format and scheme) against itself."""
    timed_rel_l2_err: float | None = None
    """The same error of the output the timed calls left (`run.gate.check_timed_output`)."""

    @property
    def reason(self) -> str:
        if self.nonfinite:
            return f"output has {self.nonfinite} NaN/Inf values"
        if not self.passed:
            return (
                f"rel_l2_err {self.rel_l2_err:.2e} exceeds budget {self.budget:.2e} "
                f"({budget_factor(self.precision):g}x the {self.precision} rounding of the "
                "reference)"
            )
        return ""

    def as_dict(self) -> dict[str, float | int | bool | str | None]:
        """The record as rows store it (the optional errors only where measured)."""
        d = asdict(self)
        for key in ("format_rel_l2_err", "timed_rel_l2_err"):
            if d[key] is None:
                del d[key]
        return d


def rel_l2(a: torch.Tensor, ref: torch.Tensor) -> float:
    denom = float(torch.linalg.vector_norm(ref))
    num = float(torch.linalg.vector_norm(a - ref))
    return num / denom if denom > 0 else num


def budget_factor(precision: str) -> float:
    """How many times the format's own rounding error a kernel may be off (module docstring)."""
    return FP8_BUDGET_FACTOR if torch_dtype(precision) in FP8_MAX else BUDGET_FACTOR


def round_to(ref: torch.Tensor, precision: str) -> torch.Tensor:
    """`ref` rounded to `precision` and back; fp8 with one per-tensor scale (the case's scheme:
    the tensor's largest magnitude onto the format's largest value)."""
    dtype = torch_dtype(precision)
    if dtype in FP8_MAX:
        scale = per_tensor_scale(ref, dtype)
        return dequantize(quantize(ref, scale, dtype), scale, ref.dtype)
    return ref.to(dtype).to(ref.dtype)


def check_accuracy(out: torch.Tensor, ref: torch.Tensor, precision: str) -> Accuracy:
    """Compare `out` (any dtype, same shape as `ref`) to the high-precision `ref`."""
    if out.shape != ref.shape:
        raise ValueError(f"output shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    o = out.to(device=ref.device, dtype=ref.dtype)
    finite = torch.isfinite(o)
    nonfinite = int((~finite).sum())
    if nonfinite:
        return Accuracy(float("nan"), float("nan"), float("nan"), 0.0, nonfinite, False, precision)
    diff = o - ref
    max_abs = float(diff.abs().amax()) if diff.numel() else 0.0
    err = rel_l2(o, ref)
    cos = float(torch.nn.functional.cosine_similarity(o.flatten(), ref.flatten(), dim=0, eps=1e-30))
    fmt = rel_l2(round_to(ref, precision), ref)
    budget = budget_factor(precision) * fmt + ABS_FLOOR
    return Accuracy(max_abs, err, cos, budget, 0, err <= budget, precision, fmt)
