"""Serving metrics of one replay: ITL, TTFT, throughput, where the time went, and how far the
cost model was extrapolated. Pure functions of a `SimResult` and its `ReplayCost`.

ITL percentiles are token-weighted (every gap between two consecutive tokens of a request is one
sample), as vLLM's and SGLang's serving benchmarks report them. `decode_step_ms` is the duration
of steps that ran no prefill: the brief's "decode latency per token".
"""

from __future__ import annotations

import math

import numpy as np

from attnbench.replay.records import (
    Extrapolation,
    LatencyMs,
    ServingMetrics,
    StepMs,
    TimeSplit,
)
from attnbench.replay.simresult import SimResult
from attnbench.replay.stepcost import FAR_EXTRAPOLATION, ReplayCost
from attnbench.replay.steps import FloatArray


def _ms(values: FloatArray, q: int) -> float:
    """Percentile `q` of `values` (seconds) in ms; NaN for no values."""
    return float(np.percentile(values, q)) * 1e3 if values.size else math.nan


def _mean_ms(values: FloatArray) -> float:
    return float(values.mean()) * 1e3 if values.size else math.nan


def _latency(values: FloatArray) -> LatencyMs:
    return LatencyMs(
        p50=_ms(values, 50), p90=_ms(values, 90), p99=_ms(values, 99), mean=_mean_ms(values)
    )


def summarize(sim: SimResult, cost: ReplayCost) -> ServingMetrics:
    """Metrics of a replay (times in ms, throughput in tokens/s)."""
    f = sim.features
    done = ~np.isnan(sim.finish_s)
    out_tokens = int(sim.output_len[done].sum())
    in_tokens = int(sim.input_len[done].sum())
    start = float(sim.arrival_s.min()) if sim.arrival_s.size else 0.0
    end = float(np.nanmax(sim.finish_s)) if done.any() else start
    makespan = end - start
    pure = (f.n_prefill == 0) & (f.n_decode > 0)
    parts = cost.parts_us(f)
    busy_us = float(sim.step_dur_s.sum() * 1e6)
    extra = cost.extrapolation(f)
    far = extra > FAR_EXTRAPOLATION
    cached = int(sim.cached_tokens[done].sum())
    decode_steps = sim.step_dur_s[pure]

    def share(us: float) -> float:
        return us / busy_us if busy_us > 0 else 0.0

    return ServingMetrics(
        requests=int(sim.arrival_s.size),
        finished=int(done.sum()),
        rejected=int(sim.rejected.sum()),
        steps=sim.num_steps,
        makespan_s=makespan,
        itl_ms=_latency(sim.itl_s),
        ttft_ms=_latency(sim.ttft_s[done]),
        decode_step_ms=StepMs(
            p50=_ms(decode_steps, 50), p99=_ms(decode_steps, 99), mean=_mean_ms(decode_steps)
        ),
        throughput_tok_s=out_tokens / makespan if makespan > 0 else math.nan,
        total_tok_s=(out_tokens + in_tokens) / makespan if makespan > 0 else math.nan,
        output_tokens=out_tokens,
        input_tokens=in_tokens,
        prefix_cached_frac=cached / in_tokens if in_tokens else 0.0,
        mean_decode_batch=float(f.n_decode[f.n_decode > 0].mean()) if pure.any() else 0.0,
        max_decode_batch=int(f.n_decode.max()) if len(f) else 0,
        peak_kv_frac=(
            float(sim.pages_used.max()) / sim.config.kv_pages if sim.pages_used.size else 0.0
        ),
        time_frac=TimeSplit(**{k: share(float(v.sum())) for k, v in parts.items()}),
        extrapolated=Extrapolation(
            far_steps_frac=float(far.mean()) if far.size else 0.0,
            far_time_frac=share(float(sim.step_dur_s[far].sum() * 1e6)),
            max_factor=float(extra.max()) if extra.size else 1.0,
        ),
    )
