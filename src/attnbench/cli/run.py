"""`attnbench run`: settings -> cases -> sweep -> results file and table."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from attnbench.cli import app
from attnbench.cli.common import console, fail, note

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
    """The whole `run` pipeline; returns the results path. Exits with one line on bad input."""
    from attnbench.config import ConfigError, load_settings

    try:
        settings, sources = load_settings(cli, config_file=config_file)
    except ConfigError as exc:
        fail(str(exc))

    import torch

    from attnbench.backends import select_backends
    from attnbench.hardware import detect, resolve_device
    from attnbench.results import ResultsFileError, ResultWriter, finished_keys
    from attnbench.session import placement, run_session
    from attnbench.table import results_table

    try:
        device, device_note = resolve_device(settings.device)
    except ValueError as exc:
        fail(str(exc))
    if device_note:
        note(device_note)
    info = detect(device)
    specs, suite_name = _cases(settings, sources, info.kind)
    try:
        backends = select_backends(settings.backends)
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        where = placement(info, settings.gpus, settings.workers, settings.ray, visible)
    except ValueError as exc:
        fail(str(exc))
    if settings.backends == ["all"]:
        backends = _runnable_here(backends, info.kind)

    out_path = settings.out or _default_out(info.name, suite_name)
    skip: set[tuple[str, str]] = set()
    if settings.resume:
        try:
            skip = finished_keys(out_path)
        except ResultsFileError as exc:
            fail(f"--resume: {exc}")
        note(f"resuming {out_path}: {len(skip)} finished rows kept")
    todo = sum((s.case_id, b.name) not in skip for s in specs for b in backends)
    console.print(
        f"[bold]attnbench run[/] suite=[cyan]{suite_name}[/] cases={len(specs)} "
        f"variants={len(backends)} device=[cyan]{info.name}[/] ({where.mode}) -> {out_path}"
    )

    rows: list[Any] = []
    with ResultWriter(out_path) as writer, _progress() as progress:
        task = progress.add_task("starting", total=todo)

        def write(item: Any) -> None:
            writer.write(item)
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
            raise typer.Exit(130) from None
    shown = [r for r in rows if r.status != "unsupported"] or rows
    console.print(results_table(shown, title=f"{suite_name} on {info.name}"))
    counts = {s: sum(r.status == s for r in rows) for s in {r.status for r in rows}}
    console.print(
        "rows: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + f" -> {out_path}"
    )
    return out_path


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


# Slow CPU-style paths that `all` leaves out on a GPU (ask for them by name): the fp64 oracle
# runs on every case anyway, and SDPA's math kernel materialises the whole score matrix (it ran
# out of memory on 16k+ prefill on the H200 and took 10-100x the fused kernels' time).
GPU_OPT_IN = frozenset({"reference", "sdpa:math"})


def _runnable_here(backends: list[Any], device_kind: str) -> list[Any]:
    kept = [b for b in backends if device_kind in b.devices]
    dropped = sorted({b.name.split(":")[0] for b in backends if b not in kept})
    if dropped:
        note(f"skipping GPU-only backends on {device_kind}: {', '.join(dropped)}")
    if device_kind == "cuda":
        kept = [b for b in kept if b.name not in GPU_OPT_IN]
        note(f"on a GPU, `all` leaves out {', '.join(sorted(GPU_OPT_IN))}: name them to run them")
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
