"""The prebuild's two processes (`run.prebuild` starts them):
`python -m attnbench.run.prebuild_worker flashinfer|flex IN.json OUT.json`. The first makes the
FlashInfer JitSpecs of its module needs and builds them in one ninja build; the second plans
flex on each spec so Inductor's on-disk caches hold its kernels. Each writes a JSON report:
what it built, and one line per thing it could not, with why."""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnbench.run.prebuild import GENERATORS, INT32, ModuleNeed

if TYPE_CHECKING:
    from attnbench.workload.spec import WorkloadSpec


def _torch_args(args: Sequence[Any]) -> list[Any]:
    from attnbench.workload.inputs import torch_dtype

    dtypes = ("bfloat16", "float16", "float32", "fp8_e4m3", "fp8_e5m2", INT32)
    out: list[Any] = []
    for a in args:
        if isinstance(a, str) and a in dtypes:
            import torch

            out.append(torch.int32 if a == INT32 else torch_dtype(a))
        else:
            out.append(a)
    return out


def collect_specs(needs: Sequence[ModuleNeed]) -> tuple[list[Any], list[str]]:
    """FlashInfer's JitSpec of every need, each module once (by spec name), and one line per
    need whose spec could not be made (its generator missing or raising): those compile on
    first use."""
    specs: list[Any] = []
    failed: list[str] = []
    names: set[str] = set()
    for need in needs:
        where, fn = GENERATORS[need.kind]
        try:
            gen = getattr(importlib.import_module(where), fn)
            spec = gen(*_torch_args(need.args))
        except Exception as exc:
            failed.append(f"{need.label}: {type(exc).__name__}: {' '.join(str(exc).split())}"[:300])
            continue
        name = str(getattr(spec, "name", id(spec)))
        if name not in names:
            names.add(name)
            specs.append(spec)
    return specs, failed


def build_flashinfer(needs: Sequence[ModuleNeed], jobs: int) -> dict[str, Any]:
    """Make the specs and build them in one ninja build; what was built and what was not."""
    os.environ.setdefault("FLASHINFER_JIT_PREBUILD_MAX_JOBS", str(jobs))
    os.environ.setdefault("MAX_JOBS", str(jobs))
    t0 = time.monotonic()
    specs, failed = collect_specs(needs)
    names = [str(getattr(s, "name", "?")) for s in specs]
    report: dict[str, Any] = {"modules": names, "failed": failed}
    if specs:
        try:
            from flashinfer.jit.core import build_jit_specs

            build_jit_specs(specs, verbose=False)
        except Exception as exc:
            why = " ".join(str(exc).split())[-300:]
            report["build_error"] = f"{type(exc).__name__}: {why}"
    report["seconds"] = round(time.monotonic() - t0, 1)
    return report


def compile_flex(specs: Sequence[WorkloadSpec]) -> dict[str, Any]:
    """Plan flex on every spec (its plan compiles and runs the kernel once), so Inductor's
    on-disk caches hold the kernels; a spec that fails is named, the others go on."""
    import torch

    from attnbench.backends import select_backends
    from attnbench.workload import memory
    from attnbench.workload.inputs import make_inputs

    flex = select_backends(["flex"])[0]
    dev = torch.device("cuda")
    t0 = time.monotonic()
    done, failed = 0, []
    for spec in specs:
        free = memory.free_bytes(dev)
        if free is not None and memory.too_big(memory.estimate(spec, flex.name), free, "GPU"):
            failed.append(f"{spec.case_id}: does not fit in free memory")
            continue
        try:
            flex.plan(spec, make_inputs(spec, dev), None)
            done += 1
        except Exception as exc:
            failed.append(f"{spec.case_id}: {type(exc).__name__}: {exc}"[:300])
        torch.cuda.empty_cache()
    return {"shapes": done, "failed": failed, "seconds": round(time.monotonic() - t0, 1)}


def main(argv: Sequence[str]) -> int:
    """`python -m attnbench.run.prebuild flashinfer|flex IN.json OUT.json`."""
    kind, src, dst = argv
    payload = json.loads(Path(src).read_text())
    if kind == "flashinfer":
        needs = [ModuleNeed(n["kind"], tuple(n["args"]), n["label"]) for n in payload["needs"]]
        report = build_flashinfer(needs, int(payload["jobs"]))
    else:
        from attnbench.workload.spec import WorkloadSpec

        report = compile_flex([WorkloadSpec.model_validate(s) for s in payload["specs"]])
    Path(dst).write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
