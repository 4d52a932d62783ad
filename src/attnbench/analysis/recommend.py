"""From measured rows to a decision: per workload class the best backend variant, its margin
over the runner-up with a confidence interval, where the winner changes (crossovers), and a
hybrid serving plan. No choice here is a rule typed by hand: every one is computed from rows
that passed the accuracy gate, and each carries the evidence (case counts, medians, ratios).

Ranking inside a class: every pair of variants is compared on the cases both ran (geometric
mean of the per-case latency ratios, two-level bootstrap CI; `compare.geomean_from_logs`); a
variant wins a pair when it is significantly faster beyond the noise. Variants are ordered by
wins minus losses, then by their geometric-mean latency relative to the fastest variant of each
case. The class thresholds below only sort rows into classes; they choose nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from attnbench.analysis.compare import (
    NOISE_FLOOR,
    SEED,
    RatioEstimate,
    Timing,
    estimate_ratio,
    geomean_from_logs,
    median_replicates,
)
from attnbench.analysis.frame import (
    add_key,
    dtype_label,
    fmt_us,
    human_tokens,
    records,
    shape_label,
    spec_key,
)

SHORT_PREFILL_MAX = 4096
"""Prefill is `short` when its longest prompt is at most this many tokens, else `long`."""
SMALL_BATCH_MAX = 8
LARGE_BATCH_MIN = 64
Mask = Callable[[pd.DataFrame], "pd.Series[bool]"]


@dataclass(frozen=True)
class WorkloadClass:
    name: str
    rule: str
    select: Mask
    axes: tuple[str, ...] = ("context",)
    """Axes along which crossovers are looked for: context, batch, prefix."""


def _k(kind: str) -> Mask:
    return lambda f: (f["kind"] == kind) & ~f["fp8"] & ~f["padded"]


CLASSES: tuple[WorkloadClass, ...] = (
    WorkloadClass(
        "prefill short",
        f"kind=prefill, longest prompt <= {SHORT_PREFILL_MAX} tokens, 16-bit KV",
        lambda f: _k("prefill")(f) & (f["kv_max"] <= SHORT_PREFILL_MAX),
    ),
    WorkloadClass(
        "prefill long",
        f"kind=prefill, longest prompt > {SHORT_PREFILL_MAX} tokens, 16-bit KV",
        lambda f: _k("prefill")(f) & (f["kv_max"] > SHORT_PREFILL_MAX),
    ),
    WorkloadClass(
        "decode uniform",
        "kind=decode, every request the same length, 16-bit KV (padded rows excluded)",
        lambda f: _k("decode")(f) & f["uniform"],
        ("context", "batch"),
    ),
    WorkloadClass(
        "decode ragged",
        "kind=decode, request lengths differ, 16-bit KV",
        lambda f: _k("decode")(f) & ~f["uniform"],
        ("batch",),
    ),
    WorkloadClass(
        "decode small batch",
        f"kind=decode, batch <= {SMALL_BATCH_MAX} requests, 16-bit KV",
        lambda f: _k("decode")(f) & (f["batch_size"] <= SMALL_BATCH_MAX),
    ),
    WorkloadClass(
        "decode large batch",
        f"kind=decode, batch >= {LARGE_BATCH_MIN} requests, 16-bit KV",
        lambda f: _k("decode")(f) & (f["batch_size"] >= LARGE_BATCH_MIN),
    ),
    WorkloadClass("append", "kind=append (new tokens over a cache), 16-bit KV", _k("append")),
    WorkloadClass(
        "fp8 KV decode",
        "kind=decode with an fp8 (e4m3/e5m2) KV cache",
        lambda f: (f["kind"] == "decode") & f["fp8"] & ~f["padded"],
        ("context", "batch"),
    ),
    WorkloadClass("tree", "kind=tree (draft-tree verification), 16-bit KV", _k("tree")),
    WorkloadClass(
        "shared prefix",
        "kind=shared_prefix (one prefix shared by the batch), 16-bit KV",
        _k("shared_prefix"),
        ("prefix", "batch"),
    ),
)
PREFILL_ALL = WorkloadClass("prefill (all)", "kind=prefill, 16-bit KV", _k("prefill"))
DECODE_ALL = WorkloadClass(
    "decode (all)", "kind=decode, 16-bit KV, padded rows excluded", _k("decode")
)


@dataclass
class Standing:
    backend: str
    cases: int
    wins: int = 0
    losses: int = 0
    score: float = 1.0
    """Geometric mean of latency / fastest latency of the case, over its cases (1 = always best)."""
    median_us: float = 0.0


@dataclass
class Crossover:
    axis: str
    group: str
    lo: float
    hi: float
    before: str
    after: str
    estimate: float | None
    significant: bool

    def describe(self) -> str:
        where = f"between {_ax(self.axis, self.lo)} and {_ax(self.axis, self.hi)}"
        if self.estimate is not None:
            where += f" (≈{_ax(self.axis, self.estimate)} interpolated)"
        sig = "" if self.significant else " [not significant at both ends]"
        return f"{self.group}: {self.before} -> {self.after} {where}{sig}"


def _ax(axis: str, v: float) -> str:
    return f"batch {v:.0f}" if axis == "batch" else human_tokens(v)


@dataclass
class ClassResult:
    cls: WorkloadClass
    n_cases: int
    standings: list[Standing] = field(default_factory=list)
    margin: RatioEstimate | None = None
    """runner-up / winner latency on their shared cases (> 1: the winner is faster)."""
    margin_cases: int = 0
    crossovers: list[Crossover] = field(default_factory=list)

    @property
    def winner(self) -> str | None:
        return self.standings[0].backend if self.standings else None

    @property
    def runner_up(self) -> str | None:
        return self.standings[1].backend if len(self.standings) > 1 else None

    @property
    def is_tie(self) -> bool:
        return self.margin is not None and self.margin.verdict == "tie"

    def margin_text(self) -> str:
        if self.runner_up is None:
            return "only variant measured" if self.winner else "no rows"
        m = self.margin
        if m is None:
            return f"no case shared with {self.runner_up}"
        ci = f"{m.ratio:.2f}x (95% CI {m.ci_low:.2f}-{m.ci_high:.2f}, {self.margin_cases} cases)"
        return f"tie with {self.runner_up}: {ci}" if self.is_tie else f"{ci} vs {self.runner_up}"


class Replicates:
    """Per-row median replicates, drawn once and reused by every pairing (seeded)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.cache: dict[tuple[str, str], np.ndarray] = {}

    def log(self, key: tuple[str, str], t: Timing) -> np.ndarray:
        if key not in self.cache:
            self.cache[key] = np.log(median_replicates(t, self.rng))
        return self.cache[key]


def pairwise(
    table: dict[str, dict[str, Timing]],
    x: str,
    y: str,
    reps: Replicates,
    noise_floor: float = NOISE_FLOOR,
) -> tuple[RatioEstimate | None, int]:
    """Geometric mean of latency(y) / latency(x) over the cases both ran (> 1: x is faster)."""
    shared = [c for c, by in table.items() if x in by and y in by]
    if not shared:
        return None, 0
    logs = np.stack([reps.log((c, y), table[c][y]) - reps.log((c, x), table[c][x]) for c in shared])
    points = np.array([math.log(table[c][y].median_us / table[c][x].median_us) for c in shared])
    noise = max([noise_floor] + [max(table[c][x].rel_ci, table[c][y].rel_ci) for c in shared])
    return geomean_from_logs(logs, points, noise, reps.rng), len(shared)


def rank(
    rows: pd.DataFrame,
    cls: WorkloadClass,
    noise_floor: float = NOISE_FLOOR,
    reps: Replicates | None = None,
) -> ClassResult:
    """Rank the variants of one class (rows: ok rows of one GPU, already in the class).
    `reps` shares bootstrap replicates between classes of the same rows (seeded either way)."""
    table: dict[str, dict[str, Timing]] = {}
    for rec in records(rows):
        table.setdefault(str(rec["case_id"]), {})[str(rec["backend"])] = Timing.of(rec)
    result = ClassResult(cls, len(table))
    if not table:
        return result
    reps = reps or Replicates(np.random.default_rng(SEED))
    stand: dict[str, Standing] = {}
    for case in table.values():
        best = min(t.median_us for t in case.values())
        for b, t in case.items():
            s = stand.setdefault(b, Standing(b, 0))
            s.cases += 1
            s.score *= t.median_us / best  # geometric mean taken below
    for b, s in stand.items():
        s.score = s.score ** (1 / s.cases)
        s.median_us = float(np.median([case[b].median_us for case in table.values() if b in case]))
    names = sorted(stand)
    for i, x in enumerate(names):
        for y in names[i + 1 :]:
            est, _ = pairwise(table, x, y, reps, noise_floor)
            if est is None or est.verdict == "tie":
                continue
            win, lose = (x, y) if est.ratio > 1 else (y, x)
            stand[win].wins += 1
            stand[lose].losses += 1
    result.standings = sorted(
        stand.values(), key=lambda s: (s.losses - s.wins, s.score, -s.cases, s.backend)
    )
    if len(result.standings) > 1:
        result.margin, result.margin_cases = pairwise(
            table, result.standings[0].backend, result.standings[1].backend, reps, noise_floor
        )
    result.crossovers = [c for axis in cls.axes for c in crossovers(rows, axis)]
    return result


_AXIS_DROP = {
    "context": ("kv_lens", "qo_lens", "lengths", "shared_prefix_len"),
    "batch": ("kv_lens", "qo_lens"),
    "prefix": ("kv_lens", "qo_lens", "lengths", "shared_prefix_len"),
}


def _axis_value(axis: str, r: dict[str, object]) -> float:
    if axis == "batch":
        return float(r["batch_size"])  # type: ignore[arg-type]
    if axis == "prefix":
        return float(r["shared_prefix_len"])  # type: ignore[arg-type]
    return float(r["kv_max"])  # type: ignore[arg-type]


def crossovers(rows: pd.DataFrame, axis: str) -> list[Crossover]:
    """Where the fastest variant changes along `axis` among cases equal in everything else.

    context: uniform batches at rising length (same batch size except for prefill, whose batch
    is set by a token budget); batch: same length distribution at rising batch size; prefix:
    shared-prefix cases at rising prefix length. The crossing point is interpolated in log-log
    between the two measured points where both variants ran.
    """
    if rows.empty:
        return []
    sub = rows[rows["uniform"]] if axis == "context" else rows
    if axis == "prefix":
        sub = sub[sub["kind"] == "shared_prefix"]
    groups: dict[str, dict[float, dict[str, Timing]]] = {}
    labels: dict[str, str] = {}
    for rec in records(sub):
        key = spec_key(rec["spec"], _AXIS_DROP[axis])
        if axis in ("context", "prefix") and rec["kind"] != "prefill":
            key += f"|bs{rec['batch_size']}"
        x = _axis_value(axis, rec)
        groups.setdefault(key, {}).setdefault(x, {})[str(rec["backend"])] = Timing.of(rec)
        labels[key] = _group_label(rec, axis)
    out: list[Crossover] = []
    rng = np.random.default_rng(SEED)
    for key, by_x in groups.items():
        xs = sorted(by_x)
        fastest = [_fastest(by_x[x]) for x in xs]
        for i in range(len(xs) - 1):
            a, b = fastest[i], fastest[i + 1]
            if a == b:
                continue
            lo, hi = by_x[xs[i]], by_x[xs[i + 1]]
            est = None
            sig = False
            if b in lo and a in hi:
                f_lo = math.log(lo[a].median_us / lo[b].median_us)
                f_hi = math.log(hi[a].median_us / hi[b].median_us)
                if f_hi != f_lo:
                    t = -f_lo / (f_hi - f_lo)
                    est = math.exp(math.log(xs[i]) + t * (math.log(xs[i + 1]) - math.log(xs[i])))
                sig = (
                    estimate_ratio(lo[a], lo[b], rng).verdict == "slower"
                    and estimate_ratio(hi[a], hi[b], rng).verdict == "faster"
                )
            out.append(Crossover(axis, labels[key], xs[i], xs[i + 1], a, b, est, sig))
    return out


def _fastest(by_backend: dict[str, Timing]) -> str:
    return min(by_backend, key=lambda b: by_backend[b].median_us)


def _group_label(r: dict[str, object], axis: str) -> str:
    parts = [str(r["kind"]), shape_label(r)]
    if axis != "batch" and r["kind"] != "prefill":
        parts.append(f"bs{r['batch_size']}")
    if axis == "batch":
        parts.append(str(r["lengths"]) or f"ctx{r['kv_max']}")
    if r.get("tree"):
        parts.append(str(r["tree"]))
    parts.append(dtype_label(r))
    if int(r["page_size"]) != 16:  # type: ignore[call-overload]
        parts.append(f"p{r['page_size']}")
    if r.get("label"):
        parts.append(str(r["label"]))
    return " ".join(parts)


def evidence(res: ClassResult, top: int = 3) -> str:
    """`flashinfer:tc 12 cases, median 45.1 µs; flash-attn:fa3 ...` for the first variants."""
    return "; ".join(
        f"{s.backend}: {s.cases} cases, median {fmt_us(s.median_us)}, "
        f"{s.wins}W/{s.losses}L, {s.score:.2f}x best"
        for s in res.standings[:top]
    )


@dataclass(frozen=True)
class PaddingCost:
    backend: str
    batch: str
    """The ragged batch's lengths label (`skew-giant(131072)`, `mixed(256..65536)`...)."""
    skew: float
    """Its longest request / mean request."""
    kv_dtype: str
    estimate: RatioEstimate
    """Padded latency / ragged latency (> 1: padding costs that factor)."""


def padding_cost(padded: pd.DataFrame, ragged: pd.DataFrame) -> list[PaddingCost]:
    """Per backend and batch: latency of the padded twin / latency of the ragged batch. A row of
    lengths `padded(X)` pairs with the ragged row of lengths `X`, same backend, otherwise same
    spec."""
    unpad = padded.assign(
        spec=[
            s.model_copy(update={"lengths": u})
            for s, u in zip(padded["spec"], padded["unpadded_lengths"], strict=True)
        ]
    )
    a, b = add_key(ragged, "pair", ("kv_lens",)), add_key(unpad, "pair", ("kv_lens",))
    base = {(r["backend"], k): r for k, r in zip(a["pair"], records(a), strict=True)}
    rng = np.random.default_rng(SEED)
    out = []
    for k, r in zip(b["pair"], records(b), strict=True):
        twin = base.get((r["backend"], k))
        if twin is not None:
            est = estimate_ratio(Timing.of(twin), Timing.of(r), rng)
            out.append(PaddingCost(r["backend"], twin["lengths"], twin["skew"], r["kv_dtype"], est))
    return sorted(out, key=lambda c: (c.kv_dtype, c.skew, c.batch, c.backend))


def short_batch(label: str) -> str:
    """`skew-giant(131072)` -> `giant`; other labels unchanged."""
    m = re.fullmatch(r"skew-([\w.]+)\(\d+\)", label)
    return m.group(1) if m else label
