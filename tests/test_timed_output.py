"""What is timed is checked (issue 32): after timing, the output the last timed call left (a CUDA
graph's captured buffer after its replays) is compared with the reference again; a wrong one
makes the row a `mismatch` saying it was the timed output."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest
import torch

from attnbench.backends.base import PlannedRun, Unsupported
from attnbench.backends.reference import reference_attention
from attnbench.measure.config import MeasureConfig
from attnbench.measure.engine import measure
from attnbench.measure.hardware import DeviceInfo, detect
from attnbench.results import ResultRow
from attnbench.run.sweep import SweepContext, run_case
from attnbench.workload.inputs import AttentionInputs
from attnbench.workload.spec import WorkloadSpec

SPEC = WorkloadSpec(
    kind="decode", num_qo_heads=4, num_kv_heads=2, head_dim=16, kv_lens=(40, 24), qo_lens=(1, 1)
)
Behaviour = Callable[[int, torch.Tensor, torch.Tensor], None]
"""(call number, the right answer, the output buffer) -> writes (or not) the buffer."""


class Scripted:
    """A variant whose n-th call writes what `behaviour` says into its fixed output buffer."""

    devices = ("cpu", "cuda")
    knobs: Mapping[str, tuple[object, ...]] = {}

    def __init__(self, name: str, behaviour: Behaviour, graph_safe: bool = False) -> None:
        self.name = f"scripted:{name}"
        self.behaviour = behaviour
        self.graph_safe = graph_safe

    def available(self) -> str | None:
        return None

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> Unsupported | None:
        return None

    def plan(
        self, spec: WorkloadSpec, inputs: AttentionInputs, knobs: Mapping[str, object] | None = None
    ) -> PlannedRun:
        good = reference_attention(inputs, accum_dtype=torch.float32).to(inputs.q.dtype)
        out = torch.empty_like(good)
        calls = [0]

        def run() -> torch.Tensor:
            self.behaviour(calls[0], good, out)
            calls[0] += 1
            return out

        return PlannedRun(run=run, resolved="scripted", out=out, graph_safe=self.graph_safe)


def right(n: int, good: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(good)


def wrong_after_the_gate(n: int, good: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(good if n == 0 else good * 1.5)


def writes_only_once(n: int, good: torch.Tensor, out: torch.Tensor) -> None:
    if n == 0:
        out.copy_(good)


def _run(backend: Scripted, device: str = "cpu", timer: str = "cpu") -> ResultRow:
    cfg = MeasureConfig(timer=timer, warmup_ms=0.0, min_runs=3, max_runs=3)  # type: ignore[arg-type]
    ctx = SweepContext(run_id="r", info=detect(device), measure_cfg=cfg)
    (row,) = run_case(SPEC, [backend], ctx)  # type: ignore[list-item]
    return row


def test_a_right_timed_output_is_ok_and_its_error_is_recorded() -> None:
    row = _run(Scripted("right", right))
    assert row.status == "ok", row.reason
    assert row.accuracy is not None
    assert row.accuracy.timed_rel_l2_err == pytest.approx(row.accuracy.rel_l2_err)


def test_a_kernel_right_for_the_gate_but_wrong_when_timed_is_a_mismatch() -> None:
    row = _run(Scripted("drift", wrong_after_the_gate))
    assert row.status == "mismatch"
    assert row.reason.startswith("the timed output (cpu, after 3 timed calls): rel_l2_err")
    assert row.latency_us is None  # a wrong answer is never a fast one
    assert row.accuracy is not None
    assert row.accuracy.model_extra == {"timed_output": True}


def test_timed_calls_that_write_nothing_leave_the_poison_and_fail() -> None:
    """The gate's right answer stays in the buffer unless the buffer is poisoned before the
    timed calls: they wrote nothing, so the check sees NaN."""
    row = _run(Scripted("silent", writes_only_once))
    assert row.status == "mismatch"
    assert "the timed output" in row.reason
    assert "NaN/Inf" in row.reason


def test_the_fake_timer_keeps_no_output_and_checks_nothing_more() -> None:
    row = _run(Scripted("drift", wrong_after_the_gate), timer="fake")
    assert row.status == "ok"
    assert row.accuracy is not None
    assert row.accuracy.timed_rel_l2_err is None


def test_measure_keeps_the_last_output_and_poisons_after_prepare() -> None:
    out = torch.zeros(3)
    seen: list[bool] = []

    def fn() -> torch.Tensor:
        seen.append(bool(torch.isnan(out).all()))
        return out.fill_(float(len(seen)))

    cfg = MeasureConfig(timer="cpu", warmup_ms=0.0, min_runs=4, max_runs=4)
    m = measure(fn, cfg, device=torch.device("cpu"), poison=[out])
    assert seen[0]  # the first call after prepare found the poison
    assert m.output is out
    assert float(out[0]) == len(seen)


@pytest.mark.gpu
def test_cuda_graph_replays_are_what_is_checked() -> None:
    """Under CUDA graphs the capture records the second call's work: a runner right on its
    eager calls (the gate, the capture's warm-up) but wrong in the captured one fails; one
    whose captured call launches nothing leaves the poisoned buffer."""
    ok = _run(Scripted("right", right, graph_safe=True), device="cuda:0", timer="cuda-graph")
    assert ok.status == "ok", ok.reason
    assert ok.measurement is not None
    assert ok.measurement.timer == "cuda-graph"

    def wrong_when_captured(n: int, good: torch.Tensor, out: torch.Tensor) -> None:
        out.copy_(good if n < 2 else good * 1.5)  # call 0: gate, 1: warm-up, 2: capture

    row = _run(Scripted("capture", wrong_when_captured, True), device="cuda:0", timer="cuda-graph")
    assert row.status == "mismatch"
    assert row.reason.startswith("the timed output (cuda-graph, after 3 timed calls)")

    def nothing_when_captured(n: int, good: torch.Tensor, out: torch.Tensor) -> None:
        if n < 2:
            out.copy_(good)

    row = _run(Scripted("empty", nothing_when_captured, True), device="cuda:0", timer="cuda-graph")
    assert row.status == "mismatch"
    assert "NaN/Inf" in row.reason
