"""The replay study: every backend variant (and a hybrid, and padded twins) over a trace, at
scaled arrival rates, with the rate at which p99 ITL crosses a target.

Candidates:
- one per variant with a decode model; its prefill calls use its own prefill model, or, when it
  has none (a decode-only kernel), the variant whose prefill is cheapest on the replayed steps
  (named `X (prefill Y)`);
- a hybrid `hybrid(prefill X, decode Y)`: given explicitly, else the variant with the least
  prefill attention time and the one with the least decode attention time, both evaluated on
  the very steps the first candidate's replay produced at rate 1 (left out when X == Y);
- with `padded`: `X [padded]`, the same variant's decode costed at the padded batch (from rows
  labelled `padded` when the sweep has them, else its ragged model at the padded batch).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from attnbench.analysis.candidates import BASELINE_VARIANTS
from attnbench.backends.variant import is_tuned
from attnbench.replay.costmodel import AttentionCostModel, padded_from_ragged
from attnbench.replay.document import SCHEMA
from attnbench.replay.gemm import GemmRoofline
from attnbench.replay.kinds import LayerKinds
from attnbench.replay.records import (
    AlreadyAbove,
    CandidateInfo,
    CandidateKind,
    CandidateRun,
    Crossed,
    Crossing,
    NeverCrossed,
    PaddedComparison,
)
from attnbench.replay.simresult import SchedulerConfig, SimResult
from attnbench.replay.simulator import simulate
from attnbench.replay.stepcost import ReplayCost
from attnbench.replay.steps import StepFeatures
from attnbench.replay.summary import summarize
from attnbench.replay.traffic import ReplayRequest, arrival_rate, scale_rate

__all__ = ["SCHEMA", "StudyOptions", "StudyOutcome", "candidates", "find_crossing", "run_study"]


@dataclass(frozen=True)
class StudyOptions:
    rate_scales: tuple[float, ...] = (1.0,)
    itl_target_ms: float | None = None
    bisect_steps: int = 4
    hybrid: tuple[str, str] | None = None
    """(prefill variant, decode variant), or None for the automatic choice."""
    hybrid_source: str = "auto"
    padded: bool = False
    singles: tuple[str, ...] | None = None
    """Variants replayed alone (None: all); the others serve only in the hybrid."""
    auto_hybrid: bool = True
    """Without `hybrid`: the least attention time per part (False: no hybrid)."""
    progress: Callable[[str], None] | None = None
    """Told each candidate as its replay at the main scale ends."""
    kinds: LayerKinds | None = None
    """Per variant, its models per layer kind (None: one kind, `models`'s)."""


@dataclass(frozen=True)
class Candidate:
    kind: CandidateKind
    name: str
    cost: ReplayCost

    def info(self) -> CandidateInfo:
        c = self.cost
        return CandidateInfo(
            name=self.name,
            kind=self.kind,
            decode_backend=c.decode.backend,
            decode_source=c.decode.source,
            prefill_backend=c.prefill.backend,
            padded_decode=c.decode.padded,
        )


@dataclass
class StudyOutcome:
    base_rate_req_s: float
    main_scale: float
    candidates: list[CandidateInfo] = field(default_factory=list)
    runs: list[CandidateRun] = field(default_factory=list)
    """Every candidate at every rate scale."""
    crossing: dict[str, Crossing] = field(default_factory=dict)
    """Per candidate, where p99 ITL crosses the target (with a target)."""
    padded_vs_ragged: list[PaddedComparison] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sims: dict[str, SimResult] = field(default_factory=dict)
    """Replay at rate scale 1 (or the first scale) per candidate, for `--live`."""
    costs: dict[str, ReplayCost] = field(default_factory=dict)
    models: dict[str, AttentionCostModel] = field(default_factory=dict)
    """The fitted (unpadded) models of the replayed variants."""
    main: str = ""
    """The candidate whose replay `--live` samples: the hybrid when there is one."""


def _cost(
    label: str,
    models: tuple[AttentionCostModel, AttentionCostModel],
    names: tuple[str, str],
    gemm: GemmRoofline,
    opts: StudyOptions,
    padded: AttentionCostModel | None = None,
) -> ReplayCost:
    """The step cost of a candidate: decode of `names[0]` (or its `padded` twin), prefill of
    `names[1]`, per layer kind when the deployment has several."""
    kinds = opts.kinds.costs(*names, padded) if opts.kinds is not None else ()
    num_layers = gemm.deployment.num_layers
    return ReplayCost(label, models[0], models[1], gemm, num_layers, kinds)


def _total_us(model: AttentionCostModel, f: StepFeatures, part: str) -> float:
    if part == "decode":
        return float(model.decode_us(f.n_decode, f.kv_total, f.kv_max).sum())
    return float(model.prefill_us(f.n_prefill, f.q_prefill, f.pairs_prefill).sum())


MIN_ROWS_TO_CHOOSE = 5
"""Rows a part's model needs before the replay picks it by cost (hybrid, a single's prefill):
with fewer, its held-out error is unknown or rests on two or three rows, and an extrapolated
cheap model (SDPA flash decode fitted on 2 rows) won the automatic hybrid."""


def best_on(models: dict[str, AttentionCostModel], f: StepFeatures, part: str) -> str | None:
    """The variant with the least total `part` attention time over the steps `f`, among those
    whose `part` model rests on MIN_ROWS_TO_CHOOSE rows or more (all of them when none does);
    never a baseline no engine deploys (`candidates.BASELINE_VARIANTS`: FA3 on a contiguous
    copy) nor a `+tuned` variant (per-case knobs no engine exposes), so the automatic hybrid
    names only what can be served."""
    have = {
        name: m
        for name, m in models.items()
        if getattr(m, part) is not None
        and not m.padded
        and name not in BASELINE_VARIANTS
        and not is_tuned(name)
    }
    supported = {n: m for n, m in have.items() if getattr(m, part).n_rows >= MIN_ROWS_TO_CHOOSE}
    pool = supported or have
    if not pool:
        return None
    return min(sorted(pool), key=lambda n: _total_us(pool[n], f, part))


def _reference_steps(
    requests: list[ReplayRequest],
    sched: SchedulerConfig,
    models: dict[str, AttentionCostModel],
    gemm: GemmRoofline,
    opts: StudyOptions,
) -> StepFeatures:
    both = [n for n, m in sorted(models.items()) if m.decode and m.prefill]
    dec = both[0] if both else next(n for n, m in sorted(models.items()) if m.decode)
    pre = both[0] if both else next(n for n, m in sorted(models.items()) if m.prefill)
    cost = _cost("reference", (models[dec], models[pre]), (dec, pre), gemm, opts)
    return simulate(requests, sched, cost).features


def candidates(
    models: dict[str, AttentionCostModel],
    padded_models: dict[str, AttentionCostModel],
    ref: StepFeatures,
    gemm: GemmRoofline,
    num_layers: int,
    opts: StudyOptions,
) -> tuple[list[Candidate], list[str]]:
    """The candidates, and notes."""
    notes: list[str] = []
    best_pre = best_on(models, ref, "prefill")
    best_dec = best_on(models, ref, "decode")
    out: list[Candidate] = []
    for name, m in sorted(models.items()):
        if opts.singles is not None and name not in opts.singles:
            continue
        if m.decode is None:
            notes.append(f"{name}: prefill rows only; used for prefill in hybrids")
            continue
        pre_name = name if m.prefill is not None else best_pre
        if pre_name is None:
            notes.append(f"{name}: no variant has prefill rows; skipped")
            continue
        label = name if pre_name == name else f"{name} (prefill {pre_name})"
        pair = (m, models[pre_name])
        out.append(Candidate("single", label, _cost(label, pair, (name, pre_name), gemm, opts)))
        if opts.padded:
            pm = padded_models.get(name) or padded_from_ragged(m)
            plabel = f"{name} [padded]"
            pair = (pm, models[pre_name])
            cost = _cost(plabel, pair, (name, pre_name), gemm, opts, pm)
            out.append(Candidate("padded", plabel, cost))
    if opts.hybrid is None and not opts.auto_hybrid:
        return out, notes
    if opts.hybrid is not None:
        pre, dec = opts.hybrid
        missing = [n for n in (pre, dec) if n not in models]
        if missing:
            raise ValueError(
                f"hybrid: no cost model for {', '.join(missing)}; have: {', '.join(sorted(models))}"
            )
        if models[pre].prefill is None or models[dec].decode is None:
            raise ValueError(f"hybrid: {pre} needs prefill rows and {dec} decode rows")
        source = opts.hybrid_source
    else:
        pre, dec = best_pre or "", best_dec or ""
        source = "auto: least attention time on the replayed steps"
    if pre and dec:
        if pre == dec and opts.hybrid is None:
            notes.append(f"hybrid: {pre} is best at both prefill and decode; no hybrid needed")
        else:
            label = f"hybrid(prefill {pre}, decode {dec})"
            cost = _cost(label, (models[dec], models[pre]), (dec, pre), gemm, opts)
            out.append(Candidate("hybrid", label, cost))
            notes.append(f"hybrid chosen by {source}")
    return out, notes


def find_crossing(
    evaluate: Callable[[float], float],
    known: dict[float, float],
    target_ms: float,
    steps: int,
    base_rate_req_s: float = 1.0,
) -> Crossing:
    """The rate scale at which p99 ITL (ms) first exceeds `target_ms`.

    `known` maps evaluated scales to p99 ITL; when the crossing is bracketed, the bracket is
    halved `steps` times (geometric midpoint) with `evaluate`. The crossing's rate is
    `base_rate_req_s` times its scale.
    """
    scales = sorted(known)
    above = [s for s in scales if known[s] > target_ms]
    if not above:
        return NeverCrossed(max_scale=scales[-1])
    hi = above[0]
    below = [s for s in scales if s < hi]
    if not below:
        return AlreadyAbove(min_scale=scales[0])
    lo = below[-1]
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        if evaluate(mid) > target_ms:
            hi = mid
        else:
            lo = mid
    scale = math.sqrt(lo * hi)
    return Crossed(scale=scale, bracket=(lo, hi), rate_req_s=base_rate_req_s * scale)


def run_study(
    requests: list[ReplayRequest],
    sched: SchedulerConfig,
    models: dict[str, AttentionCostModel],
    padded_models: dict[str, AttentionCostModel],
    gemm: GemmRoofline,
    opts: StudyOptions,
) -> StudyOutcome:
    """Replay every candidate at every rate scale: the runs, crossings and the rate-1 replays."""
    if not models:
        raise ValueError("no cost models: the results have no usable rows for this shape")
    num_layers = gemm.deployment.num_layers
    base_rate = arrival_rate(requests)
    ref = _reference_steps(requests, sched, models, gemm, opts)
    cands, notes = candidates(models, padded_models, ref, gemm, num_layers, opts)
    main_scale = 1.0 if 1.0 in opts.rate_scales else opts.rate_scales[0]
    outcome = StudyOutcome(
        base_rate_req_s=base_rate,
        main_scale=main_scale,
        candidates=[c.info() for c in cands],
        notes=notes,
        models=dict(models),
    )
    by_kind = {k: [c.name for c in cands if c.kind == k] for k in ("hybrid", "single")}
    outcome.main = (by_kind["hybrid"] or by_kind["single"] or [c.name for c in cands] or [""])[0]
    for i, cand in enumerate(cands, 1):
        p99: dict[float, float] = {}
        for scale in opts.rate_scales:
            sim = simulate(scale_rate(requests, scale), sched, cand.cost)
            summ = summarize(sim, cand.cost)
            p99[scale] = summ.itl_ms.p99
            label = dict(
                candidate=cand.name, kind=cand.kind, rate_scale=scale, rate_req_s=base_rate * scale
            )
            outcome.runs.append(CandidateRun.model_validate(label | summ.model_dump()))
            if scale == main_scale:
                outcome.sims[cand.name] = sim
                outcome.costs[cand.name] = cand.cost
                if opts.progress is not None:
                    opts.progress(
                        f"[{i}/{len(cands)}] {cand.name}: {sim.num_steps:,} steps, ITL p50 "
                        f"{summ.itl_ms.p50:.2f} ms, TTFT p50 {summ.ttft_ms.p50:.1f} ms"
                    )
        if opts.itl_target_ms is not None:

            def p99_at(scale: float, cost: ReplayCost = cand.cost) -> float:
                sim = simulate(scale_rate(requests, scale), sched, cost)
                return summarize(sim, cost).itl_ms.p99

            outcome.crossing[cand.name] = find_crossing(
                p99_at, p99, opts.itl_target_ms, opts.bisect_steps, base_rate
            )
    if opts.padded:
        outcome.padded_vs_ragged = padded_comparison(outcome.runs, main_scale)
    return outcome


def padded_comparison(runs: Sequence[CandidateRun], scale: float) -> list[PaddedComparison]:
    """Per variant at `scale`: ragged vs padded ITL and decode-step time, and their ratios."""
    at = {r.candidate: r for r in runs if r.rate_scale == scale}
    out = []
    for name, padded in sorted(at.items()):
        if not name.endswith(" [padded]"):
            continue
        base = name.removesuffix(" [padded]")
        ragged = next((r for n, r in at.items() if n == base or n.startswith(base + " (")), None)
        if ragged is None:
            continue

        def ratio(a: float, b: float) -> float:
            return b / a if a and b and math.isfinite(a) and math.isfinite(b) else math.nan

        out.append(
            PaddedComparison(
                backend=base,
                ragged_itl_ms_p50=ragged.itl_ms.p50,
                padded_itl_ms_p50=padded.itl_ms.p50,
                ratio_itl_ms_p50=ratio(ragged.itl_ms.p50, padded.itl_ms.p50),
                ragged_itl_ms_p99=ragged.itl_ms.p99,
                padded_itl_ms_p99=padded.itl_ms.p99,
                ratio_itl_ms_p99=ratio(ragged.itl_ms.p99, padded.itl_ms.p99),
                ragged_decode_step_ms_p50=ragged.decode_step_ms.p50,
                padded_decode_step_ms_p50=padded.decode_step_ms.p50,
                ratio_decode_step_ms_p50=ratio(
                    ragged.decode_step_ms.p50, padded.decode_step_ms.p50
                ),
                ragged_throughput_tok_s=ragged.throughput_tok_s,
                padded_throughput_tok_s=padded.throughput_tok_s,
            )
        )
    return out
