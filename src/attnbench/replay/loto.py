"""Leave one trace out: the replay's decode cost models judged on traffic they were not fitted to.

    draw   (CPU) replay each trace (three shipped, one synthetic family) and take `per_trace`
           decode steps at evenly spaced quantiles of their total KV, midway between the
           quantiles earlier validations drew (`offset`), distinct batches only; write them as a
           suite (`steps_suite`: one `list:` group per step, labelled `heldout:TRACE:stepN`),
    time   (GPU) `attnbench run --suite THAT_FILE`: the same engine, gate and timing as the
           calibration rows, resumable,
    score  (CPU) for each trace T, fit every variant on the calibration rows plus the timed
           steps of the other traces, predict T's steps, error = predicted / measured - 1 per
           call; per trace and per variant the median and p90 |error| against the target
           (median <= 5%, p90 <= 10%, >= 50 steps), and per variant the worst trace.

The rule (`FORM_RULE`) is what makes the error held out: a model's form (its features, the
split plans, the grids its fit chooses from) is fixed in code before the steps are timed;
coefficients and grid choices are fitted, fold by fold, on what the fold may see. A form changed
after looking at held-out steps must be judged on steps drawn afresh.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from typing import TYPE_CHECKING

import numpy as np

from attnbench.replay.costmodel import AttentionCostModel, ShapeKey
from attnbench.replay.deployment import Deployment
from attnbench.replay.live import sample_steps
from attnbench.replay.simresult import SimResult
from attnbench.replay.validate import (
    MIN_STEPS,
    TARGET_MEDIAN,
    TARGET_P90,
    StepError,
    error_stats,
    step_error,
)
from attnbench.results import ResultRow

if TYPE_CHECKING:
    from attnbench.replay.pipeline import LoadedRows

LABEL = "heldout"
METHOD = "leave-one-trace-out"
HELDOUT_TRACES = ("azure-code", "azure-conv", "mooncake-conv", "synthetic:agentic-128k")
PER_TRACE = MIN_STEPS
CALIBRATION_SUITE = "replay-calibration-heldout"
"""Its groups (the calibration cases the held-out validation adds) lead the steps' suite when
the draw is at the deployment they are measured at (`CALIBRATED`)."""
CALIBRATED = Deployment()
DRAW_OFFSET = 0.5
"""Held-out draws take the quantiles midway between those `replay-validate` drew before."""
FORM_RULE = (
    "A cost model's form (features, split plans, the grids its fit chooses from) is fixed in "
    "code before the held-out steps are timed; only coefficients and grid choices are fitted, "
    "per fold, on the calibration rows and the other traces' steps. A form changed after "
    "looking at held-out steps is judged on steps drawn and timed afresh, never on these."
)


def count_rule() -> str:
    """The rule a held-out count follows (`variant_summary`'s `meets_target`), in words; the
    target itself is `validate.target_text`."""
    return (
        "a variant counts only when every held-out trace meets the target on its own steps, "
        "not on the steps of all traces pooled"
    )


@dataclass(frozen=True)
class HeldOutStep:
    trace: str
    step: int
    kv_lens: tuple[int, ...]


def step_label(trace: str, step: int) -> str:
    return f"{LABEL}:{trace}:step{step}"


def parse_label(label: str) -> tuple[str, int] | None:
    """(trace, step) of a held-out step's label, None for any other row."""
    head, sep, step = label.rpartition(":step")
    if not sep or not head.startswith(LABEL + ":") or not step.isdigit():
        return None
    return head[len(LABEL) + 1 :], int(step)


def draw(
    sims: Mapping[str, SimResult], per_trace: int, offset: float = DRAW_OFFSET
) -> list[HeldOutStep]:
    """`per_trace` distinct decode batches of each trace's replay (module docstring)."""
    out: list[HeldOutStep] = []
    for trace, sim in sims.items():
        seen: set[tuple[int, ...]] = set()
        for step in sample_steps(sim, per_trace, offset=offset):
            kv = tuple(int(v) for v in sim.batch(step).decode_kv_lens)
            if kv not in seen:
                seen.add(kv)
                out.append(HeldOutStep(trace, step, kv))
    return out


def _toml(value: object) -> str:
    """A TOML value of the kinds a suite holds (strings, numbers, booleans, lists of them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value))  # a TOML basic string: the JSON escapes are TOML's


def interleave(steps: Sequence[HeldOutStep]) -> list[HeldOutStep]:
    """The steps one of each trace in turn, so a run cut short still covers every trace."""
    by_trace: dict[str, list[HeldOutStep]] = {}
    for s in steps:
        by_trace.setdefault(s.trace, []).append(s)
    turns = zip_longest(*by_trace.values())
    return [s for turn in turns for s in turn if s is not None]


def steps_suite(
    steps: Sequence[HeldOutStep],
    dep: Deployment,
    drawn_from: str,
    calibration: Sequence[Mapping[str, object]] = (),
) -> str:
    """The drawn steps as a suite TOML for `attnbench run`: first the `calibration` groups
    (the rows the folds fit on beside `replay-calibration`), then one decode case per step,
    the traces in turn."""
    per = {t: sum(s.trace == t for s in steps) for t in dict.fromkeys(s.trace for s in steps)}
    counts = ", ".join(f"{t} {n}" for t, n in per.items())
    text = (
        f"Held-out replay steps ({METHOD}, issue 33): {len(calibration)} calibration group(s), "
        f"then {len(steps)} decode batches ({counts}) drawn from replays {drawn_from}; time "
        "them with every variant (`attnbench run --suite`), then score them with "
        "`attnbench replay-validate CALIBRATION --heldout ROWS`."
    )
    defaults = {
        "model": dep.model, "tp": dep.tp, "page_size": dep.page_size, "dtype": dep.dtype,
        "kv_dtype": dep.kv_dtype,
    }  # fmt: skip
    lines = [f"name = {_toml('replay-heldout-steps')}", f"description = {_toml(text)}", ""]
    lines += ["[defaults]", *(f"{k} = {_toml(v)}" for k, v in defaults.items())]
    for group in calibration:
        lines += ["", "[[group]]", *(f"{k} = {_toml(v)}" for k, v in group.items())]
    for s in interleave(steps):
        lines += [
            "",
            "[[group]]",
            'kinds = ["decode"]',
            f"label = {_toml(step_label(s.trace, s.step))}",
            f"batch_size = {len(s.kv_lens)}",
            f'lengths = ["list:{",".join(str(v) for v in s.kv_lens)}"]',
        ]
    return "\n".join(lines) + "\n"


def split_rows(
    rows: Iterable[ResultRow],
) -> tuple[list[ResultRow], dict[str, list[ResultRow]]]:
    """(rows that are not held-out steps, the held-out steps' rows per trace in file order)."""
    rest: list[ResultRow] = []
    live: dict[str, list[ResultRow]] = {}
    for r in rows:
        tag = parse_label(r.spec.label) if r.spec.kind == "decode" else None
        if tag is None:
            rest.append(r)
        else:
            live.setdefault(tag[0], []).append(r)
    return rest, live


def fold_errors(
    trace: str, rows: Sequence[ResultRow], models: Mapping[str, AttentionCostModel]
) -> list[StepError]:
    """Each held-out row of `trace` against the model of its variant fitted without `trace`
    (a row that failed counts as drawn, not measured)."""
    out = []
    for r in rows:
        m = models.get(r.backend)
        tag = parse_label(r.spec.label)
        if m is None or m.decode is None or tag is None:
            continue
        measured = r.latency_us if r.status == "ok" and r.latency_us else None
        out.append(step_error(trace, tag[1], r.backend, m, r.spec.kv_lens, measured))
    return out


def leave_one_trace_out(
    calibration: LoadedRows, live: Mapping[str, list[ResultRow]], key: ShapeKey
) -> tuple[list[StepError], dict[str, dict[str, AttentionCostModel]]]:
    """(every held-out step's error, each fold's models): for each trace, the models fitted
    (`pipeline.fit_for`, as a replay fits them) on the calibration rows and the other traces'
    steps, judged on that trace's steps."""
    from attnbench.replay.pipeline import LoadedRows, fit_for

    errors: list[StepError] = []
    folds: dict[str, dict[str, AttentionCostModel]] = {}
    for trace in live:
        seen = [r for t, rows in live.items() if t != trace for r in rows]
        train = LoadedRows(calibration.rows + seen, calibration.headers, calibration.gpu, [])
        models, _ = fit_for(train, key)
        folds[trace] = models
        errors += fold_errors(trace, live[trace], models)
    return errors, folds


def trace_stats(errors: Sequence[StepError]) -> dict[str, dict[str, dict[str, float | int | bool]]]:
    """Per trace, per variant: `validate.error_stats` of that trace's held-out steps."""
    traces = dict.fromkeys(e.trace for e in errors)
    return {t: error_stats([e for e in errors if e.trace == t]) for t in traces}


def variant_summary(
    errors: Sequence[StepError], per_trace: Mapping[str, Mapping[str, Mapping[str, object]]]
) -> dict[str, dict[str, float | int | bool | str]]:
    """Per variant: the pooled held-out statistics, the worst trace (by p90) and its median
    and p90, and whether every trace meets the target."""
    out: dict[str, dict[str, float | int | bool | str]] = {}
    for name, pooled in error_stats(list(errors)).items():
        mine = {t: s[name] for t, s in per_trace.items() if name in s}
        p90s = {t: float(str(s["p90_abs_err"])) for t, s in mine.items()}
        finite = {t: v for t, v in p90s.items() if math.isfinite(v)}
        worst = max(finite, key=lambda t: finite[t]) if finite else ""
        meets = bool(mine) and all(bool(s["meets_target"]) for s in mine.values())
        out[name] = {
            **pooled,
            "meets_target": meets,
            "worst_trace": worst,
            "worst_median_abs_err": float(str(mine[worst]["median_abs_err"]))
            if worst
            else math.nan,
            "worst_p90_abs_err": finite[worst] if worst else math.nan,
            "traces_meeting": sum(bool(s["meets_target"]) for s in mine.values()),
            "traces": len(mine),
        }
    return out


def _span(values: Iterable[int]) -> str:
    v = list(values)
    return f"{min(v)}-{max(v)}" if min(v) != max(v) else str(v[0])


BIAS_SHARE = 0.5
"""A trace's mean signed error past this share of its median |error| is a bias, not scatter."""


def bias_text(mean_err: float, median_abs_err: float) -> str:
    """Why the model misses, as far as the errors tell: a bias (one sign: the fitted form lacks
    what this traffic exercises, and only a new form judged on fresh steps can say what) or
    scatter around zero (noise or a per-step effect the features do not see)."""
    if abs(mean_err) > BIAS_SHARE * median_abs_err:
        side = "over" if mean_err > 0 else "under"
        return f"a bias: it {side}-predicts on this traffic (mean error {mean_err:+.1%})"
    return f"scatter around zero (mean error {mean_err:+.1%})"


def miss_notes(
    errors: Sequence[StepError], per_trace: Mapping[str, Mapping[str, Mapping[str, object]]]
) -> list[str]:
    """One line per (variant, trace) that misses the target, saying where: too few steps
    measured, or the worst steps' requests, KV tokens, longest request and error, and whether
    the misses are a bias or scatter (`bias_text`)."""
    out = []
    for trace, by in per_trace.items():
        for name, st in sorted(by.items()):
            if st["meets_target"]:
                continue
            mine = [e for e in errors if (e.trace, e.backend) == (trace, name)]
            timed = sorted(
                (e for e in mine if e.rel_err is not None), key=lambda e: -abs(e.rel_err or 0.0)
            )
            head = (
                f"{name} on {trace}: {st['measured']} of {st['steps']} steps measured, median "
                f"|err| {float(str(st['median_abs_err'])):.1%}, p90 "
                f"{float(str(st['p90_abs_err'])):.1%}"
            )
            if int(str(st["measured"])) < MIN_STEPS:
                out.append(f"{head}: fewer than {MIN_STEPS} measured")
                continue
            worst = timed[: max(1, len(timed) // 10)]
            errs = [e.rel_err or 0.0 for e in worst]
            out.append(
                f"{head}; its {len(worst)} largest misses: "
                f"{_span(e.requests for e in worst)} requests, "
                f"{_span(e.kv_total for e in worst)} KV tokens, "
                f"longest {_span(e.kv_max for e in worst)}, "
                f"error {min(errs):+.1%} to {max(errs):+.1%}; "
                + bias_text(float(str(st["mean_err"])), float(str(st["median_abs_err"])))
            )
    return out


def heldout_document(
    errors: Sequence[StepError],
    folds: Mapping[str, Mapping[str, AttentionCostModel]],
    provenance: dict[str, object],
    sources: Sequence[str],
    live_rows: Sequence[str],
) -> dict[str, object]:
    """The committed held-out validation: the rule, every fold's models, every step, and the
    statistics per trace and per variant (`validation_doc` reads it back)."""
    from attnbench.replay.validate import SCHEMA

    per_trace = trace_stats(errors)
    first = next(iter(folds.values()), {})
    return {
        "schema": SCHEMA,
        "method": METHOD,
        "rule": FORM_RULE,
        "provenance": provenance,
        "complete": True,
        "traces": list(folds),
        "sources": list(sources),
        "live_rows": list(live_rows),
        "target": {"median_abs_err": TARGET_MEDIAN, "p90_abs_err": TARGET_P90, "steps": MIN_STEPS},
        "models": [m.as_dict() for _, m in sorted(first.items())],
        "folds": {t: [m.as_dict() for _, m in sorted(ms.items())] for t, ms in folds.items()},
        "summary": variant_summary(errors, per_trace),
        "per_trace": per_trace,
        "misses": miss_notes(errors, per_trace),
        "steps": [e.as_dict() for e in errors],
    }


def overlap(steps: Sequence[HeldOutStep], earlier: Iterable[Sequence[int]]) -> int:
    """How many drawn batches an earlier validation already timed (the same KV lengths)."""
    old = {tuple(int(v) for v in kv) for kv in earlier}
    return sum(s.kv_lens in old for s in steps)


def shape_of_rows(rows: Sequence[ResultRow]) -> ShapeKey | None:
    """The one shape the held-out steps were timed at (None when there are none)."""
    shapes = {ShapeKey.of(r.spec) for r in rows}
    return next(iter(shapes)) if len(shapes) == 1 else None


def kv_summary(steps: Sequence[HeldOutStep]) -> dict[str, dict[str, float]]:
    """Per trace: the drawn batches' requests and KV tokens (for the draw's report line)."""
    out: dict[str, dict[str, float]] = {}
    for t in dict.fromkeys(s.trace for s in steps):
        mine = [s for s in steps if s.trace == t]
        n = np.array([len(s.kv_lens) for s in mine])
        kv = np.array([sum(s.kv_lens) for s in mine])
        out[t] = {
            "steps": float(len(mine)),
            "max_requests": float(n.max()),
            "max_kv": float(kv.max()),
            "max_longest": float(max(max(s.kv_lens) for s in mine)),
        }
    return out
