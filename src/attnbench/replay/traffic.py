"""Request streams for the replay: real traces, the brief's synthetic agents, rate scaling.

Real traces are read by `attnbench.workload.traces` (never parsed here). This module only turns
them into the replay's `ReplayRequest`s, smooths quantised timestamps and rescales the arrival
rate. Synthetic scenario:

    agents:N            N concurrent agents (the brief: 450), contexts log-uniform over
                        256..65536 tokens with both ends present, output lengths uniform in
                        128..1024, all arriving within the first second (seeded)
    agents:N@LO-HI      the same with explicit context bounds (N up to `MAX_AGENTS`)

and the synthetic families of `workload.synthetic` (`synthetic:NAME`: a `[traffic.NAME]` table of
a suite; multi-turn sessions with a shared, growing prefix and `hash_ids`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

AGENT_OUTPUT_RANGE = (128, 1024)
AGENT_ARRIVAL_WINDOW_S = 1.0
MAX_AGENTS = 10_000
"""`agents:N` at most: all N run in one batch, and the replay simulates each of them on the CPU
(100M agents took minutes and gigabytes before printing anything)."""


class TraceRequest(Protocol):
    """What a trace loader yields (`attnbench.workload.traces.Request`)."""

    @property
    def arrival_s(self) -> float: ...
    @property
    def input_len(self) -> int: ...
    @property
    def output_len(self) -> int: ...
    @property
    def hash_ids(self) -> Sequence[int] | None: ...


@dataclass(frozen=True)
class ReplayRequest:
    """One request as the simulator sees it.

    `hash_ids` are prefix-block ids (Mooncake: one id per 512-token block; requests whose leading
    ids are equal share that prefix); empty when the trace has no prefix information.
    """

    arrival_s: float
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] = ()


def from_trace(requests: Iterable[TraceRequest]) -> list[ReplayRequest]:
    """Copy loader requests into `ReplayRequest`s, sorted by arrival (stable)."""
    out = [
        ReplayRequest(
            arrival_s=float(r.arrival_s),
            input_len=int(r.input_len),
            output_len=int(r.output_len),
            hash_ids=tuple(int(h) for h in (r.hash_ids or ())),
        )
        for r in requests
    ]
    return sorted(out, key=lambda r: r.arrival_s)


def load_requests(name: str, *, limit: int | None = None, seed: int = 0) -> list[ReplayRequest]:
    """Requests of a trace by name (`azure-code`, `azure-conv`, `mooncake-conv`, a path) or of the
    synthetic `agents:N[@LO-HI]` scenario; the first `limit` requests when given.

    Raises ValueError naming the problem.
    """
    text = name.strip()
    if text.lower().startswith("agents"):
        reqs = agents_trace(text, seed=seed)
        return reqs[:limit] if limit else reqs
    from attnbench.workload.synthetic import SYNTHETIC_PREFIX, synthetic_family, synthetic_requests
    from attnbench.workload.traces import load_trace

    if text.lower().startswith(SYNTHETIC_PREFIX):
        _, family = synthetic_family(text)
        generated = synthetic_requests(family, seed=seed or None)
        return from_trace(generated[:limit] if limit else generated)

    loaded = load_trace(text)
    return _with_outputs(from_trace(loaded[:limit] if limit else loaded), text)


def _with_outputs(requests: list[ReplayRequest], trace: str) -> list[ReplayRequest]:
    """The requests, each needing an output token to replay (a decode step); ValueError naming
    the trace and the first request without one."""
    for i, r in enumerate(requests, 1):
        if r.output_len <= 0:
            raise ValueError(
                f"trace {trace}: request {i} (arriving at {r.arrival_s:g} s) has output "
                f"length {r.output_len}: a replay needs every request to decode at least one "
                "token; drop such requests from the trace"
            )
    return requests


def agents_trace(text: str, *, seed: int = 0) -> list[ReplayRequest]:
    """The brief's scenario: `agents:N[@LO-HI]` (see the module docstring)."""
    from attnbench.workload.lengths import mixed_batch

    _, _, arg = text.partition(":")
    count_s, _, bounds = arg.partition("@")
    try:
        count = int(count_s)
        lo, hi = (int(v) for v in bounds.split("-")) if bounds else (256, 65536)
    except ValueError:
        raise ValueError(
            f"trace={text!r}: expected agents:N or agents:N@LO-HI, e.g. agents:450@256-65536"
        ) from None
    if count <= 0 or not 0 < lo <= hi:
        raise ValueError(f"trace={text!r}: need N > 0 and 0 < LO <= HI")
    if count > MAX_AGENTS:
        raise ValueError(
            f"trace={text!r}: at most {MAX_AGENTS} agents (all run in one batch and the replay "
            "simulates every one on the CPU); e.g. agents:450"
        )
    rng = np.random.default_rng(seed)
    contexts = mixed_batch(count, lo, hi, rng)
    outputs = rng.integers(AGENT_OUTPUT_RANGE[0], AGENT_OUTPUT_RANGE[1] + 1, size=count)
    arrivals = np.sort(rng.uniform(0.0, AGENT_ARRIVAL_WINDOW_S, size=count))
    return [
        ReplayRequest(float(a), int(c), int(o))
        for a, c, o in zip(arrivals.tolist(), contexts, outputs.tolist(), strict=True)
    ]


def spread_ties(requests: Sequence[ReplayRequest]) -> list[ReplayRequest]:
    """Spread requests that share a timestamp evenly over the gap to the next distinct one.

    Mooncake's timestamps are quantised to ~3 s steps (1,180 distinct values for 12,031 requests):
    replayed literally, dozens of requests would arrive in the same instant. k requests stamped
    t, with the next distinct stamp t', arrive at t + i * (t' - t) / k, i = 0..k-1, in file order.
    The last group uses the median gap between distinct stamps. Requests with unique stamps are
    unchanged, so Azure traces (microsecond stamps) pass through as they are.
    """
    if not requests:
        return []
    times = np.array([r.arrival_s for r in requests])
    distinct = np.unique(times)
    if len(distinct) == len(times):
        return list(requests)
    gaps = np.diff(distinct)
    last_gap = float(np.median(gaps)) if len(gaps) else 1.0
    next_of = {float(t): float(n) for t, n in itertools.pairwise(distinct)}
    out: list[ReplayRequest] = []
    i = 0
    while i < len(requests):
        t = requests[i].arrival_s
        j = i
        while j < len(requests) and requests[j].arrival_s == t:
            j += 1
        span = next_of.get(t, t + last_gap) - t
        k = j - i
        for n, r in enumerate(requests[i:j]):
            out.append(ReplayRequest(t + n * span / k, r.input_len, r.output_len, r.hash_ids))
        i = j
    return out


def scale_rate(requests: Sequence[ReplayRequest], scale: float) -> list[ReplayRequest]:
    """Arrivals at `scale` times the trace's rate: every arrival time (relative to the first)
    is divided by `scale`; lengths and order are unchanged."""
    if scale <= 0:
        raise ValueError(f"rate scale {scale} must be positive")
    if not requests:
        return []
    t0 = requests[0].arrival_s
    return [
        ReplayRequest((r.arrival_s - t0) / scale, r.input_len, r.output_len, r.hash_ids)
        for r in requests
    ]


def arrival_rate(requests: Sequence[ReplayRequest]) -> float:
    """Mean arrival rate in requests per second ((n - 1) / span; 0 for fewer than two)."""
    if len(requests) < 2:
        return 0.0
    span = requests[-1].arrival_s - requests[0].arrival_s
    return (len(requests) - 1) / span if span > 0 else float("inf")
