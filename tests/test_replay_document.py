"""The typed replay document: every committed `results/h200-replay-*.json` loads through it with
no key lost or added, and renders as the report's section and as the CLI's tables; a bad
document is one line naming the field; the config block keeps the deployment's fields flat."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from rich.console import Console

from attnbench.replay.deployment import Deployment
from attnbench.replay.document import (
    ReplayConfig,
    ReplayDocument,
    ReplayDocumentError,
    load_document,
)
from attnbench.replay.records import Crossed
from attnbench.report import replay_section, replay_tables
from attnbench.report.blocks import Figure, ReportData, Table, Text

RESULTS = Path(__file__).resolve().parents[1] / "results"
COMMITTED = sorted(RESULTS.glob("h200-replay-*.json"))


def test_the_committed_documents_are_there() -> None:
    names = {p.name for p in COMMITTED}
    assert {"h200-replay-azure-code.json", "h200-replay-agents450.json"} <= names


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name)
def test_committed_document_round_trips_key_for_key(path: Path) -> None:
    raw = json.loads(path.read_text())
    doc = load_document(path)
    back = json.loads(doc.to_json())
    assert back == raw
    # every committed replay names the commit and libraries that produced it
    assert raw["provenance"]["git_sha"] not in ("", "unknown")
    assert not raw["provenance"]["git_sha"].endswith("-dirty")
    assert "torch" in raw["provenance"]["libraries"]
    # typed fields carry what the string keys did
    assert doc.gpu == raw["gpu"] == "NVIDIA H200"
    assert doc.config.deployment.model == raw["config"]["model"]
    assert doc.config.deployment.tp == raw["config"]["tp"]
    assert [r.candidate for r in doc.runs] == [r["candidate"] for r in raw["runs"]]
    for run, r in zip(doc.runs, raw["runs"], strict=True):
        assert run.itl_ms.p99 == r["itl_ms"]["p99"]
        assert run.time_frac.attention == pytest.approx(
            r["time_frac"]["attention_decode"] + r["time_frac"]["attention_prefill"]
        )
    assert doc.main_candidate in {c.name for c in doc.candidates}


def _data(*extras: Path) -> ReportData:
    """What a section hook gets; the replay section reads only `extras` and `label`."""
    empty = pd.DataFrame()
    return ReportData(
        loaded=None,  # type: ignore[arg-type]
        gpu="NVIDIA H200",
        rows=empty,
        ok=empty,
        label="test",
        ceilings={},
        extras=list(extras),
    )


def _text(table: Any) -> str:
    console = Console(record=True, width=300)
    console.print(table)
    return console.export_text()


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name)
def test_committed_document_renders_as_cli_tables(path: Path) -> None:
    doc = load_document(path)
    tables = replay_tables.tables(doc)
    out = "\n".join(_text(t) for t in tables)
    for run in doc.runs:
        assert run.candidate in out
        assert f"{run.itl_ms.p99:.2f}" in out
    for m in doc.models:
        assert m.backend in out
    if doc.crossing:
        assert f"crosses {doc.itl_target_ms:g} ms" in out
        for c in doc.crossing.values():
            if isinstance(c, Crossed):
                assert f"{c.scale:.2f}x" in out
    if doc.padded_vs_ragged:
        assert "padded vs ragged" in out
    if doc.live is not None:
        assert "cost model vs live GPU steps" in out
        for key, v in doc.live.summary.items():
            assert key in out
            assert f"{v.measured}/{v.samples}" in out
    for note in replay_tables.extrapolation_notes(doc):
        assert "beyond 1.5x the measured rows" in note


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name)
def test_committed_document_renders_in_the_report(path: Path) -> None:
    pytest.importorskip("matplotlib")
    section = replay_section.replay_section(_data(path))
    assert section is not None
    assert section.title == "Serving replay"
    doc = load_document(path)
    tables = [b for b in section.blocks if isinstance(b, Table)]
    runs = tables[0]
    assert [row[0] for row in runs.rows] == [r.candidate for r in doc.runs_at()]
    assert any(isinstance(b, Figure) for b in section.blocks)
    text = " ".join(b.markdown for b in section.blocks if isinstance(b, Text))
    assert doc.trace.name in text
    assert (doc.live is not None) == ("Validated live" in text)
    ranked = doc.trust is not None and bool(doc.trust.rankings)
    assert len(tables) == (
        2 + bool(doc.crossing) + bool(doc.padded_vs_ragged) + bool(doc.live) + ranked
    )
    if doc.trust is not None:  # how far to trust each candidate, once each
        for t in doc.trust.candidates:
            assert text.count(f"- {t.candidate}: ") == 1, t.candidate


def test_a_broken_document_is_one_line_naming_the_field(tmp_path: Path) -> None:
    raw = json.loads(COMMITTED[0].read_text())
    raw["runs"][0]["itl_ms"]["p99"] = "fast"
    bad = tmp_path / "replay-bad.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(ReplayDocumentError, match=r"field runs\.0\.itl_ms\.p99") as exc:
        load_document(bad)
    assert "\n" not in str(exc.value)
    section = replay_section.replay_section(_data(bad))
    assert section is not None
    (block,) = section.blocks
    assert isinstance(block, Text)
    assert "runs.0.itl_ms.p99" in block.markdown
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "something else"}))
    with pytest.raises(ReplayDocumentError, match="not a replay document"):
        load_document(other)
    assert replay_section.replay_section(_data(other)) is None


def test_unknown_keys_are_refused() -> None:
    raw = json.loads(COMMITTED[0].read_text())
    raw["trace"]["speed"] = 3
    with pytest.raises(ValueError, match="speed"):
        ReplayDocument.model_validate(raw)


def test_null_measurements_read_back_as_nan() -> None:
    raw = json.loads(COMMITTED[0].read_text())
    raw["runs"][0]["throughput_tok_s"] = None
    doc = ReplayDocument.model_validate(raw)
    assert math.isnan(doc.runs[0].throughput_tok_s)
    assert json.loads(doc.to_json())["runs"][0]["throughput_tok_s"] is None


def test_config_composes_the_deployment_and_stays_flat_in_json() -> None:
    dep = Deployment(model="llama-3.1-8b", tp=2, kv_dtype="fp8_e4m3", page_size=32)
    cfg = ReplayConfig(trace="azure-code", deployment=dep, rate_scales=(1.0, 2.0))
    assert cfg.deployment is dep
    flat = json.loads(cfg.model_dump_json())
    assert "deployment" not in flat
    assert flat["model"] == "llama-3.1-8b"
    assert flat["tp"] == 2
    assert flat["page_size"] == 32
    assert flat["kv_dtype"] == dep.kv_dtype
    assert flat["reserve_gib"] == dep.reserve_gib
    again = ReplayConfig.model_validate(flat)
    assert again == cfg
    assert again.deployment == dep


def test_config_refuses_a_bad_deployment_field() -> None:
    with pytest.raises(ValueError, match="page_size=24 must be a power of two"):
        ReplayConfig.model_validate({"trace": "azure-code", "page_size": 24})
