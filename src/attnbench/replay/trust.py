"""How far to trust a replay, per candidate, and rankings that never order a difference inside
the error.

Each candidate's attention cost carries a relative error: for decode, the error its variant
showed on GPU steps held out from its fit (leave one trace out, `replay.loto`: the worst
trace's p90 absolute error), else the p90 on live GPU steps (`attnbench replay-validate`), else
the decode fit's held-out relative RMSE; for prefill, the prefill fit's held-out relative
RMSE (the validations time decode steps only). The error is propagated through the scheduler, not
assumed to add linearly: the candidate is replayed again at the main scale with its attention
costs lowered and raised by their errors (`ScaledCost`), which moves ITL and TTFT (queueing
included) to `low_ms` and `high_ms`. Two candidates are ordered only when these ranges do not
overlap, i.e. when the difference of their predictions exceeds the sum of the errors pointing
at each other; otherwise they share a group and are reported "not distinguishable".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path

import numpy as np

from attnbench.replay.fit import LinearFit
from attnbench.replay.records import (
    CandidateInfo,
    CandidateTrust,
    ErrorSource,
    RankEntry,
    Ranking,
    ReplayTrust,
    ServingMetrics,
    TraceHeldOut,
    ValidatedError,
)
from attnbench.replay.simresult import SchedulerConfig, SimResult
from attnbench.replay.simulator import simulate
from attnbench.replay.stepcost import ReplayCost
from attnbench.replay.steps import FloatArray, StepFeatures, StepShape
from attnbench.replay.summary import summarize
from attnbench.replay.traffic import ReplayRequest
from attnbench.replay.validate import MIN_STEPS, TARGET_MEDIAN, TARGET_P90
from attnbench.replay.validation_doc import (
    ValidationDocument,
    ValidationDocumentError,
    load_validation,
)

RANKED_METRICS = ("itl_ms.p50", "itl_ms.p99", "ttft_ms.p50")
"""The metrics the replay ranks candidates by (fields of `ServingMetrics`)."""


@dataclass(frozen=True)
class ScaledCost(ReplayCost):
    """A candidate's step cost with its decode and prefill attention scaled (plan and GEMMs
    unchanged): the replay at the edge of the attention error."""

    decode_factor: float = 1.0
    prefill_factor: float = 1.0

    def parts_us(self, f: StepFeatures) -> dict[str, FloatArray]:
        parts = super().parts_us(f)
        parts["attention_decode"] = parts["attention_decode"] * self.decode_factor
        parts["attention_prefill"] = parts["attention_prefill"] * self.prefill_factor
        return parts

    def step_s(self, s: StepShape) -> float:
        us = super().step_s(s) * 1e6
        if s.n_decode > 0:
            attn = self.decode.decode_call_us(s.n_decode, s.kv_total, s.kv_max)
            us += (self.decode_factor - 1.0) * self.num_layers * attn
        if s.n_prefill > 0:
            p0, p1, p_q, p_pair = self.prefill.prefill_terms()
            attn = p0 + p1 * s.n_prefill + p_q * s.q_prefill + p_pair * s.pairs_prefill
            us += (self.prefill_factor - 1.0) * self.num_layers * attn
        return us / 1e6


def scaled(cost: ReplayCost, decode_factor: float, prefill_factor: float) -> ScaledCost:
    return ScaledCost(
        cost.name,
        cost.decode,
        cost.prefill,
        cost.gemm,
        cost.num_layers,
        decode_factor=max(decode_factor, 0.0),
        prefill_factor=max(prefill_factor, 0.0),
    )


def metric_ms(metrics: ServingMetrics, metric: str) -> float:
    """`metrics`' field `metric` (dotted, e.g. `itl_ms.p50`)."""
    return float(attrgetter(metric)(metrics))


def validated_errors(
    vdoc: ValidationDocument, source: str, shapes: Mapping[str, str], gpu: str
) -> tuple[dict[str, ValidatedError], list[tuple[str | None, str]]]:
    """Per variant, its validated error, where the validation applies to this replay: the
    same GPU (when the document names one) and the same shape as the replay's model; notes
    for what was left out, each with the variant it is about (None: the whole document)."""
    if vdoc.gpu is not None and vdoc.gpu != gpu:
        return {}, [(None, f"validation {source}: timed on {vdoc.gpu}, not {gpu}; not used")]
    out: dict[str, ValidatedError] = {}
    notes: list[tuple[str | None, str]] = []
    for name, s in sorted(vdoc.summary.items()):
        if name not in shapes:
            continue
        theirs = vdoc.shape_of(name)
        if theirs is not None and theirs != shapes[name]:
            notes.append(
                (
                    name,
                    f"validation {source}: {name} was validated at {theirs}, not this "
                    f"replay's {shapes[name]}; not used for it",
                )
            )
            continue
        if s.measured == 0:
            continue
        per_trace = {
            t: TraceHeldOut(
                steps=e[name].measured,
                median_abs_err=e[name].median_abs_err,
                p90_abs_err=e[name].p90_abs_err,
                meets_target=e[name].meets_target,
            )
            for t, e in vdoc.per_trace.items()
            if name in e
        }
        out[name] = ValidatedError(
            source=source,
            steps=s.measured,
            median_abs_err=s.median_abs_err,
            p90_abs_err=s.p90_abs_err,
            outside_share=s.outside_share,
            meets_target=s.meets_target,
            method=vdoc.method,
            worst_trace=s.worst_trace,
            worst_p90_abs_err=s.worst_p90_abs_err,
            per_trace=per_trace,
        )
    return out, notes


def _held_out(fit: LinearFit | None) -> float:
    return fit.cv_rel_rmse if fit is not None and math.isfinite(fit.cv_rel_rmse) else math.nan


def candidate_trust(
    info: CandidateInfo,
    cost: ReplayCost,
    sim: SimResult,
    validated: Mapping[str, ValidatedError],
) -> CandidateTrust:
    """The error a candidate's attention carries, and its replayed steps beyond the fit."""
    v = None if info.padded_decode else validated.get(info.decode_backend)
    decode_err: float
    source: ErrorSource
    if v is not None and math.isfinite(v.bound):
        decode_err = v.bound
        source = "held-out traces p90" if v.heldout else "validated p90"
    else:
        decode_err = _held_out(cost.decode.decode)
        source = "held-out fit" if math.isfinite(decode_err) else "unknown"
    extra = cost.extrapolation(sim.features)
    return CandidateTrust(
        candidate=info.name,
        decode_backend=info.decode_backend,
        prefill_backend=info.prefill_backend,
        validated=v,
        decode_err=decode_err,
        decode_err_from=source,
        prefill_err=_held_out(cost.prefill.prefill),
        outside_share=float((extra > 1.0).mean()) if extra.size else 0.0,
    )


def group(entries: Sequence[RankEntry]) -> list[RankEntry]:
    """Sorted by value, each with its group: a new group starts only where the entry's range
    lies wholly above every faster entry's, so entries in different groups never overlap.
    A NaN bound is unbounded (the error is unknown); NaN values are left out."""
    ranked = sorted((e for e in entries if math.isfinite(e.value_ms)), key=lambda e: e.value_ms)
    out: list[RankEntry] = []
    top, g = -math.inf, 0
    for e in ranked:
        low = e.low_ms if math.isfinite(e.low_ms) else -math.inf
        if not out or low > top:
            g += 1
        high = e.high_ms if math.isfinite(e.high_ms) else math.inf
        top = max(top, high)
        out.append(e.model_copy(update={"group": g}))
    return out


@dataclass(frozen=True)
class ReplayAtScale:
    """A replay at one rate scale, per candidate: the requests replayed, the scheduler, the
    candidates, their step costs, simulations and serving metrics."""

    requests: list[ReplayRequest]
    sched: SchedulerConfig
    rate_scale: float
    infos: Sequence[CandidateInfo]
    costs: Mapping[str, ReplayCost]
    sims: Mapping[str, SimResult]
    main: Mapping[str, ServingMetrics]


@dataclass(frozen=True)
class Validation:
    """The live-step validation a replay uses: the documents (`; `-joined, or None), the
    validated error per variant, and notes on what was found."""

    source: str | None
    errors: Mapping[str, ValidatedError]
    notes: Sequence[str] = ()


Band = tuple[ServingMetrics | None, ServingMetrics | None]


def assess(
    at: ReplayAtScale, validation: Validation, metrics: Sequence[str] = RANKED_METRICS
) -> ReplayTrust:
    """Trust per candidate, and the rankings of the deployable candidates (singles and the
    hybrid; padded twins are a what-if) at `at.rate_scale`."""
    trust = [
        candidate_trust(i, at.costs[i.name], at.sims[i.name], validation.errors) for i in at.infos
    ]
    bands = _bands(at, trust) if metrics else {}
    rankings = [_ranking(metric, bands, at) for metric in metrics]
    return ReplayTrust(
        validation=validation.source,
        candidates=trust,
        rankings=rankings,
        notes=list(validation.notes),
    )


def _bands(at: ReplayAtScale, trust: Sequence[CandidateTrust]) -> dict[str, Band]:
    """Per deployable candidate, its metrics replayed with the step costs moved by minus and
    plus its validated error ((None, None) when the error is unknown)."""
    bands: dict[str, Band] = {}
    for i, t in zip(at.infos, trust, strict=True):
        if i.kind == "padded":
            continue
        errs = (t.decode_err, t.prefill_err if math.isfinite(t.prefill_err) else 0.0)
        if not all(math.isfinite(e) for e in errs):
            bands[i.name] = (None, None)
            continue
        ends = []
        for sign in (-1.0, 1.0):
            cost = scaled(at.costs[i.name], 1 + sign * errs[0], 1 + sign * errs[1])
            ends.append(summarize(simulate(at.requests, at.sched, cost), cost))
        bands[i.name] = (ends[0], ends[1])
    return bands


def _ranking(metric: str, bands: Mapping[str, Band], at: ReplayAtScale) -> Ranking:
    """The candidates ranked on `metric`, each with its band, in groups that overlap."""
    entries = []
    for name, (lo, hi) in bands.items():
        v = metric_ms(at.main[name], metric)
        ends_ms = [metric_ms(m, metric) for m in (lo, hi) if m is not None]
        span = np.array([v, *ends_ms]) if len(ends_ms) == 2 else None
        entries.append(
            RankEntry(
                candidate=name,
                value_ms=v,
                low_ms=float(np.nanmin(span)) if span is not None else math.nan,
                high_ms=float(np.nanmax(span)) if span is not None else math.nan,
                group=0,
            )
        )
    return Ranking(metric=metric, rate_scale=at.rate_scale, entries=group(entries))


def choose_validation(
    explicit: Path | None, found: Sequence[Path], shapes: Mapping[str, str], gpu: str
) -> tuple[str | None, dict[str, ValidatedError], list[str]]:
    """The validated error per variant: from `explicit` (ValidationDocumentError when it does
    not read as one), else from those `found` beside the rows, per variant the newest document
    (its provenance time; then the most steps) that validates it on this GPU and shape, so a
    fresh measurement after a model change replaces an older one for the variants it covers (a
    file that does not read is a note). (the documents used, `; `-joined, validated errors per
    variant, notes)."""
    if explicit is not None:
        vdoc = load_validation(explicit)
        errs, about = validated_errors(vdoc, str(explicit), shapes, gpu)
        notes = [text for _, text in about]
        if not errs:
            notes.append(f"validation {explicit}: no variant of this replay in it")
        return str(explicit), errs, notes
    newest: dict[str, tuple[tuple[bool, str, int], ValidatedError]] = {}
    problems: list[str] = []
    about = []
    for path in found:
        try:
            vdoc = load_validation(path)
        except ValidationDocumentError as exc:
            problems.append(str(exc))
            continue
        doc_errs, doc_notes = validated_errors(vdoc, str(path), shapes, gpu)
        about += doc_notes
        when = str(vdoc.provenance.get("time") or "")
        for name, err in doc_errs.items():
            rank = (err.heldout, when, err.steps)  # held out first, then the newest
            if name not in newest or rank > newest[name][0]:
                newest[name] = (rank, err)
    chosen = {name: err for name, (_, err) in sorted(newest.items())}
    used = sorted({err.source for err in chosen.values()})
    kept = [text for name, text in about if name is None or name not in chosen]
    if len(found) > 1 and chosen:
        each = ", ".join(f"{name}: {err.source}" for name, err in chosen.items())
        kept.append(
            f"validation: per variant the newest of {len(found)} documents found beside the "
            f"rows ({each})"
        )
    return ("; ".join(used) or None), chosen, problems + kept


def ties(ranking: Ranking) -> dict[str, list[str]]:
    """Per candidate, the others in its group: those it is not distinguishable from."""
    return {
        e.candidate: [o.candidate for o in ranking.entries if o.group == e.group and o is not e]
        for e in ranking.entries
    }


def order_text(ranking: Ranking) -> str:
    """`a < b = c`: fastest first, `=` between candidates that are not distinguishable."""
    out = ""
    for i, e in enumerate(ranking.entries):
        if i:
            out += " = " if e.group == ranking.entries[i - 1].group else " < "
        out += e.candidate
    return out


def trust_line(t: CandidateTrust) -> str:
    """One line: how far to trust a candidate's replay."""
    via = f"decode {t.decode_backend} " if t.decode_backend != t.candidate else ""
    v = t.validated
    if v is not None and v.heldout:
        first = f"{t.candidate}: {via}{heldout_text(v)}"
    elif v is not None:
        verdict = "meets" if v.meets_target else "misses"
        first = (
            f"{t.candidate}: {via}validated on {v.steps} live steps: median |err| "
            f"{v.median_abs_err:.1%}, p90 {v.p90_abs_err:.1%} ({verdict} the target of "
            f"{TARGET_MEDIAN:.0%}/{TARGET_P90:.0%} over >= {MIN_STEPS} steps)"
        )
    else:
        held = f"held-out fit error {t.decode_err:.1%}" if math.isfinite(t.decode_err) else ""
        first = f"{t.candidate}: not validated on live steps{f' ({held})' if held else ''}"
    return f"{first}; {t.outside_share:.0%} of replayed steps beyond the calibration range"


def heldout_text(v: ValidatedError) -> str:
    """`held out on 4 traces (...)`: a leave-one-trace-out validation in one clause."""
    meeting = sum(e.meets_target for e in v.per_trace.values())
    worst = v.per_trace.get(v.worst_trace)
    tail = (
        f"; worst {v.worst_trace}: median {worst.median_abs_err:.1%}, p90 {worst.p90_abs_err:.1%}"
        if worst is not None
        else ""
    )
    return (
        f"held out on {len(v.per_trace)} traces (each judged by models fitted without it, "
        f"{v.steps} steps): median |err| {v.median_abs_err:.1%}, p90 {v.p90_abs_err:.1%}{tail}; "
        f"meets the target of {TARGET_MEDIAN:.0%}/{TARGET_P90:.0%} over >= {MIN_STEPS} steps on "
        f"{meeting} of {len(v.per_trace)}; error bound +-{v.bound:.1%}"
    )
