"""`attnbench replay-validate`: the replay cost models' per-step error on live GPU steps drawn
from several traces, and `--rescore` to re-predict a committed document's steps without a GPU."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from attnbench.cli.app import app
from attnbench.cli.common import check_output_file, console, fail, write_output
from attnbench.cli.replay import _check_live_device

if TYPE_CHECKING:
    from attnbench.replay.deployment import Deployment

Opt = typer.Option
Arg = typer.Argument


@app.command("replay-validate")
def replay_validate(
    results: Annotated[
        list[Path] | None, Arg(help="Results files or folders with calibration rows.")
    ] = None,
    trace: Annotated[
        list[str] | None, Opt("--trace", help="Traces to draw from; repeatable (default: four).")
    ] = None,
    steps: Annotated[int, Opt(min=1, help="Steps to draw per variant (over all traces).")] = 60,
    limit: Annotated[int | None, Opt(min=1, help="Replay the first N requests of each.")] = 2000,
    backend: Annotated[list[str] | None, Opt("--backend", "-b", help="Variants.")] = None,
    model: Annotated[str, Opt(help="Model shape.")] = "llama-3.1-70b",
    tp: Annotated[int, Opt(min=1, help="Tensor-parallel degree.")] = 8,
    kv_dtype: Annotated[str, Opt(help="KV-cache dtype.")] = "bfloat16",
    out: Annotated[Path, Opt(help="The validation document (JSON).")] = Path(
        "results/replay/validation.json"
    ),
    device: Annotated[str, Opt(help="auto, cuda, cuda:N.")] = "auto",
    max_time_ms: Annotated[
        float, Opt(min=1.0, help="Timed calls per variant and step, at most (ms).")
    ] = 100.0,
    rescore: Annotated[
        Path | None,
        Opt(
            help="A validation document: re-predict its measured steps with cost models refitted "
            "on RESULTS (no GPU; the measurements are kept)."
        ),
    ] = None,
) -> None:
    """Draw replayed decode steps from several traces, time each on the GPU with every variant
    and report each cost model's per-step error (median, p90) against the target. Ctrl-C (or a
    time limit) writes the steps timed so far."""
    from attnbench.analysis.frame import NoResultsError, resolve_paths
    from attnbench.cli.replay_tables import escape
    from attnbench.replay.deployment import Deployment
    from attnbench.replay.document import ReplayConfig
    from attnbench.replay.pipeline import ReplayError, run_replay
    from attnbench.replay.validate import (
        TRACES,
        StepError,
        draw_steps,
        gpu_timer,
        measure,
        validation_document,
    )
    from attnbench.results import provenance

    if rescore is None:
        _check_live_device(device)
    check_output_file(out, "--out")
    traces = list(trace or TRACES)
    try:
        paths = resolve_paths([str(p) for p in results] if results else None)
        dep = Deployment(model=model, tp=tp, kv_dtype=kv_dtype)
    except (NoResultsError, FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    if rescore is not None:
        _rescore(rescore, paths, dep, backend or [], out)
        return
    sims, models = {}, {}
    for t in traces:
        cfg = ReplayConfig(trace=t, limit=limit, deployment=dep, backends=tuple(backend or ()))
        try:
            with console.status(f"replaying {t}"):
                outcome = run_replay(cfg, paths)
        except (ReplayError, ValueError) as exc:
            fail(str(exc))
        sims[t] = outcome.study.sims[outcome.study.main]
        models = outcome.study.models
    drawn = draw_steps(sims, dep, -(-steps // len(traces)))
    try:
        timer, close, _ = gpu_timer(device, str(out.with_suffix(".jsonl")), max_time_ms)
    except (RuntimeError, ValueError) as exc:
        fail(str(exc))
    errs: list[StepError] = []
    interrupted = False
    try:
        measure(drawn, models, timer, lambda msg: console.print(f"[dim]{escape(msg)}[/]"), errs)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        close()
    doc = validation_document(
        errs, traces, models, provenance(), [str(p) for p in paths], complete=not interrupted
    )
    _write_validation(out, doc)
    if interrupted:
        steps = len({(e.trace, e.step) for e in errs})
        console.print(f"note: interrupted after {steps} of {len(drawn)} steps", highlight=False)
        raise typer.Exit(130)


def _write_validation(out: Path, doc: dict[str, object]) -> None:
    """Write a validation document and print its per-variant error summary."""
    import json

    from attnbench.cli.replay_tables import escape

    write_output(out, json.dumps(doc, indent=1, default=str) + "\n", "--out")
    summary = doc["summary"]
    assert isinstance(summary, dict)
    for name, s in summary.items():
        console.print(
            f"{escape(name)}: {s['measured']} steps, median |err| {s['median_abs_err']:.1%}, "
            f"p90 {s['p90_abs_err']:.1%}, outside range {s['outside_share']:.0%}"
            f"{'' if s['meets_target'] else '  (misses the target)'}",
            highlight=False,
        )
    console.print(f"validation -> {escape(str(out))}", highlight=False)


def _rescore(
    source: Path, paths: list[Path], dep: Deployment, backends: list[str], out: Path
) -> None:
    """`replay-validate --rescore`: the document's measured steps, re-predicted by cost models
    refitted on `paths` at `dep`'s shape."""
    from attnbench.replay.pipeline import fit_for, load_rows, shape_key
    from attnbench.replay.validate import rescore, validation_document
    from attnbench.replay.validation_doc import is_validation_document
    from attnbench.results import provenance, read_json

    try:
        old = read_json(source)
    except (OSError, ValueError) as exc:
        fail(f"--rescore {source}: not a JSON document ({type(exc).__name__})")
    if not is_validation_document(old):
        fail(f"--rescore {source}: not a replay-validate document")
    steps = [s for s in old.get("steps", []) if not backends or s.get("backend") in backends]
    try:
        models, _ = fit_for(load_rows(paths), shape_key(dep))
        errs = rescore(steps, models)
    except ValueError as exc:
        fail(f"--rescore {source}: {exc}")
    used = {e.backend for e in errs}
    doc = validation_document(
        errs, list(old.get("traces", [])), {n: m for n, m in models.items() if n in used},
        provenance(), [str(p) for p in paths], complete=bool(old.get("complete", True)),
    )  # fmt: skip
    doc["rescored_from"] = {"path": str(source), "provenance": old.get("provenance")}
    _write_validation(out, doc)
