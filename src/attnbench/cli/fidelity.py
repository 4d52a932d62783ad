"""`attnbench fidelity`: the engine against the torch profiler and Nsight Compute."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from attnbench.cli.app import app
from attnbench.cli.common import EXIT_NOTHING_RAN, check_output_file, console, fail, write_output


@app.command()
def fidelity(
    ncu: Annotated[bool, typer.Option(help="Also profile each case under Nsight Compute.")] = False,
    cases: Annotated[
        str,
        typer.Option(
            help="default: five timing cases; sm-activity: every decode kernel on uniform vs "
            "ragged batches of the same total KV (use with --ncu for SM activity and occupancy).",
        ),
    ] = "default",
    out: Annotated[Path | None, typer.Option(help="Write the comparison as JSON.")] = None,
) -> None:
    """Check timing fidelity on a few cases: repeat agreement, profiler and ncu agreement."""
    import torch

    if not torch.cuda.is_available():
        fail("fidelity needs a CUDA GPU (it compares GPU timers and profilers)", EXIT_NOTHING_RAN)
    if cases not in ("default", "sm-activity"):
        fail(f"--cases must be one of: default, sm-activity (got {cases!r})")
    if out is not None:
        check_output_file(out, "--out")
    from attnbench.measure.config import MeasureConfig
    from attnbench.results import dumps, provenance
    from attnbench.run.fidelity import check_case, default_cases, ncu_case, sm_activity_cases

    cfg = MeasureConfig(max_time_ms=400, min_runs=20)
    records: list[dict[str, Any]] = []
    chosen = default_cases() if cases == "default" else sm_activity_cases()
    for case in chosen:
        with console.status(f"{case.name} {case.backend}"):
            rec = check_case(case, cfg)
            if ncu and rec["status"] == "ok":
                n = ncu_case(case)
                rec["ncu"] = n
                if n.get("status") == "ok" and n["gpu_time_us"] > 0:
                    rec["ncu_diff"] = (rec["engine_us"] - n["gpu_time_us"]) / n["gpu_time_us"]
        records.append(rec)
    table = Table(title="timing fidelity (engine median vs repeat, torch profiler, ncu)")
    for col in (
        "case",
        "backend",
        "engine µs",
        "repeat",
        "profiler µs",
        "Δ prof",
        "ncu µs",
        "Δ ncu",
        "DRAM %",
        "occupancy %",
        "SM active %",
    ):
        table.add_column(
            col, justify="right" if "µs" in col or "Δ" in col or "%" in col else "left"
        )
    for r in records:
        if r["status"] != "ok":
            table.add_row(r["case"], r["backend"], f"[red]{escape(r['reason'][:60])}[/]")
            continue
        n = r.get("ncu", {})
        ok = n.get("status") == "ok"
        table.add_row(
            r["case"],
            r["backend"],
            f"{r['engine_us']:.1f}",
            f"{r['repeat_diff']:+.1%}",
            f"{r['profiler_kernel_us']:.1f}",
            f"{r['profiler_diff']:+.1%}",
            f"{n['gpu_time_us']:.1f}" if ok else n.get("reason", "-")[:30],
            f"{r['ncu_diff']:+.1%}" if "ncu_diff" in r else "-",
            f"{n['dram_throughput_pct']:.0f}" if ok else "-",
            f"{n['achieved_occupancy_pct']:.0f}" if ok else "-",
            f"{n['sm_active_pct']:.0f}" if ok and "sm_active_pct" in n else "-",
        )
    console.print(table)
    if out is not None:
        doc = {"provenance": provenance(), "cases": records}
        write_output(out, dumps(doc, indent=1), "--out")
