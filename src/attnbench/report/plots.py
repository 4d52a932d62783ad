"""Figures of the report, each a `Drawing` (the PNG for the page and one for phones) or None
when its rows do not exist.

Every function takes the ok rows of one GPU (`analysis.frame.ok_rows`), draws with matplotlib's Agg
backend (imported inside the function: `import attnbench.report.plots` stays cheap) and stamps the
figure with `label` (GPU, library versions, date) under the plot.
"""

from __future__ import annotations

import functools
import io
import math
import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from attnbench.analysis.frame import dtype_label, human_tokens, shape_label
from attnbench.report.blocks import Drawing
from attnbench.report.plot_layout import (
    NARROW_WIDTH_IN,
    column_layout,
    legend_hides_data,
    prepare_axes,
    wrap_to,
)

KIND_MARKERS = {"decode": "o", "prefill": "^", "append": "s", "tree": "D", "shared_prefix": "P"}
MAX_PANELS = 4


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Chosen for speed, with no visible change at 100 dpi: unhinted glyphs (FreeType's
    # auto-hinter took a sixth of each draw); panel titles fixed at the top of their panel,
    # where matplotlib's automatic placement puts them when nothing is drawn above it (none
    # of ours draws anything there, and no axis shows an offset text), instead of measuring
    # every panel's y axis for each title at each draw.
    matplotlib.rcParams.update(
        {"text.hinting": "no_hinting", "axes.titley": 1.0, "axes.formatter.useoffset": False}
    )
    return plt


def preload() -> None:
    """Import what drawing needs (matplotlib's Agg, Pillow) now: a build that forks workers
    imports them once, before the fork. (No scipy: its statistics took 1 s to import, and
    the report's tests are hand-written, `analysis.compare`.)"""
    import PIL.Image  # noqa: F401

    _plt()


SERIES_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
SERIES_LINESTYLES = ("-", "--", ":", "-.")


def series_styles(names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """One stable style per name (sorted): a color of tab10 (tab20 beyond 10 names) and, for
    each further round of the palette, another marker and line style, so no two series of a
    legend share color, marker and line style (the roofline's 33 variants: two rounds of
    tab20). Keys `color`, `marker`, `ls`, to splat into `plot` (`scatter` takes the first
    two)."""
    plt = _plt()
    ordered = sorted(set(names))
    cmap = plt.get_cmap("tab10" if len(ordered) <= 10 else "tab20")
    out = {}
    for i, name in enumerate(ordered):
        turn = i // cmap.N
        out[name] = {
            "color": cmap(i % cmap.N),
            "marker": SERIES_MARKERS[turn % len(SERIES_MARKERS)],
            "ls": SERIES_LINESTYLES[turn % len(SERIES_LINESTYLES)],
        }
    return out


def colors(backends: Sequence[str]) -> dict[str, Any]:
    """One stable color per backend (`series_styles`' color)."""
    return {b: st["color"] for b, st in series_styles(backends).items()}


def markers(backends: Sequence[str]) -> dict[str, str]:
    """One marker per backend (`series_styles`): the color repeats beyond the palette, the
    marker then differs."""
    return {b: st["marker"] for b, st in series_styles(backends).items()}


def _figure(ncols: int, nrows: int = 1, width: float = 6.0, height: float = 4.2) -> Any:
    plt = _plt()
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    return fig, [ax for row in axes for ax in row]


MAX_AXES_LEGEND = 6
"""More series than this: one legend for the whole figure, below the panels."""
LEGEND_ROW_IN = 0.19
"""Height of one row of a figure legend (fontsize 8), inches."""


def _shared_legend(fig: Any, foot_in: float) -> float:
    """Replace the panels' legends by one legend below them, in as many columns as the width
    holds; the figure grows by the legend's height (nothing runs over the footer). Returns the
    height taken at the bottom (footer and legend), inches; `foot_in` when nothing moved."""
    by_label: dict[str, Any] = {}
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            by_label.setdefault(lab, h)
    if len(by_label) <= MAX_AXES_LEGEND:
        return foot_in
    for ax in fig.axes:
        if ax.get_legend():
            ax.get_legend().remove()
    names = sorted(by_label)
    width_in, height_in = fig.get_size_inches()
    col_in = 0.55 + 0.068 * max(len(n) for n in names)
    ncol = max(1, min(len(names), int(width_in / col_in)))
    legend_in = LEGEND_ROW_IN * math.ceil(len(names) / ncol) + 0.15
    fig.set_size_inches(width_in, height_in + legend_in)
    fig.legend(  # placed in inches: the phone rendition changes the figure's height
        [by_label[n] for n in names],
        names,
        loc="upper center",
        bbox_to_anchor=(width_in / 2, foot_in + legend_in),
        bbox_transform=fig.dpi_scale_trans,
        ncol=ncol,
        fontsize=8,
        frameon=False,
    )
    return foot_in + legend_in


def _footer_lines(label: str, width_in: float) -> list[str]:
    return textwrap.wrap(label, width=int(width_in * 15)) or [""]


def _finish(fig: Any, title: str, label: str, shared_legend: bool = False) -> Drawing:
    """The figure titled, stamped with `label` below and drawn twice: laid out for the page
    (`_lay_out`), then the same artists laid out again for phones (`_narrow`)."""
    texts = _lay_out(fig, title, label, shared_legend)
    png = _png(fig)
    narrow = _narrow(fig, texts, label)
    _plt().close(fig)
    return Drawing(png, narrow)


def _lay_out(fig: Any, title: str, label: str, shared_legend: bool) -> tuple[Any, Any]:
    """The page's layout: the title above, `label` below, panel legends of more than
    MAX_AXES_LEGEND entries made one below the panels (`shared_legend`), a legend over data
    moved beside its panel. Returns the title and the label's text artists."""
    sup = fig.suptitle(title, fontsize=13, fontweight="bold")
    lines = _footer_lines(label, fig.get_size_inches()[0])
    foot = fig.text(0.5, 0.003, "\n".join(lines), ha="center", va="bottom", fontsize=8)
    foot.set_color("#555555")
    foot_in = 0.16 * len(lines) + 0.08
    if shared_legend:
        foot_in = _shared_legend(fig, foot_in)
    height_in = fig.get_size_inches()[1]
    for ax in fig.axes:
        if ax.get_visible():
            _log_axes(ax)
    rect = (0, foot_in / height_in, 1, 1 - 0.3 / height_in)
    _tight_layout(fig, rect)
    moved = [ax for ax in fig.axes if legend_hides_data(fig, ax)]
    for ax in moved:  # beside the panel instead (single-rate replays stack every point at one x)
        ax.legend(
            *ax.get_legend_handles_labels(),
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            fontsize=7,
            frameon=False,
            borderaxespad=0,
        )
    if moved:
        _tight_layout(fig, rect)
    return sup, foot


def _tight_layout(fig: Any, rect: tuple[float, float, float, float]) -> None:
    """`fig.tight_layout(rect=rect)` at a fraction of the cost, to the same layout: no spine
    is measured (each ends inside its axis' tick labels), and each panel is measured once
    (with a `rect`, tight_layout measures every panel twice, at the same place)."""
    for ax in fig.axes:
        for spine in ax.spines.values():
            spine.set_in_layout(False)
        ax.get_tightbbox = functools.cache(ax.get_tightbbox)
    try:
        fig.tight_layout(rect=rect)
    finally:
        for ax in fig.axes:
            del ax.get_tightbbox


def _narrow(fig: Any, texts: tuple[Any, Any], label: str) -> bytes:
    """The phone rendition of a drawn figure: its panels one above the other,
    `NARROW_WIDTH_IN` wide (`plot_layout.column_layout`), the title, the label and a shared
    legend re-flowed to that width. The artists are the wide figure's: nothing is plotted or
    computed again, which keeps the second rendition cheap."""
    sup, foot = texts
    prepare_axes(fig)
    fig.set_size_inches(NARROW_WIDTH_IN, fig.get_size_inches()[1])
    sup.set_text(wrap_to(sup.get_text(), NARROW_WIDTH_IN - 0.3, sup.get_fontsize() * 1.1))
    lines = _footer_lines(label, NARROW_WIDTH_IN)
    foot.set_text("\n".join(lines))
    foot_in = 0.16 * len(lines) + 0.08
    for ax in fig.axes:
        _log_axes(ax, NARROW_MINOR_LABELS)
    if fig.legends:  # the shared legend, in as many columns as the narrow width holds
        for legend in list(fig.legends):
            legend.remove()
        foot_in = _shared_legend(fig, foot_in)
    column_layout(fig, 0.12 + 0.25 * (sup.get_text().count("\n") + 1), foot_in + 0.1)
    sup.set_y(1 - 0.08 / fig.get_size_inches()[1])
    sup.set_verticalalignment("top")
    return _png(fig)


PNG_COLORS = 128
"""Figures are stored as palette PNGs: a fraction of the bytes, no visible loss on plots."""


def _png(fig: Any, dpi: int = 100) -> bytes:
    """The figure drawn (raw RGBA), reduced to a palette and written as PNG."""
    from PIL import Image

    # tight_layout leaves a placeholder layout engine, for which savefig draws the figure
    # twice (a first draw to lay it out): there is nothing left to lay out, so one draw
    fig.set_layout_engine(None)
    buf = io.BytesIO()
    fig.savefig(buf, format="raw", dpi=dpi)
    raw = buf.getvalue()
    width = round(fig.get_size_inches()[0] * dpi)
    image = Image.frombuffer("RGBA", (width, len(raw) // (4 * width)), raw, "raw", "RGBA", 0, 1)
    palette = image.convert("RGB").quantize(PNG_COLORS, method=Image.Quantize.FASTOCTREE)
    out = io.BytesIO()
    palette.save(out, format="PNG")
    return out.getvalue()


MINOR_LABELS = (1.3, 2.6)
"""Decades a log axis may span with every minor tick labelled, and with 2 and 5 labelled."""
NARROW_MINOR_LABELS = (0.65, 3.5)
"""The same for a phone panel (`NARROW_PANEL_IN` tall): 3, 4, 6... only where a decade is
taller than about 3.5 in, and 2 and 5 wherever a decade is 0.6 in at least."""


def _log_labels(axis: Any, spans: tuple[float, float] = MINOR_LABELS) -> None:
    """Plain numbers (30, 100, 2000) on a log axis of base 10 instead of 3x10^1 (math text,
    slow to lay out and draw); minor ticks labelled when the axis spans at most `spans[0]`
    decades (all) or `spans[1]` (2 and 5 only). Beyond `spans[0]` decades, minor ticks (and
    their grid lines) stand at 2 and 5 only: a 1-2-5 grid, with a quarter of the minor tick
    artists, which cost a third of the time a figure takes to draw."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    lo, hi = sorted(axis.get_view_interval())
    span = math.log10(hi / lo) if lo > 0 and hi > lo else 99.0

    def minor(v: float, _: int) -> str:
        if v <= 0:
            return ""
        mantissa = round(v / 10 ** math.floor(math.log10(v)))
        shown = span <= spans[0] or (span <= spans[1] and mantissa in (2, 5))
        return f"{v:g}" if shown else ""

    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(FuncFormatter(minor))
    axis.set_minor_locator(LogLocator(subs="auto" if span <= spans[0] else (2.0, 5.0)))


def _log_axes(ax: Any, spans: tuple[float, float] = MINOR_LABELS) -> None:
    """`_log_labels` on each log axis of base 10: every y axis, and an x axis only where it
    keeps matplotlib's labels (the x axes of token counts keep their own)."""
    from matplotlib.ticker import LogFormatterMathtext

    for axis in (ax.xaxis, ax.yaxis):
        own = axis is ax.xaxis and not isinstance(axis.get_major_formatter(), LogFormatterMathtext)
        if axis.get_scale() == "log" and axis.get_transform().base == 10 and not own:
            _log_labels(axis, spans)


def _tokens_axis(ax: Any) -> None:
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: human_tokens(v)))


def _err(g: pd.DataFrame) -> np.ndarray:
    """Error bars [2, n] from the median's 95% CI (zero where unknown)."""
    lo = g["latency_us"] - g["ci_low_us"].astype(float).fillna(g["latency_us"])
    hi = g["ci_high_us"].astype(float).fillna(g["latency_us"]) - g["latency_us"]
    out: np.ndarray = np.clip(np.vstack([lo, hi]).astype(float), 0, None)
    return out


def _group_title(r: pd.Series) -> str:
    return f"{r['kind']} {shape_label(r)} bs{r['batch_size']} {dtype_label(r)} p{r['page_size']}"


def _lines(ax: Any, rows: pd.DataFrame, x: str, cmap: dict[str, Any], dashed: bool = False) -> None:
    mk = markers(list(cmap))  # the same sorted names as `cmap`'s: its markers
    for backend, g in rows.groupby("backend"):
        g = g.sort_values(x)
        name = str(backend) + (" (padded)" if dashed else "")
        ax.errorbar(
            g[x],
            g["latency_us"],
            yerr=_err(g),
            label=name,
            color=cmap[str(backend)],
            marker=mk.get(str(backend), "o"),
            ms=4,
            lw=1.5,
            capsize=2,
            ls="--" if dashed else "-",
            mfc="none" if dashed else None,
        )


def _context_groups(ok: pd.DataFrame) -> list[pd.DataFrame]:
    """Uniform decode rows per shape (heads, batch, dtypes, page size) with >= 2 contexts,
    the groups with most contexts first."""
    rows = ok[(ok["kind"] == "decode") & ok["uniform"] & ~ok["padded"]]
    if rows.empty:
        return []
    keys = ["model", "num_qo_heads", "num_kv_heads", "head_dim", "batch_size", "dtype", "kv_dtype"]
    keys += ["page_size"]
    groups = sorted(rows.groupby(keys), key=lambda kv: (-kv[1]["kv_max"].nunique(), str(kv[0])))
    return [g for _, g in groups if g["kv_max"].nunique() >= 2][:MAX_PANELS]


def latency_vs_context(ok: pd.DataFrame, label: str, relative: bool = False) -> Drawing | None:
    """Decode latency vs context length per backend: uniform batches, one panel per shape.
    `relative`: each latency divided by the fastest backend's at that context (1 = best)."""
    groups = _context_groups(ok)
    if relative:  # a lone backend is always 1.0
        groups = [g for g in groups if g["backend"].nunique() >= 2]
    if not groups:
        return None
    cmap = colors(pd.concat(groups)["backend"])
    style = series_styles(pd.concat(groups)["backend"])
    ncols = min(2, len(groups))
    fig, axes = _figure(ncols, math.ceil(len(groups) / ncols))
    for ax, g in zip(axes, groups, strict=False):
        if relative:
            best = g.groupby("kv_max")["latency_us"].transform("min")
            for backend, b in g.assign(rel=g["latency_us"] / best).groupby("backend"):
                b = b.sort_values("kv_max")
                ax.plot(b["kv_max"], b["rel"], ms=4, label=str(backend), **style[str(backend)])
            ax.axhline(1, color="k", lw=0.8)
            ax.set_yscale("log")  # slow fallbacks (math, flex) must not flatten the leaders
            ax.set_ylabel("latency / fastest at that context (log)")
        else:
            _lines(ax, g, "kv_max", cmap)
            ax.set_yscale("log")
            ax.set_ylabel("latency per call (µs, median, 95% CI)")
        _tokens_axis(ax)
        ax.set_xlabel("context length per request (tokens)")
        ax.set_title(_group_title(g.iloc[0]), fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    for ax in axes[len(groups) :]:
        ax.set_visible(False)
    title = "Decode latency relative to the fastest" if relative else "Decode latency vs context"
    return _finish(fig, title, label, shared_legend=True)


def roofline(ok: pd.DataFrame, ceilings: dict[str, Any], label: str) -> Drawing | None:
    """Roofline (TFLOP/s vs FLOP/byte) with the measured copy and matmul ceilings, plus the
    fraction of the measured ceiling reached by decode (bandwidth) and prefill (compute)."""
    rows = ok[ok["intensity"].notna() & ok["tflops"].notna()]
    if rows.empty:
        return None
    cmap = colors(rows["backend"])
    fig, axes = _figure(3, width=5.6)
    _roofline_panel(axes[0], rows, ceilings, cmap)
    for ax, kind, col, xlabel, title in (
        (
            axes[1],
            "decode",
            "bandwidth_frac_measured",
            "bytes moved per call (MB)",
            "decode: GB/s / measured copy GB/s",
        ),
        (
            axes[2],
            "prefill",
            "tflops_frac_measured",
            "FLOPs per call (GFLOP)",
            "prefill: TFLOP/s / measured matmul",
        ),
    ):
        _fraction_panel(ax, rows, kind, col, cmap, (xlabel, title))
    return _finish(fig, "Achieved bandwidth and TFLOP/s against the measured ceilings", label, True)


def _roofline_panel(
    ax: Any, rows: pd.DataFrame, ceilings: dict[str, Any], cmap: dict[str, Any]
) -> None:
    """Every ok case on the roofline, with the measured copy and matmul ceilings."""
    for (backend, kind), g in rows.groupby(["backend", "kind"]):
        ax.scatter(
            g["intensity"],
            g["tflops"],
            color=cmap[str(backend)],
            marker=KIND_MARKERS.get(str(kind), "x"),
            s=22,
            alpha=0.85,
        )
    copy = ceilings.get("copy_bandwidth_gbps")
    mm = ceilings.get("matmul_tflops") or {}
    xs = np.logspace(
        math.log10(max(rows["intensity"].min() / 2, 0.1)),
        math.log10(rows["intensity"].max() * 2),
        100,
    )
    top = max(mm.values()) if mm else None
    if copy:
        ys = copy * xs / 1e3
        ax.plot(
            xs,
            np.minimum(ys, top) if top else ys,
            "k-",
            lw=1.2,
            label=f"copy {copy:.0f} GB/s (measured)",
        )
    for i, (dtype, tf) in enumerate(sorted(mm.items())):
        ax.axhline(
            tf,
            color="k",
            ls=["--", ":", "-."][i % 3],
            lw=1,
            label=f"matmul {dtype} {tf:.0f} TFLOP/s (measured)",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte moved)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title("roofline: every ok case", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    handles = [  # backend colors are in the neighbouring panels' legends
        ax.scatter([], [], color="grey", marker=m, s=22, label=k)
        for k, m in KIND_MARKERS.items()
        if (rows["kind"] == k).any()
    ]
    ax.legend(handles=handles + ax.get_lines(), fontsize=6.5, loc="lower right", framealpha=0.85)


def _fraction_panel(
    ax: Any,
    rows: pd.DataFrame,
    kind: str,
    col: str,
    cmap: dict[str, Any],
    text: tuple[str, str],
) -> None:
    """The fraction of the measured ceiling each `kind` row reaches (x: its size)."""
    xlabel, title = text
    g = rows[(rows["kind"] == kind) & rows[col].notna()]
    if g.empty:
        ax.text(0.5, 0.5, f"no {kind} rows", ha="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    xcol = g["bytes_total"] / 1e6 if kind == "decode" else g["flops"] / 1e9
    mk = markers(list(cmap))
    for backend in sorted(set(g["backend"])):
        m = g["backend"] == backend
        ax.scatter(
            xcol[m], 100 * g[m][col], s=14, color=cmap[backend], marker=mk[backend], label=backend
        )
    ax.set_xscale("log")
    ax.set_ylim(0, max(105, 100 * float(g[col].max()) * 1.1))
    ax.axhline(100, color="k", lw=0.8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("% of measured ceiling")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
