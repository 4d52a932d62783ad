"""The answer table of the findings (`report.findings.engines.answer`): per model, engine,
traffic and KV dtype, what `recommend --model` answers. Rows measured by `recommend --measure`
carry their trace, capture bucket and bucket weight in their label (`deploy.plan`): a
trace's answer prices decode on that trace's own batches only, weighted as the replay weighted
the buckets. Without such rows the answer is from the committed rows (measured batch sizes
weighted alike). Pure: frames in, table cells out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from attnbench.deploy.ask import DeployAsk, answer_for
from attnbench.deploy.decide import (
    Answer,
    ModelShape,
    Target,
    answer,
    label_weights,
    model_shape,
    own_batches,
    parse_label,
    shape_rows,
)
from attnbench.deploy.options import Option
from attnbench.deploy.stats import PairedEstimate
from attnbench.deploy.traffic import Traffic, TrafficKey, labelled_traffic

KV_NAMES = {"auto": "bf16", "fp8_e4m3": "fp8_e4m3"}


def _sources(rows: pd.DataFrame) -> list[str]:
    if rows.empty or "file" not in rows:
        return ["-", "-"]
    files = sorted(set(map(str, rows["file"])))
    commits = sorted(set(map(str, rows["commit"])))
    short = files if len(files) <= 2 else [files[0], f"{len(files) - 1} more"]
    return [", ".join(f"`{f}`" for f in short), ", ".join(commits[:2])]


def _cells(ans: Answer, rest: float | None = None) -> list[str]:
    """The GPU, the deploy flags, decode and prefill against the default and the basis;
    `rest`: the share
    of the trace's decode steps in buckets under 5% (no label of the measured rows carries
    them: left out of the weights here, priced at another batch size by `recommend`)."""
    gpu = ans.gpu.removeprefix("NVIDIA ")
    return [gpu, *_decision_cells(ans, rest)]


def _decision_cells(ans: Answer, rest: float | None) -> list[str]:
    c = ans.choice
    if c is None:
        return ["-", "not measured at this shape (pending)", "-", "-"]
    skip = ("--tensor-parallel-size", "--tp ", "--model-path")
    flags = [u for u in c.command[1:] if u.startswith("--") and not u.startswith(skip)]
    deploy = f"`{' '.join(flags)}`" if flags else f"`{c.key.variant}` calls"
    e = c.decode
    dec = "-" if e is None else _ci(e)
    if ans.keeps_default:
        dec = "the default" + (" (ties kept)" if ans.tied else "")
    elif ans.default_refused and ans.default is not None:
        d = ans.default
        dec = (
            f"default cannot run here; fastest run ({e.cases if e else 0} cases)"
            if d.key == c.key
            else f"{dec} vs stand-in {d.name} (default cannot run here)"
        )
    share = ans.extrapolated_share
    basis = f"{e.cases if e else 0} cases at batch {', '.join(map(str, ans.measured_batches))}"
    if rest is not None:
        basis += f"; {100 * rest:.0f}% extrapolated (buckets under 5%, left out here)"
    elif share is not None:
        basis += f"; {100 * share:.0f}% extrapolated"
    return [deploy, dec, "the default" if ans.keeps_default else _prefill_cell(c), basis]


def _prefill_cell(c: Option) -> str:
    """The choice's prefill against the default's on the prefill cases both ran (paired,
    95% CI), or why there is none."""
    e = c.prefill
    if e is None:
        return "no shared case"
    return f"{_ci(e)}, {e.cases} case{'s' * (e.cases != 1)}"


def _ci(e: PairedEstimate) -> str:
    """`0.84x [0.83-0.88]`: the ratio and its 95% CI (`0.84x (2 cases)` without one), and
    `SLOWER` where the interval lies above 1."""
    return e.short() + (" SLOWER" if e.verdict == "slower" else "")


def answer_table(
    ok: pd.DataFrame,
    measured: pd.DataFrame,
    models: Sequence[tuple[str, int]],
    kept: Mapping[TrafficKey, Traffic] | None = None,
) -> list[list[str]]:
    """Per GPU that measured traffic, model, engine, trace and KV dtype, the answer
    `recommend --gpu G --model M --engine E --trace T` gives (`ask.answer_for`, with the
    traffic kept beside the rows, else their labels' weights); without `--measure` rows, the
    answer from the committed rows. `ok` may hold every row, refusals too, as `recommend`
    reads them: an engine default that refused every case is what a stand-in answer says."""
    rows: list[list[str]] = []
    traces = _traces(measured)
    gpus = sorted(set(measured["gpu"].astype(str))) if not measured.empty else []
    for model, tp in models:
        shape = model_shape(model, tp)
        mine = shape_rows(ok, shape)
        for engine in ("vllm", "sglang"):
            if not traces:
                ans = answer(mine, shape, engine)
                rows.append(
                    [model, engine, "committed rows", "bf16", *_cells(ans), *_sources(mine)]
                )
                continue
            for gpu in gpus:
                for trace in traces:
                    rows += _trace_rows(mine, shape, (model, engine, trace, gpu), kept or {})
    return rows


def trace_answers(
    mine: pd.DataFrame,
    shape: ModelShape,
    where: tuple[Target, str, str],
    kept: Mapping[TrafficKey, Traffic],
) -> list[tuple[str, Answer]]:
    """(KV dtype, answer) for (engine, trace, GPU) where `--measure` rows exist, each KV dtype
    with an answer."""
    engine, trace, gpu = where
    labelled = label_weights(mine, shape, engine, trace, gpu)
    if not labelled:
        return []
    key = (gpu, shape.model, shape.tp, engine, trace)
    traffic = kept.get(key) or labelled_traffic(key, labelled)
    out = []
    for kv in ("auto", "fp8_e4m3"):
        ans = answer_for([], mine, DeployAsk(shape, engine, kv, trace, gpu), traffic)
        if ans.choice is not None:
            out.append((kv, ans))
    return out


def _trace_rows(
    mine: pd.DataFrame,
    shape: ModelShape,
    where: tuple[str, Target, str, str],
    kept: Mapping[TrafficKey, Traffic],
) -> list[list[str]]:
    """The answer's rows for (model, engine, trace, GPU), one per KV dtype measured there."""
    model, engine, trace, gpu = where
    timed = mine[(mine["status"] == "ok").to_numpy()] if "status" in mine else mine
    decode = timed[(timed["kind"] == "decode").to_numpy() & own_batches(timed, trace, engine)]
    files = _sources(decode[decode["gpu"].astype(str) == gpu])
    return [
        [model, engine, trace, KV_NAMES[kv], *_cells(ans), *files]
        for kv, ans in trace_answers(mine, shape, (engine, trace, gpu), kept)
    ]


def measured_answers(
    ok: pd.DataFrame,
    measured: pd.DataFrame,
    models: Sequence[tuple[str, int]],
    kept: Mapping[TrafficKey, Traffic],
) -> list[Answer]:
    """Every answer of the table that rests on `--measure` rows (the half-split coverage)."""
    out = []
    gpus = sorted(set(measured["gpu"].astype(str))) if not measured.empty else []
    for model, tp in models:
        shape = model_shape(model, tp)
        mine = shape_rows(ok, shape)
        for engine in ("vllm", "sglang"):
            for gpu in gpus:
                for trace in _traces(measured):
                    got = trace_answers(mine, shape, (engine, trace, gpu), kept)
                    out += [a for _, a in got]
    return out


def _traces(measured: pd.DataFrame) -> list[str]:
    if measured.empty:
        return []
    found = {p[0] for p in map(parse_label, measured["label"].astype(str)) if p}
    return sorted(found)
