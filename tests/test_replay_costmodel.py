"""Attention cost models: NNLS, recovery of known coefficients, held-out error, ranges."""

from __future__ import annotations

import numpy as np
import pytest

import replay_rows as rr
from attnbench.replay.costmodel import (
    ShapeKey,
    fit_models,
    padded_from_ragged,
    shapes_in,
)
from attnbench.replay.fit import fit_linear, nnls
from attnbench.workload.spec import WorkloadSpec

KEY = ShapeKey(8, 1, 128, "bfloat16", "bfloat16", 16)
FOUR = ("const", "seqs", "kv_mb", "unit_mb")


def test_nnls_matches_least_squares_when_unconstrained() -> None:
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 1, size=(40, 3))
    x_true = np.array([1.0, 2.0, 0.5])
    b = a @ x_true
    np.testing.assert_allclose(nnls(a, b), x_true, rtol=1e-9)


def test_nnls_clamps_a_negative_solution_at_zero() -> None:
    a = np.array([[1.0, 1.0], [1.0, 2.0], [1.0, 3.0]])
    b = np.array([3.0, 2.0, 1.0])  # unconstrained slope is -1
    x = nnls(a, b)
    assert (x >= 0).all()
    assert x[1] == 0.0
    assert x[0] == pytest.approx(2.0)  # the mean, with the slope held at 0


@pytest.mark.parametrize("backend", list(rr.COEFS))
def test_fit_recovers_known_coefficients(backend: str) -> None:
    models, _ = fit_models(rr.rows((backend,)), KEY)
    m = models[backend]
    assert m.decode is not None
    assert m.prefill is not None
    dec, pre, plan = rr.COEFS[backend]
    np.testing.assert_allclose(m.decode.coef, dec, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(m.prefill.coef, pre, rtol=1e-6, atol=1e-9)
    assert m.decode.cv_rel_rmse < 1e-9
    assert m.as_dict()["decode_bandwidth_gbps"] == pytest.approx(1e3 / dec[2])
    if plan[0] > 0:
        assert m.plan_decode is not None
        np.testing.assert_allclose(m.plan_decode.coef, plan, rtol=1e-6)
    else:
        assert m.plan_decode is None  # plan_us 0: no per-step plan


def test_fit_with_noise_reports_held_out_error() -> None:
    models, _ = fit_models(rr.rows(("flashinfer:fa2",), noise=0.05, seed=3), KEY)
    fit = models["flashinfer:fa2"].decode
    assert fit is not None
    assert 0.02 < fit.cv_rel_rmse < 0.15  # about the 5% noise, never zero
    assert fit.cv_max_rel_err >= fit.cv_rel_rmse
    assert fit.train_rel_rmse <= fit.cv_rel_rmse
    true = rr.COEFS["flashinfer:fa2"][0]
    assert fit.coef[2] == pytest.approx(true[2], rel=0.1)  # us per MB: the bandwidth term


def test_model_predicts_a_new_batch() -> None:
    models, _ = fit_models(rr.rows(), KEY)
    kv = [300, 7000, 65000, 1200]
    m = models["flash-attn:fa3"]
    assert m.decode_lens_us(kv) == pytest.approx(rr.decode_us("flash-attn:fa3", kv), rel=1e-9)
    # from the step summary alone (what the simulator records), FA3's per-request split counts
    # are estimated: close, not equal
    got = m.decode_us(np.array([4]), np.array([sum(kv)]), np.array([max(kv)]))[0]
    assert got == pytest.approx(rr.decode_us("flash-attn:fa3", kv), rel=0.01)
    spec = WorkloadSpec(kind="append", kv_lens=(20000,), qo_lens=(3000,), **rr.SHAPE)
    from attnbench.measure import metrics

    pred = m.prefill_us(np.array([1]), np.array([3000]), np.array([metrics.attended_pairs(spec)]))
    assert pred[0] == pytest.approx(rr.prefill_us("flash-attn:fa3", spec), rel=1e-9)
    assert m.decode_us(np.array([0]), np.array([0]), np.array([0]))[0] == 0.0


def test_padded_batch_costs_more_than_ragged() -> None:
    models, _ = fit_models(rr.rows(), KEY)
    ragged = models["flashinfer:fa2"]
    padded = padded_from_ragged(ragged)
    n, total, mx = np.array([32]), np.array([32 * 4000]), np.array([65536])
    assert padded.decode_us(n, total, mx)[0] > 3 * ragged.decode_us(n, total, mx)[0]
    uniform = np.array([32 * 65536])  # a uniform batch is its own padded twin
    assert padded.decode_us(n, uniform, mx)[0] == pytest.approx(ragged.decode_us(n, uniform, mx)[0])


def test_odd_length_mask_terms_are_recovered_and_bound_their_reach() -> None:
    models, _ = fit_models(rr.padded_decode_rows(), KEY)
    m = models[rr.PADDED]
    assert m.decode is not None
    # the padded plan's chunk is not identifiable from these rows, the mask terms are
    assert m.decode.cv_rel_rmse < 1e-9
    np.testing.assert_allclose(m.decode.coef[6:10], rr.PADDED_DECODE[6:10], rtol=1e-6)
    even, odd = [65536, 300, 9000, 20000], [65535, 300, 9000, 20000]
    assert m.decode_lens_us(odd) == pytest.approx(rr.decode_us(rr.PADDED, odd, rr.PADDED_DECODE))
    # one token shorter, 2 us more
    assert m.decode_lens_us(odd) - m.decode_lens_us(even) == pytest.approx(2.0, rel=1e-3)
    many = [65535, *([300] * 99)]  # 100 requests: unsplit, L x (30 + 0.1 x 100) us per MB
    row_mb = 65535 * 512 / 1e6
    assert m.decode_lens_us(many) == pytest.approx(5.0 + 0.02 * 100 + 7.0 + 2.0 + 40.0 * row_mb)
    # the simulator's summary path sees the odd length too
    n, total = np.array([4]), np.array([sum(odd)])
    assert m.decode_us(n, total, np.array([65535]))[0] == pytest.approx(m.decode_lens_us(odd))


def test_odd_calls_beyond_the_odd_rows_count_as_extrapolated() -> None:
    n, mx = np.array([256, 256, 16]), np.array([65535, 65536, 65535])
    total = n * 20000
    models, _ = fit_models(rr.padded_decode_rows(odd_reach=128), KEY)
    far = models[rr.PADDED].decode_extrapolation(n, total, mx)
    assert far[0] == pytest.approx(256 / 128)  # unsplit odd, 2x the padded MB of any odd row
    assert far[1] == 1.0  # the same batch with an even longest: inside the rows
    assert far[2] == 1.0
    # no unsplit odd row at all: such a call is outside the rows, however small
    models, _ = fit_models(rr.padded_decode_rows(odd_reach=16), KEY)
    far = models[rr.PADDED].decode_extrapolation(n, total, mx)
    assert far[0] == np.inf
    assert far[1] == far[2] == 1.0


def test_constant_feature_is_dropped_and_named() -> None:
    x = np.array([[1.0, 32.0, v, v / 10] for v in (1.0, 2.0, 4.0, 8.0, 16.0)])
    y = 5.0 + 2.0 * x[:, 2] + 0.5 * x[:, 3]
    fit = fit_linear(FOUR, x, y)
    assert fit.dropped == ("seqs",)
    assert fit.coef[1] == 0.0
    assert fit.predict(x) == pytest.approx(y)


def test_extrapolation_is_measured_above_the_fitted_range() -> None:
    x = np.array([[1.0, n, n * 2.0, 1.0 + n] for n in (1.0, 2.0, 4.0, 8.0)])
    fit = fit_linear(FOUR, x, 1.0 + x[:, 2])
    inside = fit.extrapolation(np.array([[1.0, 4.0, 8.0, 5.0]]))
    beyond = fit.extrapolation(np.array([[1.0, 16.0, 96.0, 9.0]]))
    below = fit.extrapolation(np.array([[1.0, 0.5, 1.0, 1.5]]))
    assert inside[0] == 1.0
    assert beyond[0] == pytest.approx(6.0)  # kv_mb 96 / 16 (seqs 16 / 8 is less)
    assert below[0] == 1.0  # below the range the fixed cost dominates: not counted


def test_rows_of_other_shapes_and_statuses_are_ignored() -> None:
    good = rr.rows(("flashinfer:fa2",))
    other = [
        r.model_copy(update={"spec": r.spec.model_dump() | {"num_qo_heads": 32, "num_kv_heads": 8}})
        for r in good
    ]
    failed = [r.model_copy(update={"status": "mismatch", "latency_us": None}) for r in good]
    models, _ = fit_models(other + failed, KEY)
    assert models == {}
    assert "q32/kv8/d128 bfloat16 kv=bfloat16 p16" in shapes_in(other)
    models, _ = fit_models(other + failed + good, KEY)
    assert models["flashinfer:fa2"].decode is not None
    assert models["flashinfer:fa2"].decode.n_rows == 30


def test_other_page_size_is_used_with_a_note() -> None:
    rows = [
        r.model_copy(update={"spec": r.spec.model_dump() | {"page_size": 64}}) for r in rr.rows()
    ]
    models, _ = fit_models(rows, KEY)
    assert any("page_size=16" in n for n in models["flashinfer:fa2"].notes)


def test_padded_rows_fit_a_padded_model() -> None:
    rows = rr.rows(("flashinfer:fa2",))
    padded = [
        r.model_copy(
            update={
                "case_id": r.case_id + "-padded",
                "spec": r.spec.model_dump() | {"lengths": f"padded({r.spec.lengths or 'mixed'})"},
                "latency_us": 1.5 * (r.latency_us or 0.0),
            }
        )
        for r in rows
        if r.spec.kind == "decode"
    ]
    ragged, padded_models = fit_models(rows + padded, KEY)
    assert "flashinfer:fa2" in padded_models
    pm = padded_models["flashinfer:fa2"]
    assert pm.padded
    assert pm.source == "padded rows"
    assert pm.decode is not None
    assert pm.decode.n_rows == len(padded)
    assert ragged["flashinfer:fa2"].decode is not None
    assert ragged["flashinfer:fa2"].decode.n_rows == 30 + len(padded)  # real batches too
