from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbench.workload.cases import MAX_LEN, LengthCase
from attnbench.workload.lengths import parse_lengths
from attnbench.workload.ragged import (
    SKEW_LEVELS,
    length_stats,
    rescale,
    skew_cases,
    unpadded_label,
)


def _level(case: LengthCase) -> str:
    return case.label.removeprefix("skew-").split("(")[0]


@settings(max_examples=60, deadline=None)
@given(
    batch_size=st.integers(1, 512),
    mean=st.integers(4, 65536),
    seed=st.integers(0, 2**31),
)
def test_skew_cases_hold_the_same_total_with_rising_skew(
    batch_size: int, mean: int, seed: int
) -> None:
    total = batch_size * min(mean, MAX_LEN // batch_size)  # the giant request must fit
    cases = skew_cases(total, batch_size, seed)
    assert sorted(_level(c) for c in cases) == sorted(SKEW_LEVELS)
    for case in cases:
        assert sum(case.kv_lens) == total
        assert len(case.kv_lens) == batch_size
        assert min(case.kv_lens) >= 1
    ratios = [length_stats(c.kv_lens).max_over_mean for c in cases]
    assert ratios == sorted(ratios)
    uniform = next(c for c in cases if _level(c) == "uniform")
    assert max(uniform.kv_lens) - min(uniform.kv_lens) <= 1


def test_the_ragged_suites_levels_rise_in_a_known_order() -> None:
    cases = parse_lengths("skew:131072", 32, 0)
    assert [_level(c) for c in cases] == [
        "uniform",
        "sigma0.5",
        "mixed",
        "sigma1",
        "sigma1.5",
        "sigma2",
        "giant",
    ]
    giant = cases[-1].kv_lens
    assert sorted(giant) == [256] * 31 + [131072 - 31 * 256]
    ratios = [length_stats(c.kv_lens).max_over_mean for c in cases]
    assert ratios[0] == 1.0
    assert ratios[-1] > 30


def test_skew_is_seeded_only_in_request_order() -> None:
    a = parse_lengths("skew:65536,sigma1", 16, 0)[0].kv_lens
    b = parse_lengths("skew:65536,sigma1", 16, 1)[0].kv_lens
    assert a != b
    assert sorted(a) == sorted(b)
    assert parse_lengths("skew:65536,sigma1", 16, 0)[0].kv_lens == a


def test_skew_levels_can_be_chosen_and_errors_are_clear() -> None:
    cases = parse_lengths("skew:4096, giant ,uniform", 8, 0)
    assert [c.label for c in cases] == ["skew-uniform(4096)", "skew-giant(4096)"]
    assert parse_lengths("skew:4096,sigma3", 8, 0)[0].label == "skew-sigma3(4096)"
    with pytest.raises(ValueError, match="TOTAL a positive integer"):
        parse_lengths("skew:lots", 8, 0)
    with pytest.raises(ValueError, match="skew level 'wild' is not known; allowed: uniform"):
        parse_lengths("skew:4096,wild", 8, 0)
    with pytest.raises(ValueError, match="smaller than the batch"):
        parse_lengths("skew:10", 32, 0)
    with pytest.raises(ValueError, match="limit is"):
        parse_lengths("skew:8000000,giant", 4, 0)


@settings(max_examples=100, deadline=None)
@given(
    weights=st.lists(st.floats(0.001, 1e6), min_size=1, max_size=300),
    extra=st.integers(0, 10**7),
)
def test_rescale_is_exact_and_positive(weights: list[float], extra: int) -> None:
    total = len(weights) + extra
    lens = rescale(np.array(weights), total)
    assert sum(lens) == total
    assert min(lens) >= 1
    assert len(lens) == len(weights)


def test_padded_twin_pads_every_request_to_the_longest() -> None:
    (mixed,) = parse_lengths("mixed", 16, 0)
    (pad,) = parse_lengths("padded:mixed", 16, 0)
    assert pad.kv_lens == (65536,) * 16
    assert pad.label == "padded(mixed(256..65536))"
    assert unpadded_label(pad.label) == mixed.label
    assert unpadded_label(mixed.label) is None
    stats = length_stats(mixed.kv_lens)
    assert stats.padded_total == sum(pad.kv_lens)
    assert 0 < stats.padding_waste < 1
    twins = parse_lengths("padded:skew:4096,uniform,giant", 8, 0)
    assert [unpadded_label(c.label) for c in twins] == ["skew-uniform(4096)", "skew-giant(4096)"]
    with pytest.raises(ValueError, match="padded needs a distribution"):
        parse_lengths("padded:", 8, 0)


def test_prefix_distribution_adds_a_shared_prefix() -> None:
    (case,) = parse_lengths("prefix:4096+list:1,2,3", 3, 0)
    assert case.kv_lens == (4097, 4098, 4099)
    assert case.shared_prefix_len == 4096
    assert case.label == "prefix4096+list3"
    (pad,) = parse_lengths("padded:prefix:4096+list:1,2,3", 3, 0)
    assert pad.kv_lens == (4099,) * 3
    assert pad.shared_prefix_len == 4096
    for bad in ("prefix:4096", "prefix:x+mixed", "prefix:0+mixed", "prefix:16+"):
        with pytest.raises(ValueError, match=r"prefix needs P|P must be at least 1"):
            parse_lengths(bad, 3, 0)


def test_length_stats() -> None:
    s = length_stats((1, 2, 3, 10))
    assert (s.batch_size, s.total, s.min, s.p50, s.max) == (4, 16, 1, 2, 10)
    assert s.mean == 4.0
    assert s.max_over_mean == 2.5
    assert s.cv == pytest.approx(float(np.std([1, 2, 3, 10]) / 4))
    assert s.padded_total == 40
    assert s.padding_waste == pytest.approx(0.6)
    with pytest.raises(ValueError, match="at least one"):
        length_stats(())


def test_lengths_command_prints_each_batch_with_its_stats() -> None:
    from typer.testing import CliRunner

    from attnbench.cli import app

    res = CliRunner().invoke(app, ["lengths", "skew:4096,uniform,giant", "-n", "8", "--show"])
    assert res.exit_code == 0, res.output
    assert "skew-giant(4096)" in res.output
    assert "30.06" not in res.output
    assert "skew-uniform(4096): 512, 512, 512, 512, 512, 512, 512, 512" in res.output
    bad = CliRunner().invoke(app, ["lengths", "skew:4096,wild"])
    assert bad.exit_code == 2
    assert "not known" in bad.output
