"""The hybrid serving plan: prefill backend, decode backend, KV dtype and page size, each chosen
from measured rows (and only rows that passed the accuracy gate), each with its evidence.

- prefill / decode: the winners of the `prefill (all)` and `decode (all)` classes (16-bit KV).
- KV dtype: fp8 only if an fp8 decode variant is significantly faster than the 16-bit decode
  winner on the same cases (paired: the same spec except kv_dtype) AND that variant has no
  fp8 row that failed the accuracy gate; otherwise the 16-bit KV the model runs in.
- page size: the decode variant's fastest page size among those measured, when significantly
  faster on paired cases; otherwise the most measured one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from attnbench.analysis.candidates import deployable
from attnbench.analysis.compare import NOISE_FLOOR, SEED, RatioEstimate, Timing, geomean_ratio
from attnbench.analysis.frame import add_key, fmt_us, latest, ok_rows, records
from attnbench.analysis.per_model import ModelAnswer, per_model
from attnbench.analysis.recommend import (
    CLASSES,
    DECODE_ALL,
    PREFILL_ALL,
    ClassResult,
    Replicates,
    evidence,
    rank,
)


@dataclass
class Choice:
    role: str
    value: str
    why: str
    evidence: list[str] = field(default_factory=list)


@dataclass
class Plan:
    gpu: str
    prefill_backend: str | None
    decode_backend: str | None
    kv_dtype: str
    """`auto` (the model's 16-bit dtype) or an fp8 format."""
    model_dtype: str
    page_size: int | None
    choices: list[Choice] = field(default_factory=list)
    prefill_penalty: RatioEstimate | None = None
    """Prefill latency of the decode backend / of the prefill backend (single-backend engines)."""
    decode_details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Recommendation:
    gpu: str
    classes: list[ClassResult]
    prefill: ClassResult
    decode: ClassResult
    plan: Plan
    models: list[ModelAnswer] = field(default_factory=list)
    """Per model shape, when rows of several are present (`analysis.per_model`)."""


def recommend(frame: pd.DataFrame, noise_floor: float = NOISE_FLOOR) -> list[Recommendation]:
    """One recommendation per GPU found in `frame` (rows from `analysis.frame.load`)."""
    ok = deployable(ok_rows(frame))
    everything = latest(frame)
    out = []
    for gpu in sorted(set(ok["gpu"])) if not ok.empty else []:
        rows = ok[ok["gpu"] == gpu]
        reps = Replicates(np.random.default_rng(SEED))
        classes = [rank(rows[c.select(rows)], c, noise_floor, reps) for c in CLASSES]
        pre = rank(rows[PREFILL_ALL.select(rows)], PREFILL_ALL, noise_floor, reps)
        dec = rank(rows[DECODE_ALL.select(rows)], DECODE_ALL, noise_floor, reps)
        plan = build_plan(gpu, rows, everything[everything["gpu"] == gpu], pre, dec, noise_floor)
        models = per_model(rows, noise_floor, reps)
        out.append(Recommendation(gpu, classes, pre, dec, plan, models))
    return out


def build_plan(
    gpu: str,
    ok: pd.DataFrame,
    everything: pd.DataFrame,
    pre: ClassResult,
    dec: ClassResult,
    noise_floor: float = NOISE_FLOOR,
) -> Plan:
    dtypes = Counter(ok[ok["kind"] == "decode"]["dtype"]) or Counter(ok["dtype"])
    plan = Plan(gpu, pre.winner, dec.winner, "auto", dtypes.most_common(1)[0][0], None)
    plan.choices.append(_class_choice("prefill", pre))
    plan.choices.append(_class_choice("decode", dec))
    kv = _fp8_choice(ok, everything, dec.winner, noise_floor)
    plan.choices.append(kv)
    if kv.value.startswith("fp8"):
        plan.kv_dtype, _, fp8_backend = kv.value.partition(" with ")
        plan.decode_backend = fp8_backend or plan.decode_backend
    page = _page_choice(ok, plan.decode_backend, plan.kv_dtype, noise_floor)
    plan.choices.append(page)
    plan.page_size = int(page.value) if page.value.isdigit() else None
    if plan.prefill_backend and plan.decode_backend and plan.prefill_backend != plan.decode_backend:
        pre_rows = ok[PREFILL_ALL.select(ok)]
        plan.prefill_penalty = _paired(
            pre_rows[pre_rows["backend"] == plan.prefill_backend],
            pre_rows[pre_rows["backend"] == plan.decode_backend],
            (),
            noise_floor,
        )[0]
    dec_rows = ok[(ok["backend"] == plan.decode_backend) & (ok["kind"] == "decode")]
    if not dec_rows.empty:
        plan.decode_details = dec_rows.iloc[-1]["details"].as_dict()
        plan.decode_details["resolved"] = dec_rows.iloc[-1]["resolved"]
    return plan


def _class_choice(role: str, res: ClassResult) -> Choice:
    if res.winner is None:
        return Choice(role, "none", f"no {role} rows passed the accuracy gate")
    why = f"fastest on {res.n_cases} {res.cls.name} cases: {res.margin_text()}"
    if res.is_tie:
        why += " (a tie: either serves; listed first by pairwise wins, then mean latency)"
    return Choice(role, res.winner, why, [evidence(res)] + [c.describe() for c in res.crossovers])


def _paired(
    a: pd.DataFrame, b: pd.DataFrame, drop: tuple[str, ...], noise_floor: float
) -> tuple[RatioEstimate | None, int, float, float]:
    """latency(b) / latency(a) over cases equal except the spec fields in `drop` (geometric
    mean + CI), the number of pairs, and the median latency of each side over those pairs."""
    ka, kb = add_key(a, "pair", drop), add_key(b, "pair", drop)
    a_by = dict(zip(ka["pair"], records(ka), strict=True))
    pairs = [
        (Timing.of(a_by[k]), Timing.of(r))
        for k, r in zip(kb["pair"], records(kb), strict=True)
        if k in a_by
    ]
    if not pairs:
        return None, 0, float("nan"), float("nan")
    est = geomean_ratio(pairs, np.random.default_rng(SEED), noise_floor=noise_floor)
    med_a = float(np.median([p[0].median_us for p in pairs]))
    med_b = float(np.median([p[1].median_us for p in pairs]))
    return est, len(pairs), med_a, med_b


def _fp8_choice(
    ok: pd.DataFrame, everything: pd.DataFrame, base: str | None, noise_floor: float
) -> Choice:
    dec = ok[(ok["kind"] == "decode") & ~ok["padded"]]
    fp8 = dec[dec["fp8"]]
    if base is None:
        return Choice("kv_dtype", "auto", "no 16-bit decode winner to compare fp8 against")
    if fp8.empty:
        tried = everything[everything["fp8"] & (everything["kind"] == "decode")]
        why = (
            "no fp8 decode row was measured"
            if tried.empty
            else f"no fp8 decode row passed: {dict(Counter(tried['status']))}"
        )
        return Choice("kv_dtype", "auto", why + "; keeping the model's 16-bit KV")
    lines: list[str] = []
    accepted: list[tuple[float, str, str]] = []
    for (backend, kv_dtype), _ in fp8.groupby(["backend", "kv_dtype"]):
        bad = everything[
            (everything["backend"] == backend)
            & (everything["kv_dtype"] == kv_dtype)
            & (everything["status"] == "mismatch")
        ]
        if len(bad):
            worst = bad["reason"].iloc[0]
            lines.append(
                f"{backend} {kv_dtype}: rejected, {len(bad)} rows failed accuracy ({worst})"
            )
            continue
        est, n, m16, m8 = _paired(
            dec[~dec["fp8"] & (dec["backend"] == base)],
            fp8[(fp8["backend"] == backend) & (fp8["kv_dtype"] == kv_dtype)],
            ("kv_dtype",),
            noise_floor,
        )
        if est is None:
            lines.append(f"{backend} {kv_dtype}: no 16-bit {base} row on the same cases")
            continue
        verdict = {"faster": "faster", "slower": "slower", "tie": "no significant difference"}
        lines.append(
            f"{backend} {kv_dtype} vs {base} 16-bit: {est.ratio:.2f}x latency "
            f"(95% CI {est.ci_low:.2f}-{est.ci_high:.2f}, {n} cases; medians {fmt_us(m8)} vs "
            f"{fmt_us(m16)}): {verdict[est.verdict]}"
        )
        if est.verdict == "faster":
            accepted.append((est.ratio, str(backend), str(kv_dtype)))
    if not accepted:
        return Choice(
            "kv_dtype", "auto", "no fp8 variant is both accurate and significantly faster", lines
        )
    ratio, backend, kv_dtype = min(accepted)
    return Choice(
        "kv_dtype",
        f"{kv_dtype} with {backend}",
        f"fp8 decode on {backend} is {1 / ratio:.2f}x faster than the 16-bit decode winner "
        f"({base}) on the same cases, and none of its {kv_dtype} rows failed the accuracy gate",
        lines,
    )


def _page_choice(
    ok: pd.DataFrame, backend: str | None, kv_dtype: str, noise_floor: float
) -> Choice:
    if backend is None:
        return Choice("page_size", "-", "no decode winner to choose a page size for")
    rows = ok[(ok["backend"] == backend) & (ok["kind"] == "decode") & ~ok["padded"]]
    rows = rows[rows["kv_dtype"] == kv_dtype] if kv_dtype != "auto" else rows[~rows["fp8"]]
    if rows.empty:
        return Choice("page_size", "-", f"no decode rows of {backend} to choose a page size from")
    counts = Counter(rows["page_size"])
    base = int(counts.most_common(1)[0][0])
    if len(counts) == 1:
        return Choice("page_size", str(base), f"the only page size measured for {backend}")
    lines, best, best_ratio = [], base, 1.0
    for size in sorted(counts):
        if size == base:
            continue
        est, n, _, _ = _paired(
            rows[rows["page_size"] == base],
            rows[rows["page_size"] == size],
            ("page_size",),
            noise_floor,
        )
        if est is None:
            continue
        lines.append(
            f"page {size} vs {base}: {est.ratio:.2f}x (95% CI {est.ci_low:.2f}-{est.ci_high:.2f},"
            f" {n} cases): {est.verdict}"
        )
        if est.verdict == "faster" and est.ratio < best_ratio:
            best, best_ratio = int(size), est.ratio
    why = (
        f"fastest page size for {backend} ({1 / best_ratio:.2f}x vs {base})"
        if best != base
        else f"no other page size is significantly faster for {backend}"
    )
    return Choice("page_size", str(best), why, lines)
