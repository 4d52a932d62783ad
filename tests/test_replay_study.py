"""The replay study: candidates, hybrid choice, padded twins, the p99-ITL crossing rate."""

from __future__ import annotations

import math

import pytest

import replay_rows as rr
from attnbench.replay.costmodel import ShapeKey, fit_models
from attnbench.replay.deployment import Deployment
from attnbench.replay.gemm import GemmRoofline
from attnbench.replay.records import AlreadyAbove, Crossed, NeverCrossed
from attnbench.replay.simresult import SchedulerConfig
from attnbench.replay.study import StudyOptions, StudyOutcome, find_crossing, run_study
from attnbench.replay.traffic import agents_trace, load_requests

KEY = ShapeKey(8, 1, 128, "bfloat16", "bfloat16", 16)
DEP = Deployment()


def test_find_crossing_bisects_a_monotone_curve() -> None:
    def p99(scale: float) -> float:
        return 10.0 * scale  # crosses 25 ms at 2.5x

    known = {s: p99(s) for s in (0.5, 1.0, 2.0, 4.0)}
    c = find_crossing(p99, known, 25.0, steps=12, base_rate_req_s=3.0)
    assert isinstance(c, Crossed)
    assert c.scale == pytest.approx(2.5, rel=1e-3)
    assert c.bracket[0] <= c.scale <= c.bracket[1]
    assert c.rate_req_s == pytest.approx(3.0 * c.scale)
    below = find_crossing(p99, known, 100.0, 4)
    assert below == NeverCrossed(max_scale=4.0)
    assert below.model_dump() == {"status": "below", "max_scale": 4.0, "scale": None}
    assert find_crossing(p99, known, 1.0, 4) == AlreadyAbove(min_scale=0.5)


def _study(reqs: list, **opts: object) -> StudyOutcome:
    models, padded = fit_models(rr.rows(), KEY)
    sched = SchedulerConfig(kv_pages=DEP.kv_pages, max_batch=max(256, len(reqs)))
    gemm = GemmRoofline(DEP, rr.COPY_GBPS, rr.MATMUL_TFLOPS)
    return run_study(reqs, sched, models, padded, gemm, StudyOptions(**opts))  # type: ignore[arg-type]


def test_study_replays_every_variant_and_the_hybrid() -> None:
    study = _study(load_requests("azure-code", limit=150), rate_scales=(1.0, 4.0))
    names = {c.name for c in study.candidates}
    assert {"flashinfer:fa2", "flash-attn:fa3"} <= names
    # fa3's prefill is cheaper (600 vs 350 TFLOP/s) and fa2's decode has the small skew term
    hybrid = "hybrid(prefill flash-attn:fa3, decode flashinfer:fa2)"
    assert hybrid in names
    assert study.main == hybrid
    assert len(study.runs) == 2 * len(names)
    for r in study.runs:
        assert r.finished == 150
        assert r.itl_ms.p99 >= r.itl_ms.p50 > 0
    by = {(r.candidate, r.rate_scale): r for r in study.runs}
    fa2 = by[("flashinfer:fa2", 4.0)]
    assert fa2.rate_req_s == pytest.approx(4 * study.base_rate_req_s)
    assert set(study.sims) == names  # the rate-1 replays, for --live


def test_explicit_hybrid_must_have_models() -> None:
    with pytest.raises(ValueError, match="no cost model"):
        _study(load_requests("azure-code", limit=20), hybrid=("flash-attn:fa3", "nope:x"))


def test_padded_twins_cost_more_under_skew() -> None:
    study = _study(agents_trace("agents:64"), padded=True)
    rows = {r.backend: r for r in study.padded_vs_ragged}
    assert set(rows) == {"flashinfer:fa2", "flash-attn:fa3"}
    for r in rows.values():
        assert r.ratio_decode_step_ms_p50 > 1.5  # 64 agents of 256..64k: padding reads ~5x
        assert r.ratio_itl_ms_p50 > 1.0
        assert not math.isnan(r.padded_itl_ms_p99)


def test_the_automatic_hybrid_does_not_pick_a_model_fitted_on_two_rows() -> None:
    """A variant with two decode rows at half fa2's time (the H200 had such SDPA flash rows)
    would win by cost; its error is unknown, so the hybrid keeps to models on >= 5 rows."""
    from attnbench.replay.study import MIN_ROWS_TO_CHOOSE

    base = rr.rows()
    few = [
        r.model_copy(update={"backend": "sdpa:flash", "latency_us": 0.5 * (r.latency_us or 0)})
        for r in base
        if r.backend == "flashinfer:fa2" and r.spec.kind == "decode"
    ][:2]
    models, padded = fit_models(base + few, KEY)
    assert models["sdpa:flash"].decode is not None
    assert models["sdpa:flash"].decode.n_rows == 2 < MIN_ROWS_TO_CHOOSE
    reqs = load_requests("azure-code", limit=150)
    sched = SchedulerConfig(kv_pages=DEP.kv_pages, max_batch=256)
    gemm = GemmRoofline(DEP, rr.COPY_GBPS, rr.MATMUL_TFLOPS)
    study = run_study(reqs, sched, models, padded, gemm, StudyOptions(rate_scales=(1.0,)))
    hybrids = [c.name for c in study.candidates if c.kind == "hybrid"]
    assert hybrids == ["hybrid(prefill flash-attn:fa3, decode flashinfer:fa2)"]
