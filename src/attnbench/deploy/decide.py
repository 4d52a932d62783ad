"""`attnbench recommend --model M`: one answer per deployment (model shape, engine, traffic).

A deployment is a model preset at a tp (`ModelShape`): its rows are those whose attention
heads per GPU are the preset's shard (`num_qo_heads`, `num_kv_heads`, `head_dim`), whatever
model name a row carries (an anonymous `h32/8 d128` row is llama-3.1-8b's tp1 shard). The
options are only what the engine deploys (`deploy_options`): for vLLM/SGLang their attention
backends at a KV dtype and page size (engine-variant rows, else raw rows that are exactly the
engine's kernel path, `engine_rank.engine_rows`); for `--engine none` the raw library
variants that read a paged cache in place, untuned. Every option is compared with the
engine's default on the cases both ran (`deploy_stats.paired_ratio`): decode cases weighted by
the traffic's CUDA-graph buckets (each bucket priced at the nearest measured batch size, log
scale; the share of weight priced at another size is reported as extrapolated), prefill cases
equally. Options whose intervals overlap the fastest one's are tied; a tie with the default
keeps the default. fp8 KV is a decision of its own (`Fp8Decision`). Pure: the rows and the
running-batch histogram come in, an `Answer` goes out; `answers_by_model` is the stable entry
point of the report's first screen.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from attnbench.analysis.compare import Timing
from attnbench.analysis.engine_buckets import bucket_of, capture_sizes
from attnbench.analysis.frame import ok_rows
from attnbench.deploy.options import (
    RAW_DEFAULT,
    Option,
    OptionKey,
    deploy_options,
    not_deployable,
)
from attnbench.deploy.shapes import (
    IndexLine,
    ModelShape,
    index,
    model_shape,
    preset_of,
    shape_rows,
)
from attnbench.deploy.stats import Pair, PairedEstimate, WeightReplicates, paired_ratio
from attnbench.engines.paths import default_setting

if TYPE_CHECKING:
    from attnbench.deploy.traffic import Traffic

Target = Literal["vllm", "sglang", "none"]
TARGETS: tuple[Target, ...] = ("vllm", "sglang", "none")
MEASURE_SHARE = 0.05
"""A bucket with at least this share of the traffic's decode steps must be measured."""


def deploy_label(trace: str, bucket: int, weight: float, costs_gpu: str = "") -> str:
    """The rows' label (`deploy.labels`): trace, capture bucket, its share of the decode steps
    and the GPU whose step costs made the replay."""
    from attnbench.deploy.labels import decode_label

    return decode_label(trace, bucket, weight, costs_gpu or "unknown")


def own_batches(rows: pd.DataFrame, trace: str | None, engine: str) -> Any:
    """Per row: it is `engine`'s decode row measured on `trace`'s own batches (labelled by
    `recommend --measure`); a boolean array."""
    import numpy as np

    if trace is None or rows.empty or "label" not in rows:
        return np.zeros(len(rows), dtype=bool)
    labels = rows["label"].astype(str)
    on_trace = {x: (p := parse_label(x)) is not None and p[0] == trace for x in labels.unique()}
    on = labels.map(on_trace).to_numpy(dtype=bool)
    decode = (rows["kind"] == "decode").to_numpy()
    return on & decode & (rows["library"].astype(str) == engine).to_numpy()


def one_gpu(
    ok: pd.DataFrame, trace: str | None, engine: str, gpu: str | None
) -> tuple[pd.DataFrame, str, bool, list[tuple[str, int]]]:
    """The rows of the GPU that answers: `gpu`, else the one that measured `trace`'s own
    batches for `engine` (whose decode is then those batches only), else the one with the
    most rows. Returns the rows, the GPU, whether decode is on the trace's own batches, and
    the other GPUs with their row counts."""
    counts = ok["gpu"].astype(str).value_counts() if not ok.empty else pd.Series(dtype=int)
    own = own_batches(ok, trace, engine)
    if gpu is None and own.any():
        gpu = str(ok[own]["gpu"].astype(str).value_counts().index[0])
    gpu = gpu or (str(counts.index[0]) if len(counts) else "no GPU")
    others = [(str(g), int(n)) for g, n in counts.items() if g != gpu]
    on_gpu = (ok["gpu"] == gpu).to_numpy() if not ok.empty else own
    if (own & on_gpu).any():
        return ok[on_gpu & ((ok["kind"] != "decode").to_numpy() | own)], gpu, True, others
    return ok[on_gpu], gpu, False, others


def label_weights(
    frame: pd.DataFrame, shape: ModelShape, engine: str, trace: str, gpu: str
) -> dict[int, float]:
    """The bucket weights the labels of `engine`'s rows on `trace`'s own batches carry on
    `gpu` (the replay that drew them), or {} where there are none."""
    ok = shape_rows(ok_rows(frame), shape)
    ok = ok[(ok["gpu"].astype(str) == gpu).to_numpy()] if not ok.empty else ok
    own = own_batches(ok, trace, engine)
    got = (parse_label(str(x)) for x in ok.loc[own, "label"])
    return {int(p[1]): float(p[2]) for p in got if p}


def answer_gpu(
    frame: pd.DataFrame, shape: ModelShape, engine: str, trace: str | None, gpu: str | None
) -> str:
    """The GPU whose rows answer (`one_gpu`): its traffic is replayed on its own costs."""
    return one_gpu(shape_rows(ok_rows(frame), shape), trace, engine, gpu)[1]


def parse_label(label: str) -> tuple[str, int, float] | None:
    """(trace, bucket, weight) of a decode `deploy_label`, else None."""
    from attnbench.deploy.labels import parse_decode

    got = parse_decode(label)
    return None if got is None else (got.trace, got.bucket, got.weight)


@dataclass
class Bucket:
    size: int
    weight: float
    measured_at: int | None
    """The measured batch size that prices it (None: nothing measured)."""
    own: bool = False
    """Priced by a batch that runs in this bucket's graph (a running batch that pads to it)."""
    cases: int = 0
    """The default's decode cases drawn in this bucket (its own stratum)."""

    @property
    def extrapolated(self) -> bool:
        return self.measured_at is None or not self.own


@dataclass
class Fp8Decision:
    option: Option
    versus: Option
    decode: PairedEstimate | None
    kv_bytes_ratio: float
    error: Mapping[str, Any] = field(default_factory=dict)
    """From the fp8 study nearest the answer's GPU and heads (`deploy.fp8.study_error`):
    `kernel`, `format`, `total_rel_l2_max`, `query_quantised`, `needle_recall_min`,
    `within_bounds`, `scope` (the GPU and heads it comes from)..."""


@dataclass(frozen=True)
class Gap:
    text: str
    command: str


@dataclass
class Answer:
    shape: ModelShape
    engine: Target
    gpu: str
    kv_dtype: str
    weighting: str
    default: Option | None = None
    choice: Option | None = None
    options: list[Option] = field(default_factory=list)
    tied: list[Option] = field(default_factory=list)
    buckets: list[Bucket] = field(default_factory=list)
    measured_batches: list[int] = field(default_factory=list)
    fp8: Fp8Decision | None = None
    prefill_choice: Option | None = None
    """`--engine none`: the fastest prefill call (a library user may pick one per phase)."""
    default_decode_us: float | None = None
    """The default's expected decode time per step and layer, traffic-weighted."""
    not_deployable: list[str] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    """What the rows do not cover, each with the command that would measure it."""
    other_gpus: list[tuple[str, int]] = field(default_factory=list)
    """Other GPUs with rows of this shape (name, rows passed): `--gpu` answers for one."""
    strata: Strata | None = None
    """The decode strata and weights the estimates used."""
    prefill_on_trace: bool = False
    """Prefill is priced on the traffic's own prompt lengths only (`prefill_on_traffic`)."""
    default_refused: str | None = None
    """The engine's own default cannot run here (why, one line): `default` is a stand-in,
    the measured option the ratios are taken against, and the answer never says "keep it"."""

    @property
    def extrapolated_share(self) -> float | None:
        if not self.buckets:
            return None
        return sum(b.weight for b in self.buckets if b.extrapolated)

    @property
    def keeps_default(self) -> bool:
        return (
            self.default_refused is None
            and self.choice is not None
            and self.choice.key == (self.default.key if self.default else None)
        )


@dataclass(frozen=True)
class Strata:
    """The decode strata of an answer: each measured case's stratum (the CUDA-graph bucket its
    batch pads to; without a histogram, its batch size) and each stratum's weight (its
    bucket's share of the decode steps, plus the shares of unmeasured buckets priced by its
    batches); `replicates`, the same weights under the histogram's replicates."""

    of: Mapping[int, int]
    """Measured batch size -> stratum."""
    weights: Mapping[int, float]
    replicates: WeightReplicates | None = None
    drawn: bool = False
    """The decode cases were drawn at random per bucket (`--measure` rows on this traffic)."""


def _estimate(pairs: list[Pair], strata: Strata) -> PairedEstimate | None:
    return paired_ratio(pairs, strata.replicates, strata.drawn)


def _drawn_prefill(rows: pd.DataFrame, trace: str | None) -> bool:
    """The prefill rows are prompts `--measure` drew from `trace` (a random sample)."""
    from attnbench.deploy.labels import parse_prefill

    if trace is None or rows.empty or "label" not in rows:
        return False
    pre = rows[rows["kind"] == "prefill"]["label"].astype(str).map(parse_prefill)
    return bool(pre.map(lambda p: p is not None and p[0] == trace).any())


def decode_pairs(ans: Answer, option: Option) -> list[Pair]:
    """The paired decode cases of `option` against the answer's default, with their strata."""
    if ans.default is None or ans.strata is None:
        return []
    return _pairs(option, ans.default, "decode", ans.strata)


def _pairs(option: Option, base: Option, kind: str, strata: Strata | None) -> list[Pair]:
    mine, theirs = option.cases(kind), base.cases(kind)
    shared = sorted(set(mine) & set(theirs))
    if kind != "decode" or strata is None:
        return [Pair(mine[c].timing, theirs[c].timing) for c in shared]
    out = []
    for c in shared:
        h = strata.of.get(theirs[c].batch)
        if h is not None:
            out.append(Pair(mine[c].timing, theirs[c].timing, strata.weights.get(h, 0.0), h))
    return out


def decode_strata(
    measured: list[int],
    sizes: list[int],
    running: Mapping[int, float] | None,
    replicates: Sequence[Sequence[Mapping[int, float]]] = ((), ()),
) -> tuple[Strata, list[Bucket]]:
    """The strata and the buckets: a bucket is priced by the measured batches that pad to it
    (its own stratum), else by the nearest measured batch size (log scale: extrapolated, its
    weight added to that batch's stratum); without a histogram every measured batch size is a
    stratum of equal weight and no bucket is listed. `replicates`: (bootstrap, band)
    histograms, turned into stratum weights the same way."""
    if not measured:
        return Strata({}, {}), []
    if not running:
        return Strata({m: m for m in measured}, {m: 1.0 / len(measured) for m in measured}), []
    of = {m: bucket_of(m, sizes) for m in measured}
    weights, buckets = _fold(running, sizes, measured, of)
    boot, band = replicates
    own = set(of.values())
    target: dict[int, int] = {}  # running batch -> its stratum, as `_fold` assigns it

    def stratum(b: int) -> int:
        if b not in target:
            size = bucket_of(b, sizes)
            target[b] = size if size in own else of[_nearest(size, measured)]
        return target[b]

    def fold(h: Mapping[int, float]) -> dict[int, float]:
        out: dict[int, float] = {}
        for b, n in h.items():
            if b >= 1 and n > 0:
                out[stratum(b)] = out.get(stratum(b), 0.0) + float(n)
        total = sum(out.values()) or 1.0
        return {k: v / total for k, v in out.items()}

    reps = WeightReplicates(tuple(fold(h) for h in boot), tuple(fold(h) for h in band))
    return Strata(of, weights, reps if (reps.boot or reps.band) else None), buckets


def _fold(
    running: Mapping[int, float], sizes: list[int], measured: list[int], of: Mapping[int, int]
) -> tuple[dict[int, float], list[Bucket]]:
    counts: dict[int, float] = {}
    for b, n in running.items():
        if b >= 1 and n > 0:
            size = bucket_of(b, sizes)
            counts[size] = counts.get(size, 0.0) + float(n)
    total = sum(counts.values()) or 1.0
    own = set(of.values())
    weights: dict[int, float] = {}
    buckets = []
    for size in sorted(counts):
        at = size if size in own else of[_nearest(size, measured)]
        weights[at] = weights.get(at, 0.0) + counts[size] / total
        first = min((m for m in measured if of[m] == size), default=_nearest(size, measured))
        buckets.append(Bucket(size, counts[size] / total, first, size in own))
    return weights, buckets


def _nearest(batch: int, measured: list[int]) -> int:
    return min(measured, key=lambda m: (abs(math.log(batch / m)), m))


def refusal_reason(frame: pd.DataFrame, shape: ModelShape, variant: str) -> str | None:
    """Why `variant` refused every case of `shape` in the rows (the most frequent reason),
    or None where it ran, failed or was not run at all."""
    if frame.empty or "status" not in frame:
        return None
    rows = shape_rows(frame, shape)
    rows = rows[rows["backend"] == variant]
    if rows.empty or not (rows["status"] == "unsupported").all():
        return None
    reasons = rows["reason"].dropna()
    return str(reasons.value_counts().index[0]) if not reasons.empty else "unsupported"


def _stand_in_gap(
    frame: pd.DataFrame, shape: ModelShape, stand_in: str, trace: str | None, kv_dtype: str
) -> Gap:
    """The gap of a library-call answer whose default (`RAW_DEFAULT`) has no timed row: the
    refusal it recorded (nothing to measure), or the command that measures it."""
    why = refusal_reason(frame, shape, RAW_DEFAULT)
    if why is not None:
        return Gap(f"{RAW_DEFAULT} refused {shape.label}: {why}; {stand_in} stands in", "")
    return Gap(
        f"{RAW_DEFAULT} has no timed row at {shape.label} (not run): {stand_in} stands in as "
        "the default",
        measure_command(shape, "none", trace, kv_dtype),
    )


def _engine_stand_in(
    frame: pd.DataFrame, shape: ModelShape, engine: Target, options: list[Option]
) -> tuple[Option | None, str | None]:
    """The baseline when the engine's own default refused every case of the shape here (an MLA
    model's FA3 qv kernel, which the official FA3 build compiles out): the 16-bit option with
    the most decode cases, and the refusal in one line. (None, None) when the default was
    simply not run: then the answer asks for the rows instead."""
    base = default_setting(engine, "mla" if shape.mla else "gqa")  # type: ignore[arg-type]
    why = refusal_reason(frame, shape, base.variant)
    auto = [o for o in options if o.key.kv == "auto" and o.cases("decode")]
    if why is None or not auto:
        return None, None
    stand = max(auto, key=lambda o: (len(o.cases("decode")), -o.key.page_size, o.key.variant))
    return stand, (
        f"the engine's default {base.name} ({base.variant}) cannot run here: {why}"
        + _library_rule(frame, shape, why)
    )


def _library_rule(frame: pd.DataFrame, shape: ModelShape, why: str) -> str:
    """Where the default's rows only say its library was absent (`.device-mla` carries no
    FA3), the refusal by the library's own rules that a run with it recorded on this family
    and GPU: what installing it would not change."""
    from attnbench.backends.base import says_missing_library

    if not says_missing_library(why) or "reason" not in frame:
        return ""
    raw = frame[(frame["status"] == "unsupported") & frame["reason"].notna()]
    if raw.empty:
        return ""
    family = raw["spec"].map(lambda s: (getattr(s, "mla", None) is not None) == shape.mla)
    reasons = raw[family.astype(bool)]["reason"].astype(str)
    rules = [r for r in reasons if "built with" in r or "was built without" in r]
    return f"; a run with the library refused by its build: {rules[0]}" if rules else ""


def answer(
    frame: pd.DataFrame,
    shape: ModelShape,
    engine: Target,
    kv_dtype: str = "auto",
    running: Mapping[int, float] | Traffic | None = None,
    weighting: str = "",
    trace: str | None = None,
    gpu: str | None = None,
) -> Answer:
    """The decision for `shape` on `engine` (module docstring) from the rows of one GPU
    (`one_gpu`); `trace` names the traffic in the command that would measure what the rows
    lack. `running`: decode steps per running batch size, or a `deploy.traffic.Traffic`
    (its histogram, source and replicates)."""
    replicates: tuple[Sequence[Mapping[int, float]], Sequence[Mapping[int, float]]] = ((), ())
    if running is not None and not isinstance(running, Mapping):
        weighting, replicates = running.source, (running.boot, running.band)
        running = running.histogram
    ok = shape_rows(ok_rows(frame), shape)
    ok, gpu, own, others = one_gpu(ok, trace, engine, gpu)
    ok, prefill_on_trace = prefill_on_traffic(ok, trace)
    if own:
        weighting = (weighting or "measured cases") + "; decode on its own batches (--measure)"
    ans = Answer(shape, engine, gpu, kv_dtype, weighting or "measured cases, equally")
    ans.other_gpus = others
    ans.prefill_on_trace = prefill_on_trace
    ans.not_deployable = not_deployable(ok, engine)
    options, default = deploy_options(ok, engine, shape.tp)
    if default is None and engine != "none":
        default, ans.default_refused = _engine_stand_in(frame, shape, engine, options)
    ans.default = default
    if default is None:
        on = f" on {gpu}" if ans.other_gpus else ""
        ans.gaps.append(
            Gap(
                f"no {ENGINE_ROWS[engine]} rows at {shape.label} ({shape.heads}){on}",
                measure_command(shape, engine, trace, kv_dtype),
            )
        )
        return ans
    if engine == "none" and default.key.variant != RAW_DEFAULT:
        ans.gaps.append(_stand_in_gap(frame, shape, default.key.variant, trace, kv_dtype))
    if ans.default_refused:
        ans.gaps.append(Gap(f"{ans.default_refused}; {default.name} stands in as the baseline", ""))
    ans.measured_batches = sorted({c.batch for c in default.cases("decode").values()})
    sizes = capture_sizes("vllm" if engine == "none" else engine)
    strata, ans.buckets = decode_strata(ans.measured_batches, sizes, running, replicates)
    strata = replace(strata, drawn=own)
    ans.strata = strata
    drawn_prefill = _drawn_prefill(ok, trace)
    drawn = Counter(strata.of.get(c.batch) for c in default.cases("decode").values())
    for b in ans.buckets:
        b.cases = drawn[b.size] if b.own else 0
    ans.default_decode_us = expected_us(default, strata)
    for opt in options:
        opt.decode = _estimate(_pairs(opt, default, "decode", strata), strata)
        opt.prefill = paired_ratio(_pairs(opt, default, "prefill", None), drawn=drawn_prefill)
    ans.options = sorted(
        (o for o in options if o.key.kv == kv_dtype), key=lambda o: _order(o, default)
    )
    _choose(ans, default)
    if engine == "none":
        pre = [o for o in ans.options if o.prefill is not None]
        ans.prefill_choice = min(pre, key=lambda o: (o.prefill.ratio, o.key.text)) if pre else None  # type: ignore[union-attr]
    ans.fp8 = fp8_decision(ans, options, strata)
    ans.gaps += coverage_gaps(ans, trace)
    ans.gaps += setting_gaps(frame, ans, {o.key.variant for o in options}, trace)
    ans.gaps += gate_gaps(frame, ans)
    return ans


ENGINE_ROWS = {"vllm": "vllm", "sglang": "sglang", "none": "paged library-call"}
"""How a gap names the rows an engine's answer reads."""


def measure_command(shape: ModelShape, engine: str, trace: str | None, kv_dtype: str) -> str:
    """The `attnbench` command that measures this deployment on its traffic (GPU); for
    `--engine none`, the raw variants' sweep at the model's shard."""
    kv = "" if kv_dtype == "auto" else f" --kv-dtype {kv_dtype}"
    if engine == "none":
        return (
            f"attnbench run --model {shape.model} --tp {shape.tp} -k decode -k prefill "
            f"-l {run_lengths(trace)}{kv} --out runs/deploy-raw.jsonl"
        )
    return (
        f"attnbench recommend --model {shape.model} --tp {shape.tp} --engine {engine} "
        f"--trace {trace or 'azure-conv'}{kv} --measure --out runs/deploy.jsonl"
    )


def prefill_on_traffic(rows: pd.DataFrame, trace: str | None) -> tuple[pd.DataFrame, bool]:
    """The rows with prefill limited to the cases at `trace`'s prompt lengths (the
    `run --lengths` that `run_lengths` names: `trace(NAME)`, or `mixed(...)` for agents and
    synthetic traffic), where there are any; else the rows as they are (prefill on every
    measured length). Prompts `recommend --measure` drew from the trace itself (labelled
    `deploy-prefill TRACE draw=I`) come first: where there are any, prefill is those only.
    Whether prefill was limited."""
    if trace is None or rows.empty or "lengths" not in rows:
        return rows, False
    from attnbench.deploy.labels import parse_prefill

    prefill = (rows["kind"] == "prefill").to_numpy()
    if "label" in rows:
        drawn = rows["label"].astype(str).map(parse_prefill)
        own = drawn.map(lambda p: p is not None and p[0] == trace).to_numpy(dtype=bool)
        if (prefill & own).any():
            return rows[~prefill | own], True
    form = run_lengths(trace)
    lengths = rows["lengths"].astype(str)
    if form.startswith("trace:"):
        match = (lengths == f"trace({form.removeprefix('trace:')})").to_numpy()
    else:
        match = lengths.str.startswith("mixed(").to_numpy()
    if not (prefill & match).any():
        return rows, False
    return rows[~prefill | match], True


def run_lengths(trace: str | None) -> str:
    """The `run --lengths` value for a `recommend --trace`: `trace:NAME` for a built-in trace
    or a trace file, else `mixed` (`agents:N` and synthetic traffic have no lengths form)."""
    if trace is None or trace.lower().startswith(("agents:", "synthetic:")):
        return "mixed"
    return f"trace:{trace}"


def coverage_gaps(ans: Answer, trace: str | None) -> list[Gap]:
    """One line per thing the rows do not cover (buckets of >= 5% weight priced at another
    batch size, no decode or prefill rows), with the command that measures it."""
    cmd = measure_command(ans.shape, ans.engine, trace, ans.kv_dtype)
    out = []
    if not ans.measured_batches:
        out.append(Gap(f"no decode rows of the default at {ans.shape.label}", cmd))
    far = [b for b in ans.buckets if b.extrapolated and b.weight >= MEASURE_SHARE]
    if far:
        share = sum(b.weight for b in far)
        sizes = ", ".join(str(b.size) for b in far[:8]) + (", ..." if len(far) > 8 else "")
        out.append(
            Gap(f"buckets {sizes} ({100 * share:.0f}% of decode steps) not measured here", cmd)
        )
    if ans.default is not None and not ans.default.cases("prefill"):
        out.append(Gap("no prefill rows of the default", prefill_command(ans, trace)))
    return out


def setting_gaps(
    frame: pd.DataFrame, ans: Answer, measured: set[str], trace: str | None
) -> list[Gap]:
    """One line per engine setting (this family, this KV dtype) that no option of the answer
    stands for: the refusal its rows on this GPU recorded (nothing to measure), or that it has
    no rows here (the command that measures it). The default's own refusal has its gap."""
    from attnbench.engines.paths import settings_for

    if ans.engine == "none" or frame.empty or "gpu" not in frame:
        return []
    here = frame[(frame["gpu"].astype(str) == ans.gpu).to_numpy()]
    base = default_setting(ans.engine, "mla" if ans.shape.mla else "gqa")
    out = []
    for s in settings_for(ans.engine, "mla" if ans.shape.mla else "gqa"):
        if s.variant in measured or ans.kv_dtype not in s.kv_dtypes:
            continue
        if ans.default_refused and s.variant == base.variant:
            continue
        why = refusal_reason(here, ans.shape, s.variant)
        if why is not None:
            out.append(Gap(f"{s.name} ({s.variant}) cannot run here: {why}", ""))
        else:
            cmd = measure_command(ans.shape, ans.engine, trace, ans.kv_dtype)
            out.append(Gap(f"{s.name} ({s.variant}) has no rows here", cmd))
    return out


def gate_gaps(frame: pd.DataFrame, ans: Answer) -> list[Gap]:
    """One line per variant of the engine whose decode rows of this shape on this GPU include
    cases that failed the accuracy gate (`mismatch`): how many, of how many, and their rel-L2
    errors against the budget. A failed case prices nothing, so where they are a layer kind's
    every case the option shows no decode; the line says why."""
    if ans.engine == "none" or frame.empty or not {"gpu", "status", "kind"} <= set(frame):
        return []
    rows = shape_rows(frame, ans.shape)
    on = (rows["gpu"].astype(str) == ans.gpu).to_numpy() & (rows["kind"] == "decode").to_numpy()
    on &= rows["backend"].astype(str).str.startswith(f"{ans.engine}:").to_numpy()
    out = []
    for variant, mine in rows[on].groupby("backend", sort=True):
        bad = mine[mine["status"] == "mismatch"]
        if bad.empty:
            continue
        text = f"{variant} failed the accuracy gate on {len(bad)} of {len(mine)} decode cases"
        out.append(Gap(f"{text} here{_error_range(bad)}", ""))
    return out


def _error_range(bad: pd.DataFrame) -> str:
    """`: rel-L2 error 0.012-0.50 against budgets of 0.0070` (every failed row's), or ''."""
    if "rel_l2_err" not in bad or "budget" not in bad or bad["rel_l2_err"].isna().all():
        return ""
    err, budget = bad["rel_l2_err"].dropna(), bad["budget"].dropna()
    span = f"{err.min():.2g}" if err.min() == err.max() else f"{err.min():.2g}-{err.max():.2g}"
    most = f" against budgets of at most {budget.max():.2g}" if not budget.empty else ""
    return f": rel-L2 error {span}{most}"


def prefill_command(ans: Answer, trace: str | None) -> str:
    """The run that times the engine's configurations on prefill at the model's shard and the
    engine's default page size (SGLang's is 1: rows at another size are another option;
    `--measure` times decode batches only)."""
    if ans.engine == "none":
        return measure_command(ans.shape, "none", trace, ans.kv_dtype)
    kv = "" if ans.kv_dtype == "auto" else f" --kv-dtype {ans.kv_dtype}"
    page = default_setting(ans.engine, "mla" if ans.shape.mla else "gqa").default_page_size
    return (
        f"attnbench run --model {ans.shape.model} --tp {ans.shape.tp} --kind prefill "
        f"--lengths {run_lengths(trace)}{kv} --page-size {page} --backend {ans.engine} "
        "--out runs/deploy-prefill.jsonl"
    )


def expected_us(opt: Option, strata: Strata) -> float | None:
    """The option's traffic-weighted mean decode time per step and layer: the sum over strata
    of weight x mean latency of its cases there."""
    by: dict[int, list[float]] = {}
    for c in opt.cases("decode").values():
        if (h := strata.of.get(c.batch)) is not None:
            by.setdefault(h, []).append(c.timing.median_us)
    total = sum(w for h, w in strata.weights.items() if h in by)
    if not total:
        return None
    return sum(w * sum(by[h]) / len(by[h]) for h, w in strata.weights.items() if h in by) / total


def _order(o: Option, default: Option) -> tuple[float, str]:
    return (o.decode.ratio if o.decode else math.inf, o.key.text)


def _choose(ans: Answer, default: Option) -> None:
    ranked = [o for o in ans.options if o.decode is not None]
    if not ranked:
        return
    best = ranked[0]
    assert best.decode is not None
    ans.tied = [o for o in ranked[1:] if o.decode is not None and o.decode.overlaps(best.decode)]
    if default in ans.tied and ans.kv_dtype == default.key.kv:
        ans.tied = [best] + [o for o in ans.tied if o is not default]
        best = default
    ans.choice = best


def fp8_decision(ans: Answer, options: list[Option], strata: Strata) -> Fp8Decision | None:
    """The choice at the other KV precision (fp8 e4m3 against 16-bit, or 16-bit against the
    requested fp8), same engine setting where measured, on the shared decode cases."""
    from attnbench.deploy.fp8 import kv_bytes_ratio, study_error

    if ans.choice is None:
        return None
    c = ans.choice
    if c.key.kv == "auto":
        fp8 = [o for o in options if o.key.kv == "fp8_e4m3"]
        same = [o for o in fp8 if o.key.variant == c.key.variant] or fp8
        if not same:
            return None
        other, base = _best(same, c, strata), c
    else:
        sixteen = [o for o in options if o.key.kv == "auto" and o.key.variant == c.key.variant]
        if not sixteen:
            return None
        other, base = c, sixteen[0]
    est = paired_ratio(_pairs(other, base, "decode", strata), strata.replicates)
    heads = (ans.shape.num_qo_heads, ans.shape.num_kv_heads, ans.shape.head_dim)
    error = study_error(other, ans.engine, gpu=ans.gpu, heads=heads)
    return Fp8Decision(other, base, est, kv_bytes_ratio(other.key.kv), error)


def _best(cands: list[Option], base: Option, strata: Strata) -> Option:
    def score(o: Option) -> float:
        est = _estimate(_pairs(o, base, "decode", strata), strata)
        return est.ratio if est else math.inf

    return min(cands, key=lambda o: (score(o), o.key.text))


def answers_by_model(frame: pd.DataFrame) -> list[tuple[ModelShape, list[Answer]]]:
    """Per model shape of the rows (`index`), the vLLM and SGLang answers on the committed
    rows without a trace (measured cases weighted equally per batch size). The report's first
    screen calls this; the signature is stable."""
    lines, _ = index(frame)
    out = []
    for line in (x for x in lines if not x.shape.mla):
        out.append((line.shape, [answer(frame, line.shape, e) for e in ("vllm", "sglang")]))
    return out


__all__ = [
    "TARGETS",
    "Answer",
    "Bucket",
    "Fp8Decision",
    "Gap",
    "IndexLine",
    "ModelShape",
    "Option",
    "OptionKey",
    "Timing",
    "answer",
    "answers_by_model",
    "deploy_label",
    "index",
    "model_shape",
    "parse_label",
    "preset_of",
    "shape_rows",
]
