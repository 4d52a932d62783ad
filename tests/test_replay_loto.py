"""Leave one trace out (`replay.loto`, `replay-validate --heldout-draw / --heldout`) on CPU: the
drawn steps as a suite, each trace judged by models fitted without it, the document, and the
replay's trust preferring held-out figures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import replay_rows as rr
from attnbench.cli.app import app
from attnbench.config import Settings
from attnbench.replay import loto
from attnbench.replay.costmodel import ShapeKey
from attnbench.replay.deployment import Deployment
from attnbench.replay.document import ReplayConfig
from attnbench.replay.live import sample_steps
from attnbench.replay.pipeline import LoadedRows, run_replay
from attnbench.replay.trust import choose_validation, trust_line
from attnbench.replay.validation_doc import load_validation
from attnbench.report.blocks import Table, Text
from attnbench.report.replay_validation import validation_blocks
from attnbench.results import ResultRow, read_json
from attnbench.workload.spec import WorkloadSpec
from attnbench.workload.suite import load_suite, suite_specs

runner = CliRunner()
TRACES = ("azure-code", "mooncake-conv", "synthetic:agentic-128k")
KEY = ShapeKey(8, 1, 128, "bfloat16", "bfloat16", 16)


def test_labels_name_the_trace_and_step() -> None:
    for trace in TRACES:
        assert loto.parse_label(loto.step_label(trace, 17)) == (trace, 17)
    assert loto.parse_label("") is None
    assert loto.parse_label("heldout:azure-code:stepx") is None
    assert loto.parse_label("mixed(256..65536)") is None


def test_offset_draw_takes_other_quantiles(tmp_path: Path) -> None:
    outcome = run_replay(
        ReplayConfig(trace="azure-code", limit=150, deployment=Deployment()),
        [rr.write(tmp_path / "rows.jsonl")],
    )
    sim = outcome.study.sims[outcome.study.main]
    plain, fresh = sample_steps(sim, 10), sample_steps(sim, 10, offset=0.5)
    assert len(fresh) == len(plain) == 10
    assert set(fresh) != set(plain)
    kv = sim.features.kv_total
    assert kv[fresh].max() <= kv[plain].max()  # midpoints: never past the largest


def held_out_rows(scale: dict[str, float] | None = None, per_trace: int = 12) -> list[ResultRow]:
    """Held-out steps of TRACES, timed by rr's known model (times `scale[trace]`)."""
    rng = np.random.default_rng(7)
    out = []
    for trace in TRACES:
        for step in range(per_trace):
            n = int(rng.integers(1, 200))
            kv = tuple(int(v) for v in rng.integers(64, 60_000, size=n))
            spec = WorkloadSpec(
                kind="decode", kv_lens=kv, qo_lens=(1,) * n, label=loto.step_label(trace, step),
                **rr.SHAPE,
            )  # fmt: skip
            for b in rr.COEFS:
                lat = rr.decode_us(b, list(kv)) * (scale or {}).get(trace, 1.0)
                out.append(rr.result_row(b, spec, lat, 0.0))
    return out


def _calibration() -> LoadedRows:
    return LoadedRows(rr.rows(), [rr.header()], rr.GPU, [])


def test_each_trace_is_judged_by_models_fitted_without_it() -> None:
    _, live = loto.split_rows(held_out_rows())
    assert list(live) == list(TRACES)
    errors, folds = loto.leave_one_trace_out(_calibration(), live, KEY)
    assert set(folds) == set(TRACES)
    assert {e.trace for e in errors} == set(TRACES)
    assert max(abs(e.rel_err or 0.0) for e in errors) < 1e-6  # rows follow the model exactly
    per_trace = loto.trace_stats(errors)
    summary = loto.variant_summary(errors, per_trace)
    assert set(summary) == set(rr.COEFS)
    assert all(s["traces"] == 3 for s in summary.values())


def test_misses_one_sign_are_a_bias_and_both_signs_scatter() -> None:
    assert loto.bias_text(0.068, 0.067) == (
        "a bias: it over-predicts on this traffic (mean error +6.8%)"
    )
    assert loto.bias_text(-0.004, 0.025) == "scatter around zero (mean error -0.4%)"


def test_a_trace_the_others_do_not_predict_is_the_worst() -> None:
    _, live = loto.split_rows(held_out_rows({"mooncake-conv": 1.3}, per_trace=50))
    errors, _ = loto.leave_one_trace_out(_calibration(), live, KEY)
    summary = loto.variant_summary(errors, loto.trace_stats(errors))
    notes = loto.miss_notes(errors, loto.trace_stats(errors))
    fa3 = [n for n in notes if n.startswith("flash-attn:fa3 on mooncake-conv: 50 of 50 steps")]
    assert len(fa3) == 1
    assert "its 5 largest misses" in fa3[0]
    assert "error -2" in fa3[0]  # under-predicted by ~23%
    assert "a bias: it under-predicts on this traffic (mean error -2" in fa3[0]
    some = [e for e in errors if e.trace == "mooncake-conv"][:40]  # 20 steps of 2 variants
    few = loto.miss_notes(some, loto.trace_stats(some))
    assert len(few) == 2
    assert all("fewer than 50 measured" in n for n in few)
    for s in summary.values():
        assert s["worst_trace"] == "mooncake-conv"
        assert float(s["worst_p90_abs_err"]) > 0.15  # ~1/1.3 - 1 = -23%, diluted by the rows
        assert s["meets_target"] is False


def test_steps_suite_runs_the_calibration_first_then_the_traces_in_turn(tmp_path: Path) -> None:
    steps = [loto.HeldOutStep(t, i, (100 + i, 2000)) for t in ("a", "b") for i in range(3)] + [
        loto.HeldOutStep("synthetic:x", 0, (64,))
    ]
    groups = load_suite(loto.CALIBRATION_SUITE).groups
    path = tmp_path / "steps.toml"
    path.write_text(loto.steps_suite(steps, Deployment(), "here", groups), encoding="utf-8")
    specs = suite_specs(load_suite(str(path)), Settings())
    heldout = [s for s in specs if loto.parse_label(s.label)]
    assert len(specs) - len(heldout) == 12  # replay-calibration-heldout's cases
    assert [loto.parse_label(s.label) for s in heldout[:3]] == [
        ("a", 0),
        ("b", 0),
        ("synthetic:x", 0),
    ]
    assert heldout[1].kv_lens == (100, 2000)
    assert {s.model for s in specs} == {"llama-3.1-70b"}


def test_cli_scores_the_steps_and_the_replay_prefers_the_heldout_figures(tmp_path: Path) -> None:
    calib = rr.write(tmp_path / "calibration.jsonl")
    live = rr.write(tmp_path / "heldout.jsonl", held_out_rows({"mooncake-conv": 1.08}))
    out = tmp_path / "replay" / "validation-heldout.json.gz"
    res = runner.invoke(
        app, ["replay-validate", str(calib), "--heldout", str(live), "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert "worst mooncake-conv" in res.output
    doc = load_validation(out)
    assert doc.heldout
    assert doc.rule == loto.FORM_RULE
    assert set(doc.per_trace) == set(TRACES)
    assert set(read_json(out)["folds"]) == set(TRACES)
    fa3 = doc.summary["flash-attn:fa3"]
    assert fa3.worst_trace == "mooncake-conv"
    assert fa3.bound == pytest.approx(max(fa3.worst_p90_abs_err, fa3.p90_abs_err))
    # a newer live validation does not replace the held-out figures
    newer = read_json(out) | {"method": "live", "per_trace": {}}
    newer["provenance"] = {"time": "2099-01-01T00:00:00+00:00"}
    (tmp_path / "replay" / "validation-live.json").write_text(json.dumps(newer))
    shapes = {"flash-attn:fa3": KEY.describe()}
    found = sorted((tmp_path / "replay").glob("*.json*"))
    _, chosen, _ = choose_validation(None, found, shapes, rr.GPU)
    assert chosen["flash-attn:fa3"].heldout
    assert chosen["flash-attn:fa3"].per_trace["mooncake-conv"].steps == 12
    # the report's section: the rule, then per variant every trace and the worst
    text, table, *_ = validation_blocks(out, doc, "test")
    assert isinstance(text, Text)
    assert isinstance(table, Table)
    assert loto.FORM_RULE in text.markdown
    worst = [r for r in table.rows if str(r[1]).startswith("worst:")]
    assert len(worst) == len(rr.COEFS)
    assert all(r[1] == "worst: mooncake-conv" for r in worst)


def test_heldout_needs_two_traces(tmp_path: Path) -> None:
    calib = rr.write(tmp_path / "calibration.jsonl")
    one = [r for r in held_out_rows() if r.spec.label.startswith("heldout:azure-code")]
    live = rr.write(tmp_path / "one.jsonl", one)
    res = runner.invoke(app, ["replay-validate", str(calib), "--heldout", str(live)])
    assert res.exit_code == 2
    assert "leaving one out needs two or more" in res.output


def test_trust_line_states_the_heldout_error() -> None:
    from attnbench.replay.records import TraceHeldOut, ValidatedError

    per = {
        "a": TraceHeldOut(steps=50, median_abs_err=0.02, p90_abs_err=0.05, meets_target=True),
        "b": TraceHeldOut(steps=50, median_abs_err=0.04, p90_abs_err=0.14, meets_target=False),
    }
    v = ValidatedError(
        source="x.json", steps=100, median_abs_err=0.03, p90_abs_err=0.09, outside_share=0.0,
        meets_target=False, method=loto.METHOD, worst_trace="b", worst_p90_abs_err=0.14,
        per_trace=per,
    )  # fmt: skip
    assert v.bound == 0.14
    assert set(v.model_dump()) >= {"method", "per_trace"}
    live = v.model_copy(update={"method": "live"})
    assert "per_trace" not in live.model_dump()  # live documents keep their keys
    from attnbench.replay.records import CandidateTrust

    t = CandidateTrust(
        candidate="flash-attn:fa3", decode_backend="flash-attn:fa3",
        prefill_backend="flash-attn:fa3", validated=v, decode_err=v.bound,
        decode_err_from="held-out traces p90", prefill_err=0.02, outside_share=0.0,
    )  # fmt: skip
    line = trust_line(t)
    assert "held out on 2 traces" in line
    assert "worst b" in line
    assert "on 1 of 2" in line
