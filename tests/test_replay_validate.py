"""`replay-validate` on CPU: steps drawn from four traces' replays, timed by a fake timer that
follows a known model, and the per-variant error statistics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import replay_rows as rr
from attnbench.cli.app import app
from attnbench.replay.deployment import Deployment
from attnbench.replay.document import ReplayConfig
from attnbench.replay.pipeline import run_replay
from attnbench.replay.validate import (
    TRACES,
    StepError,
    draw_steps,
    error_stats,
    measure,
    validation_document,
)
from attnbench.report.blocks import Text
from attnbench.workload.spec import WorkloadSpec


@pytest.fixture(scope="module")
def replays(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict, Deployment]:
    path = tmp_path_factory.mktemp("rows") / "rows.jsonl"
    rr.write(path)
    dep = Deployment()
    sims, models = {}, {}
    for t in TRACES:
        outcome = run_replay(ReplayConfig(trace=t, limit=120, deployment=dep), [path])
        sims[t] = outcome.study.sims[outcome.study.main]
        models = outcome.study.models
    return sims, models, dep


def test_steps_come_from_every_trace_and_span_the_batches(replays: tuple) -> None:
    sims, _, dep = replays
    drawn = draw_steps(sims, dep, 15)
    assert {d.trace for d in drawn} == set(TRACES)
    assert len(drawn) >= 50
    sizes = [d.spec.batch_size for d in drawn]
    assert min(sizes) == 1
    assert max(sizes) > 8
    assert all(d.spec.kind == "decode" for d in drawn)


def test_fake_timer_following_the_rows_model_gives_zero_error(replays: tuple) -> None:
    sims, models, dep = replays
    drawn = draw_steps(sims, dep, 15)

    def timer(spec: WorkloadSpec, names: list[str]) -> dict[str, float | None]:
        return {n: rr.decode_us(n, list(spec.kv_lens)) for n in names}

    errs = measure(drawn, models, timer)
    stats = error_stats(errs)
    assert set(stats) == set(rr.COEFS)
    for s in stats.values():
        assert s["measured"] == len(drawn)
        assert s["median_abs_err"] < 1e-6
        assert s["p90_abs_err"] < 1e-6
        assert s["meets_target"] is True
    doc = validation_document(errs, list(TRACES), models, {"gpu": "fake"}, ["rows"])
    assert len(doc["steps"]) == len(drawn) * len(rr.COEFS)  # type: ignore[arg-type]


def test_error_statistics_are_median_and_p90_of_absolute_errors() -> None:
    errs = [
        StepError("t", i, "b", 1, 10, 10, 100.0 * (1 + e), 100.0, outside=i == 0)
        for i, e in enumerate(np.linspace(-0.2, 0.2, 41))
    ]
    errs.append(StepError("t", 99, "b", 1, 10, 10, 5.0, None, outside=False))  # failed
    s = error_stats(errs)["b"]
    abs_errs = np.abs(np.linspace(-0.2, 0.2, 41))
    assert s["steps"] == 42
    assert s["measured"] == 41
    assert s["median_abs_err"] == pytest.approx(np.median(abs_errs))
    assert s["p90_abs_err"] == pytest.approx(np.quantile(abs_errs, 0.9))
    assert s["outside_share"] == pytest.approx(1 / 42)
    assert s["meets_target"] is False  # 41 < 50 steps, and p90 18% > 10%


def test_validate_on_cpu_fails_at_once_with_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app,
        ["replay-validate", str(tmp_path), "--device", "cpu", "--out", str(tmp_path / "v.json")],
    )
    assert res.exit_code != 0
    assert "needs a CUDA GPU" in res.output
    assert "Traceback" not in res.output


def test_steps_alternate_between_traces(replays: tuple) -> None:
    """A run cut short early still holds steps of every trace."""
    sims, _, dep = replays
    drawn = draw_steps(sims, dep, 15)
    assert [d.trace for d in drawn[: len(TRACES)]] == list(sims)


@pytest.mark.slow
def test_an_interrupted_validation_writes_the_steps_timed_so_far(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (the session's time limit) during timing: the document is still written, marked
    incomplete, with every step timed before it, and the exit code is 130."""
    import json

    import attnbench.replay.validate as validate

    rows = tmp_path / "rows.jsonl"
    rr.write(rows)
    timed: list[int] = []

    def fake_gpu_timer(device: str, rows_path: str, max_time_ms: float) -> tuple:
        assert max_time_ms == 60.0

        def timer(spec: WorkloadSpec, names: list[str]) -> dict[str, float | None]:
            if len(timed) == 5:
                raise KeyboardInterrupt
            timed.append(spec.batch_size)
            return {n: rr.decode_us(n, list(spec.kv_lens)) for n in names}

        return timer, lambda: None, rr.GPU

    from types import SimpleNamespace

    import attnbench.cli.replay_validate as cli_replay
    import attnbench.replay.live as live

    monkeypatch.setattr(validate, "gpu_timer", fake_gpu_timer)
    monkeypatch.setattr(cli_replay, "_check_live_device", lambda device, command="": None)
    monkeypatch.setattr(live, "cuda_device", lambda device, why: SimpleNamespace(name=rr.GPU))
    out = tmp_path / "v.json"
    res = CliRunner().invoke(
        app,
        [
            "replay-validate", str(rows), "--limit", "120", "--max-time-ms", "60",
            "--out", str(out), "--device", "cuda",
        ],
    )  # fmt: skip
    assert res.exit_code == 130, res.output
    assert "interrupted after 5 of" in res.output
    doc = json.loads(out.read_text())
    assert doc["complete"] is False
    assert len({(s["trace"], s["step"]) for s in doc["steps"]}) == 5
    assert {s["trace"] for s in doc["steps"]} == set(TRACES)


def test_rescore_re_predicts_the_measured_steps_without_a_gpu(
    replays: tuple, tmp_path: Path
) -> None:
    """`--rescore`: the measurements of a document stay, the predictions come from models
    refitted on the given rows; a document whose steps lack their lengths is a clear error."""
    import json

    sims, models, dep = replays
    rows = tmp_path / "rows.jsonl"
    rr.write(rows)
    drawn = draw_steps(sims, dep, 15)

    def slow_timer(spec: WorkloadSpec, names: list[str]) -> dict[str, float | None]:
        return {n: 1.25 * rr.decode_us(n, list(spec.kv_lens)) for n in names}

    errs = measure(drawn, models, slow_timer)
    doc = validation_document(errs, list(TRACES), models, {"gpu": rr.GPU}, ["rows"])
    src = tmp_path / "old.json"
    src.write_text(json.dumps(doc))
    out = tmp_path / "new.json"
    res = CliRunner().invoke(
        app, ["replay-validate", str(rows), "--rescore", str(src), "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    new = json.loads(out.read_text())
    assert new["rescored_from"]["path"] == str(src)
    from attnbench.replay.validation_doc import parse_validation
    from attnbench.report.replay_validation import validation_blocks

    vdoc = parse_validation(new, str(out))
    assert vdoc.gpu == rr.GPU  # the GPU that measured the steps, not the machine that rescored
    text = validation_blocks(out, vdoc, "rescored")[0]
    assert isinstance(text, Text)
    assert f"on {rr.GPU}" in text.markdown
    assert "Re-predicted" in text.markdown
    assert "the steps measured in `old.json`" in text.markdown
    assert [s["measured_us"] for s in new["steps"]] == [s["measured_us"] for s in doc["steps"]]  # type: ignore[union-attr]
    assert [s["kv_lens"] for s in new["steps"]] == [
        list(d.spec.kv_lens) for d in drawn for _ in rr.COEFS
    ]
    for name, s in new["summary"].items():
        assert s["median_abs_err"] == pytest.approx(0.2, abs=1e-6), name  # 1 / 1.25 - 1

    for s in doc["steps"]:  # type: ignore[union-attr]
        del s["kv_lens"]
    src.write_text(json.dumps(doc))
    res = CliRunner().invoke(
        app, ["replay-validate", str(rows), "--rescore", str(src), "--out", str(out)]
    )
    assert res.exit_code != 0
    assert "carry no kv_lens" in res.output
    assert "Traceback" not in res.output
