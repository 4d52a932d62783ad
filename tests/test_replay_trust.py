"""How far to trust a replay: validated error per candidate (from a validation document built
through `replay.validate` with a fake timer), the share of steps beyond the calibration range,
and rankings that call two candidates "not distinguishable" when their difference is inside
their combined error."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import replay_rows as rr
import replay_validation as rv
from attnbench.cli.app import app
from attnbench.replay.document import ReplayConfig, load_document
from attnbench.replay.pipeline import ReplayError, run_replay
from attnbench.replay.records import RankEntry, Ranking
from attnbench.replay.trust import group, order_text, scaled, ties
from attnbench.replay.validate import error_stats
from attnbench.replay.validation_doc import ValidatedStep, find_validation, load_validation

CFG = ReplayConfig(trace="azure-code", limit=120)


def _entry(name: str, value: float, low: float, high: float) -> RankEntry:
    return RankEntry(candidate=name, value_ms=value, low_ms=low, high_ms=high, group=0)


def test_disjoint_ranges_are_ordered() -> None:
    out = group([_entry("b", 12.0, 11.5, 12.5), _entry("a", 10.0, 9.5, 10.5)])
    assert [(e.candidate, e.group) for e in out] == [("a", 1), ("b", 2)]


def test_a_difference_inside_the_combined_error_is_a_tie() -> None:
    # 10 vs 10.8: apart by 0.8, errors 0.5 + 0.5 toward each other
    out = group([_entry("a", 10.0, 9.5, 10.5), _entry("b", 10.8, 10.3, 11.3)])
    assert [e.group for e in out] == [1, 1]
    r = Ranking(metric="itl_ms.p50", rate_scale=1.0, entries=out)
    assert ties(r) == {"a": ["b"], "b": ["a"]}
    assert order_text(r) == "a = b"


def test_a_chain_of_overlaps_is_never_ordered_inside() -> None:
    # a overlaps b, b overlaps c; c starts above a's range but not above b's: one group
    out = group(
        [_entry("a", 1.0, 0.9, 3.0), _entry("b", 2.9, 2.5, 5.0), _entry("c", 4.5, 4.0, 6.0)]
    )
    assert [e.group for e in out] == [1, 1, 1]
    out = group(
        [_entry("a", 1.0, 0.9, 1.1), _entry("b", 2.0, 1.9, 2.1), _entry("c", 2.05, 2.0, 2.2)]
    )
    assert [(e.candidate, e.group) for e in out] == [("a", 1), ("b", 2), ("c", 2)]
    assert order_text(Ranking(metric="m", rate_scale=1.0, entries=out)) == "a < b = c"


def test_unknown_error_ties_with_everyone_and_missing_values_drop_out() -> None:
    nan = math.nan
    out = group(
        [_entry("a", 1.0, 0.9, 1.1), _entry("u", 5.0, nan, nan), _entry("x", nan, nan, nan)]
    )
    assert [(e.candidate, e.group) for e in out] == [("a", 1), ("u", 1)]


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rr.write(tmp_path_factory.mktemp("rows") / "rows.jsonl", rr.rows(noise=0.03))


@pytest.fixture(scope="module")
def exact(rows: Path) -> dict[str, object]:
    return rv.build(rows, spread=0.0)


@pytest.fixture(scope="module")
def loose(rows: Path) -> dict[str, object]:
    return rv.build(rows, spread=0.6, seed=1)


def test_scaled_cost_steps_agree_with_its_vectorised_durations(rows: Path) -> None:
    out = run_replay(CFG, [rows])
    name = out.study.main
    cost, sim = out.study.costs[name], out.study.sims[name]
    f = sim.features
    assert np.allclose(scaled(cost, 1.0, 1.0).durations_s(f), cost.durations_s(f))
    s = scaled(cost, 1.3, 0.7)
    parts, base = s.parts_us(f), cost.parts_us(f)
    assert np.allclose(parts["attention_decode"], 1.3 * base["attention_decode"])
    assert np.allclose(parts["attention_prefill"], 0.7 * base["attention_prefill"])
    assert np.array_equal(parts["gemm"], base["gemm"])
    durations = s.durations_s(f)
    for i in range(0, len(f), max(1, len(f) // 50)):
        assert s.step_s(f.shape(i)) == pytest.approx(durations[i], rel=1e-9)


def test_without_validation_every_candidate_says_not_validated(rows: Path) -> None:
    doc = run_replay(CFG, [rows]).document
    assert doc.trust is not None
    assert doc.trust.validation is None
    names = {c.name for c in doc.candidates}
    assert {t.candidate for t in doc.trust.candidates} == names
    for t in doc.trust.candidates:
        assert t.validated is None
        assert t.decode_err_from == "held-out fit"
        m = next(m for m in doc.models if m.backend == t.decode_backend)
        assert m.decode is not None
        assert t.decode_err == pytest.approx(m.decode.cv_rel_rmse)
        assert 0.0 <= t.outside_share <= 1.0
    assert {r.metric for r in doc.trust.rankings} == {"itl_ms.p50", "itl_ms.p99", "ttft_ms.p50"}


def test_a_validation_file_states_each_variants_live_error(
    rows: Path, exact: dict, tmp_path: Path
) -> None:
    vpath = rv.write(tmp_path / "validation.json", exact)
    doc = run_replay(CFG, [rows], vpath).document
    assert doc.trust is not None
    assert doc.trust.validation == str(vpath)
    summary = exact["summary"]
    for t in doc.trust.candidates:
        v = t.validated
        assert v is not None, t.candidate
        s = summary[t.decode_backend]
        assert v.steps == s["measured"] >= 50
        assert v.p90_abs_err == pytest.approx(s["p90_abs_err"])
        assert v.median_abs_err == pytest.approx(s["median_abs_err"])
        assert v.outside_share == pytest.approx(s["outside_share"])
        assert v.meets_target is True
        assert t.decode_err_from == "validated p90"
    # the document keeps it, and an old document (no trust) still loads: covered by the
    # committed documents' round trip in test_replay_document
    out = tmp_path / "replay.json"
    out.write_text(doc.to_json())
    again = load_document(out)
    assert again.trust == doc.trust


def _itl_p50_groups(rows: Path, vpath: Path) -> dict[str, int]:
    doc = run_replay(CFG, [rows], vpath).document
    assert doc.trust is not None
    r = next(r for r in doc.trust.rankings if r.metric == "itl_ms.p50")
    return {e.candidate: e.group for e in r.entries}


def test_small_validated_error_orders_variants_and_large_error_ties_them(
    rows: Path, exact: dict, loose: dict, tmp_path: Path
) -> None:
    # the rows' models differ by about 6% in median ITL (fa2 faster than fa3)
    tight = _itl_p50_groups(rows, rv.write(tmp_path / "a" / "validation.json", exact))
    assert tight["flashinfer:fa2"] < tight["flash-attn:fa3"]
    p90s = [s["p90_abs_err"] for s in loose["summary"].values()]  # type: ignore[union-attr]
    assert min(p90s) > 0.3
    wide = _itl_p50_groups(rows, rv.write(tmp_path / "b" / "validation.json", loose))
    assert wide["flashinfer:fa2"] == wide["flash-attn:fa3"]


def test_a_validation_beside_the_rows_is_found(rows: Path, exact: dict, tmp_path: Path) -> None:
    here = rr.write(tmp_path / "rows.jsonl", rr.rows(noise=0.03))
    assert find_validation([here]) == []
    vpath = rv.write(tmp_path / "replay" / "validation.json", exact)
    assert find_validation([here]) == [vpath]
    assert find_validation([here, vpath]) == [vpath]
    doc = run_replay(CFG, [here]).document
    assert doc.trust is not None
    assert doc.trust.validation == str(vpath)


def test_beside_the_rows_each_variant_takes_the_newest_validation(
    loose: dict, exact: dict, tmp_path: Path
) -> None:
    """A fresh measurement of one variant (after its model changed) replaces the older
    document for that variant only; the others keep theirs."""
    here = rr.write(tmp_path / "rows.jsonl", rr.rows(noise=0.03))
    old = rv.write(
        tmp_path / "replay" / "validation-a.json",
        dict(loose, provenance={"gpu": rr.GPU, "time": "2026-01-01T00:00:00+00:00"}),
    )
    fresh_one = "flashinfer:fa2"
    summary = exact["summary"]
    assert isinstance(summary, dict)
    assert fresh_one in summary
    new = rv.write(
        tmp_path / "replay" / "validation-b.json",
        dict(
            exact,
            provenance={"gpu": rr.GPU, "time": "2026-02-01T00:00:00+00:00"},
            summary={fresh_one: summary[fresh_one]},
            steps=[s for s in exact["steps"] if s["backend"] == fresh_one],  # type: ignore[attr-defined]
        ),
    )
    doc = run_replay(CFG, [here]).document
    assert doc.trust is not None
    assert doc.trust.validation == f"{old}; {new}"
    by_variant = {t.decode_backend: t.validated for t in doc.trust.candidates}
    assert set(by_variant) >= {fresh_one, "flash-attn:fa3"}
    for name, v in by_variant.items():
        assert v is not None, name
        want = exact if name == fresh_one else loose
        assert v.source == str(new if name == fresh_one else old)
        assert v.p90_abs_err == pytest.approx(want["summary"][name]["p90_abs_err"])  # type: ignore[index]
    assert any("per variant the newest of 2" in n for n in doc.trust.notes)


def test_validation_of_another_gpu_or_shape_is_not_used(
    rows: Path, exact: dict, tmp_path: Path
) -> None:
    other_gpu = dict(exact, provenance={"gpu": "NVIDIA A100"})
    doc = run_replay(CFG, [rows], rv.write(tmp_path / "g.json", other_gpu)).document
    assert doc.trust is not None
    assert all(t.validated is None for t in doc.trust.candidates)
    assert any("timed on NVIDIA A100" in n for n in doc.trust.notes)
    models = [dict(m, shape="q32/kv8/d128 bfloat16 kv=bfloat16 p16") for m in exact["models"]]
    doc = run_replay(CFG, [rows], rv.write(tmp_path / "s.json", dict(exact, models=models)))
    trust = doc.document.trust
    assert trust is not None
    assert all(t.validated is None for t in trust.candidates)
    assert any("validated at q32/kv8" in n for n in trust.notes)


def test_validation_document_reads_back_typed(exact: dict, tmp_path: Path) -> None:
    vdoc = load_validation(rv.write(tmp_path / "v.json", exact))
    assert vdoc.gpu == rr.GPU
    assert set(vdoc.summary) == set(rr.COEFS)
    assert all(isinstance(s, ValidatedStep) for s in vdoc.steps)
    assert len(vdoc.steps) == sum(s.steps for s in vdoc.summary.values())
    # the statistics are those of the steps it lists
    from attnbench.replay.validate import StepError

    fields = ("trace", "step", "backend", "requests", "kv_total", "kv_max", "predicted_us")
    again = error_stats(
        [
            StepError(*(getattr(s, k) for k in fields), s.measured_us, outside=s.outside)
            for s in vdoc.steps
        ]
    )
    for name, s in vdoc.summary.items():
        assert again[name]["p90_abs_err"] == pytest.approx(s.p90_abs_err)


def test_a_bad_validation_file_is_one_line(rows: Path, exact: dict, tmp_path: Path) -> None:
    bad = dict(exact, summary={"flashinfer:fa2": {"steps": "many"}})
    vpath = rv.write(tmp_path / "validation.json", bad)
    with pytest.raises(ReplayError, match=r"field summary\.flashinfer:fa2\.steps") as exc:
        run_replay(CFG, [rows], vpath)
    assert "\n" not in str(exc.value)
    args = ["replay", str(rows), "--trace", "azure-code", "--limit", "60"]
    res = CliRunner().invoke(app, [*args, "--validation", str(vpath)])
    assert res.exit_code == 2
    assert "summary.flashinfer:fa2.steps" in res.output
    assert "Traceback" not in res.output
    res = CliRunner().invoke(
        app, ["replay", str(rows), "--validation", str(tmp_path / "missing.json")]
    )
    assert res.exit_code == 2
    assert "--validation" in res.output
    assert "no such file" in res.output


def test_cli_states_trust_per_candidate_once(rows: Path, exact: dict, tmp_path: Path) -> None:
    args = ["replay", str(rows), "--trace", "azure-code", "--limit", "120"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "rank by the rows, paired" in res.output
    lines = [ln for ln in res.output.splitlines() if "not validated on live steps" in ln]
    # the CLI builds a hybrid only where `recommend --engine none` decides one
    doc = run_replay(CFG.model_copy(update={"auto_hybrid": False}), [rows]).document
    assert len(lines) == len(doc.candidates)
    vpath = rv.write(tmp_path / "validation.json", exact)
    out = tmp_path / "replay.json"
    res = CliRunner().invoke(app, [*args, "--validation", str(vpath), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "not validated on live steps" not in res.output
    assert res.output.count("validated on") == len(doc.candidates)
    assert "meets the target" in res.output
    saved = json.loads(out.read_text())
    assert saved["trust"]["validation"] == str(vpath)
