"""The head_dim zoo of issue 36, from stored rows: per head_dim and kernel, whether it was the
fastest, how far behind, or why it has no timing (refused with the reason it gave before
anything was built, a wrong answer the gate caught, an error: named with the library versions),
and FlashInfer's known head_dim bugs with the rows that show them (`backends.flashinfer_bugs`).

A zoo is a set of plain GQA rows (no model, no window, sinks, soft-cap or MLA) of one kind,
dtype, page size, GPU and query-head count across at least ZOO_MIN_HEAD_DIMS head dims; its
points are (group size, batch, lengths) that at least ZOO_MIN_HEAD_DIMS head dims share, so a
suite's rows of one head_dim (the default suite's d128) do not join it. Pure functions of the
rows (`analysis.frame` columns); `report.headdim_section` renders them.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from attnbench.analysis.frame import dtype_label, human_tokens, records
from attnbench.analysis.model_studies import PROBLEM_KEY_CHARS, backend_versions
from attnbench.backends.flashinfer_bugs import BUGS
from attnbench.backends.known_bugs import Evidence, KnownBug

ZOO_MIN_HEAD_DIMS = 4
ZOO_KEYS = ["kind", "dtype", "kv_dtype", "page_size", "gpu", "num_qo_heads"]
_SEVERITY = {"mismatch": 0, "error": 1, "oom": 2, "timeout": 3, "unsupported": 4}


@dataclass(frozen=True)
class ZooCell:
    status: str
    """`fastest` (at every point it ran), `ok`, or why it has no timing (`unsupported`,
    `mismatch`, `error`, `oom`, `timeout`: the worst at this head_dim)."""
    ratio: float | None = None
    """ok: geometric mean over its points of latency / the fastest kernel's latency."""
    reason: str = ""
    fastest_at: int = 0
    points: int = 0
    """ok: points it was timed at."""
    worst_other: str = ""
    """ok at some points: the worst status at the others (`mismatch` before `error`...)."""
    other_points: int = 0


@dataclass
class HeadDimZoo:
    kind: str
    shape: str
    """What is fixed: `32 query heads, bf16/bf16, p16`."""
    points: list[str]
    """`g1 bs32 mixed(256..65536)`, ...: the (group, batch, lengths) every row is one of."""
    head_dims: list[int]
    backends: list[str]
    cells: dict[tuple[int, str], ZooCell]
    fastest: dict[int, list[tuple[str, int]]]
    """Per head_dim, the kernels fastest at some point and at how many, most first."""
    refusals: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    """(backend, reason with the head_dim left out) -> the head dims it refused that way."""
    problems: list[dict[str, Any]] = field(default_factory=list)
    """Wrong answers and errors: backend, status, message, head_dims, cases, versions."""
    timed: int = 0
    libraries: str = ""


def point_label(r: Mapping[str, Any]) -> str:
    group = int(r["num_qo_heads"]) // int(r["num_kv_heads"])
    lengths = str(r["lengths"]) or (human_tokens(int(r["kv_max"])) if r["uniform"] else "ragged")
    return f"g{group} bs{r['batch_size']} {lengths}"


def _plain(rows: pd.DataFrame) -> pd.DataFrame:
    if rows.empty:
        return rows
    keep = [not s.features() and not s.model for s in rows["spec"]]
    plain = rows[keep]
    return plain[plain["kind"].isin(["decode", "prefill"])]


def headdim_zoos(rows: pd.DataFrame, versions: Mapping[str, Mapping[str, str]]) -> list[HeadDimZoo]:
    """One zoo per set of plain rows spanning ZOO_MIN_HEAD_DIMS head dims (latest row per case
    and backend, every status), decode first. `versions`: per source file, its header's library
    versions (for wrong answers and errors)."""
    plain = _plain(rows)
    if plain.empty:
        return []
    plain = plain.assign(point=[point_label(r) for r in records(plain)])
    zoos = []
    for _, g in plain.groupby(ZOO_KEYS):
        dims_per_point = g.groupby("point")["head_dim"].nunique()
        shared = set(dims_per_point[dims_per_point >= ZOO_MIN_HEAD_DIMS].index)
        g = g[g["point"].isin(shared)]
        if g["head_dim"].nunique() >= ZOO_MIN_HEAD_DIMS:
            zoos.append(_zoo(g, versions))
    return sorted(zoos, key=lambda z: (z.kind != "decode", z.shape))


def _zoo(g: pd.DataFrame, versions: Mapping[str, Mapping[str, str]]) -> HeadDimZoo:
    r = g.iloc[0]
    gpu = str(r["gpu"]).removeprefix("NVIDIA ")
    shape = f"{r['num_qo_heads']} query heads, {dtype_label(r)}, p{r['page_size']}, {gpu}"
    ok = g[(g["status"] == "ok") & g["latency_us"].notna()]
    best = ok.groupby(["head_dim", "point"])["latency_us"].min()
    zoo = HeadDimZoo(
        kind=str(r["kind"]),
        shape=shape,
        points=sorted(set(g["point"])),
        head_dims=sorted(int(d) for d in set(g["head_dim"])),
        backends=sorted(set(g["backend"])),
        cells={},
        fastest=_fastest(ok),
        timed=len(ok),
    )
    for (dim, backend), cg in g.groupby(["head_dim", "backend"]):
        zoo.cells[(int(dim), str(backend))] = _cell(cg, best)
    zoo.refusals = _refusals(g)
    zoo.problems = _problems(g, versions)
    zoo.libraries = _libraries(g, versions)
    return zoo


def _fastest(ok: pd.DataFrame) -> dict[int, list[tuple[str, int]]]:
    wins: dict[int, dict[str, int]] = {}
    for (dim, _), pg in ok.groupby(["head_dim", "point"]):
        top = str(pg.sort_values("latency_us").iloc[0]["backend"])
        per = wins.setdefault(int(dim), {})
        per[top] = per.get(top, 0) + 1
    return {d: sorted(w.items(), key=lambda kv: (-kv[1], kv[0])) for d, w in wins.items()}


def _cell(cg: pd.DataFrame, best: pd.Series) -> ZooCell:
    good = cg[(cg["status"] == "ok") & cg["latency_us"].notna()]
    if good.empty:
        worst = cg.sort_values("status", key=lambda s: s.map(_SEVERITY).fillna(9)).iloc[0]
        return ZooCell(str(worst["status"]), reason=str(worst["reason"]))
    ratios = [
        float(x["latency_us"]) / float(best[(x["head_dim"], x["point"])]) for x in records(good)
    ]
    wins = sum(1 for q in ratios if q <= 1.0)
    status = "fastest" if wins == len(good) == cg["point"].nunique() else "ok"
    ratio = float(math.exp(np.mean(np.log(ratios))))
    others = cg.drop(index=good.index)
    worst = ""
    if not others.empty:
        ordered = others.sort_values("status", key=lambda s: s.map(_SEVERITY).fillna(9))
        worst = str(ordered.iloc[0]["status"])
    cell = ZooCell(status, ratio, fastest_at=wins, points=len(good), worst_other=worst)
    return dataclasses.replace(cell, other_points=len(others))


_HEAD_DIM_IN_REASON = r"(not |head_dim[ =:]+|holds |head_dim=)({dim})\b"


def general_reason(backend: str, reason: str, head_dim: int) -> str:
    """A refusal without what varies along the zoo (the backend's name, this head_dim), so one
    reason covers every head_dim it refuses: `..., not 96` -> `..., not d`."""
    text = reason.removeprefix(backend + ": ")
    return re.sub(_HEAD_DIM_IN_REASON.format(dim=head_dim), r"\1d", text)


def _refusals(g: pd.DataFrame) -> dict[tuple[str, str], list[int]]:
    out: dict[tuple[str, str], list[int]] = {}
    refused = g[g["status"] == "unsupported"]
    for rec in records(refused):
        dim = int(rec["head_dim"])
        key = (str(rec["backend"]), general_reason(str(rec["backend"]), str(rec["reason"]), dim))
        dims = out.setdefault(key, [])
        if dim not in dims:
            dims.append(dim)
    return {k: sorted(v) for k, v in sorted(out.items())}


def _problems(g: pd.DataFrame, versions: Mapping[str, Mapping[str, str]]) -> list[dict[str, Any]]:
    bad = g[g["status"].isin(["mismatch", "error", "oom", "timeout"])]
    bad = bad.assign(message=[str(m)[:PROBLEM_KEY_CHARS] for m in bad["reason"]])
    problems: list[dict[str, Any]] = []
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
                "head_dims": sorted({int(d) for d in pg["head_dim"]}),
                "points": sorted(set(pg["point"])),
                "versions": libs,
            }
        )
    problems.sort(key=lambda p: (p["status"] != "mismatch", p["backend"], -p["cases"]))
    return problems


def _libraries(g: pd.DataFrame, versions: Mapping[str, Mapping[str, str]]) -> str:
    every: dict[str, str] = {}
    for source in sorted(set(g["source"])):
        for name, version in versions.get(source, {}).items():
            every.setdefault(name, str(version))
    return ", ".join(f"{n} {v}" for n, v in sorted(every.items()))


# -- the known bugs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BugStatus:
    bug: KnownBug
    state: str
    """`refused` (its evidence is cited), `pending` (no evidence yet)."""
    shown_by: list[Evidence]
    """Stored rows that show it: the witness case's, with the bug's outcome, on its version."""


def known_bug_status(
    rows: pd.DataFrame, versions: Mapping[str, Mapping[str, str]]
) -> list[BugStatus]:
    """FlashInfer's known bugs, each with the stored rows that show it (`evidence` to cite for a
    pending one): the witness case's row of the witness variant, with the bug's outcome
    (`mismatch`, or `error` for a crash), from a file whose header names the version."""
    out = []
    for bug in BUGS:
        found: list[Evidence] = []
        if not rows.empty:
            status = bug.evidence.status if bug.evidence else "error" if bug.crashes else "mismatch"
            mine = rows[(rows["backend"] == bug.witness_backend) & (rows["status"] == status)]
            for rec in records(mine):
                seen = versions.get(str(rec["source"]), {}).get(bug.distribution)
                if seen == bug.seen_on and bug.witness(rec["spec"]):
                    path = f"results/{rec['source']}"
                    found.append(Evidence(path, str(rec["case_id"]), bug.witness_backend, status))
        state = "refused" if bug.evidence is not None else "pending"
        out.append(BugStatus(bug, state, found))
    return out


# -- soft-capped presets -----------------------------------------------------------------------


@dataclass
class CappedCase:
    """One soft-capped case (Gemma-2): who passed the gate and how fast, who refused, who failed."""

    spec: Any
    timed: list[tuple[str, float]]
    """(backend, latency_us), fastest first."""
    refused: list[str]
    failed: list[tuple[str, str]]
    """(backend, status) of wrong answers and errors."""


def soft_capped_cases(rows: pd.DataFrame) -> list[CappedCase]:
    """The soft-capped cases in `rows` (latest row per case and backend), by model and kind."""
    if rows.empty:
        return []
    capped = rows[[s.logits_soft_cap > 0 for s in rows["spec"]]]
    out = []
    for _, g in capped.groupby("case_id"):
        ok = g[(g["status"] == "ok") & g["latency_us"].notna()].sort_values("latency_us")
        bad = g[g["status"].isin(["mismatch", "error", "oom", "timeout"])]
        out.append(
            CappedCase(
                g.iloc[0]["spec"],
                [(str(b), float(t)) for b, t in zip(ok["backend"], ok["latency_us"], strict=True)],
                sorted(set(g[g["status"] == "unsupported"]["backend"])),
                [(str(b), str(s)) for b, s in zip(bad["backend"], bad["status"], strict=True)],
            )
        )
    return sorted(
        out, key=lambda c: (c.spec.model or "", c.spec.kind, c.spec.layer_type, c.spec.lengths)
    )
