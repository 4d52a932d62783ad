"""`attnbench findings`: every measured figure the README and docs quote, generated from the
committed files (`report.findings`), and `--check`, which fails when the committed document or
the README's generated block differs from what the files give."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from attnbench.cli.app import app
from attnbench.cli.common import (
    EXIT_REGRESSION,
    check_output_file,
    console,
    err_console,
    fail,
    note,
    write_output,
)

if TYPE_CHECKING:
    from attnbench.report.findings import Difference

DEFAULT_OUT = Path("docs/findings.md")
DEFAULT_README = Path("README.md")
DEFAULT_RESULTS = Path("results")


def _generate(
    results: list[Path] | None, out: Path, readme: Path | None
) -> tuple[dict[Path, str], dict[str, str]]:
    """What each target file should hold (the document, and the README with its block), and
    the text files read (GPU test reports, logs)."""
    from attnbench.analysis.frame import NoResultsError
    from attnbench.report.findings import (
        FAILED,
        BlockMarkersError,
        build,
        document,
        load_inputs,
        readme_block,
        splice,
    )
    from attnbench.results import ResultsFileError

    try:
        inputs = load_inputs(results)
    except (NoResultsError, FileNotFoundError, ResultsFileError, ValueError) as exc:
        fail(str(exc))
    sections = build(inputs)
    for s in sections:
        if s.text.startswith(FAILED):
            note(f"section {s.title}: {s.text}")
    label = ", ".join(f"`{p}`" for p in results) if results else "`results/`"
    want = {out: document(sections, label, inputs)}
    if readme is not None:
        if not readme.is_file():
            fail(f"--readme={readme}: no such file")
        link = Path(os.path.relpath(out, readme.parent)).as_posix()
        try:
            block = readme_block(sections, link, inputs)
            want[readme] = splice(readme.read_text(encoding="utf-8"), block, str(readme))
        except BlockMarkersError as exc:
            fail(str(exc))
    return want, inputs.texts


def _gpu_tests_age(results: list[Path] | None, texts: dict[str, str]) -> None:
    """One line per GPU: its last full GPU-test pass, how many commits ago, and a warning when
    it predates the last change to the packages that time kernels (the exit status stays)."""
    from attnbench.report.findings.freshness import gpu_test_freshness

    where = next(iter(results or []), DEFAULT_RESULTS)
    repo = where if where.is_dir() else where.parent
    for age in gpu_test_freshness(texts, repo):
        if age.stale:
            err_console.print(f"[yellow]warning:[/] {escape(age.line())}", highlight=False)
        else:
            note(age.line())


def _basis(results: list[Path] | None) -> int:
    """What the figures rest on (`report.findings.basis`): one line per fraction that its
    latency and header do not give, and per validation figure its rows do not give; returns
    how many lines failed."""
    from attnbench.report.findings.basis import check_basis
    from attnbench.results import ResultsFileError

    try:
        basis = check_basis(results)
    except (OSError, ValueError, ResultsFileError) as exc:
        fail(str(exc))
    for line in basis.lines:
        err_console.print(escape(line), highlight=False, soft_wrap=True)
    if not basis.lines:
        note(
            f"{basis.rows} measured rows: every fraction as latency_us and the header's "
            f"ceilings give; {basis.documents} validation documents ({basis.steps} steps): "
            "every figure as their rows give"
        )
    return len(basis.lines)


def _report(diff: Difference) -> None:
    err_console.print(
        f"{escape(str(diff.path))}: {diff.changed} lines differ from what the files give "
        "(run `attnbench findings` and commit the result):",
        highlight=False,
        soft_wrap=True,
    )
    for line in diff.excerpt:
        err_console.print(f"  {escape(line)}", highlight=False, soft_wrap=True)


@app.command()
def findings(
    results: Annotated[
        list[Path] | None,
        typer.Argument(help="Results files or folders (default: the committed results/)."),
    ] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="The generated document.")] = DEFAULT_OUT,
    readme: Annotated[
        Path | None,
        typer.Option(
            "--readme",
            help="A Markdown file whose generated block (between its findings:begin and "
            "findings:end markers) is rewritten too (default: README.md, when no RESULTS are "
            "given).",
        ),
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Write nothing; exit 1 when --out or the README's block differs from what "
            "the files give, when a row's bandwidth or FLOP/s fraction differs from what its "
            "latency and its header's ceilings give, or when a replay-validation document "
            "states a figure its rows do not give.",
        ),
    ] = False,
) -> None:
    """Every measured figure the README and docs quote, from the committed files."""
    from attnbench.report.findings import difference

    if readme is None and not results:
        readme = DEFAULT_README
    if not check:
        check_output_file(out, "--out")
    want, texts = _generate(results, out, readme)
    _gpu_tests_age(results, texts)
    if check:
        have = {p: p.read_text(encoding="utf-8") if p.is_file() else "" for p in want}
        diffs = [d for p, text in want.items() if (d := difference(p, have[p], text))]
        for d in diffs:
            _report(d)
        if _basis(results) or diffs:
            raise typer.Exit(EXIT_REGRESSION)
        console.print(f"{', '.join(map(str, want))}: as the files give", highlight=False)
        return
    for path, text in want.items():
        write_output(path, text, "--out" if path == out else "--readme")
    console.print(f"wrote {', '.join(map(str, want))}", highlight=False)
