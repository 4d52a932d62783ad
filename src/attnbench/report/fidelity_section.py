"""Report sections on what a time means: timing fidelity from `attnbench fidelity --out`
documents (engine vs torch profiler vs nvbench vs Nsight Compute, SM clocks, plan modes), SM
activity on uniform vs ragged batches (the brief's claim that uniform grids leave 62% of SMs
idle), and the plan modes of a case's variants where they differ. Each is left out when nothing
has its data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnbench.analysis.fidelity import (
    CLAIM_IDLE_PCT,
    CLAIM_MARGIN_PTS,
    FIDELITY_MIN_US,
    FIDELITY_TOLERANCE,
    KernelTiming,
    agreement,
    batch_order,
    claim_verdict,
    disagreement_cause,
    is_sm_activity,
    kernel_timings,
    load_documents,
    plan_mode_pairs,
    sm_activity,
)
from attnbench.analysis.frame import fmt_us
from attnbench.report import plots_studies
from attnbench.report.blocks import (
    Block,
    ReportData,
    Section,
    Table,
    Text,
    register_section,
)


def documents_for(data: ReportData) -> list[tuple[Path, dict[str, Any]]]:
    """The fidelity documents of this GPU: those whose provenance names it, plus, with the
    first GPU of the report, those naming a GPU that has no rows here."""
    docs = load_documents(data.extras)
    gpus = set(data.loaded.frame["gpu"]) if not data.loaded.frame.empty else set()
    first = min(gpus) if gpus else ""
    out = []
    for path, doc in docs:
        gpu = str((doc.get("provenance") or {}).get("gpu") or "")
        if gpu == data.gpu or (gpu not in gpus and data.gpu in (first, "")):
            out.append((path, doc))
    return out


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.1f}%"


def _mhz(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def _flag(t: KernelTiming, others: list[KernelTiming]) -> str:
    if t.status != "ok":
        return t.status
    if t.judged_diff is None:
        return "no profiler time"
    if not t.long:
        return f"under {FIDELITY_MIN_US:.0f} µs"
    judged = " and ".join(name for name, _ in t.references)
    if not t.disagrees:
        return "agrees" if t.ncu_diff is not None else f"agrees ({judged}; no ncu time)"
    cause = disagreement_cause(t, others)
    return f"**differs by more than {FIDELITY_TOLERANCE:.0%}**" + (f": {cause}" if cause else "")


def _throttled(t: KernelTiming) -> str:
    if t.throttled_samples is None:
        return "-"
    return f"{t.throttled_samples} of {t.samples}" if t.samples else str(t.throttled_samples)


def _differs(t: KernelTiming, every: list[KernelTiming]) -> str:
    """One differing kernel for the summary: its differences and their cause."""
    cause = disagreement_cause(t, every)
    if t.ncu_diff is not None:
        return f"{t.case} `{t.backend}` ({_pct(t.ncu_diff)} vs ncu" + (
            f": {cause})" if cause else ")"
        )
    return f"{t.case} `{t.backend}` ({cause})"


def _extra(t: KernelTiming) -> list[str]:
    """The small-kernel columns: plan mode, CUPTI's span and kernels per call, nvbench."""
    return [
        t.plan_mode or "-",
        fmt_us(t.span_us) if t.span_us is not None else "-",
        "-" if t.kernels_per_call is None else f"{t.kernels_per_call:.0f}",
        fmt_us(t.nvbench_us) if t.nvbench_us is not None else (t.nvbench_status[:60] or "-"),
        _pct(t.nvbench_diff),
        fmt_us(t.engine_eager_us) if t.engine_eager_us is not None else "-",
    ]


def timing_table(path: Path, timings: list[KernelTiming], every: list[KernelTiming]) -> Table:
    """One row per kernel; `every` (all documents' timings) lets a cause cite a re-timing.
    Documents that time small kernels (plan modes, nvbench) get their columns too."""
    small = any(t.plan_mode or t.nvbench_status for t in timings)
    rows = []
    for t in timings:
        extra = (_extra(t) if t.status == "ok" else ["-"] * 6) if small else []
        if t.status != "ok":
            rows.append([t.case, t.backend, t.reason[:120], *["-"] * 9, *extra, _flag(t, every)])
            continue
        rows.append(
            [
                t.case,
                t.backend,
                fmt_us(t.engine_us),
                _pct(t.repeat_diff),
                fmt_us(t.profiler_us),
                _pct(t.profiler_diff),
                fmt_us(t.ncu_us) if t.ncu_us is not None else t.ncu_status[:60],
                _pct(t.ncu_diff),
                _mhz(t.sm_mhz_min),
                _mhz(t.sm_mhz_median),
                _mhz(t.max_sm_mhz),
                _throttled(t),
                *extra,
                _flag(t, every),
            ]
        )
    head = ["case", "kernel", "engine", "repeat Δ", "torch profiler", "Δ profiler", "ncu"]
    head += ["Δ ncu", "SM MHz min", "SM MHz median", "SM MHz max", "throttled samples"]
    if small:
        head += ["plan", "CUPTI span", "kernels", "nvbench", "Δ nvbench", "engine eager"]
    return Table(
        [*head, "verdict"], rows, f"{path.name}: engine median vs the profilers, per kernel"
    )


def _plan_mode_lines(every: list[KernelTiming]) -> list[str]:
    """Where a variant was timed in both plan modes: both times, and whether they differ."""
    out = []
    for p in plan_mode_pairs(every):
        ratio = p.engine_ratio
        if ratio is None:
            continue
        nvb = ""
        if p.graph.nvbench_us and p.eager.nvbench_us:
            nvb = f"; nvbench {fmt_us(p.graph.nvbench_us)} vs {fmt_us(p.eager.nvbench_us)}"
        verdict = f"the graph plan is {ratio:.2f}x the eager one" if p.differ else "the same"
        out.append(
            f"{p.case} `{p.variant}`: CUDA-graph plan {fmt_us(p.graph.engine_us)}, eager plan "
            f"{fmt_us(p.eager.engine_us)} (engine{nvb}): {verdict}"
        )
    return out


@register_section("Timing fidelity", order=82)
def timing_fidelity(data: ReportData) -> Section | None:
    docs = documents_for(data)
    if not docs:
        return None
    every = [t for _, doc in docs for t in kernel_timings(doc)]
    agr = agreement(every)
    with_ncu = sum(t.ncu_us is not None for t in every)
    lines = [
        f"Of {agr.long} kernels of {FIDELITY_MIN_US:.0f} µs or more with a profiler time, "
        f"**{agr.agree} agree within {FIDELITY_TOLERANCE:.0%}**: the engine's median against "
        "one comparator, like against like: nvbench's cold GPU time of the same planned call "
        "where it ran (its CUDA events hold the launch and event overhead the engine's hold), "
        "with CUPTI's kernel time beside it as a lower bound the engine may not be under; "
        "else Nsight Compute's gpu__time_duration per call; else CUPTI's kernel time (through "
        "the torch profiler)"
        + (
            "; every one agrees."
            if not agr.disagree
            else "; these differ: " + "; ".join(_differs(t, every) for t in agr.disagree) + "."
        )
    ]
    if not with_ncu:
        lines.append("No case has an Nsight Compute time (`attnbench fidelity --ncu` adds them).")
    modes = _plan_mode_lines(every)
    if modes:
        lines.append(
            "FlashInfer's decode wrapper planned for CUDA graphs (`use_cuda_graph=True`, its "
            "default here and in serving engines) and eagerly: " + "; ".join(modes) + "."
        )
    throttled = sum(t.throttled_samples or 0 for t in every)
    samples = sum(t.samples or 0 for t in every)
    if samples:
        lines.append(
            f"SM clock (NVML, around each timed batch): {throttled} of {samples} samples "
            "throttled (power, thermal or hardware slowdown)."
        )
    blocks: list[Block] = [Text("\n\n".join(lines))]
    for path, doc in docs:
        timings = kernel_timings(doc)
        if timings:
            blocks.append(timing_table(path, timings, every))
    return Section("Timing fidelity", blocks)


@register_section("SM activity", order=84)
def sm_activity_section(data: ReportData) -> Section | None:
    docs = [(p, d) for p, d in documents_for(data) if any(map(is_sm_activity, d["cases"]))]
    activity: dict[str, Any] = {}
    for _, doc in docs:
        for backend, by_batch in sm_activity(doc).items():
            activity.setdefault(backend, {}).update(by_batch)
    if not activity:
        return None
    verdicts = [claim_verdict(b, activity[b]) for b in sorted(activity)]
    judged = [v for v in verdicts if v.verdict != "unknown"]
    holds = sum(v.verdict == "holds" for v in judged)
    intro = (
        f"The brief claims that uniform grids leave {CLAIM_IDLE_PCT:.0f}% of SMs idle on ragged "
        "batches. Nsight Compute's SM activity (sm__cycles_active, % of elapsed cycles, "
        "averaged over SMs) and achieved occupancy for each decode kernel on three batches of "
        "32 requests with the same total KV tokens: evenly spread (uniform), the brief's "
        "256..64k mix (mixed), and four 64k requests beside 28 short ones (4-long). "
        f"**The claim holds for {holds} of {len(judged)} kernels** (holds: at least "
        f"{CLAIM_IDLE_PCT - CLAIM_MARGIN_PTS:.0f}% idle on a ragged batch)."
    )
    rows = []
    for backend in sorted(activity):
        for batch, a in sorted(activity[backend].items(), key=lambda kv: batch_order(kv[0])):
            rows.append(
                [
                    backend,
                    batch,
                    f"{a.total_kv_tokens:,}" if a.total_kv_tokens else "-",
                    fmt_us(a.engine_us),
                    "-" if a.sm_active_pct is None else f"{a.sm_active_pct:.0f}%",
                    "-" if a.idle_pct is None else f"{a.idle_pct:.0f}%",
                    "-" if a.occupancy_pct is None else f"{a.occupancy_pct:.0f}%",
                ]
            )
    blocks: list[Block] = [
        Text(intro),
        Text("\n".join(f"- {v.sentence}" for v in verdicts)),
        Table(
            ["kernel", "batch", "total KV tokens", "engine", "SM active", "SMs idle", "occupancy"],
            rows,
            "SM activity per decode kernel and batch (ncu)",
        ),
    ]
    drawing = plots_studies.sm_activity(activity, data.label)
    if drawing:
        blocks.append(
            drawing.figure(
                "SM active % and achieved occupancy per decode kernel, uniform vs ragged batches "
                "of one total KV (dashed: the brief's 62% idle)",
                "sm-activity",
            )
        )
    return Section("SM activity", blocks)


@register_section("Plan modes", order=83)
def plan_modes(data: ReportData) -> Section | None:
    """Cases whose variants were planned in different modes: FlashInfer's decode wrapper is
    planned for CUDA graphs (`use_cuda_graph=True`, as serving engines build it), which
    changes its split-KV choice, while the other paths are planned eagerly."""
    ok = data.ok
    if ok.empty or "plan_mode" not in ok:
        return None
    modes = ok[ok["plan_mode"] != ""].groupby("case_id")["plan_mode"].nunique()
    cases = set(modes[modes > 1].index)
    if not cases:
        return None
    mixed = ok[ok["case_id"].isin(cases)]
    rows = [
        [
            str(backend),
            str(mode),
            str(len(g)),
            f"{fmt_us(g['latency_us'].min())}-{fmt_us(g['latency_us'].max())}",
        ]
        for (backend, mode), g in mixed.groupby(["backend", "plan_mode"])
    ]
    text = (
        f"In {len(cases)} cases the variants were planned in different modes: a `cuda-graph` "
        "plan (FlashInfer's decode wrapper with `use_cuda_graph=True`: fixed buffers and a "
        "split-KV choice one captured graph replays for every step) times differently from an "
        "`eager` one of the same kernel, so each row's mode is part of what its time means "
        "(`attnbench fidelity --cases small` times FlashInfer's fa2 in both)."
    )
    head = ["variant", "plan mode", "cases", "median range"]
    return Section("Plan modes", [Text(text), Table(head, rows, "plan mode per variant")])
