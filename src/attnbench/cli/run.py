"""`attnbench run`: settings -> cases -> sweep -> results file and table."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from attnbench.cli.app import app
from attnbench.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_NOTHING_RAN,
    RowWriteFailed,
    check_output_file,
    console,
    fail,
    flag_for,
    note,
)

if TYPE_CHECKING:
    from attnbench.config import Settings
    from attnbench.workload.spec import WorkloadSpec

WORKLOAD_FIELDS = (
    "batch_size",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "context_lengths",
    "fp8_mode",
    "page_size",
    "model",
    "tp",
    "kinds",
    "lengths",
    "dtype",
    "kv_dtype",
    "kv_layout",
    "append_len",
    "prefill_tokens",
)

Opt = typer.Option


@app.command()
def run(
    suite: Annotated[str | None, Opt(help="Built-in suite name or TOML path.")] = None,
    backend: Annotated[
        list[str] | None, Opt("--backend", "-b", help="Backend or variant; repeatable.")
    ] = None,
    model: Annotated[str | None, Opt(help="Model shape, e.g. llama-3.1-70b.")] = None,
    tp: Annotated[int | None, Opt(help="Tensor-parallel degree.")] = None,
    kind: Annotated[
        list[str] | None, Opt("--kind", "-k", help="decode, prefill, append; repeatable.")
    ] = None,
    lengths: Annotated[
        list[str] | None, Opt("--lengths", "-l", help="Length distribution; repeatable.")
    ] = None,
    batch_size: Annotated[int | None, Opt()] = None,
    num_heads: Annotated[int | None, Opt("--num-heads", "--num-qo-heads")] = None,
    num_kv_heads: Annotated[int | None, Opt()] = None,
    head_dim: Annotated[int | None, Opt()] = None,
    page_size: Annotated[int | None, Opt()] = None,
    dtype: Annotated[str | None, Opt(help="float16 or bfloat16.")] = None,
    kv_dtype: Annotated[
        str | None, Opt(help="auto, float16, bfloat16, fp8_e4m3, fp8_e5m2.")
    ] = None,
    kv_layout: Annotated[str | None, Opt(help="NHD or HND.")] = None,
    fp8_mode: Annotated[bool | None, Opt("--fp8-mode/--no-fp8-mode")] = None,
    device: Annotated[str | None, Opt(help="auto, cpu, cuda, cuda:N.")] = None,
    seed: Annotated[int | None, Opt()] = None,
    out: Annotated[Path | None, Opt(help="Results file (JSONL).")] = None,
    resume: Annotated[
        bool | None, Opt("--resume/--no-resume", help="Skip cases finished in --out.")
    ] = None,
    timer: Annotated[str | None, Opt(help="auto, cpu, cuda-event, cuda-graph, fake.")] = None,
    cold_l2: Annotated[bool | None, Opt("--cold-l2/--warm-l2")] = None,
    max_time_ms: Annotated[float | None, Opt(help="Timed work per case.")] = None,
    gpus: Annotated[str | None, Opt(help="Workers on GPUs: all, N, or a list like 0,1.")] = None,
    workers: Annotated[int | None, Opt(help="CPU worker processes (0: in this process).")] = None,
    case_timeout_s: Annotated[
        float | None, Opt("--case-timeout", help="Seconds before a hung case is killed.")
    ] = None,
    ray: Annotated[str | None, Opt(help="Ray cluster address, or `local`.")] = None,
    config: Annotated[Path | None, Opt(help="Settings TOML (default ./attnbench.toml).")] = None,
) -> None:
    """Benchmark every installed backend on a suite; write results/<run>.jsonl and a table."""
    cli: dict[str, Any] = {
        "suite": suite,
        "backends": backend,
        "model": model,
        "tp": tp,
        "kinds": kind,
        "lengths": lengths,
        "batch_size": batch_size,
        "num_heads": num_heads,
        "num_kv_heads": num_kv_heads,
        "head_dim": head_dim,
        "page_size": page_size,
        "dtype": dtype,
        "kv_dtype": kv_dtype,
        "kv_layout": kv_layout,
        "fp8_mode": fp8_mode,
        "device": device,
        "seed": seed,
        "out": out,
        "resume": resume,
        "timer": timer,
        "cold_l2": cold_l2,
        "max_time_ms": max_time_ms,
        "gpus": gpus,
        "workers": workers,
        "case_timeout_s": case_timeout_s,
        "ray": ray,
    }
    execute(cli, config)


def execute(cli: dict[str, Any], config_file: Path | None = None) -> Path:
    """The whole `run` pipeline; returns the results path. Exits with one line on bad input,
    with EXIT_NOTHING_RAN when no (case, variant) could be measured."""
    from attnbench.config_load import ConfigError, load_settings

    try:
        settings, sources = load_settings(cli, config_file=config_file)
    except ConfigError as exc:
        fail(str(exc))

    import torch

    from attnbench.backends import select_backends
    from attnbench.measure.hardware import detect, resolve_device
    from attnbench.report.table import results_table
    from attnbench.results import ResultsFileError, finished_keys
    from attnbench.run.session import placement

    try:
        device, device_note = resolve_device(settings.device)
    except ValueError as exc:
        fail(str(exc))
    if device_note:
        note(device_note)
    info = detect(device)
    check_timer(settings.timer, info.kind, flag_for("timer", sources["timer"]))
    specs, suite_name = _cases(settings, sources, info.kind)
    try:
        backends = select_backends(settings.backends)
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        where = placement(info, settings.gpus, settings.workers, settings.ray, visible)
    except ValueError as exc:
        fail(str(exc))
    if settings.backends == ["all"]:
        backends = _runnable_here(backends, info.kind)

    if settings.resume and settings.out is None:
        fail("--resume needs --out naming the results file to finish (the default is a new file)")
    out_path = settings.out or _default_out(info.name, suite_name)
    out_flag = flag_for("out", sources["out"])
    check_output_file(out_path, out_flag)
    skip: set[tuple[str, str]] = set()
    try:
        if settings.resume:
            skip = finished_keys(out_path)
        else:
            _check_appendable(out_path)
    except ResultsFileError as exc:
        if settings.resume:
            fail(f"--resume: {exc}")
        fail(f"{out_flag}: {exc}; choose another file")
    if settings.resume:
        note(f"resuming {out_path}: {len(skip)} finished rows kept")
    todo = sum((s.case_id, b.name) not in skip for s in specs for b in backends)
    console.print(
        f"[bold]attnbench run[/] suite=[cyan]{escape(suite_name)}[/] cases={len(specs)} "
        f"variants={len(backends)} device=[cyan]{escape(info.name)}[/] ({where.mode}) -> "
        f"{escape(str(out_path))}",
        highlight=False,
    )
    rows = _sweep(settings, suite_name, specs, backends, info, where, skip, out_path, out_flag)
    shown = [r for r in rows if r.status != "unsupported"] or rows
    console.print(results_table(shown, title=escape(f"{suite_name} on {info.name}")))
    counts = {s: sum(r.status == s for r in rows) for s in {r.status for r in rows}}
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    console.print(f"rows: {summary} -> {escape(str(out_path))}", highlight=False)
    _exit_if_nothing_ran(rows, todo, settings.resume, out_path, summary)
    return out_path


def check_timer(timer: str, device_kind: str, flag: str) -> None:
    """CUDA timers on a machine without a GPU would be a row claiming GPU timing: refuse."""
    if timer.startswith("cuda") and device_kind != "cuda":
        fail(
            f"{flag}={timer} needs a CUDA device and this run is on the {device_kind}; "
            "allowed here: auto, cpu, fake"
        )


def _check_appendable(path: Path) -> None:
    """A new run appends to --out: refuse a file that is there but holds no attnbench rows."""
    from attnbench.results import interrupted_first_write, read_results

    if path.is_file() and path.stat().st_size > 0 and not interrupted_first_write(path):
        read_results(path)


def _sweep(
    settings: Settings,
    suite_name: str,
    specs: list[WorkloadSpec],
    backends: list[Any],
    info: Any,
    where: Any,
    skip: set[tuple[str, str]],
    out_path: Path,
    out_flag: str,
) -> list[Any]:
    """Run the session, writing each row as it comes; returns the rows written."""
    from attnbench.results import ResultWriter
    from attnbench.run.session import run_session

    rows: list[Any] = []
    try:
        writer = ResultWriter(out_path)
    except OSError as exc:
        fail(f"{out_flag}={out_path} cannot be written: {exc.strerror or exc}")
    with writer, _progress() as progress:
        todo = sum((s.case_id, b.name) not in skip for s in specs for b in backends)
        task = progress.add_task("starting", total=todo)

        def write(item: Any) -> None:
            try:
                writer.write(item)
            except OSError as exc:
                raise RowWriteFailed(out_path) from exc
            if getattr(item, "type", "") == "header":
                _print_ceilings(item.ceilings)
                return
            rows.append(item)
            progress.update(task, advance=1, description=f"{item.backend} {item.status}")

        try:
            run_session(
                run_id=out_path.stem,
                specs=specs,
                backends=backends,
                info=info,
                where=where,
                measure_cfg=settings.measure_config(),
                settings=settings.model_dump(mode="json") | {"suite": suite_name},
                skip=skip,
                case_timeout_s=settings.case_timeout_s,
                plan_timeout_s=settings.plan_timeout_s,
                write=write,
                on_status=lambda text: progress.update(task, description=text),
            )
        except KeyboardInterrupt:
            progress.stop()
            note(f"interrupted: {len(rows)} rows kept in {out_path}; finish with --resume")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except RowWriteFailed as exc:
            progress.stop()
            fail(
                f"{out_flag}={out_path}: writing a row failed ({exc.describe()}); the "
                f"{len(rows)} rows written before are kept; free space or choose another "
                "--out, then --resume"
            )
    return rows


def _exit_if_nothing_ran(
    rows: list[Any], todo: int, resume: bool, out_path: Path, summary: str
) -> None:
    """Exit EXIT_NOTHING_RAN when no (case, variant) was measured, unless --resume found
    nothing left to do or measured rows from before are in the file."""
    from attnbench.results import read_results

    if any(r.status == "ok" for r in rows):
        return
    if resume:
        if todo == 0:
            note(f"nothing left to run: every (case, variant) is finished in {out_path}")
            return
        if any(r.status == "ok" for r in read_results(out_path).rows):
            return
    fail(
        f"nothing could run: none of {todo} (case, variant) pairs was measured "
        f"({summary or 'no rows'}); the reasons are in the table and in {out_path}; "
        "`attnbench backends` says what runs here",
        EXIT_NOTHING_RAN,
    )


def _print_ceilings(ceilings: dict[str, Any] | None) -> None:
    if not ceilings:
        return
    mm = ", ".join(f"{k} {v:.0f}" for k, v in ceilings.get("matmul_tflops", {}).items())
    read = ceilings.get("read_bandwidth_gbps")
    read_txt = f", read {read:.0f} GB/s" if read else ""
    console.print(
        f"ceilings: copy {ceilings['copy_bandwidth_gbps']:.0f} GB/s{read_txt}; matmul TFLOP/s: {mm}"
    )


def _cases(
    settings: Settings, sources: dict[str, str], device_kind: str
) -> tuple[list[WorkloadSpec], str]:
    from attnbench.workload.suite import SuiteError, load_suite, settings_specs, suite_specs

    custom = any(sources.get(f, "default") != "default" for f in WORKLOAD_FIELDS)
    name = settings.suite
    if name is None and not custom:
        name = "default" if device_kind == "cuda" else "cpu"
    try:
        if name is not None:
            suite = load_suite(name)
            return suite_specs(suite, settings), suite.name
        return settings_specs(settings), "custom"
    except (SuiteError, ValueError) as exc:
        fail(str(exc))


def _runnable_here(backends: list[Any], device_kind: str) -> list[Any]:
    from attnbench.run.policy import runnable_here

    kept, notes = runnable_here(backends, device_kind)
    for line in notes:
        note(line)
    return kept


def _default_out(device_name: str, suite: str) -> Path:
    slug = "".join(c if c.isalnum() else "-" for c in device_name.lower()).strip("-") or "device"
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{stamp}_{slug}_{suite}.jsonl"


def _progress() -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[progress.description]{task.description:<28}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
