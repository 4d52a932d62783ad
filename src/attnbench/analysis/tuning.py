"""Tuning, before and after: each `<variant>+tuned` row (written by `attnbench tune`) against
the same variant with its default knobs, re-measured in the same search.

The tuned row carries the default's final latency (`details.default_latency_us`) and the speedup;
the trials file next to it (`<stem>.trials.jsonl`, or `.trials.jsonl.gz` when committed
compressed, beside the tuned file or in a `trials/` folder there) carries the default's final
measurement itself (`details.tune = {"stage": "final", "role": "default"}`), so the speedup gets
a confidence interval and a verdict instead of a bare ratio.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnbench.analysis.compare import SEED, RatioEstimate, Timing, estimate_ratio
from attnbench.analysis.frame import records
from attnbench.backends.variant import Variant, is_tuned
from attnbench.results import TRIALS_SUFFIXES

RESULTS_SUFFIXES = (".jsonl.gz", ".jsonl")


def _stem(path: Path) -> str:
    for suffix in RESULTS_SUFFIXES:
        if path.name.endswith(suffix):
            return path.name[: -len(suffix)]
    return path.stem


def trials_candidates(tuned: Path) -> list[Path]:
    """Where the trials of a tuned file may be: beside it or in `trials/`, plain or gzipped."""
    stem = _stem(tuned)
    return [
        folder / (stem + suffix)
        for folder in (tuned.parent, tuned.parent / "trials")
        for suffix in TRIALS_SUFFIXES
    ]


def trials_paths(tuned_files: Iterable[Path], known: Iterable[Path] = ()) -> list[Path]:
    """The trials files of `tuned_files` that exist (or are among `known`, the loaded paths)."""
    known_set = {p.resolve() for p in known}
    out: list[Path] = []
    for f in tuned_files:
        for c in trials_candidates(f):
            if (c.is_file() or c.resolve() in known_set) and c not in out:
                out.append(c)
                break
    return out


def _tune(details: Any) -> Mapping[str, Any]:
    tune = details.get("tune") if details is not None else None
    return tune if isinstance(tune, Mapping) else {}


def final_defaults(trials: pd.DataFrame) -> dict[tuple[str, str], Timing]:
    """(case_id, variant) -> the default knobs' final measurement (the latest one)."""
    out: dict[tuple[str, str], Timing] = {}
    if trials.empty:
        return out
    for r in records(trials[trials["status"] == "ok"]):
        tune = _tune(r.get("details"))
        if tune.get("stage") == "final" and tune.get("role") == "default":
            out[(str(r["case_id"]), str(r["backend"]))] = Timing.of(r)
    return out


@dataclass(frozen=True)
class TunedPair:
    """One (case, variant): default knobs against the tuned winner."""

    case_id: str
    row: Mapping[str, Any]
    """The tuned row (frame record)."""
    variant: str
    knobs: str
    default_us: float
    tuned_us: float
    estimate: RatioEstimate | None
    """tuned / default from both final measurements (None without the trials file)."""
    search: str
    """`halving 29 trials of 16 configs`."""

    @property
    def speedup(self) -> float:
        return self.default_us / self.tuned_us

    @property
    def verdict(self) -> str:
        """`faster`, `slower`, `tie`, or `no trials` (no CI without the default's samples)."""
        if self.knobs == "default":
            return "default kept"
        return self.estimate.verdict if self.estimate is not None else "no trials"


def _search(tune: Mapping[str, Any]) -> str:
    if not tune:
        return "-"
    text = f"{tune.get('method', '?')}: {tune.get('trials', 0)} trials of {tune.get('configs', 0)}"
    return text + (" (stopped by the budget)" if tune.get("stopped_by_budget") else "")


def tuned_pairs(ok: pd.DataFrame, trials: pd.DataFrame | None = None) -> list[TunedPair]:
    """Every ok `+tuned` row whose default latency is known, sorted by case then variant."""
    if ok.empty:
        return []
    tuned = ok[ok["backend"].map(is_tuned).astype(bool)]
    defaults = final_defaults(trials) if trials is not None else {}
    rng = np.random.default_rng(SEED)
    out = []
    for r in records(tuned):
        details: Any = r.get("details")
        default_us = details.get("default_latency_us") if details is not None else None
        if not default_us or not r.get("latency_us"):
            continue
        variant = Variant.parse(str(r["backend"])).base
        base = defaults.get((str(r["case_id"]), variant))
        est = estimate_ratio(base, Timing.of(r), rng) if base is not None else None
        out.append(
            TunedPair(
                str(r["case_id"]),
                r,
                variant,
                str(details.get("knobs_label") or "-"),
                float(default_us),
                float(r["latency_us"]),
                est,
                _search(_tune(details)),
            )
        )
    return sorted(out, key=lambda p: (p.case_id, p.variant))
