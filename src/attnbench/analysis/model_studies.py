"""The two model-shape studies, from stored rows: MLA at DeepSeek-V3's shape (per case,
each kernel's latency and both fractions of the measured ceilings, and which one binds) and the
GQA-ratio sweep (per group size and decode kernel: fastest, refused with the reason, a wrong
answer with the library versions, or an error, named).

Pure functions of the rows (`analysis.frame` columns); the report renders them
(`report.mla_section`, `report.gqa_section`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from attnbench.analysis.frame import dtype_label, human_tokens, records
from attnbench.measure.metrics import binding_fraction

# -- MLA ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MlaCell:
    """One kernel on one MLA case (a row that passed the gate and was timed)."""

    backend: str
    latency_us: float
    bandwidth_frac: float | None
    """Of the copy bandwidth measured in the same run."""
    matmul_frac: float | None
    """Of the matmul TFLOP/s measured in the same run (at the case's dtype)."""
    tflops: float | None
    bound: str | None
    """`compute` or `memory`: whichever fraction is larger binds (`metrics.binding_fraction`)."""


@dataclass
class MlaCase:
    kind: str
    batch_size: int
    lengths: str
    """`1k`, `64k`, or the batch's lengths label (`mixed(256..65536)`)."""
    kv_max: int
    uniform: bool
    kv_dtype: str
    model: str
    cells: list[MlaCell] = field(default_factory=list)
    not_ok: dict[str, str] = field(default_factory=dict)
    """Backends of the MLA family that produced no timed row here: status and reason."""

    @property
    def label(self) -> str:
        return f"{self.kind} bs{self.batch_size} x {self.lengths} {self.kv_dtype}"

    @property
    def fastest(self) -> MlaCell | None:
        return min(self.cells, key=lambda c: c.latency_us) if self.cells else None

    def cell(self, backend: str) -> MlaCell | None:
        return next((c for c in self.cells if c.backend == backend), None)


def is_mla(rows: pd.DataFrame) -> pd.Series:
    """Rows of MLA cases (spec.mla set)."""
    if rows.empty:
        return pd.Series([], dtype=bool, index=rows.index)
    return pd.Series([getattr(s, "mla", None) is not None for s in rows["spec"]], index=rows.index)


def _num(v: Any) -> float | None:
    return None if v is None or pd.isna(v) else float(v)


def mla_cases(rows: pd.DataFrame, ok: pd.DataFrame) -> list[MlaCase]:
    """MLA cases in `ok` (gated, timed rows), decode before prefill, then by dtype, batch and
    context; `rows` (every status) fills in why an MLA variant has no timed row."""
    if ok.empty:
        return []
    mine = ok[is_mla(ok)]
    if mine.empty:
        return []
    families = set(mine["backend"])
    every = rows[is_mla(rows)] if not rows.empty else rows
    out = []
    keys = ["case_id"]
    for (case_id,), g in mine.groupby(keys):
        r = g.iloc[0]
        uniform = bool(r["uniform"])
        lengths = human_tokens(int(r["kv_max"])) if uniform else str(r["lengths"] or "ragged")
        case = MlaCase(
            str(r["kind"]),
            int(r["batch_size"]),
            lengths,
            int(r["kv_max"]),
            uniform,
            dtype_label(r).split("/")[1],
            str(r["model"]),
        )
        for rec in records(g.sort_values("backend")):
            bw, mm = _num(rec.get("bandwidth_frac_measured")), _num(rec.get("tflops_frac_measured"))
            found = binding_fraction(bw, mm)
            case.cells.append(
                MlaCell(
                    str(rec["backend"]),
                    float(rec["latency_us"]),
                    bw,
                    mm,
                    _num(rec.get("tflops")),
                    found[0] if found else None,
                )
            )
        if not every.empty:
            others = every[(every["case_id"] == case_id) & every["backend"].isin(families)]
            for rec in records(others):
                if case.cell(str(rec["backend"])) is None:
                    case.not_ok[str(rec["backend"])] = f"{rec['status']}: {rec['reason']}"
        out.append(case)
    out.sort(key=lambda c: (c.kind != "decode", c.kv_dtype, c.batch_size, not c.uniform, c.kv_max))
    return out


def mla_backends(cases: list[MlaCase]) -> list[str]:
    """The MLA kernels with a timed row, fastest-on-most-cases first."""
    wins: dict[str, int] = {}
    for c in cases:
        for cell in c.cells:
            wins.setdefault(cell.backend, 0)
        if (f := c.fastest) is not None:
            wins[f.backend] += 1
    return sorted(wins, key=lambda b: (-wins[b], b))


# -- GQA-ratio sweep ------------------------------------------------------------------------------

SWEEP_MIN_GROUPS = 4
"""A set of decode rows that differ only in head counts is a GQA sweep from this many group
sizes on."""
SWEEP_KEYS = ["head_dim", "batch_size", "dtype", "kv_dtype", "page_size", "gpu"]


@dataclass(frozen=True)
class GqaCell:
    status: str
    """`fastest`, `ok`, `unsupported`, `mismatch` (a wrong answer), `error`, `oom`, `timeout`."""
    ratio: float | None = None
    """ok: geometric mean over the sweep's lengths of latency / the fastest kernel's latency."""
    latency_us: float | None = None
    """ok: the median over lengths of this kernel's latency."""
    reason: str = ""
    fastest_at: int = 0
    """At how many of the lengths it was the fastest."""
    lengths: int = 0


@dataclass
class GqaSweep:
    shape: str
    """What is fixed: `d128 bs16 bf16/bf16 p16`."""
    lengths: list[str]
    groups: list[tuple[int, int, str]]
    """(num_qo_heads, num_kv_heads, model) per grid row, by group size."""
    backends: list[str]
    cells: dict[tuple[tuple[int, int, str], str], GqaCell]
    never: dict[str, str]
    """Kernels refused on every case for one reason that does not depend on the group size."""
    problems: list[dict[str, Any]]
    """Wrong answers and errors: backend, status, message, cases, group sizes, versions."""
    fastest: dict[tuple[int, int, str], list[tuple[str, str, float]]] = field(default_factory=dict)
    """Per grid row, the fastest kernel at each length: (lengths, backend, latency_us)."""
    timed: int = 0
    """Rows that passed the accuracy gate and were timed."""
    libraries: str = ""
    """Every library version in the headers of the files the sweep's rows came from."""

    @staticmethod
    def group_label(key: tuple[int, int, str]) -> str:
        hq, hkv, model = key
        text = f"{hq // hkv} ({hq}/{hkv}"
        text += ", MQA)" if hkv == 1 else ")"
        return text + (f" {model}" if model else "")


def _sweep_rows(rows: pd.DataFrame) -> list[pd.DataFrame]:
    """Decode rows of plain GQA (no MLA, window or sinks) grouped by everything but the head
    counts, model and lengths; the groups with at least SWEEP_MIN_GROUPS group sizes."""
    if rows.empty:
        return []
    plain = rows[(rows["kind"] == "decode") & ~is_mla(rows)]
    plain = plain[[not s.features() for s in plain["spec"]]]
    if plain.empty:
        return []
    plain = plain.assign(group=plain["num_qo_heads"] // plain["num_kv_heads"])
    out = []
    for _, g in plain.groupby(SWEEP_KEYS):
        if g["group"].nunique() >= SWEEP_MIN_GROUPS:
            out.append(g)
    return sorted(out, key=lambda g: -len(g))


def gqa_sweeps(rows: pd.DataFrame, versions: Mapping[str, Mapping[str, str]]) -> list[GqaSweep]:
    """One grid per GQA sweep in `rows` (latest row per case and backend, every status).
    `versions`: per source file, its header's library versions (for wrong answers and errors)."""
    return [_sweep(g, versions) for g in _sweep_rows(rows)]


GKey = tuple[int, int, str]
"""(num_qo_heads, num_kv_heads, model): one column of a GQA sweep."""


def _sweep(g: pd.DataFrame, versions: Mapping[str, Mapping[str, str]]) -> GqaSweep:
    r = g.iloc[0]
    shape = f"d{r['head_dim']} bs{r['batch_size']} {dtype_label(r)} p{r['page_size']}"
    lengths = sorted(set(g["lengths"]), key=lambda s: (not s.startswith("ctx"), s))
    keys = sorted(
        {
            (int(a), int(b), str(m))
            for a, b, m in zip(g["num_qo_heads"], g["num_kv_heads"], g["model"], strict=True)
        },
        key=lambda k: (k[0] // k[1], k[1] != 1, k[2], k[0]),
    )
    g = g.assign(
        gkey=[
            (int(a), int(b), str(m))
            for a, b, m in zip(g["num_qo_heads"], g["num_kv_heads"], g["model"], strict=True)
        ]
    )
    never: dict[str, str] = {}
    for backend, b in g.groupby("backend"):
        reasons = set(b["reason"].astype(str))
        if (b["status"] == "unsupported").all() and len(reasons) == 1:
            never[str(backend)] = reasons.pop()
    backends = sorted(set(g["backend"]) - set(never))
    ok = g[(g["status"] == "ok") & g["latency_us"].notna()]
    fastest: dict[GKey, list[tuple[str, str, float]]] = {}
    for (gkey, length), lg in ok.groupby(["gkey", "lengths"]):
        top = lg.sort_values("latency_us").iloc[0]
        fastest.setdefault(gkey, []).append(
            (str(length), str(top["backend"]), float(top["latency_us"]))
        )
    for runs in fastest.values():
        runs.sort(key=lambda t: lengths.index(t[0]))
    cells = _cells(g, ok, never)
    problems = _problems(g, versions)
    every: dict[str, str] = {}
    for source in sorted(set(g["source"])):
        for name, version in versions.get(source, {}).items():
            every.setdefault(name, str(version))
    libraries = ", ".join(f"{n} {v}" for n, v in sorted(every.items()))
    sweep = GqaSweep(shape, lengths, keys, backends, cells, never, problems, fastest)
    sweep.timed, sweep.libraries = len(ok), libraries
    return sweep


def _cells(
    g: pd.DataFrame, ok: pd.DataFrame, never: Mapping[str, str]
) -> dict[tuple[GKey, str], GqaCell]:
    """Per (column, backend): its geometric-mean ratio to the fastest and how often it was the
    fastest, or its worst status with the reason."""
    best = ok.groupby(["gkey", "lengths"])["latency_us"].min()
    cells: dict[tuple[GKey, str], GqaCell] = {}
    for (gkey, backend), cg in g.groupby(["gkey", "backend"]):
        if backend in never:
            continue
        good = cg[(cg["status"] == "ok") & cg["latency_us"].notna()]
        if not good.empty:
            ratios = [
                float(x["latency_us"]) / float(best[(gkey, x["lengths"])])
                for x in records(good[["latency_us", "lengths"]])
            ]
            wins = sum(1 for q in ratios if q <= 1.0)
            status = "fastest" if wins == len(good) == cg["lengths"].nunique() else "ok"
            cells[(gkey, str(backend))] = GqaCell(
                status,
                float(math.exp(np.mean(np.log(ratios)))),
                float(np.median(good["latency_us"])),
                fastest_at=wins,
                lengths=len(good),
            )
            continue
        worst = cg.sort_values("status", key=lambda s: s.map(_SEVERITY).fillna(9)).iloc[0]
        cells[(gkey, str(backend))] = GqaCell(str(worst["status"]), reason=str(worst["reason"]))
    return cells


def _problems(g: pd.DataFrame, versions: Mapping[str, Mapping[str, str]]) -> list[dict[str, Any]]:
    """Wrong answers and failures, one per (backend, status, message head), with the groups,
    sources and library versions they came from; mismatches first."""
    problems: list[dict[str, Any]] = []
    bad = g[g["status"].isin(["mismatch", "error", "oom", "timeout"])]
    bad = bad.assign(message=[str(m)[:PROBLEM_KEY_CHARS] for m in bad["reason"]])
    for (backend, status, _), pg in bad.groupby(["backend", "status", "message"]):
        sources = sorted(set(pg["source"]))
        libs = backend_versions(
            [versions.get(s, {}) for s in sources], str(pg.iloc[0]["library"]), str(backend)
        )
        problems.append(
            {
                "backend": str(backend),
                "status": str(status),
                "message": str(pg.iloc[0]["reason"]),
                "cases": len(pg),
                "groups": sorted(set(int(x) for x in pg["group"])),
                "versions": libs,
                "sources": sources,
            }
        )
    problems.sort(key=lambda p: (p["status"] != "mismatch", p["backend"], -p["cases"]))
    return problems


PROBLEM_KEY_CHARS = 120
"""Errors whose messages agree this far are one problem (compile errors differ in the tail)."""
GROUP_PREFIX = re.compile(r"group size \d+ \([^)]*\):\s*")


def refusal_reason(backend: str, reason: str) -> str:
    """A refusal without what varies along the sweep (the backend's name, `group size 5 (40/8
    heads): `), so one reason covers every group size it refuses."""
    text = reason.removeprefix(backend + ": ")
    return GROUP_PREFIX.sub("", text)


_SEVERITY = {"mismatch": 0, "error": 1, "oom": 2, "timeout": 3, "unsupported": 4}

_LIBRARY_KEYS = {
    "flashinfer": ("flashinfer",),
    "flash-attn": ("flash-attn", "flash_attn", "fa3", "fa2"),
    "sdpa": ("torch",),
    "flex": ("torch", "triton"),
    "cudnn": ("cudnn",),
    "flashmla": ("flash-mla",),
}


def backend_versions(found: list[Mapping[str, str]], library: str, backend: str) -> str:
    """`flashinfer-python 0.7.4, nvidia-cudnn-cu13 9.19.0.56`: the versions in the rows' headers
    of the libraries this backend runs on (cuDNN too for a cudnn variant)."""
    tokens = _LIBRARY_KEYS.get(library, (library,))
    if "cudnn" in backend:
        tokens = (*tokens, "cudnn")
    seen: dict[str, str] = {}
    for libs in found:
        for name, version in libs.items():
            if any(t in name.lower() for t in tokens):
                seen.setdefault(name, str(version))
    return ", ".join(f"{n} {v}" for n, v in sorted(seen.items()))
