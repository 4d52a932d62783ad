"""The report's "Serving replay" section, from `attnbench replay --out` documents.

`attnbench report RESULTS... replay.json` hands JSON documents to section hooks; every document
whose `schema` is the replay's becomes tables (per-candidate ITL/TTFT/throughput, crossing
rates, padded vs ragged, cost-model fit and live error) and a figure (p99 ITL and p99 TTFT
against the arrival rate), read through the typed `replay.document.ReplayDocument`, with how
far to trust each candidate and the rankings (ties inside the error) when the document has them.
Every `attnbench replay-validate` document becomes a table per variant (steps, median and p90
absolute error, share outside the calibration range, target met) and a figure of predicted vs
measured per step. A file whose `schema` is the replay's (or the validation's) but does not
read as one becomes one line naming the field.
"""

from __future__ import annotations

import math
from pathlib import Path

from attnbench.replay.document import (
    ReplayDocument,
    ReplayDocumentError,
    is_replay_document,
    parse_document,
)
from attnbench.replay.trust import ties, trust_line
from attnbench.report.blocks import (
    Block,
    Figure,
    ReportData,
    Section,
    Table,
    Text,
    register_section,
)
from attnbench.report.replay_validation import load_validations, validation_blocks
from attnbench.results import is_document_path, read_json_shared


def load_documents(paths: list[Path]) -> tuple[list[ReplayDocument], list[str]]:
    """The replay documents among `paths` (other JSON documents are skipped), and one line for
    each file that claims to be one but does not read as one."""
    docs, problems = [], []
    for p in paths:
        if not is_document_path(p):
            continue
        try:
            data = read_json_shared(p)
        except (OSError, ValueError):
            continue
        if not is_replay_document(data):
            continue
        try:
            docs.append(parse_document(data, str(p)))
        except ReplayDocumentError as exc:
            problems.append(str(exc))
    return docs, problems


def _ms(v: float) -> str:
    if not math.isfinite(v):
        return "-"
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _pct(v: float) -> str:
    return f"{100 * v:.0f}%" if math.isfinite(v) else "-"


def _ratio(v: float) -> str:
    return f"{v:.2f}x" if math.isfinite(v) and v else "-"


def describe(doc: ReplayDocument) -> str:
    t, d, s, g = doc.trace, doc.deployment, doc.scheduler, doc.gemm
    first = f", first {t.limit}" if t.limit else ""
    return (
        f"**{t.name}** ({t.requests} requests{first}, {t.rate_req_s:.2f} req/s at "
        f"scale 1) replayed on **{d.model} at TP {d.tp}** ({d.num_qo_heads}/"
        f"{d.num_kv_heads} heads per GPU, {d.kv_dtype} KV, {d.kv_tokens:,} KV tokens "
        f"per GPU), max batch {s.max_batch}, token budget {s.token_budget}, "
        f"{'chunked' if s.chunked_prefill else 'whole-prompt'} prefill, prefix cache "
        f"{'on' if s.prefix_cache else 'off'}. Attention: cost models fitted on the sweep rows "
        f"of {doc.gpu}; other layers: a roofline at {g.copy_gbps:.0f} GB/s and "
        f"{g.matmul_tflops:.0f} TFLOP/s (measured ceilings); all-reduce {g.allreduce}."
    )


def runs_table(doc: ReplayDocument) -> Table:
    rows: list[list[object]] = [
        [
            r.candidate,
            _ms(r.itl_ms.p50),
            _ms(r.itl_ms.p90),
            _ms(r.itl_ms.p99),
            _ms(r.ttft_ms.p50),
            _ms(r.ttft_ms.p99),
            _ms(r.decode_step_ms.p50),
            f"{r.throughput_tok_s:.0f}" if math.isfinite(r.throughput_tok_s) else "-",
            _pct(r.time_frac.attention),
            _pct(r.extrapolated.far_steps_frac),
        ]
        for r in doc.runs_at()
    ]
    return Table(
        [
            "candidate",
            "ITL p50 ms",
            "ITL p90",
            "ITL p99",
            "TTFT p50 ms",
            "TTFT p99",
            "decode step p50 ms",
            "output tok/s",
            "attention share",
            "steps beyond fit",
        ],
        rows,
        f"rate scale {doc.main_scale:g}; 'steps beyond fit': share of steps whose batch lies more "
        "than 1.5x beyond the measured rows (the model extrapolates there)",
    )


def crossing_table(doc: ReplayDocument) -> Table | None:
    target = doc.itl_target_ms
    if target is None or not doc.crossing:
        return None
    rows: list[list[object]] = []
    for name, c in doc.crossing.items():
        if c.status == "crossed":
            rate = f"{c.rate_req_s:.2f}" if math.isfinite(c.rate_req_s) else "-"
            rows.append([name, f"{c.scale:.2f}x", rate])
        elif c.status == "below":
            rows.append([name, f"> {c.max_scale:g}x (never crossed)", "-"])
        else:
            rows.append([name, f"< {c.min_scale:g}x (already above)", "-"])
    return Table(["candidate", "rate scale", "req/s"], rows, f"where p99 ITL crosses {target:g} ms")


def padded_blocks(doc: ReplayDocument) -> list[Block]:
    rows = doc.padded_vs_ragged
    if not rows:
        return []
    claim = doc.brief_claim
    table = Table(
        ["backend", "ITL p50 ragged", "padded", "ratio", "ITL p99 ragged", "padded", "ratio"],
        [
            [
                r.backend,
                _ms(r.ragged_itl_ms_p50),
                _ms(r.padded_itl_ms_p50),
                _ratio(r.ratio_itl_ms_p50),
                _ms(r.ragged_itl_ms_p99),
                _ms(r.padded_itl_ms_p99),
                _ratio(r.ratio_itl_ms_p99),
            ]
            for r in rows
        ],
        "the same replay with each decode batch padded to its longest request",
    )
    ratios = [r.ratio_itl_ms_p50 for r in rows if math.isfinite(r.ratio_itl_ms_p50)]
    worst = max(ratios, default=0.0)
    text = Text(
        f"The brief claims per-token latency rose from {claim.itl_before_ms} ms to "
        f"{claim.itl_after_ms} ms ({claim.factor:.1f}x) with a padded uniform kernel. "
        f"On these measurements padding multiplies median ITL by at most {worst:.2f}x."
    )
    return [text, table]


def models_table(doc: ReplayDocument) -> Table:
    nan = math.nan
    rows: list[list[object]] = []
    for m in doc.models:
        dec, pre = m.decode, m.prefill
        rows.append(
            [
                m.backend,
                dec.n_rows if dec else 0,
                f"{m.decode_bandwidth_gbps:.0f}" if m.decode_bandwidth_gbps > 0 else "-",
                _pct(dec.cv_rel_rmse if dec else nan),
                _pct(dec.cv_max_rel_err if dec else nan),
                pre.n_rows if pre else 0,
                f"{m.prefill_tflops:.0f}" if m.prefill_tflops > 0 else "-",
                _pct(pre.cv_rel_rmse if pre else nan),
                "; ".join(m.notes),
            ]
        )
    return Table(
        [
            "variant",
            "decode rows",
            "decode GB/s",
            "held-out rel RMSE",
            "max err",
            "prefill rows",
            "prefill TFLOP/s",
            "held-out rel RMSE",
            "notes",
        ],
        rows,
        "attention cost models: non-negative least squares; errors on held-out rows",
    )


def live_blocks(doc: ReplayDocument) -> list[Block]:
    live = doc.live
    if live is None:
        return []
    rows: list[list[object]] = [
        [
            key,
            f"{v.measured}/{v.samples}",
            _pct(v.rel_rmse),
            _pct(v.median_abs_err),
            _pct(v.max_abs_err),
            _pct(v.mean_err),
        ]
        for key, v in live.summary.items()
    ]
    return [
        Text(
            f"Validated live on {live.device}: the replayed steps' exact batches measured "
            f"with the sweep's engine; worst relative RMSE of the model "
            f"{_pct(live.worst_rel_rmse)}."
        ),
        Table(
            ["variant / part", "measured", "rel RMSE", "median |err|", "max |err|", "bias"],
            rows,
            f"cost model vs live GPU steps (rows in {live.rows_file})",
        ),
    ]


RANKED = {"itl_ms.p50": "ITL p50", "itl_ms.p99": "ITL p99", "ttft_ms.p50": "TTFT p50"}


def trust_blocks(doc: ReplayDocument) -> list[Block]:
    """How far to trust each candidate, and the rankings with their ties."""
    trust = doc.trust
    if trust is None:
        return []
    lines = [trust_line(t) for t in trust.candidates] + list(trust.notes)
    blocks: list[Block] = [Text("\n".join(f"- {line}" for line in lines))]
    rows: list[list[object]] = []
    for r in trust.rankings:
        tied = ties(r)
        for e in r.entries:
            span = f"{_ms(e.low_ms)}-{_ms(e.high_ms)}" if math.isfinite(e.low_ms) else "unknown"
            name = RANKED.get(r.metric, r.metric)
            rows.append(
                [name, e.group, e.candidate, _ms(e.value_ms), span, ", ".join(tied[e.candidate])]
            )
    if rows:
        scale = trust.rankings[0].rate_scale
        blocks.append(
            Table(
                ["metric", "rank", "candidate", "ms", "range ms", "not distinguishable from"],
                rows,
                f"rate scale {scale:g}; range: the replay with each candidate's attention cost "
                "lowered and raised by its error (the worst held-out trace's p90, else the "
                "validated p90, else the fit's held-out error); candidates whose ranges overlap "
                "share a rank",
            )
        )
    return blocks


def figure(doc: ReplayDocument, label: str) -> Figure | None:
    runs = doc.runs
    if not runs:
        return None
    from attnbench.report.plots import _figure, _finish, colors, markers

    names = list(dict.fromkeys(r.candidate for r in runs))
    cmap, mk = colors(names), markers(names)
    fig, (ax_itl, ax_ttft) = _figure(2)
    for name in names:
        pts = sorted((r for r in runs if r.candidate == name), key=lambda r: r.rate_req_s)
        xs = [r.rate_req_s for r in pts]
        style = "--" if name.endswith("[padded]") else "-"
        for ax, ys in (
            (ax_itl, [r.itl_ms.p99 for r in pts]),
            (ax_ttft, [r.ttft_ms.p99 for r in pts]),
        ):
            ax.plot(xs, ys, style, marker=mk[name], color=cmap[name], label=name)
    target = doc.itl_target_ms
    if target:
        ax_itl.axhline(target, color="#aa0000", linewidth=1, linestyle=":", label="target")
    for ax, title in ((ax_itl, "p99 inter-token latency"), (ax_ttft, "p99 time to first token")):
        ax.set_xlabel("arrival rate (requests/s)")
        ax.set_ylabel("ms")
        ax.set_yscale("log")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    ax_itl.legend(fontsize=7)
    drawing = _finish(fig, f"Serving replay: {doc.trace.name}", label)
    return drawing.figure("p99 ITL and TTFT against the arrival rate", "replay")


def blocks_for(doc: ReplayDocument, label: str) -> list[Block]:
    blocks: list[Block] = [Text(describe(doc)), runs_table(doc)]
    fig = figure(doc, label)
    if fig is not None:
        blocks.append(fig)
    cross = crossing_table(doc)
    if cross is not None:
        blocks.append(cross)
    blocks += padded_blocks(doc)
    blocks += trust_blocks(doc)
    blocks.append(models_table(doc))
    blocks += live_blocks(doc)
    if doc.notes:
        blocks.append(Text("\n".join(f"- {n}" for n in doc.notes)))
    return blocks


@register_section("Serving replay", order=85, per_gpu=False)
def replay_section(data: ReportData) -> Section | None:
    docs, problems = load_documents(list(data.extras))
    validations, bad = load_validations(list(data.extras))
    if not docs and not problems and not validations and not bad:
        return None
    blocks: list[Block] = [Text(p) for p in problems + bad]
    for doc in docs:
        blocks += blocks_for(doc, data.label)
    for path, vdoc in validations:
        blocks += validation_blocks(path, vdoc, data.label)
    return Section("Serving replay", blocks)
