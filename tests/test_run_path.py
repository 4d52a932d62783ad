"""`run` and `tune` share one run path: tune through the worker pool (trials streamed back,
a worker killed mid-search), explicit flags over a suite's values, and the progress line (what
runs now, first-use compiles)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

import pool_workers
from attnbench.cli import app
from attnbench.cli.session import trials_path_for
from attnbench.measure.config import MeasureConfig
from attnbench.measure.hardware import detect
from attnbench.results import ResultRow, read_results
from attnbench.run.pool import PoolEvents, WorkerPool
from attnbench.run.progress import COMPILE_NOTE_S, Activity, Board
from attnbench.run.worker import Job, TuneJob, WorkerSlot

runner = CliRunner()
TINY = ["--device", "cpu", "--batch-size", "2", "--kv-dtype", "bfloat16"]


pytestmark = pytest.mark.usefixtures("isolated", "fake_timer")


def _run_bounded(pool: WorkerPool, jobs: list[Job], limit_s: float) -> None:
    t = threading.Thread(target=pool.run, args=(jobs,), daemon=True)
    t.start()
    t.join(limit_s)
    if t.is_alive():
        for w in list(pool.workers.values()):
            w.proc.kill()
        pytest.fail(f"the pool did not finish within {limit_s:g} s")


@pytest.mark.slow
def test_tune_runs_through_the_worker_pool(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    args = ["tune", *TINY, "-b", "sdpa:math", "-l", "64;96", "--workers", "2"]
    res = runner.invoke(app, [*args, "--budget-s", "120", "--out", str(out)])
    assert res.exit_code == 0, res.output
    main = read_results(out)
    assert main.header is not None
    assert main.header.model_extra is not None
    assert len(main.header.model_extra["workers"]) == 2  # the pool's header: every worker
    assert main.header.settings["tune"]["budget_s"] == 120
    assert sorted((r.backend, r.status) for r in main.rows) == [("sdpa:math+tuned", "ok")] * 2
    assert {r.details.get("worker") for r in main.rows} <= {0, 1}
    assert all(set(r.details.get("knobs")) == {"ragged", "gqa"} for r in main.rows)
    trials = read_results(trials_path_for(out))
    assert trials.header is not None
    assert len(trials.rows) > 12
    assert all(r.backend == "sdpa:math" and "tune" in r.details for r in trials.rows)
    # each trial plans; the first plan of the shape family in each worker is marked
    assert any(r.details.get("first_use") for r in trials.rows)
    assert all(r.details.get("first_plan_s") is not None for r in trials.rows if r.status == "ok")


def test_a_worker_killed_during_tune_gives_error_rows_and_the_run_finishes() -> None:
    rows: list[ResultRow] = []
    trials: list[ResultRow] = []
    activity: list[Activity] = []
    handed: list[Job] = []

    def prepare(job: Job, pending: object) -> Job:
        handed.append(job)
        return job

    events = PoolEvents(on_row=rows.append, on_trial=trials.append, on_activity=activity.append)
    pool = WorkerPool(
        [WorkerSlot(0, None)],
        "r",
        MeasureConfig(timer="fake"),
        events,
        prepare=prepare,
        target=pool_workers.dies_mid_tune,
    )
    tune = TuneJob(grid_limit=8, stage0_ms=5.0, budget_s=30.0)
    jobs = [Job(0, pool_workers.spec(0), ("a", "b"), case_id="case0", kind=tune)]
    _run_bounded(pool, jobs, limit_s=60)
    by_name = {r.backend: r for r in rows}
    assert sorted(by_name) == ["a+tuned", "b+tuned"]  # the watchdog's row has the tuned name
    assert by_name["a+tuned"].status == "error"
    assert "died twice" in by_name["a+tuned"].reason
    assert by_name["b+tuned"].status == "ok"
    assert by_name["b+tuned"].details.get("budget_s") == 30.0
    assert [t.backend for t in trials] == ["a", "a", "b"]  # trials before each death are kept
    assert [j.backends for j in handed] == [("a", "b"), ("a", "b"), ("b",)]
    phases = [(a.backend, a.phase) for a in activity]
    assert ("a", "idle") in phases  # the dead worker's variant is no longer shown as running
    assert phases[-3:] == [("b", "plan"), ("b", "run"), ("b", "idle")]
    ran = [a for a in activity if a.phase == "run"]
    assert all(a.first_use and a.plan_s == 3.0 and a.case_id == "case0" for a in ran)


SUITE = """name = "s"
[defaults]
batch_size = 4
num_heads = 4
num_kv_heads = 2
head_dim = 16
page_size = 16
kv_dtype = "bfloat16"
[[group]]
kinds = ["decode"]
lengths = ["16"]
page_size = 4
"""


@pytest.mark.slow
def test_flags_win_over_the_suite(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(SUITE)
    base = ["run", "--suite", "s.toml", "-b", "reference", "--device", "cpu"]
    plain = tmp_path / "plain.jsonl"
    assert runner.invoke(app, [*base, "--out", str(plain)]).exit_code == 0
    [row] = read_results(plain).rows
    assert "/bs4/" in row.case_id
    assert "/p4/" in row.case_id
    flagged = tmp_path / "flagged.jsonl"
    res = runner.invoke(
        app, [*base, "--batch-size", "2", "--page-size", "8", "-l", "32", "--out", str(flagged)]
    )
    assert res.exit_code == 0, res.output
    [row] = read_results(flagged).rows
    assert "/bs2/" in row.case_id
    assert "/p8/" in row.case_id
    assert "ctx32" in row.case_id
    assert "/h4-2-d16/" in row.case_id  # what no flag names stays the suite's
    assert "suite" in runner.invoke(app, ["run", "--help"]).output


def test_the_progress_line_names_what_runs_now() -> None:
    board = Board()
    assert board.line(0.0) == ""
    board.update(Activity(0, "decode/ctx64", "flashinfer:tc", "plan", 10.0, first_use=True))
    line = board.line(52.0)
    assert line.startswith("decode/ctx64 flashinfer:tc: plan, first use")
    assert line.endswith("42 s")
    note = board.update(
        Activity(0, "decode/ctx64", "flashinfer:tc", "run", 95.0, True, plan_s=85.0)
    )
    assert note is not None
    assert "85.0 s" in note
    assert "first use" in note
    assert board.line(96.0) == "decode/ctx64 flashinfer:tc: run 1 s"
    quick = Activity(0, "decode/ctx64", "sdpa", "run", 96.0, True, plan_s=COMPILE_NOTE_S / 2)
    assert board.update(quick) is None  # a quick first plan is not called a compile
    board.update(Activity(1, "prefill/ctx4k", "flex", "plan", 90.0))
    assert board.line(200.0) == "prefill/ctx4k flex: plan 1 min 50 s (+1 more)"
    board.update(Activity(1, "prefill/ctx4k", "flex", "idle", 201.0))
    board.update(Activity(0, "decode/ctx64", "sdpa", "idle", 201.0))
    assert board.line(202.0) == ""
    long_case = "decode/" + "x" * 200
    board.update(Activity(0, long_case, "sdpa", "run", 0.0))
    assert len(board.line(1.0, width=60)) <= 60


def test_first_plan_of_a_shape_family_is_marked_in_process() -> None:
    from attnbench.backends import select_backends
    from attnbench.run.sweep import SweepContext, run_case
    from attnbench.workload.spec import WorkloadSpec

    events: list[tuple[str, str, object]] = []
    ctx = SweepContext(
        run_id="r",
        info=detect("cpu"),
        measure_cfg=MeasureConfig(timer="fake"),
        on_start=lambda name, first: events.append(("start", name, first)),
        on_planned=lambda name, plan_s: events.append(("planned", name, plan_s >= 0)),
    )
    shape = {"kind": "decode", "num_qo_heads": 4, "num_kv_heads": 2, "head_dim": 16}
    rows = []
    for n in (16, 32):
        spec = WorkloadSpec(**shape, kv_lens=(n,), qo_lens=(1,))
        rows += run_case(spec, select_backends(["reference"]), ctx)
    assert events == [
        ("start", "reference", True),
        ("planned", "reference", True),
        ("start", "reference", False),
        ("planned", "reference", True),
    ]
    assert [r.details.get("first_use") for r in rows] == [True, None]
    assert all(r.details.get("first_plan_s") >= 0 for r in rows)


def test_all_on_a_gpu_leaves_out_the_oracle_math_and_engine_variants() -> None:
    """On a GPU `all` times each kernel once: the engine variants (vllm:*, sglang:*), which run
    the raw variants' kernels with the engines' arguments, are asked for by name."""
    from attnbench.backends import all_backends
    from attnbench.run.policy import backends_for, runnable_here

    kept, notes = runnable_here(all_backends(), "cuda")
    names = {b.name for b in kept}
    assert "flash-attn:fa3" in names
    assert not {n for n in names if n.split(":")[0] in ("vllm", "sglang")}
    assert "reference" not in names
    assert "vllm" in notes[-1]
    named, _ = backends_for(["vllm"], "cuda")
    assert {b.name for b in named} >= {"vllm:flashinfer", "vllm:flash-attn"}
