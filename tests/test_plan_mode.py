"""Every row records its plan mode (issue 32): FlashInfer's decode wrapper is planned for CUDA
graphs by default (`use_cuda_graph=True`), which changes its split; `show`, the run summary and
the report say so where the variants of a case were planned in different modes."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from attnbench.backends.base import PlannedRun, Unsupported
from attnbench.backends.reference import reference_attention
from attnbench.measure.config import MeasureConfig
from attnbench.measure.hardware import DeviceInfo, detect
from attnbench.report.blocks import Table, Text
from attnbench.report.fidelity_section import plan_modes
from attnbench.report.listing import listing_lines
from attnbench.report.summary import render_summary, summarize_rows
from attnbench.results import ResultRow, mixed_plan_modes, plan_mode, read_results
from attnbench.run.sweep import SweepContext, run_case
from attnbench.workload.inputs import AttentionInputs
from attnbench.workload.spec import WorkloadSpec
from test_model_studies import report_data

ROOT = Path(__file__).resolve().parent.parent
SPEC = WorkloadSpec(
    kind="decode", num_qo_heads=4, num_kv_heads=2, head_dim=16, kv_lens=(40, 24), qo_lens=(1, 1)
)


class Planned:
    """A right answer, planned in the given mode."""

    devices = ("cpu",)
    knobs: Mapping[str, tuple[object, ...]] = {}

    def __init__(self, name: str, mode: str) -> None:
        self.name, self.mode = name, mode

    def available(self) -> str | None:
        return None

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> Unsupported | None:
        return None

    def plan(
        self, spec: WorkloadSpec, inputs: AttentionInputs, knobs: Mapping[str, object] | None = None
    ) -> PlannedRun:
        good = reference_attention(inputs, accum_dtype=torch.float32).to(inputs.q.dtype)
        return PlannedRun(run=lambda: good, resolved="k", plan_mode=self.mode, graph_safe=False)


def _rows(*modes: str) -> list[ResultRow]:
    ctx = SweepContext(run_id="r", info=detect("cpu"), measure_cfg=MeasureConfig(timer="fake"))
    backends = [Planned(f"lib:{m}{i}", m) for i, m in enumerate(modes)]
    return run_case(SPEC, backends, ctx)  # type: ignore[arg-type]


def test_every_planned_row_records_its_plan_mode() -> None:
    rows = _rows("cuda-graph", "eager")
    assert [r.details.plan_mode for r in rows] == ["cuda-graph", "eager"]
    assert mixed_plan_modes(rows) == {SPEC.case_id}
    assert mixed_plan_modes(_rows("eager", "eager")) == set()


def test_rows_written_before_the_mode_was_recorded_are_read_with_the_mode_they_ran() -> None:
    rows = read_results(ROOT / "results" / "h200-default-fresh.jsonl.gz").rows
    fa2 = next(r for r in rows if r.backend == "flashinfer:fa2" and r.status == "ok")
    assert fa2.details.plan_mode is None  # not in the file ...
    assert plan_mode(fa2) == "cuda-graph"  # ... but its decode wrapper was planned for graphs
    cudnn = next(r for r in rows if r.backend == "sdpa:cudnn" and r.status == "ok")
    assert plan_mode(cudnn) == "eager"
    eager = fa2.model_copy(update={"details": {**fa2.details, "use_cuda_graph": False}})
    assert plan_mode(eager) == "eager"
    skipped = next(r for r in rows if r.status == "unsupported")
    assert plan_mode(skipped) == ""


def test_show_and_the_summary_name_the_mode_only_where_a_case_mixes_them() -> None:
    mixed = _rows("cuda-graph", "eager")
    text = "\n".join(str(line) for line in listing_lines(mixed, width=120))
    assert "lib:cuda-graph0 (graph plan)" in text
    assert "lib:eager1 (eager plan)" in text
    summary = " ".join(render_summary(summarize_rows(mixed), width=200))
    assert "plan)" in summary
    assert "graph plan" in summary or "eager plan" in summary
    same = _rows("eager", "eager")
    assert "plan)" not in "\n".join(str(line) for line in listing_lines(same, width=120))
    assert "plan)" not in " ".join(render_summary(summarize_rows(same), width=200))


def test_the_report_lists_the_plan_modes_of_mixed_cases() -> None:
    sec = plan_modes(report_data([ROOT / "results" / "h200-default-fresh.jsonl.gz"]))
    assert sec is not None
    text = " ".join(b.markdown for b in sec.blocks if isinstance(b, Text))
    assert "planned in different modes" in text
    table = next(b for b in sec.blocks if isinstance(b, Table))
    modes = {(row[0], row[1]) for row in table.rows}
    assert ("flashinfer:fa2", "cuda-graph") in modes
    assert ("sdpa:cudnn", "eager") in modes
