"""The report reads on a phone (issue 49): nothing wider than the screen (tables scroll in
their own box, images and headings fit), no two series of a legend alike, slanted category
labels upright on a phone, and the fp8 speed-up along context one case per line."""

from __future__ import annotations

import re

import pytest

from attnbench.report.blocks import Table
from attnbench.report.build import CSS, _table_html

pytest.importorskip("matplotlib")


def test_tables_scroll_in_their_own_box_and_images_and_headings_fit() -> None:
    html = _table_html(Table(["a", "b"], [["x" * 300, "1"]], caption="c " * 200))
    assert html.startswith('<div class="scroll"><table>')
    css = CSS.replace("\n", "")
    assert ".scroll{overflow-x:auto" in css
    assert "img{max-width:100%}" in css
    assert re.search(r"h1,h2,h3,summary,figcaption,caption\{overflow-wrap:anywhere\}", css)
    assert "nav a{white-space:normal}" in css  # a long link wraps on a phone


def test_no_two_series_of_a_33_entry_legend_look_alike() -> None:
    from attnbench.report.plots import colors, series_styles

    names = [f"variant-{i:02d}" for i in range(33)]
    styles = series_styles(names)
    looks = {(st["color"], st["marker"], st["ls"]) for st in styles.values()}
    assert len(looks) == 33
    few = series_styles(names[:20])
    assert len({st["color"] for st in few.values()}) == 20  # 20 colors, nothing else varies
    assert {st["marker"] for st in few.values()} == {"o"}
    assert colors(names) == {n: st["color"] for n, st in styles.items()}


def test_slanted_category_labels_stand_upright_on_a_phone() -> None:
    from attnbench.report.plot_layout import prepare_axes
    from attnbench.report.plots import _figure

    fig, (ax,) = _figure(1)
    ax.bar(range(4), [1, 2, 3, 4])
    ax.set_xticks(range(4), ["trace(azure-conv)", "trace(azure-code)", "sigma1", "giant"])
    for t in ax.get_xticklabels():
        t.set_rotation(30)
    prepare_axes(fig)
    assert {t.get_rotation() for t in ax.get_xticklabels()} == {90.0}


def test_fp8_along_context_draws_one_case_per_line() -> None:
    from attnbench.report.plots_serving import along_context

    curves = {
        "a fp8_e4m3": [("bs8", 1024, 1.1), ("bs8", 4096, 1.2), ("bs1", 1024, 0.7)],
        "b fp8_e4m3": [("bs8", 1024, 0.9), ("bs8", 1024, 0.9 * 1.21), ("bs1", 4096, 2.0)],
    }
    case, lines = along_context(curves)
    assert case == "bs8"  # the case with the most points
    assert lines["a fp8_e4m3"] == ([1024, 4096], [1.1, 1.2])
    xs, ys = lines["b fp8_e4m3"]
    assert xs == [1024]  # a repeated context is one point (geometric mean), never a zigzag
    assert ys == pytest.approx([0.9 * 1.1])
