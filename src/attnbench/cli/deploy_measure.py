"""`recommend --measure` and `--dry-run`: time the deployment's configurations on the trace's
own batches (`deploy.plan`), through the normal run path (`run.session.RunSession`:
the same workers, accuracy gate and measurement as `attnbench run`), rows appended to `--out`.
`--resume` skips the (case, backend) pairs `--out` already holds with a final status; a
`--budget-s` stops starting new cases once spent, so a cut run keeps its rows and resumes.
`--dry-run` prints the plan (and writes it next to `--out` as `.plan.json`) without a GPU;
without a GPU `--measure` says so and answers from the given rows, buckets marked. Several
`--trace` values are planned each on its own and timed in one session (one worker start and
one set of ceilings for all), then answered one after another."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from attnbench.cli.common import EXIT_NOTHING_RAN, console, fail, note

if TYPE_CHECKING:
    from attnbench.deploy.decide import ModelShape
    from attnbench.deploy.plan import PlanAsk, PlannedCase
    from attnbench.deploy.traffic import RunningBatches, Traffic
    from attnbench.engines.paths import Engine

DONE = ("ok", "mismatch", "unsupported", "error", "oom", "timeout")


def build_plan(
    paths: list[Path], shape: ModelShape, engine: str, ask: PlanAsk, gpu: str | None
) -> tuple[list[PlannedCase], RunningBatches, str | None]:
    """The plan (decode steps, then prefill prompts), the replay behind it (for the answer) and
    why no prefill is planned (None: it is): replayed on `gpu`'s own step costs (the measuring
    GPU), else on the GPU with the most rows, said in a note."""
    from dataclasses import replace

    from attnbench.deploy.plan import plan_cases, prefill_cases, prefill_refusal
    from attnbench.deploy.traffic import check_trace, fit_paths, replay_trace
    from attnbench.replay.pipeline import ReplayError

    if (why := check_trace(ask.trace)) is not None:
        fail(why)
    eng: Engine = "sglang" if engine == "sglang" else "vllm"
    try:
        with console.status(f"replaying {ask.trace} on {shape.label}"):
            run, sim, dep = replay_trace(
                fit_paths(paths), gpu, eng, ask.trace, model=(shape.model, shape.tp)
            )
    except ReplayError as exc:
        fail(str(exc))
    if run.fallback:
        note(run.fallback)
    ask = replace(ask, trace=run.trace, costs_gpu=run.costs_gpu)
    plan = plan_cases(sim, dep, eng, ask) + prefill_cases(run.prompts, dep, eng, ask)
    return plan, run, prefill_refusal(run.prompts, dep, eng, ask)


def plan_lines(plan: list[PlannedCase], skipped: str | None = None) -> list[str]:
    """The plan, one line per drawn batch (its layer kinds and page sizes named where a model
    has several), the backends (per page size where they differ) and `skipped`'s line."""
    pairs = sum(len(c.backends) for c in plan)
    groups = _batches(plan)
    if len(groups) == len(plan):
        out = [f"plan: {len(plan)} batches x their backends = {pairs} timed pairs"]
    else:
        out = [
            f"plan: {len(groups)} batches as {len(plan)} cases (one per layer kind and page "
            f"size) x their backends = {pairs} timed pairs"
        ]
    for cases in groups:
        c = cases[0]
        more = _kinds_and_pages(cases)
        if c.spec.kind == "prefill":
            out.append(f"  prefill prompt {c.step:>6}: {c.spec.kv_lens[0]:>6} tokens{more}")
            continue
        out.append(
            f"  bucket {c.bucket:>4} ({100 * c.weight:4.1f}%) step {c.step:>6}: batch "
            f"{c.spec.batch_size:>4}, kv max {max(c.spec.kv_lens):>6}, {c.spec.kv_dtype}{more}"
        )
    by_page = {c.spec.page_size: c.backends for c in plan}
    if len(set(by_page.values())) == 1:
        out.append(f"  backends: {', '.join(plan[0].backends)}")
    else:
        out += [f"  backends at page {p}: {', '.join(b)}" for p, b in sorted(by_page.items())]
    if skipped:
        out.append(f"  {skipped}")
    return out


def _batches(plan: list[PlannedCase]) -> list[list[PlannedCase]]:
    """The plan's cases grouped by drawn batch (a step's or prompt's kinds and page sizes)."""
    out: dict[tuple[str, str, int], list[PlannedCase]] = {}
    for c in plan:
        out.setdefault((c.spec.kind, c.trace, c.step), []).append(c)
    return list(out.values())


def _kinds_and_pages(cases: list[PlannedCase]) -> str:
    """`, sliding+full, pages 1+64` for a batch of several cases; "" for one."""
    kinds = dict.fromkeys(c.spec.layer_type.removesuffix("_attention") for c in cases)
    pages = dict.fromkeys(c.spec.page_size for c in cases)
    text = f", {'+'.join(kinds)}" if len(kinds) > 1 else ""
    return text + (f", pages {'+'.join(map(str, pages))}" if len(pages) > 1 else "")


def resume_key(case: PlannedCase, backend: str) -> tuple[str, str]:
    """What `--resume` skips by: the case id (its layer kind, page size and a hash of the
    whole spec) and the backend."""
    return case.spec.case_id, backend


def finished(path: Path) -> set[tuple[str, str]]:
    """The `resume_key`s of the rows `path` already holds with a final status."""
    from attnbench.results import read_for_analysis

    if not path.is_file():
        return set()
    rf = read_for_analysis(path)
    return {(r.case_id, r.backend) for r in rf.rows if r.status in DONE}


@dataclass(frozen=True)
class MeasureRequest:
    """What `recommend --measure` / `--dry-run` was asked for, beside the deployment."""

    traces: tuple[str, ...]
    kv: str
    out: Path | None
    resume: bool
    budget_s: float
    dry_run: bool
    per_bucket: int = 5
    cover: float = 0.9
    """Also measure the heaviest buckets under 5% until this share of the steps is covered."""
    gpu: str | None = None
    """The GPU whose step costs replay the traffic: the measuring GPU (None: the dry run's
    GPU with the most rows)."""
    into_results: bool = False
    """--into-results: --out may lie in the committed results/ (`cli.outpath.guard_out`)."""


Replayed = tuple[str, "Traffic"]
"""A trace and its replay's traffic (histogram, replicates, source)."""


def measuring_gpu(dry_run: bool, asked: str | None) -> str | None:
    """The GPU whose costs replay the traffic: this CUDA GPU when measuring, else `asked`."""
    if dry_run:
        return asked
    from attnbench.replay.live import cuda_device

    try:
        return cuda_device("cuda", "no CUDA GPU").name
    except (RuntimeError, ValueError):
        return asked


def run_measure(
    paths: list[Path], shape: ModelShape, engine: str, req: MeasureRequest
) -> tuple[Path | None, list[Replayed]] | None:
    """Plan every trace, then (not `dry_run`) measure them in one session; the rows file to
    add to the answers (None without a GPU) and each trace's replay, or None (dry run)."""
    kv, out, resume = req.kv, req.out, req.resume
    budget_s, dry_run, per_bucket = req.budget_s, req.dry_run, req.per_bucket
    if engine == "none":
        fail("--measure times an engine's configurations: --engine vllm or sglang")
    if not req.traces:
        fail("--measure draws its batches from a trace's replay: give --trace")
    if out is None:
        fail("--measure appends its rows to --out FILE.jsonl: give one")
    from attnbench.cli.outpath import guard_out

    guard_out(out, "--out", resume=resume, into_results=req.into_results)
    if per_bucket < 1:
        fail(f"--per-bucket={per_bucket}: must be at least 1")
    plan: list[PlannedCase] = []
    replayed: list[Replayed] = []
    from attnbench.deploy.plan import PlanAsk

    gpu = measuring_gpu(dry_run, req.gpu)
    for trace in req.traces:
        ask = PlanAsk(trace, kv, per_bucket, req.cover)
        cases, run, skipped = build_plan(paths, shape, engine, ask, gpu)
        from attnbench.deploy.traffic import Traffic

        traffic = Traffic.of(
            run, (shape.model, shape.tp), "sglang" if engine == "sglang" else "vllm"
        )
        if len(req.traces) > 1:
            console.print(f"trace {trace}:", markup=False, highlight=False)
        for line in plan_lines(cases, skipped):
            console.print(line, markup=False, highlight=False)
        plan += cases
        replayed.append((trace, traffic))
    if dry_run:
        target = out.with_suffix(".plan.json")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps([c.as_dict() for c in plan], indent=1) + "\n")
        console.print("plan written to:", markup=False, highlight=False)
        console.print(str(target), markup=False, highlight=False, soft_wrap=True)
        return None
    skip = finished(out) if resume else set()
    keep_traffic(out, [t for _, t in replayed])
    measured = _time_plan(plan, out, skip, budget_s)
    return (out if measured else None), replayed


def keep_traffic(out: Path, traffic: list[Traffic]) -> None:
    """Keep the replays that drew the plan beside its rows (`deploy.traffic.traffic_path`):
    the answer weights the rows by the histogram that drew them."""
    from attnbench.deploy.traffic import committed_traffic, traffic_path, write_traffic

    kept = committed_traffic([out])
    kept.update({t.key: t for t in traffic})
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_traffic(
            traffic_path(out), list(kept.values()), os.environ.get("ATTNBENCH_GIT_SHA", "")
        )
    except OSError as exc:
        fail(f"--out={out}: keeping the traffic beside it failed: {exc.strerror or exc}")


def _time_plan(
    plan: list[PlannedCase], out: Path, skip: set[tuple[str, str]], budget_s: float
) -> bool:
    """Time the plan; False (nothing timed, a note said why) without a CUDA GPU."""
    from attnbench.replay.validate import gpu_timer

    try:
        timer, close, gpu = gpu_timer("cuda", str(out), max_time_ms=100.0)
    except OSError as exc:  # OutputBusy: another process writes --out
        fail(f"--out={out} cannot be written: {exc.strerror or exc}")
    except (RuntimeError, ValueError) as exc:
        fail(
            f"--measure: no CUDA GPU here ({exc}): nothing measured; --dry-run prints the "
            "plan without one, and `recommend` without --measure answers from the rows",
            EXIT_NOTHING_RAN,
        )
    start, done = time.monotonic(), 0
    try:
        for c in plan:
            todo = [b for b in c.backends if resume_key(c, b) not in skip]
            skip |= {resume_key(c, b) for b in todo}  # a batch two traces share: once
            if not todo:
                continue
            if budget_s and time.monotonic() - start > budget_s:
                note(f"--budget-s={budget_s:g} spent after {done} batches: rerun with --resume")
                break
            timer(c.spec, todo)
            done += 1
    finally:
        close()
    console.print(f"measured {done} batches on {gpu}, rows in:", markup=False, highlight=False)
    console.print(str(out), markup=False, highlight=False, soft_wrap=True)
    return True
