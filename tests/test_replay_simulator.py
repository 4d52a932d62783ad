"""The continuous-batching simulator: invariants on small synthetic traffic (no trace files)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import pytest

from attnbench.replay.simresult import SchedulerConfig, SimResult
from attnbench.replay.simulator import simulate
from attnbench.replay.steps import FloatArray, StepFeatures, StepShape
from attnbench.replay.traffic import ReplayRequest


@dataclass(frozen=True)
class LinearCost:
    """Affine step time: a + b * decode requests + c * KV tokens + d * longest KV
    + e * prefill tokens + f * causal pairs (seconds)."""

    a: float = 2e-3
    b: float = 1e-5
    c: float = 1e-8
    d: float = 2e-8
    e: float = 5e-6
    f: float = 1e-10

    def durations_s(self, f: StepFeatures) -> FloatArray:
        return (
            self.a
            + self.b * f.n_decode
            + self.c * f.kv_total
            + self.d * f.kv_max
            + self.e * f.q_prefill
            + self.f * f.pairs_prefill
        ).astype(np.float64)

    def step_s(self, s: StepShape) -> float:
        return (
            self.a
            + self.b * s.n_decode
            + self.c * s.kv_total
            + self.d * s.kv_max
            + self.e * s.q_prefill
            + self.f * s.pairs_prefill
        )


def traffic(n: int = 60, seed: int = 0, rate: float = 20.0) -> list[ReplayRequest]:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, size=n))
    inputs = rng.integers(1, 6000, size=n)
    outputs = rng.integers(1, 80, size=n)
    return [
        ReplayRequest(float(a), int(i), int(o)) for a, i, o in zip(t, inputs, outputs, strict=True)
    ]


def config(**kw: object) -> SchedulerConfig:
    base: dict[str, object] = dict(kv_pages=4000, page_size=16, max_batch=16, token_budget=2048)
    base.update(kw)
    return SchedulerConfig(**base)  # type: ignore[arg-type]


MODES = [
    pytest.param(dict(chunked_prefill=True), id="chunked"),
    pytest.param(dict(chunked_prefill=False), id="whole-prompt"),
    pytest.param(dict(chunked_prefill=True, kv_pages=900, max_batch=64), id="tight-kv"),
]


def token_times(sim: SimResult) -> dict[int, list[float]]:
    """Each request's token emission times, rebuilt from the exact step compositions."""
    times: dict[int, list[float]] = defaultdict(list)
    for i in range(sim.num_steps):
        b = sim.batch(i)
        end = float(sim.step_start_s[i] + sim.step_dur_s[i])
        for rid in b.decode_ids.tolist():
            times[rid].append(end)
        for rid, kv in zip(b.prefill_ids.tolist(), b.prefill_kv_lens.tolist(), strict=True):
            if kv == sim.input_len[rid]:
                times[rid].insert(0, end)  # prompt complete: first token
    return times


@pytest.mark.parametrize("mode", MODES)
def test_every_request_finishes_with_its_output_length(mode: dict[str, object]) -> None:
    reqs = traffic()
    sim = simulate(reqs, config(**mode), LinearCost())
    assert not sim.rejected.any()
    assert np.isfinite(sim.finish_s).all()
    assert (sim.finish_s >= sim.first_token_s).all()
    assert sim.itl_s.size == int((sim.output_len - 1).sum())
    times = token_times(sim)
    for rid, r in enumerate(reqs):
        assert len(times[rid]) == r.output_len
        assert times[rid][-1] == pytest.approx(sim.finish_s[rid])


@pytest.mark.parametrize("mode", MODES)
def test_kv_budget_batch_and_token_limits_hold(mode: dict[str, object]) -> None:
    cfg = config(**mode)
    sim = simulate(traffic(), cfg, LinearCost())
    assert sim.pages_used.max() <= cfg.kv_pages
    f = sim.features
    assert (f.n_decode + f.n_prefill <= cfg.max_batch).all()
    if cfg.chunked_prefill:
        assert ((f.n_decode + f.q_prefill <= cfg.token_budget) | (f.q_prefill == 0)).all()
    else:
        assert not ((f.n_decode > 0) & (f.n_prefill > 0)).any()  # prefill steps stall decode
    for i in range(sim.num_steps):  # the pages in use cover every running request's KV
        b = sim.batch(i)
        needed = sum(-(-int(k) // cfg.page_size) for k in b.decode_kv_lens)
        assert needed <= sim.pages_used[i]


def test_tight_budget_queues_instead_of_overcommitting() -> None:
    cfg = config(kv_pages=900, max_batch=64)
    sim = simulate(traffic(), cfg, LinearCost())
    assert sim.pages_used.max() / cfg.kv_pages > 0.8
    assert (sim.admit_s - sim.arrival_s).max() > 0  # someone waited for pages


@pytest.mark.parametrize("mode", MODES)
def test_step_composition_matches_features_and_requests(mode: dict[str, object]) -> None:
    reqs = traffic()
    sim = simulate(reqs, config(**mode), LinearCost())
    f = sim.features
    seen_decode: dict[int, list[int]] = defaultdict(list)
    chunks: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for i in range(sim.num_steps):
        b = sim.batch(i)
        completing = sum(
            int(kv == sim.input_len[r])
            for r, kv in zip(b.prefill_ids.tolist(), b.prefill_kv_lens.tolist(), strict=True)
        )
        one = StepFeatures.of_batch(b, completing)
        for name in ("n_decode", "kv_total", "kv_max", "n_prefill", "q_prefill", "kv_prefill"):
            assert getattr(one, name)[0] == getattr(f, name)[i], (i, name)
        assert one.pairs_prefill[0] == f.pairs_prefill[i]
        assert one.n_sample[0] == f.n_sample[i]
        for rid, kv in zip(b.decode_ids.tolist(), b.decode_kv_lens.tolist(), strict=True):
            seen_decode[rid].append(kv)
        for rid, q, kv in zip(
            b.prefill_ids.tolist(),
            b.prefill_qo_lens.tolist(),
            b.prefill_kv_lens.tolist(),
            strict=True,
        ):
            chunks[rid].append((q, kv))
    for rid, r in enumerate(reqs):
        # decode steps attend to input + 1, input + 2, ... (the new token included)
        assert seen_decode[rid] == list(range(r.input_len + 1, r.input_len + r.output_len))
        # prefill chunks tile the prompt after the cached prefix
        done = int(sim.cached_tokens[rid])
        for q, kv in chunks[rid]:
            done += q
            assert kv == done
        assert done == r.input_len


@pytest.mark.parametrize("mode", MODES)
def test_ttft_covers_the_prefill_steps(mode: dict[str, object]) -> None:
    reqs = traffic()
    sim = simulate(reqs, config(**mode), LinearCost())
    prefill_time = np.zeros(len(reqs))
    for i in range(sim.num_steps):
        for rid in sim.batch(i).prefill_ids.tolist():
            prefill_time[rid] += sim.step_dur_s[i]
    assert (sim.ttft_s >= prefill_time - 1e-12).all()
    assert (sim.admit_s >= sim.arrival_s).all()


@pytest.mark.parametrize("mode", MODES)
def test_inter_token_gaps_match_the_step_timeline(mode: dict[str, object]) -> None:
    sim = simulate(traffic(), config(**mode), LinearCost())
    gaps = np.concatenate([np.diff(t) for t in token_times(sim).values()])
    np.testing.assert_allclose(np.sort(sim.itl_s), np.sort(gaps), rtol=1e-9, atol=1e-12)
    # steps follow each other or wait for an arrival, never overlap
    ends = sim.step_start_s + sim.step_dur_s
    assert (sim.step_start_s[1:] >= ends[:-1] - 1e-9).all()


def test_decode_runs_are_costed_exactly() -> None:
    cost = LinearCost()
    sim = simulate(traffic(rate=5.0), config(), cost)
    assert len(sim.blocks) < sim.num_steps  # runs of decode steps were batched
    np.testing.assert_allclose(cost.durations_s(sim.features), sim.step_dur_s, rtol=1e-9)


def test_deterministic() -> None:
    a = simulate(traffic(), config(), LinearCost())
    b = simulate(traffic(), config(), LinearCost())
    np.testing.assert_array_equal(a.step_dur_s, b.step_dur_s)
    np.testing.assert_array_equal(a.itl_s, b.itl_s)
    np.testing.assert_array_equal(a.first_token_s, b.first_token_s)


def test_whole_prompt_mode_stalls_decodes() -> None:
    reqs = traffic()
    chunked = simulate(reqs, config(chunked_prefill=True), LinearCost())
    whole = simulate(reqs, config(chunked_prefill=False), LinearCost())
    prefill_steps = whole.features.n_prefill > 0
    assert (whole.features.n_decode[prefill_steps] == 0).all()
    assert whole.itl_s.max() >= whole.step_dur_s[prefill_steps].max()
    mixed = chunked.features.n_prefill > 0
    assert (chunked.features.n_decode[mixed] > 0).any()  # chunked: decodes ride along


def test_oversized_request_is_rejected_and_counted() -> None:
    reqs = [
        ReplayRequest(0.0, 100, 10),
        ReplayRequest(0.1, 10_000, 10),  # 10,010 tokens > 200 pages x 16
        ReplayRequest(0.2, 100, 10),
    ]
    sim = simulate(reqs, config(kv_pages=200), LinearCost())
    assert sim.rejected.tolist() == [False, True, False]
    assert np.isnan(sim.finish_s[1])
    assert np.isfinite(sim.finish_s[[0, 2]]).all()


def test_output_of_one_token_finishes_at_prefill() -> None:
    sim = simulate([ReplayRequest(0.0, 300, 1)], config(), LinearCost())
    assert sim.finish_s[0] == sim.first_token_s[0]
    assert sim.itl_s.size == 0


def test_prefix_cache_shares_blocks_and_skips_compute() -> None:
    shared = (0, 1, 2, 3)  # 4 blocks of 512 = 2048 tokens
    reqs = [
        ReplayRequest(0.0, 2500, 5, (*shared, 10)),
        ReplayRequest(5.0, 2600, 5, (*shared, 11)),  # arrives after the first finished
        ReplayRequest(5.0, 1000, 5, (0, 12)),
        ReplayRequest(5.0, 2048, 5, shared),  # the whole prompt is cached: one token computed
    ]
    on = simulate(reqs, config(prefix_cache=True), LinearCost())
    off = simulate(reqs, config(prefix_cache=False), LinearCost())
    assert on.cached_tokens.tolist() == [0, 2048, 512, 2047]
    assert off.cached_tokens.tolist() == [0, 0, 0, 0]
    assert on.features.q_prefill.sum() == sum(r.input_len for r in reqs) - 2048 - 512 - 2047
    # the later requests hold fewer private pages: less memory in use while they run
    late = on.step_start_s >= 5.0
    assert on.pages_used[late].max() < off.pages_used[off.step_start_s >= 5.0].max()
    assert (on.ttft_s[1:] < off.ttft_s[1:]).all()


def test_prefix_cache_evicts_unreferenced_blocks_under_pressure() -> None:
    reqs = [ReplayRequest(float(i), 2048, 4, tuple(range(10 * i, 10 * i + 4))) for i in range(6)]
    cfg = config(kv_pages=300, prefix_cache=True)  # ~2 requests' worth of pages
    sim = simulate(reqs, cfg, LinearCost())
    assert np.isfinite(sim.finish_s).all()
    assert sim.evicted_blocks > 0
    assert sim.pages_used.max() <= cfg.kv_pages


def test_unsorted_requests_are_refused() -> None:
    with pytest.raises(ValueError, match="sorted"):
        simulate([ReplayRequest(1.0, 10, 2), ReplayRequest(0.0, 10, 2)], config(), LinearCost())


def test_thousands_of_requests_in_seconds() -> None:
    import time

    reqs = traffic(n=3000, rate=10.0)
    t0 = time.perf_counter()
    sim = simulate(reqs, config(kv_pages=100_000, max_batch=256, token_budget=8192), LinearCost())
    assert time.perf_counter() - t0 < 20.0  # typically ~1 s; generous for a shared CI core
    assert np.isfinite(sim.finish_s).all()
