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
from typing import Any

from attnbench.replay.costmodel import AttentionCostModel, padded_from_ragged
from attnbench.replay.gemm import GemmRoofline
from attnbench.replay.simulator import SchedulerConfig, SimResult, simulate
from attnbench.replay.stepcost import ReplayCost
from attnbench.replay.steps import StepFeatures
from attnbench.replay.summary import p99_itl_ms, summarize
from attnbench.replay.traffic import ReplayRequest, arrival_rate, scale_rate

SCHEMA = "attnbench.replay/1"
BRIEF_CLAIM = {"itl_before_ms": 14.2, "itl_after_ms": 138.6, "factor": 138.6 / 14.2}


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


@dataclass
class StudyOutcome:
    data: dict[str, Any]
    sims: dict[str, SimResult] = field(default_factory=dict)
    """Replay at rate scale 1 (or the first scale) per candidate, for `--live`."""
    costs: dict[str, ReplayCost] = field(default_factory=dict)
    models: dict[str, AttentionCostModel] = field(default_factory=dict)
    """The fitted (unpadded) models of the replayed variants."""
    main: str = ""
    """The candidate whose replay `--live` samples: the hybrid when there is one."""


def _total_us(model: AttentionCostModel, f: StepFeatures, part: str) -> float:
    if part == "decode":
        return float(model.decode_us(f.n_decode, f.kv_total, f.kv_max).sum())
    return float(model.prefill_us(f.n_prefill, f.q_prefill, f.pairs_prefill).sum())


def best_on(models: dict[str, AttentionCostModel], f: StepFeatures, part: str) -> str | None:
    """The variant with the least total `part` attention time over the steps `f`."""
    have = {name: m for name, m in models.items() if getattr(m, part) is not None and not m.padded}
    if not have:
        return None
    return min(sorted(have), key=lambda n: _total_us(have[n], f, part))


def _reference_steps(
    requests: list[ReplayRequest],
    sched: SchedulerConfig,
    models: dict[str, AttentionCostModel],
    gemm: GemmRoofline,
    num_layers: int,
) -> StepFeatures:
    both = [n for n, m in sorted(models.items()) if m.decode and m.prefill]
    dec = both[0] if both else next(n for n, m in sorted(models.items()) if m.decode)
    pre = both[0] if both else next(n for n, m in sorted(models.items()) if m.prefill)
    cost = ReplayCost("reference", models[dec], models[pre], gemm, num_layers)
    return simulate(requests, sched, cost).features


def candidates(
    models: dict[str, AttentionCostModel],
    padded_models: dict[str, AttentionCostModel],
    ref: StepFeatures,
    gemm: GemmRoofline,
    num_layers: int,
    opts: StudyOptions,
) -> tuple[list[tuple[str, str, ReplayCost]], list[str]]:
    """(kind, name, cost) per candidate, and notes."""
    notes: list[str] = []
    best_pre = best_on(models, ref, "prefill")
    best_dec = best_on(models, ref, "decode")
    out: list[tuple[str, str, ReplayCost]] = []
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
        out.append(("single", label, ReplayCost(label, m, models[pre_name], gemm, num_layers)))
        if opts.padded:
            pm = padded_models.get(name) or padded_from_ragged(m)
            plabel = f"{name} [padded]"
            out.append(
                ("padded", plabel, ReplayCost(plabel, pm, models[pre_name], gemm, num_layers))
            )
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
            out.append(
                ("hybrid", label, ReplayCost(label, models[dec], models[pre], gemm, num_layers))
            )
            notes.append(f"hybrid chosen by {source}")
    return out, notes


def find_crossing(
    evaluate: Callable[[float], float],
    known: dict[float, float],
    target_ms: float,
    steps: int,
) -> dict[str, Any]:
    """The rate scale at which p99 ITL (ms) first exceeds `target_ms`.

    `known` maps evaluated scales to p99 ITL; when the crossing is bracketed, the bracket is
    halved `steps` times (geometric midpoint) with `evaluate`.
    """
    scales = sorted(known)
    above = [s for s in scales if known[s] > target_ms]
    if not above:
        return {"status": "below", "max_scale": scales[-1], "scale": None}
    hi = above[0]
    below = [s for s in scales if s < hi]
    if not below:
        return {"status": "above", "min_scale": scales[0], "scale": None}
    lo = below[-1]
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        if evaluate(mid) > target_ms:
            hi = mid
        else:
            lo = mid
    return {"status": "crossed", "scale": math.sqrt(lo * hi), "bracket": [lo, hi]}


def run_study(
    requests: list[ReplayRequest],
    sched: SchedulerConfig,
    models: dict[str, AttentionCostModel],
    padded_models: dict[str, AttentionCostModel],
    gemm: GemmRoofline,
    opts: StudyOptions,
) -> StudyOutcome:
    """Replay every candidate at every rate scale; JSON-able data plus the rate-1 replays."""
    if not models:
        raise ValueError("no cost models: the results have no usable rows for this shape")
    num_layers = gemm.deployment.num_layers
    base_rate = arrival_rate(requests)
    ref = _reference_steps(requests, sched, models, gemm, num_layers)
    cands, notes = candidates(models, padded_models, ref, gemm, num_layers, opts)
    outcome = StudyOutcome(data={}, models=dict(models))
    hybrids = [n for k, n, _ in cands if k == "hybrid"]
    singles = [n for k, n, _ in cands if k == "single"]
    outcome.main = (hybrids or singles or [cands[0][1]])[0] if cands else ""
    runs: list[dict[str, Any]] = []
    crossings: dict[str, Any] = {}
    main_scale = 1.0 if 1.0 in opts.rate_scales else opts.rate_scales[0]
    for kind, name, cost in cands:
        p99: dict[float, float] = {}

        def replay(scale: float, cost: ReplayCost = cost) -> tuple[SimResult, dict[str, Any]]:
            sim = simulate(scale_rate(requests, scale), sched, cost)
            return sim, summarize(sim, cost)

        for scale in opts.rate_scales:
            sim, summ = replay(scale)
            p99[scale] = p99_itl_ms(summ)
            runs.append(
                {"candidate": name, "kind": kind, "rate_scale": scale}
                | {"rate_req_s": base_rate * scale}
                | summ
            )
            if scale == main_scale:
                outcome.sims[name] = sim
                outcome.costs[name] = cost
        if opts.itl_target_ms is not None:

            def p99_at(scale: float, replay: Callable[..., Any] = replay) -> float:
                return p99_itl_ms(replay(scale)[1])

            c = find_crossing(p99_at, p99, opts.itl_target_ms, opts.bisect_steps)
            if c.get("scale") is not None:
                c["rate_req_s"] = base_rate * c["scale"]
            crossings[name] = c
    outcome.data = {
        "schema": SCHEMA,
        "base_rate_req_s": base_rate,
        "rate_scales": list(opts.rate_scales),
        "itl_target_ms": opts.itl_target_ms,
        "candidates": [{"name": n, "kind": k} | c.describe() for k, n, c in cands],
        "runs": runs,
        "crossing": crossings,
        "main_candidate": outcome.main,
        "main_scale": main_scale,
        "padded_vs_ragged": padded_comparison(runs, main_scale) if opts.padded else [],
        "brief_claim": BRIEF_CLAIM,
        "notes": notes,
    }
    return outcome


def padded_comparison(runs: Sequence[dict[str, Any]], scale: float) -> list[dict[str, Any]]:
    """Per variant at `scale`: ragged vs padded ITL and decode-step time, and their ratios."""
    at = {r["candidate"]: r for r in runs if r["rate_scale"] == scale}
    out = []
    for name, padded in sorted(at.items()):
        if not name.endswith(" [padded]"):
            continue
        base = name.removesuffix(" [padded]")
        ragged = next((r for n, r in at.items() if n == base or n.startswith(base + " (")), None)
        if ragged is None:
            continue
        row: dict[str, Any] = {"backend": base}
        for metric, key in (("itl_ms", "p50"), ("itl_ms", "p99"), ("decode_step_ms", "p50")):
            a, b = ragged[metric][key], padded[metric][key]
            row[f"ragged_{metric}_{key}"] = a
            row[f"padded_{metric}_{key}"] = b
            row[f"ratio_{metric}_{key}"] = (b / a) if a and b else None
        row["ragged_throughput_tok_s"] = ragged["throughput_tok_s"]
        row["padded_throughput_tok_s"] = padded["throughput_tok_s"]
        out.append(row)
    return out


def model_table(models: dict[str, AttentionCostModel]) -> list[dict[str, Any]]:
    return [m.as_dict() for _, m in sorted(models.items())]
