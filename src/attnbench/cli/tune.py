"""`attnbench tune`: search each backend variant's knobs on a suite, within a time budget.

Writes `<out>` (header + one `<variant>+tuned` row per case and variant, which `report` and
`recommend` read as variants of their own) and `<out stem>.trials.jsonl` (header + every trial).
"""

from __future__ import annotations

import time
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
    from rich.table import Table

    from attnbench.results import ResultRow

Opt = typer.Option


@app.command()
def tune(
    suite: Annotated[str | None, Opt(help="Built-in suite name or TOML path.")] = None,
    backend: Annotated[
        list[str] | None, Opt("--backend", "-b", help="Backend or variant; repeatable.")
    ] = None,
    budget_s: Annotated[
        float | None, Opt("--budget-s", help="Wall-clock budget in seconds (default: none).")
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
    out: Annotated[Path | None, Opt(help="Results file (JSONL) for the tuned rows.")] = None,
    timer: Annotated[str | None, Opt(help="auto, cpu, cuda-event, cuda-graph, fake.")] = None,
    cold_l2: Annotated[bool | None, Opt("--cold-l2/--warm-l2")] = None,
    max_time_ms: Annotated[
        float | None, Opt(help="Timed work of each final (winner/default) measurement.")
    ] = None,
    grid_limit: Annotated[
        int, Opt(help="Grids up to this size are measured in full; larger: halving.")
    ] = 8,
    stage_ms: Annotated[
        float, Opt(help="Timed work per config in the first halving stage (doubles each).")
    ] = 5.0,
    config: Annotated[Path | None, Opt(help="Settings TOML (default ./attnbench.toml).")] = None,
) -> None:
    """Search each variant's knobs (grid, or successive halving); rows record the winning knobs."""
    started = time.monotonic()
    cli: dict[str, Any] = {
        "suite": suite,
        "backends": backend,
        "model": model,
        "tp": tp,
        "kinds": kind,
        "lengths": _split_lengths(lengths),
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
        "timer": timer,
        "cold_l2": cold_l2,
        "max_time_ms": max_time_ms,
    }
    if budget_s is not None and not budget_s > 0:
        fail(f"--budget-s={budget_s:g}: must be a positive number of seconds")
    if grid_limit < 1:
        fail(f"--grid-limit={grid_limit}: must be 1 or more")
    if not stage_ms > 0:
        fail(f"--stage-ms={stage_ms:g}: must be a positive number of milliseconds")
    from attnbench.config_load import ConfigError, load_settings

    try:
        settings, sources = load_settings(cli, config_file=config)
    except ConfigError as exc:
        fail(str(exc))

    from attnbench.backends import select_backends
    from attnbench.cli.run import (
        _cases,
        _check_appendable,
        _default_out,
        _print_ceilings,
        _runnable_here,
        check_timer,
    )
    from attnbench.measure.hardware import detect, measure_ceilings, resolve_device
    from attnbench.results import ResultsFileError, ResultWriter
    from attnbench.run.session import make_header
    from attnbench.run.sweep import SweepContext
    from attnbench.run.tune import Deadline, DeviceLost, TuneOptions, run_tune

    try:
        dev, device_note = resolve_device(settings.device)
        chosen = select_backends(settings.backends)
    except ValueError as exc:
        fail(str(exc))
    if device_note:
        note(device_note)
    info = detect(dev)
    check_timer(settings.timer, info.kind, flag_for("timer", sources["timer"]))
    specs, suite_name = _cases(settings, sources, info.kind)
    if settings.backends == ["all"]:
        chosen = _runnable_here(chosen, info.kind)
    without = [b.name for b in chosen if not b.knobs]
    if without:
        note(f"no knobs to tune: {', '.join(without)}")
    chosen = [b for b in chosen if b.knobs]
    if not chosen:
        fail("none of the selected variants has knobs to tune")

    out_path = settings.out or _default_out(info.name, f"{suite_name}-tune")
    out_flag = flag_for("out", sources["out"])
    check_output_file(out_path, out_flag)
    trials_path = trials_path_for(out_path)
    for path, flag in ((out_path, out_flag), (trials_path, f"{out_flag} (its trials file)")):
        check_output_file(path, flag)
        try:
            _check_appendable(path)
        except ResultsFileError as exc:
            fail(f"{flag}: {exc}; choose another file")
    deadline = Deadline(None if budget_s is None else budget_s - (time.monotonic() - started))
    opts = TuneOptions(grid_limit=grid_limit, stage0_ms=stage_ms)
    console.print(
        f"[bold]attnbench tune[/] suite=[cyan]{escape(suite_name)}[/] cases={len(specs)} "
        f"variants={len(chosen)} device=[cyan]{escape(info.name)}[/] budget="
        f"{'none' if budget_s is None else f'{budget_s:g} s'} -> "
        + escape(f"{out_path} (+ {trials_path.name})"),
        highlight=False,
    )
    ceilings = measure_ceilings(info, quick=info.kind == "cpu")
    tune_settings = {"grid_limit": grid_limit, "stage_ms": stage_ms, "budget_s": budget_s}
    header = make_header(
        out_path.stem,
        settings.model_dump(mode="json") | {"suite": suite_name, "tune": tune_settings},
        info,
        ceilings,
    )
    _print_ceilings(header.ceilings)
    ctx = SweepContext(
        run_id=out_path.stem, info=info, measure_cfg=settings.measure_config(), ceilings=ceilings
    )
    tuned: list[ResultRow] = []
    counts = {"trials": 0}
    with ResultWriter(out_path) as writer, ResultWriter(trials_path) as trial_writer:
        writer.write(header)
        trial_writer.write(header)

        def on_trial(row: ResultRow) -> None:
            try:
                trial_writer.write(row)
            except OSError as exc:
                raise RowWriteFailed(trials_path) from exc
            counts["trials"] += 1

        def on_tuned(row: ResultRow) -> None:
            try:
                writer.write(row)
            except OSError as exc:
                raise RowWriteFailed(out_path) from exc
            tuned.append(row)
            if row.status != "unsupported":
                knobs = row.details.get("knobs_label", "")
                console.print(
                    f"  {row.case_id} {row.backend}: {row.status} "
                    f"{'' if row.latency_us is None else f'{row.latency_us:.1f} µs '}{knobs}",
                    highlight=False,
                    markup=False,
                )

        try:
            _, skipped = run_tune(
                specs,
                chosen,
                ctx,
                deadline,
                on_trial,
                on_tuned,
                opts,
                on_status=lambda text: console.print(f"[dim]{escape(text)}[/]", highlight=False),
            )
        except KeyboardInterrupt:
            note(f"interrupted: {len(tuned)} tuned rows kept in {out_path}")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except RowWriteFailed as exc:
            fail(
                f"{out_flag}: writing {exc.args[0]} failed ({exc.describe()}); "
                f"{len(tuned)} tuned rows kept"
            )
        except DeviceLost as exc:
            fail(
                f"the GPU is unusable after a trial; {len(tuned)} tuned rows kept: {exc}",
                EXIT_NOTHING_RAN,
            )
    shown = [r for r in tuned if r.status != "unsupported"] or tuned
    console.print(tune_table(shown, title=f"tuned: {suite_name} on {info.name}"))
    if skipped:
        note(f"budget of {budget_s:g} s ended: {len(skipped)} (case, variant) pairs not tuned")
    stopped = [r for r in tuned if r.details.get("tune", {}).get("stopped_by_budget")]
    if stopped:
        note(f"{len(stopped)} searches stopped by the budget (best configuration so far kept)")
    elapsed = time.monotonic() - started
    console.print(
        f"{len(tuned)} tuned rows -> {escape(str(out_path))}; {counts['trials']} trials -> "
        f"{escape(str(trials_path))}; {elapsed:.0f} s",
        highlight=False,
    )
    if not any(r.status == "ok" for r in tuned):
        fail(
            f"nothing could be tuned: none of {len(tuned)} (case, variant) pairs has a measured "
            "configuration; the reasons are in the table and in " + str(out_path),
            EXIT_NOTHING_RAN,
        )


def _split_lengths(lengths: list[str] | None) -> list[str] | None:
    """`-l "16384;mixed"` as well as `-l 16384 -l mixed` (`;` separates distributions)."""
    if lengths is None:
        return None
    return [part.strip() for item in lengths for part in item.split(";") if part.strip()]


def trials_path_for(out: Path) -> Path:
    """`results/x.jsonl` -> `results/x.trials.jsonl`."""
    return out.with_name(out.stem + ".trials.jsonl")


def tune_table(rows: list[ResultRow], title: str = "") -> Table:
    """Per (case, variant): default and tuned latency, speedup, fraction of the binding
    measured ceiling before and after, the winning knobs, and the search's counts."""
    from rich.table import Table

    from attnbench.report.table import fmt, pct, short_case
    from attnbench.run.tune import ceiling_fraction

    table = Table(title=title, header_style="bold")
    for name, justify in (
        ("case", "left"),
        ("variant", "left"),
        ("default µs", "right"),
        ("tuned µs", "right"),
        ("speedup", "right"),
        ("ceiling", "left"),
        ("before", "right"),
        ("after", "right"),
        ("knobs", "left"),
        ("search", "left"),
    ):
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for r in rows:
        d = r.details
        t = d.get("tune", {})
        search = (
            f"{t.get('method', '?')} {t.get('trials', 0)}/{t.get('configs', 0)}"
            + (f" rej{t['rejected']}" if t.get("rejected") else "")
            + (f" fail{t['failed']}" if t.get("failed") else "")
            + (" [yellow]budget[/]" if t.get("stopped_by_budget") else "")
        )
        if r.status != "ok":
            knobs = f"[red]{r.status}[/] [dim]{escape(r.reason[:60])}[/]"
        else:
            knobs = escape(str(d.get("knobs_label", "")))
        table.add_row(
            escape(short_case(r.spec)),
            escape(r.backend),
            fmt(d.get("default_latency_us"), ".1f"),
            fmt(r.latency_us, ".1f"),
            fmt(d.get("speedup_vs_default"), ".2f", "x"),
            "matmul" if r.spec.get("kind") == "prefill" else "copy BW",
            pct(d.get("default_frac_measured")),
            pct(ceiling_fraction(r)),
            knobs,
            search,
        )
    return table
