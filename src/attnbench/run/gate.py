"""What makes a timing worth keeping: the accuracy gate before timing, and the same check on the
output the timed calls left after it (a CUDA graph's captured buffer after its replays), so what
was timed is what was checked. Both judge against the same fp64 reference and budget
(`measure.accuracy`)."""

from __future__ import annotations

import torch

from attnbench.backends.base import PlannedRun
from attnbench.backends.reference import reference_attention
from attnbench.measure.accuracy import Accuracy, check_accuracy
from attnbench.measure.engine import Measurement
from attnbench.workload.inputs import AttentionInputs
from attnbench.workload.spec import WorkloadSpec


def gate(
    planned: PlannedRun, inputs: AttentionInputs, oracle: torch.Tensor, spec: WorkloadSpec
) -> tuple[Accuracy, torch.Tensor]:
    """The accuracy gate: one call into a NaN-poisoned output against the fp64 reference (on
    the query the kernel really saw, `q_effective`). Returns the verdict and that reference,
    which the timed output is checked against again after timing."""
    if planned.out is not None:
        planned.out.fill_(float("nan"))
    out = planned.run()
    if inputs.device.type == "cuda":
        torch.cuda.synchronize(inputs.device)
    ref = oracle
    if planned.q_effective is not None:
        ref = reference_attention(inputs, q=planned.q_effective)
    return check_accuracy(planned.unpack(out), ref, planned.precision or spec.dtype), ref


def check_timed_output(
    planned: PlannedRun, m: Measurement, ref: torch.Tensor, precision: str
) -> Accuracy | None:
    """What was timed, checked: the output the last timed call left (a CUDA graph's captured
    buffer after its replays, which `measure` poisoned before warm-up) against the same
    reference and budget as the gate. None where the timer kept no output (the fake timer)."""
    if not isinstance(m.output, torch.Tensor):
        return None
    if m.output.device.type == "cuda":
        torch.cuda.synchronize(m.output.device)
    return check_accuracy(planned.unpack(m.output), ref, precision)
