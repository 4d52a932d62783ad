"""Commands that describe this machine and the configuration: backends, hw, config, models,
suites."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from attnbench.cli.app import app
from attnbench.cli.common import check_output_file, console, fail, print_fitted, write_output

INLINE_REASON_CHARS = 40
"""A reason this short is shown in its row; a longer one is a numbered note under the table,
written once for every variant it applies to (the install hint of a missing library)."""


@app.command()
def backends(
    device: Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:N.")] = "auto",
) -> None:
    """Each backend variant: whether it can run here, and why not."""
    from attnbench.measure.hardware import detect, resolve_device

    try:
        dev, _ = resolve_device(device)  # the table's title names the device chosen
    except ValueError as exc:
        fail(str(exc))
    info = detect(dev)
    found = _backend_states(info.kind)
    notes: dict[str, int] = {}
    table = Table(title=f"backends on {info.name} ({info.kind})", header_style="bold")
    table.add_column("variant", no_wrap=True)
    table.add_column("runs here", no_wrap=True)
    table.add_column("why not")
    for name, why, _ in found:
        cell = why
        if len(why) > INLINE_REASON_CHARS:
            cell = f"[{notes.setdefault(why, len(notes) + 1)}]"
        table.add_row(name, "[green]yes[/]" if not why else "[red]no[/]", escape(cell))
    console.print(table)
    for why, n in notes.items():
        _print_wrapped(f"[{n}] {why}", "    ")
    builds: dict[str, list[str]] = {}
    for name, _, build in found:
        if build:
            builds.setdefault(build, []).append(name)
    if builds:
        console.print("builds (the library found, or the engine's kernel call):", style="bold")
    for build, names in builds.items():
        _print_wrapped(f"{', '.join(names)}: {build}", "    ")


def _backend_states(device_kind: str) -> list[tuple[str, str, str]]:
    """(variant, why it cannot run here or "", the library build it found or "") for every
    variant a user can select (fault injection is left out)."""
    from attnbench.backends import all_backends

    out = []
    for b in all_backends():
        if getattr(b, "hidden", False):
            continue
        describe = getattr(b, "describe", None)  # the library build found, what it lacks
        try:
            reason = b.available()
            build = str(describe()) if callable(describe) else ""
        except Exception as exc:
            reason, build = f"{type(exc).__name__}: {exc}", ""
        if reason is None and device_kind not in b.devices:
            reason = f"needs {' or '.join(b.devices)}; this is {device_kind}"
        out.append((b.name, " ".join((reason or "").split()), " ".join(build.split())))
    return out


def _print_wrapped(text: str, indent: str) -> None:
    """Plain text wrapped at spaces to the console's width, later lines indented."""
    import textwrap

    lines = textwrap.wrap(
        text, console.width, subsequent_indent=indent, break_on_hyphens=False
    ) or [""]
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


@app.command()
def hw(
    device: Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:N.")] = "auto",
    quick: Annotated[bool, typer.Option(help="Smaller, faster ceiling measurements.")] = False,
    out: Annotated[
        Path | None, typer.Option(help="Also write the facts as JSON here (default: not written).")
    ] = None,
) -> None:
    """This device's facts, spec-sheet peaks and ceilings measured now."""
    from attnbench.measure.hardware import detect, measure_ceilings, resolve_device

    try:
        dev, _ = resolve_device(device)  # the table's title names the device chosen
    except ValueError as exc:
        fail(str(exc))
    if out is not None:
        check_output_file(out, "--out")
    info = detect(dev)
    with console.status("measuring copy and read bandwidth and matmul throughput"):
        ceilings = measure_ceilings(info, quick=quick or info.kind == "cpu")
    table = Table(title=f"{info.name}", header_style="bold", show_header=False)
    table.add_column("fact")
    table.add_column("value", overflow="fold")
    table.add_row("compute capability", f"sm{info.sm}" if info.sm else "-")
    table.add_row("SMs / threads", str(info.num_sms))
    table.add_row("L2", f"{info.l2_bytes / 2**20:.0f} MiB" if info.l2_bytes else "-")
    table.add_row("memory", f"{info.memory_bytes / 2**30:.1f} GiB" if info.memory_bytes else "-")
    sheet = info.spec_sheet
    copy = ceilings.copy_bandwidth_gbps
    frac = (
        f" ({copy / sheet.bandwidth_gbps:.0%} of spec {sheet.bandwidth_gbps:.0f})" if sheet else ""
    )
    table.add_row("copy bandwidth (measured)", f"{copy:.0f} GB/s{frac}")
    if ceilings.read_bandwidth_gbps:
        table.add_row("read bandwidth (measured)", f"{ceilings.read_bandwidth_gbps:.0f} GB/s")
    for dtype, tf in ceilings.matmul_tflops.items():
        spec_tf = sheet.tflops.get(dtype) if sheet else None
        frac = f" ({tf / spec_tf:.0%} of spec {spec_tf:.0f})" if spec_tf else ""
        table.add_row(f"matmul {dtype} (measured)", f"{tf:.1f} TFLOP/s{frac}")
    for k, v in ceilings.method.items():
        table.add_row(f"method: {k}", v)
    console.print(table)
    if out is not None:
        from attnbench.results import dumps
        from attnbench.results.provenance import provenance

        facts = {
            "provenance": provenance(),
            "device": info.as_dict(),
            "ceilings": ceilings.as_dict(),
        }
        write_output(out, dumps(facts, indent=2), "--out")


@app.command()
def config(
    config_file: Annotated[Path | None, typer.Option("--config", help="Settings TOML.")] = None,
) -> None:
    """Every resolved setting and where it came from (cli, env, .env, attnbench.toml, default)."""
    from attnbench.config import Settings
    from attnbench.config_load import ConfigError, load_settings

    try:
        settings, sources = load_settings({}, config_file=config_file)
    except ConfigError as exc:
        fail(str(exc))
    table = Table(title="attnbench settings", header_style="bold")
    table.add_column("field")
    table.add_column("value", overflow="fold")
    table.add_column("source")
    table.add_column("meaning", style="dim", overflow="fold")
    for name, field in Settings.model_fields.items():
        value = getattr(settings, name)
        src = sources[name]
        style = "dim" if src == "default" else "cyan"
        meaning = " ".join((field.description or "").split())
        table.add_row(name, escape(str(value)), f"[{style}]{escape(src)}[/]", escape(meaning))
    console.print(table)


@app.command()
def models() -> None:
    """Known model presets for --model: heads, head_dim, layers, attention features (window
    and layer pattern, sinks, soft-cap, MLA), experts, valid --tp, and the config each comes
    from. Presets whose attention attnbench does not run yet are listed but refused by --model."""
    from rich.text import Text

    from attnbench.workload.models import MODELS, valid_tps

    table = Table(title="models", header_style="bold")
    table.add_column("model", no_wrap=True)
    for col in ("qo/kv heads", "head_dim", "layers", "experts", "valid --tp"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("attention")
    for m in MODELS.values():
        tps = [str(tp) for tp in valid_tps(m)]
        group = m.num_qo_heads // m.num_kv_heads
        kind = "MHA" if group == 1 else "MQA" if m.num_kv_heads == 1 else f"GQA {group}"
        features = list(m.attention_features()) or [kind]
        if m.unsupported_reason() is not None:
            features.append("(--model: not yet)")
        experts = f"{m.num_experts_per_tok}/{m.num_experts}" if m.num_experts else "-"
        table.add_row(
            m.name,
            f"{m.num_qo_heads}/{m.num_kv_heads}",
            str(m.head_dim),
            str(m.num_layers),
            experts,
            ",".join(tps) or "-",
            Text("; ".join(features)),
        )
    print_fitted(table)
    console.print("[bold]sources[/] (config fields and values, and the file they were read from)")
    for m in MODELS.values():
        console.print(Text.assemble((m.name, "bold"), ": ", (m.source, "dim")), highlight=False)


@app.command()
def suites() -> None:
    """Built-in suites and what they hold."""
    from attnbench.workload.suite import builtin_suites, load_suite

    table = Table(title="suites", header_style="bold")
    table.add_column("name")
    table.add_column("description", overflow="fold")
    for name in sorted(builtin_suites()):
        table.add_row(name, load_suite(name).description)
    console.print(table)
