"""`attnbench report`, `compare` and `recommend`: stored results in, decisions out (no GPU)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from attnbench.cli.app import app
from attnbench.cli.common import (
    check_output_dir,
    check_output_file,
    console,
    fail,
    note,
    write_output,
)

if TYPE_CHECKING:
    import pandas as pd

    from attnbench.analysis.compare import Comparison
    from attnbench.analysis.engine_rank import EngineRecommendation
    from attnbench.analysis.frame import Loaded
    from attnbench.backends.engine_paths import Engine
    from attnbench.report.blocks import Block

ResultsArg = Annotated[
    list[Path] | None,
    typer.Argument(
        help="Results files or folders (default: $ATTNBENCH_RESULTS, else ./results/*.jsonl). "
        ".json documents (fp8 numerics, replay) are passed to the report's sections."
    ),
]


def _load(results: list[Path] | None) -> Loaded:
    from attnbench.analysis.frame import NoResultsError, load, resolve_paths
    from attnbench.results import ResultsFileError

    try:
        loaded = load(resolve_paths(results))
    except (NoResultsError, FileNotFoundError, ResultsFileError) as exc:
        fail(str(exc))
    for w in loaded.warnings:
        note(w)
    return loaded


@app.command()
def report(
    results: ResultsArg = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path(
        "attnbench-report"
    ),
) -> None:
    """Markdown + self-contained HTML report with plots, from stored results."""
    from attnbench.report.build import write_report

    check_output_dir(out, "--out")
    loaded = _load(results)
    from attnbench.results import is_document_path

    named = {p for p in results or [] if is_document_path(p)}
    documents = _documents(loaded.extras, named)
    if loaded.frame.empty and not documents:
        what = "no result rows (only headers)" if loaded.headers else "no result rows"
        fail(
            f"{_names(loaded.paths)}: {what} and no fp8 study or replay document: nothing to report"
        )
    try:
        with console.status("building the report (figures, statistics)"):
            md, page = write_report(loaded, out)
    except OSError as exc:
        fail(f"--out={out}: writing the report failed: {exc.strerror or exc}")
    console.print(
        f"report: {escape(str(md))} and {escape(str(page))} ({len(loaded.frame)} rows)",
        highlight=False,
    )


def _documents(paths: list[Path], named: set[Path]) -> list[Path]:
    """The .json files the report has a section for (fp8 studies, replay documents). A file
    named on the command line that is neither is said to be skipped (files found in a folder,
    such as `attnbench hw --out` facts, are skipped quietly)."""
    from attnbench.fp8study import DOCUMENT_TYPE
    from attnbench.replay.study import SCHEMA
    from attnbench.replay.validate import SCHEMA as VALIDATION_SCHEMA
    from attnbench.results import read_json

    found: list[Path] = []
    for p in paths:
        try:
            data = read_json(p)
        except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            why = f"not a JSON document ({type(exc).__name__})"
        else:
            known = isinstance(data, dict) and (
                data.get("schema") in (SCHEMA, VALIDATION_SCHEMA)
                or data.get("type") == DOCUMENT_TYPE
            )
            if known:
                found.append(p)
                continue
            why = "neither an fp8 study nor a replay document"
        if p in named:
            note(f"{p}: {why}: skipped")
    return found


def _names(paths: list[Path]) -> str:
    shown = ", ".join(str(p) for p in paths[:3])
    return shown + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")


@app.command()
def compare(
    a: Annotated[Path, typer.Argument(help="Baseline results file or folder.")],
    b: Annotated[Path, typer.Argument(help="New results file or folder.")],
    threshold: Annotated[
        str, typer.Option(help="Exit 1 when a significant slowdown exceeds this (5% or 0.05).")
    ] = "5%",
    noise_floor: Annotated[
        str, typer.Option(help="Differences below this are never called.")
    ] = "1%",
    show_all: Annotated[bool, typer.Option("--all", help="List ties too.")] = False,
) -> None:
    """Per (case, backend): B/A with a 95% CI; faster/slower only when significant and beyond
    the noise. Exit 1 on a regression past --threshold or ok -> failed; 2 on bad input."""
    from attnbench.analysis.compare import compare_frames, parse_threshold

    try:
        thr = parse_threshold(threshold, "--threshold")
        floor = parse_threshold(noise_floor, "--noise-floor")
    except ValueError as exc:
        fail(str(exc))
    fa, fb = _load([a]).frame, _load([b]).frame
    if fa.empty or fb.empty:
        fail(f"{a if fa.empty else b}: no result rows to compare")
    comp = compare_frames(fa, fb, threshold=thr, noise_floor=floor)
    if not any(e.status_a and e.status_b for e in comp.entries):
        fail(f"{a} and {b} share no (case, backend) pair: nothing to compare")
    _print_comparison(comp, show_all)
    raise typer.Exit(1 if comp.regressions else 0)


_STYLE = {"faster": "green", "slower": "red", "broken": "bold red", "fixed": "green"}


def _print_comparison(comp: Comparison, show_all: bool) -> None:
    from rich.table import Table

    from attnbench.analysis.frame import fmt_us
    from attnbench.report.table import short_case

    quiet = {"tie", "still failing"}
    shown = [
        e for e in comp.entries if show_all or len(comp.entries) <= 40 or e.outcome not in quiet
    ]
    t = Table(title=escape(f"B vs A ({comp.gpus[1]} vs {comp.gpus[0]})"), header_style="bold")
    for col in ("case", "backend", "A", "B", "B/A [95% CI]", "p", "verdict"):
        t.add_column(col, justify="right" if col in ("A", "B", "p") else "left", overflow="fold")
    order = {"broken": 0, "slower": 1, "status changed": 2, "faster": 3, "fixed": 4}
    for e in sorted(shown, key=lambda e: (order.get(e.outcome, 9), e.case_id, e.backend)):
        est = e.estimate
        ratio = f"{est.ratio:.3f} [{est.ci_low:.3f}-{est.ci_high:.3f}]" if est else "-"
        p = f"{est.p_value:.3g}" if est and est.p_value is not None else "-"
        verdict = str(e.outcome)
        if e.outcome in ("broken", "fixed", "status changed"):
            verdict += f" ({e.status_a} -> {e.status_b})"
        if e.within_spread:
            verdict += " (within spread)"
        if e.regression:
            verdict += " REGRESSION"
        style = _STYLE.get(e.outcome, "")
        t.add_row(
            escape(short_case(e.spec) if e.spec else e.case_id),
            escape(e.backend),
            fmt_us(e.median_a_us),
            fmt_us(e.median_b_us),
            ratio,
            p,
            f"[{style}]{verdict}[/]" if style else verdict,
        )
    console.print(t)
    if len(shown) < len(comp.entries):
        console.print(f"({len(comp.entries) - len(shown)} ties not listed; --all lists them)")
    counts = comp.counts()
    console.print("summary: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if comp.overall:
        o = comp.overall
        console.print(
            f"overall B/A geomean {o.ratio:.3f} (95% CI {o.ci_low:.3f}-{o.ci_high:.3f}) over "
            f"{o.method.split()[-2]} timed pairs: {o.verdict}"
        )
    for n in comp.notes:
        note(n)
    thr = f"{100 * comp.threshold:g}%"
    if comp.regressions:
        console.print(
            f"[bold red]{len(comp.regressions)} regression(s)[/] (slower beyond "
            f"{thr} and significant, or ok -> failed): exit 1"
        )
    else:
        console.print(f"no regression beyond {thr}: exit 0")


@app.command()
def recommend(
    results: ResultsArg = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the decision as JSON.")
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option(
            help="vllm or sglang: rank only what that engine deploys (its backends' own kernel "
            "paths), with the command line, per CUDA-graph bucket."
        ),
    ] = None,
    trace: Annotated[
        str | None,
        typer.Option(
            help="With --engine: weight the capture buckets by how often this trace's running "
            "batch falls in each (azure-code, azure-conv, mooncake-conv, agents:N, a file), "
            "replaying its first 2000 requests on the rows' model; default: uniform."
        ),
    ] = None,
) -> None:
    """Decision matrix per workload class, crossovers, hybrid plan and vLLM/SGLang flags,
    all derived from rows that passed the accuracy gate."""
    if engine is not None:
        _recommend_engine(results, json_out, engine, trace)
        return
    if trace is not None:
        fail("--trace weights the CUDA-graph buckets of --engine vllm|sglang: pass --engine too")
    from attnbench.analysis.hybrid import recommend as decide
    from attnbench.report.per_model_section import model_blocks
    from attnbench.report.sections import recommendation_blocks

    if json_out is not None:
        check_output_file(json_out, "--json")
    loaded = _load(results)
    with console.status("ranking backends (bootstrap confidence intervals)"):
        recs = decide(loaded.frame)
    if not recs:
        fail("no row passed the accuracy gate: nothing to recommend from")
    for rec in recs:
        console.rule(f"[bold]{escape(rec.gpu)}")
        for block in model_blocks(rec) + recommendation_blocks(rec):
            _print_block(block)
    if json_out:
        from attnbench.results import dumps

        write_output(json_out, dumps([_as_json(r) for r in recs], indent=2) + "\n", "--json")
        console.print(f"decision written to {escape(str(json_out))}", highlight=False)


def _recommend_engine(
    results: list[Path] | None, json_out: Path | None, engine: str, trace: str | None
) -> None:
    from attnbench.analysis.engine_rank import rank_engine
    from attnbench.backends.engine_paths import ENGINES
    from attnbench.replay.engine_trace import check_trace
    from attnbench.report.engine_section import engine_blocks, engine_json

    name = engine.strip().lower()
    if name not in ENGINES:
        fail(f"--engine={engine!r} is not known; allowed: {', '.join(ENGINES)}")
    if trace is not None and (why := check_trace(trace)) is not None:
        fail(why)
    if json_out is not None:
        check_output_file(json_out, "--json")
    loaded = _load(results)
    eng: Engine = "vllm" if name == "vllm" else "sglang"
    if trace is None:
        recs = rank_engine(loaded.frame, eng)
    else:
        recs = _traced(results, loaded.frame, eng, trace)
    if not recs:
        fail("no row passed the accuracy gate: nothing to recommend from")
    for rec in recs:
        console.rule(f"[bold]{escape(rec.gpu)}")
        for block in engine_blocks(rec):
            _print_block(block)
    if json_out:
        from attnbench.results import dumps

        write_output(json_out, dumps([engine_json(r) for r in recs], indent=2) + "\n", "--json")
        console.print(f"decision written to {escape(str(json_out))}", highlight=False)


def _traced(
    results: list[Path] | None, frame: pd.DataFrame, engine: Engine, trace: str
) -> list[EngineRecommendation]:
    """Per GPU, the buckets weighted by `trace`'s running batch on that GPU's rows."""
    from attnbench.analysis.engine_rank import rank_engine
    from attnbench.analysis.frame import ok_rows, resolve_paths
    from attnbench.replay.engine_trace import running_batches
    from attnbench.replay.pipeline import ReplayError

    ok = ok_rows(frame)
    recs = []
    for gpu in sorted(set(ok["gpu"])):
        try:
            with console.status(f"replaying {trace} for the running batch on {gpu}"):
                run = running_batches(resolve_paths(results), gpu, engine, trace)
        except ReplayError as exc:
            fail(str(exc))
        recs += rank_engine(frame[frame["gpu"] == gpu], engine, run.histogram, run.source())
    return recs


def _rich(text: str) -> str:
    from rich.markup import escape

    return re.sub(r"\*\*(.+?)\*\*", r"[bold]\1[/]", escape(str(text)))


def _print_block(block: Block) -> None:
    from rich.table import Table as RichTable

    from attnbench.report.blocks import Code, Table, Text

    if isinstance(block, Text):
        console.print(_rich(block.markdown), soft_wrap=True)
    elif isinstance(block, Code):
        console.print(block.text, style="cyan", soft_wrap=True, highlight=False, markup=False)
    elif isinstance(block, Table):
        caption = escape(block.caption) if block.caption else None
        t = RichTable(title=caption, header_style="bold", show_lines=True)
        for h in block.headers:
            t.add_column(escape(str(h)), overflow="fold")
        for row in block.rows:
            t.add_row(*(_rich(c) for c in row))
        console.print(t)


def _as_json(rec: Any) -> dict[str, Any]:
    from attnbench.analysis.engines import export

    plan = rec.plan
    return {
        "gpu": rec.gpu,
        "models": [m.as_dict(rec.gpu) for m in rec.models],
        "classes": [
            {
                "class": r.cls.name,
                "rule": r.cls.rule,
                "cases": r.n_cases,
                "winner": r.winner,
                "runner_up": r.runner_up,
                "margin": None if r.margin is None else r.margin.__dict__,
                "tie": r.is_tie,
                "standings": [s.__dict__ for s in r.standings],
                "crossovers": [c.__dict__ for c in r.crossovers],
            }
            for r in rec.classes
        ],
        "plan": {
            "prefill_backend": plan.prefill_backend,
            "decode_backend": plan.decode_backend,
            "kv_dtype": plan.kv_dtype,
            "page_size": plan.page_size,
            "choices": [c.__dict__ for c in plan.choices],
        },
        "engines": [{"engine": e.engine, "args": e.args, "notes": e.notes} for e in export(plan)],
    }
