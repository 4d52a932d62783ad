"""Validation documents built in the test through `replay.validate`'s own functions (never
committed): steps drawn from real traces' replays of `replay_rows` rows, "measured" by a fake
timer that follows the rows' model with a chosen multiplicative error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import replay_rows as rr
from attnbench.replay.deployment import Deployment
from attnbench.replay.document import ReplayConfig
from attnbench.replay.pipeline import run_replay
from attnbench.replay.validate import TRACES, draw_steps, measure, validation_document
from attnbench.workload.spec import WorkloadSpec


def build(rows: Path, spread: float = 0.0, gpu: str = rr.GPU, seed: int = 0) -> dict[str, object]:
    """The validation document of `rows`' models: each step measured as the rows' model times
    a factor drawn uniformly from [1 - spread, 1 + spread]."""
    dep = Deployment()
    sims, models = {}, {}
    for t in TRACES:
        outcome = run_replay(ReplayConfig(trace=t, limit=120, deployment=dep), [rows])
        sims[t] = outcome.study.sims[outcome.study.main]
        models = outcome.study.models
    drawn = draw_steps(sims, dep, 15)
    rng = np.random.default_rng(seed)

    def timer(spec: WorkloadSpec, names: list[str]) -> dict[str, float | None]:
        return {
            n: rr.decode_us(n, list(spec.kv_lens)) * float(rng.uniform(1 - spread, 1 + spread))
            for n in names
        }

    errs = measure(drawn, models, timer)
    return validation_document(errs, list(TRACES), models, {"gpu": gpu}, [str(rows)])


def write(path: Path, doc: dict[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return path
