"""`attnbench fidelity`: the engine against the torch profiler (CUPTI), nvbench and Nsight
Compute."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from attnbench.analysis.fidelity import variant_label
from attnbench.cli.app import app
from attnbench.cli.common import (
    EXIT_NOTHING_RAN,
    check_output_file,
    console,
    every_if_all,
    fail,
    write_output,
)


@app.command()
def fidelity(
    ncu: Annotated[
        bool,
        typer.Option(help="Also profile the cases under Nsight Compute, one child per variant."),
    ] = False,
    cases: Annotated[
        str,
        typer.Option(
            help="default: five timing cases; small: kernels of 10-50 us (batch 1-8 decode, "
            "FlashInfer's PR #2055 shape, its fa2 and tc in both plan modes); sm-activity: "
            "every decode kernel on uniform vs ragged batches of the same total KV (use with "
            "--ncu for SM activity and occupancy).",
        ),
    ] = "default",
    nvbench: Annotated[
        bool,
        typer.Option(help="Also time each call with nvbench (cuda-bench, `cuda.bench`)."),
    ] = True,
    out: Annotated[
        Path | None,
        typer.Option(help="Write the comparison as JSON (rewritten after every case)."),
    ] = None,
    backend: Annotated[
        list[str] | None,
        typer.Option(
            "--backend", "-b", help="Only these variants' cases (repeatable).", metavar="NAME"
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(help="Keep the cases already in --out and run only the missing ones."),
    ] = False,
    knob: Annotated[
        list[str] | None,
        typer.Option(
            help="Set a knob on every case's plan, NAME=VALUE (repeatable; the variants must "
            "declare it), e.g. enable_pdl=false for flashinfer:xqa.",
            metavar="NAME=VALUE",
        ),
    ] = None,
) -> None:
    """Check timing fidelity on a few cases: repeat agreement, profiler and ncu agreement."""
    import torch

    from attnbench.run.fidelity import (
        default_cases,
        select_cases,
        sm_activity_cases,
        small_cases,
        with_knobs,
    )

    sets = {"default": default_cases, "small": small_cases, "sm-activity": sm_activity_cases}
    if cases not in sets:
        fail(f"--cases must be one of: {', '.join(sets)} (got {cases!r})")
    try:
        chosen = select_cases(sets[cases](), every_if_all(backend))
        chosen = with_knobs(chosen, parse_knobs(knob or []))
    except ValueError as exc:
        fail(str(exc))
    if resume and out is None:
        fail("--resume needs --out (the file whose finished cases are kept)")
    if not torch.cuda.is_available():
        fail("fidelity needs a CUDA GPU (it compares GPU timers and profilers)", EXIT_NOTHING_RAN)
    if out is not None:
        check_output_file(out, "--out")
    records = _run_cases(chosen, ncu, out, resume, nvbench)
    console.print(fidelity_table(records))


def fidelity_table(records: list[dict[str, Any]]) -> Table:
    """One line per case: the engine against its repeat, CUPTI, nvbench and ncu."""
    table = Table(title="timing fidelity (engine median vs repeat, CUPTI, nvbench, ncu)")
    heads = ["case", "backend", "plan", "engine µs", "repeat", "CUPTI µs", "Δ CUPTI"]
    heads += ["nvbench µs", "Δ nvbench", "ncu µs", "Δ ncu", "SM active %"]
    for col in heads:
        right = "µs" in col or "Δ" in col or "%" in col
        table.add_column(col, justify="right" if right else "left")
    for r in records:
        label = variant_label(r)
        if r["status"] != "ok":
            table.add_row(r["case"], escape(label), "", f"[red]{escape(r['reason'][:60])}[/]")
            continue
        n, nv = r.get("ncu", {}), r.get("nvbench", {})
        ncu_ok, nv_ok = n.get("status") == "ok", nv.get("status") == "ok"
        table.add_row(
            r["case"],
            escape(label),
            str(r.get("plan_mode", "")),
            f"{r['engine_us']:.1f}",
            f"{r['repeat_diff']:+.1%}",
            f"{r['profiler_kernel_us']:.1f}",
            f"{r['profiler_diff']:+.1%}",
            f"{nv['gpu_median_us']:.1f}" if nv_ok else escape(str(nv.get("status", "-"))),
            f"{r['nvbench_diff']:+.1%}" if "nvbench_diff" in r else "-",
            f"{n['gpu_time_us']:.1f}" if ncu_ok else escape(str(n.get("reason", "-"))[:30]),
            f"{r['ncu_diff']:+.1%}" if "ncu_diff" in r else "-",
            f"{n['sm_active_pct']:.0f}" if ncu_ok and "sm_active_pct" in n else "-",
        )
    return table


def _run_cases(
    chosen: list[Any], ncu: bool, out: Path | None, resume: bool, nvbench: bool = False
) -> list[dict[str, Any]]:
    """Each case in turn, the file rewritten after each one (after each backend's group with
    --ncu: one ncu child profiles the group), so a run cut short (time limit, Ctrl-C) keeps
    every finished case; `--resume` starts from those. With `nvbench`, every planned call is
    kept and nvbench times them all at the end (it runs once per process)."""
    from attnbench.measure.config import MeasureConfig
    from attnbench.results import dumps, provenance
    from attnbench.run.fidelity import finished_records, ncu_groups, nvbench_records

    cfg = MeasureConfig(max_time_ms=400, min_runs=20)
    records = finished_records(out) if resume and out is not None else []
    done = {(r["case"], r["backend"], _knob_key((r.get("knobs") or {}).items())) for r in records}
    todo = [c for c in chosen if (c.name, c.backend, _knob_key(c.knobs)) not in done]
    if done:
        console.print(f"resume: {len(done)} cases kept, {len(todo)} to run", highlight=False)

    def save(complete: bool) -> None:
        if out is not None:
            doc = {"provenance": provenance(), "complete": complete, "cases": records}
            write_output(out, dumps(doc, indent=1), "--out")

    groups = ncu_groups(todo) if ncu else [[c] for c in todo]
    count = 0
    kept: dict[str, Any] | None = {} if nvbench else None
    try:
        for group in groups:
            recs = []
            for case in group:
                count += 1
                recs.append(_check(case, cfg, f"{count}/{len(todo)}", kept))
            if ncu:
                _add_ncu(group, recs)
            records.extend(recs)
            save(complete=False)
        if kept is not None:
            with console.status(f"nvbench: {len(kept)} calls in one run"):
                nvbench_records(records, kept)
            kept.clear()
    except KeyboardInterrupt:
        where = f" kept in {out}; finish with --resume" if out is not None else ""
        console.print(f"note: interrupted: {len(records)} cases{escape(where)}", highlight=False)
        raise typer.Exit(130) from None
    save(complete=True)
    return records


def _check(case: Any, cfg: Any, where: str, kept: dict[str, Any] | None) -> dict[str, Any]:
    """One case's gate, engine, repeat and profiler record, its wall time and a line."""
    import time

    from attnbench.run.fidelity import check_case

    t0 = time.monotonic()
    with console.status(f"{case.name} {case.backend} ({where})"):
        rec = check_case(case, cfg, kept) if kept is not None else check_case(case, cfg)
    rec["wall_s"] = round(time.monotonic() - t0, 1)
    line = f"{case.name} {case.backend}: {rec['status']} ({rec['wall_s']:.0f} s, {where})"
    console.print(escape(line), highlight=False)
    return rec


def _add_ncu(group: list[Any], recs: list[dict[str, Any]]) -> None:
    """ncu for the group's cases that passed their check, in one child; `ncu_diff` beside."""
    from attnbench.run.fidelity import ncu_cases

    ok = [(c, r) for c, r in zip(group, recs, strict=True) if r["status"] == "ok"]
    if not ok:
        return
    label = f"ncu: {group[0].backend}, {len(ok)} case(s) in one child"
    with console.status(label):
        found = ncu_cases([c for c, _ in ok])
    for (_case, rec), n in zip(ok, found, strict=True):
        rec["ncu"] = n
        if n.get("status") == "ok" and n["gpu_time_us"] > 0:
            rec["ncu_diff"] = (rec["engine_us"] - n["gpu_time_us"]) / n["gpu_time_us"]
    states = ", ".join(f"{c.name} {n.get('status')}" for (c, _), n in zip(ok, found, strict=True))
    took = found[0].get("group_wall_s")
    line = f"{label}: {states}" + (f" ({took:.0f} s)" if isinstance(took, float) else "")
    console.print(escape(line), highlight=False)


def parse_knobs(items: list[str]) -> dict[str, object]:
    """`NAME=VALUE` strings as knob values: true/false as booleans, integers as ints, none as
    None, anything else as text (the variant's declared values judge them)."""
    out: dict[str, object] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--knob={item!r}: expected NAME=VALUE, e.g. enable_pdl=false")
        low = text.strip().lower()
        value: object
        if low in ("true", "false"):
            value = low == "true"
        elif low == "none":
            value = None
        else:
            try:
                value = int(low)
            except ValueError:
                value = text.strip()
        out[name.strip()] = value
    return out


def _knob_key(knobs: Any) -> str:
    """One text per knob set, so a resumed file keeps a case's runs with other knobs apart."""
    return repr(sorted(knobs))
