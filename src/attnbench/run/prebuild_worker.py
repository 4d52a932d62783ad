"""The prebuild's two processes (`run.prebuild` starts them):
`python -m attnbench.run.prebuild_worker flashinfer|flex IN.json OUT.json`. The first makes the
FlashInfer JitSpecs of its module needs and builds them side by side (a ninja run each, in
the module's own folder); the second plans flex on each spec so Inductor's on-disk caches
hold its kernels. Each writes a JSON report: what it built, and one line per thing it could
not, with why."""

from __future__ import annotations

import importlib
import json
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
    pairs, failed = _collect(needs)
    return [spec for spec, _ in pairs], failed


def _collect(needs: Sequence[ModuleNeed]) -> tuple[list[tuple[Any, ModuleNeed]], list[str]]:
    """`collect_specs`, each spec with the need it was made for."""
    pairs: list[tuple[Any, ModuleNeed]] = []
    failed: list[str] = []
    names: set[str] = set()
    for need in needs:
        where, fn = GENERATORS[need.generator_key]
        try:
            gen = getattr(importlib.import_module(where), fn)
            spec = gen(*_torch_args(need.args))
        except Exception as exc:
            failed.append(f"{need.label}: {type(exc).__name__}: {' '.join(str(exc).split())}"[:300])
            continue
        name = str(getattr(spec, "name", id(spec)))
        if name not in names:
            names.add(name)
            pairs.append((spec, need))
    return pairs, failed


OVERSUBSCRIBE = 2
"""Compile jobs per core, all modules together: a module's ninja run cannot lend its cores to
another, so a fixed share of exactly the cores idles some while the slowest module waits.
At session 15's shares (cores in proportion to source files), FA3's sm90 prefill module (eight
heavy kernel files) got five jobs and the prebuild took 4 min 05 s on a fresh H100."""


def share_jobs(work: Sequence[tuple[int, float]], cores: int) -> list[int]:
    """Each module's ninja `-j`, from its (source files, seconds to build alone): the
    `OVERSUBSCRIBE * cores` jobs shared in proportion to files times seconds (its work), so
    the heaviest module can compile all its files at once; at least one job and never more
    jobs than files."""
    weights = [n * s for n, s in work]
    total, slots = sum(weights) or 1.0, OVERSUBSCRIBE * cores
    jobs = [round(slots * w / total) for w in weights]
    return [max(1, min(n, j)) for (n, _), j in zip(work, jobs, strict=True)]


def build_one(spec: Any, jobs: int) -> str | None:
    """Build one module as `JitSpec.build` does (its build.ninja, ninja run in its own build
    folder) under FlashInfer's lock for it; None, or why it failed.

    Each module gets its own ninja run, in its own folder, because that is where the ninja log
    and deps log that make the run's own `build` a no-op are kept: FlashInfer's one-build
    prebuild (`build_jit_specs`) keeps them in the JIT folder, so every module it built was
    compiled again on first use (the H200 at 1fe251d, issue 34)."""
    from filelock import FileLock
    from flashinfer.jit.cpp_ext import run_ninja

    try:
        with FileLock(spec.lock_path, thread_local=False):
            spec.write_ninja()
            run_ninja(spec.build_dir, spec.ninja_path, False, max_jobs=jobs)
    except Exception as exc:
        why = " ".join(str(exc).split())
        return f"{spec.name}: {type(exc).__name__}: {why[-240:]}"
    return None


def build_flashinfer(needs: Sequence[ModuleNeed], jobs: int) -> dict[str, Any]:
    """Make the specs and build them side by side, each in its own ninja run with its share of
    `OVERSUBSCRIBE * jobs` compile jobs; what was built and what was not (a module that fails
    leaves the others building)."""
    from concurrent.futures import ThreadPoolExecutor

    t0 = time.monotonic()
    pairs, failed = _collect(needs)
    todo = [(s, n) for s, n in pairs if not getattr(s, "is_aot", False)]
    work = [(len(getattr(s, "sources", ())) or 1, n.expected_s) for s, n in todo]
    shares = share_jobs(work, jobs)
    built: list[str] = [str(s.name) for s, _ in pairs if getattr(s, "is_aot", False)]
    if todo:
        with ThreadPoolExecutor(max_workers=len(todo)) as pool:
            outcomes = list(pool.map(build_one, [s for s, _ in todo], shares))
        for (spec, _), why in zip(todo, outcomes, strict=True):
            if why is None:
                built.append(str(spec.name))
            else:
                failed.append(why)
    return {"modules": built, "failed": failed, "seconds": round(time.monotonic() - t0, 1)}


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
