"""The brief's claim that uniform grids leave 62% of SMs idle on ragged batches, read from
`attnbench fidelity --cases sm-activity --ncu` documents: each decode kernel's SM activity on
uniform vs ragged batches of one total KV, and a verdict per kernel. Pure: dicts in, verdicts
out."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SM_CASE_PREFIX = "sm-"
SM_BATCHES = ("uniform", "mixed", "4-long")
"""The sm-activity batches: one total KV, rising raggedness."""
CLAIM_IDLE_PCT = 62.0
"""The brief: uniform grids leave 62% of SMs idle on ragged batches."""
CLAIM_MARGIN_PTS = 10.0
"""The claim holds on a batch when its SMs are idle at least CLAIM_IDLE_PCT minus this."""
RAGGED_LOSS_PTS = 10.0
"""Below the claim, raggedness still costs SMs when idle rises this much over the uniform batch."""


def is_sm_activity(case: Mapping[str, Any]) -> bool:
    return str(case.get("case", "")).startswith(SM_CASE_PREFIX)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


def variant_label(case: Mapping[str, Any]) -> str:
    """The case's variant with the knobs it was planned with (`--knob`), if any."""
    knobs = case.get("knobs") or {}
    extra = ",".join(f"{k}={v}" for k, v in sorted(knobs.items()))
    return str(case.get("backend", "")) + (f" [{extra}]" if extra else "")


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
