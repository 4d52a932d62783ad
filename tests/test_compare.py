"""compare: statistics on crafted samples, verdicts, exit codes, bad input."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from attnbench.analysis.compare import (
    Timing,
    compare_frames,
    estimate_ratio,
    geomean_ratio,
    mann_whitney_p,
    parse_threshold,
    resampled_medians,
)
from attnbench.analysis.frame import load
from attnbench.cli import app
from fixtures_results import decode_specs, header, row, write_results

runner = CliRunner()


def _samples(median: float, noise: float, n: int = 128, seed: int = 0) -> Timing:
    x = median * np.exp(np.random.default_rng(seed).normal(0, noise, n))
    s = np.sort(x)
    return Timing(float(np.median(x)), float(s[n // 2 - 12]), float(s[n // 2 + 12]), x)


def test_mann_whitney_matches_the_normal_approximation() -> None:
    a, b = np.arange(1.0, 6.0), np.arange(6.0, 11.0)
    # U = 0, mean 12.5, sd sqrt(25 * 11 / 12), continuity 0.5: z = 2.507, p = 0.01219
    assert mann_whitney_p(a, b) == pytest.approx(0.01219, abs=2e-4)
    assert mann_whitney_p(a, a.copy()) == pytest.approx(1.0)
    assert mann_whitney_p(np.full(8, 3.0), np.full(8, 3.0)) == 1.0  # all tied


@pytest.mark.parametrize("seed", range(6))
def test_mann_whitney_agrees_with_scipy(seed: int) -> None:
    """The hand-written normal approximation is scipy's, ties and all (rounded timings tie)."""
    from scipy.stats import mannwhitneyu

    rng = np.random.default_rng(seed)
    n1, n2 = rng.integers(5, 200, 2)
    a = np.round(rng.normal(100, 3, n1), 0)
    b = np.round(rng.normal(100 + seed, 3, n2), 0)
    want = mannwhitneyu(a, b, alternative="two-sided", use_continuity=True, method="asymptotic")
    assert mann_whitney_p(a, b) == pytest.approx(float(want.pvalue), rel=1e-9, abs=1e-15)
    assert mann_whitney_p(b, a) == pytest.approx(mann_whitney_p(a, b), rel=1e-12)


@pytest.mark.parametrize("size", [1, 2, 5, 10, 11, 64, 250, 40_000])
def test_resampled_medians_are_numpys(size: int) -> None:
    """Counting gives np.median's values exactly, ties (rounded timings) and even sizes too."""
    rng = np.random.default_rng(size)
    samples = np.round(rng.lognormal(3.0, 0.05, size), 1)
    index = rng.integers(0, size, (300 if size < 1000 else 3, size))  # > int16: intp ranks
    want = np.median(samples[index], axis=-1)
    np.testing.assert_array_equal(resampled_medians(samples, index), want)


def test_same_distribution_is_a_tie() -> None:
    est = estimate_ratio(_samples(100, 0.02, seed=1), _samples(100, 0.02, seed=2))
    assert est.verdict == "tie"
    assert est.ci_low < 1 < est.ci_high


def test_ten_percent_slower_is_significant() -> None:
    est = estimate_ratio(_samples(100, 0.01, seed=1), _samples(110, 0.01, seed=2))
    assert est.verdict == "slower"
    assert est.p_value is not None
    assert est.p_value < 1e-6
    assert 1.08 < est.ci_low < est.ratio < est.ci_high < 1.12
    faster = estimate_ratio(_samples(110, 0.01, seed=2), _samples(100, 0.01, seed=1))
    assert faster.verdict == "faster"


def test_significant_but_inside_the_noise_floor_is_a_tie() -> None:
    a, b = _samples(100, 0.0005, 256, 1), _samples(100.5, 0.0005, 256, 2)
    est = estimate_ratio(a, b, noise_floor=0.01)
    assert est.significant  # 0.5% with 0.05% noise: real...
    assert est.verdict == "tie"  # ...but below the 1% floor
    assert estimate_ratio(a, b, noise_floor=0.001).verdict == "slower"


def test_stored_cis_without_samples() -> None:
    a = Timing(100.0, 99.0, 101.0)
    assert estimate_ratio(a, Timing(110.0, 109.0, 111.0)).verdict == "slower"
    overlap = estimate_ratio(a, Timing(101.5, 100.5, 102.5))
    assert overlap.p_value is None
    assert overlap.verdict == "tie"
    assert estimate_ratio(Timing(100.0), Timing(200.0)).verdict == "tie"  # no noise information


def test_geomean_over_cases() -> None:
    pairs = [
        (_samples(m, 0.01, seed=i), _samples(1.2 * m, 0.01, seed=i + 50))
        for i, m in enumerate((50.0, 100.0, 400.0))
    ]
    est = geomean_ratio(pairs)
    assert est.ratio == pytest.approx(1.2, rel=0.01)
    assert est.verdict == "slower"
    assert est.ci_low < 1.2 < est.ci_high


@pytest.mark.parametrize(
    ("text", "value"), [("5%", 0.05), ("0.05", 0.05), ("12.5%", 0.125), ("0", 0.0)]
)
def test_parse_threshold(text: str, value: float) -> None:
    assert math.isclose(parse_threshold(text), value)


@pytest.mark.parametrize("text", ["abc", "5", "-3%"])
def test_parse_threshold_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="threshold"):
        parse_threshold(text)


def _files(tmp_path: Path, scale_b: float, fa3_status_b: str = "ok") -> tuple[Path, Path]:
    specs = decode_specs((1024, 4096))
    a = [row(s, b, seed=1) for s in specs for b in ("flashinfer:tc", "flash-attn:fa3")]
    b = [row(s, "flashinfer:tc", seed=2, scale=scale_b) for s in specs]
    fa3 = [row(s, "flash-attn:fa3", seed=2) for s in specs]
    if fa3_status_b != "ok":
        fa3 = [r.model_copy(update={"status": fa3_status_b, "latency_us": None}) for r in fa3]
    extra = row(specs[0], "sdpa:cudnn", seed=2)  # only in B
    pa = write_results(tmp_path / "a.jsonl", a)
    pb = write_results(tmp_path / "b.jsonl", [*b, *fa3, extra], header("new"))
    return pa, pb


def test_compare_frames_classifies(tmp_path: Path) -> None:
    pa, pb = _files(tmp_path, 1.2, "mismatch")
    comp = compare_frames(load([pa]).frame, load([pb]).frame, threshold=0.05)
    by = {(e.case_id.split("/")[3], e.backend): e for e in comp.entries}
    assert by[("ctx1024", "flashinfer:tc")].outcome == "slower"
    assert by[("ctx1024", "flashinfer:tc")].regression
    assert by[("ctx1024", "flash-attn:fa3")].outcome == "broken"  # ok -> mismatch
    assert by[("ctx1024", "flash-attn:fa3")].regression
    assert by[("ctx1024", "sdpa:cudnn")].outcome == "only B"
    assert not by[("ctx1024", "sdpa:cudnn")].regression
    assert comp.overall is not None
    assert comp.overall.ratio == pytest.approx(1.2, rel=0.03)


def test_cli_compare_exit_codes(tmp_path: Path) -> None:
    pa, pb = _files(tmp_path, 1.2)
    res = runner.invoke(app, ["compare", str(pa), str(pb)])
    assert res.exit_code == 1, res.output
    assert "REGRESSION" in res.output
    assert "only B" in res.output
    res = runner.invoke(app, ["compare", str(pa), str(pb), "--threshold", "30%"])
    assert res.exit_code == 0, res.output  # slower, but within the threshold
    assert "slower" in res.output
    same_a, same_b = _files(tmp_path, 1.0)
    res = runner.invoke(app, ["compare", str(same_a), str(same_b)])
    assert res.exit_code == 0, res.output
    assert "no regression" in res.output


def test_cli_compare_status_regression(tmp_path: Path) -> None:
    pa, pb = _files(tmp_path, 1.0, "error")
    res = runner.invoke(app, ["compare", str(pa), str(pb), "--threshold", "50%"])
    assert res.exit_code == 1
    assert "broken" in res.output
    assert "(ok -> error)" in res.output  # on the line below the verdict


def test_cli_compare_bad_input(tmp_path: Path) -> None:
    pa, _ = _files(tmp_path, 1.0)
    res = runner.invoke(app, ["compare", str(pa), str(tmp_path / "missing.jsonl")])
    assert res.exit_code == 2
    assert "missing.jsonl" in res.output
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not json\n")
    res = runner.invoke(app, ["compare", str(pa), str(junk)])
    assert res.exit_code == 2
    assert "not JSON" in res.output
    res = runner.invoke(app, ["compare", str(pa), str(pa), "--threshold", "lots"])
    assert res.exit_code == 2
    other = write_results(tmp_path / "other.jsonl", [row(decode_specs((256,))[0], "sdpa:cudnn")])
    res = runner.invoke(app, ["compare", str(pa), str(other)])
    assert res.exit_code == 2
    assert "share no" in res.output
