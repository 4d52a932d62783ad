"""Every view fits 80 columns: each line at most 80 characters, and no word is cut (`llama-…`)
or split over two lines (a word longer than a line, such as a path in an error message, is
the one exception). A view is rendered at 80 columns and at 400; every word of the narrow
rendering must be a word of the wide one (a split word leaves fragments that are not), and no
word may end in an ellipsis. Views: `--help` of every command, `models`, `backends`, `suites`,
`config`, `lengths`, `show` on every committed results file and JSON document (fp8 study,
replay, replay validation, fidelity, read probe, device record), and `replay`'s
summary (its runs, ranking, crossing, padded-vs-ragged and cost-model tables and the lines on
how far each candidate is validated) on the committed calibration rows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from attnbench.cli import app, common

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
WIDTH = 80
WIDE = 400
BOX = re.compile(r"[\u2500-\u257f]")
COMMANDS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
SHOWN = sorted(
    str(p.relative_to(ROOT))
    for p in RESULTS.rglob("*")
    if p.name.endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz"))
)

runner = CliRunner()


def render(args: list[str], width: int, monkeypatch: pytest.MonkeyPatch) -> str:
    """The output of `attnbench ARGS` in a terminal `width` columns wide."""
    monkeypatch.setattr(common.console, "width", width)
    monkeypatch.setattr(common.err_console, "width", width)
    res = runner.invoke(app, args, env={"COLUMNS": str(width)})
    assert res.exit_code == 0, res.output
    return res.output


def words(text: str) -> set[str]:
    return set(BOX.sub(" ", text).split())


def check_fits(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    narrow = render(args, WIDTH, monkeypatch)
    wide = render(args, WIDE, monkeypatch)
    check_texts(narrow, wide, f"`attnbench {' '.join(args)}`")


def check_texts(narrow: str, wide: str, what: str) -> None:
    """`narrow` (a view at 80 columns) fits and splits no word of `wide` (the same at 400)."""
    long = [ln for ln in narrow.splitlines() if len(ln.rstrip()) > WIDTH]
    assert not long, f"{what}: lines over {WIDTH} columns:\n" + "\n".join(long[:5])
    cut = sorted(w for w in words(narrow) if "…" in w and w != "…")
    assert not cut, f"{what}: cut words {cut[:10]}"
    # a word longer than a line (a path in an error message) can only be broken
    unbreakable = [w for w in words(wide) if len(w) > WIDTH - 8]
    split = sorted(
        w for w in words(narrow) - words(wide) if not any(w in long for long in unbreakable)
    )
    assert not split, f"{what}: words split at {WIDTH} columns: {split[:10]}"


@pytest.mark.parametrize(
    "command", [[], *([c] for c in COMMANDS)], ids=lambda c: c[0] if c else "app"
)
def test_help_fits(command: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    check_fits([*command, "--help"], monkeypatch)


@pytest.mark.parametrize(
    "args",
    [
        ["models"],
        ["backends", "--device", "cpu"],
        ["suites"],
        ["config"],
        ["lengths", "mixed"],
        ["lengths", "trace-prefix:mooncake-conv,2"],
        ["lengths", "trace-prefix:mooncake-conv,2", "--show"],
    ],
    ids=lambda a: " ".join(a),
)
def test_view_fits(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    check_fits(args, monkeypatch)


CALIBRATION = "results/h200-replay-calibration.jsonl.gz"


@pytest.mark.parametrize(
    "args",
    [
        ["--trace", "azure-conv", "--limit", "40", "--rate-scale", "1,2", "--itl-target-ms", "6"],
        ["--trace", "agents:16", "--limit", "40", "--hybrid", "flashinfer:fa2,flash-attn:fa3"],
    ],
    ids=lambda a: " ".join(a),
)
def test_replay_fits(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A few dozen requests of a trace (the whole azure-conv trace takes minutes): the same
    tables and lines as a full replay, with a hybrid's 50-character name among them (given:
    `recommend --engine none` keeps one kernel for both phases on these rows)."""
    monkeypatch.chdir(ROOT)
    check_fits(["replay", CALIBRATION, *args], monkeypatch)
    out = render(["replay", CALIBRATION, *args], WIDTH, monkeypatch)
    if "--hybrid" in args:
        assert "hybrid(prefill" in out
    assert "rank by the rows, paired" in out
    assert "decision (as `attnbench recommend" in out
    assert ("crosses 6 ms" in out) != ("agents:16" in args)  # the crossing table, or
    assert ("padded vs ragged" in out) == ("agents:16" in args)  # the padded twins


@pytest.mark.parametrize("path", SHOWN)
def test_show_fits(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both renderings share one read of the file and one summary (the summary's significance
    tests take seconds on the larger files)."""
    import attnbench.report.summary as summary
    import attnbench.results as results

    read, summarize = results.read_results, summary.summarize_rows
    files: dict[Path, Any] = {}
    summaries: dict[int, Any] = {}

    def read_once(p: Path) -> Any:
        return files[p] if p in files else files.setdefault(p, read(p))

    def summarize_once(rows: Any) -> Any:
        return summaries.setdefault(id(rows), summarize(rows))

    monkeypatch.setattr(results, "read_results", read_once)
    monkeypatch.setattr(summary, "summarize_rows", summarize_once)
    monkeypatch.chdir(ROOT)
    check_fits(["show", path], monkeypatch)


def test_every_committed_results_file_is_shown() -> None:
    assert len(SHOWN) >= 30
    assert "results/h200-gqa-flex.jsonl" in SHOWN
    assert "results/h200-fp8-study.json.gz" in SHOWN
    for doc in ("replay-azure-conv.json", "replay-validation.json.gz", "fidelity.json"):
        assert f"results/h200-{doc}" in SHOWN


# -- issue 49: fp8 --capacity, compare, the tune summary and the recommend index ---------------

WARM, FRESH = "results/h200-default-warm.jsonl.gz", "results/h200-default-fresh.jsonl.gz"


@pytest.mark.parametrize(
    "args",
    [
        ["fp8", "--capacity"],
        ["fp8", "--capacity", "--model", "qwen2.5-7b", "--tp", "4"],
        ["compare", WARM, FRESH],
        ["compare", "results/h200-gqa-flex.jsonl", "results/h200-gqa-flex.jsonl"],
    ],
    ids=lambda a: " ".join(a),
)
def test_issue49_view_fits(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    check_fits(args, monkeypatch)


def test_compare_keeps_every_ratio_and_interval_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    narrow = render(["compare", WARM, FRESH], WIDTH, monkeypatch)
    assert re.search(r"\[\d\.\d{3}-\d\.\d{3}\]", narrow), narrow  # a whole 95% CI
    assert "flash-attn:fa3-contiguous" in narrow
    assert "(not listed: 110 ties and 153 still failing; --all lists them)" in narrow


def test_tune_summary_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tune summary of the committed tune runs (`tune` prints it after its search)."""
    import io

    from rich.console import Console

    from attnbench.cli.common import print_fitted
    from attnbench.cli.tune import tune_table
    from attnbench.results import read_results

    rows = [
        r for f in ("ragged", "fp8") for r in read_results(RESULTS / f"h200-tune-{f}.jsonl.gz").rows
    ]
    texts = []
    for width in (WIDTH, WIDE):
        out = Console(width=width, file=io.StringIO(), color_system=None)
        print_fitted(
            tune_table(rows, title="tuned: committed runs on NVIDIA H200"), keys=2, out=out
        )
        texts.append(out.file.getvalue())  # type: ignore[attr-defined]
    check_texts(texts[0], texts[1], "the tune summary")


def test_recommend_index_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    check_fits(["recommend"], monkeypatch)
