"""The accuracy gate: a backend's output against the fp64 reference, with a data-derived budget.

Budget (after attention-gym's low-precision-reference idea): a correct kernel that computes in
fp32 and writes its output in dtype D cannot be more accurate than the reference rounded to D,
and should not be much less. So the budget is

    rel_l2_budget = BUDGET_FACTOR * rel_l2(round_D(ref), ref)

where D is the lowest precision on the kernel's output path (the output dtype, or fp8 when the
kernel multiplies P in fp8, as FA3's fp8 path does). Rounding to fp8 is done after scaling the
tensor to the format's range, so the budget does not depend on the output's magnitude.
Any NaN or Inf fails the gate outright.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from attnbench.workload.inputs import torch_dtype
from attnbench.workload.quant import FP8_MAX

BUDGET_FACTOR = 4.0
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
    timed_rel_l2_err: float | None = None
    """The same error of the output the timed calls left (`run.sweep.check_timed_output`)."""

    @property
    def reason(self) -> str:
        if self.nonfinite:
            return f"output has {self.nonfinite} NaN/Inf values"
        if not self.passed:
            return (
                f"rel_l2_err {self.rel_l2_err:.2e} exceeds budget {self.budget:.2e} "
                f"({BUDGET_FACTOR:g}x the {self.precision} rounding of the reference)"
            )
        return ""

    def as_dict(self) -> dict[str, float | int | bool | str | None]:
        d = asdict(self)
        if self.timed_rel_l2_err is None:
            del d["timed_rel_l2_err"]
        return d


def rel_l2(a: torch.Tensor, ref: torch.Tensor) -> float:
    denom = float(torch.linalg.vector_norm(ref))
    num = float(torch.linalg.vector_norm(a - ref))
    return num / denom if denom > 0 else num


def round_to(ref: torch.Tensor, precision: str) -> torch.Tensor:
    """`ref` rounded to `precision` and back (fp8 after scaling amax to the format's max)."""
    dtype = torch_dtype(precision)
    if dtype in FP8_MAX:
        amax = float(ref.abs().amax())
        scale = amax / FP8_MAX[dtype] if amax > 0 else 1.0
        return (ref / scale).to(dtype).to(ref.dtype) * scale
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
    budget = BUDGET_FACTOR * rel_l2(round_to(ref, precision), ref) + ABS_FLOOR
    return Accuracy(max_abs, err, cos, budget, 0, err <= budget, precision)
