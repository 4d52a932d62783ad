"""The first screen's figure: decode time per batch-size bucket of every deployable
configuration, one panel per engine, one line per configuration (`report.first_screen`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from attnbench.report.blocks import Drawing
from attnbench.report.plots import _figure, _finish, colors


@dataclass(frozen=True)
class BucketPanel:
    """One engine's panel: its title, the chosen configuration, and per configuration the
    decode time (µs per step and layer) per measured batch size."""

    title: str
    choice: str | None
    per_batch_us: Mapping[str, Mapping[int, float]]


def bucket_decode(panels: Sequence[BucketPanel], label: str) -> Drawing | None:
    """x: the measured batch sizes the capture buckets are priced at (log 2); y: decode
    attention time per step and layer (µs); the engine's choice drawn thicker. The phone
    rendition has the panels one above the other, each legend in one column."""
    panels = [d for d in panels if d.per_batch_us]
    if not panels:
        return None
    fig, axes = _figure(len(panels), width=6.5, height=3.3)
    cmap = colors([c for d in panels for c in d.per_batch_us])
    for ax, d in zip(axes, panels, strict=True):
        _bucket_panel(ax, d, cmap)
    return _finish(fig, "Decode time per bucket, deployable configurations", label)


def _bucket_panel(ax: Any, d: BucketPanel, cmap: Mapping[str, Any]) -> None:
    """One engine's lines; its legend below the axis label (the figure grows to hold it)."""
    for config, times in sorted(d.per_batch_us.items()):
        xs = sorted(times)
        chosen = config == d.choice
        ax.plot(
            xs,
            [times[x] for x in xs],
            "o-",
            lw=3 if chosen else 1.4,
            ms=6 if chosen else 4,
            color=cmap[config],
            label=config + (" (chosen)" if chosen else ""),
        )
    batches = sorted({x for t in d.per_batch_us.values() for x in t})
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.set_xlabel("batch size bucket (running requests)")
    ax.set_ylabel("decode µs per step, layer")
    ax.set_title(d.title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(  # below the tick labels and axis label (about 40 pt: 5 legend font sizes)
        fontsize=8,
        loc="upper center",
        bbox_to_anchor=(0.5, 0),
        borderaxespad=5.2,
        ncol=2,
    )
