"""Serving-shape figures of the report: raggedness (same total KV tokens, rising skew, padded
twins), fp8 vs 16-bit KV, draft-tree verification and shared prefix. Same conventions as
`attnbench.report.plots` (a `Drawing` or None; matplotlib imported inside; stamped with `label`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from attnbench.analysis.cascade import family
from attnbench.analysis.compare import SEED, Timing, geomean_ratio
from attnbench.analysis.frame import add_key, human_tokens, records
from attnbench.analysis.recommend import padding_cost, short_batch
from attnbench.report.blocks import Drawing
from attnbench.report.plots import (
    _figure,
    _finish,
    _group_title,
    _lines,
    _plt,
    _tokens_axis,
    colors,
    markers,
    series_styles,
)


def _stacked(ntop: int, bottom: bool) -> tuple[Any, list[Any]]:
    """`ntop` panels side by side, and below them (when `bottom`) one panel as wide as the row:
    room for a bar chart's category labels."""
    plt = _plt()
    ncols = max(ntop, 1)
    nrows = int(ntop > 0) + int(bottom)
    fig = plt.figure(figsize=(6.0 * max(ncols, 2), 4.4 * nrows))
    grid = fig.add_gridspec(nrows, ncols)
    axes = [fig.add_subplot(grid[0, i]) for i in range(ntop)]
    if bottom:
        axes.append(fig.add_subplot(grid[nrows - 1, :]))
    return fig, axes


def _skew_panel(
    ax: Any, g: pd.DataFrame, padded: pd.DataFrame, twin_skew: dict[Any, Any], cmap: dict[str, Any]
) -> None:
    """One series' latency vs skew, ragged solid and its padded twins dashed."""
    _lines(ax, g, "skew", cmap)
    twins = padded[padded["unpadded_lengths"].isin(set(g["lengths"]))]
    twins = twins[
        twins["dtype"].eq(g["dtype"].iloc[0]) & twins["kv_dtype"].eq(g["kv_dtype"].iloc[0])
    ]
    if not twins.empty:
        _lines(
            ax,
            twins.assign(skew=twins["unpadded_lengths"].map(twin_skew)),
            "skew",
            cmap,
            dashed=True,
        )
    ax.set_xscale("log")  # plain labels, 1-2-5: `plots._log_axes`
    ax.set_yscale("log")
    ax.set_xlabel("skew: longest request / mean request")
    ax.set_ylabel("latency per call (µs)")
    r = g.iloc[0]
    ax.set_title(f"same total {human_tokens(r['total_kv'])} tokens, {_group_title(r)}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def _padding_panel(
    ax: Any, padded: pd.DataFrame, ragged: pd.DataFrame, kv_dtype: str, cmap: dict[str, Any]
) -> None:
    """Padded/ragged latency ratio per backend and ragged batch, with its interval."""
    costs = [c for c in padding_cost(padded, ragged) if c.kv_dtype == kv_dtype]
    if not costs:
        ax.set_visible(False)
        return
    batches = list(dict.fromkeys(c.batch for c in costs))
    backends = sorted({c.backend for c in costs})
    width = 0.8 / max(1, len(backends))
    for j, backend in enumerate(backends):
        mine = {c.batch: c.estimate for c in costs if c.backend == backend}
        offset = (j - (len(backends) - 1) / 2) * width
        xs = [i + offset for i, bt in enumerate(batches) if bt in mine]
        est = [mine[bt] for bt in batches if bt in mine]
        ax.bar(
            xs,
            [e.ratio for e in est],
            width,
            color=cmap[backend],
            label=backend,
            yerr=np.array([(e.ratio - e.ci_low, e.ci_high - e.ratio) for e in est]).T,
            capsize=2,
        )
    ax.set_xticks(
        range(len(batches)),
        [short_batch(b) for b in batches],
        fontsize=8,
        rotation=30,
        ha="right",
        rotation_mode="anchor",
    )
    ax.set_yscale("log")
    ax.axhline(1, color="k", lw=0.8)
    ax.set_xlabel(f"ragged batch ({kv_dtype} KV), by rising skew")
    ax.set_ylabel("padded latency / ragged latency")
    ax.set_title("cost of padding every request to the longest", fontsize=10)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7)


def raggedness(ok: pd.DataFrame, label: str) -> Drawing | None:
    """Latency vs skew (max/mean) at the same total KV tokens, ragged (solid) beside each
    batch's padded twin (dashed), and the padded/ragged latency ratio per backend."""
    dec = ok[ok["kind"] == "decode"]
    ragged = dec[~dec["padded"]]
    keys = ["num_qo_heads", "num_kv_heads", "head_dim", "batch_size", "dtype", "kv_dtype"]
    keys += ["page_size", "total_kv"]
    skews = ragged["skew"].round(3).groupby([ragged[k] for k in keys]).transform("nunique")
    several = ragged[skews >= 2]  # the rows of shapes at 2 skews or more: not a frame per shape
    series = [g for _, g in several.groupby(keys) if g["skew"].round(3).nunique() >= 2]
    series = sorted(series, key=lambda g: -g["skew"].round(3).nunique())[:2]
    padded = dec[dec["padded"]]
    if not series and padded.empty:
        return None
    series_dtype = str(series[0]["kv_dtype"].iloc[0]) if series else str(padded["kv_dtype"].iloc[0])
    cmap = colors(dec["backend"])
    twin_skew = dict(zip(ragged["lengths"], ragged["skew"], strict=False))
    fig, axes = _stacked(len(series), not padded.empty)
    for ax, g in zip(axes, series, strict=False):
        _skew_panel(ax, g, padded, twin_skew, cmap)
    if not padded.empty:
        _padding_panel(axes[len(series)], padded, ragged, series_dtype, cmap)
    return _finish(fig, "Degradation with raggedness", label, shared_legend=True)


FP8_FIELDS = (
    *("pair", "backend", "kv_dtype", "kind", "uniform", "kv_max", "latency_us"),
    *("ci_low_us", "ci_high_us", "min_us", "max_us", "samples_us"),
    *("num_qo_heads", "num_kv_heads", "head_dim", "batch_size", "page_size"),
)
"""What the fp8 figure reads of a row (its timing, `compare.Timing.of`)."""
FIGURE_BOOT = 200
"""Bootstrap replicates for a figure's error bars (the decisions use `compare.N_BOOT`)."""


Curve = list[tuple[str, float, float]]
"""(case without its context, context, 16-bit latency / fp8 latency) of one backend format."""


def _fp8_pairs(ok: pd.DataFrame) -> tuple[list[tuple[str, str, Any, int]], dict[str, Curve]]:
    """Per (backend, fp8 format) with timed 16-bit twins: (backend, format, geomean ratio
    estimate, cases), and the uniform-decode speed-up along context per (backend format)."""
    drop = ("kv_dtype",)
    a, b = add_key(ok[~ok["fp8"]], "pair", drop), add_key(ok[ok["fp8"]], "pair", drop)
    a, b = a[list(FP8_FIELDS)], b[list(FP8_FIELDS)]  # records of 70 columns are slow to build
    bars: list[tuple[str, str, Any, int]] = []
    curves: dict[str, Curve] = {}
    base_by = {be: dict(zip(g["pair"], records(g), strict=True)) for be, g in a.groupby("backend")}
    for (backend, kv), g in b.groupby(["backend", "kv_dtype"]):
        base = base_by.get(backend, {})
        recs = [(base[k], r) for k, r in zip(g["pair"], records(g), strict=True) if k in base]
        if not recs:
            continue
        pairs = [(Timing.of(r), Timing.of(s)) for s, r in recs]  # fp8 as A: ratio = 16-bit / fp8
        bars.append(
            (
                str(backend),
                str(kv),
                geomean_ratio(pairs, np.random.default_rng(SEED), n_boot=FIGURE_BOOT),
                len(pairs),
            )
        )
        for s, r in recs:
            if r["kind"] == "decode" and r["uniform"]:
                curves.setdefault(f"{backend} {kv}", []).append(
                    (_case(r), float(r["kv_max"]), s["latency_us"] / r["latency_us"])
                )
    return bars, curves


def _case(r: Any) -> str:
    return (
        f"h{r['num_qo_heads']}/{r['num_kv_heads']} d{r['head_dim']} bs{r['batch_size']} "
        f"p{r['page_size']}"
    )


def along_context(
    curves: dict[str, Curve],
) -> tuple[str, dict[str, tuple[list[float], list[float]]]]:
    """One case for every line: the case (heads, batch size, page size) timed at the most
    (backend format, context) points, and per backend format its speed-up at each context
    of that case (a repeated row: the geometric mean), so no line jumps between cases that
    share a context."""
    counts: dict[str, int] = {}
    for pts in curves.values():
        for case, _, _ in pts:
            counts[case] = counts.get(case, 0) + 1
    if not counts:
        return "", {}
    case = max(sorted(counts), key=lambda c: counts[c])
    out = {}
    for name, pts in sorted(curves.items()):
        by: dict[float, list[float]] = {}
        for c, x, y in pts:
            if c == case and y > 0 and math.isfinite(y):
                by.setdefault(x, []).append(math.log(y))
        if by:
            xs = sorted(by)
            out[name] = (xs, [math.exp(sum(by[x]) / len(by[x])) for x in xs])
    return case, out


def _fp8_bars(ax: Any, bars: list[tuple[str, str, Any, int]], cmap: dict[str, Any]) -> None:
    """Horizontal bars, fastest on top, each labelled at its end: no label overlaps another."""
    bars = sorted(bars, key=lambda t: t[2].ratio)
    ys = np.arange(len(bars))
    vals = [t[2].ratio for t in bars]
    errs = np.array([(t[2].ratio - t[2].ci_low, t[2].ci_high - t[2].ratio) for t in bars]).T
    ax.barh(ys, vals, xerr=errs, color=[cmap[t[0]] for t in bars], capsize=2, height=0.7)
    for y, t in zip(ys, bars, strict=True):
        ax.text(t[2].ci_high + 0.02, y, f"{t[2].ratio:.2f}x", va="center", fontsize=7.5)
    ax.set_yticks(ys, [f"{t[0]} {t[1]} ({t[3]})" for t in bars], fontsize=7.5)
    ax.axvline(1, color="k", lw=0.8)
    ax.set_xlim(0, max(t[2].ci_high for t in bars) * 1.15)
    ax.set_xlabel("16-bit latency / fp8 latency (geomean, 95% CI)")
    ax.set_title("fp8 KV speed-up per backend (timed cases in brackets)", fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)


def fp8_vs_16bit(ok: pd.DataFrame, everything: pd.DataFrame, label: str) -> Drawing | None:
    """Speed-up of fp8 KV over 16-bit KV per backend (same cases otherwise), and along
    context. Backends whose fp8 rows were all refused or failed get no bar (the section's
    table lists them)."""
    bars, curves = _fp8_pairs(ok)
    if not bars:
        return None
    cmap = colors(everything["backend"])
    fig, axes = _figure(2, width=6.5, height=max(4.2, 0.9 + 0.2 * len(bars)))
    _fp8_bars(axes[0], bars, cmap)
    ax = axes[1]
    case, lines = along_context(curves)
    style = series_styles(everything["backend"])
    for name, (xs, ys) in lines.items():
        backend, fmt = name.split(" ")
        st = style[backend] | {"ls": "--" if fmt == "fp8_e5m2" else "-"}
        ax.plot(xs, ys, ms=4, label=name, mfc="none" if fmt == "fp8_e5m2" else None, **st)
    if lines:
        _tokens_axis(ax)
        ax.axhline(1, color="k", lw=0.8)
        ax.set_xlabel("context length per request (uniform decode)")
        ax.set_ylabel("16-bit latency / fp8 latency")
        ax.set_title(f"fp8 speed-up along context, decode {case}", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    else:
        ax.set_visible(False)
    return _finish(fig, "fp8 vs 16-bit KV cache", label, shared_legend=True)


MAX_WORKLOAD_PANELS = 6


def by_axis(ok: pd.DataFrame, kind: str, label: str) -> Drawing | None:
    """Tree verification (latency vs context, one panel per tree shape, fewest draft tokens
    first) or shared prefix (latency vs prefix length, one panel per batch size, smallest
    first; only the suffix family with most rows, so synthetic and trace prefixes never share
    a line)."""
    rows = ok[(ok["kind"] == kind) & ~ok["fp8"]]
    if rows.empty:
        return None
    if kind == "tree":
        rows = rows.assign(x=rows["kv_max"] - rows["tree_nodes"])
        panel, xlabel, title = (
            ["tree_nodes", "tree"],
            "context length per request (tokens)",
            "Draft-tree verification",
        )
    else:
        fam = rows["lengths"].map(family)
        rows = rows[fam == fam.value_counts().index[0]]
        rows = rows.assign(x=rows["shared_prefix_len"])
        panel, xlabel = ["batch_size"], "shared prefix length (tokens)"
        title = f"Shared prefix ({family(str(rows['lengths'].iloc[0]))})"
    groups = [g for _, g in sorted(rows.groupby([*panel, "dtype"]), key=lambda kv: kv[0])]
    groups = groups[:MAX_WORKLOAD_PANELS]
    cmap = colors(rows["backend"])
    ncols = min(2, len(groups))
    fig, axes = _figure(ncols, math.ceil(len(groups) / ncols))
    for ax, g in zip(axes, groups, strict=False):
        if kind == "tree":  # one batch size per panel: the most measured
            g = g[g["batch_size"] == g["batch_size"].mode().iloc[0]]
        _lines(ax, g, "x", cmap)
        if g["x"].nunique() > 1:
            _tokens_axis(ax)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("latency per call (µs)")
        r = g.iloc[0]
        extra = f"{r['tree']} ({r['tree_nodes']} tokens)" if kind == "tree" else ""
        ax.set_title(f"{extra} {_group_title(r)}".strip(), fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes[len(groups) :]:
        ax.set_visible(False)
    return _finish(fig, title, label, shared_legend=True)


WIDE_RANGE = 20.0
"""Latencies spanning more than this factor are drawn on log axes."""


def predicted_vs_measured(
    points: dict[str, list[tuple[float, float]]], target_p90: float, label: str
) -> Drawing | None:
    """Each validated step's (measured, predicted) per-call latency, one colour per variant,
    with the y = x line and the ±`target_p90` band (left), and the relative error against the
    measured latency (right)."""
    pts = {n: [(m, p) for m, p in v if m > 0 and p > 0] for n, v in sorted(points.items())}
    pts = {n: v for n, v in pts.items() if v}
    if not pts:
        return None
    cmap, mk = colors(list(pts)), markers(list(pts))
    every = np.array([xy for v in pts.values() for xy in v])
    lo, hi = float(every.min()), float(every.max())
    log = hi / lo > WIDE_RANGE
    fig, (ax, ax_err) = _figure(2, width=6.4, height=5.0)
    for name, v in pts.items():
        m, p = np.array(v).T
        style = dict(s=14, alpha=0.7, color=cmap[name], marker=mk[name], edgecolors="none")
        ax.scatter(m, p, label=f"{name} ({len(v)})", **style)
        ax_err.scatter(m, 100 * (p / m - 1), **style)
    line = np.geomspace(lo * 0.9, hi * 1.1, 50) if log else np.linspace(lo * 0.9, hi * 1.1, 50)
    ax.plot(line, line, color="k", lw=0.9, label="predicted = measured")
    for f in (1 - target_p90, 1 + target_p90):
        ax.plot(line, f * line, color="k", lw=0.7, ls=":")
    for e in (target_p90, -target_p90):
        ax_err.axhline(100 * e, color="k", lw=0.7, ls=":")
    ax_err.axhline(0, color="k", lw=0.9)
    for a in (ax, ax_err):
        if log:
            a.set_xscale("log")
        a.set_xlabel("measured latency per call (µs)")
        a.grid(True, which="both", alpha=0.3)
    if log:
        ax.set_yscale("log")
    ax.set_ylabel("predicted latency per call (µs)")
    ax.set_title(f"predicted vs measured per step (dotted: ±{target_p90:.0%})", fontsize=10)
    ax_err.set_ylabel("predicted / measured - 1 (%)")
    ax_err.set_title("error per step", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", markerscale=1.5)
    return _finish(fig, "Replay cost models vs live GPU steps", label)
