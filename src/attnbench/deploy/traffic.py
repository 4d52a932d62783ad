"""`recommend --engine E --trace T`: how often a trace's running batch falls in each CUDA-graph
capture bucket, from the replay simulator (`replay.simulator`), so `analysis.engine_rank` weighs
the buckets by the traffic instead of uniformly.

The deployment is the one the rows describe: the 16-bit shape (head shape, dtype, page size)
with the most decode rows that also has prefill rows to fit, at the model preset its rows name
(the most common `--model` and tp among them), else the first preset of `attnbench models`
whose heads at some tp are that shape. The first `TRACE_LIMIT` requests of the trace are
replayed as `attnbench replay` schedules them (its default GPU memory, batch limit and token
budget, prefix cache when the trace has hashes), each step timed by one variant's fitted cost
(the engine default's own rows, else the raw kernel that default runs, else the first variant
fitted). vLLM (v1) mixes prefill chunks into decode steps; SGLang by default runs prefill
batches apart from decode batches (`enable_mixed_chunk` off), replayed as the simulator's
unchunked mode. Every step with decoding requests counts once at its decode batch (the running
batch the engine pads to a captured size); prefill-only steps run no decode graph and do not
count.

The histogram's own uncertainty (`uncertainty`): `BOOT_REPLICATES` histograms of a block
bootstrap of the replayed decode steps (`BLOCKS` consecutive blocks, resampled with
replacement: the trace is one sample of traffic), and the histograms of two more replays with
every step's cost scaled by 1 -+ the fitted decode model's held-out p90 error.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnbench.analysis.engine_buckets import bucket_of, capture_sizes
from attnbench.engines.paths import Engine, default_setting, kernel_path
from attnbench.replay.costmodel import (
    AttentionCostModel,
    ShapeKey,
    shapes_in,
    usable_rows,
)
from attnbench.replay.deployment import Deployment
from attnbench.replay.document import ReplayConfig
from attnbench.replay.gemm import GemmRoofline
from attnbench.replay.kinds import (
    LAUNCH_US,
    ROOFLINE,
    kind_key,
    main_kind,
    mla_prefill_ratio,
    roofline_model,
    window_of,
)
from attnbench.replay.pipeline import (
    DEFAULT_MAX_BATCH,
    LoadedRows,
    ReplayError,
    ceilings,
    fit_for,
    load_rows,
    requests_for,
)
from attnbench.replay.simresult import SchedulerConfig, SimResult
from attnbench.replay.simulator import simulate
from attnbench.replay.stepcost import KindCost, ReplayCost
from attnbench.replay.steps import FloatArray, StepFeatures, StepShape
from attnbench.results import ResultRow
from attnbench.workload.models import MODELS, valid_tps
from attnbench.workload.traces import TRACES

BOOT_REPLICATES = 200
BLOCKS = 40
BOOT_SEED = 20261207
TRACE_LIMIT = 2000
"""Requests replayed from the trace's start (a few seconds of simulation at most)."""
TRACE_HELP = "azure-code, azure-conv, mooncake-conv, agents:N[@LO-HI] or a trace file"


@dataclass(frozen=True)
class RunningBatches:
    """Decode steps per running batch size, and what replay produced them."""

    trace: str
    requests: int
    deployment: str
    cost: str
    scheduling: str
    histogram: dict[int, int]
    costs_gpu: str = ""
    """The GPU whose rows fitted the step costs (the answer's GPU, else `fallback` says why not)."""
    prompts: tuple[int, ...] = ()
    """The replayed requests' prompt lengths (prefill is priced on draws from them)."""
    fallback: str = ""
    boot: tuple[dict[int, int], ...] = ()
    """Block-bootstrap replicate histograms of the decode steps (`uncertainty`)."""
    band: tuple[dict[int, int], ...] = ()
    """The histograms of the replays at step costs x (1 - p90, 1 + p90)."""
    cost_p90: float = 0.0
    """The step-cost model's held-out p90 |error| the band spans."""
    cost_note: str = ""
    """How the step times were priced where not by one variant's fit of the deployment's one
    shape (`family_cost`: the stated roofline, layer kinds); "": that fit."""

    @property
    def steps(self) -> int:
        return sum(self.histogram.values())

    def source(self) -> str:
        """How the buckets were weighted, in words (the output's weighting line)."""
        cost = self.cost_note or (
            f"{self.cost}'s fitted cost on {self.costs_gpu or 'an unnamed GPU'}"
        )
        return (
            f"the running batch of {self.steps:,} decode steps replayed from trace "
            f"{self.trace} (first {self.requests:,} requests on {self.deployment}; "
            f"{self.scheduling}; step times from {cost}"
            f"{'; ' + self.fallback if self.fallback else ''})"
        )


def check_trace(name: str) -> str | None:
    """One line saying why `name` is no trace `--trace` can replay, or None."""
    text = name.strip()
    if text.lower() in TRACES or text.lower().startswith("agents:") or Path(text).is_file():
        return None
    return f"--trace={name!r} is not a known trace or a file; allowed: {TRACE_HELP}"


def _preset(key: ShapeKey) -> tuple[str, int] | None:
    """The first model preset (and tp) whose attention heads are `key`'s shape."""
    for name, m in MODELS.items():
        if m.mla is not None or m.head_dim != key.head_dim:
            continue
        for tp in valid_tps(m):
            s = m.shard(tp)
            if (s.num_qo_heads, s.num_kv_heads) == (key.num_qo_heads, key.num_kv_heads):
                return name, tp
    return None


def _model_of(rows: Sequence[ResultRow], key: ShapeKey) -> tuple[str, int, str] | None:
    named = Counter((r.spec.model, r.spec.tp) for r in rows if r.spec.model and key.matches(r.spec))
    if named:
        (model, tp), _ = max(sorted(named.items()), key=lambda kv: kv[1])
        return str(model), tp, "the rows' model"
    found = _preset(key)
    if found is None:
        return None
    return found[0], found[1], "the first preset of that head shape"


def _fitted(loaded: LoadedRows, key: ShapeKey) -> dict[str, AttentionCostModel]:
    models, _ = fit_for(loaded, key)
    return {n: m for n, m in models.items() if m.decode and m.prefill}


def deployment_of(
    loaded: LoadedRows, model: tuple[str, int] | None = None
) -> tuple[Deployment, str, dict[str, AttentionCostModel]]:
    """The deployment the rows describe (see the module docstring), how it was chosen, and its
    variants' fitted cost models with both decode and prefill; ReplayError when none has one.
    `model` (preset, tp): only rows of that shard's heads, replayed at that preset."""
    usable = usable_rows(loaded.rows)
    heads = None
    if model is not None:
        s = MODELS[model[0]].shard(model[1])
        heads = (s.num_qo_heads, s.num_kv_heads, s.head_dim)
    counts = Counter(
        ShapeKey.of(r.spec)
        for r in usable
        if r.spec.kind == "decode"
        and r.spec.kv_dtype == r.spec.dtype
        and (heads is None or (r.spec.num_qo_heads, r.spec.num_kv_heads, r.spec.head_dim) == heads)
    )
    for key, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0].describe())):
        found = (*model, "the asked model") if model is not None else _model_of(usable, key)
        if found is None:
            continue
        name, tp, why = found
        try:
            dep = Deployment(name, tp, key.dtype, key.kv_dtype, key.page_size)
            shard = dep.shard
        except ValueError:
            continue
        if (shard.num_qo_heads, shard.num_kv_heads, shard.head_dim) != (
            key.num_qo_heads,
            key.num_kv_heads,
            key.head_dim,
        ) or dep.kv_pages <= 0:
            continue
        models = _fitted(loaded, key)
        if models:
            return dep, f"{name} at tp {tp}, {key.describe()} ({why})", models
    raise ReplayError(
        f"--trace: no 16-bit decode and prefill rows on {loaded.gpu} at a model preset's head "
        f"shape to replay the trace with; shapes present: {', '.join(shapes_in(loaded.rows))}; "
        "run e.g. `attnbench run --suite replay`"
    )


def _cost_variant(
    engine: Engine,
    models: dict[str, AttentionCostModel],
    rows: Sequence[ResultRow],
    family: str | None = None,
) -> str:
    """The variant that times the steps: the engine default's own rows, else the raw kernel the
    default runs on these decode rows, else the first fitted variant. `family` (`gqa`, `mla`):
    the deployment's; None: `mla` where any row of the GPU is an MLA row."""
    if family is None:
        family = "mla" if any(r.spec.mla is not None for r in usable_rows(rows)) else "gqa"
    own = default_setting(engine, family).variant
    if own in models:
        return own
    key = next(iter(models.values())).key
    for r in usable_rows(rows):
        if r.spec.kind == "decode" and key.matches(r.spec):
            path = kernel_path(own, r.spec)
            if not isinstance(path, str) and path.variant in models:
                return path.variant
            break
    return sorted(models)[0]


def running_batches(
    paths: Sequence[Path],
    gpu: str,
    engine: Engine,
    trace: str,
    limit: int = TRACE_LIMIT,
) -> RunningBatches:
    """Replay `trace`'s first `limit` requests on `gpu`'s rows and count the decode steps per
    running batch size. Raises ReplayError for input it cannot use."""
    return replay_trace(paths, gpu, engine, trace, limit)[0]


def replay_trace(
    paths: Sequence[Path],
    gpu: str | None,
    engine: Engine,
    trace: str,
    limit: int = TRACE_LIMIT,
    model: tuple[str, int] | None = None,
) -> tuple[RunningBatches, SimResult, Deployment]:
    """`running_batches`, with the simulation and its deployment (whose steps `recommend
    --measure` draws its batches from); `model` replays that preset on its shard's rows (a
    preset with MLA or layer kinds: `family_cost`)."""
    if model is not None and is_family(model[0]):
        costed = family_cost(paths, gpu, engine, model)
    else:
        costed = _gqa_cost(paths, gpu, engine, model)
    return _replayed(costed, engine, trace, limit)


@dataclass(frozen=True)
class Costed:
    """A deployment and the step cost its replay runs, with where that cost came from."""

    loaded: LoadedRows
    dep: Deployment
    described: str
    cost: ReplayCost
    p90: float
    fallback: str = ""
    note: str = ""
    """`RunningBatches.cost_note`."""


def _gqa_cost(
    paths: Sequence[Path], gpu: str | None, engine: Engine, model: tuple[str, int] | None
) -> Costed:
    """The deployment the rows describe (`deployment_of`) and one variant's fitted cost."""
    loaded, dep, described, models, fallback = _fit_on(paths, gpu, model)
    name = _cost_variant(engine, models, loaded.rows)
    copy, mm, _ = ceilings(loaded.headers, dep.dtype, ReplayConfig(trace="", deployment=dep))
    cost = ReplayCost(name, models[name], models[name], GemmRoofline(dep, copy, mm), dep.num_layers)
    return Costed(loaded, dep, described, cost, _p90(models[name]), fallback)


def _replayed(
    costed: Costed, engine: Engine, trace: str, limit: int
) -> tuple[RunningBatches, SimResult, Deployment]:
    """The trace's first `limit` requests simulated on `costed` with the engine's scheduling."""
    dep, cost, p90 = costed.dep, costed.cost, costed.p90
    cfg = ReplayConfig(trace=trace, limit=limit, deployment=dep)
    reqs, info = requests_for(cfg)
    chunked = engine == "vllm"
    sched = SchedulerConfig(
        kv_pages=dep.kv_pages,
        page_size=dep.page_size,
        max_batch=max(DEFAULT_MAX_BATCH, len(reqs)) if info.synthetic else DEFAULT_MAX_BATCH,
        token_budget=cfg.token_budget,
        chunked_prefill=chunked,
        prefix_cache=info.has_prefix_hashes,
    )
    sim = simulate(reqs, sched, cost)
    n = sim.features.n_decode
    if not (n > 0).any():
        longest = max((int(r.input_len) for r in reqs), default=0)
        raise ReplayError(
            f"--trace {trace}: its {len(reqs):,} requests yield no decode step on "
            f"{costed.described} (the KV cache holds {dep.kv_pages * dep.page_size:,} tokens; "
            f"the longest prompt is {longest:,}): no traffic to weight the answer by"
        )
    band = tuple(
        histogram_of(simulate(reqs, sched, Scaled(cost, f)).features.n_decode)
        for f in (1 - p90, 1 + p90)
    )
    run = RunningBatches(
        trace=info.name,
        requests=info.requests,
        deployment=costed.described,
        cost=cost.name,
        scheduling=(
            f"at most {sched.max_batch} running, "
            + ("prefill chunks mixed into decode steps" if chunked else "prefill batches apart")
        ),
        histogram=histogram_of(n),
        costs_gpu=costed.loaded.gpu,
        prompts=tuple(int(r.input_len) for r in reqs),
        fallback=costed.fallback,
        boot=block_bootstrap(n),
        band=band,
        cost_p90=p90,
        cost_note=costed.note,
    )
    return run, sim, dep


def is_family(model: str) -> bool:
    """Whether the replay prices `model` per layer kind (`replay.kinds`): MLA, windows, sinks
    or a soft-cap; plain GQA presets keep the rows' own shape (`deployment_of`)."""
    m = MODELS[model]
    return m.mla is not None or bool(m.attention_features())


def family_cost(
    paths: Sequence[Path], gpu: str | None, engine: Engine, model: tuple[str, int]
) -> Costed:
    """The preset at the engine default's page size (bf16, the replay's default memory), its
    step cost one attention call per layer kind as `attnbench replay` prices it: the main
    kind's fitted models (decode and prefill) on `gpu`'s rows, the engine default's (or the
    raw kernel it runs) else the first; other kinds by their own fit of that variant, else
    the main kind's model at their window; the stated roofline on the GPU's measured
    ceilings where the main kind has no rows. ReplayError for a deployment with no room."""
    family = "mla" if MODELS[model[0]].mla is not None else "gqa"
    page = default_setting(engine, family).default_page_size
    try:
        dep = Deployment(model[0], model[1], page_size=page)
        kinds = dep.kinds
    except ValueError as exc:
        raise ReplayError(str(exc)) from None
    if (why := dep.no_room()) is not None:
        raise ReplayError(why)
    loaded, fallback = _rows_of(paths, gpu)
    keys = [kind_key(dep, k) for k in kinds]
    models, note = _main_models(loaded, dep, keys[main_kind(kinds)])
    name = _cost_variant(engine, models, loaded.rows, family)
    notes = [note or f"{name}'s fitted cost on {loaded.gpu}"]
    per_kind = tuple(
        _kind_cost(loaded, dep, (i, keys[i]), (name, models[name]), notes)
        for i in range(len(kinds))
    )
    copy, mm, _ = ceilings(loaded.headers, dep.dtype, ReplayConfig(trace="", deployment=dep))
    m = models[name]
    cost = ReplayCost(
        name, m, m, GemmRoofline(dep, copy, mm), dep.num_layers, per_kind if len(kinds) > 1 else ()
    )
    shapes = " + ".join(
        f"{k.num_layers} layers {key.describe()}" for k, key in zip(kinds, keys, strict=True)
    )
    described = f"{model[0]} at tp {model[1]}, {shapes} (the asked model)"
    return Costed(loaded, dep, described, cost, _p90(m), fallback, "; ".join(notes))


def _main_models(
    loaded: LoadedRows, dep: Deployment, key: ShapeKey
) -> tuple[dict[str, AttentionCostModel], str]:
    """The variants fitted (decode and prefill) at the main kind's `key`, else the stated
    roofline and the words that say so."""
    models = _fitted(loaded, key)
    if models:
        return models, ""
    roof = _roofline(loaded, dep, key)
    return {ROOFLINE: roof}, (
        f"the stated roofline on {loaded.gpu}'s measured ceilings ({roof.source}): no 16-bit "
        f"decode and prefill rows of {key.describe()} there"
    )


def _kind_cost(
    loaded: LoadedRows,
    dep: Deployment,
    at: tuple[int, ShapeKey],
    main: tuple[str, AttentionCostModel],
    notes: list[str],
) -> KindCost:
    """Layer kind `at` (index, key) of `dep` priced for variant `main`: its own fit (the
    roofline at its key for the roofline), else the main kind's model (said in `notes`)."""
    i, key = at
    kind = dep.kinds[i]
    name, model = main
    if name == ROOFLINE:
        own: AttentionCostModel | None = _roofline(loaded, dep, key)
    else:
        own = model if model.key == key else _fitted(loaded, key).get(name)
    if own is None:
        notes.append(
            f"{name}: no decode and prefill rows at {key.describe()} ({kind.num_layers} "
            f"layers): priced by its {model.key.describe()} model"
        )
        own = model
    return KindCost(kind.num_layers, window_of(kind), own, own)


def _roofline(loaded: LoadedRows, dep: Deployment, key: ShapeKey) -> AttentionCostModel:
    """The stated roofline at `key` (`replay.kinds`) on the headers' measured ceilings, as
    `attnbench replay` states it."""
    read = max(
        (
            float(h.ceilings.get(k) or 0.0)
            for h in loaded.headers
            if h.ceilings
            for k in ("read_bandwidth_gbps", "copy_bandwidth_gbps")
        ),
        default=0.0,
    )
    copy, tflops, _ = ceilings(loaded.headers, dep.dtype, ReplayConfig(trace="", deployment=dep))
    return roofline_model(key, read or copy, tflops, mla_prefill_ratio(dep))


def _rows_of(paths: Sequence[Path], gpu: str | None) -> tuple[LoadedRows, str]:
    """`gpu`'s rows, else (it has none) the GPU with the most rows, said in words."""
    try:
        return load_rows(paths, gpu), ""
    except ReplayError:
        if gpu is None:
            raise
    loaded = load_rows(paths, None)
    return loaded, f"step costs from {loaded.gpu}'s rows: {gpu} has none"


def histogram_of(n_decode: np.ndarray) -> dict[int, int]:
    """Decode steps per running batch size (steps without decode left out)."""
    sizes, steps = np.unique(n_decode[n_decode > 0], return_counts=True)
    return {int(s): int(c) for s, c in zip(sizes.tolist(), steps.tolist(), strict=True)}


def block_bootstrap(
    n_decode: np.ndarray, reps: int = BOOT_REPLICATES, blocks: int = BLOCKS
) -> tuple[dict[int, int], ...]:
    """`reps` histograms of the steps' running batches, each from `blocks` consecutive blocks
    of the step sequence drawn with replacement (seeded: the same replay, the same replicates)."""
    n = n_decode[n_decode > 0]
    if n.size < blocks:
        return ()
    sizes = np.unique(n)
    parts = np.array_split(np.searchsorted(sizes, n), blocks)
    per_block = np.stack([np.bincount(p, minlength=sizes.size) for p in parts])
    draws = np.random.default_rng(BOOT_SEED).integers(0, blocks, size=(reps, blocks))
    counts = per_block[draws].sum(axis=1)
    return tuple(
        {int(s): int(c) for s, c in zip(sizes.tolist(), row.tolist(), strict=True) if c}
        for row in counts
    )


def _p90(model: AttentionCostModel) -> float:
    """The decode fit's held-out p90 |error| (0 where the fit has no held-out rows)."""
    fit = model.decode
    p90 = fit.cv_p90_rel_err if fit is not None else float("nan")
    return float(min(p90, 0.5)) if np.isfinite(p90) else 0.0


@dataclass(frozen=True)
class Scaled:
    """A step cost times `factor` (the replay at the cost model's error band)."""

    cost: ReplayCost
    factor: float

    def durations_s(self, f: StepFeatures) -> FloatArray:
        return np.asarray(self.cost.durations_s(f) * self.factor, dtype=np.float64)

    def step_s(self, s: StepShape) -> float:
        return self.cost.step_s(s) * self.factor


def _fit_on(
    paths: Sequence[Path], gpu: str | None, model: tuple[str, int] | None
) -> tuple[LoadedRows, Deployment, str, dict[str, AttentionCostModel], str]:
    """The rows, deployment and fitted step costs of `gpu` (the answer's GPU); where that GPU's
    rows fit none, the GPU with the most rows, and the fallback said in words."""
    try:
        loaded = load_rows(paths, gpu)
        return (loaded, *deployment_of(loaded, model), "")
    except ReplayError as exc:
        if gpu is None:
            raise
        why = str(exc)
    loaded = load_rows(paths, None)
    if loaded.gpu == gpu:
        raise ReplayError(why)
    note = f"step costs from {loaded.gpu}'s rows: {gpu} has none to fit them"
    return (loaded, *deployment_of(loaded, model), note)


TRAFFIC_SUFFIX = ".traffic.json.gz"
"""A rows file `X.jsonl.gz` of `recommend --measure` keeps its traffic in `X.traffic.json.gz`."""
TrafficKey = tuple[str, str, int, str, str]
"""(GPU, model, tp, engine, trace)."""


@dataclass(frozen=True)
class Traffic:
    """The decode histogram an answer weights by, its replicates, and where it came from."""

    gpu: str
    model: str
    tp: int
    engine: str
    trace: str
    histogram: dict[int, int]
    boot: tuple[dict[int, int], ...]
    band: tuple[dict[int, int], ...]
    cost_p90: float
    source: str

    @property
    def key(self) -> TrafficKey:
        return (self.gpu, self.model, self.tp, self.engine, self.trace)

    def as_dict(self) -> dict[str, object]:
        return {
            "gpu": self.gpu,
            "model": self.model,
            "tp": self.tp,
            "engine": self.engine,
            "trace": self.trace,
            "histogram": self.histogram,
            "boot": list(self.boot),
            "band": list(self.band),
            "cost_p90": self.cost_p90,
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> Traffic:
        def hist(h: object) -> dict[int, int]:
            return {int(k): int(v) for k, v in dict(h).items()}  # type: ignore[call-overload]

        return cls(
            str(d["gpu"]),
            str(d["model"]),
            int(d["tp"]),  # type: ignore[call-overload]
            str(d["engine"]),
            str(d["trace"]),
            hist(d["histogram"]),
            tuple(hist(h) for h in d["boot"]),  # type: ignore[attr-defined]
            tuple(hist(h) for h in d["band"]),  # type: ignore[attr-defined]
            float(d["cost_p90"]),  # type: ignore[arg-type]
            str(d["source"]),
        )

    @classmethod
    def of(cls, run: RunningBatches, model: tuple[str, int], engine: str) -> Traffic:
        """The replay's traffic; its replicates kept per capture bucket (all an answer reads
        of them, `decide.decode_strata`), a tenth of the size per batch size."""
        sizes = capture_sizes("sglang" if engine == "sglang" else "vllm")
        return cls(
            run.costs_gpu,
            model[0],
            model[1],
            engine,
            run.trace,
            run.histogram,
            tuple(per_bucket(h, sizes) for h in run.boot),
            tuple(per_bucket(h, sizes) for h in run.band),
            run.cost_p90,
            run.source()
            + (_uncertainty(len(run.boot), run.cost_p90) if run.boot or run.band else ""),
        )


def _uncertainty(replicates: int, cost_p90: float) -> str:
    """How the histogram's uncertainty was drawn: block-bootstrap replicates, and replays at
    the cost model's held-out p90 error where it has one (a stated roofline has none)."""
    text = f"; histogram uncertainty: {replicates} block-bootstrap replicates of the steps"
    if cost_p90 > 0:
        return text + (
            f" and replays at step costs x (1 -+ {100 * cost_p90:.0f}%, the cost model's "
            "held-out p90 error)"
        )
    return text + " (the step costs have no held-out error to replay at)"


def per_bucket(histogram: Mapping[int, int], sizes: Sequence[int]) -> dict[int, int]:
    """Decode steps per CUDA-graph capture size (each running batch at the size it pads to)."""
    out: dict[int, int] = {}
    for b, n in histogram.items():
        if b >= 1 and n > 0:
            out[bucket_of(b, sizes)] = out.get(bucket_of(b, sizes), 0) + n
    return dict(sorted(out.items()))


def traffic_path(rows: Path) -> Path:
    """Where the traffic of the rows file `rows` is kept."""
    name = rows.name
    for ext in (".jsonl.gz", ".jsonl"):
        if name.endswith(ext):
            return rows.with_name(name[: -len(ext)] + TRAFFIC_SUFFIX)
    return rows.with_name(name + TRAFFIC_SUFFIX)


def committed_traffic(paths: Sequence[Path]) -> dict[TrafficKey, Traffic]:
    """The traffics kept beside the given rows files (`traffic_path`)."""
    import gzip
    import json

    out: dict[TrafficKey, Traffic] = {}
    for p in paths:
        doc = traffic_path(p)
        if doc.is_file():
            for d in json.loads(gzip.decompress(doc.read_bytes()))["traffic"]:
                t = Traffic.from_dict(d)
                out[t.key] = t
    return out


def write_traffic(path: Path, traffic: Sequence[Traffic], commit: str) -> None:
    import gzip
    import json

    gpus = sorted({t.gpu for t in traffic})
    doc = {
        "commit": commit,
        "provenance": {"git_sha": commit, "gpu": ", ".join(gpus)},
        "traffic": [t.as_dict() for t in traffic],
    }
    path.write_bytes(gzip.compress(json.dumps(doc, sort_keys=True).encode(), mtime=0))


def fit_paths(paths: Sequence[Path]) -> list[Path]:
    """The rows files a replay fits its step costs on: all but `recommend --measure`'s own
    (named `*deploy*`), whose drawn batches would change the costs that drew them; all of
    them where they are all such files."""
    rest = [p for p in paths if "deploy" not in p.name]
    return rest or list(paths)


def labelled_traffic(key: TrafficKey, labelled: Mapping[int, float]) -> Traffic:
    """A traffic from the bucket weights `--measure` rows carry in their labels (no
    replicates: the histogram's uncertainty is unknown)."""
    gpu, model, tp, engine, trace = key
    hist = {b: max(1, round(w * 1e6)) for b, w in labelled.items()}
    why = f"bucket weights from the labels of the rows {trace}'s replay drew on {gpu}"
    return Traffic(gpu, model, tp, engine, trace, hist, (), (), 0.0, why)


def traffic_for(
    paths: Sequence[Path],
    gpu: str,
    engine: Engine,
    trace: str,
    model: tuple[str, int],
    labelled: Mapping[int, float] | None = None,
) -> Traffic:
    """The traffic of `trace` on this deployment and GPU: the one kept beside the rows that
    `recommend --measure` drew on this GPU (`committed_traffic`: the histogram that drew
    them), else the bucket weights those rows' labels carry (`labelled`: no replicates),
    else a replay on `gpu`'s own rows (`replay_trace`, cached on disk by GPU, attnbench
    version and the rows files)."""
    kept = committed_traffic(paths).get((gpu, model[0], model[1], engine, trace))
    if kept is not None:
        return kept
    if labelled:
        return labelled_traffic((gpu, *model, engine, trace), labelled)
    cache = _cache_file(paths, gpu, engine, trace, model)
    if cache is not None and cache.is_file():
        import json

        try:
            return Traffic.from_dict(json.loads(cache.read_text()))
        except (ValueError, KeyError, TypeError):
            pass
    run, _, _ = replay_trace(fit_paths(paths), gpu, engine, trace, model=model)
    got = Traffic.of(run, model, engine)
    if cache is not None:
        import json

        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(got.as_dict()))
        except OSError:
            pass
    return got


def _cache_file(
    paths: Sequence[Path], gpu: str, engine: str, trace: str, model: tuple[str, int]
) -> Path | None:
    """The disk cache of one replay: keyed by the GPU, attnbench's version, the rows files
    (names, sizes, times) and the ask; none for a trace file (it may change in place)."""
    import hashlib
    import os
    from importlib.metadata import PackageNotFoundError, version

    if Path(trace).is_file():
        return None
    try:
        ours = version("attnbench")
    except PackageNotFoundError:
        ours = "unknown"
    h = hashlib.sha256()
    for p in sorted(fit_paths(paths)):
        st = p.stat()
        h.update(f"{p.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode())
    h.update(f"{gpu}|{ours}|{model[0]}|{model[1]}|{engine}|{trace}|{BOOT_SEED}|2".encode())
    if is_family(model[0]):  # priced per layer kind, by the stated roofline where no rows
        h.update(f"|kinds|{ROOFLINE}|{LAUNCH_US:g}|1".encode())
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "attnbench" / "recommend" / f"{h.hexdigest()[:24]}.json"
