from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbench.fp8study.data import OUTLIER_CHANNELS, outlier_factors
from attnbench.workload.quant import (
    FP8_FORMATS,
    SCHEMES,
    Scheme,
    calibration_rows,
    dequantize,
    fp8_format,
    kv_schemes,
    quantize,
    quantize_calibrated,
    quantize_tensor,
    scale_shape,
)

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2


def _kv(n: int = 64, h: int = 4, d: int = 32, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, h, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_formats_match_torch_finfo() -> None:
    for fmt in FP8_FORMATS.values():
        info = torch.finfo(fmt.dtype)
        assert fmt.max_value == info.max
        assert fmt.min_normal == info.smallest_normal
    assert fp8_format("fp8_e4m3") is fp8_format(E4M3) is FP8_FORMATS["e4m3"]
    assert fp8_format("float8_e5m2").name == "e5m2"
    with pytest.raises(ValueError, match="allowed: e4m3, e5m2"):
        fp8_format("e3m4")
    with pytest.raises(ValueError, match="not an fp8 dtype"):
        fp8_format(torch.float16)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_scale_shapes_broadcast_per_scheme(scheme: Scheme) -> None:
    x = _kv(n=10, h=3, d=8)
    expected = {
        "none": (1, 1, 1),
        "tensor": (1, 1, 1),
        "head": (1, 3, 1),
        "token": (10, 3, 1),
        "channel": (1, 3, 8),
    }[scheme]
    assert scale_shape(scheme, (10, 3, 8)) == expected
    q = quantize_tensor(x, scheme, E4M3)
    assert tuple(q.scales.shape) == expected
    assert q.scales.dtype == torch.float32
    assert q.data.dtype == E4M3
    assert q.data.shape == x.shape


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("scheme", ["tensor", "head", "token", "channel"])
def test_round_trip_error_is_half_an_ulp(fmt: str, scheme: Scheme) -> None:
    """Amax-scaled values sit in the normal range (or are tiny); each normal value comes back
    within half a unit in the last place: 2**-(mantissa_bits + 1) relative."""
    f = fp8_format(fmt)
    x = _kv()
    q = quantize_tensor(x, scheme, f.dtype, calibration_tokens=None)
    back = q.dequantize(torch.float64)
    scaled = (x / q.scales.double()).abs()
    normal = scaled >= f.min_normal
    rel = ((back - x).abs() / x.abs())[normal]
    assert float(rel.max()) <= 2.0 ** -(f.mantissa_bits + 1) * (1 + 1e-6)
    # the largest magnitude of each scale group maps onto the format's max exactly
    assert float(q.data.float().abs().amax()) == f.max_value
    assert q.stats.saturated == 0


def test_crafted_underflow_saturation_subnormal_counts_e4m3() -> None:
    # scale 1: 1e-4 and 2**-10 (a tie, rounds to even 0) underflow; 2**-9 and 0.01 are
    # subnormal (below 2**-6); 500 and -1000 saturate to +-448.
    x = torch.tensor([0.0, 1e-4, 2.0**-10, 2.0**-9, 0.01, 0.5, 500.0, -1000.0]).reshape(8, 1, 1)
    q = quantize_tensor(x, "none", E4M3)
    s = q.stats
    assert (s.numel, s.nonzero, s.underflow, s.saturated, s.subnormal) == (8, 7, 2, 2, 2)
    assert q.data.float().flatten().tolist()[-2:] == [448.0, -448.0]
    assert s.underflow_fraction == pytest.approx(2 / 8)


def test_crafted_counts_e5m2() -> None:
    # e5m2: min subnormal 2**-16 (1.5e-5), min normal 2**-14, max 57344
    x = torch.tensor([1e-6, 1e-5, 1e-3, 60000.0]).reshape(4, 1, 1)
    s = quantize_tensor(x, "none", E5M2).stats
    assert (s.underflow, s.subnormal, s.saturated) == (1, 1, 1)


def test_scaling_rescues_small_values_from_underflow() -> None:
    x = _kv() * 1e-3  # below e4m3's smallest normal at scale 1
    unscaled = quantize_tensor(x, "none", E4M3).stats
    scaled = quantize_tensor(x, "tensor", E4M3).stats
    assert unscaled.subnormal_fraction + unscaled.underflow_fraction > 0.99
    assert unscaled.underflow_fraction > 0.5  # most become exactly 0
    assert scaled.underflow == 0
    assert scaled.subnormal_fraction < 0.01


def test_static_scale_saturates_values_beyond_its_calibration() -> None:
    calib = _kv(seed=1)
    x = _kv(seed=2) * 2.0  # twice the calibrated range
    q = quantize_calibrated(x, "tensor", E4M3, calib)
    assert q.stats.saturated > 0
    assert float(q.scales) == pytest.approx(float(calib.abs().amax()) / 448.0, rel=1e-6)
    # the dynamic per-token scheme ignores the calibration and never saturates
    assert quantize_calibrated(x, "token", E4M3, calib).stats.saturated == 0


def test_calibration_rows_are_an_even_subset() -> None:
    rows = calibration_rows(1000, 10)
    assert rows.tolist()[0] == 0
    assert rows.tolist()[-1] == 999
    assert len(set(rows.tolist())) == 10
    assert calibration_rows(5, 10).tolist() == [0, 1, 2, 3, 4]
    assert calibration_rows(5, None).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="must be positive"):
        calibration_rows(5, 0)


def test_zero_rows_get_unit_scale_and_no_nan() -> None:
    x = _kv(n=4)
    x[1] = 0.0
    q = quantize_tensor(x, "token", E4M3)
    assert torch.all(q.scales[1] == 1.0)
    assert torch.isfinite(q.dequantize()).all()
    assert q.stats.nonzero == x.numel() - x[1].numel()


def test_dequantize_broadcasts_scales_and_quantize_matches_legacy_scalar() -> None:
    x = _kv(n=8)
    scale = float(x.abs().amax()) / 448.0
    a = quantize(x, scale, E4M3)
    b = quantize(x, torch.full((1, 1, 1), scale), E4M3)
    assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    assert torch.allclose(dequantize(a, scale), dequantize(b, torch.full((1, 1, 1), scale)))


def test_kv_schemes_pair_channel_k_with_token_v() -> None:
    assert kv_schemes("channel") == ("channel", "token")
    assert kv_schemes("tensor") == ("tensor", "tensor")


def test_per_channel_beats_per_tensor_on_outlier_channel_k() -> None:
    """On K with 10-100x outlier channels, one scale for the whole tensor is set by the
    outliers and pushes the ordinary channels toward the subnormal range: more of them
    underflow or lose mantissa bits. Per-channel scales give each channel the full range.
    (fp8 is floating point, so the attention-level gain is small: see `attnbench fp8`.)"""
    n, h, d = 2048, 4, 128
    factors = outlier_factors(h, d, seed=0, device=torch.device("cpu"))
    assert int((factors > 1).sum()) == h * OUTLIER_CHANNELS
    assert float(factors.max()) <= 100.0
    assert float(factors[factors > 1].min()) >= 10.0
    k = _kv(n=n, h=h, d=d, seed=3) * factors
    tensor = quantize_tensor(k, "tensor", E4M3, calibration_tokens=None)
    channel = quantize_tensor(k, "channel", E4M3, calibration_tokens=None)
    assert channel.stats.subnormal * 20 < tensor.stats.subnormal
    assert channel.stats.underflow < tensor.stats.underflow
    ordinary = (factors == 1).expand(n, h, d)

    def mean_rel_err(q: torch.Tensor) -> float:
        back = dequantize(q, 1.0, torch.float64)
        return float(((back - k).abs() / k.abs())[ordinary].mean())

    t_err = mean_rel_err(tensor.data.double() * tensor.scales.double())
    c_err = mean_rel_err(channel.data.double() * channel.scales.double())
    assert c_err < t_err


@settings(max_examples=30, deadline=None)
@given(
    scale_exp=st.integers(min_value=-12, max_value=12),
    scheme=st.sampled_from(SCHEMES),
    fmt=st.sampled_from(["e4m3", "e5m2"]),
)
def test_stats_are_consistent_for_any_magnitude(scale_exp: int, scheme: Scheme, fmt: str) -> None:
    f = fp8_format(fmt)
    x = _kv(n=16, h=2, d=16) * (2.0**scale_exp)
    q = quantize_tensor(x, scheme, f.dtype, calibration_tokens=None)
    s = q.stats
    assert 0 <= s.underflow <= s.nonzero <= s.numel
    assert s.subnormal + s.underflow <= s.numel
    back = q.dequantize(torch.float64)
    assert torch.isfinite(back).all()
    if scheme != "none":  # amax-scaled: nothing saturates, relative L2 error stays small
        assert s.saturated == 0
        rel = float(torch.linalg.vector_norm(back - x) / torch.linalg.vector_norm(x))
        assert rel < 2.0 ** -(f.mantissa_bits + 1)
    assert not math.isnan(s.subnormal_fraction)
