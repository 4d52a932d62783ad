"""`--live`: sampling replayed steps, turning them into sweep cases, comparing with the model.

The loop runs on CPU with the `reference` backend and the fake timer; the real measurement is
the GPU test at the end (`pytest -m gpu` on the H200).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import replay_rows as rr
from attnbench.replay.costmodel import ShapeKey, fit_models
from attnbench.replay.deployment import Deployment
from attnbench.replay.gemm import GemmRoofline
from attnbench.replay.live import live_report, measure_samples, predict, sample_steps, step_spec
from attnbench.replay.simulator import SchedulerConfig, SimResult, simulate
from attnbench.replay.stepcost import ReplayCost
from attnbench.replay.traffic import ReplayRequest

KEY = ShapeKey(8, 1, 128, "bfloat16", "bfloat16", 16)
DEP = Deployment()


def _reference_models() -> dict:
    rows = [r.model_copy(update={"backend": "reference"}) for r in rr.rows(("flashinfer:fa2",))]
    models, _ = fit_models(rows, KEY)
    return models


def _small_sim(models: dict) -> SimResult:
    rng = np.random.default_rng(1)
    reqs = [
        ReplayRequest(0.01 * i, int(rng.integers(20, 300)), int(rng.integers(2, 12)))
        for i in range(12)
    ]
    m = models["reference"]
    cost = ReplayCost("reference", m, m, GemmRoofline(DEP, 4000.0, 700.0), DEP.num_layers)
    return simulate(reqs, SchedulerConfig(kv_pages=10_000, token_budget=256), cost)


def test_samples_spread_over_the_replay() -> None:
    sim = _small_sim(_reference_models())
    steps = sample_steps(sim, 4)
    assert len(steps) == 4
    assert steps == sorted(set(steps))
    totals = sim.features.kv_total[steps]
    assert (sim.features.n_decode[steps] > 0).all()
    assert totals.min() == sim.features.kv_total[sim.features.n_decode > 0].min()
    assert totals.max() == sim.features.kv_total.max()
    pre = sample_steps(sim, 3, part="prefill")
    assert (sim.features.n_prefill[pre] > 0).all()
    assert sample_steps(sim, 0) == []


def test_step_spec_is_the_exact_batch() -> None:
    sim = _small_sim(_reference_models())
    step = sample_steps(sim, 1)[0]
    spec = step_spec(sim, step, DEP)
    b = sim.batch(step)
    assert spec.kind == "decode"
    assert spec.kv_lens == tuple(b.decode_kv_lens.tolist())
    assert (spec.num_qo_heads, spec.num_kv_heads, spec.num_layers) == (8, 1, 80)
    pstep = sample_steps(sim, 1, part="prefill")[0]
    pspec = step_spec(sim, pstep, DEP, "prefill")
    assert pspec.qo_lens == tuple(sim.batch(pstep).prefill_qo_lens.tolist())
    assert pspec.kind in ("prefill", "append")


@pytest.mark.slow
def test_measure_samples_runs_the_sweep_and_scores_the_model(tmp_path: Path) -> None:
    """The sampled steps run as jobs of a session (here in this process, on the CPU)."""
    from attnbench.measure.config import MeasureConfig
    from attnbench.measure.hardware import detect
    from attnbench.run.plan import RunPlan, RunSink, placement
    from attnbench.run.session import RunSession

    models = _reference_models()
    sim = _small_sim(models)
    rows: list = []
    headers: list = []
    info = detect("cpu")
    plan = RunPlan(
        run_id="live-test",
        device=info,
        where=placement(info),
        measure_cfg=MeasureConfig(timer="fake", fake_samples_us=(50.0,), cold_l2=False),
    )
    with RunSession(plan, RunSink(on_row=rows.append, on_header=headers.append)) as session:
        results = measure_samples(sim, models, DEP, 2, session.run_case, prefill=True)
    assert len(headers) == 1
    assert {r.part for r in results} == {"decode", "prefill"}
    assert all(r.status == "ok" for r in results), [r.reason for r in results]
    assert len(rows) == len(results)
    for r in results:
        assert r.measured_us == 50.0
        assert r.predicted_us == pytest.approx(predict(models["reference"], r.spec)[0])
        assert r.rel_err == pytest.approx(r.predicted_us / 50.0 - 1)
    report = live_report(results, "rows.jsonl", "cpu", sampled_from="x")
    assert report.summary["reference decode"].measured == 2
    assert report.worst_rel_rmse == max(v.rel_rmse for v in report.summary.values())
    assert [s.step for s in report.samples] == [r.step for r in results]
    assert report.sampled_from == "x"


@pytest.mark.gpu
def test_live_replay_on_the_gpu(tmp_path: Path) -> None:
    """On the GPU: replay a slice with (fake-coefficient) flashinfer:fa2 rows named for this
    GPU and measure 3 replayed decode steps with the real kernel; the rows file and the error
    summary come back. Rows of another GPU are refused (one GPU's figures in one error)."""
    import torch

    from attnbench.cli import app

    here = torch.cuda.get_device_name(0)
    other = rr.write(tmp_path / "other.jsonl", rr.rows(("flashinfer:fa2",)), gpu="NVIDIA B200")
    res = CliRunner().invoke(
        app, ["replay", str(other), "--trace", "azure-conv", "--limit", "60", "--live", "3"]
    )
    assert res.exit_code != 0
    assert f"this GPU is {here}" in " ".join(res.output.split())
    results = rr.write(tmp_path / "rows.jsonl", rr.rows(("flashinfer:fa2",)), gpu=here)
    out, live_out = tmp_path / "replay.json", tmp_path / "live.jsonl"
    res = CliRunner().invoke(
        app,
        [
            "replay", str(results), "--trace", "azure-conv", "--limit", "60", "--live", "3",
            "--live-out", str(live_out), "--out", str(out),
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    import json

    doc = json.loads(out.read_text())
    assert doc["provenance"]["gpu"] == doc["gpu"] == here  # timed where the steps were measured
    live = doc["live"]
    assert live["samples"], live
    assert all(
        s["status"] in ("ok", "unsupported", "error", "oom", "mismatch") for s in live["samples"]
    )
    from attnbench.results import read_results

    assert len(read_results(live_out).rows) == len(live["samples"])
    import importlib.util

    if importlib.util.find_spec("flashinfer") is not None:
        assert live["summary"]["flashinfer:fa2 decode"]["measured"] >= 1


def test_live_replay_refuses_rows_of_another_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GPU is the boundary of a figure: `replay --live` on an H100 with H200 rows (the
    predictions fitted there, the steps timed here) is refused with both names, before any
    step is timed; the GPU test checks the same on the real card."""
    from attnbench.cli import app
    from attnbench.measure import hardware

    here = hardware.DeviceInfo("cuda", 0, "NVIDIA H100 80GB HBM3", (9, 0), 132, 0, 0)
    monkeypatch.setattr(hardware, "resolve_device", lambda device: ("cuda:0", None))
    monkeypatch.setattr(hardware, "detect", lambda device: here)
    timed: list[object] = []
    monkeypatch.setattr("attnbench.replay.live.run_live", lambda *a, **k: timed.append(a))
    rows = rr.write(tmp_path / "rows.jsonl", rr.rows(("flashinfer:fa2",)))
    res = CliRunner().invoke(
        app, ["replay", str(rows), "--trace", "azure-conv", "--limit", "60", "--live", "3"]
    )
    said = " ".join(res.output.split())
    assert res.exit_code == 3, res.output
    assert "step costs come from NVIDIA H200 rows and this GPU is NVIDIA H100 80GB HBM3" in said
    assert not timed
