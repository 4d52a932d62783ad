"""`recommend --measure`'s sampling design: the real batches and prompts to time for one
deployment on one trace.

The trace's replay (`deploy.traffic.replay_trace`, the engine's scheduling, on the measuring
GPU's own step costs) gives a running batch per decode step; each step pads to the engine's
CUDA-graph capture size (`engine_buckets`). The buckets are strata: every bucket holding at
least `MEASURE_SHARE` of the steps gets `per_bucket` steps (5 by default) drawn at random from
its own steps without replacement; smaller buckets are added heaviest first, `PER_SMALL_BUCKET`
steps each, until a share `cover` of the steps (0.9 by default) is in measured buckets. A
step is its exact decode batch (`live.step_spec`: its requests' KV lengths on the deployment's
shard), timed with every deployable configuration of the engine (its attention backends at the
asked KV dtype and the page size the engine runs), so every option is timed on the same
batches (paired). Prefill: `PREFILL_PROMPTS` prompts drawn at random from the trace's
requests, each a one-request causal prefill at its prompt length. The draws are seeded by the
trace and bucket: the same replay gives the same plan. Pure: a simulation in, cases out.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from attnbench.analysis.engine_buckets import bucket_of, capture_sizes
from attnbench.deploy.decide import MEASURE_SHARE
from attnbench.deploy.labels import decode_label, prefill_label
from attnbench.engines.paths import Engine, default_setting, kernel_path, setting, settings_for
from attnbench.replay.deployment import Deployment
from attnbench.replay.live import step_specs
from attnbench.replay.simresult import SimResult
from attnbench.workload.spec import WorkloadSpec

PER_BUCKET = 5
"""Steps drawn from each bucket of at least `MEASURE_SHARE` of the decode steps."""
PER_SMALL_BUCKET = 2
"""Steps drawn from each smaller bucket `cover` adds (two: a stratum's spread needs two)."""
COVER = 0.9
"""Buckets are added until this share of the decode steps is in measured buckets."""
PREFILL_PROMPTS = 6
"""Prompts drawn from the trace for prefill (at least 5: an interval needs 3 cases)."""
SEED = 20261207
SGLANG_PAGE = 1
"""SGLang's default `--page-size` (its flashinfer backend indexes tokens whatever it is)."""


@dataclass(frozen=True)
class PlannedCase:
    trace: str
    bucket: int
    weight: float
    """The bucket's share of the trace's decode steps."""
    step: int
    spec: WorkloadSpec
    backends: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return {
            "trace": self.trace,
            "kind": self.spec.kind,
            "bucket": self.bucket,
            "weight": self.weight,
            "step": self.step,
            "case_id": self.spec.case_id,
            "batch_size": self.spec.batch_size,
            "kv_max": max(self.spec.kv_lens),
            "kv_total": self.spec.total_kv,
            "kv_dtype": self.spec.kv_dtype,
            "page_size": self.spec.page_size,
            "backends": list(self.backends),
        }


def engine_variants(engine: Engine, kv_dtype: str, family: str = "gqa") -> tuple[str, ...]:
    """The engine's settings for a model of `family` (`gqa`, `mla`) that take this KV dtype."""
    kv = "auto" if not kv_dtype.startswith("fp8") else kv_dtype
    return tuple(s.variant for s in settings_for(engine, family) if kv in s.kv_dtypes)


def bucket_shares(histogram: Mapping[int, int], sizes: Sequence[int]) -> dict[int, float]:
    """Each capture bucket's share of the decode steps."""
    counts: dict[int, float] = {}
    for b, n in histogram.items():
        if b >= 1 and n > 0:
            counts[bucket_of(b, sizes)] = counts.get(bucket_of(b, sizes), 0.0) + n
    total = sum(counts.values()) or 1.0
    return {s: c / total for s, c in sorted(counts.items())}


def bucket_plan(
    histogram: Mapping[int, int],
    sizes: Sequence[int],
    cover: float = COVER,
    per_bucket: int = PER_BUCKET,
) -> dict[int, tuple[float, int]]:
    """Bucket -> (share of the decode steps, steps to draw): `per_bucket` for each bucket of at
    least `MEASURE_SHARE`, then `PER_SMALL_BUCKET` for the heaviest smaller ones until the
    buckets taken hold `cover` of the steps."""
    share = bucket_shares(histogram, sizes)
    taken = {s: per_bucket for s, w in share.items() if w >= MEASURE_SHARE}
    for s in sorted(share, key=lambda s: (-share[s], s)):
        if sum(share[t] for t in taken) >= cover - 1e-12:
            break
        taken.setdefault(s, min(PER_SMALL_BUCKET, per_bucket))
    return {s: (share[s], taken[s]) for s in sorted(taken)}


def heavy_buckets(
    histogram: Mapping[int, int], sizes: Sequence[int], cover: float = 0.0
) -> dict[int, float]:
    """The measured buckets of `bucket_plan` and their shares."""
    return {s: w for s, (w, _) in bucket_plan(histogram, sizes, cover).items()}


@dataclass(frozen=True)
class PlanAsk:
    """What one trace's plan is for: the trace, KV dtype, steps per bucket, cover and the GPU
    whose step costs made the replay (named in every label)."""

    trace: str
    kv_dtype: str = "auto"
    per_bucket: int = PER_BUCKET
    cover: float = COVER
    costs_gpu: str = "unknown"


def page_groups(
    engine: Engine, dep: Deployment, kv_dtype: str
) -> list[tuple[int, tuple[str, ...]]]:
    """The page sizes the engine's variants run at, each with its variants, smallest first.
    GQA: every variant at one size (SGLang's `SGLANG_PAGE`, else the deployment's). MLA: vLLM
    at the MLA default's block (`FLASH_ATTN_MLA`: 64, the size vLLM forces for MLA); SGLang
    each backend at its own (`fa3` and `flashinfer` at 1, `flashmla` forced to 64)."""
    family = "mla" if dep.is_mla else "gqa"
    variants = engine_variants(engine, kv_dtype, family)
    if family == "gqa":
        return [(SGLANG_PAGE if engine == "sglang" else dep.page_size, variants)]
    if engine == "vllm":
        return [(default_setting(engine, family).default_page_size, variants)]
    pages: dict[int, list[str]] = {}
    for v in variants:
        pages.setdefault(setting(v).default_page_size, []).append(v)
    return [(p, tuple(vs)) for p, vs in sorted(pages.items())]


def plan_cases(sim: SimResult, dep: Deployment, engine: Engine, ask: PlanAsk) -> list[PlannedCase]:
    """The decode steps to time (module docstring), bucket by bucket, smallest first; a step is
    one case per page size the engine's variants run at (`page_groups`) and per layer kind
    (`live.step_specs`: the same label and lengths, so the kinds of a step sum to a model
    step)."""
    sizes = capture_sizes(engine)
    n = sim.features.n_decode
    hist = {int(b): int(c) for b, c in zip(*np.unique(n[n > 0], return_counts=True), strict=True)}
    kv = dep.dtype if ask.kv_dtype == "auto" else ask.kv_dtype
    groups = page_groups(engine, dep, ask.kv_dtype)
    out: list[PlannedCase] = []
    for size, (weight, k) in bucket_plan(hist, sizes, ask.cover, ask.per_bucket).items():
        label = decode_label(ask.trace, size, weight, ask.costs_gpu)
        for step in _steps_in(sim, size, sizes, k, _seed(ask.trace, size)):
            update = {"kv_dtype": kv, "lengths": f"{ask.trace}-step{step}", "label": label}
            for page, variants in groups:
                for spec, _ in step_specs(sim, step, dep):
                    spec = spec.model_copy(update={**update, "page_size": page})
                    out.append(PlannedCase(ask.trace, size, weight, step, spec, variants))
    return out


def prefill_cases(
    prompts: Sequence[int], dep: Deployment, engine: Engine, ask: PlanAsk
) -> list[PlannedCase]:
    """`PREFILL_PROMPTS` prompt lengths drawn at random from the trace's `prompts`, each a
    one-request causal prefill on the deployment's shard, one case per layer kind and page
    size (`page_groups`); none where `prefill_refusal` says why."""
    if prefill_refusal(prompts, dep, engine, ask) is not None:
        return []
    out = []
    for draw, i in enumerate(_drawn(prompts, ask.trace)):
        named = {"lengths": f"{ask.trace}-prompt{i}", "label": prefill_label(ask.trace, draw)}
        for page, variants in page_groups(engine, dep, ask.kv_dtype):
            for spec in _prefill_specs(int(prompts[i]), dep, page, ask, named):
                out.append(PlannedCase(ask.trace, 0, 0.0, i, spec, variants))
    return out


def prefill_refusal(
    prompts: Sequence[int], dep: Deployment, engine: Engine, ask: PlanAsk
) -> str | None:
    """Why no prefill is planned, one line, or None: an MLA model whose drawn prompts some
    engine variant cannot run (the engines prefill MLA in the up-projected, non-absorbed form
    no attnbench case is; `engines.mla`), or no prompts."""
    if not prompts:
        return "prefill: not planned (the replay drew no prompts)"
    if not dep.is_mla:
        return None
    groups = page_groups(engine, dep, ask.kv_dtype)
    drawn = _drawn(prompts, ask.trace)
    why: list[str] = []
    for i in drawn:
        reasons = [
            r
            for page, variants in groups
            for spec in _prefill_specs(int(prompts[i]), dep, page, ask)
            for v in variants
            if isinstance(r := kernel_path(v, spec), str)
        ]
        if len(reasons) == sum(len(vs) for _, vs in groups):
            why.append(reasons[0])
    if not why:
        return None
    return (
        f"prefill: not planned ({len(why)} of {len(drawn)} drawn prompts run on no {engine} "
        f"MLA variant here: {why[0]})"
    )


def _drawn(prompts: Sequence[int], trace: str) -> list[int]:
    """The indices of the prompts drawn for prefill (seeded by the trace), in order."""
    rng = np.random.default_rng([SEED, zlib.crc32(trace.encode()), 0])
    at = rng.choice(len(prompts), size=min(PREFILL_PROMPTS, len(prompts)), replace=False)
    return sorted(int(x) for x in at)


def _prefill_specs(
    length: int, dep: Deployment, page: int, ask: PlanAsk, named: dict[str, str] | None = None
) -> list[WorkloadSpec]:
    """A one-request causal prefill of `length` tokens, one case per layer kind of `dep`
    (`named`: its lengths and label)."""
    kv = dep.dtype if ask.kv_dtype == "auto" else ask.kv_dtype
    return [
        WorkloadSpec(
            kind="prefill",
            kv_lens=(length,),
            qo_lens=(length,),
            num_qo_heads=kind.num_qo_heads,
            num_kv_heads=kind.num_kv_heads,
            head_dim=kind.head_dim,
            page_size=page,
            dtype=dep.dtype,
            kv_dtype=kv,
            model=dep.model,
            tp=dep.tp,
            num_layers=kind.num_layers,
            **(named or {}),
            **kind.spec_fields,
        )
        for kind in dep.kinds
    ]


def _seed(trace: str, size: int) -> list[int]:
    return [SEED, zlib.crc32(trace.encode()), size]


def _steps_in(
    sim: SimResult, size: int, sizes: Sequence[int], k: int, seed: list[int]
) -> list[int]:
    """`k` steps drawn at random, without replacement, from the steps that pad to `size`."""
    f = sim.features
    grid = np.asarray(sizes)
    at_size = grid[np.minimum(np.searchsorted(grid, f.n_decode), grid.size - 1)]
    pads = np.where(f.n_decode > 0, at_size, 0)
    steps = np.flatnonzero(pads == size)
    if not steps.size:
        return []
    pick = np.random.default_rng(seed).choice(steps.size, size=min(k, steps.size), replace=False)
    return sorted(int(steps[i]) for i in pick)
