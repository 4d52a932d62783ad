"""Sections from the profiler documents (`attnbench fidelity`): timing fidelity (engine against
the torch profiler and Nsight Compute) and SM activity on uniform and ragged batches, and from
the tuned rows (`attnbench tune`)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from attnbench.analysis.fidelity import (
    FIDELITY_MIN_US,
    FIDELITY_TOLERANCE,
    KernelTiming,
    batch_order,
    claim_verdict,
    disagreement_cause,
    is_fidelity_document,
    kernel_timings,
    sm_activity,
)
from attnbench.backends.variant import Variant, is_tuned
from attnbench.report.findings.core import (
    Headline,
    Inputs,
    Section,
    Table,
    doc_commit,
    fnum,
    fpct,
    frange,
    fx,
    section,
    sources,
)


def _fidelity_docs(inputs: Inputs) -> list[tuple[str, Any]]:
    return [(n, d) for n, d in inputs.docs.items() if is_fidelity_document(d)]


def _diff(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.1f}%"


@section("fidelity")
def fidelity(inputs: Inputs) -> Section | None:
    """Per document, every kernel timed by the engine against its comparator (nvbench where it
    ran, else ncu, else CUPTI), CUPTI's kernel time beside it."""
    docs = _fidelity_docs(inputs)
    if not docs:
        return None
    every = [t for _, d in docs for t in kernel_timings(d)]
    rows, summary = [], []
    for name, doc in docs:
        timings = kernel_timings(doc)
        summary.append([_agreement_cell(timings), f"`{name}`", doc_commit(doc)])
        rows += [_timing_row(t, every, name, doc) for t in timings]
    text = (
        f"The engine's median against one comparator per kernel, like against like: nvbench's "
        f"event timer where it ran (its CUDA events hold the launch and event overhead per call "
        f"that the engine's hold too), with CUPTI's kernel time (through the torch profiler) "
        f"beside it as a lower bound the engine may not be under; where nvbench did not run, "
        f"Nsight Compute's per-call time, else CUPTI's kernel time. A kernel of "
        f"{FIDELITY_MIN_US:.0f} µs or more agrees when within {100 * FIDELITY_TOLERANCE:.0f}% "
        "of its comparator. A difference names its cause from what the row recorded."
    )
    cols = ["case", "variant", "engine µs", "nvbench µs", "CUPTI µs (lower bound)", "ncu µs"]
    cols += ["comparator", "judged diff", "verdict", "cause", "file", "commit"]
    tables = [
        Table(["kernels of 10 µs or more that agree, by comparator", "file", "commit"], summary),
        Table(cols, rows),
    ]
    cells = [", ".join(n for n, _ in docs), ", ".join(doc_commit(d) for _, d in docs)]
    head = Headline.of("timing fidelity", _fidelity_figure(every), cells)
    return Section("Timing fidelity", text, tables, [head])


def _timing_row(t: KernelTiming, every: list[KernelTiming], name: str, doc: Any) -> list[str]:
    verdict = "agrees" if t.agrees else "differs" if t.disagrees else "not judged"
    return [
        t.case,
        t.backend,
        fnum(t.engine_us),
        fnum(t.nvbench_us),
        fnum(t.profiler_us),
        fnum(t.ncu_us),
        t.comparator or "-",
        _diff(t.judged_diff),
        verdict,
        disagreement_cause(t, every) or "-",
        f"`{name}`",
        doc_commit(doc),
    ]


def _by_comparator(timings: list[KernelTiming]) -> dict[str, list[KernelTiming]]:
    """The judged kernels (10 µs or more, with a comparator), by comparator."""
    out: dict[str, list[KernelTiming]] = {}
    for t in timings:
        if t.long and t.references:
            out.setdefault(t.comparator, []).append(t)
    return out


def _agreement_cell(timings: list[KernelTiming]) -> str:
    """`13 of 18 (nvbench)`, per comparator."""
    by = _by_comparator(timings)
    return "; ".join(f"{sum(t.agrees for t in g)} of {len(g)} ({c})" for c, g in by.items())


def _fidelity_figure(every: list[KernelTiming]) -> str:
    """The headline: kernels within the tolerance of nvbench, its stated comparator; the
    kernels without an nvbench time counted apart, with theirs."""
    by = _by_comparator(every)
    tol = f"{100 * FIDELITY_TOLERANCE:.0f}%"
    nvb = by.pop("nvbench", [])
    figure = (
        f"{sum(t.agrees for t in nvb)} of {len(nvb)} kernels of {FIDELITY_MIN_US:.0f} µs or more "
        f"within {tol} of nvbench's event timer (CUPTI's kernel time beside it, a lower bound)"
    )
    rest = [t for g in by.values() for t in g]
    if rest:
        figure += (
            f"; {len(rest)} more without an nvbench time: {sum(t.agrees for t in rest)} within "
            f"{tol} of {' or '.join(by)}"
        )
    return figure


@section("sm-activity")
def sm_activity_section(inputs: Inputs) -> Section | None:
    """ncu's SM activity per decode kernel on batches holding the same total KV tokens."""
    rows, verdicts = [], []
    for name, doc in _fidelity_docs(inputs):
        for backend, by_batch in sm_activity(doc).items():
            for batch, a in sorted(by_batch.items(), key=lambda kv: batch_order(kv[0])):
                rows.append(
                    [
                        backend,
                        batch,
                        fpct((a.sm_active_pct or 0) / 100) if a.sm_active_pct is not None else "-",
                        fnum(a.occupancy_pct),
                        fnum(a.engine_us),
                        f"{a.total_kv_tokens:,}" if a.total_kv_tokens else "-",
                        f"`{name}`",
                        doc_commit(doc),
                    ]
                )
            v = claim_verdict(backend, by_batch)
            verdicts.append([backend, v.verdict, f"`{name}`", doc_commit(doc)])
    if not rows:
        return None
    text = (
        "Nsight Compute's SM activity (cycles with an SM active) and achieved occupancy per "
        "decode kernel, on 32 requests holding the same KV tokens evenly, as the brief's "
        "256..64k mix, or as four 64k requests beside short ones; and whether the brief's claim "
        "(uniform grids leave most SMs idle on ragged batches) holds for the kernel."
    )
    cols = [
        "variant",
        "batch",
        "SMs active",
        "occupancy %",
        "engine µs",
        "KV tokens",
        "file",
        "commit",
    ]
    tables = [Table(cols, rows), Table(["variant", "claim", "file", "commit"], verdicts)]
    return Section("SM activity", text, tables)


def _tuned(rows: pd.DataFrame) -> pd.DataFrame:
    ok = rows[(rows["status"] == "ok") & rows["backend"].map(is_tuned).astype(bool)]
    default = ok["details"].map(lambda d: d.get("default_latency_us") if d is not None else None)
    tune = ok["details"].map(lambda d: d.get("tune") or {} if d is not None else {})
    ok = ok.assign(
        default_us=pd.to_numeric(default, errors="coerce"),
        budget=tune.map(lambda t: bool(t.get("stopped_by_budget"))),
        variant=ok["backend"].map(lambda b: Variant.parse(b).base),
    )
    ok = ok[ok["default_us"].notna()]
    return ok.assign(speedup=ok["default_us"] / ok["latency_us"])


@section("tuning")
def tuning(inputs: Inputs) -> Section | None:
    """Per tuned file and variant: default latency / tuned latency over every tuned case."""
    rows_all = inputs.rows
    if rows_all.empty:
        return None
    tuned = _tuned(rows_all)
    if tuned.empty:
        return None
    rows = []
    for (_, variant), g in tuned.groupby(["file", "variant"], sort=False):
        best = g.loc[g["speedup"].idxmax()]
        knobs = best["details"].get("knobs_label") or "-"
        rows.append(
            [
                str(variant),
                str(len(g)),
                frange(g["speedup"], fx),
                f"{int(g['budget'].sum())}",
                f"{best['lengths']} bs{best['batch_size']} {best['kv_dtype']}: "
                f"{fnum(best['default_us'])} -> {fnum(best['latency_us'])} µs ({knobs})",
                *sources(g),
            ]
        )
    text = (
        "`attnbench tune` re-measures each variant with its default knobs and with the best "
        "configuration its search found: default / tuned latency (1.00x: the default was kept), "
        "how many searches the time budget stopped, and the largest gain with its knobs."
    )
    cols = [
        "variant",
        "cases",
        "default / tuned",
        "stopped by budget",
        "largest gain",
        "file",
        "commit",
    ]
    return Section("Tuning", text, [Table(cols, rows)])
