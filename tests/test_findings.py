"""`attnbench findings`: every measured figure the README and docs quote, generated from the
committed files, and `--check`, which fails when the committed document drifts from them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.cli import app
from attnbench.report.findings import (
    BEGIN,
    END,
    FAILED,
    REGISTRY,
    BlockMarkersError,
    Inputs,
    Section,
    Table,
    build,
    document,
    load_inputs,
    readme_block,
    section,
    sources,
    splice,
)
from attnbench.report.findings.render import answer_rows
from attnbench.results import Footer, Header, ResultRow, ResultWriter
from attnbench.workload.spec import WorkloadSpec

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
DOC = ROOT / "docs" / "findings.md"
runner = CliRunner()


@pytest.fixture(scope="module")
def committed(committed_findings: tuple[Inputs, list[Section]]) -> tuple[Inputs, list[Section]]:
    return committed_findings


def test_the_committed_document_and_readme_block_are_what_the_files_give(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    res = runner.invoke(app, ["findings", "--check"])
    assert res.exit_code == 0, res.output


def test_no_section_fails_and_every_row_names_its_file_and_commit(
    committed: tuple[Inputs, list[Section]],
) -> None:
    _, sections = committed
    assert len(sections) >= 20
    for s in sections:
        assert not s.text.startswith(FAILED), s.text
        assert any(t.rows for t in s.tables), s.title
        for t in s.tables:
            assert t.columns[-1] == "commit", (s.title, t.columns)
            assert any(c in ("file", "log") for c in t.columns), (s.title, t.columns)
            for row in t.rows:
                assert len(row) == len(t.columns), (s.title, row)
                assert row[-1] not in ("", "-", "unknown"), (s.title, row)


def _section(sections: list[Section], title: str) -> str:
    found = [s for s in sections if s.title == title]
    assert found, title
    return document(found, "x")


def test_the_figures_the_recount_found_wrong_come_from_every_row(
    committed: tuple[Inputs, list[Section]],
) -> None:
    """The recount of issue 32 against the files: each corrected figure is what the document
    now says, because it ranges over every row."""
    _, sections = committed
    ragged = _section(sections, "Raggedness")
    assert "| flash-attn:fa3 | bfloat16 | 7 | 145.6–155.2 | 81%–87% |" in ragged
    assert "| flashinfer:tc | bfloat16 | 7 | 145.7–907.6 |" in ragged
    assert "| flashinfer:xqa | bfloat16 | 7 | 156.7–1,227.1 |" in ragged
    llama = _section(sections, "Llama-3.1-70B per generated token")
    assert "decode bs512 mixed(256..65536) bf16/bf16 |" in llama
    assert "flashinfer:fa2 231.03" in llama  # the bf16 row, not a bf16/fp16 average
    assert "flashinfer:fa2 200.74" in llama  # the fp16 row, apart
    fp8 = _section(sections, "FP8 KV cache: speed-up per variant")
    assert "| flashinfer:xqa | fp8_e4m3 | 12 | 0.81x–2.22x |" in fp8
    calibration = _section(sections, "Replay calibration")
    assert "| 155 | 5 |" in calibration
    assert "2 error" in calibration


def test_ceilings_span_every_header_per_gpu(committed: tuple[Inputs, list[Section]]) -> None:
    inputs, sections = committed
    text = _section(sections, "Ceilings")
    by_gpu: dict[str, list[float]] = {}
    for hs in inputs.headers.values():
        for h in hs:
            gpu = str(h.gpu).removeprefix("NVIDIA ")
            by_gpu.setdefault(gpu, []).append(h.ceilings["copy_bandwidth_gbps"])
    assert len(by_gpu) >= 1
    for gpu, copies in by_gpu.items():
        lo, hi = min(copies), max(copies)
        span = f"{lo:,.0f}–{hi:,.0f}" if round(lo) != round(hi) else f"{lo:,.0f}"
        assert f"| {gpu} | copy (read + write) | {span} GB/s | {len(copies)} |" in text


def test_kernel_ratios_are_ranged_per_gpu(committed: tuple[Inputs, list[Section]]) -> None:
    """Paging cost and FA3 against FlashInfer never pool two GPUs' rows: each GPU's range is
    its own, in the tables and in the README's headlines."""
    inputs, sections = committed
    rows = inputs.rows
    gpus = {
        str(g).removeprefix("NVIDIA ") for g in rows.loc[rows["backend"] == "flash-attn:fa3", "gpu"]
    }
    paging = _section(sections, "Paging cost of FA3")
    fa3 = _section(sections, "Paged FA3 against FlashInfer")
    heads = {h.topic: h.figure for sec in sections for h in sec.headlines}
    for gpu in gpus:
        assert f"| every {gpu} file |" in paging
        assert f"| {gpu} | decode |" in fa3
        assert f"{gpu} " in heads["paged / contiguous FA3"]
        assert f"{gpu} " in heads["paged FA3 / fastest FlashInfer, decode"]
    assert "| every file |" not in paging


def test_check_fails_with_a_short_summary_when_a_figure_drifts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    out = tmp_path / "ragged.md"
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n\n{BEGIN}\n{END}\n\nrest\n")
    args = ["findings", str(RESULTS / "h200-ragged.jsonl.gz"), "--out", str(out)]
    res = runner.invoke(app, [*args, "--readme", str(readme)])
    assert res.exit_code == 0, res.output
    assert runner.invoke(app, [*args, "--readme", str(readme), "--check"]).exit_code == 0
    assert readme.read_text().startswith("intro\n\n" + BEGIN)
    assert "rest\n" in readme.read_text()
    out.write_text(out.read_text().replace("145.6–155.2", "133–155"))
    res = runner.invoke(app, [*args, "--check"])
    assert res.exit_code == 1
    assert "2 lines differ" in res.output
    assert "-| flash-attn:fa3 | bfloat16 | 7 | 133–155" in res.output
    assert "+| flash-attn:fa3 | bfloat16 | 7 | 145.6–155.2" in res.output


def test_check_of_a_missing_document_or_block_fails(tmp_path: Path) -> None:
    args = ["findings", str(RESULTS / "h200-ragged.jsonl.gz"), "--out", str(tmp_path / "x.md")]
    assert runner.invoke(app, [*args, "--check"]).exit_code == 1
    readme = tmp_path / "README.md"
    readme.write_text("no markers here\n")
    res = runner.invoke(app, [*args, "--readme", str(readme)])
    assert res.exit_code == 2
    assert "no generated block" in res.output
    with pytest.raises(BlockMarkersError):
        splice("x", "y", "README.md")


@pytest.fixture
def extra_section() -> Iterator[str]:
    """A section registered for one test, as another engineer would add one."""

    @section("test-ragged-fastest")
    def fastest(inputs: Inputs) -> Section | None:
        ok = inputs.ok("h200-ragged")
        if ok.empty:
            return None
        rows = [
            [str(b), f"{g['latency_us'].min():,.1f}", *sources(g)] for b, g in ok.groupby("backend")
        ]
        return Section("Fastest", "x", [Table(["variant", "µs", "file", "commit"], rows)])

    yield "test-ragged-fastest"
    del REGISTRY["test-ragged-fastest"]


def test_adding_a_section_is_one_registered_function(extra_section: str) -> None:
    inputs = load_inputs([RESULTS / "h200-ragged.jsonl.gz"])
    (sec,) = build(inputs, [extra_section])
    assert sec.tables[0].rows
    assert all(r[-2:] == ["h200-ragged.jsonl.gz", "37881daa0bf1-dirty"] for r in sec.tables[0].rows)
    assert build(load_inputs([RESULTS / "h200-mla.jsonl.gz"]), [extra_section]) == []
    with pytest.raises(ValueError, match="registered twice"):
        section(extra_section)(lambda inputs: None)


def test_a_section_that_raises_says_so_and_the_others_stay() -> None:
    @section("test-broken")
    def broken(inputs: Inputs) -> Section | None:
        raise KeyError("no_such_column")

    try:
        inputs = load_inputs([RESULTS / "h200-ragged.jsonl.gz"])
        secs = build(inputs, ["test-broken", "ragged"])
    finally:
        del REGISTRY["test-broken"]
    by_title = {s.title: s for s in secs}
    assert by_title["test-broken"].text.startswith(f"{FAILED}: KeyError")
    assert by_title["Raggedness"].tables[0].rows


def _spec() -> WorkloadSpec:
    return WorkloadSpec(
        kind="decode",
        num_qo_heads=32,
        num_kv_heads=8,
        head_dim=128,
        kv_lens=[1024] * 4,
        qo_lens=[1] * 4,
    )


def _header(sha: str, time: str) -> Header:
    ceilings = {"copy_bandwidth_gbps": 4000.0, "matmul_tflops": {"bfloat16": 700.0}}
    return Header(
        run_id="r",
        provenance={"git_sha": sha, "time": time, "gpu": "GPU"},
        device={"name": "GPU"},
        ceilings=ceilings,
    )


def test_a_resumed_files_rows_name_their_own_runs_commit(tmp_path: Path) -> None:
    """Runs appended to one file share its run_id: each row's commit is the header before it."""
    p = tmp_path / "resumed.jsonl"
    row = {"run_id": "r", "status": "ok", "spec": _spec().model_dump(mode="json")}
    with ResultWriter(p) as w:
        w.write(_header("aaa1111", "2026-01-01T00:00:00+00:00"))
        w.write(ResultRow(case_id="c1", backend="flashinfer:tc", latency_us=10.0, **row))
        w.write(_header("bbb2222", "2026-01-02T00:00:00+00:00"))
        w.write(ResultRow(case_id="c2", backend="flashinfer:tc", latency_us=12.0, **row))
    inputs = load_inputs([tmp_path])
    assert dict(zip(inputs.rows["case_id"], inputs.rows["commit"], strict=True)) == {
        "c1": "aaa1111",
        "c2": "bbb2222",
    }
    files = next(s for s in build(inputs, ["files"]))
    assert files.tables[0].rows[0][-1] == "aaa1111, bbb2222"


def test_gpu_test_reports_and_logs_give_their_commit(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "h200-gpu-tests-a.txt").write_text(
        "...\n3 passed, 1 skipped in 12.50s\n=== group a: -m gpu: exit 0 after 14 s\n"
        "=== commit 1234abc; 2026-01-01T00:00:00Z\ncompiled 20 s  mod_a\ncompiled 30 s  mod_b\n"
    )
    (tmp_path / "logs" / "s1.txt").write_text(
        "commit 5678def; stage s1; 2026\nrows: ok 3 in 42 s -> /out/h200-default-fresh.jsonl\n"
    )
    inputs = load_inputs([tmp_path])
    tests, walls = build(inputs, ["gpu-tests", "run-walls"])
    assert tests.tables[0].rows == [
        ["H200", "a", "3 passed, 1 skipped", "12", "exit 0 after 14 s", "2 (20-30 s each)",
         "`h200-gpu-tests-a.txt`", "1234abc"],
    ]  # fmt: skip
    (head,) = tests.headlines
    assert (head.topic, head.figure) == (
        "GPU tests (`pytest -m gpu`), H200",
        "a: 3 passed; at 1234abc",
    )
    assert walls.tables[0].rows == [
        ["h200-default-fresh.jsonl", "ok 3", "42", "`logs/s1.txt`", "5678def"]
    ]


def test_a_default_runs_footer_is_its_wall_time(tmp_path: Path) -> None:
    """The run's own footer (wall, setup, prebuild, modules compiled by the jobs) wins over
    a session log's line for the same file."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "s1.txt").write_text(
        "commit 5678def; stage s1; 2026\nrows: ok 3 in 999 s -> /out/h200-default-fresh.jsonl\n"
    )
    row = {"run_id": "r", "status": "ok", "spec": _spec().model_dump(mode="json")}
    first_use = [{"name": "batch_prefill_x", "seconds": 61.3}]
    prebuild = {"seconds": 140.2, "expected_s": 150.0, "first_use": first_use}
    with ResultWriter(tmp_path / "h200-default-fresh.jsonl") as w:
        w.write(_header("aaa1111", "2026-01-01T00:00:00+00:00"))
        w.write(ResultRow(case_id="c1", backend="flashinfer:tc", latency_us=10.0, **row))
        w.write(Footer(run_id="r", wall_s=231.4, setup_s=150.6, prebuild=prebuild))
    (walls,) = build(load_inputs([tmp_path]), ["default-run"])
    assert walls.tables[0].rows == [
        ["h200-default-fresh.jsonl", "ok 1", "231", "151", "140", "1 (61 s)", "aaa1111"]
    ]
    assert len(walls.tables) == 2  # the footer table, then first plans per library
    (head,) = walls.headlines
    assert (head.topic, head.figure, head.commit) == (
        "default suite wall time, H200",
        "fresh 231 s",
        "aaa1111",
    )


def test_a_later_default_run_stands_beside_the_first(tmp_path: Path) -> None:
    """`h100-default-fresh-2` (the same suite, another machine): both wall times in the
    GPU's one headline, the slower one included."""
    row = {"run_id": "r", "status": "ok", "spec": _spec().model_dump(mode="json")}
    for name, sha, wall in (
        ("h100-default-fresh", "aaa1111", 164.0),
        ("h100-default-fresh-2", "bbb2222", 256.0),
    ):
        with ResultWriter(tmp_path / f"{name}.jsonl") as w:
            w.write(_header(sha, "2026-01-01T00:00:00+00:00"))
            w.write(ResultRow(case_id="c1", backend="flashinfer:tc", latency_us=10.0, **row))
            w.write(Footer(run_id="r", wall_s=wall, setup_s=100.0))
    (walls,) = build(load_inputs([tmp_path]), ["default-run"])
    (head,) = walls.headlines
    assert head.topic == "default suite wall time, H100 80GB HBM3"
    assert head.figure == "fresh 164 s, 256 s"
    assert head.commit == "aaa1111, bbb2222"


def test_readme_block_is_the_answer_table_and_links_to_its_section(
    committed: tuple[Inputs, list[Section]],
) -> None:
    inputs, sections = committed
    block = readme_block(sections, "docs/findings.md", inputs)
    assert block.startswith(BEGIN)
    assert block.endswith(END)
    lines = block.splitlines()
    assert lines[1].startswith("| GPU | model | engine | traffic | deploy | decode vs default |")
    answer = next(s for s in sections if s.key == "answer")
    assert len([ln for ln in lines if ln.startswith("| ")]) - 1 == len(answer_rows(answer))
    anchor = block.split("(docs/findings.md#", 1)[1].split(")", 1)[0]
    text = DOC.read_text()
    assert any(ln.startswith("### ") and anchor == _anchor(ln[4:]) for ln in text.splitlines()), (
        anchor
    )


def test_the_headlines_link_to_sections_of_the_page(
    committed: tuple[Inputs, list[Section]],
) -> None:
    text = DOC.read_text()
    heads = text.split("## Headlines", 1)[1].split("## Contents", 1)[0]
    rows = [ln for ln in heads.splitlines() if ln.startswith("| [")]
    assert 5 <= len(rows) <= 40
    titles = {_anchor(ln[4:]) for ln in text.splitlines() if ln.startswith("### ")}
    for r in rows:
        assert r.split("](#", 1)[1].split(")", 1)[0] in titles, r


def _anchor(title: str) -> str:
    from attnbench.report.findings.render import anchor

    return anchor(title)


def test_findings_imports_no_torch() -> None:
    code = (
        "import sys, attnbench.cli.findings, attnbench.report.findings;"
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT)


def test_a_file_with_fake_timed_rows_gives_no_figure(tmp_path: Path) -> None:
    p = tmp_path / "fake.jsonl"
    row = {"run_id": "r", "status": "ok", "spec": _spec().model_dump(mode="json")}
    with ResultWriter(p) as w:
        w.write(_header("aaa1111", "2026-01-01T00:00:00+00:00"))
        w.write(
            ResultRow(
                case_id="c1",
                backend="sdpa:math",
                latency_us=100.0,
                measurement={"timer": "fake"},
                **row,
            )
        )
    res = runner.invoke(app, ["findings", str(p), "--out", str(tmp_path / "x.md")])
    assert res.exit_code == 2
    assert "fake timer" in res.output
    assert not (tmp_path / "x.md").exists()
