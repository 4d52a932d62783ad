"""`attnbench replay` end to end, without the CLI: results files + a trace -> replay document.

    results rows --(shape of the deployment)--> cost models per variant (replay.costmodel)
    results header ceilings -----------------> GEMM roofline (replay.gemm)
    trace --(spread ties, first N)-----------> requests --> study (replay.study) --> JSON

Reads files only; nothing here touches a GPU (`replay.live` does, on request).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from attnbench.replay.costmodel import AttentionCostModel, ShapeKey, fit_models, shapes_in
from attnbench.replay.deployment import Deployment
from attnbench.replay.gemm import GemmRoofline
from attnbench.replay.simulator import SchedulerConfig
from attnbench.replay.study import StudyOptions, StudyOutcome, model_table, run_study
from attnbench.replay.traffic import ReplayRequest, arrival_rate, load_requests, spread_ties
from attnbench.results import Header, ResultRow, read_results

DEFAULT_MAX_BATCH = 256


class ReplayError(ValueError):
    """Input the replay cannot use: one line saying what and what to do."""


@dataclass(frozen=True)
class ReplayConfig:
    trace: str
    limit: int | None = None
    seed: int = 0
    model: str = "llama-3.1-70b"
    tp: int = 8
    dtype: str = "bfloat16"
    kv_dtype: str = "bfloat16"
    page_size: int = 16
    gpu_mem_gib: float = 139.8
    mem_utilization: float = 0.9
    reserve_gib: float = 4.0
    max_batch: int | None = None
    """None: 256 (vLLM's max_num_seqs), or N for the synthetic `agents:N` (all N concurrent)."""
    token_budget: int = 8192
    chunked_prefill: bool = True
    prefix_cache: bool | None = None
    """None: on when the trace has prefix-block hashes (Mooncake)."""
    spread_arrivals: bool = True
    backends: tuple[str, ...] = ()
    """Variants to replay (library names select all their variants); empty: every variant."""
    rate_scales: tuple[float, ...] = (1.0,)
    itl_target_ms: float | None = None
    bisect_steps: int = 4
    hybrid: tuple[str, str] | None = None
    """(prefill variant, decode variant); None: `hybrid.recommend` on the rows, else automatic."""
    padded: bool | None = None
    """None: on for the synthetic agents scenario."""
    gpu: str | None = None
    copy_gbps: float | None = None
    matmul_tflops: float | None = None
    allreduce_us: float = 0.0
    allreduce_gbps: float = 0.0


@dataclass
class LoadedRows:
    rows: list[ResultRow]
    headers: list[Header]
    gpu: str
    notes: list[str]


def _gpu_of(header: Header | None) -> str:
    if header is None:
        return "unknown"
    return str(header.device.get("name") or header.provenance.get("gpu") or "unknown")


def load_rows(paths: Sequence[Path], gpu: str | None = None) -> LoadedRows:
    """Rows of one GPU (the named one, else the one with the most `ok` rows), the last row per
    (case, backend) kept (a resumed or repeated run supersedes)."""
    by_gpu: dict[str, dict[tuple[str, str], ResultRow]] = {}
    headers: dict[str, list[Header]] = {}
    for p in paths:
        if p.suffix != ".jsonl":
            continue
        rf = read_results(p)
        runs = {h.run_id: h for h in rf.headers}
        for h in rf.headers:
            headers.setdefault(_gpu_of(h), []).append(h)
        for r in rf.rows:
            g = _gpu_of(runs.get(r.run_id) or rf.header)
            by_gpu.setdefault(g, {})[r.key] = r
    if not by_gpu:
        raise ReplayError("no result rows in the given files")
    notes = []
    if gpu is None:
        counts = {g: sum(r.status == "ok" for r in rows.values()) for g, rows in by_gpu.items()}
        gpu = max(sorted(counts), key=lambda g: counts[g])
        if len(by_gpu) > 1:
            notes.append(f"rows from {len(by_gpu)} devices; replaying {gpu} (choose with --gpu)")
    if gpu not in by_gpu:
        raise ReplayError(f"gpu={gpu!r} has no rows; have: {', '.join(sorted(by_gpu))}")
    return LoadedRows(list(by_gpu[gpu].values()), headers.get(gpu, []), gpu, notes)


def ceilings(headers: Sequence[Header], dtype: str, cfg: ReplayConfig) -> tuple[float, float, str]:
    """(copy GB/s, matmul TFLOP/s, where they came from): overrides, else the median over the
    headers' measured ceilings."""
    copies = [float(h.ceilings["copy_bandwidth_gbps"]) for h in headers if h.ceilings]
    mms = [
        float((h.ceilings.get("matmul_tflops") or {}).get(dtype) or 0.0)
        for h in headers
        if h.ceilings
    ]
    mms = [m for m in mms if m > 0]
    copy = cfg.copy_gbps or (statistics.median(copies) if copies else None)
    mm = cfg.matmul_tflops or (statistics.median(mms) if mms else None)
    if copy is None or mm is None:
        what = "copy bandwidth" if copy is None else f"{dtype} matmul"
        raise ReplayError(
            f"the results headers hold no measured {what} ceiling; "
            "pass --copy-gbps and --matmul-tflops"
        )
    src = "overrides" if cfg.copy_gbps and cfg.matmul_tflops else f"{len(copies)} results header(s)"
    return copy, mm, src


def requests_for(cfg: ReplayConfig) -> tuple[list[ReplayRequest], dict[str, Any]]:
    try:
        reqs = load_requests(cfg.trace, limit=cfg.limit, seed=cfg.seed)
    except (OSError, ValueError) as exc:
        raise ReplayError(str(exc)) from None
    if not reqs:
        raise ReplayError(f"trace={cfg.trace!r}: no requests")
    ties = len(reqs) - len({r.arrival_s for r in reqs})
    if cfg.spread_arrivals:
        reqs = spread_ties(reqs)
    has_prefix = any(r.hash_ids for r in reqs)
    info = {
        "name": cfg.trace,
        "limit": cfg.limit,
        "requests": len(reqs),
        "synthetic": cfg.trace.lower().startswith("agents"),
        "rate_req_s": arrival_rate(reqs),
        "tied_arrivals": ties,
        "spread_arrivals": cfg.spread_arrivals,
        "has_prefix_hashes": has_prefix,
        "input_tokens": sum(r.input_len for r in reqs),
        "output_tokens": sum(r.output_len for r in reqs),
        "max_input": max(r.input_len for r in reqs),
    }
    return reqs, info


def _select(models: dict[str, AttentionCostModel], wanted: tuple[str, ...]) -> set[str]:
    if not wanted:
        return set(models)
    keep = {n for n in models for w in wanted if n == w or n.split(":")[0] == w}
    if not keep:
        raise ReplayError(
            f"backend={', '.join(wanted)}: no cost model; have: {', '.join(sorted(models))}"
        )
    return keep


def recommended_hybrid(paths: Sequence[Path], gpu: str) -> tuple[str, str] | None:
    """(prefill, decode) of `attnbench recommend`'s hybrid plan for `gpu`, if it has one."""
    try:
        from attnbench.analysis.frame import load
        from attnbench.analysis.hybrid import recommend
    except ImportError:
        return None
    try:
        recs = recommend(load([p for p in paths if p.suffix == ".jsonl"]).frame)
    except Exception:  # a recommendation that cannot be made is not the replay's failure
        return None
    for rec in recs:
        plan = rec.plan
        if rec.gpu == gpu and plan.prefill_backend and plan.decode_backend:
            return plan.prefill_backend, plan.decode_backend
    return None


def run_replay(cfg: ReplayConfig, paths: Sequence[Path]) -> StudyOutcome:
    """The whole replay; raises ReplayError for unusable input."""
    loaded = load_rows(paths, cfg.gpu)
    try:
        dep = Deployment(
            model=cfg.model,
            tp=cfg.tp,
            dtype=cfg.dtype,
            kv_dtype=cfg.kv_dtype,
            page_size=cfg.page_size,
            gpu_mem_gib=cfg.gpu_mem_gib,
            mem_utilization=cfg.mem_utilization,
            reserve_gib=cfg.reserve_gib,
        )
        shard = dep.shard
    except ValueError as exc:
        raise ReplayError(str(exc)) from None
    if dep.kv_pages <= 0:
        d = dep.describe()
        raise ReplayError(
            f"no memory left for the KV cache: {d['mem_utilization']:g} x {d['gpu_mem_gib']:g} "
            f"GiB leaves nothing after {d['weight_gib']:g} GiB of {d['model']} weights at tp "
            f"{d['tp']} and {d['reserve_gib']:g} GiB reserved; raise --gpu-mem-gib or --tp"
        )
    key = ShapeKey(
        shard.num_qo_heads,
        shard.num_kv_heads,
        shard.head_dim,
        dep.dtype,
        dep.kv_dtype,
        dep.page_size,
    )
    models, padded = fit_models(loaded.rows, key)
    if not models:
        have = shapes_in(loaded.rows)
        raise ReplayError(
            f"no ok rows of shape {key.describe()} ({cfg.model} at tp {cfg.tp}) on {loaded.gpu}; "
            f"shapes present: {', '.join(have) or 'none'}; run e.g. "
            f"`attnbench run --suite replay --model {cfg.model} --tp {cfg.tp}`"
        )
    for part in ("decode", "prefill"):
        if not any(getattr(m, part) for m in models.values()):
            raise ReplayError(
                f"no {part} rows of shape {key.describe()} ({cfg.model} at tp {cfg.tp}) on "
                f"{loaded.gpu}: a replay needs both decode and prefill; run e.g. "
                f"`attnbench run --suite replay --model {cfg.model} --tp {cfg.tp}`"
            )
    keep = _select(models, cfg.backends)
    singles = tuple(sorted(keep))
    hybrid, hybrid_source = cfg.hybrid, "--hybrid"
    notes = list(loaded.notes)
    if hybrid is None:
        rec = recommended_hybrid(paths, loaded.gpu)
        if rec is not None and all(n in models for n in rec):
            hybrid, hybrid_source = rec, "attnbench recommend"
            keep |= set(rec)
        elif rec is not None:
            notes.append(f"recommended hybrid {rec} has no cost model at this shape; chose by cost")
    else:
        keep |= set(hybrid)
    models = {n: m for n, m in models.items() if n in keep}
    padded = {n: m for n, m in padded.items() if n in keep}

    copy, mm, src = ceilings(loaded.headers, dep.dtype, cfg)
    try:
        gemm = GemmRoofline(dep, copy, mm, cfg.allreduce_us, cfg.allreduce_gbps)
    except ValueError as exc:
        raise ReplayError(str(exc)) from None
    reqs, trace_info = requests_for(cfg)
    synthetic = bool(trace_info["synthetic"])
    prefix = trace_info["has_prefix_hashes"] if cfg.prefix_cache is None else cfg.prefix_cache
    max_batch = cfg.max_batch or (
        max(DEFAULT_MAX_BATCH, len(reqs)) if synthetic else DEFAULT_MAX_BATCH
    )
    sched = SchedulerConfig(
        kv_pages=dep.kv_pages,
        page_size=dep.page_size,
        max_batch=max_batch,
        token_budget=cfg.token_budget,
        chunked_prefill=cfg.chunked_prefill,
        prefix_cache=bool(prefix),
    )
    opts = StudyOptions(
        rate_scales=cfg.rate_scales,
        itl_target_ms=cfg.itl_target_ms,
        bisect_steps=cfg.bisect_steps,
        hybrid=hybrid,
        hybrid_source=hybrid_source,
        padded=synthetic if cfg.padded is None else cfg.padded,
        singles=singles,
    )
    try:
        outcome = run_study(reqs, sched, models, padded, gemm, opts)
    except ValueError as exc:
        raise ReplayError(str(exc)) from None
    gpu_kind = {str(h.device.get("kind", "")) for h in loaded.headers}
    if "cuda" not in gpu_kind:
        notes.append("the rows and ceilings come from a non-GPU run: figures are not H200 figures")
    outcome.data = {
        "schema": outcome.data.pop("schema"),
        "gpu": loaded.gpu,
        "trace": trace_info,
        "deployment": dep.describe(),
        "scheduler": asdict(sched),
        "gemm": gemm.describe() | {"ceilings_from": src},
        "models": model_table(models),
        "padded_models": model_table(padded),
        "sources": [str(p) for p in paths],
        "config": asdict(cfg),
    } | outcome.data
    outcome.data["notes"] = notes + list(outcome.data.get("notes", []))
    return outcome
