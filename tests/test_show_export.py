"""`attnbench show`, `export`, `--version`, the end-of-run summary and where runs go."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest
from rich.console import Console
from tests.fixtures_results import header, row, spec, write_results
from typer.testing import CliRunner

from attnbench.cli import app
from attnbench.cli.export import EXPORT_COLUMNS
from attnbench.cli.paths import RUNS_DIR, runs_dir
from attnbench.report.listing import listing_lines
from attnbench.report.summary import ceiling_fraction, render_summary, summarize_rows
from attnbench.report.units import fmt_bandwidth, fmt_compute
from attnbench.results import ResultRow, is_results_path, is_trials_name, read_results

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted(
    p
    for p in (ROOT / "results").rglob("*.jsonl*")
    if is_results_path(p) and not is_trials_name(p.name)
)


def _render(lines: list[object], width: int) -> str:
    console = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    for line in lines:
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    return console.export_text()


def _fits(text: str, width: int) -> None:
    long = [line for line in text.splitlines() if len(line) > width]
    assert not long, f"{len(long)} lines wider than {width}: {long[:3]}"


def test_there_are_committed_results_to_show() -> None:
    assert len(COMMITTED) >= 10


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name)
def test_show_prints_every_committed_file_at_80_columns(path: Path) -> None:
    rows = read_results(path).rows
    text = _render(list(listing_lines(rows, 80, include_unsupported=True)), 80)
    _fits(text, 80)
    for r in rows:
        assert r.backend[:20] in text
        if r.status == "ok" and r.latency_us is not None:
            assert f"{r.latency_us:.1f}" in text.split(), (r.backend, r.case_id)
    summary = render_summary(summarize_rows(rows), width=80)
    assert all(len(line) <= 80 for line in summary), [x for x in summary if len(x) > 80]


def test_show_command_at_80_and_160_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    path = ROOT / "results" / "h200-brief.jsonl.gz"
    rows = read_results(path).rows
    texts = {}
    for width in (80, 160):
        console = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
        monkeypatch.setattr("attnbench.cli.show.console", console)
        res = runner.invoke(app, ["show", str(path)])
        assert res.exit_code == 0, res.output
        texts[width] = console.export_text()
        _fits(texts[width], width)
    narrow_header = next(line for line in texts[80].splitlines() if "median µs" in line)
    wide_header = next(line for line in texts[160].splitlines() if "median µs" in line)
    assert "rel err" not in narrow_header
    assert "rel err" in wide_header
    assert "ran" in wide_header.split()
    assert "Summary of 24 cases" in texts[80]
    ok = [r for r in rows if r.status == "ok"]
    assert all(f"{r.latency_us:.1f}" in texts[80] for r in ok if r.latency_us is not None)
    # unsupported rows are counted, and listed with --all
    hidden = [r for r in rows if r.status == "unsupported"]
    assert f"{len(hidden)} (case, variant) pairs did not apply" in texts[80].replace("\n  ", " ")
    assert hidden[0].reason[:30] not in texts[80].replace("\n    ", " ")


def test_show_bad_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "x.jsonl"
    bad.write_text("not json\n")
    res = runner.invoke(app, ["show", str(bad)])
    assert res.exit_code == 2
    assert "x.jsonl:1" in res.output
    assert "Traceback" not in res.output


def _case_rows() -> list[ResultRow]:
    s = spec("decode", [4096] * 32, dtype="bfloat16", kv_dtype="bfloat16")
    rows = [
        row(s, "flash-attn:fa3", scale=1.0),
        row(s, "flashinfer:tc", scale=1.5),
        row(s, "sdpa:cudnn", scale=2.0),
    ]
    auto = row(s, "flashinfer:tc", scale=1.8).model_copy(update={"backend": "flashinfer:auto"})
    broken = ResultRow(
        run_id="fake-h200",
        case_id=s.case_id,
        backend="flashinfer:xqa",
        status="mismatch",
        reason="rel_l2_err 2.0e-01 exceeds budget 4.0e-03",
        spec=s.model_dump(mode="json"),
    )
    skipped = broken.model_copy(
        update={"backend": "flashinfer:trtllm-gen", "status": "unsupported", "reason": "SM100"}
    )
    return [*rows, auto, broken, skipped]


def test_bandwidth_fraction_is_of_the_read_ceiling_where_the_run_measured_one() -> None:
    decode = row(spec("decode", [4096] * 8), "flash-attn:fa3")
    assert decode.bandwidth_frac_measured is not None
    assert ceiling_fraction(decode) == (decode.bandwidth_frac_measured, "copy")
    read = decode.model_copy(update={"bandwidth_frac_read": 0.97})
    assert ceiling_fraction(read) == (0.97, "read")


def test_summary_names_winner_ratios_and_failures() -> None:
    rows = _case_rows()
    summary = summarize_rows(rows)
    (case,) = summary.cases
    fastest = min((r for r in rows if r.status == "ok"), key=lambda r: r.latency_us or 0)
    assert case.winner.startswith(fastest.backend)
    assert case.latency_us == fastest.latency_us
    by_backend = {r.backend: r.latency_us or 0.0 for r in rows if r.status == "ok"}
    ok = sorted(by_backend, key=by_backend.__getitem__)
    runner_up, default = case.versus
    assert runner_up.variant.startswith(ok[1])
    assert runner_up.significant
    assert runner_up.ratio == pytest.approx(by_backend[ok[1]] / by_backend[ok[0]])
    assert default.variant.startswith("flashinfer:auto")
    assert ok[1] != "flashinfer:auto"
    assert default.significant
    assert default.ratio == pytest.approx(by_backend["flashinfer:auto"] / by_backend[ok[0]])
    assert summary.not_applicable == 1
    assert [(f.backend, f.status) for f in summary.failures] == [("flashinfer:xqa", "mismatch")]
    text = "\n".join(render_summary(summary, width=80))
    assert f"{runner_up.ratio:.2f}x faster than runner-up {ok[1]}" in text
    assert "faster than FlashInfer's default flashinfer:auto" in text
    assert "mismatch flashinfer:xqa" in text
    assert "1 (case, variant) pairs did not apply" in text


def test_summary_calls_a_tie_when_not_significant() -> None:
    s = spec("decode", [1024] * 8, dtype="bfloat16", kv_dtype="bfloat16")
    a = row(s, "flash-attn:fa3", noise=0.05, seed=1)
    b = row(s, "flash-attn:fa3", noise=0.05, seed=2).model_copy(update={"backend": "x:y"})
    (case,) = summarize_rows([a, b]).cases
    (versus,) = case.versus
    assert not versus.significant
    assert "tie with runner-up" in versus.describe()


def test_summary_never_crowns_the_oracle() -> None:
    """The reference is timed on the CPU as a baseline but is no serving kernel: the fastest
    kernel wins even when the oracle is faster, and a case where only it ran says so."""
    s = spec("decode", [1024] * 8, dtype="bfloat16", kv_dtype="bfloat16")
    oracle = row(s, "flash-attn:fa3").model_copy(update={"backend": "reference"})
    slow = row(s, "flash-attn:fa3", scale=3.0)
    (case,) = summarize_rows([oracle, slow]).cases
    assert case.winner == "flash-attn:fa3"
    assert case.passed == 1
    summary = summarize_rows([oracle])
    assert summary.cases == []
    text = "\n".join(render_summary(summary))
    assert "no serving kernel ran here (only the reference" in text
    assert "Summary of 1 cases" in text


def test_cpu_rates_are_readable() -> None:
    assert fmt_bandwidth(0.812) == "812 MB/s"
    assert fmt_bandwidth(4593.2) == "4593 GB/s"
    assert fmt_bandwidth(3.1e-4) == "310 kB/s"
    assert fmt_compute(0.0125) == "12.5 GFLOP/s"
    assert fmt_compute(154.49) == "154 TFLOP/s"
    assert fmt_bandwidth(None) == "-"
    s = spec("decode", [64] * 2, dtype="bfloat16", kv_dtype="bfloat16")
    cpu = row(s, "flash-attn:fa3").model_copy(update={"bandwidth_gbps": 0.0021, "tflops": 4e-5})
    text = _render(list(listing_lines([cpu], 120)), 120)
    assert "2.10 MB/s" in text
    assert "40.0 MFLOP/s" in text
    assert "0 GB/s" not in text
    assert "0.0 TFLOP/s" not in text


def test_export_csv_has_one_flat_row_per_result(tmp_path: Path) -> None:
    src = ROOT / "results" / "h200-brief.jsonl.gz"
    out = tmp_path / "sub" / "brief.csv"
    res = runner.invoke(
        app, ["export", str(src), str(ROOT / "results/archive/h200-tune.jsonl"), "--csv", str(out)]
    )
    assert res.exit_code == 0, res.output
    with out.open(newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames or ()) == EXPORT_COLUMNS
        records = list(reader)
    brief = read_results(src)
    tune = read_results(ROOT / "results/archive/h200-tune.jsonl")
    assert len(records) == len(brief.rows) + len(tune.rows)
    first_ok = next(r for r in brief.rows if r.status == "ok")
    rec = next(
        x for x in records if x["case_id"] == first_ok.case_id and x["backend"] == first_ok.backend
    )
    assert float(rec["latency_us"]) == pytest.approx(first_ok.latency_us)
    assert float(rec["bandwidth_gbps"]) == pytest.approx(first_ok.bandwidth_gbps)
    assert rec["status"] == "ok"
    assert rec["kind"] == first_ok.spec.kind
    assert rec["commit"] == str(brief.header_of(first_ok).provenance.get("git_sha", ""))  # type: ignore[union-attr]
    unsupported = next(x for x in records if x["status"] == "unsupported")
    assert unsupported["latency_us"] == ""
    assert unsupported["reason"]


def test_export_checks_the_output_before_reading(tmp_path: Path) -> None:
    res = runner.invoke(app, ["export", str(tmp_path / "missing.jsonl"), "--csv", str(tmp_path)])
    assert res.exit_code == 2
    assert "--csv" in res.output
    assert "is a directory" in res.output
    res = runner.invoke(
        app, ["export", str(tmp_path / "missing.jsonl"), "--csv", str(tmp_path / "o.csv")]
    )
    assert res.exit_code == 2
    assert "missing.jsonl" in res.output
    assert "Traceback" not in res.output


def test_version_names_the_version() -> None:
    from attnbench import __version__

    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0
    assert res.output.startswith(f"attnbench {__version__}")


def test_runs_go_to_an_ignored_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATTNBENCH_RESULTS", raising=False)
    assert runs_dir() == RUNS_DIR
    monkeypatch.setenv("ATTNBENCH_RESULTS", str(tmp_path / "mine"))
    assert runs_dir() == tmp_path / "mine"
    monkeypatch.setenv("ATTNBENCH_RESULTS", str(tmp_path / "*.jsonl"))
    assert runs_dir() == RUNS_DIR
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert f"/{RUNS_DIR}/" in ignored


def test_synthetic_file_round_trip_through_show(tmp_path: Path) -> None:
    path = write_results(tmp_path / "r.jsonl", _case_rows(), header())
    res = runner.invoke(app, ["show", str(path), "--all"])
    assert res.exit_code == 0, res.output
    assert "flashinfer:trtllm-gen" in res.output
    assert "SM100" in res.output


def test_summary_never_names_a_contiguous_baseline_the_fastest() -> None:
    """In the brief's mixed decode batch, FA3 on a contiguous copy ran faster than paged FA3;
    no engine runs it, so the paged kernel wins and the baseline is a note of what paging
    costs (issue 31: `show` summaries named fa3-contiguous)."""
    rows = read_results(ROOT / "results" / "h200-brief.jsonl.gz").rows
    summary = summarize_rows(rows)
    assert all("-contiguous" not in c.winner for c in summary.cases)
    mixed = [c for c in summary.cases if c.label.startswith("decode mixed(256..65536)")]
    assert mixed
    base = {
        r.case_id: r.latency_us or 0.0
        for r in rows
        if r.backend == "flash-attn:fa3-contiguous" and r.status == "ok"
    }
    for case in mixed:
        if base.get(case.case_id, float("inf")) < case.latency_us:
            assert "baseline flash-attn:fa3-contiguous" in case.default_note
    text = "\n".join(render_summary(summary, width=80))
    assert "baseline flash-attn:fa3-contiguous" in text
