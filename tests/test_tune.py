"""`attnbench tune`: knob grids, successive halving on scripted latencies, rejected and failing
configurations, the time budget, the rows written, the CLI end to end on CPU (fake timer), and
the FA3 knob grid through the real plan routes against the torch emulation of FA3's API."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from typer.testing import CliRunner

import attnbench.run.tune as tune_mod
from attnbench.backends.base import PlannedRun, UnsupportedCase
from attnbench.backends.reference import reference_attention
from attnbench.cli import app
from attnbench.cli.tune import trials_path_for
from attnbench.measure.config import MeasureConfig
from attnbench.measure.hardware import DeviceInfo, detect
from attnbench.results import ResultRow, read_results
from attnbench.run.sweep import SweepContext, run_backend
from attnbench.run.tune import (
    Deadline,
    Knobs,
    TuneOptions,
    knob_grid,
    knob_key,
    knob_label,
    search,
    tune_case,
    tune_variant,
)
from attnbench.run.tune_search import share_s
from attnbench.workload.inputs import AttentionInputs
from attnbench.workload.spec import WorkloadSpec

runner = CliRunner()
BASE = MeasureConfig(timer="fake", warmup_ms=0.0, min_runs=3, max_runs=3)


def fake_row(
    status: str = "ok", latency: float | None = None, reason: str = "", **details: Any
) -> ResultRow:
    return ResultRow(
        run_id="t",
        case_id="c",
        backend="fake",
        status=status,  # type: ignore[arg-type]
        reason=reason,
        spec=small_spec().model_dump(mode="json"),
        latency_us=latency,
        details=details,
    )


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# -- grid ----------------------------------------------------------------------------------------


def test_grid_is_the_product_with_the_default_first() -> None:
    grid = knob_grid({"a": (1, 2, 3), "b": (None, True), "c": ("x",)})
    assert len(grid) == 6
    assert grid[0] == {"a": 1, "b": None, "c": "x"}
    assert len({knob_key(k) for k in grid}) == 6
    assert knob_grid({}) == [{}]
    assert knob_label({"a": 2, "b": None, "c": "x"}, grid[0]) == "a=2"
    assert knob_label(grid[0], grid[0]) == "default"


# -- search on scripted latencies ----------------------------------------------------------------


def scripted(latency: Mapping[str, float | str]) -> tuple[Any, list[tuple[Knobs, float]]]:
    """A trial whose result depends only on the knobs: a latency, or a failure status."""
    calls: list[tuple[Knobs, float]] = []

    def trial(knobs: Knobs, cfg: MeasureConfig) -> ResultRow:
        calls.append((dict(knobs), cfg.max_time_ms))
        value = latency[knob_key(knobs)]
        if value == "reject":
            return fake_row("error", reason="ValueError: knob combination not allowed")
        if value == "unsupported":
            return fake_row("unsupported", reason="library refused")
        if isinstance(value, str):
            return fake_row(value, reason="wrong")
        return fake_row("ok", value)

    return trial, calls


def test_small_grid_measures_every_config_once() -> None:
    grid = knob_grid({"a": (0, 1, 2, 3)})
    trial, calls = scripted({knob_key(k): 10.0 - k["a"] for k in grid})
    found = search(grid, trial, BASE, Deadline(None))
    assert found.method == "grid"
    assert [c[0]["a"] for c in calls] == [0, 1, 2, 3]
    assert found.winner == {"a": 3}
    assert not found.stopped


def test_successive_halving_keeps_the_best_half_and_doubles_the_budget() -> None:
    grid = knob_grid({"a": tuple(range(6)), "b": (0, 1)})  # 12 > GRID_LIMIT
    # a unique best config that is not the default; latencies distinct
    lat = {knob_key(k): 100.0 + 7 * ((7 * (2 * k["a"] + k["b"]) + 5) % 12) for k in grid}
    best = min(grid, key=lambda k: lat[knob_key(k)])
    assert best != grid[0]
    trial, calls = scripted(lat)
    rows: list[ResultRow] = []
    found = search(grid, trial, BASE, Deadline(None), rows.append, TuneOptions(stage0_ms=5.0))
    assert found.method == "halving"
    assert found.winner == best
    stages = [r.details["tune"]["stage"] for r in rows]
    assert [stages.count(s) for s in range(found.stages)] == [12, 6, 3, 2]
    # each stage re-measures exactly the fastest half of the one before
    stage1 = [r.details["knobs"] for r in rows if r.details["tune"]["stage"] == 1]
    fastest6 = sorted(grid, key=lambda k: lat[knob_key(k)])[:6]
    assert sorted(map(knob_key, stage1)) == sorted(map(knob_key, fastest6))
    budgets = sorted({ms for _, ms in calls})
    assert budgets == [5.0, 10.0, 20.0, 40.0]
    assert [r.details["tune"]["trial"] for r in rows] == list(range(len(rows)))


def test_rejected_and_failing_configs_are_skipped_and_counted() -> None:
    grid = knob_grid({"a": tuple(range(5))})
    lat: dict[str, float | str] = {
        knob_key({"a": 0}): 50.0,
        knob_key({"a": 1}): "reject",
        knob_key({"a": 2}): "unsupported",
        knob_key({"a": 3}): "mismatch",
        knob_key({"a": 4}): 40.0,
    }
    trial, _ = scripted(lat)
    rows: list[ResultRow] = []
    found = search(grid, trial, BASE, Deadline(None), rows.append)
    assert (found.rejected, found.failed) == (2, 1)
    assert found.winner == {"a": 4}
    assert [r.status for r in rows] == ["ok", "unsupported", "unsupported", "mismatch", "ok"]
    assert rows[1].reason.startswith("knobs rejected: ValueError")


def test_configs_differing_only_in_ignored_knobs_run_once() -> None:
    grid = knob_grid({"graph": (True, False), "split": (None, 64, 256)})
    calls: list[Knobs] = []

    def trial(knobs: Knobs, cfg: MeasureConfig) -> ResultRow:
        calls.append(knobs)
        return fake_row("ok", 10.0 if knobs["graph"] else 12.0, knobs_ignored="split")

    found = search(grid, trial, BASE, Deadline(None))
    assert [k["graph"] for k in calls] == [True, False]
    assert found.duplicates == 4
    assert found.winner == {"graph": True, "split": None}


def test_budget_stops_the_search_and_keeps_the_best_so_far() -> None:
    clock = Clock()
    grid = knob_grid({"a": tuple(range(20))})
    calls: list[Knobs] = []

    def trial(knobs: Knobs, cfg: MeasureConfig) -> ResultRow:
        calls.append(knobs)
        clock.now += 1.0
        return fake_row("ok", 100.0 - knobs["a"])

    found = search(grid, trial, BASE, Deadline(3.5, clock))
    assert found.stopped
    assert len(calls) == 4  # trials start at t=0,1,2,3; at t=4 the budget is spent
    assert found.winner == {"a": 3}
    # an exhausted budget still measures the default, so every pair gets a row
    calls.clear()
    found = search(grid, trial, BASE, Deadline(0.0, clock))
    assert [c["a"] for c in calls] == [0]
    assert found.stopped
    assert found.winner == {"a": 0}


# -- through the real sweep gate: a fake backend with knobs ----------------------------------------


class KnobbedBackend:
    """Runs the reference (so the accuracy gate passes) unless a knob says otherwise."""

    name = "knobbed"
    devices = ("cpu",)
    knobs: Mapping[str, tuple[object, ...]] = {
        "tile": (64, 32, 128, 256),
        "mode": ("a", "b", "wrong", "illegal"),
    }

    def available(self) -> str | None:
        return None

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> None:
        return None

    def plan(
        self, spec: WorkloadSpec, inputs: AttentionInputs, knobs: Mapping[str, object] | None = None
    ) -> PlannedRun:
        chosen = {k: v[0] for k, v in self.knobs.items()} | dict(knobs or {})
        if chosen["mode"] == "illegal":
            raise ValueError("mode=illegal is not allowed")
        if chosen["tile"] == 256 and chosen["mode"] == "b":
            raise UnsupportedCase("tile 256 needs mode a")
        ref = reference_attention(inputs).to(inputs.q.dtype)
        if chosen["mode"] == "wrong":
            ref = ref + 1.0
        return PlannedRun(
            run=lambda: ref, resolved="knobbed", details={"tile": int(str(chosen["tile"]))}
        )


def fake_latency(knobs: Mapping[str, Any]) -> float:
    """Fastest: tile=128, mode=b (not the default)."""
    return (
        100.0
        - (20.0 if knobs.get("tile") == 128 else 0.0)
        - (5.0 if knobs.get("mode") == "b" else 0.0)
    )


def small_spec(**kw: Any) -> WorkloadSpec:
    fields: dict[str, Any] = {
        "kind": "decode",
        "num_qo_heads": 4,
        "num_kv_heads": 2,
        "head_dim": 16,
        "page_size": 4,
        "dtype": "bfloat16",
        "kv_dtype": "bfloat16",
        "kv_lens": (9, 17),
        "qo_lens": (1, 1),
    } | kw
    return WorkloadSpec(**fields)


@pytest.fixture
def ctx() -> SweepContext:
    return SweepContext(run_id="tune-test", info=detect("cpu"), measure_cfg=BASE)


@pytest.fixture
def scripted_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trials run the real gate; their fake timer's samples come from the knobs."""

    def run(
        spec: Any, b: Any, inputs: Any, oracle: Any, c: SweepContext, knobs: Any = None
    ) -> ResultRow:
        cfg = replace(c.measure_cfg, fake_samples_us=(fake_latency(knobs or {}),))
        return run_backend(spec, b, inputs, oracle, replace(c, measure_cfg=cfg), knobs)

    monkeypatch.setattr(tune_mod, "run_backend", run)


@pytest.mark.usefixtures("scripted_timer")
def test_run_tune_writes_trials_and_a_tuned_row(ctx: SweepContext) -> None:
    trials: list[ResultRow] = []
    tuned: list[ResultRow] = []
    skipped: list[str] = []
    outcomes = tune_case(
        small_spec(),
        [KnobbedBackend()],
        ctx,
        Deadline(None),
        trials.append,
        tuned.append,
        skipped.append,
    )
    assert skipped == []
    assert len(outcomes) == 1
    found = outcomes[0].search
    assert found is not None
    assert found.configs == 16
    assert found.method == "halving"
    assert found.rejected == 4 + 1  # mode=illegal for every tile, (256, b) from the library
    assert found.failed == 4  # mode=wrong: the accuracy gate
    assert {r.status for r in trials if r.details["knobs"]["mode"] == "wrong"} == {"mismatch"}
    [row] = tuned
    assert row.backend == "knobbed+tuned"
    assert row.status == "ok"
    assert row.details["knobs"] == {"tile": 128, "mode": "b"}
    assert row.details["knobs_label"] == "tile=128,mode=b"
    assert row.latency_us == pytest.approx(75.0)
    assert row.details["default_latency_us"] == pytest.approx(100.0)
    assert row.details["speedup_vs_default"] == pytest.approx(100.0 / 75.0)
    assert row.details["tune"]["method"] == "halving"
    assert row.details["tile"] == 128  # the plan's own details are kept
    finals = [r for r in trials if r.details["tune"]["stage"] == "final"]
    assert [r.details["tune"]["role"] for r in finals] == ["winner", "default"]
    assert (
        trials[-1].backend == "knobbed"
    )  # the last row of the variant is its default, re-measured
    assert all(r.backend == "knobbed" for r in trials)


def test_winner_that_is_not_faster_on_remeasure_falls_back_to_default(ctx: SweepContext) -> None:
    spec = small_spec()
    measured: dict[str, list[float]] = {
        knob_key({"a": 0}): [10.0, 10.0],  # search, final
        knob_key({"a": 1}): [9.0, 11.0],  # lucky in the search, slower when re-measured
    }

    class B:
        name = "two"
        knobs: ClassVar[dict[str, tuple[object, ...]]] = {"a": (0, 1)}

    def trial(knobs: Knobs, cfg: MeasureConfig) -> ResultRow:
        return fake_row("ok", measured[knob_key(knobs)].pop(0))

    out = tune_variant(spec, B(), ctx, trial, Deadline(None), lambda r: None)  # type: ignore[arg-type]
    assert out.tuned.backend == "two+tuned"
    assert out.tuned.details["knobs"] == {"a": 0}
    assert out.tuned.details["speedup_vs_default"] == pytest.approx(1.0)
    assert out.tuned.details["tune"]["search_winner"] == {"a": 1}
    assert "not faster on re-measure" in out.tuned.reason


def test_no_passing_config_gives_a_failure_row(ctx: SweepContext) -> None:
    class B:
        name = "bad"
        knobs: ClassVar[dict[str, tuple[object, ...]]] = {"a": (0, 1)}

    def trial(knobs: Knobs, cfg: MeasureConfig) -> ResultRow:
        return fake_row("mismatch", reason="rel err 0.5")

    out = tune_variant(small_spec(), B(), ctx, trial, Deadline(None), lambda r: None)  # type: ignore[arg-type]
    assert out.tuned.backend == "bad+tuned"
    assert out.tuned.status == "mismatch"
    assert "no knob configuration passed" in out.tuned.reason


@pytest.mark.usefixtures("scripted_timer")
def test_budget_leaves_later_pairs_untouched(ctx: SweepContext) -> None:
    deadline = Deadline(0.0)
    tuned: list[ResultRow] = []
    skipped: list[str] = []
    for spec in (small_spec(), small_spec(kv_lens=(5, 30))):
        tune_case(
            spec, [KnobbedBackend()], ctx, deadline, lambda r: None, tuned.append, skipped.append
        )
    assert skipped == ["knobbed", "knobbed"]
    assert tuned == []


# -- the FA3 knob grid through its real plan routes (torch emulation of the FA3 API) ------------


@pytest.mark.slow
def test_fa3_grid_runs_through_every_route(
    ctx: SweepContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnbench.backends import flash_attn as fa
    from attnbench.run.tune import make_trial
    from test_flash_attn import fake_lib, make_spec

    monkeypatch.setattr(fa, "load_fa3", lambda: fake_lib())
    fa3 = next(b for b in fa.backends() if b.name == "flash-attn:fa3-contiguous")
    spec = make_spec("decode")
    from attnbench.workload.inputs import make_inputs

    inputs = make_inputs(spec, "cpu")
    trial = make_trial(spec, fa3, inputs, reference_attention(inputs), ctx)
    trials: list[ResultRow] = []
    out = tune_variant(spec, fa3, ctx, trial, Deadline(None), trials.append)
    assert out.search is not None
    assert out.search.configs == 72
    assert out.search.failed == 0, out.search.failures
    assert out.tuned.status == "ok"
    assert out.tuned.backend == "flash-attn:fa3-contiguous+tuned"
    assert set(out.tuned.details["knobs"]) == {
        "num_splits",
        "pack_gqa",
        "api",
        "scheduler_metadata",
    }


# -- CLI ------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("fake_timer")
@pytest.mark.slow
def test_cli_tunes_sdpa_math_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "tune.jsonl"
    args = ["tune", "--device", "cpu", "-b", "sdpa:math", "-b", "reference", "--batch-size", "2"]
    args += ["-l", "64;96", "--kv-dtype", "bfloat16", "--budget-s", "120"]
    res = runner.invoke(app, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    main = read_results(out)
    assert main.header is not None
    assert main.header.ceilings is not None
    assert [(r.backend, r.status) for r in main.rows] == [("sdpa:math+tuned", "ok")] * 2
    for r in main.rows:
        assert set(r.details["knobs"]) == {"ragged", "gqa"}
        assert r.details["speedup_vs_default"] == pytest.approx(1.0)  # fake timer: all tie
        assert r.bandwidth_frac_measured is not None
    trials = read_results(trials_path_for(out))
    assert trials.header is not None
    assert len(trials.rows) > 12
    assert {r.backend for r in trials.rows} == {"sdpa:math"}
    assert all("knobs" in r.details and "tune" in r.details for r in trials.rows)
    assert "sdpa:math+tuned" in res.output
    assert "no knobs to tune: reference" in res.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["type"] == "header"
    assert lines[0]["settings"]["tune"]["budget_s"] == 120


def test_cli_refuses_when_nothing_has_knobs(tmp_path: Path) -> None:
    res = runner.invoke(
        app, ["tune", "--device", "cpu", "-b", "reference", "--out", str(tmp_path / "x.jsonl")]
    )
    assert res.exit_code == 2
    assert "no knobs" in res.output


def test_deadline_sub_never_extends() -> None:
    clock = Clock()
    d = Deadline(10.0, clock)
    assert d.sub(100.0).left() == pytest.approx(10.0)
    assert d.sub(2.0).left() == pytest.approx(2.0)
    assert Deadline(None, clock).left() == math.inf
    assert torch is not None


def test_budget_shares_add_up_and_follow_the_grid_sizes() -> None:
    # one worker, jobs of weight 4, 12, 8 (one pair each), 100 s left, 1 s reserve per pair
    left, reserve = 100.0, 1.0
    weights = [4, 12, 8]
    shares = []
    for i, w in enumerate(weights):
        share = share_s(left, w, 1, sum(weights[i:]), len(weights) - i, reserve)
        shares.append(share)
        left -= share  # each job uses all of its share
    assert sum(shares) == pytest.approx(100.0)
    assert shares[0] == pytest.approx(97 * 4 / 24 + 1)
    assert shares[1] > shares[2] > shares[0]
    # two workers side by side: a job may take the whole budget, never more than is left
    assert share_s(10.0, 1, 1, 2, 2, 0.0, workers=2) == pytest.approx(10.0)
    assert share_s(10.0, 1, 1, 4, 4, 0.0, workers=2) == pytest.approx(5.0)
    assert share_s(0.0, 1, 1, 1, 1, 1.0) == 0.0
    assert share_s(math.inf, 1, 1, 2, 2, 1.0) == math.inf
