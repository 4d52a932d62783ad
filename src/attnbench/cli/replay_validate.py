"""`attnbench replay-validate`: the replay cost models' per-step error on live GPU steps drawn
from several traces; `--rescore` re-predicts a committed document's steps without a GPU; and the
held-out validation (leave one trace out, `replay.loto`): `--heldout-draw` writes the steps to
time as a suite (CPU), `attnbench run --suite` times them (GPU), `--heldout` scores them (CPU).
Documents go to `runs/replay/` unless `--out` says otherwise (never into the committed
`results/` by default)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from attnbench.cli.app import app
from attnbench.cli.common import check_output_file, console, every_if_all, fail, write_output
from attnbench.cli.paths import runs_dir
from attnbench.cli.replay import _check_live_device

if TYPE_CHECKING:
    from attnbench.replay.costmodel import AttentionCostModel
    from attnbench.replay.deployment import Deployment
    from attnbench.replay.simresult import SimResult

Opt = typer.Option
Arg = typer.Argument


@app.command("replay-validate")
def replay_validate(
    results: Annotated[
        list[Path] | None, Arg(help="Results files or folders with calibration rows.")
    ] = None,
    trace: Annotated[
        list[str] | None,
        Opt("--trace", help="Traces to draw from; repeatable (default: four; held out: four)."),
    ] = None,
    steps: Annotated[int, Opt(min=1, help="Steps to draw per variant (over all traces).")] = 60,
    limit: Annotated[int | None, Opt(min=1, help="Replay the first N requests of each.")] = 2000,
    backend: Annotated[list[str] | None, Opt("--backend", "-b", help="Variants.")] = None,
    model: Annotated[str, Opt(help="Model shape.")] = "llama-3.1-70b",
    tp: Annotated[int, Opt(min=1, help="Tensor-parallel degree.")] = 8,
    kv_dtype: Annotated[str, Opt(help="KV-cache dtype.")] = "bfloat16",
    out: Annotated[
        Path | None, Opt(help="The document (JSON; default: runs/replay/validation*.json).")
    ] = None,
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
    heldout_draw: Annotated[
        Path | None,
        Opt(
            help="Held out: replay the traces (no GPU) and write STEPS-PER-TRACE decode steps "
            "of each as a suite TOML for `attnbench run --suite`."
        ),
    ] = None,
    heldout: Annotated[
        list[Path] | None,
        Opt(
            help="Held out: results files of the timed steps; score each trace against models "
            "fitted on RESULTS and the other traces' steps (no GPU). Repeatable."
        ),
    ] = None,
    steps_per_trace: Annotated[int, Opt(min=1, help="--heldout-draw: steps per trace.")] = 50,
) -> None:
    """Draw replayed decode steps from several traces, time each on the GPU with every variant
    and report each cost model's per-step error (median, p90) against the target. Ctrl-C (or a
    time limit) writes the steps timed so far. With --heldout-draw / --heldout: the validation
    that cannot see its test data (leave one trace out; see `replay.loto`)."""
    from attnbench.analysis.frame import NoResultsError, resolve_paths
    from attnbench.replay.deployment import Deployment

    backend = every_if_all(backend)
    if rescore is None and heldout_draw is None and heldout is None:
        _check_live_device(device, "replay-validate")
    if heldout_draw is not None:
        check_output_file(heldout_draw, "--heldout-draw")
    out = out or runs_dir() / "replay" / _default_name(rescore, heldout)
    check_output_file(out, "--out")
    try:
        paths = resolve_paths([str(p) for p in results] if results else None)
        dep = Deployment(model=model, tp=tp, kv_dtype=kv_dtype)
    except (NoResultsError, FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    if rescore is not None:
        _rescore(rescore, paths, dep, backend or [], out)
    elif heldout_draw is not None:
        _heldout_draw(heldout_draw, paths, dep, trace, steps_per_trace, limit, backend)
    elif heldout is not None:
        _heldout_score(heldout, paths, dep, out)
    else:
        _measure(paths, dep, trace, steps, limit, backend, out, (device, max_time_ms))


def _default_name(rescore: Path | None, heldout: list[Path] | None) -> str:
    if rescore is not None:
        return "validation-rescored.json"
    return "validation-heldout.json" if heldout else "validation.json"


def _replays(
    paths: list[Path],
    dep: Deployment,
    traces: list[str],
    limit: int | None,
    backends: list[str] | None,
    whole_synthetic: bool = False,
    gpu: str | None = None,
) -> tuple[dict[str, SimResult], dict[str, AttentionCostModel]]:
    """Each trace's replay (the main candidate's, at rate scale 1) and the models fitted on
    `gpu`'s rows (default: the GPU with the most rows)."""
    from attnbench.replay.document import ReplayConfig
    from attnbench.replay.pipeline import ReplayError, run_replay

    sims: dict[str, SimResult] = {}
    models: dict[str, AttentionCostModel] = {}
    for t in traces:
        whole = whole_synthetic and t.lower().startswith("synthetic:")
        cfg = ReplayConfig(
            trace=t,
            limit=None if whole else limit,
            deployment=dep,
            backends=tuple(backends or ()),
            gpu=gpu,
        )
        try:
            with console.status(f"replaying {t}"):
                outcome = run_replay(cfg, paths)
        except (ReplayError, ValueError) as exc:
            fail(str(exc))
        sims[t] = outcome.study.sims[outcome.study.main]
        models = dict(outcome.study.models)
    return sims, models


def _measure(
    paths: list[Path],
    dep: Deployment,
    trace: list[str] | None,
    steps: int,
    limit: int | None,
    backend: list[str] | None,
    out: Path,
    timing: tuple[str, float],
) -> None:
    """Replay, draw, time on the GPU and write the live validation document."""
    from attnbench.replay.validate import TRACES, StepError, draw_steps, gpu_timer, measure
    from attnbench.replay.validate import validation_document as document
    from attnbench.report.replay_tables import escape
    from attnbench.results import provenance

    traces = list(trace or TRACES)
    gpu = _timing_gpu(timing[0])
    sims, models = _replays(paths, dep, traces, limit, backend, gpu=_fitting(paths, gpu, dep))
    drawn = draw_steps(sims, dep, -(-steps // len(traces)))
    try:
        timer, close, timed_on = gpu_timer(timing[0], str(out.with_suffix(".jsonl")), timing[1])
    except (RuntimeError, ValueError) as exc:
        fail(str(exc))
    if timed_on != gpu:
        close()
        fail(f"--device={timing[0]}: the session runs on {timed_on}, the models fit {gpu}")
    errs: list[StepError] = []
    interrupted = False
    try:
        measure(drawn, models, timer, lambda msg: console.print(f"[dim]{escape(msg)}[/]"), errs)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        close()
    sources = [str(p) for p in paths]
    doc = document(errs, traces, models, provenance(), sources, complete=not interrupted)
    _write_validation(out, doc)
    if interrupted:
        done = len({(e.trace, e.step) for e in errs})
        console.print(f"note: interrupted after {done} of {len(drawn)} steps", highlight=False)
        raise typer.Exit(130)


def _timing_gpu(device: str) -> str:
    """The name of the GPU `device` is (the one that times the steps)."""
    from attnbench.replay.live import cuda_device

    try:
        return cuda_device(device, "replay-validate needs a CUDA GPU").name
    except (RuntimeError, ValueError) as exc:
        fail(f"--device={device}: {exc}")


def _fitting(
    paths: list[Path], timed_gpu: str | None, dep: Deployment, what: str = "the steps"
) -> str:
    """The GPU whose rows fit the models judging steps timed on `timed_gpu`
    (`replay.fitgpu`): that GPU, else one line naming both and the command that fits it."""
    from attnbench.replay.fitgpu import fitting_gpu
    from attnbench.replay.pipeline import ReplayError
    from attnbench.report.replay_tables import escape

    try:
        gpu, notes = fitting_gpu(paths, timed_gpu, dep, what)
    except ReplayError as exc:
        fail(str(exc))
    for n in notes:
        console.print(f"note: {escape(n)}", highlight=False)
    return gpu


def _write_validation(out: Path, doc: dict[str, object]) -> None:
    """Write a validation document and print its per-variant error summary."""
    import json

    from attnbench.report.replay_tables import escape

    text = json.dumps(doc, indent=1, default=str) + "\n"
    if out.name.endswith(".gz"):  # a committed document stays small (results/textfile reads it)
        _write_gzip(out, text)
    else:
        write_output(out, text, "--out")
    summary = doc["summary"]
    assert isinstance(summary, dict)
    for name, s in summary.items():
        worst = (
            f", worst {s['worst_trace']} p90 {s['worst_p90_abs_err']:.1%}"
            if s.get("worst_trace")
            else ""
        )
        console.print(
            f"{escape(name)}: {s['measured']} steps, median |err| {s['median_abs_err']:.1%}, "
            f"p90 {s['p90_abs_err']:.1%}{worst}, outside range {s['outside_share']:.0%}"
            f"{'' if s['meets_target'] else '  (misses the target)'}",
            highlight=False,
        )
    console.print(f"validation -> {escape(str(out))}", highlight=False)


def _write_gzip(path: Path, text: str) -> None:
    import gzip

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
    except OSError as exc:
        fail(f"--out={path}: writing failed: {exc.strerror or exc}")


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
    gpu = _fitting(paths, _steps_gpu(old), dep, f"the steps of {source.name}")
    try:
        models, _ = fit_for(load_rows(paths, gpu), shape_key(dep))
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


def _steps_gpu(doc: dict[str, object]) -> str | None:
    """The GPU a validation document's steps were timed on (a rescored one: its source's)."""
    rescored = doc.get("rescored_from")
    source = (rescored.get("provenance") if isinstance(rescored, dict) else None) or doc.get(
        "provenance"
    )
    gpu = source.get("gpu") if isinstance(source, dict) else None
    return str(gpu) if gpu else None


def _heldout_draw(
    path: Path,
    paths: list[Path],
    dep: Deployment,
    trace: list[str] | None,
    per_trace: int,
    limit: int | None,
    backend: list[str] | None,
) -> None:
    """`--heldout-draw`: replay each trace, draw its steps, write them as a suite TOML."""
    from attnbench.replay import loto
    from attnbench.report.replay_tables import escape
    from attnbench.results import provenance
    from attnbench.workload.suite import load_suite

    traces = list(trace or loto.HELDOUT_TRACES)
    sims, _ = _replays(paths, dep, traces, limit, backend, whole_synthetic=True)
    drawn = loto.draw(sims, per_trace)
    sha = provenance().get("git_sha", "unknown")
    where = f"at commit {sha} on {', '.join(p.name for p in paths)}"
    extra = load_suite(loto.CALIBRATION_SUITE).groups if dep == loto.CALIBRATED else []
    text = loto.steps_suite(drawn, dep, where, extra)
    write_output(path, text, "--heldout-draw")
    for t, s in loto.kv_summary(drawn).items():
        console.print(
            f"{escape(t)}: {s['steps']:.0f} steps, up to {s['max_requests']:.0f} requests, "
            f"{s['max_kv'] / 1e6:.2f} M KV tokens, longest {s['max_longest']:.0f}",
            highlight=False,
        )
    earlier = _earlier_steps(paths)
    console.print(
        f"{len(drawn)} steps -> {escape(str(path))} ({loto.overlap(drawn, earlier)} already "
        f"timed by an earlier validation); time them with `attnbench run --suite {path}`",
        highlight=False,
    )


def _earlier_steps(paths: list[Path]) -> list[list[int]]:
    """KV lengths of every step the validation documents beside `paths` timed."""
    from attnbench.replay.validation_doc import find_validation
    from attnbench.results import read_json

    out: list[list[int]] = []
    for p in find_validation(paths):
        try:
            out += [list(s.get("kv_lens") or []) for s in read_json(p).get("steps", [])]
        except (OSError, ValueError, AttributeError):
            continue
    return out


def _heldout_score(live: list[Path], paths: list[Path], dep: Deployment, out: Path) -> None:
    """`--heldout`: leave one trace out over the timed steps, the document to `out`."""
    from attnbench.replay import loto
    from attnbench.replay.pipeline import LoadedRows, ReplayError, load_rows, shape_key
    from attnbench.report.replay_tables import escape
    from attnbench.results import provenance

    try:
        timed = load_rows(live)
    except (ReplayError, OSError, ValueError) as exc:
        fail(f"--heldout: {exc}")
    if timed.notes:  # steps of several GPUs: one GPU's are judged
        console.print(
            f"note: held-out steps of several GPUs; judging {escape(timed.gpu)}'s only "
            "(pass one GPU's files)",
            highlight=False,
        )
    gpu = _fitting(paths, timed.gpu, dep, "the held-out steps")
    try:
        calib = load_rows(paths, gpu)
    except (ReplayError, OSError, ValueError) as exc:
        fail(f"--heldout: {exc}")
    key = shape_key(dep)
    rows, _ = loto.split_rows(calib.rows)  # a held-out step is never a calibration row
    _, by_trace = loto.split_rows(r for r in timed.rows if key.matches(r.spec, any_page=True))
    if len(by_trace) < 2:
        fail(
            f"--heldout {', '.join(map(str, live))}: held-out steps of {len(by_trace)} trace(s) "
            f"at {key.describe()}; leaving one out needs two or more (rows labelled "
            "heldout:TRACE:stepN, from `attnbench run --suite` on a --heldout-draw file)"
        )
    headers = calib.headers + [h for h in timed.headers if h not in calib.headers]
    calibration = LoadedRows(rows, headers, calib.gpu, [])
    with console.status(f"fitting {len(by_trace)} folds"):
        errors, folds = loto.leave_one_trace_out(calibration, by_trace, key)
    doc = loto.heldout_document(
        errors, folds, provenance(), [str(p) for p in paths], [str(p) for p in live]
    )
    _write_validation(out, doc)
