"""Figures of the study sections: where a cascade beats plain decode (shared prefixes), how
busy the SMs are on uniform vs ragged batches (Nsight Compute), and MLA against both measured
ceilings (fraction of the matmul ceiling vs context; a roofline). Same conventions as
`attnbench.report.plots` (a `Drawing` or None; matplotlib imported inside; stamped with `label`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from attnbench.analysis.cascade import Crossover
from attnbench.analysis.fidelity import CLAIM_IDLE_PCT, SM_BATCHES, SmActivity, batch_order
from attnbench.analysis.frame import human_tokens
from attnbench.report.blocks import Drawing
from attnbench.report.plots import KIND_MARKERS, _figure, _finish, _plt, _tokens_axis, colors

MAX_GROUPS = 2


RATIO_TICKS = (0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7, 10, 15, 20, 30, 50, 100)


def _ratio_ticks(ax: Any, values: Sequence[float]) -> None:
    """Ratio ticks (0.5, 0.75, 1, 1.5, 2, 3, 5...) on a log axis, no crowded minor labels."""
    from matplotlib.ticker import FixedLocator, NullLocator

    lo, hi = min([*values, 1.0]), max([*values, 1.0])
    ticks = [t for t in RATIO_TICKS if lo / 1.3 <= t <= hi * 1.3]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_minor_locator(NullLocator())


def cascade_speedup(groups: Sequence[Crossover], label: str) -> Drawing | None:
    """Best cascade speedup over the best plain decode variant against batch size, one line per
    prefix length, one panel per group; filled markers where the cascade wins significantly."""
    groups = [g for g in groups if g.points][:MAX_GROUPS]
    if not groups:
        return None
    fig, axes = _figure(len(groups), width=6.4, height=4.6)
    for ax, grp in zip(axes, groups, strict=True):
        prefixes = grp.prefix_lens
        ramp = _plt().get_cmap("viridis")  # longer prefix, lighter line
        cmap = {str(p): ramp(0.85 * i / max(len(prefixes) - 1, 1)) for i, p in enumerate(prefixes)}
        for pl in prefixes:
            pts = sorted((p for p in grp.points if p.prefix_len == pl), key=lambda p: p.batch_size)
            xs = [p.batch_size for p in pts]
            ys = [p.speedup for p in pts]
            lo = [max(y - p.speedup_ci[0], 0.0) for y, p in zip(ys, pts, strict=True)]
            hi = [max(p.speedup_ci[1] - y, 0.0) for y, p in zip(ys, pts, strict=True)]
            color = cmap[str(pl)]
            ax.errorbar(xs, ys, yerr=np.array([lo, hi]), color=color, lw=1.5, capsize=2)
            ax.plot(xs, ys, "-", color=color, label=f"prefix {human_tokens(pl)}")
            wins = [p.verdict == "wins" for p in pts]
            ax.scatter(
                [x for x, w in zip(xs, wins, strict=True) if w],
                [y for y, w in zip(ys, wins, strict=True) if w],
                color=color,
                s=30,
                zorder=3,
            )
            ax.scatter(
                [x for x, w in zip(xs, wins, strict=True) if not w],
                [y for y, w in zip(ys, wins, strict=True) if not w],
                facecolors="white",
                edgecolors=color,
                s=30,
                zorder=3,
            )
        ax.axhline(1, color="k", lw=1, ls="--", label="1x: cascade = best plain decode")
        ax.set_xscale("log", base=2)
        batches = grp.batch_sizes
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.minorticks_off()
        ax.set_yscale("log")
        _ratio_ticks(ax, [p.speedup for p in grp.points])
        ax.set_xlabel("batch size (requests sharing the prefix)")
        ax.set_ylabel("best plain latency / best cascade latency")
        ax.set_title(grp.group, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    return _finish(fig, "Cascade speedup over plain decode (filled: significant win)", label)


def sm_activity(activity: Mapping[str, Mapping[str, SmActivity]], label: str) -> Drawing | None:
    """SM active % and achieved occupancy per decode kernel on the uniform, mixed and 4-long
    batches (same total KV), with the brief's claim (62% idle = 38% active) drawn in."""
    backends = sorted(b for b, by in activity.items() if any(a.sm_active_pct for a in by.values()))
    if not backends:
        return None
    batches = sorted(
        {b for be in backends for b in activity[be]}, key=lambda b: (batch_order(b), b)
    )
    cmap = colors(list(SM_BATCHES) + [b for b in batches if b not in SM_BATCHES])
    fig, axes = _figure(2, width=6.4, height=4.6)
    width = 0.8 / len(batches)
    xs = np.arange(len(backends))
    for ax, attr, title in (
        (axes[0], "sm_active_pct", "SM active (% of elapsed cycles, ncu)"),
        (axes[1], "occupancy_pct", "achieved occupancy (% of peak warps, ncu)"),
    ):
        for j, batch in enumerate(batches):
            vals = [getattr(activity[be].get(batch), attr, None) for be in backends]
            ax.bar(
                xs + (j - (len(batches) - 1) / 2) * width,
                [v if v is not None else 0.0 for v in vals],
                width,
                color=cmap[batch],
                label=f"{batch} batch",
            )
        if attr == "sm_active_pct":
            ax.axhline(
                100 - CLAIM_IDLE_PCT,
                color="#aa0000",
                ls="--",
                lw=1.2,
                label=f"brief: {CLAIM_IDLE_PCT:.0f}% idle",
            )
        ax.set_xticks(xs, backends, rotation=25, ha="right", fontsize=8)
        ax.set_ylim(0, 105)
        ax.set_ylabel("%")
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="lower left", framealpha=0.9)
    return _finish(fig, "SM activity on batches of one total KV, uniform to ragged", label)


BATCH_STYLES = ("-", "--", ":", "-.")


def mla_ceilings(ok: pd.DataFrame, ceilings: Mapping[str, Any], label: str) -> Drawing | None:
    """MLA rows against both measured ceilings. Left: % of the matmul ceiling vs context per
    kernel (uniform decode; one line style per batch size). Right: a roofline (TFLOP/s vs FLOP
    per byte) with the copy-bandwidth slope, the matmul roof and their ridge: MLA decode with
    many heads on one latent sits right of the ridge, where the matmul roof binds."""
    rows = ok[ok["tflops"].notna() & ok["intensity"].notna()]
    if rows.empty:
        return None
    cmap = colors(sorted(set(rows["backend"])))
    fig, axes = _figure(2, width=6.4, height=4.8)
    ax = axes[0]
    dec = rows[(rows["kind"] == "decode") & rows["uniform"] & rows["tflops_frac_measured"].notna()]
    batches = sorted(set(dec["batch_size"]))
    for (backend, bs), g in dec.groupby(["backend", "batch_size"]):
        g = g.sort_values("kv_max")
        style = BATCH_STYLES[batches.index(bs) % len(BATCH_STYLES)]
        ax.plot(
            g["kv_max"],
            100 * g["tflops_frac_measured"],
            style,
            marker="o",
            ms=4,
            color=cmap[str(backend)],
            label=f"{backend} bs{bs}",
        )
    if dec.empty:
        ax.text(0.5, 0.5, "no uniform decode rows", ha="center", transform=ax.transAxes)
    else:
        _tokens_axis(ax)
        ax.set_ylim(0, max(100.0, 100 * float(dec["tflops_frac_measured"].max()) * 1.1))
    ax.axhline(100, color="k", lw=0.8)
    ax.set_xlabel("context length per request (tokens)")
    ax.set_ylabel("% of the measured matmul ceiling")
    ax.set_title("MLA decode: TFLOP/s / measured matmul TFLOP/s", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6.5, loc="upper left", ncol=2)
    _roofline_panel(axes[1], rows, ceilings, cmap)
    return _finish(fig, "MLA against the measured ceilings", label)


def _roofline_panel(
    ax: Any, rows: pd.DataFrame, ceilings: Mapping[str, Any], cmap: Mapping[str, Any]
) -> None:
    for (backend, kind), g in rows.groupby(["backend", "kind"]):
        ax.scatter(
            g["intensity"],
            g["tflops"],
            color=cmap[str(backend)],
            marker=KIND_MARKERS.get(str(kind), "x"),
            s=26,
            alpha=0.9,
            label=f"{backend} {kind}",
        )
    copy = ceilings.get("copy_bandwidth_gbps")
    mm = (ceilings.get("matmul_tflops") or {}).get(str(rows.iloc[0]["dtype"]))
    lo = max(float(rows["intensity"].min()) / 4, 1.0)
    hi = float(rows["intensity"].max()) * 2
    if copy and mm:
        ridge = mm * 1e3 / copy  # FLOP per byte where the two roofs meet
        lo = min(lo, ridge / 4)
        xs = np.logspace(math.log10(lo), math.log10(hi), 200)
        ax.plot(xs, np.minimum(copy * xs / 1e3, mm), "k-", lw=1.2, label="measured roofs")
        ax.plot(xs, copy * xs / 1e3, "k:", lw=0.8, label=f"copy {copy:.0f} GB/s")
        ax.axhline(mm, color="k", ls="--", lw=0.8, label=f"matmul {mm:.0f} TFLOP/s")
        ax.axvline(ridge, color="#aa0000", ls="--", lw=1, label=f"ridge {ridge:.0f} FLOP/B")
    ax.set_xscale("log")
    ax.set_yscale("log")
    top = max(float(rows["tflops"].max()), mm or 0.0) * 1.6
    ax.set_ylim(max(float(rows["tflops"].min()) / 3, 0.1), top)
    ax.set_xlabel("arithmetic intensity (FLOP / byte moved)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title("MLA roofline: copy bandwidth and matmul ceilings", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6.5, loc="lower right")
