"""Fault-injection backends: deliberately broken variants that prove the harness turns every
failure into a row (after hyperfine's mock executor). Hidden from `all`; select them by name,
e.g. `--backend faulty:nan`.

    faulty:raise     plan raises RuntimeError
    faulty:jit       plan fails like a JIT compile error
    faulty:oom       run raises torch.cuda.OutOfMemoryError after allocating
    faulty:nan       run returns NaN
    faulty:wrong     run returns a wrong (shifted) answer
    faulty:hang      run sleeps for an hour (needs --case-timeout in a worker)
    faulty:slowplan  plan sleeps for an hour, like a JIT compile that never ends
    faulty:crash     the process exits hard (os._exit) inside run
    faulty:unavail   the library is "not installed"
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

import torch

from attnbench.backends.base import PlannedRun, Unsupported
from attnbench.backends.reference import reference_attention
from attnbench.measure.hardware import DeviceInfo
from attnbench.workload.inputs import AttentionInputs
from attnbench.workload.spec import WorkloadSpec

FAULTS = ("raise", "jit", "oom", "nan", "wrong", "hang", "slowplan", "crash", "unavail")


class FaultyBackend:
    devices = ("cpu", "cuda")
    hidden = True
    knobs: Mapping[str, tuple[object, ...]] = {}

    def __init__(self, fault: str) -> None:
        self.fault = fault
        self.name = f"faulty:{fault}"

    def available(self) -> str | None:
        if self.fault == "unavail":
            return "faultylib not installed (pip install faultylib)"
        return None

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> Unsupported | None:
        return None

    def plan(
        self,
        spec: WorkloadSpec,
        inputs: AttentionInputs,
        knobs: Mapping[str, object] | None = None,
    ) -> PlannedRun:
        if self.fault == "raise":
            raise RuntimeError("injected failure in plan")
        if self.fault == "slowplan":
            time.sleep(3600)
        if self.fault == "jit":
            raise RuntimeError("Ninja build failed: error: identifier 'fault' is undefined (JIT)")
        good = reference_attention(inputs, accum_dtype=torch.float32).to(inputs.q.dtype)

        def run() -> torch.Tensor:
            if self.fault == "oom":
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 1 PiB")
            if self.fault == "nan":
                return torch.full_like(good, float("nan"))
            if self.fault == "wrong":
                return good + 1.0
            if self.fault == "hang":
                time.sleep(3600)
            if self.fault == "crash":
                os._exit(13)
            return good

        return PlannedRun(run=run, resolved=f"fault-{self.fault}", graph_safe=False)


def backends() -> list[FaultyBackend]:
    return [FaultyBackend(f) for f in FAULTS]
