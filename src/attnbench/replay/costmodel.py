"""Attention cost per backend variant, fitted on measured sweep rows (status `ok`).

Per layer, one call each (microseconds, non-negative least squares, relative error):

    decode  latency = c0 + c1 * seqs + c2 * kv_mb + c3 * crit_mb + c4 * splits + c5 * chain
                      + c6 * ragged + c7 * odd + c8 * odd_row_mb + c9 * odd_pad_mb
    prefill latency = c0 + c1 * seqs + c2 * q_ktokens + c3 * gflop
    plan    plan_us = p0 + p1 * seqs          (host planning, once per step and call)

kv_mb = KV bytes the decode kernel streams (total KV tokens x K and V x KV heads x head_dim x
itemsize / 1e6; n x longest for a kernel that pads; `streams` x the longest work unit when that
is more: the skew tail): 1e3 / c2 is the kernel's bandwidth in GB/s, bounded below by 1e3 / the
measured ceiling so no fit implies more bandwidth than the GPU was measured to deliver.
`streams` (CTAs in flight that saturate the memory; for padded kernels also the plan's `chunk`)
is chosen from `kernelplan.STREAMS_GRID` by the training fit (each held-out fold chooses again).
Rows are fitted on their requests' lengths (`decode_lens_x`). The other features follow the
variant's split-KV plan (`replay.kernelplan`: the longest work unit, the partial outputs a
merge combines, those of the longest request, a padded kernel's masked path, its odd length).
gflop = 4 x head_dim x q_heads x causal (query, key) pairs / 1e9: 1e3 / c3 is TFLOP/s.
seqs = requests in the call (per-request work: page-table walks, q/o, partial merges); c0 =
launch and fixed cost.

Rows are those of the deployment's shape (per-GPU q heads, KV heads, head_dim, dtype, kv dtype;
page size preferred, else any, with a note). Decode rows fit the decode model; prefill and
append rows (causal) the prefill model. Rows of the workload `padded:` transform (lengths
`padded(X)`: the batch X with every request as long as its longest) are real uniform batches and
count in the decode model too; with two or more of them they also fit a separate *padded*
decode model. A padded model is evaluated at the padded batch (seqs, seqs x max, max).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from attnbench.measure import metrics
from attnbench.replay.fa3plan import FA3Decision, recorded_decision
from attnbench.replay.fit import LinearFit, fit_linear, fit_linear_choice
from attnbench.replay.fitrows import bandwidth_ceiling as bandwidth_ceiling
from attnbench.replay.fitrows import padded_label
from attnbench.replay.fitrows import shapes_in as shapes_in
from attnbench.replay.fitrows import usable_rows as usable_rows
from attnbench.replay.kernelplan import (
    CHUNK_GRID,
    DEFAULT_NUM_SMS,
    PLAN_FEATURES_OF_DECODE,
    STREAMS_GRID,
    KernelPlan,
    family_of,
)
from attnbench.replay.shape import ShapeKey as ShapeKey
from attnbench.replay.steps import FloatArray, IntArray
from attnbench.results import ResultRow

DECODE_FEATURES = ("const", "seqs", *PLAN_FEATURES_OF_DECODE)
PREFILL_FEATURES = ("const", "seqs", "q_ktokens", "gflop")
PLAN_FEATURES = ("const", "seqs")
_REDUCED = {
    DECODE_FEATURES: ("const", "seqs", "kv_mb", "crit_mb"),
    PREFILL_FEATURES: ("const", "gflop"),
}
PREFILL_KINDS = ("prefill", "append")
_X_CACHE: dict[tuple[KernelPlan, bytes, bytes, bytes], FloatArray] = {}
_X_CACHE_MAX = 8
"""`decode_x` results kept, oldest dropped first (a replay's step arrays, a few MB each)."""


@dataclass(frozen=True)
class AttentionCostModel:
    backend: str
    key: ShapeKey
    decode: LinearFit | None
    prefill: LinearFit | None
    plan_decode: LinearFit | None = None
    plan_prefill: LinearFit | None = None
    padded: bool = False
    """Decode is costed at the padded batch (every request as long as the longest)."""
    source: str = "ragged rows"
    notes: tuple[str, ...] = field(default_factory=tuple)
    num_sms: int = DEFAULT_NUM_SMS
    ceiling_gbps: float | None = None
    """The bandwidth the decode fit was bounded by (None: not bounded)."""
    streams: float = math.inf
    """The decode plan's CTAs in flight that saturate the memory (`KernelPlan.streams`)."""
    chunk: float = 128.0
    """The padded plan's smallest KV tokens per CTA (`KernelPlan.chunk`)."""

    @property
    def kernel_plan(self) -> KernelPlan:
        """The variant's split-KV plan at this shape (`replay.kernelplan`)."""
        return KernelPlan(
            family_of(self.backend),
            self.key.num_kv_heads,
            self.key.page_size,
            self.key.head_dim,
            self.key.kv_bytes_per_token,
            self.num_sms,
            self.key.kv_dtype,
            self.streams,
            self.chunk,
            self.key.num_qo_heads,
        )

    # -- features ---------------------------------------------------------------------------
    def decode_x(self, n: IntArray, kv_total: IntArray, kv_max: IntArray) -> FloatArray:
        """The decode features of many calls `[calls, len(DECODE_FEATURES)]`; the last few
        results are kept (`_X_CACHE`): a replay's summary prices its steps and measures their
        extrapolation on the same calls, and every step's plan is a Python loop."""
        n_i = np.asarray(n, dtype=np.int64).ravel()
        mx = np.asarray(kv_max, dtype=np.int64).ravel()
        total = n_i * mx if self.padded else np.asarray(kv_total, dtype=np.int64).ravel()
        plan = self.kernel_plan
        key = (plan, n_i.tobytes(), total.tobytes(), mx.tobytes())
        hit = _X_CACHE.get(key)
        if hit is None:
            feats = plan.feature_matrix(n_i, total, mx)
            hit = np.column_stack([np.ones(n_i.size), n_i.astype(np.float64), feats])
            hit.flags.writeable = False
            if len(_X_CACHE) >= _X_CACHE_MAX:
                _X_CACHE.pop(next(iter(_X_CACHE)))
            _X_CACHE[key] = hit
        return hit

    def decode_call_us(self, n: int, kv_total: int, kv_max: int) -> float:
        """`decode_us` of one call, in plain floats (the simulator's hot path)."""
        if n <= 0:
            return 0.0
        c = self._decode_coef
        total = n * kv_max if self.padded else kv_total
        f = self.kernel_plan.features(n, total, kv_max)
        return c[0] + c[1] * n + sum(ci * fi for ci, fi in zip(c[2:], f, strict=True))

    def decode_lens_x(
        self, kv_lens: Sequence[int], decision: FA3Decision | None = None
    ) -> FloatArray:
        """`decode_x` of one call whose requests' KV lengths are known (a measured row, a live
        step): the plan's split runs on the lengths, not on their summary (FA3: on the
        `decision` FA3 recorded for the call, when given)."""
        kv = np.asarray(kv_lens, dtype=np.int64).ravel()
        n, mx = int(kv.size), int(kv.max()) if kv.size else 0
        lens = [mx] * n if self.padded else kv.tolist()
        f = self.kernel_plan.features(n, int(sum(lens)), mx, lens, decision)
        return np.array([[1.0, float(n), *f]]) if n else np.zeros((1, len(DECODE_FEATURES)))

    def decode_lens_us(self, kv_lens: Sequence[int], decision: FA3Decision | None = None) -> float:
        """`decode_us` of one call from its requests' KV lengths (`decode_lens_x`)."""
        return float((self.decode_lens_x(kv_lens, decision) @ np.array(self._decode_coef))[0])

    def recorded_decision(self, row: ResultRow) -> FA3Decision | None:
        """The plan FA3 recorded for a measured decode row of this variant (None for other
        families, or a row without one)."""
        plan = self.kernel_plan
        if plan.family != "fa3" or self.padded:
            return None
        return recorded_decision(dict(row.details), plan.fa3_call, row.spec.batch_size)

    @property
    def _decode_coef(self) -> tuple[float, ...]:
        if self.decode is None:
            raise ValueError(f"{self.backend}: no decode model (no decode rows)")
        return _full_coef(self.decode, DECODE_FEATURES)

    def prefill_x(self, n: IntArray, q: IntArray, pairs: IntArray) -> FloatArray:
        n = np.asarray(n, dtype=np.float64)
        gflop = np.asarray(pairs, dtype=np.float64) * self.key.flops_per_pair / 1e9
        q_k = np.asarray(q, dtype=np.float64) / 1e3
        return np.stack([np.ones_like(n), n, q_k, gflop], axis=1)

    # -- costs per layer, microseconds; 0 where the part is empty ---------------------------
    def prefill_terms(self) -> tuple[float, float, float, float]:
        """Per layer: (us, us per request, us per query token, us per causal pair)."""
        if self.prefill is None:
            raise ValueError(f"{self.backend}: no prefill model (no prefill rows)")
        c = _full_coef(self.prefill, PREFILL_FEATURES)
        return c[0], c[1], c[2] / 1e3, c[3] * self.key.flops_per_pair / 1e9

    def plan_terms(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """((us, us per request) of the decode plan, the same of the prefill plan)."""
        zero = (0.0, 0.0)
        d = _full_coef(self.plan_decode, PLAN_FEATURES) if self.plan_decode else zero
        p = _full_coef(self.plan_prefill, PLAN_FEATURES) if self.plan_prefill else zero
        return (d[0], d[1]), (p[0], p[1])

    def decode_us(self, n: IntArray, kv_total: IntArray, kv_max: IntArray) -> FloatArray:
        coef = np.array(self._decode_coef)
        n_f = np.asarray(n, dtype=np.float64).ravel()
        if not n_f.size:
            return np.zeros(0)
        return np.where(n_f > 0, self.decode_x(n, kv_total, kv_max) @ coef, 0.0)

    def prefill_us(self, n: IntArray, q: IntArray, pairs: IntArray) -> FloatArray:
        c0, c1, c_q, c_pair = self.prefill_terms()
        n_f = np.asarray(n, dtype=np.float64)
        q_f, pairs_f = np.asarray(q, dtype=np.float64), np.asarray(pairs, dtype=np.float64)
        return np.where(n_f > 0, c0 + c1 * n_f + c_q * q_f + c_pair * pairs_f, 0.0)

    def decode_extrapolation(self, n: IntArray, kv_total: IntArray, kv_max: IntArray) -> FloatArray:
        """Per step: how far outside the decode rows' range (1.0 inside; see LinearFit)."""
        if self.decode is None:
            return np.ones(np.asarray(n).shape[0])
        x = self.decode_x(n, kv_total, kv_max)
        cols = [DECODE_FEATURES.index(f) for f in self.decode.features]
        return np.where(np.asarray(n) > 0, self.decode.extrapolation(x[:, cols]), 1.0)

    def prefill_extrapolation(self, n: IntArray, q: IntArray, pairs: IntArray) -> FloatArray:
        if self.prefill is None:
            return np.ones(np.asarray(n).shape[0])
        x = self.prefill_x(n, q, pairs)
        cols = [PREFILL_FEATURES.index(f) for f in self.prefill.features]
        return np.where(np.asarray(n) > 0, self.prefill.extrapolation(x[:, cols]), 1.0)

    def plan_us(self, n_decode: IntArray, n_prefill: IntArray) -> FloatArray:
        out = np.zeros(np.asarray(n_decode).shape[0])
        for (c0, c1), n in zip(self.plan_terms(), (n_decode, n_prefill), strict=True):
            n_f = np.asarray(n, dtype=np.float64)
            out += np.where(n_f > 0, c0 + c1 * n_f, 0.0)
        return out

    def as_dict(self) -> dict[str, object]:
        return {
            "backend": self.backend,
            "shape": self.key.describe(),
            "padded": self.padded,
            "source": self.source,
            "decode": self.decode.as_dict() if self.decode else None,
            "prefill": self.prefill.as_dict() if self.prefill else None,
            "plan_decode": self.plan_decode.as_dict() if self.plan_decode else None,
            "plan_prefill": self.plan_prefill.as_dict() if self.plan_prefill else None,
            "decode_bandwidth_gbps": _inverse(self.decode, "kv_mb"),
            "kernel_plan": self.kernel_plan.describe(),
            "ceiling_gbps": self.ceiling_gbps,
            "prefill_tflops": _inverse(self.prefill, "gflop"),
            "notes": list(self.notes),
        }


def _full_coef(fit: LinearFit, full: tuple[str, ...]) -> tuple[float, ...]:
    """The fit's coefficients in `full`'s feature order (0 for features it does not use)."""
    return tuple(fit.coef[fit.features.index(f)] if f in fit.features else 0.0 for f in full)


def _inverse(fit: LinearFit | None, feature: str) -> float | None:
    """1e3 / coefficient: GB/s for kv_mb (us per MB), TFLOP/s for gflop (us per GFLOP)."""
    if fit is None or feature not in fit.features:
        return None
    c = fit.coef[fit.features.index(feature)]
    return 1e3 / c if c > 0 else None


def _fit(
    features: tuple[str, ...], x: FloatArray, y: FloatArray, lower: dict[str, float] | None = None
) -> LinearFit:
    return _fit_choice(features, [x], y, lower)[1]


def _fit_choice(
    features: tuple[str, ...], xs: list[FloatArray], y: FloatArray, lower: dict[str, float] | None
) -> tuple[int, LinearFit]:
    """`fit_linear_choice` over candidate designs; with too few rows for every feature, the
    reduced features of the last candidate only (few rows cannot pin a non-linear parameter)."""
    if xs[0].shape[0] < len(features) + 1 and features in _REDUCED:
        reduced = _REDUCED[features]
        x = xs[-1][:, [features.index(f) for f in reduced]]
        return len(xs) - 1, fit_linear(reduced, x, y, lower=lower)
    return fit_linear_choice(features, xs, y, lower=lower)


def _plan_fit(rows: list[ResultRow]) -> LinearFit | None:
    pts = [(r.spec.batch_size, r.plan_us) for r in rows if r.plan_us and r.plan_us > 0]
    if len(pts) < 2:
        return None
    n = np.array([p[0] for p in pts], dtype=np.float64)
    y = np.array([p[1] for p in pts], dtype=np.float64)
    return fit_linear(PLAN_FEATURES, np.stack([np.ones_like(n), n], axis=1), y)


def fit_backend(
    backend: str,
    rows: list[ResultRow],
    key: ShapeKey,
    *,
    padded: bool = False,
    ceiling_gbps: float | None = None,
    num_sms: int = DEFAULT_NUM_SMS,
) -> AttentionCostModel | None:
    """The cost model of one variant from its rows (already filtered to `key`'s shape, any page
    size); None when it has neither decode nor prefill rows. With `ceiling_gbps` the decode
    fit's bandwidth (1e3 / the kv_mb coefficient) cannot exceed it."""
    notes: list[str] = []
    same_page = [r for r in rows if r.spec.page_size == key.page_size]
    if same_page:
        rows = same_page
    elif rows:
        sizes = sorted({r.spec.page_size for r in rows})
        notes.append(f"no rows at page_size={key.page_size}; used page sizes {sizes}")
    dec = _decode_rows(rows, padded)
    pre = [r for r in rows if r.spec.kind in PREFILL_KINDS and r.spec.causal and not padded]
    if not dec and not pre:
        return None
    proto = AttentionCostModel(backend, key, None, None, padded=padded, num_sms=num_sms)
    decode = prefill = None
    streams, chunk = math.inf, 128.0
    lower = {"kv_mb": 1e3 / ceiling_gbps} if ceiling_gbps else None
    if len(dec) >= 2:
        chunks = CHUNK_GRID if proto.kernel_plan.padded else (128.0,)
        protos = [replace(proto, streams=s, chunk=c) for c in chunks for s in STREAMS_GRID]
        xs = [np.concatenate([_decode_row_x(p, r) for r in dec]) for p in protos]  # inf last
        k, decode = _fit_choice(DECODE_FEATURES, xs, np.array([r.latency_us for r in dec]), lower)
        streams, chunk = protos[k].streams, protos[k].chunk
    elif dec:
        notes.append("one decode row: too few to fit")
    if len(pre) >= 2:
        x = np.concatenate([_prefill_row_x(proto, r) for r in pre])
        prefill = _fit(PREFILL_FEATURES, x, np.array([r.latency_us for r in pre]))
    elif pre:
        notes.append("one prefill row: too few to fit")
    if decode is None and prefill is None:
        return None
    return AttentionCostModel(
        backend=backend,
        key=key,
        decode=decode,
        prefill=prefill,
        plan_decode=_plan_fit(dec),
        plan_prefill=_plan_fit(pre),
        padded=padded,
        source="padded rows" if padded else "ragged rows",
        notes=tuple(notes),
        num_sms=num_sms,
        ceiling_gbps=ceiling_gbps,
        streams=streams,
        chunk=chunk,
    )


def _decode_rows(rows: list[ResultRow], padded: bool) -> list[ResultRow]:
    return [r for r in rows if r.spec.kind == "decode" and (padded_label(r.spec) or not padded)]


def fitted_decode_rows(
    rows: Iterable[ResultRow], backend: str, key: ShapeKey, *, padded: bool = False
) -> list[ResultRow]:
    """The rows `fit_models` fits `backend`'s decode model on, in its order (that of the fit's
    `cv_rel_errs`)."""
    mine = [
        r for r in usable_rows(rows) if r.backend == backend and key.matches(r.spec, any_page=True)
    ]
    same_page = [r for r in mine if r.spec.page_size == key.page_size]
    return _decode_rows(same_page or mine, padded)


def _decode_row_x(model: AttentionCostModel, row: ResultRow) -> FloatArray:
    return model.decode_lens_x(row.spec.kv_lens, model.recorded_decision(row))


def _prefill_row_x(model: AttentionCostModel, row: ResultRow) -> FloatArray:
    spec = row.spec
    pairs = metrics.attended_pairs(spec)
    return model.prefill_x(np.array([spec.batch_size]), np.array([spec.total_q]), np.array([pairs]))


def fit_models(
    rows: Iterable[ResultRow],
    key: ShapeKey,
    *,
    ceiling_gbps: float | None = None,
    num_sms: int = DEFAULT_NUM_SMS,
) -> tuple[dict[str, AttentionCostModel], dict[str, AttentionCostModel]]:
    """(ragged models, padded models) per backend variant, from `ok` rows of `key`'s shape;
    `ceiling_gbps` bounds every decode fit's bandwidth (`bandwidth_ceiling` gives one)."""
    by_backend: dict[str, list[ResultRow]] = {}
    for r in usable_rows(rows):
        if key.matches(r.spec, any_page=True):
            by_backend.setdefault(r.backend, []).append(r)
    ragged: dict[str, AttentionCostModel] = {}
    padded: dict[str, AttentionCostModel] = {}
    for name in sorted(by_backend):
        opts = {"ceiling_gbps": ceiling_gbps, "num_sms": num_sms}
        m = fit_backend(name, by_backend[name], key, **opts)  # type: ignore[arg-type]
        if m is not None:
            ragged[name] = m
        p = fit_backend(name, by_backend[name], key, padded=True, **opts)  # type: ignore[arg-type]
        if p is not None and p.decode is not None:
            padded[name] = p
    return ragged, padded


def padded_from_ragged(model: AttentionCostModel) -> AttentionCostModel:
    """The ragged model evaluated at the padded batch: what a uniform kernel that computes every
    request to the longest length would cost, by this backend's own measured rates."""
    return replace(model, padded=True, source="ragged model at the padded batch")
