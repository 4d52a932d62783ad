"""Reading `attnbench fidelity --out` documents: does the engine's time agree with the profilers,
and do decode kernels leave SMs idle on ragged batches (the brief's 62% claim)?

A fidelity document is `{"provenance": {...}, "cases": [{case, backend, status, engine_us,
profiler_kernel_us, ncu: {gpu_time_us, sm_active_pct, achieved_occupancy_pct, ...}, clocks:
{sm_mhz_min, sm_mhz_median, throttled_samples, samples, ...}}, ...]}` (see `run.fidelity` and
`cli.fidelity`); `--cases sm-activity` documents name their cases `sm-uniform`, `sm-mixed` and
`sm-4-long` per backend. Everything here is pure: dicts in, numbers and verdicts out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnbench.results import read_json

FIDELITY_MIN_US = 50.0
"""Kernels at least this long must agree between engine and profilers ..."""
FIDELITY_TOLERANCE = 0.03
"""... within this relative difference (issue 15)."""
SM_CASE_PREFIX = "sm-"
SM_BATCHES = ("uniform", "mixed", "4-long")
"""The sm-activity batches: one total KV, rising raggedness."""
CLAIM_IDLE_PCT = 62.0
"""The brief: uniform grids leave 62% of SMs idle on ragged batches."""
CLAIM_MARGIN_PTS = 10.0
"""The claim holds on a batch when its SMs are idle at least CLAIM_IDLE_PCT minus this."""
RAGGED_LOSS_PTS = 10.0
"""Below the claim, raggedness still costs SMs when idle rises this much over the uniform batch."""


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
            doc = read_json(p)
        except (OSError, ValueError):
            continue
        if is_fidelity_document(doc):
            out.append((p, doc))
    return out


def is_sm_activity(case: Mapping[str, Any]) -> bool:
    return str(case.get("case", "")).startswith(SM_CASE_PREFIX)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


@dataclass(frozen=True)
class KernelTiming:
    """One case of a fidelity document: the engine against the torch profiler and ncu."""

    case: str
    backend: str
    status: str
    reason: str = ""
    engine_us: float | None = None
    repeat_diff: float | None = None
    profiler_us: float | None = None
    ncu_us: float | None = None
    ncu_status: str = ""
    sm_mhz_min: float | None = None
    sm_mhz_median: float | None = None
    max_sm_mhz: float | None = None
    throttled_samples: int | None = None
    samples: int | None = None
    slowdowns: tuple[str, ...] = ()
    """NVML's clock-event reasons seen while the engine timed (e.g. `sw_power_cap`)."""

    @property
    def profiler_diff(self) -> float | None:
        """(engine - profiler) / profiler."""
        return _diff(self.engine_us, self.profiler_us)

    @property
    def ncu_diff(self) -> float | None:
        """(engine - ncu) / ncu."""
        return _diff(self.engine_us, self.ncu_us)

    @property
    def long(self) -> bool:
        """Over FIDELITY_MIN_US: the tolerance applies."""
        return self.engine_us is not None and self.engine_us > FIDELITY_MIN_US

    @property
    def judged_diff(self) -> float | None:
        """The difference the tolerance judges: against Nsight Compute where it ran (the
        issue's criterion), else against the torch profiler."""
        return self.ncu_diff if self.ncu_diff is not None else self.profiler_diff

    @property
    def disagrees(self) -> bool:
        """A kernel over 50 us whose engine time differs from ncu's (else the torch
        profiler's) by more than 3%."""
        d = self.judged_diff
        return self.long and d is not None and abs(d) > FIDELITY_TOLERANCE

    @property
    def agrees(self) -> bool:
        """A kernel over 50 us with a profiler time, within 3% of it."""
        return self.long and self.judged_diff is not None and not self.disagrees

    @property
    def power_capped(self) -> bool:
        """NVML saw a power or thermal slowdown while the engine timed this kernel."""
        return bool(self.throttled_samples) and any(
            "power" in s or "thermal" in s for s in self.slowdowns
        )


PDL_OFF = "[enable_pdl=False]"
"""The label suffix of a case re-timed with programmatic dependent launch off (`--knob`)."""


def disagreement_cause(t: KernelTiming, others: Sequence[KernelTiming] = ()) -> str:
    """Why the engine and Nsight Compute differ on a kernel, from what the row shows and, where
    the same case was re-timed with PDL off (`others`), from that A/B: "" where they agree
    (or nothing was judged)."""
    if not t.disagrees or t.ncu_diff is None:
        return ""
    return _cause(t, others) + _cupti_note(t)


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


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else (a - b) / b


def variant_label(case: Mapping[str, Any]) -> str:
    """The case's variant with the knobs it was planned with (`--knob`), if any."""
    knobs = case.get("knobs") or {}
    extra = ",".join(f"{k}={v}" for k, v in sorted(knobs.items()))
    return str(case.get("backend", "")) + (f" [{extra}]" if extra else "")


def kernel_timing(case: Mapping[str, Any]) -> KernelTiming:
    ncu = case.get("ncu") or {}
    clocks = case.get("clocks") or {}
    ncu_ok = ncu.get("status") == "ok"
    samples = _num(clocks.get("samples"))
    throttled = _num(clocks.get("throttled_samples"))
    return KernelTiming(
        case=str(case.get("case", "")),
        backend=variant_label(case),
        status=str(case.get("status", "")),
        reason=str(case.get("reason", "")),
        engine_us=_num(case.get("engine_us")),
        repeat_diff=_num(case.get("repeat_diff")),
        profiler_us=_num(case.get("profiler_kernel_us")),
        ncu_us=_num(ncu.get("gpu_time_us")) if ncu_ok else None,
        ncu_status=str(ncu.get("status", "not run")) + ("" if ncu_ok else _why(ncu)),
        sm_mhz_min=_num(clocks.get("sm_mhz_min")),
        sm_mhz_median=_num(clocks.get("sm_mhz_median")),
        max_sm_mhz=_num(clocks.get("max_sm_mhz")),
        throttled_samples=None if throttled is None else int(throttled),
        samples=None if samples is None else int(samples),
        slowdowns=tuple(str(x) for x in clocks.get("slowdowns") or ()),
    )


def _why(ncu: Mapping[str, Any]) -> str:
    return f": {ncu['reason']}" if ncu.get("reason") else ""


def kernel_timings(doc: Mapping[str, Any]) -> list[KernelTiming]:
    """The timing cases of a document (sm-activity cases are timed too, and listed)."""
    return [kernel_timing(c) for c in doc.get("cases", [])]


@dataclass(frozen=True)
class Agreement:
    long: int
    """Kernels over FIDELITY_MIN_US with at least one profiler time."""
    agree: int
    disagree: list[KernelTiming]


def agreement(timings: Sequence[KernelTiming]) -> Agreement:
    long = [t for t in timings if t.long and t.judged_diff is not None]
    return Agreement(len(long), sum(t.agrees for t in long), [t for t in long if t.disagrees])


@dataclass(frozen=True)
class SmActivity:
    """One decode kernel on one sm-activity batch."""

    backend: str
    batch: str
    sm_active_pct: float | None
    occupancy_pct: float | None
    engine_us: float | None
    total_kv_tokens: int | None

    @property
    def idle_pct(self) -> float | None:
        return None if self.sm_active_pct is None else 100.0 - self.sm_active_pct


def sm_activity(doc: Mapping[str, Any]) -> dict[str, dict[str, SmActivity]]:
    """backend -> batch (`uniform`, `mixed`, `4-long`) -> ncu's SM activity, for ok cases."""
    out: dict[str, dict[str, SmActivity]] = {}
    for c in doc.get("cases", []):
        if not is_sm_activity(c) or c.get("status") != "ok":
            continue
        ncu = c.get("ncu") or {}
        ok = ncu.get("status") == "ok"
        batch = str(c["case"])[len(SM_CASE_PREFIX) :]
        total = _num(c.get("total_kv_tokens"))
        out.setdefault(variant_label(c), {})[batch] = SmActivity(
            variant_label(c),
            batch,
            _num(ncu.get("sm_active_pct")) if ok else None,
            _num(ncu.get("achieved_occupancy_pct")) if ok else None,
            _num(c.get("engine_us")),
            None if total is None else int(total),
        )
    return out


def batch_order(batch: str) -> int:
    return SM_BATCHES.index(batch) if batch in SM_BATCHES else len(SM_BATCHES)


@dataclass(frozen=True)
class ClaimVerdict:
    backend: str
    verdict: str
    """`holds`, `partly` (raggedness idles SMs, fewer than claimed), `does not hold`, `unknown`."""
    sentence: str


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}%"


def claim_verdict(backend: str, by_batch: Mapping[str, SmActivity]) -> ClaimVerdict:
    """Does the brief's claim hold for this kernel? Judged on its most idle ragged batch: holds
    when at least CLAIM_IDLE_PCT - CLAIM_MARGIN_PTS of SMs idle there; partly when idle rose at
    least RAGGED_LOSS_PTS over the uniform batch; else it does not hold."""
    uniform = by_batch.get("uniform")
    ragged = [a for b, a in by_batch.items() if b != "uniform" and a.idle_pct is not None]
    seen = ", ".join(
        f"{_pct(a.sm_active_pct)} on the {b} batch"
        for b, a in sorted(by_batch.items(), key=lambda kv: batch_order(kv[0]))
    )
    if not ragged:
        return ClaimVerdict(backend, "unknown", f"{backend}: no SM activity on a ragged batch.")
    worst = max(ragged, key=lambda a: a.idle_pct or 0.0)
    idle = worst.idle_pct or 0.0
    base = uniform.idle_pct if uniform is not None else None
    rise = None if base is None else idle - base
    if idle >= CLAIM_IDLE_PCT - CLAIM_MARGIN_PTS:
        verdict = "holds"
    elif rise is not None and rise >= RAGGED_LOSS_PTS:
        verdict = "partly"
    else:
        verdict = "does not hold"
    than = "" if rise is None else f", {rise:+.0f} points against the uniform batch"
    sentence = (
        f"{backend}: SMs active {seen}. At most {idle:.0f}% idle, on the {worst.batch} batch"
        f"{than}; the brief says {CLAIM_IDLE_PCT:.0f}%: the claim "
        + {
            "holds": "holds for this kernel.",
            "partly": "holds only in part: raggedness idles SMs, but fewer than claimed.",
            "does not hold": "does not hold for this kernel.",
        }[verdict]
    )
    return ClaimVerdict(backend, verdict, sentence)
