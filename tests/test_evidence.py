"""Which gate a row passed and from what tree (`analysis.evidence`): every results file's gate
and tree in the findings and the report, and every headline drawn from rows not at today's
gate (the timed-output check, a clean tree) saying so in its text."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from attnbench.analysis.evidence import (
    GATE_EAGER,
    GATE_TIMED,
    Evidence,
    caveat_by_gpu,
    evidence,
    evidence_of_commits,
    is_dirty,
)
from attnbench.report.findings import Headline, Inputs, Section, build, load_inputs
from attnbench.report.findings.gate import annotate
from attnbench.report.findings.gpus import Part
from attnbench.report.findings.render import headline_table, table_markdown
from attnbench.results import Header, ResultRow, ResultWriter
from attnbench.workload.spec import WorkloadSpec

ROOT = Path(__file__).resolve().parents[1]
DIRTY = "37881daa0bf1-dirty"


def _frame(*rows: tuple[str, str, float | None]) -> pd.DataFrame:
    """(status, commit, timed_rel_l2_err) per row, in one file."""
    return pd.DataFrame(
        [{"file": "f.jsonl", "status": s, "commit": c, "timed_rel_l2_err": t} for s, c, t in rows]
    )


def test_is_dirty_reads_the_sha_suffix() -> None:
    assert is_dirty(DIRTY)
    assert is_dirty(f"`{DIRTY}`")
    assert not is_dirty("37881daa0bf1")
    assert not is_dirty("unknown")


def test_clean_timed_rows_are_at_todays_gate() -> None:
    ev = evidence(_frame(("ok", "abc1234", 1e-3), ("ok", "abc1234", 2e-3)))
    assert (ev.gate, ev.tree, ev.caveat()) == (GATE_TIMED, "clean", "")
    assert ev.at_todays_gate


def test_eager_only_and_dirty_rows_are_counted_and_named() -> None:
    ev = evidence(
        _frame(
            ("ok", DIRTY, None),
            ("ok", "abc1234", None),
            ("ok", "abc1234", 1e-3),
            ("mismatch", DIRTY, None),  # failed rows passed no gate: not counted
        )
    )
    assert ev == Evidence(rows=3, eager_only=2, dirty_rows=1, dirty_commits=(DIRTY,))
    assert ev.gate == f"{GATE_EAGER}: 2 of 3 rows"
    assert ev.tree == f"dirty ({DIRTY}): 1 of 3 rows"
    assert ev.caveat() == (
        f"1 of 3 rows from an uncommitted tree ({DIRTY}); "
        "2 of 3 rows eager gate only (no timed-output check)"
    )
    every = evidence(_frame(("ok", DIRTY, None)))
    assert (every.gate, every.tree) == (GATE_EAGER, f"dirty ({DIRTY})")


def test_a_frame_of_pairs_counts_both_sides() -> None:
    pairs = pd.DataFrame(
        [{"commit": "abc", "timed_rel_l2_err": 1e-3, "commit_b": DIRTY, "timed_rel_l2_err_b": None}]
    )
    assert evidence(pairs) == Evidence(2, 1, 1, (DIRTY,))


def test_documents_give_their_tree_only() -> None:
    ev = evidence_of_commits(["423bf31", "6a964bfa9d6d-dirty"])
    assert (ev.gate, ev.tree) == ("-", "dirty (6a964bfa9d6d-dirty)")
    assert ev.caveat() == "from an uncommitted tree (6a964bfa9d6d-dirty)"


def test_a_headline_from_rows_not_at_todays_gate_says_so_in_its_text() -> None:
    head = Headline.of("topic", "1.2x", _frame(("ok", DIRTY, None)))
    assert head.caveat
    parts = [Part("", [Section("S", headlines=[head])])]
    block = table_markdown(headline_table(parts, {}, "doc.md"))
    assert f"1.2x — *not at today's gate*: 1 of 1 rows from an uncommitted tree ({DIRTY})" in (
        block
    )
    clean = Headline.of("topic", "1.2x", _frame(("ok", "abc", 1e-3)))
    assert (clean.caveat, clean.text) == ("", "1.2x")
    wall = Headline.of("wall time", "90 s", _frame(("ok", "abc", None)), gated=False)
    assert wall.caveat == ""  # a wall time is not a gated figure; its tree still counts


def _spec() -> WorkloadSpec:
    return WorkloadSpec(
        kind="decode", num_qo_heads=32, num_kv_heads=8, head_dim=128, kv_lens=[1024] * 2,
        qo_lens=[1] * 2,
    )  # fmt: skip


def _write(path: Path, sha: str, timed: float | None, case: str = "c1") -> None:
    header = Header(
        run_id="r",
        provenance={"git_sha": sha, "time": "2026-01-01T00:00:00+00:00", "gpu": "GPU"},
        device={"name": "GPU"},
        ceilings={"copy_bandwidth_gbps": 4000.0, "matmul_tflops": {"bfloat16": 700.0}},
    )
    acc = {"rel_l2_err": 1e-3, "passed": True, "precision": "bfloat16"}
    if timed is not None:
        acc["timed_rel_l2_err"] = timed
    with ResultWriter(path) as w:
        w.write(header)
        w.write(
            ResultRow(
                run_id="r", case_id=case, backend="flashinfer:tc", status="ok", latency_us=10.0,
                spec=_spec(), accuracy=acc,
            )
        )  # fmt: skip


def test_findings_label_every_file_and_cells_headlines_get_the_files_caveat(
    tmp_path: Path,
) -> None:
    _write(tmp_path / "h200-old.jsonl", DIRTY, None)
    _write(tmp_path / "h200-new.jsonl", "abc1234", 1e-3)
    inputs = load_inputs([tmp_path])
    (files,) = build(inputs, ["files"])
    table = files.tables[0]
    got = {r[0]: (r[4], r[5]) for r in table.rows}
    assert table.columns[4:6] == ["gate", "tree"]
    assert got == {
        "`h200-new.jsonl`": (GATE_TIMED, "clean"),
        "`h200-old.jsonl`": (GATE_EAGER, f"dirty ({DIRTY})"),
    }
    old = Headline.of("old", "1x", ["h200-old.jsonl", DIRTY])
    new = Headline.of("new", "1x", ["`h200-new.jsonl`", "abc1234"])
    annotate([Section("S", headlines=[old, new])], inputs)
    assert "1 of 1 rows eager gate only" in old.text
    assert new.text == "1x"


@pytest.fixture(scope="module")
def committed_heads(committed_findings: tuple[Inputs, list[Section]]) -> list[Headline]:
    return [h for s in committed_findings[1] for h in s.headlines]


def test_committed_headlines_from_the_dirty_h200_files_say_so(
    committed_heads: list[Headline],
) -> None:
    """The eight H200 files from 37881daa0bf1-dirty (issue 48): every headline naming one of
    them says so, and no headline from clean, timed-checked rows carries a caveat."""
    by_topic = {h.topic: h for h in committed_heads}
    for topic in (
        "raggedness, bf16 decode at a fixed total of KV tokens",
        "fp8 e4m3 KV speed-up, Llama-3.1-70B",
        "paged FA3 / fastest FlashInfer, tree",
        "paged FA3 / fastest FlashInfer, shared_prefix",
    ):
        assert DIRTY in by_topic[topic].text, topic
        assert "eager gate only" in by_topic[topic].text, topic
    for h in committed_heads:
        if h.commit == DIRTY or DIRTY in h.commit.split(", "):
            assert h.caveat, h.topic


def test_the_reports_overview_gives_each_files_gate_and_tree(tmp_path: Path) -> None:
    from attnbench.analysis.frame import load
    from attnbench.report.build import write_report

    _write(tmp_path / "h200-old.jsonl", DIRTY, None, "c1")
    _write(tmp_path / "h200-new.jsonl", "abc1234", 1e-3, "c2")  # the report keeps a case once
    files = [tmp_path / "h200-old.jsonl", tmp_path / "h200-new.jsonl"]
    md = write_report(load(files), tmp_path / "out")[0].read_text()
    overview = md.split("## Overview\n", 1)[1].split("\n## ", 1)[0]
    assert f"| h200-new.jsonl | 1 | {GATE_TIMED} | clean |" in overview
    assert f"| h200-old.jsonl | 1 | {GATE_EAGER} | dirty ({DIRTY}) |" in overview


def test_a_headline_over_two_gpus_says_which_gpus_rows_are_behind_todays_gate() -> None:
    rows = pd.concat(
        [
            _frame(("ok", "abc1234", 1e-3), ("ok", "abc1234", 2e-3)).assign(
                gpu="NVIDIA H100 80GB HBM3"
            ),
            _frame(("ok", DIRTY, None), ("ok", "def5678", None)).assign(gpu="NVIDIA H200"),
        ]
    )
    assert caveat_by_gpu(rows) == (
        f"H200: 1 of 2 rows from an uncommitted tree ({DIRTY}), 2 of 2 rows eager gate only "
        "(no timed-output check); H100 80GB HBM3: at today's gate"
    )
    assert (
        caveat_by_gpu(rows[rows["gpu"] == "NVIDIA H200"])
        == evidence(rows[rows["gpu"] == "NVIDIA H200"]).caveat()
    )  # one GPU: the plain caveat
    assert caveat_by_gpu(rows[rows["gpu"] != "NVIDIA H200"]) == ""
    assert Headline.of("t", "1.0x", rows).caveat == caveat_by_gpu(rows)
