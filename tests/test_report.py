"""report: Markdown + self-contained HTML from fixture rows; panels only when their rows exist;
the section hook; the default results location; the CLI."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.analysis.frame import NoResultsError, load, provenance_label, resolve_paths
from attnbench.cli import app
from attnbench.report import blocks as report_blocks
from attnbench.report.blocks import ReportData, Section, Table, Text, register_section
from attnbench.report.build import write_report
from fixtures_results import decode_specs, header, make_rows, row, write_results

runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def full_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    tmp = tmp_path_factory.mktemp("report")
    res = write_results(tmp / "h200.jsonl", make_rows())
    md, page = write_report(load([res]), tmp / "out")
    return tmp / "out", md.read_text(), page.read_text()


def test_markdown_has_every_panel(full_report: tuple[Path, str, str]) -> None:
    out, md, _ = full_report
    for title in (
        "Overview",
        "Measured ceilings",
        "Kernels per workload class",
        "Decode latency",
        "Prefill and append latency",
        "Roofline",
        "Raggedness",
        "FP8 KV cache",
        "Speculative trees",
        "Shared prefix",
        "Accuracy",
        "Unsupported and failed",
    ):
        assert f"## {title}\n" in md, title
    figures = re.findall(r"!\[[^\]]*\]\((figures/[^)]+\.png)\)", md)
    assert len(figures) == 7  # decode absolute + relative, roofline, ragged, fp8, tree, prefix
    for f in figures:
        assert (out / f).read_bytes().startswith(PNG)
    assert "decision matrix" in md
    assert "--prefill-attention-backend fa3" in md  # the SGLang export
    assert "sdpa has no fp8 KV path" in md  # the unsupported table keeps reasons
    assert "rel_l2_err 2.00e-01 exceeds budget" in md  # and the accuracy table the mismatches


def test_html_is_self_contained(full_report: tuple[Path, str, str]) -> None:
    _, _, page = full_report
    assert page.startswith("<!DOCTYPE html>")
    assert page.count('src="data:image/png;base64,') == 7
    assert "<style>" in page
    for forbidden in ("<script", "<link", "http://", "https://", 'src="figures'):
        assert forbidden not in page, forbidden
    assert re.search(r"<h2>Kernels per workload class</h2>", page)
    assert 'href="#raggedness"' in page


def test_figures_are_labelled_with_provenance() -> None:
    label = provenance_label([(Path("x.jsonl"), header())])
    for part in (
        "NVIDIA H200",
        "torch 2.11.0",
        "flashinfer-python 0.7.4",
        "fa3-fwd 0.0.3",
        "2026-09-01",
    ):
        assert part in label


def test_the_figure_label_names_the_latest_run_not_the_last_file() -> None:
    """Files are read in name order; the footer must name the newest run's libraries and say
    that the inputs hold others."""
    old = header(time="2026-09-01T12:00:00+00:00")
    new = header(time="2026-12-03T06:00:00+00:00")
    new.provenance["libraries"] = {"flashinfer-python": "0.7.4", "tokenspeed-fa3": "3.0.0"}
    new.provenance["git_sha"] = "db3df6a67da7"
    label = provenance_label([(Path("a-new.jsonl"), new), (Path("b-old.jsonl"), old)])
    assert "tokenspeed-fa3 3.0.0" in label
    assert "@db3df6a67da7" in label
    assert "fa3-fwd" not in label
    assert "1 other library set(s)" in label


def test_panels_without_rows_are_left_out(tmp_path: Path) -> None:
    rows = [row(s, "flashinfer:tc") for s in decode_specs((1024, 4096))]
    md, page = write_report(load([write_results(tmp_path / "d.jsonl", rows)]), tmp_path / "o")
    text = md.read_text()
    assert "## Decode latency" in text
    for absent in (
        "Raggedness",
        "FP8 KV cache",
        "Speculative trees",
        "Shared prefix",
        "Unsupported and failed",
    ):
        assert f"## {absent}" not in text
    html = page.read_text()
    assert html.count("<figure>") == 2  # latency vs context + roofline
    assert html.count("data:image/png") == 4  # each with its phone rendition


@pytest.fixture
def hook() -> Iterator[list[str]]:
    seen: list[str] = []

    @register_section("Extra study", order=85, per_gpu=False)
    def extra(data: ReportData) -> Section | None:
        docs = [p.name for p in data.extras]
        seen.extend(docs)
        if not docs:
            return None
        return Section(
            "Extra study", [Text("from **extras**"), Table(["file"], [[d] for d in docs])]
        )

    @register_section("Broken study", order=86)
    def broken(data: ReportData) -> Section | None:
        raise RuntimeError("boom")

    yield seen
    report_blocks._SECTIONS.pop("Extra study")
    report_blocks._SECTIONS.pop("Broken study")


def test_section_hook_and_extras(
    tmp_path: Path, hook: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATTNBENCH_REPORT_WORKERS", "1")  # `hook` sees what runs in-process
    rows = [row(s, "flashinfer:tc") for s in decode_specs((1024,))]
    res = write_results(tmp_path / "run.jsonl", rows)
    (tmp_path / "fp8-study.json").write_text('{"records": []}')
    loaded = load(resolve_paths([tmp_path]))
    assert [p.name for p in loaded.extras] == ["fp8-study.json"]
    md, _ = write_report(loaded, tmp_path / "o")
    text = md.read_text()
    assert hook == ["fp8-study.json"]
    assert "## Extra study" in text
    assert "| fp8-study.json |" in text
    assert "This section failed: `RuntimeError: boom`" in text  # the rest still rendered
    assert res.exists()


def test_default_results_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from attnbench.analysis import frame

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ATTNBENCH_RESULTS", raising=False)
    committed_dir = frame.checkout_results()
    assert committed_dir is not None  # tests run from a checkout
    found = resolve_paths(None)  # another folder: the checkout's committed results/
    assert found
    assert all(p.parent == committed_dir for p in found)
    monkeypatch.setattr(frame, "checkout_results", lambda: None)  # an installed wheel
    with pytest.raises(NoResultsError, match="no results files found in results/"):
        resolve_paths(None)
    rows = [row(s, "sdpa:cudnn") for s in decode_specs((1024,))]
    committed = write_results(tmp_path / "results" / "h200.jsonl", rows)
    assert resolve_paths(None) == [Path("results/h200.jsonl")]
    monkeypatch.setenv("ATTNBENCH_RESULTS", str(committed))
    assert resolve_paths(None) == [committed]


def test_cli_report_smoke(tmp_path: Path) -> None:
    rows = [row(s, b) for s in decode_specs((1024, 4096)) for b in ("flashinfer:tc", "sdpa:cudnn")]
    res_file = write_results(tmp_path / "r.jsonl", rows)
    res = runner.invoke(app, ["report", str(res_file), "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "rep" / "report.html").stat().st_size > 10_000
    assert "report.md" in res.output
    res = runner.invoke(app, ["report", str(tmp_path / "nope.jsonl")])
    assert res.exit_code == 2
    assert "nope.jsonl" in res.output
