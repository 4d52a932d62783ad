"""Serving metrics of one replay: ITL, TTFT, throughput, where the time went, and how far the
cost model was extrapolated. Pure functions of a `SimResult` and its `ReplayCost`.

ITL percentiles are token-weighted (every gap between two consecutive tokens of a request is one
sample), as vLLM's and SGLang's serving benchmarks report them. `decode_step_ms` is the duration
of steps that ran no prefill: the brief's "decode latency per token".
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from attnbench.replay.simulator import SimResult
from attnbench.replay.stepcost import FAR_EXTRAPOLATION, ReplayCost
from attnbench.replay.steps import FloatArray


def _pct(values: FloatArray, qs: tuple[int, ...], scale: float = 1e3) -> dict[str, float | None]:
    out: dict[str, float | None]
    if values.size == 0:
        out = {f"p{q}": None for q in qs}
        out["mean"] = None
        return out
    out = {f"p{q}": float(np.percentile(values, q)) * scale for q in qs}
    out["mean"] = float(values.mean()) * scale
    return out


def summarize(sim: SimResult, cost: ReplayCost) -> dict[str, Any]:
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
    return {
        "requests": int(sim.arrival_s.size),
        "finished": int(done.sum()),
        "rejected": int(sim.rejected.sum()),
        "steps": sim.num_steps,
        "makespan_s": makespan,
        "itl_ms": _pct(sim.itl_s, (50, 90, 99)),
        "ttft_ms": _pct(sim.ttft_s[done], (50, 90, 99)),
        "decode_step_ms": _pct(sim.step_dur_s[pure], (50, 99)),
        "throughput_tok_s": out_tokens / makespan if makespan > 0 else None,
        "total_tok_s": (out_tokens + in_tokens) / makespan if makespan > 0 else None,
        "output_tokens": out_tokens,
        "input_tokens": in_tokens,
        "prefix_cached_frac": cached / in_tokens if in_tokens else 0.0,
        "mean_decode_batch": float(f.n_decode[f.n_decode > 0].mean()) if pure.any() else 0.0,
        "max_decode_batch": int(f.n_decode.max()) if len(f) else 0,
        "peak_kv_frac": (
            float(sim.pages_used.max()) / sim.config.kv_pages if sim.pages_used.size else 0.0
        ),
        "time_frac": {
            k: (float(v.sum()) / busy_us if busy_us > 0 else 0.0) for k, v in parts.items()
        },
        "extrapolated": {
            "far_steps_frac": float(far.mean()) if far.size else 0.0,
            "far_time_frac": (
                float(sim.step_dur_s[far].sum() * 1e6) / busy_us if busy_us > 0 else 0.0
            ),
            "max_factor": float(extra.max()) if extra.size else 1.0,
        },
    }


def p99_itl_ms(summary: dict[str, Any]) -> float:
    v = summary["itl_ms"]["p99"]
    return float(v) if v is not None else math.nan
