"""`attnbench replay` end to end, without the CLI: results files + a trace -> replay document.

    results rows --(shape of the deployment)--> cost models per variant (replay.costmodel)
    results header ceilings -----------------> GEMM roofline (replay.gemm)
    trace --(spread ties, first N)-----------> requests --> study (replay.study) --> JSON

Reads files only; nothing here touches a GPU (`replay.live` does, on request).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from attnbench.analysis.candidates import BASELINE_VARIANTS
from attnbench.backends.variant import Variant, is_tuned
from attnbench.replay.costmodel import (
    AttentionCostModel,
    ShapeKey,
    bandwidth_ceiling,
    fit_models,
    shapes_in,
)
from attnbench.replay.deployment import Deployment
from attnbench.replay.document import (
    SCHEMA,
    CostModelInfo,
    DeploymentInfo,
    GemmInfo,
    ReplayConfig,
    ReplayDocument,
    TraceInfo,
)
from attnbench.replay.gemm import GemmRoofline
from attnbench.replay.kernelplan import DEFAULT_NUM_SMS
from attnbench.replay.kinds import (
    ROOFLINE,
    LayerKinds,
    kind_key,
    main_kind,
    mla_prefill_ratio,
    roofline_model,
    window_of,
)
from attnbench.replay.records import ReplayTrust
from attnbench.replay.simresult import SchedulerConfig
from attnbench.replay.study import StudyOptions, StudyOutcome, run_study
from attnbench.replay.traffic import (
    ReplayRequest,
    arrival_rate,
    load_requests,
    scale_rate,
    spread_ties,
)
from attnbench.replay.trust import (
    RANKED_METRICS,
    ReplayAtScale,
    Validation,
    assess,
    choose_validation,
)
from attnbench.replay.validation_doc import ValidationDocumentError, find_validation
from attnbench.results import Header, ResultRow, is_results_path, read_for_analysis

__all__ = ["ReplayConfig", "ReplayError", "ReplayOutcome", "load_rows", "run_replay"]

DEFAULT_MAX_BATCH = 256


class ReplayError(ValueError):
    """Input the replay cannot use: one line saying what and what to do."""


@dataclass
class ReplayOutcome:
    """The replay document, and the study behind it (its rate-1 replays feed `--live`)."""

    document: ReplayDocument
    study: StudyOutcome


@dataclass
class LoadedRows:
    rows: list[ResultRow]
    headers: list[Header]
    gpu: str
    notes: list[str]


def load_rows(paths: Sequence[Path], gpu: str | None = None) -> LoadedRows:
    """Rows of one GPU (the named one, else the one with the most `ok` rows), the last row per
    (case, backend) kept (a resumed or repeated run supersedes)."""
    by_gpu = rows_by_gpu(paths)
    if not by_gpu:
        raise ReplayError("no result rows in the given files")
    notes = []
    if gpu is None:
        counts = {g: sum(r.status == "ok" for r in x.rows) for g, x in by_gpu.items()}
        gpu = max(sorted(counts), key=lambda g: counts[g])
        if len(by_gpu) > 1:
            notes.append(f"rows from {len(by_gpu)} devices; replaying {gpu} (choose with --gpu)")
    if gpu not in by_gpu:
        raise ReplayError(f"gpu={gpu!r} has no rows; have: {', '.join(sorted(by_gpu))}")
    return LoadedRows(by_gpu[gpu].rows, by_gpu[gpu].headers, gpu, notes)


def rows_by_gpu(paths: Sequence[Path]) -> dict[str, LoadedRows]:
    """Each GPU's rows and headers in `paths`, the last row per (case, backend) kept."""
    by_gpu: dict[str, dict[tuple[str, str], ResultRow]] = {}
    headers: dict[str, list[Header]] = {}
    for p in paths:
        if not is_results_path(p):
            continue
        rf = read_for_analysis(p)
        for h in rf.headers:
            headers.setdefault(h.gpu, []).append(h)
        for r in rf.rows:
            by_gpu.setdefault(rf.gpu_of(r), {})[r.key] = r
    return {
        g: LoadedRows(list(rows.values()), headers.get(g, []), g, []) for g, rows in by_gpu.items()
    }


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


def requests_for(cfg: ReplayConfig) -> tuple[list[ReplayRequest], TraceInfo]:
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
    info = TraceInfo(
        name=cfg.trace,
        limit=cfg.limit,
        requests=len(reqs),
        synthetic=cfg.trace.lower().startswith(("agents", "synthetic:")),
        rate_req_s=arrival_rate(reqs),
        tied_arrivals=ties,
        spread_arrivals=cfg.spread_arrivals,
        has_prefix_hashes=has_prefix,
        input_tokens=sum(r.input_len for r in reqs),
        output_tokens=sum(r.output_len for r in reqs),
        max_input=max(r.input_len for r in reqs),
    )
    return reqs, info


def _library(name: str) -> str | None:
    """The library of the variant `name` (None for a name that is no variant)."""
    variant = Variant.maybe(name)
    return variant.library if variant is not None else None


def _select(models: dict[str, AttentionCostModel], wanted: tuple[str, ...]) -> set[str]:
    if not wanted:
        return set(models)
    keep = {n for n in models for w in wanted if w in (n, _library(n))}
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
        recs = recommend(load([p for p in paths if is_results_path(p)]).frame)
    except Exception:  # a recommendation that cannot be made is not the replay's failure
        return None
    for rec in recs:
        plan = rec.plan
        if rec.gpu == gpu and plan.prefill_backend and plan.decode_backend:
            return plan.prefill_backend, plan.decode_backend
    return None


@dataclass
class _Candidates:
    """The cost models a replay runs (fitted and padded), the singles it ranks, its hybrid
    and where that came from, and the notes so far."""

    models: dict[str, AttentionCostModel]
    padded: dict[str, AttentionCostModel]
    singles: tuple[str, ...]
    hybrid: tuple[str, str] | None
    hybrid_source: str
    notes: list[str]
    kinds: LayerKinds | None = None


def deployable(name: str) -> bool:
    """A variant a server could run as it was measured: not `+tuned` (per-case knobs no engine
    exposes) and not a baseline on a contiguous copy (`candidates.BASELINE_VARIANTS`)."""
    return not is_tuned(name) and name not in BASELINE_VARIANTS


def run_replay(
    cfg: ReplayConfig,
    paths: Sequence[Path],
    validation: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> ReplayOutcome:
    """The whole replay; raises ReplayError for unusable input. `validation`: the
    `replay-validate` document stating each variant's live error (default: one found among or
    beside `paths`, else every variant is "not validated on live steps"); `progress` is told
    each candidate as its replay ends."""
    from attnbench.results import provenance

    loaded = load_rows(paths, cfg.gpu)
    dep = cfg.deployment
    key = _checked_shape(dep)
    chosen = _candidates(cfg, loaded, key, paths)
    chosen.kinds = _layer_kinds(cfg, loaded, chosen)
    copy, mm, src = ceilings(loaded.headers, dep.dtype, cfg)
    try:
        gemm = GemmRoofline(dep, copy, mm, cfg.allreduce_us, cfg.allreduce_gbps)
    except ValueError as exc:
        raise ReplayError(str(exc)) from None
    reqs, trace = requests_for(cfg)
    sched, opts = _scheduler(cfg, reqs, trace, chosen, progress)
    try:
        study = run_study(reqs, sched, chosen.models, chosen.padded, gemm, opts)
    except ValueError as exc:
        raise ReplayError(str(exc)) from None
    trust = _trust(paths, validation, loaded, (reqs, sched, study), chosen, cfg.error_bands)
    notes = chosen.notes
    if not any(h.device.get("kind") == "cuda" for h in loaded.headers):
        notes.append("the rows and ceilings come from a non-GPU run: figures are not H200 figures")
    doc = ReplayDocument(
        doc_schema=SCHEMA,
        gpu=loaded.gpu,
        trace=trace,
        deployment=DeploymentInfo.of(dep),
        scheduler=sched,
        gemm=GemmInfo.of(gemm, src),
        models=CostModelInfo.table(chosen.models),
        padded_models=CostModelInfo.table(chosen.padded),
        sources=[str(p) for p in paths],
        config=cfg,
        base_rate_req_s=study.base_rate_req_s,
        rate_scales=list(opts.rate_scales),
        itl_target_ms=opts.itl_target_ms,
        candidates=study.candidates,
        runs=study.runs,
        crossing=study.crossing,
        main_candidate=study.main,
        main_scale=study.main_scale,
        padded_vs_ragged=study.padded_vs_ragged,
        notes=notes + study.notes,
        trust=trust,
        provenance=provenance(),
    )
    return ReplayOutcome(doc, study)


def _checked_shape(dep: Deployment) -> ShapeKey:
    """The attention shape of `dep`; ReplayError when it has none or no room for a KV cache."""
    try:
        key = shape_key(dep)
    except ValueError as exc:
        raise ReplayError(str(exc)) from None
    if (why := dep.no_room()) is not None:
        raise ReplayError(why)
    return key


def _candidates(
    cfg: ReplayConfig, loaded: LoadedRows, key: ShapeKey, paths: Sequence[Path]
) -> _Candidates:
    """The cost models fitted at `key` for the variants asked for, with the hybrid (given, or
    the one `attnbench recommend` chose from `paths`); ReplayError when a part has no rows."""
    dep = cfg.deployment
    models, padded = fit_for(loaded, key)
    at = f"{key.describe()} ({dep.model} at tp {dep.tp})"
    suite = calibration_command(dep)
    roofline_note = []
    if not models and dep.model_shape.attention_features():
        models = {ROOFLINE: _roofline(cfg, loaded, key)}
        roofline_note.append(
            f"no ok rows of shape {at} on {loaded.gpu}: attention priced by the stated roofline "
            f"({models[ROOFLINE].source}); measure it with {suite}"
        )
    if not models:
        have = shapes_in(loaded.rows)
        raise ReplayError(
            f"no ok rows of shape {at} on {loaded.gpu}; shapes present: "
            f"{', '.join(have) or 'none'}; run e.g. {suite}"
        )
    for part in ("decode", "prefill"):
        if not any(getattr(m, part) for m in models.values()):
            raise ReplayError(
                f"no {part} rows of shape {at} on {loaded.gpu}: a replay needs both decode and "
                f"prefill rows of its KV dtype; run e.g. {suite}"
            )
    keep = _select(models, cfg.backends)
    singles = tuple(sorted(keep))
    hybrid, hybrid_source = cfg.hybrid, cfg.hybrid_source
    notes = list(loaded.notes) + roofline_note
    if hybrid is None and cfg.auto_hybrid:
        rec = recommended_hybrid(paths, loaded.gpu)
        if rec is not None and all(n in models and deployable(n) for n in rec):
            hybrid, hybrid_source = rec, "attnbench recommend"
            keep |= set(rec)
        elif rec is not None:
            why = "is not deployable" if not all(map(deployable, rec)) else "has no cost model"
            notes.append(f"recommended hybrid {rec} {why} at this shape; chose by cost")
    elif hybrid is not None:
        keep |= set(hybrid)
    return _Candidates(
        models={n: m for n, m in models.items() if n in keep},
        padded={n: m for n, m in padded.items() if n in keep},
        singles=singles,
        hybrid=hybrid,
        hybrid_source=hybrid_source,
        notes=notes,
    )


def _roofline(cfg: ReplayConfig, loaded: LoadedRows, key: ShapeKey) -> AttentionCostModel:
    """The stated roofline at `key` (`replay.kinds`), from the headers' measured ceilings."""
    read = max(
        (
            float(h.ceilings.get(k) or 0.0)
            for h in loaded.headers
            if h.ceilings
            for k in ("read_bandwidth_gbps", "copy_bandwidth_gbps")
        ),
        default=0.0,
    )
    copy, tflops, _ = ceilings(loaded.headers, cfg.deployment.dtype, cfg)
    return roofline_model(key, read or copy, tflops, mla_prefill_ratio(cfg.deployment))


def _layer_kinds(cfg: ReplayConfig, loaded: LoadedRows, chosen: _Candidates) -> LayerKinds | None:
    """Per replayed variant, a model per layer kind (None for a one-kind deployment): the
    kind's own fit where it has decode and prefill rows, else the main kind's (a note says so)."""
    dep = cfg.deployment
    kinds = dep.kinds
    if len(kinds) == 1:
        return None
    main = main_kind(kinds)
    per: dict[str, list[AttentionCostModel]] = {n: [] for n in chosen.models}
    for i, kind in enumerate(kinds):
        key = kind_key(dep, kind)
        fitted = fit_for(loaded, key)[0] if i != main else chosen.models
        for name, m in chosen.models.items():
            own = fitted.get(name)
            if own is None or own.decode is None or own.prefill is None:
                chosen.notes.append(
                    f"{name}: no decode and prefill rows at {key.describe()} "
                    f"({kind.num_layers} layers): priced by its {m.key.describe()} model"
                )
                own = m
            per[name].append(own)
    return LayerKinds(
        counts=tuple(k.num_layers for k in kinds),
        windows=tuple(window_of(k) for k in kinds),
        models={n: tuple(v) for n, v in per.items()},
    )


def _scheduler(
    cfg: ReplayConfig,
    reqs: list[ReplayRequest],
    trace: TraceInfo,
    chosen: _Candidates,
    progress: Callable[[str], None] | None = None,
) -> tuple[SchedulerConfig, StudyOptions]:
    """The scheduler the replay runs (an `agents` trace batches all its agents at once) and
    the study's options."""
    dep = cfg.deployment
    prefix = trace.has_prefix_hashes if cfg.prefix_cache is None else cfg.prefix_cache
    agents = cfg.trace.lower().startswith("agents")  # all N agents run at once
    max_batch = cfg.max_batch or (
        max(DEFAULT_MAX_BATCH, len(reqs)) if agents else DEFAULT_MAX_BATCH
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
        hybrid=chosen.hybrid,
        hybrid_source=chosen.hybrid_source,
        padded=agents if cfg.padded is None else cfg.padded,
        singles=chosen.singles,
        auto_hybrid=cfg.auto_hybrid,
        progress=progress,
        kinds=chosen.kinds,
    )
    return sched, opts


def _trust(
    paths: Sequence[Path],
    validation: Path | None,
    loaded: LoadedRows,
    replayed: tuple[list[ReplayRequest], SchedulerConfig, StudyOutcome],
    chosen: _Candidates,
    bands: bool = True,
) -> ReplayTrust:
    """How far to trust each candidate at the main rate: its live-step validation (given, or
    found beside `paths`) and the rankings with their error bands."""
    reqs, sched, study = replayed
    try:
        source, validated, vnotes = choose_validation(
            validation,
            find_validation(paths) if validation is None else [],
            {n: m.key.describe() for n, m in chosen.models.items()},
            loaded.gpu,
        )
    except ValidationDocumentError as exc:
        raise ReplayError(f"--validation: {exc}") from None
    main_runs = {r.candidate: r for r in study.runs if r.rate_scale == study.main_scale}
    at = ReplayAtScale(
        requests=scale_rate(reqs, study.main_scale),
        sched=sched,
        rate_scale=study.main_scale,
        infos=study.candidates,
        costs=study.costs,
        sims=study.sims,
        main=main_runs,
    )
    metrics = RANKED_METRICS if bands else ()
    return assess(at, Validation(source, validated, vnotes), metrics)


CALIBRATED = Deployment()
"""The deployment the `replay-calibration` suites measure (Llama-3.1-70B at TP 8, bf16, page
16); their decode grid also runs with an fp8 e4m3 KV cache."""


def calibration_command(dep: Deployment) -> str:
    """The `attnbench run` that measures the rows a replay of `dep` lacks (for error messages):
    the `replay` suite at `dep`'s model, tp and dtypes; at the calibrated shape with an fp8 e4m3
    KV cache, first the `replay-calibration-fp8` suite, whose rows complete `replay-calibration`'s
    fp8 decode grid (the prefill model is fitted on rows of the deployment's own KV dtype: bf16
    prefill rows do not price fp8 prefill)."""
    flags = [f"--model {dep.model}", f"--tp {dep.tp}"]
    for flag, value, usual in (
        ("--dtype", dep.dtype, CALIBRATED.dtype),
        ("--kv-dtype", dep.kv_dtype, CALIBRATED.kv_dtype),
        ("--page-size", dep.page_size, CALIBRATED.page_size),
    ):
        if value != usual:
            flags.append(f"{flag} {value}")
    generic = f"`attnbench run --suite replay {' '.join(flags)}`"
    shape = (dep.model, dep.tp, dep.dtype, dep.page_size)
    calibrated = (CALIBRATED.model, CALIBRATED.tp, CALIBRATED.dtype, CALIBRATED.page_size)
    if shape == calibrated and dep.kv_dtype == "fp8_e4m3":
        return (
            "`attnbench run --suite replay-calibration-fp8` and pass its results beside the "
            f"`replay-calibration` rows (their decode grid has fp8 KV), or {generic}"
        )
    return generic


def shape_key(dep: Deployment) -> ShapeKey:
    """The attention call shape of one GPU of `dep`, at its main layer kind (`replay.kinds`;
    ValueError for an invalid sharding)."""
    kinds = dep.kinds
    return kind_key(dep, kinds[main_kind(kinds)])


def fit_for(
    loaded: LoadedRows, key: ShapeKey
) -> tuple[dict[str, AttentionCostModel], dict[str, AttentionCostModel]]:
    """`fit_models` on the rows of `key`, bounded by the highest bandwidth ceiling the headers
    measured (or a decode row reached) and told the GPU's SM count; (models, padded twins)."""
    measured = [
        float(h.ceilings.get(k) or 0.0)
        for h in loaded.headers
        if h.ceilings
        for k in ("read_bandwidth_gbps", "copy_bandwidth_gbps")
    ]
    ceiling = bandwidth_ceiling(loaded.rows, key, max(measured, default=0.0) or None)
    sms = [int(h.device.get("num_sms") or 0) for h in loaded.headers if h.device]
    return fit_models(
        loaded.rows,
        key,
        ceiling_gbps=ceiling if math.isfinite(ceiling) else None,
        num_sms=max(sms, default=0) or DEFAULT_NUM_SMS,
    )
