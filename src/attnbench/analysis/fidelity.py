"""Reading `attnbench fidelity --out` documents: does the engine's time agree with the profilers,
and do decode kernels leave SMs idle on ragged batches (the brief's 62% claim)?

A fidelity document is `{"provenance": {...}, "cases": [{case, backend, status, plan_mode,
engine_us, engine_eager_us, profiler_kernel_us, profiler_span_us, profiler_kernels_per_call,
nvbench: {status, gpu_median_us, ...}, ncu: {gpu_time_us, sm_active_pct,
achieved_occupancy_pct, ...}, clocks: {sm_mhz_min, sm_mhz_median, throttled_samples, samples,
...}}, ...]}` (see `run.fidelity` and `cli.fidelity`); `--cases sm-activity` documents name
their cases `sm-uniform`, `sm-mixed` and `sm-4-long` per backend. Everything here is pure:
dicts in, numbers and verdicts out.

A kernel of FIDELITY_MIN_US or more is judged against one comparator, like against like:
nvbench's event timer where it ran (its CUDA events hold the same launch and event overhead per
call as the engine's), with CUPTI's kernel time beside it as a lower bound (the engine may not
be below it); else Nsight Compute; else CUPTI's kernel time (through the torch profiler); within
FIDELITY_TOLERANCE. Where it differs, `disagreement_cause` says why from what the row recorded
(or that it does not explain it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnbench.analysis.kernel_timing import (
    EVENT_RESOLUTION_US,
    FIDELITY_MIN_US,
    FIDELITY_TOLERANCE,
    KernelTiming,
    kernel_timing,
    kernel_timings,
    rel_diff,
)
from attnbench.analysis.sm_activity import (
    CLAIM_IDLE_PCT,
    CLAIM_MARGIN_PTS,
    RAGGED_LOSS_PTS,
    SM_BATCHES,
    SM_CASE_PREFIX,
    ClaimVerdict,
    SmActivity,
    batch_order,
    claim_verdict,
    is_sm_activity,
    sm_activity,
    variant_label,
)
from attnbench.results import read_json_shared

__all__ = [
    "CLAIM_IDLE_PCT",
    "CLAIM_MARGIN_PTS",
    "FIDELITY_MIN_US",
    "FIDELITY_TOLERANCE",
    "RAGGED_LOSS_PTS",
    "SM_BATCHES",
    "SM_CASE_PREFIX",
    "ClaimVerdict",
    "KernelTiming",
    "PlanModes",
    "SmActivity",
    "agreement",
    "batch_order",
    "claim_verdict",
    "disagreement_cause",
    "is_fidelity_document",
    "is_sm_activity",
    "kernel_timing",
    "kernel_timings",
    "load_documents",
    "plan_mode_pairs",
    "sm_activity",
    "variant_label",
]


def is_fidelity_document(doc: Any) -> bool:
    """A `{"provenance", "cases": [{case, backend, status, ...}]}` document."""
    if not isinstance(doc, Mapping) or "provenance" not in doc:
        return False
    cases = doc.get("cases")
    return (
        isinstance(cases, list)
        and bool(cases)
        and all(isinstance(c, Mapping) and {"case", "backend", "status"} <= set(c) for c in cases)
    )


def load_documents(paths: Iterable[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """The fidelity documents among `paths` (others, and unreadable files, are left out)."""
    out = []
    for p in paths:
        try:
            doc = read_json_shared(p)
        except (OSError, ValueError):
            continue
        if is_fidelity_document(doc):
            out.append((p, doc))
    return out


PDL_OFF = "[enable_pdl=False]"
"""The label suffix of a case re-timed with programmatic dependent launch off (`--knob`)."""


def disagreement_cause(t: KernelTiming, others: Sequence[KernelTiming] = ()) -> str:
    """Why the engine differs from a timer the tolerance judges, per timer that differs, from
    what the row shows (and, against ncu, from a re-timing of the same case with PDL off in
    `others`): "" where they agree (or nothing was judged)."""
    if not t.disagrees:
        return ""
    causes = []
    if t.below_kernel_time:
        causes.append(_below_kernel_time_cause(t))
    for name, d in t.references:
        if abs(d) <= FIDELITY_TOLERANCE:
            continue
        if name == "ncu":
            causes.append(_cause(t, others) + _cupti_note(t))
        elif name == "CUPTI":
            causes.append(f"vs CUPTI ({100 * d:+.1f}%): {_cupti_cause(t)}")
        else:
            causes.append(f"vs nvbench ({100 * d:+.1f}%): {_nvbench_cause(t)}")
    return "; ".join(causes)


def _near(a: float | None, b: float | None) -> bool:
    d = rel_diff(a, b)
    return d is not None and abs(d) <= FIDELITY_TOLERANCE


def _shared_causes(t: KernelTiming, other_us: float) -> str:
    """Causes a difference from any timer may have: the timer's resolution, a power cap."""
    assert t.engine_us is not None
    gap = abs(t.engine_us - other_us)
    if gap < 2 * EVENT_RESOLUTION_US:
        return (
            f"{gap:.2f} us apart, within two CUDA event timestamps' resolution "
            f"(~{EVENT_RESOLUTION_US} us each)"
        )
    if t.engine_us > other_us and t.power_capped:
        return (
            f"power cap: NVML reported {', '.join(t.slowdowns)} in {t.throttled_samples} of "
            f"{t.samples} samples while the engine timed back-to-back calls"
        )
    return ""


def _cupti_cause(t: KernelTiming) -> str:
    """The engine against CUPTI's kernel time: the gaps between a call's kernels (the span)."""
    k = t.kernels_per_call or 1.0
    if k > 1.05 and _near(t.engine_us, t.span_us):
        return (
            f"the call is {k:.0f} kernels; CUPTI's kernel time leaves out the gaps between "
            f"them, while its first-start to last-end span per call, {t.span_us:.1f} us, is "
            f"{100 * (rel_diff(t.engine_us, t.span_us) or 0):+.1f}% from the engine"
        )
    shared = _shared_causes(t, t.profiler_us or 0.0)
    return shared or (
        "not explained by what the row recorded (kernels per call, CUPTI's span, SM clocks, "
        "nvbench)"
    )


def _below_kernel_time_cause(t: KernelTiming) -> str:
    """The engine below CUPTI's kernel time of the same call, the lower bound of any event
    timer: the kernels alone took longer than the engine's whole call."""
    d = t.profiler_diff or 0.0
    return (
        f"below CUPTI's kernel time, {t.profiler_us:.1f} us ({100 * d:+.1f}%), the lower bound "
        "of an event-timed call: "
        + (_shared_causes(t, t.profiler_us or 0.0) or "not explained by what the row recorded")
    )


def _nvbench_cause(t: KernelTiming) -> str:
    """The engine against nvbench: graph replay vs eager launch of the same planned call."""
    if t.timer == "cuda-graph" and _near(t.engine_eager_us, t.nvbench_us):
        kernels = (
            f" of its {t.kernels_per_call:.0f} kernels" if (t.kernels_per_call or 1) > 1.05 else ""
        )
        return (
            "nvbench launches the call eagerly, the engine replays it as a CUDA graph: timed "
            f"with CUDA events around eager launches the engine measures {t.engine_eager_us:.1f} "
            f"us, {100 * (rel_diff(t.engine_eager_us, t.nvbench_us) or 0):+.1f}% from nvbench, so "
            f"the difference is graph replay vs eager launch{kernels}"
        )
    shared = _shared_causes(t, t.nvbench_us or 0.0)
    return shared or (
        "not explained by what the row recorded (the engine's eager re-timing, CUPTI's span, "
        "SM clocks)"
    )


def _cupti_note(t: KernelTiming) -> str:
    """Where the engine is faster than ncu but the torch profiler's CUPTI trace of the same
    back-to-back calls agrees with it: the kernels ran that fast; the gap is ncu's replay."""
    p = t.profiler_diff
    if t.ncu_diff is None or t.ncu_diff >= 0 or p is None or abs(p) > FIDELITY_TOLERANCE:
        return ""
    return (
        f". The torch profiler (CUPTI) timed the same calls at {t.profiler_us:.1f} us, "
        f"{100 * p:+.1f}% from the engine: the kernels themselves ran that fast, and the gap is "
        "ncu's replay of one call at a time"
    )


def _cause(t: KernelTiming, others: Sequence[KernelTiming]) -> str:
    assert t.ncu_diff is not None
    pdl_off = next(
        (o for o in others if o.case == t.case and o.backend == f"{t.backend} {PDL_OFF}"), None
    )
    if t.ncu_diff < 0 and pdl_off is not None and pdl_off.engine_us and t.engine_us:
        return _pdl_ab(t, pdl_off)
    if t.ncu_diff > 0 and t.power_capped:
        return (
            f"power cap: NVML reported {', '.join(t.slowdowns)} in {t.throttled_samples} of "
            f"{t.samples} samples while the engine timed back-to-back calls (SM clock down to "
            f"{t.sm_mhz_min:.0f} MHz); ncu replays one kernel at a time with idle gaps between "
            "passes and keeps the boost clock. The engine's time is the sustained-load one, "
            "what a serving GPU sees"
        )
    if t.ncu_diff < 0 and not t.throttled_samples and t.backend.endswith(PDL_OFF):
        return (
            "the engine is faster than ncu with no clock slowdown and PDL off: on-chip state "
            "kept between the engine's back-to-back calls, which ncu's cache flush before each "
            "pass removes, or ncu's one-call sample, are the candidates left"
        )
    if t.ncu_diff < 0 and not t.throttled_samples:
        return (
            "the engine is faster than ncu with no clock slowdown: ncu serialises launches and "
            "flushes every cache before each replay pass; the candidates are launch overlap "
            "with the previous kernel (programmatic dependent launch) and on-chip state kept "
            "between calls, which only the engine's back-to-back calls see"
        )
    return "not explained by the clocks recorded with the row"


def _pdl_ab(t: KernelTiming, off: KernelTiming) -> str:
    """The cause of an engine faster than ncu, from the same case re-timed with PDL off: PDL
    where turning it off slows the engine by at least half the gap; where it leaves the engine
    unchanged, not PDL, and whether ncu's own time of the call moved as much between the runs."""
    if not (t.engine_us and off.engine_us and t.ncu_diff is not None):
        return ""
    shift = off.engine_us / t.engine_us - 1
    retimed = f"re-timed with enable_pdl=False the engine measures {off.engine_us:.1f} us"
    if shift >= -t.ncu_diff / 2 and off.agrees:
        return (
            "programmatic dependent launch: the library launches this kernel with PDL, so in "
            "the engine's back-to-back calls it starts before the previous kernel ends; ncu "
            f"serialises launches. {retimed[0].upper()}{retimed[1:]}, "
            f"{100 * (off.ncu_diff or 0):+.1f}% vs ncu"
        )
    text = f"not programmatic dependent launch: {retimed} ({100 * shift:+.1f}% vs PDL on)"
    if t.ncu_us and off.ncu_us:
        moved = off.ncu_us / t.ncu_us - 1
        text += (
            f", while ncu's time of the same call moved {100 * moved:+.1f}% between the two runs "
            f"({t.ncu_us:.1f} -> {off.ncu_us:.1f} us)"
        )
        if abs(moved) >= abs(t.ncu_diff) / 2:
            return text + (
                ": ncu times one call per kernel, and its run-to-run spread is as large as the "
                "disagreement"
            )
    return text + (
        "; the engine stays faster than ncu with steady clocks: on-chip state kept between the "
        "engine's back-to-back calls, which ncu's cache flush before each pass removes, is the "
        "candidate left"
    )


@dataclass(frozen=True)
class Agreement:
    long: int
    """Kernels of FIDELITY_MIN_US or more with at least one profiler time."""
    agree: int
    disagree: list[KernelTiming]


def agreement(timings: Sequence[KernelTiming]) -> Agreement:
    long = [t for t in timings if t.long and t.references]
    return Agreement(len(long), sum(t.agrees for t in long), [t for t in long if t.disagrees])


@dataclass(frozen=True)
class PlanModes:
    """One variant on one case, planned both ways (FlashInfer's CUDA-graph and eager plans)."""

    case: str
    variant: str
    graph: KernelTiming
    eager: KernelTiming

    @property
    def engine_ratio(self) -> float | None:
        """graph-plan engine time / eager-plan engine time."""
        g, e = self.graph.engine_us, self.eager.engine_us
        return g / e if g and e else None

    @property
    def differ(self) -> bool:
        r = self.engine_ratio
        return r is not None and abs(r - 1) > FIDELITY_TOLERANCE


def plan_mode_pairs(timings: Sequence[KernelTiming]) -> list[PlanModes]:
    """The (case, variant) pairs timed in both plan modes, in document order."""
    by: dict[tuple[str, str], dict[str, KernelTiming]] = {}
    for t in timings:
        if t.status == "ok" and t.plan_mode in ("cuda-graph", "eager") and t.variant:
            by.setdefault((t.case, t.variant), {})[t.plan_mode] = t
    return [
        PlanModes(case, variant, modes["cuda-graph"], modes["eager"])
        for (case, variant), modes in by.items()
        if len(modes) == 2
    ]
