"""Where a figure's parts go: legends kept off the data, and the phone rendition's layout.

The phone rendition (`Figure.narrow`) is the wide figure's artists laid out again
(`plots._narrow`): its panels one above the other, `NARROW_WIDTH_IN` wide. `prepare_axes`
wraps long titles and axis labels first; `column_layout` then places the panels itself
instead of tight_layout: each gets the room its own title, tick labels, axis labels and
legend take (tight_layout gives every gap the largest one), a legend that would cover data
or run past its panel moves below it in one column, and the figure grows to hold it all, so
nothing is cut.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any

import numpy as np

NARROW_WIDTH_IN = 4.0
"""The phone rendition's width: 400 px, shown at about 360 px on a 390 px screen."""
NARROW_PANEL_IN = 2.3
"""Height of one panel's plotting area in the phone rendition, inches."""
EDGE_IN = 0.08
"""Blank margin at the figure's left and right edges, inches."""
GAP_IN = 0.22
"""Blank space between one panel's lowest label (or legend) and the next panel's title."""
CHAR_EM = 0.6
"""Average glyph width of the figures' font (DejaVu Sans), as a fraction of its size."""
MARKER_PX = 4.0
"""About a marker's radius, pixels: a legend this close to a data point covers part of it."""
MIN_LEGEND_PT = 7.5
"""Legends of the phone rendition are drawn at this size at least, points."""


def _data_points(ax: Any, along_lines: bool = False) -> np.ndarray:
    """Display coordinates [n, 2] of what an axes shows: line vertices (reference lines drawn
    across the axes left out; with `along_lines`, points along each segment too), scatter
    offsets, the tops of bars."""
    ax.get_xlim(), ax.get_ylim()  # settle pending autoscaling: transData must be final
    pts = []
    for line in ax.get_lines():
        if line.get_transform() != ax.transData:
            continue
        xy = np.asarray(line.get_xydata(), dtype=float).reshape(-1, 2)
        if xy.size:
            shown = ax.transData.transform(xy)
            pts.append(_along(line, shown) if along_lines else shown)
    for coll in ax.collections:
        off = np.asarray(coll.get_offsets(), dtype=float).reshape(-1, 2)
        if off.size:
            pts.append(coll.get_offset_transform().transform(off))
    tops = [(p.get_x() + p.get_width() / 2, p.get_y() + p.get_height()) for p in _bars(ax)]
    if tops:
        pts.append(ax.transData.transform(np.asarray(tops, dtype=float)))
    if not pts:
        return np.empty((0, 2))
    out: np.ndarray = np.concatenate(pts)
    kept: np.ndarray = out[np.isfinite(out).all(axis=1)]
    return kept


SEGMENT_POINTS = 12
"""Points looked at along each segment of a drawn line (`_along`)."""


def _along(line: Any, xy: np.ndarray) -> np.ndarray:
    """A line's display vertices and points along each segment between them (none for a
    line of markers only)."""
    if len(xy) < 2 or line.get_linestyle() in ("None", "", " "):
        return xy
    t = np.linspace(0.0, 1.0, SEGMENT_POINTS)[:, None, None]
    out: np.ndarray = (xy[:-1] + t * (xy[1:] - xy[:-1])).reshape(-1, 2)
    return out


def legend_hides_data(fig: Any, ax: Any, strict: bool = False) -> bool:
    """True when a legend inside the axes sits over one of its data points (the top of a bar).
    `strict`: or over any part of a bar or a line, or within `MARKER_PX` of a point."""
    legend = ax.get_legend()
    if legend is None or not legend.get_visible() or not ax.get_visible():
        return False
    renderer = fig.canvas.get_renderer()
    box = legend.get_window_extent(renderer)  # places a `best` legend
    if strict and any(box.overlaps(p.get_window_extent(renderer)) for p in _bars(ax)):
        return True
    if strict:
        box = box.padded(MARKER_PX)
    p = _data_points(ax, along_lines=strict)
    inside = (p[:, 0] >= box.x0) & (p[:, 0] <= box.x1) & (p[:, 1] >= box.y0) & (p[:, 1] <= box.y1)
    return bool(inside.any())


def _bars(ax: Any) -> list[Any]:
    """The axes' bars (rectangles of some height)."""
    return [p for p in ax.patches if hasattr(p, "get_width") and p.get_height()]


def wrap_to(text: str, width_in: float, fontsize: float) -> str:
    """`text` cut into lines of at most `width_in` inches at `fontsize` points (estimated from
    the font's average glyph width); its own line breaks are kept."""
    chars = max(10, int(width_in * 72 / (CHAR_EM * fontsize)))
    return "\n".join(
        "\n".join(textwrap.wrap(line, chars, break_on_hyphens=False)) or line
        for line in text.split("\n")
    )


def prepare_axes(fig: Any) -> None:
    """Hidden panels out of the figure; each panel's title and x label wrapped to the phone
    panel's width, its y label to the panel's height; legends at `MIN_LEGEND_PT` at least."""
    for ax in [a for a in fig.axes if not a.get_visible()]:
        fig.delaxes(ax)
    width_in = NARROW_WIDTH_IN - 1.0  # less the y tick labels and y label
    for ax in fig.axes:
        for text, room in (
            (ax.title, width_in),
            (ax.xaxis.label, width_in),
            (ax.yaxis.label, _panel_height(ax) + 0.3),
        ):
            text.set_text(wrap_to(text.get_text(), room, text.get_fontsize()))
        legend = ax.get_legend()
        for text in legend.get_texts() if legend else []:
            text.set_fontsize(max(text.get_fontsize(), MIN_LEGEND_PT))
        _upright_categories(ax)


def _upright_categories(ax: Any) -> None:
    """Slanted category labels (the raggedness chart's batches, at 30 degrees on the page)
    stand upright on a phone: slanted, a long label runs under its neighbours once the panel
    is `NARROW_WIDTH_IN` wide; upright, each takes one line's width."""
    labels = [t for t in ax.get_xticklabels() if t.get_text()]
    if not labels or not any(t.get_rotation() not in (0.0, 90.0) for t in labels):
        return
    for t in labels:
        t.set_rotation(90)
        t.set_horizontalalignment("center")
        t.set_rotation_mode("default")


def _panel_height(ax: Any) -> float:
    """`NARROW_PANEL_IN`, or more for a bar chart's categories on the y axis: a line each."""
    from matplotlib.ticker import FixedLocator

    if not isinstance(ax.yaxis.get_major_locator(), FixedLocator):
        return NARROW_PANEL_IN
    labels = [t for t in ax.get_yticklabels() if t.get_text()]
    size = labels[0].get_fontsize() if labels else 0.0
    return max(NARROW_PANEL_IN, len(labels) * size * 1.45 / 72 + 0.3)


@dataclass(frozen=True)
class Room:
    """What a panel's labels, ticks and legend take outside its plotting area, inches."""

    left: float
    right: float
    top: float
    bottom: float


GUESS = Room(left=0.9, right=0.15, top=0.45, bottom=0.7)
"""A panel's room before it is measured: the panel is laid out about its final size first,
so the tick labels measured are those it will show."""


def _room(ax: Any, renderer: Any, dpi: float) -> Room:
    """The room the panel's axes, their labels, its title and its legend take: the title's
    and the x label's heights only (`_centre_labels` keeps them inside the figure), and
    nothing of its other artists (the spines and the data stay inside the plotting area:
    measuring them would cost, not change it)."""
    box = ax.get_window_extent(renderer)
    legend = ax.get_legend()
    extra = [legend] if legend else []
    tight = ax.get_tightbbox(renderer, bbox_extra_artists=extra, for_layout_only=True)
    return Room(
        max(box.x0 - tight.x0, 0.0) / dpi,
        max(tight.x1 - box.x1, 0.0) / dpi,
        max(tight.y1 - box.y1, 0.0) / dpi,
        max(box.y0 - tight.y0, 0.0) / dpi,
    )


def _in_the_way(fig: Any, ax: Any, renderer: Any) -> bool:
    """True when a legend runs past the figure's sides, or sits over the panel and covers
    data (any part of a bar) or runs past the panel's sides; one below that fits is kept."""
    legend = ax.get_legend()
    if legend is None or not legend.get_visible():
        return False
    box = legend.get_window_extent(renderer)
    if box.x0 < 0 or box.x1 > fig.bbox.width:
        return True
    panel = ax.get_window_extent(renderer)
    if box.y1 <= panel.y0:
        return False
    outside = box.x0 < panel.x0 - 1 or box.x1 > panel.x1 + 1
    return outside or legend_hides_data(fig, ax, strict=True)


def _legend_below(fig: Any, ax: Any, renderer: Any) -> Room:
    """The panel's legend again, in one column below its tick and axis labels, centred on
    the figure (so as wide as the figure at most, not the panel); the panel's new room."""
    from matplotlib.transforms import blended_transform_factory

    legend = ax.get_legend()
    labels = [t.get_text() for t in legend.get_texts()]
    own = {lab: h for h, lab in zip(*ax.get_legend_handles_labels(), strict=True)}
    handles = [own.get(lab, h) for lab, h in zip(labels, legend.legend_handles, strict=True)]
    size = max([MIN_LEGEND_PT, *(t.get_fontsize() for t in legend.get_texts())])
    legend.remove()
    room = _room(ax, renderer, fig.dpi)
    moved = ax.legend(
        handles,
        labels,
        loc="upper center",
        bbox_to_anchor=(0.5, 0),
        bbox_transform=blended_transform_factory(fig.transFigure, ax.transAxes),
        borderaxespad=(room.bottom * 72 + 4) / size,
        ncol=1,
        fontsize=size,
        frameon=False,
    )
    legend_in = moved.get_window_extent(renderer).height / fig.dpi
    return Room(room.left, room.right, room.top, room.bottom + legend_in + 0.1)


def _move_legends(fig: Any, axes: list[Any], renderer: Any) -> dict[Any, Room]:
    """Each legend in the way below its panel (`_legend_below`), and the panels' new rooms;
    panels whose legends list the same entries (one backend per line in every panel) keep
    the first of them only."""
    rooms: dict[Any, Room] = {}
    seen: set[tuple[str, ...]] = set()
    for ax in axes:
        entries = tuple(t.get_text() for t in ax.get_legend().get_texts())
        if entries in seen:
            ax.get_legend().remove()
            rooms[ax] = _room(ax, renderer, fig.dpi)
            continue
        seen.add(entries)
        rooms[ax] = _legend_below(fig, ax, renderer)
    return rooms


def _fit_texts(ax: Any, renderer: Any) -> None:
    """A linear x axis widened so that text drawn at data points (a bar's value beside it)
    ends inside the panel: at the phone's width the same text takes more of the axis."""
    if ax.get_xscale() != "linear" or not ax.texts:
        return
    x0, x1 = ax.get_xlim()
    width = ax.get_window_extent(renderer).width
    need = x1
    for t in ax.texts:
        if t.get_transform() != ax.transData:
            continue
        ext = t.get_window_extent(renderer)
        start = float(ax.transData.inverted().transform((ext.x0, ext.y0))[0])
        if ext.width < width:
            need = max(need, x0 + (start - x0) * width / (width - ext.width))
    if need > x1:
        ax.set_xlim(x0, need + 0.02 * (need - x0))


def _centre_labels(fig: Any, ax: Any, renderer: Any) -> None:
    """A title or x label wider than its panel (wrapped to less than the figure's width)
    centred on the figure instead: centred on a panel narrowed by long tick labels, it
    would run past the figure's edge."""
    panel = ax.get_window_extent(renderer)
    middle = (fig.bbox.width / 2 - panel.x0) / panel.width
    for text in (ax.title, ax.xaxis.label):
        if text.get_window_extent(renderer).width > panel.width:
            text.set_x(middle)


def _place(fig: Any, axes: list[Any], rooms: list[Room], top_in: float, foot_in: float) -> None:
    """The panels stacked from `top_in` below the figure's top, each with its own room."""
    heights = [_panel_height(ax) for ax in axes]
    height_in = top_in + foot_in + GAP_IN * (len(rooms) - 1)
    height_in += sum(r.top + h + r.bottom for r, h in zip(rooms, heights, strict=True))
    fig.set_size_inches(NARROW_WIDTH_IN, height_in)
    y = height_in - top_in
    for ax, r, h in zip(axes, rooms, heights, strict=True):
        y -= r.top + h
        left = r.left + EDGE_IN
        width = max(NARROW_WIDTH_IN - left - r.right - EDGE_IN, 1.0)
        box = [left, y, width, h]
        ax.set_position([v / s for v, s in zip(box, [NARROW_WIDTH_IN, height_in] * 2, strict=True)])
        y -= r.bottom + GAP_IN


def column_layout(fig: Any, top_in: float, foot_in: float) -> None:
    """Stack the figure's panels one above the other, `top_in` inches free above them (the
    title) and `foot_in` below (footer and shared legend); the figure's height follows. Each
    panel is measured once, laid out about its final size (`GUESS`); a legend in the way
    (`_in_the_way`) then moves below its panel, which takes that room too."""
    axes = list(fig.axes)
    _place(fig, axes, [GUESS] * len(axes), top_in, foot_in)
    renderer = fig.canvas.get_renderer()
    rooms = [_room(ax, renderer, fig.dpi) for ax in axes]
    _place(fig, axes, rooms, top_in, foot_in)
    for ax in axes:
        _fit_texts(ax, renderer)
    moved = _move_legends(fig, [ax for ax in axes if _in_the_way(fig, ax, renderer)], renderer)
    if moved:
        _place(
            fig,
            axes,
            [moved.get(ax, r) for ax, r in zip(axes, rooms, strict=True)],
            top_in,
            foot_in,
        )
    for ax in axes:
        _centre_labels(fig, ax, renderer)
