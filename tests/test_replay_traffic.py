"""Request streams: trace adapters, the brief's agents, tie spreading, rate scaling."""

from __future__ import annotations

import itertools

import pytest

from attnbench.replay.traffic import (
    ReplayRequest,
    agents_trace,
    arrival_rate,
    load_requests,
    scale_rate,
    spread_ties,
)


def test_spread_ties_spreads_within_the_step() -> None:
    reqs = [ReplayRequest(t, 10, 2) for t in (0.0, 0.0, 0.0, 3.0, 3.0, 6.0)]
    out = spread_ties(reqs)
    assert [r.arrival_s for r in out] == pytest.approx([0.0, 1.0, 2.0, 3.0, 4.5, 6.0])
    assert [r.input_len for r in out] == [10] * 6


def test_spread_ties_leaves_distinct_stamps_alone() -> None:
    reqs = [ReplayRequest(t, 10, 2) for t in (0.0, 0.1, 0.25)]
    assert spread_ties(reqs) == reqs


def test_scale_rate_compresses_time() -> None:
    reqs = [ReplayRequest(t, 10, 2) for t in (5.0, 6.0, 9.0)]
    out = scale_rate(reqs, 2.0)
    assert [r.arrival_s for r in out] == [0.0, 0.5, 2.0]
    assert arrival_rate(out) == pytest.approx(2 * arrival_rate(reqs))
    with pytest.raises(ValueError, match="positive"):
        scale_rate(reqs, 0)


def test_agents_trace_is_the_brief_scenario() -> None:
    reqs = agents_trace("agents:450")
    assert len(reqs) == 450
    lens = [r.input_len for r in reqs]
    assert min(lens) == 256
    assert max(lens) == 65536
    assert all(128 <= r.output_len <= 1024 for r in reqs)
    assert all(0.0 <= r.arrival_s <= 1.0 for r in reqs)
    assert reqs == agents_trace("agents:450")  # seeded
    custom = agents_trace("agents:10@1000-2000", seed=1)
    assert min(r.input_len for r in custom) == 1000
    assert max(r.input_len for r in custom) == 2000
    with pytest.raises(ValueError, match="agents:N"):
        agents_trace("agents:many")


@pytest.mark.parametrize(
    ("name", "prefix"), [("azure-code", False), ("azure-conv", False), ("mooncake-conv", True)]
)
def test_real_traces_load_by_name(name: str, prefix: bool) -> None:
    reqs = load_requests(name, limit=50)
    assert len(reqs) == 50
    assert all(b.arrival_s >= a.arrival_s for a, b in itertools.pairwise(reqs))
    assert any(r.hash_ids for r in reqs) == prefix
    if prefix:
        assert all(len(r.hash_ids) == -(-r.input_len // 512) for r in reqs)
