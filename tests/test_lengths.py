from __future__ import annotations

import numpy as np
import pytest

from attnbench.workload.lengths import parse_lengths


def test_fixed_lengths_give_one_uniform_batch_each() -> None:
    cases = parse_lengths("1024,4096", batch_size=3, seed=0)
    assert [c.kv_lens for c in cases] == [(1024,) * 3, (4096,) * 3]
    assert [c.label for c in cases] == ["ctx1024", "ctx4096"]


def test_mixed_batch_spans_the_briefs_range_and_is_seeded() -> None:
    (a,) = parse_lengths("mixed", batch_size=32, seed=7)
    (b,) = parse_lengths("mixed", batch_size=32, seed=7)
    (c,) = parse_lengths("mixed", batch_size=32, seed=8)
    assert a == b
    assert a != c
    assert min(a.kv_lens) == 256
    assert max(a.kv_lens) == 65536
    assert len(a.kv_lens) == 32
    assert a.label == "mixed(256..65536)"


def test_uniform_lognormal_and_list() -> None:
    (u,) = parse_lengths("uniform:100-200", batch_size=50, seed=0)
    assert all(100 <= n <= 200 for n in u.kv_lens)
    (ln,) = parse_lengths("lognormal:2048,0.5", batch_size=200, seed=0)
    med = sorted(ln.kv_lens)[100]
    assert 1500 < med < 2800
    (lst,) = parse_lengths("list:5,6,7", batch_size=99, seed=0)
    assert lst.kv_lens == (5, 6, 7)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gamma:3", "not a known distribution"),
        ("uniform:300", "takes LO-HI"),
        ("uniform:1,2-5", "takes LO-HI, two integers"),
        ("uniform:1-2-3", "takes LO-HI, two integers"),
        ("trace-prefix:mooncake-conv,0", "a positive integer"),
        ("uniform:300-100", "LO > HI"),
        ("lognormal:2048", "MEDIAN,SIGMA"),
        ("lognormal:-1,1", "positive"),
        ("normal:4096", "MEAN,SD"),
        ("normal:4096,x", "normal sd must be a number"),
        ("1024,abc", "comma-separated integers"),
        ("0,5", "out of range"),
    ],
)
def test_bad_distributions_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_lengths(text, batch_size=4, seed=0)


def test_normal_draws_as_flash_attention_pr_1770_does() -> None:
    """max(N(mean, sd), 1), truncated: seeded, so the same batch everywhere."""
    (case,) = parse_lengths("normal:1024,512", batch_size=128, seed=0)
    assert case.label == "normal(1024,512)"
    assert parse_lengths("normal:1024,512", batch_size=128, seed=0)[0] == case
    assert min(case.kv_lens) >= 1
    assert 900 < sum(case.kv_lens) / 128 < 1150
    raw = np.random.default_rng(0).normal(1024, 512, size=128)
    assert case.kv_lens == tuple(int(x) for x in np.floor(np.maximum(raw, 1.0)))
