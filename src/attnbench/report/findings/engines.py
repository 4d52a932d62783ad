"""Sections on what an engine deploys (`attnbench recommend --engine vllm|sglang`, ranked by
`analysis.engine_rank` with uniform capture-bucket weights, as `recommend --engine` without
`--trace` ranks them) and on the fp8 numerics study (`attnbench fp8`)."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

import pandas as pd

from attnbench.analysis.engine_rank import rank_engine
from attnbench.backends.variant import is_engine
from attnbench.engines.paths import ENGINES
from attnbench.report.findings.core import (
    Headline,
    Inputs,
    Section,
    Table,
    doc_commit,
    fpct,
    frange,
    fx,
    section,
    sources,
)
from attnbench.results import FP8_STUDY_TYPE

if TYPE_CHECKING:
    from attnbench.deploy.traffic import Traffic, TrafficKey

FA3_VARIANT = "flash-attn:fa3"


def _engine_rows(frame: pd.DataFrame, label: str) -> list[list[str]]:
    """Per engine and GPU (`rank_engine` ranks each GPU's rows apart), the ranked choice; the
    row's files are that GPU's."""
    out = []
    for engine in ENGINES:
        for rec in rank_engine(frame, engine):
            c = rec.choice
            if c is None:
                continue
            mine = frame[frame["gpu"] == rec.gpu]
            out.append(
                [
                    rec.gpu.removeprefix("NVIDIA "),
                    label,
                    engine,
                    f"`{c.config.command}`",
                    fx(c.decode_vs_default),
                    fx(c.prefill_vs_default),
                    rec.default.label if rec.default else "-",
                    fpct(rec.regret, 1) if rec.regret is not None else "-",
                    *sources(mine),
                ]
            )
    return out


@section("engines")
def engines(inputs: Inputs) -> Section | None:
    rows = inputs.rows
    if rows.empty:
        return None
    has_engine = rows["backend"].astype(str).map(is_engine).astype(bool)
    files = list(dict.fromkeys(rows.loc[has_engine, "file"]))
    if not files:
        return None
    table = _engine_rows(rows[rows["file"].isin(files)], "every engine file of the GPU")
    for f in files:
        table += _engine_rows(rows[rows["file"] == f], f"`{f}` alone")
    text = (
        "The engine-variant rows ranked with every capture bucket weighted alike and every "
        "KV dtype in one ranking, per GPU: over every file of the GPU that has them, then "
        "per file: evidence, "
        "not the deployment answer (that is the next section, `recommend --model`, which "
        "keeps fp8 KV a decision of its own). The engine command, its expected decode and "
        "prefill attention time as multiples of the engine default's on the same cases, and "
        "the regret of one server-wide choice against choosing per capture bucket."
    )
    cols = [
        "GPU",
        "rows",
        "engine",
        "deploy",
        "decode vs default",
        "prefill vs default",
        "default",
        "regret",
        "file",
        "commit",
    ]
    return Section("Engine rows ranked", text, [Table(cols, table)])


def _rel(records: list[dict[str, Any]], metric: str) -> list[float]:
    values = [(r.get(metric) or {}).get("rel_l2_err") for r in records]
    return [float(v) for v in values if v is not None]


def _pct_range(values: list[float]) -> str:
    return f"{frange(values, lambda v: fpct(v, 2))} ({len(values)})" if values else "-"


def _scheme_groups(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        out[str(r.get("scheme", "tensor"))].append(r)
    return out


def _study_rows(name: str, doc: dict[str, Any]) -> list[list[str]]:
    records = [r for r in doc.get("kernel") or [] if isinstance(r, dict)]
    src = [f"`{name}`", doc_commit(doc)]
    rows = []
    for (fmt, variant), recs in _by(records, ("format", "variant")).items():
        ok = [r for r in recs if r.get("status") == "ok"]
        for scheme, group in _scheme_groups(ok).items():
            metric = ["quant", "q_quant", "kernel", "total", "bf16_kernel"]
            rows.append(
                [
                    str(variant),
                    str(fmt),
                    scheme,
                    *(_pct_range(_rel(group, m)) for m in metric),
                    *src,
                ]
            )
        for r in [r for r in recs if r.get("status") != "ok"]:
            reason = f"{r.get('status')}: {str(r.get('reason', ''))[:100]}"
            rows.append(
                [
                    str(variant),
                    str(fmt),
                    str(r.get("scheme", "tensor")),
                    reason,
                    "-",
                    "-",
                    "-",
                    "-",
                    *src,
                ]
            )
    return rows


def _by(records: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[tuple[Any, ...], list[Any]]:
    out: dict[tuple[Any, ...], list[Any]] = defaultdict(list)
    for r in records:
        out[tuple(r.get(k) for k in keys)].append(r)
    return out


@section("fp8-study")
def fp8_study(inputs: Inputs) -> Section | None:
    docs = [
        (n, d)
        for n, d in inputs.docs.items()
        if isinstance(d, dict) and d.get("type") == FP8_STUDY_TYPE
    ]
    rows = [r for n, d in docs for r in _study_rows(n, d)]
    if not rows:
        return None
    text = (
        "The fp8 study's kernel part: relative L2 error against fp64 attention, min-max over "
        "the records (their count), per variant, fp8 format and scaling scheme: the KV "
        "quantisation's own error, the query's (FA3 quantises it too), the kernel's own error "
        "apart from quantisation, the total, and the same kernel on the bf16 cache. Records "
        "that did not run say why."
    )
    cols = [
        "variant",
        "format",
        "scheme",
        "KV quant",
        "q quant",
        "kernel",
        "total",
        "bf16 kernel",
        "file",
        "commit",
    ]
    complete = [
        [f"`{n}`", str(d.get("complete")), str(len(d.get("kernel") or [])), doc_commit(d)]
        for n, d in docs
        if d.get("kernel")
    ]
    tables = [Table(cols, rows), Table(["file", "complete", "kernel records", "commit"], complete)]
    return Section("FP8 numerics on the GPU", text, tables)


DEPLOY_FILES = ("h200-deploy", "h100-deploy")
"""`scripts/h200/deploy_answer.sh`'s rows (`recommend --measure` on each trace), named for the
card the call got."""
ANSWER_MODELS = (
    ("llama-3.1-8b", 1),
    ("llama-3.1-70b", 8),
    ("deepseek-v3", 8),
    ("gpt-oss-120b", 8),
    ("gemma-2-9b", 1),
)
ANSWER_COMMAND = (
    "source .device/setup.sh; trap - EXIT; ATTNBENCH_GIT_SHA=<sha> "
    "bash scripts/h200/deploy_answer.sh"
)


def _kept_traffic(inputs: Inputs) -> dict[TrafficKey, Traffic]:
    """The replays kept beside the `--measure` rows (`deploy.traffic.traffic_path`)."""
    from attnbench.deploy.traffic import TRAFFIC_SUFFIX, Traffic

    out: dict[TrafficKey, Traffic] = {}
    for name, doc in inputs.docs.items():
        if name.endswith(TRAFFIC_SUFFIX) and isinstance(doc, dict):
            for d in doc.get("traffic", []):
                t = Traffic.from_dict(d)
                out[t.key] = t
    return out


@section("answer")
def answer(inputs: Inputs) -> Section | None:
    """`recommend --model M --engine E --trace T` per Llama model, engine and trace, from the
    rows `--measure` took on that trace's own batches (`deploy.table`)."""
    from attnbench.deploy.table import answer_table

    rows = inputs.rows
    if rows.empty:
        return None
    measured = inputs.ok(*DEPLOY_FILES)
    table = answer_table(rows, measured, ANSWER_MODELS, _kept_traffic(inputs))
    cols = ["model", "engine", "traffic", "KV", "GPU", "deploy", "decode vs default"]
    cols += ["prefill vs default", "basis"]
    cols += ["file", "commit"]
    text = (
        "The answer `attnbench recommend --model M --tp N --engine E --trace T` gives: the "
        "GPU whose rows answer (the one that measured the trace's own batches), the deploy "
        "flags, decode attention time against the engine default on the same replayed steps "
        "(the ratio of the traffic-weighted mean step times over the trace's decode steps on "
        "this GPU, with its 95% CI: buckets as strata; `the default` where no option beats "
        "it beyond its interval; `SLOWER` where the interval lies above 1), prefill attention "
        "time against the default on the prompts drawn from the trace, and its basis "
        "(decode cases, the share of the trace's decode steps priced at another batch size)."
    )
    if measured.empty:
        text += (
            " The rows measured on each trace's own batches are pending: "
            f"`{ANSWER_COMMAND}` writes them (results/h200-deploy.jsonl.gz); until then the "
            "table answers from the committed rows, every measured batch size weighted alike."
        )
    heads = [
        Headline.of(f"answer {r[0]} {r[1]} {r[2]} ({r[4]})", f"{r[5]}: decode {r[6]}", r[-2:])
        for r in table
        if r[2] in ("azure-conv", "committed rows") and r[3] == "bf16"
    ][:4]
    return Section("The answer per deployment", text, [Table(cols, table)], heads)


@section("interval-coverage")
def interval_coverage(inputs: Inputs) -> Section | None:
    """How often one half's 95% interval covers the other half's estimate, per GPU, over the
    committed `--measure` answers (`deploy.coverage`)."""
    from attnbench.deploy.coverage import EXPECTED, half_split
    from attnbench.deploy.table import measured_answers

    rows = inputs.rows
    measured = inputs.ok(*DEPLOY_FILES)
    if rows.empty or measured.empty:
        return None
    ok = rows[(rows["status"] == "ok") & rows["latency_us"].notna()]
    kept = _kept_traffic(inputs)
    table, heads = [], []
    for gpu in sorted(set(measured["gpu"].astype(str))):
        mine = measured[measured["gpu"].astype(str) == gpu]
        got = half_split(measured_answers(ok, mine, ANSWER_MODELS, kept))
        src = sources(mine)
        if not got.trials:
            table.append([gpu, "0", "-", f"{100 * EXPECTED:.0f}%", str(got.skipped), *src])
            continue
        rate = f"{100 * got.rate:.0f}% ({got.covered} of {got.trials})"
        exp = f"{100 * EXPECTED:.0f}%"
        table.append([gpu, str(got.trials), rate, exp, str(got.skipped), *src])
        figure = f"{rate} on {gpu.removeprefix('NVIDIA ')}; about {100 * EXPECTED:.0f}% expected"
        heads.append(Headline.of("interval coverage, half vs half", figure, mine))
    text = (
        "Each committed `--measure` answer's drawn steps are split in two halves (each bucket's "
        "steps dealt alternately); the 95% interval from one half should cover the other "
        "half's estimate about 83% of the time when the interval is calibrated (the other "
        "half's estimate carries noise of its own: P(|N(0, 2)| < 1.96)); with 2-3 steps per "
        "bucket and half, the t quantile of few degrees of freedom widens it (89% in the "
        "simulation of `tests/test_interval_coverage.py`). Both directions are counted; options "
        "whose halves hold fewer than 3 cases are skipped."
    )
    cols = ["GPU", "checks", "covered", "expected", "options skipped", "file", "commit"]
    return Section("Interval coverage, half against half", text, [Table(cols, table)], heads)
