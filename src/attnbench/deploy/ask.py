"""The one entry point of a deployment answer: ask -> this GPU's rows -> traffic -> options ->
the decider (`decide.answer`) -> `Answer`. `recommend`, the report's first screen and the
findings' answer table all call `answer_for`, so they print the same numbers.

The GPU that answers is chosen first (`decide.answer_gpu`: the one asked, else the one that
measured the trace's own batches, else the one with the most rows of the shape); the traffic
is then that GPU's own (`traffic.traffic_for`: the replays kept beside `--measure` rows, else
the bucket weights their labels carry, else a replay on that GPU's rows, cached).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from attnbench.deploy.decide import Answer, ModelShape, Target, answer, answer_gpu, label_weights
from attnbench.deploy.traffic import Traffic, traffic_for


@dataclass(frozen=True)
class DeployAsk:
    """One deployment question: model shape, engine, KV dtype, traffic and (optionally) GPU."""

    shape: ModelShape
    engine: Target
    kv: str = "auto"
    trace: str | None = None
    gpu: str | None = None


def answer_for(
    paths: Sequence[Path], frame: pd.DataFrame, ask: DeployAsk, traffic: Traffic | None = None
) -> Answer:
    """The answer to `ask` from the rows `frame` (read from `paths`); `traffic`, when the
    caller has it (`recommend --measure` just replayed it), else found by `traffic_of`."""
    gpu = answer_gpu(frame, ask.shape, ask.engine, ask.trace, ask.gpu)
    if ask.trace is not None and traffic is None:
        traffic = traffic_of(paths, frame, ask, gpu)
    if traffic is None:
        return answer(frame, ask.shape, ask.engine, ask.kv, None, "", ask.trace, ask.gpu)
    return answer(frame, ask.shape, ask.engine, ask.kv, traffic, "", ask.trace, gpu)


def traffic_of(paths: Sequence[Path], frame: pd.DataFrame, ask: DeployAsk, gpu: str) -> Traffic:
    """The traffic of `ask.trace` on `gpu` (ReplayError when no rows can replay it)."""
    assert ask.trace is not None
    eng = "vllm" if ask.engine == "none" else ask.engine
    labelled = label_weights(frame, ask.shape, eng, ask.trace, gpu)
    return traffic_for(paths, gpu, eng, ask.trace, (ask.shape.model, ask.shape.tp), labelled)
