"""`attnbench replay` answers as `recommend --engine none` does (issue 49): ranks from the
paired statistics (a tie is a tie, a 60x difference is not), each list printed once, hybrids
only from deployable variants, and a default that ends within a minute on the committed rows
with the same decision as `recommend` on the same rows and traffic."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import replay_rows as rr
from attnbench.cli import app
from attnbench.cli.replay import DEFAULT_LIMIT
from attnbench.cli.replay_answer import ranks
from attnbench.deploy.options import Option, OptionKey
from attnbench.deploy.stats import PairedEstimate
from attnbench.deploy.traffic import TRACE_LIMIT
from attnbench.replay.document import load_document
from attnbench.replay.pipeline import deployable

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def _option(variant: str, ratio: float, low: float, high: float) -> Option:
    opt = Option(OptionKey(variant, "auto", 16), [])
    opt.decode = PairedEstimate(ratio, low, high, 10)
    return opt


def test_ranks_tie_overlapping_cis_and_order_a_60x_difference() -> None:
    opts = [
        _option("flex", 60.0, 55.0, 66.0),
        _option("flash-attn:fa3", 1.0, 1.0, 1.0),
        _option("flashinfer:tc", 0.98, 0.96, 1.01),
        _option("flashinfer:fa2", 1.44, 1.32, 1.57),
    ]
    order = ranks(opts)
    got = {o.key.variant: order[o.key.text] for o in opts}
    assert got == {"flashinfer:tc": 1, "flash-attn:fa3": 1, "flashinfer:fa2": 2, "flex": 3}
    unranked = Option(OptionKey("flashinfer:auto", "auto", 16), [])
    assert unranked.key.text not in ranks([*opts, unranked])  # no decode cases: no rank


def test_the_default_replay_samples_what_recommend_replays() -> None:
    assert DEFAULT_LIMIT == TRACE_LIMIT


def _tuned_rows() -> list:
    """The fake rows plus a `+tuned` twin of flashinfer:fa2 twice as fast at everything."""
    rows = rr.rows()
    twins = [
        r.model_copy(update={"backend": "flashinfer:fa2+tuned", "latency_us": r.latency_us / 2})
        for r in rows
        if r.backend == "flashinfer:fa2"
    ]
    return rows + twins


def test_replay_answers_once_from_deployable_variants_only(tmp_path: Path) -> None:
    results = rr.write(tmp_path / "rows.jsonl", _tuned_rows())
    out = tmp_path / "replay.json"
    args = ["replay", str(results), "--trace", "azure-code", "--limit", "120", "--out", str(out)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    doc = load_document(out)
    assert doc.answer is not None
    names = {c.name for c in doc.candidates}
    for c in doc.candidates:
        assert deployable(c.decode_backend), c
        assert deployable(c.prefill_backend), c
    assert not any("+tuned" in n for n in names)
    assert doc.answer.hybrid is None or all(map(deployable, doc.answer.hybrid))
    assert any("flashinfer:fa2+tuned" in line for line in doc.answer.not_deployable)
    # every option ranked, each list printed once: no per-entry "not distinguishable" lists
    assert [r.rank for r in doc.answer.ranks] == sorted(r.rank or 99 for r in doc.answer.ranks)
    assert "not distinguishable from" not in res.output
    assert res.output.count("tied with it") <= 1
    assert res.output.count("decision (as `attnbench recommend") == 1
    assert "replaying the first 120 requests" in res.output  # says what it does
    assert "[1/" in res.output  # and its progress


def _decision(text: str) -> tuple[str, list[str]]:
    """(the choice, the tied variants) of `recommend`'s or `replay`'s printed decision."""
    flat = " ".join(text.split())
    keep = re.search(r"keep the default, (\S+?)[ ,(]", flat)
    assert keep is not None, flat[:400]
    if "decision (as" in flat:  # replay
        m = re.search(r"tied with it \(95% CIs overlap\): (.*?) hybrid:", flat)
        tied = [t.strip() for t in m.group(1).split(",")] if m else []
    else:  # recommend: `tied     a, 16-bit KV, page 16 0.98x [...]; b, ...`
        m = re.search(r" tied (.*?) \(CIs overlap\)", flat)
        tied = [part.strip().split(",")[0] for part in m.group(1).split(";")] if m else []
    return keep.group(1), sorted(tied)


@pytest.mark.slow
def test_the_default_replay_agrees_with_recommend_within_a_minute(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    start = time.perf_counter()
    res = runner.invoke(app, ["replay"])
    wall_s = time.perf_counter() - start
    assert res.exit_code == 0, res.output
    assert wall_s < 60, f"replay took {wall_s:.0f} s"
    rec = runner.invoke(
        app,
        [
            *("recommend", "--model", "llama-3.1-70b", "--tp", "8"),
            *("--engine", "none", "--trace", "azure-conv"),
        ],
    )
    assert rec.exit_code == 0, rec.output
    assert _decision(res.output) == _decision(rec.output)
    assert "+tuned" not in res.output.split("never chosen")[0]
