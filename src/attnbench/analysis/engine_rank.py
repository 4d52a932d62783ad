"""`recommend --engine`: rank what vLLM or SGLang can actually deploy, from stored rows.

A deployable configuration is one engine setting (`engines.paths.ALL_SETTINGS`: the attention
backend), a KV dtype and a block/page size; its kernels are the engine variant's rows
(`vllm:flashinfer`...). Without such rows, a raw row stands for an engine path only where
`engines.paths.kernel_path` says the raw variant with that row's knobs IS the engine's call
(marked "inferred from raw variant X"); nothing else is mapped.

Decode runs under CUDA graphs at the engine's capture sizes: a running batch of b requests
runs the graph of the smallest captured size >= b (`engine_buckets`). Each capture bucket is
weighted by how often the running batch falls in it (a histogram of running batches, e.g. a
replay's decode steps, `recommend --engine E --trace T`; uniform when none is given), and
priced by the rows at the nearest measured batch size (log scale). One server-wide
configuration is chosen by expected decode time per step (per layer), with its regret against
choosing the best configuration per bucket. All pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from attnbench.analysis.engine_buckets import bucket_weights, capture_sizes, weighting_note
from attnbench.analysis.frame import ok_rows, records, spec_key
from attnbench.backends.fa3_record import METADATA_IN_PLAN
from attnbench.backends.variant import Variant
from attnbench.engines.paths import (
    ALL_SETTINGS,
    Engine,
    KernelPath,
    Setting,
    command,
    default_setting,
    engine_page_size,
    kernel_path,
    setting,
)

RAW_GAIN_MIN = 1.05
"""A raw variant is listed as a gain when the engine's choice takes this much longer."""
NOT_ENGINE = frozenset({"reference", "vllm", "sglang"})


@dataclass(frozen=True, order=True)
class Config:
    variant: str
    kv_dtype: str
    """`auto` (the model's 16-bit dtype) or an fp8 format."""
    page_size: int

    @property
    def setting(self) -> Setting:
        return setting(self.variant)

    @property
    def label(self) -> str:
        return f"{self.setting.name}, KV {self.kv_dtype}, page {self.page_size}"

    @property
    def command(self) -> str:
        return command(self.setting, self.kv_dtype, self.page_size)


@dataclass
class ConfigScore:
    config: Config
    decode_us: float | None
    """Expected decode attention time per step (per layer), weighted over the buckets."""
    decode_vs_default: float | None = None
    prefill_vs_default: float | None = None
    prefill_cases: int = 0
    inferred_from: tuple[str, ...] = ()


@dataclass
class BatchRank:
    batch: int
    weight: float
    buckets: list[int]
    times_us: dict[Config, float]

    @property
    def best(self) -> Config | None:
        return min(self.times_us, key=lambda c: self.times_us[c]) if self.times_us else None


@dataclass
class RawGain:
    batch: int
    raw: str
    engine_us: float
    raw_us: float
    note: str = ""
    """Set when one of the engine's own settings runs this kernel, with other knobs."""

    @property
    def ratio(self) -> float:
        return self.engine_us / self.raw_us


@dataclass
class EngineRecommendation:
    engine: Engine
    gpu: str
    inferred: bool
    scores: list[ConfigScore] = field(default_factory=list)
    batches: list[BatchRank] = field(default_factory=list)
    choice: ConfigScore | None = None
    default: Config | None = None
    regret: float | None = None
    raw_gains: list[RawGain] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    weighting: str = "uniform"
    """What weighted the capture buckets: `uniform`, or the running-batch histogram's source."""


def _details(row: Mapping[str, Any]) -> dict[str, Any]:
    d = row.get("details")
    if d is None:
        return {}
    return dict(d.as_dict()) if hasattr(d, "as_dict") else dict(d)


def _knob_text(value: object) -> object:
    if value is None:
        return "none"
    return value


def knobs_match(path: KernelPath, details: Mapping[str, Any]) -> bool:
    """True when a raw row's recorded knobs are the engine path's knobs (a knob the row says it
    ignored cannot matter)."""
    ignored = set(str(details.get("knobs_ignored", "")).split(","))
    for name, want in path.knobs.items():
        if name in ignored:
            continue
        if name not in details:
            return False
        got = details[name]
        if name == "scheduler_metadata":
            if want != (got == METADATA_IN_PLAN):
                return False
        elif name == "pack_gqa":
            if ("auto" if want is None else want) != got:
                return False
        elif _knob_text(want) != got:
            return False
    return True


def engine_rows(ok: pd.DataFrame, engine: Engine) -> tuple[pd.DataFrame, bool]:
    """Rows that are `engine`'s kernels: its engine variants' rows, else raw rows mapped onto
    an engine path only where the path says they are exactly it (column `inferred_from`)."""
    own = ok[ok["library"] == engine].copy()
    if not own.empty:
        own["inferred_from"] = ""
        return own, False
    mapped = []
    raw = ok[~ok["library"].isin(NOT_ENGINE)]
    for rec in records(raw):
        for s in ALL_SETTINGS:
            if s.engine != engine:
                continue
            path = kernel_path(s.variant, rec["spec"])
            if isinstance(path, str) or path.variant != rec["backend"]:
                continue
            if knobs_match(path, _details(rec)):
                mapped.append({**rec, "backend": s.variant, "inferred_from": rec["backend"]})
    return pd.DataFrame.from_records(mapped), True


def _config(rec: Mapping[str, Any]) -> Config:
    kv = str(rec["kv_dtype"]) if bool(rec["fp8"]) else "auto"
    variant = str(rec["backend"])
    return Config(variant, kv, engine_page_size(variant, rec["spec"]))


def _case(rec: Mapping[str, Any]) -> str:
    return spec_key(rec["spec"], ("kv_dtype", "page_size"))


def _table(rows: pd.DataFrame) -> dict[Config, dict[str, float]]:
    out: dict[Config, dict[str, float]] = {}
    for rec in records(rows):
        out.setdefault(_config(rec), {})[_case(rec)] = float(rec["latency_us"])
    return out


def _geomean(values: Sequence[float]) -> float:
    return float(math.exp(np.mean(np.log(values))))


def per_batch(decode: pd.DataFrame) -> dict[int, dict[Config, float]]:
    """Per measured batch size, each configuration's latency on a common scale: the
    configuration with the most cases is the anchor (geometric mean over its cases); another
    is the anchor's figure times its geometric-mean latency ratio to the anchor on the cases
    both measured. Configurations sharing no case with the anchor are left out."""
    out: dict[int, dict[Config, float]] = {}
    for batch, sub in decode.groupby("batch_size"):
        table = _table(sub)
        anchor = max(sorted(table), key=lambda c: len(table[c]))
        base = table[anchor]
        level = _geomean(list(base.values()))
        times = {}
        for c, t in table.items():
            shared = sorted(set(t) & set(base))
            if shared:
                times[c] = level * _geomean([t[k] / base[k] for k in shared])
        out[int(str(batch))] = times
    return out


def _nearest(batch: int, measured: Sequence[int]) -> int:
    return min(measured, key=lambda m: (abs(math.log(batch / m)), m))


def rank_engine(
    frame: pd.DataFrame,
    engine: Engine,
    running: Mapping[int, float] | None = None,
    source: str = "the given running-batch histogram",
) -> list[EngineRecommendation]:
    """One recommendation per GPU in `frame` (rows from `analysis.frame.load`). `running`:
    steps (or any weight) per running batch size, described by `source` in the notes (e.g.
    "the running batch of N decode steps replayed from trace T")."""
    ok = ok_rows(frame)
    out = []
    for gpu in sorted(set(ok["gpu"])) if not ok.empty else []:
        rows, inferred = engine_rows(ok[ok["gpu"] == gpu], engine)
        rec = EngineRecommendation(engine, gpu, inferred)
        out.append(rec)
        if rows.empty:
            rec.notes.append(
                f"no {engine} engine-variant rows, and no raw row is exactly one of {engine}'s "
                f"kernel paths: run `attnbench run -b {engine}` on the GPU"
            )
            continue
        if inferred:
            used = sorted(set(rows["inferred_from"]))
            rec.notes.append(
                f"no {engine} engine-variant rows in these results: ranking raw rows that are "
                f"exactly an engine path (inferred from raw variant {', '.join(used)})"
            )
        if running:
            rec.weighting = source
        _rank_rows(rec, rows, ok[ok["gpu"] == gpu], running)
    return out


def _rank_rows(
    rec: EngineRecommendation,
    rows: pd.DataFrame,
    ok: pd.DataFrame,
    running: Mapping[int, float] | None,
) -> None:
    decode = rows[(rows["kind"] == "decode") & ~rows["padded"]]
    sizes = capture_sizes(rec.engine)
    weights = bucket_weights(sizes, running)
    rec.notes.append(weighting_note(sizes, weights, rec.weighting if running else None))
    timed = per_batch(decode)
    measured = sorted(timed)
    if measured:
        for b, w in weights.items():
            m = _nearest(b, measured)
            br = next((x for x in rec.batches if x.batch == m), None)
            if br is None:
                br = BatchRank(m, 0.0, [], timed[m])
                rec.batches.append(br)
            br.weight += w
            br.buckets.append(b)
        rec.batches.sort(key=lambda x: x.batch)
        far = sum(w for b, w in weights.items() if b not in measured)
        rec.notes.append(
            f"decode measured at batch {', '.join(map(str, measured))}; {100 * far:.0f}% of the "
            "bucket weight is priced at the nearest measured batch size (log scale)"
        )
    configs = sorted({_config(r) for r in records(rows)})
    full = [c for c in configs if all(c in br.times_us for br in rec.batches if br.weight > 0)]
    origin = rows.groupby("backend")["inferred_from"].agg(lambda s: tuple(sorted(set(s) - {""})))
    for c in configs:
        t = _expected(rec.batches, c) if c in full and rec.batches else None
        rec.scores.append(ConfigScore(c, t, inferred_from=tuple(origin.get(c.variant, ()))))
    ranked = sorted(
        (s for s in rec.scores if s.decode_us is not None), key=lambda s: s.decode_us or 0
    )
    rec.scores = ranked + [s for s in rec.scores if s.decode_us is None]
    rec.choice = ranked[0] if ranked else None
    if rec.choice and rec.batches:
        best = sum(br.weight * min(br.times_us.values()) for br in rec.batches) / sum(
            br.weight for br in rec.batches
        )
        rec.regret = (rec.choice.decode_us or 0) / best - 1
    _versus_default(rec, rows)
    _raw_gains(rec, ok, decode)


def _expected(batches: Sequence[BatchRank], c: Config) -> float:
    total = sum(br.weight for br in batches if br.weight > 0)
    return sum(br.weight * br.times_us[c] for br in batches if br.weight > 0) / total


def rows_family(rows: pd.DataFrame) -> str:
    """`mla` when the rows are MLA cases (the engine's MLA default applies), else `gqa`."""
    specs = rows.get("spec", [])
    return "mla" if any(getattr(s, "mla", None) is not None for s in specs) else "gqa"


def _versus_default(rec: EngineRecommendation, rows: pd.DataFrame) -> None:
    base = default_setting(rec.engine, rows_family(rows))
    present = [s.config for s in rec.scores if s.config.variant == base.variant]
    present = [c for c in present if c.kv_dtype == "auto"]
    want = Config(base.variant, "auto", base.default_page_size)
    if want in present:
        rec.default = want
    elif present:
        rec.default = present[0]
        rec.notes.append(
            f"the engine default ({want.label}) has no rows; compared with {present[0].label}"
        )
    else:
        rec.notes.append(f"the engine default ({want.label}) has no rows: no comparison with it")
        return
    dflt = next(s for s in rec.scores if s.config == rec.default)
    prefill = _table(rows[rows["kind"] == "prefill"])
    for s in rec.scores:
        if s.decode_us is not None and dflt.decode_us:
            s.decode_vs_default = s.decode_us / dflt.decode_us
        mine, theirs = prefill.get(s.config, {}), prefill.get(rec.default, {})
        shared = sorted(set(mine) & set(theirs))
        if shared:
            s.prefill_cases = len(shared)
            s.prefill_vs_default = _geomean([mine[k] / theirs[k] for k in shared])


def _paged_raw(rec: Mapping[str, Any]) -> bool:
    """A raw variant an engine could expose: it reads the paged cache in place (not a copy
    gathered in plan: fa3-contiguous, ragged prefill, SDPA and Flex gathers)."""
    if rec["library"] in NOT_ENGINE:
        return False
    variant = Variant.maybe(str(rec["backend"]))
    if variant is not None and variant.cache != "paged":
        return False
    return bool(_details(rec).get("kv_cache", "paged") == "paged")


def _raw_gains(rec: EngineRecommendation, ok: pd.DataFrame, decode: pd.DataFrame) -> None:
    """Per measured batch: the fastest raw library variant on the chosen configuration's own
    cases, where it beats the choice by RAW_GAIN_MIN or more."""
    if rec.choice is None:
        return
    c = rec.choice.config
    mine = decode[np.array([_config(r) == c for r in records(decode)], dtype=bool)]
    paged = np.array([_paged_raw(r) for r in records(ok)], dtype=bool)
    raw = ok[(ok["kind"] == "decode").to_numpy() & paged]
    for batch, sub in mine.groupby("batch_size"):
        eng = dict(zip(sub["case_id"], sub["latency_us"], strict=True))
        cand = raw[raw["case_id"].isin(set(eng))]
        best: RawGain | None = None
        for name, r in cand.groupby("backend"):
            theirs = dict(zip(r["case_id"], r["latency_us"], strict=True))
            if set(theirs) != set(eng):
                continue
            keys = sorted(eng)
            engine_us = _geomean([float(eng[k]) for k in keys])
            raw_us = _geomean([float(theirs[k]) for k in keys])
            if best is None or raw_us < best.raw_us:
                best = RawGain(int(str(batch)), str(name), engine_us, raw_us)
        if best is not None and best.ratio >= RAW_GAIN_MIN:
            best.note = _same_kernel(rec.engine, best.raw, mine)
            rec.raw_gains.append(best)


def _same_kernel(engine: Engine, raw: str, rows: pd.DataFrame) -> str:
    """Which of `engine`'s settings runs kernel `raw` on these cases, with which knobs."""
    for s in ALL_SETTINGS:
        if s.engine != engine:
            continue
        for spec in rows["spec"]:
            path = kernel_path(s.variant, spec)
            if not isinstance(path, str) and path.variant == raw:
                knobs = ", ".join(f"{k}={v}" for k, v in path.knobs.items())
                return f"{s.name} runs this kernel with {knobs}: measure {s.variant}"
    return ""
