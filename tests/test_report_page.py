"""The report page: the first screen (the deploy decision and its per-bucket figure) before
any file list, bullets or navigation; each other section's lead open and its detail behind
`<details>`; figures that keep their legends off the footer; the committed screenshots."""

from __future__ import annotations

import base64
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from attnbench.analysis.frame import load
from attnbench.report.blocks import Code, Figure, Section, Table, Text
from attnbench.report.build import (
    CSS,
    build_sections,
    command_html,
    flag_groups,
    lead_blocks,
    section_html,
    write_report,
)
from attnbench.report.first_screen import (
    decisions_from_answers,
    first_screen_blocks,
)
from fixtures_results import MODELS, make_rows, row, spec, write_results

ROOT = Path(__file__).resolve().parents[1]
PNG = b"\x89PNG\r\n\x1a\n"
SHOTS = ROOT / "docs" / "screenshots"
SHOT_MAX_BYTES = 150_000


def _engine_rows() -> list:
    """vLLM and SGLang rows of one shape at batch 8 and 128, raw rows beside them."""
    rows = []
    engines = ("vllm:flashinfer", "vllm:flash-attn", "sglang:fa3", "sglang:flashinfer")
    for bs in (8, 128):
        s = spec("decode", [2048] * bs)
        rows += [
            row(s, v, scale=1 + 0.1 * i, model=MODELS["flashinfer:tc"])
            for i, v in enumerate(engines)
        ]
        rows.append(row(s, "flashinfer:tc"))
    return rows


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp = tmp_path_factory.mktemp("page")
    res = write_results(tmp / "h200.jsonl", make_rows() + _engine_rows())
    _, html = write_report(load([res]), tmp / "out")
    return html.read_text()


def test_first_screen_holds_the_decision_and_figure_before_any_list(page: str) -> None:
    body = page.split("<main>", 1)[1]
    first = re.match(r'<section id="([^"]+)">(.*?)</section>', body, re.S)
    assert first is not None
    assert first.group(1) == "decision"
    lead = first.group(2)
    assert "vllm serve MODEL" in lead
    assert "sglang.launch_server" in lead
    assert lead.count("<img ") == 1
    assert "<details" not in lead  # the first screen is all open
    before_figure = body[: body.index("<img ")]
    assert "<ul>" not in before_figure  # no bullets before the first figure
    assert "<nav>" not in before_figure
    assert "results files" not in before_figure
    assert "h200.jsonl" not in page.split("<main>", 1)[0]  # the header names no files
    assert body.index("</section>") < body.index("<nav>")


def test_every_other_section_keeps_its_detail_behind_details(page: str) -> None:
    body = page.split("<nav>", 1)[1]
    sections = re.findall(r'<section id="([^"]+)">(.*?)</section>', body, re.S)
    assert len(sections) > 8
    folded = [sid for sid, html in sections if "<details><summary>" in html]
    assert len(folded) >= len(sections) // 2
    for sid, html in sections:
        opening = html.split("<details>", 1)[0]
        assert opening.count("<img ") <= 1, sid  # at most one figure open per section
        assert "<table>" not in opening or "<img " not in opening, sid
    assert 'name="viewport"' in page


def test_a_parallel_build_gives_the_serial_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    res = write_results(tmp_path / "h200.jsonl", make_rows() + _engine_rows())
    pages = {}
    for workers in ("1", "2"):
        monkeypatch.setenv("ATTNBENCH_REPORT_WORKERS", workers)
        md, _ = write_report(load([res]), tmp_path / workers)
        pages[workers] = re.sub(r"Generated .* by", "", md.read_text())
    assert pages["1"] == pages["2"]
    assert "This section failed" not in pages["2"]


def test_lead_is_a_short_paragraph_and_the_first_figure() -> None:
    fig = Figure(PNG, "a figure")
    text, bullets = Text("One short paragraph."), Text("- one\n- two")
    table = Table(["a"], [["1"]])
    assert lead_blocks([text, fig, table, fig]) == 2
    assert lead_blocks([fig, text]) == 1
    assert lead_blocks([bullets, fig]) == 0
    assert lead_blocks([table, fig]) == 0
    assert lead_blocks([Text("x" * 2000), fig]) == 0
    html = section_html(Section("S", [text, fig, table, Code("cmd"), bullets]), "s")
    opening, rest = html.split("<details>", 1)
    assert "One short paragraph." in opening
    assert "<img " in opening
    assert "<summary>details: 1 table, 1 note, 1 command</summary>" in rest
    assert "<table>" in rest
    assert "<details>" not in section_html(Section("S", [table]), "s", open_all=True)


def test_first_screen_names_no_contiguous_cache_on_committed_rows() -> None:
    frame = load(sorted((ROOT / "results").glob("h200-*engines*.jsonl.gz"))).frame
    decisions = decisions_from_answers(frame)
    assert any(d.choice for d in decisions)
    for d in decisions:
        names = [d.choice or "", *d.per_batch_us]
        assert not any("contiguous" in n for n in names), d
        assert d.engine in ("vllm", "sglang")
    blocks = first_screen_blocks(frame)
    assert isinstance(blocks[0], Table)
    figs = [b for b in blocks if isinstance(b, Figure)]
    assert len(figs) == 1
    assert figs[0].png.startswith(PNG)


def test_a_figure_legend_goes_below_the_panels_and_the_figure_grows() -> None:
    from attnbench.report.plots import _figure, _shared_legend

    fig, axes = _figure(2)
    for i in range(12):
        axes[i % 2].plot([1, 2], [i, i + 1], label=f"backend number {i}")
        axes[i % 2].legend()
    before = fig.get_size_inches()[1]
    taken = _shared_legend(fig, 0.3)
    assert fig.get_size_inches()[1] > before
    assert taken > 0.3
    assert all(ax.get_legend() is None for ax in axes)
    (legend,) = fig.legends
    assert len(legend.get_texts()) == 12


def test_committed_screenshots_exist_and_stay_small() -> None:
    for name in ("first-screen-1400.png", "top-390.png"):
        shot = SHOTS / name
        assert shot.read_bytes().startswith(PNG), name
        assert shot.stat().st_size < SHOT_MAX_BYTES, name


def _png_size(png: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


PHONE_PX = 420
"""The widest a phone rendition may be drawn: 400 px (4 in) and some slack."""
PHONE_SOURCE = re.compile(
    r'<source media="\(max-width:640px\)" srcset="data:image/png;base64,([^"]+)"'
)


def test_every_figure_of_the_page_has_a_phone_rendition(page: str) -> None:
    """Every `<figure>` shows a PNG drawn for phones at <= 640 px (panels in one column, at
    most PHONE_PX wide), fitted to the width; the wide PNG stays for larger screens."""
    figures = re.findall(r"<figure>.*?</figure>", page, re.S)
    assert len(figures) >= 8  # buckets, decode, relative, roofline, ragged, fp8, trees, prefix
    for fig in figures:
        source = PHONE_SOURCE.search(fig)
        assert source is not None, fig[:120]
        narrow = base64.b64decode(source.group(1))
        assert narrow.startswith(PNG)
        assert _png_size(narrow)[0] <= PHONE_PX
        assert '<img class="fit"' in fig


STUDY_RESULTS = (
    "h200-mla.jsonl.gz",
    "h200-shared-prefix.jsonl.gz",
    "h200-sm-activity.json",
    "h200-replay-agents450.json",
    "h200-replay-validation.json.gz",
)
"""Committed results whose figures the synthetic page lacks: MLA against its ceilings, the
cascade crossover, SM activity, a serving replay (one rate: the legend that moves) and a
replay validation."""


def test_every_study_figure_has_a_phone_rendition() -> None:
    groups = build_sections(load([ROOT / "results" / name for name in STUDY_RESULTS]))
    figures = {
        b.name: b
        for _, sections in groups
        for sec in sections
        for b in sec.blocks
        if isinstance(b, Figure)
    }
    wanted = {"mla-ceilings", "cascade-crossover", "sm-activity", "replay", "replay-validation"}
    assert wanted <= set(figures)
    for name, fig in figures.items():
        assert fig.narrow is not None, name
        width, height = _png_size(fig.narrow)
        assert width <= PHONE_PX < _png_size(fig.png)[0], name
        assert height > width, name  # panels one above the other


def test_the_phone_rendition_keeps_its_labels_inside_apart_and_off_the_data() -> None:
    """Two panels with long titles and axis labels, a long y tick label, a legend over the
    data: drawn for phones, nothing runs past the figure's sides, the panels (labels and
    legends included) do not overlap, and no legend covers a point or a line."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from attnbench.report.plot_layout import legend_hides_data
    from attnbench.report.plots import _figure, _finish

    fig, axes = _figure(2)
    for k, ax in enumerate(axes):
        for i in range(5):
            ax.plot([1, 2, 3], [i, i + 1 + k, i + 2], "o-", label=f"flashinfer:variant-{i} long")
        ax.legend(loc="center", fontsize=8)
        ax.set_title("decode llama-3.1-70b/tp8 bs4 bf16/e4m3 p16, a title longer than the panel")
        ax.set_xlabel("context length per request (tokens), an x label longer than the panel")
        ax.set_ylabel("latency per call (µs, median, 95% CI), a long y label")
        ax.set_yticks([0, 3, 6], ["0", "three thousand", "6"])
    drawing = _finish(fig, "A figure title far longer than a phone's width allows", "label " * 30)
    assert _png_size(drawing.narrow)[0] == 400
    FigureCanvasAgg(fig)  # closed as laid out for phones: measure it again
    renderer = fig.canvas.get_renderer()
    width = fig.bbox.width
    boxes = [ax.get_tightbbox(renderer) for ax in fig.axes]
    for ax, box in zip(fig.axes, boxes, strict=True):
        assert box.x0 >= 0  # titles, labels, ticks, legend: not cut
        assert box.x1 <= width
        assert not legend_hides_data(fig, ax, strict=True)
    assert not boxes[0].overlaps(boxes[1])
    panels = [ax.get_window_extent(renderer).width for ax in fig.axes]
    assert min(panels) > 0.5 * width  # a legend moved away leaves no room behind
    for text in (*fig.texts, fig._suptitle):
        extent = text.get_window_extent(renderer)
        assert extent.x0 >= 0
        assert extent.x1 <= width


def test_log_axes_read_as_plain_numbers_on_a_1_2_5_grid() -> None:
    """Every log axis of base 10 is labelled 0.1, 100, 2000 (no math text: 10^2 set as
    TeX was slow to lay out); minor ticks stand at 2 and 5 only beyond 1.3 decades, at 2..9
    within them; a token axis (base 2) keeps its own labels."""
    from attnbench.report.plots import _figure, _finish, _tokens_axis

    fig, axes = _figure(3)
    axes[0].loglog([0.1, 1000], [1, 3000])  # wide spans on both axes
    axes[1].semilogy([1, 2], [20, 30])  # within a decade
    axes[2].plot([256, 65536], [1, 2])
    _tokens_axis(axes[2])
    _finish(fig, "log axes", "label")
    wide, narrow_span, tokens = axes
    for axis in (wide.xaxis, wide.yaxis, narrow_span.yaxis, tokens.xaxis):
        texts = [t.get_text() for t in axis.get_ticklabels(which="both")]
        assert not any("$" in t for t in texts), texts
    assert "100" in [t.get_text() for t in wide.xaxis.get_ticklabels()]
    assert {round(v / 10 ** math.floor(math.log10(v))) for v in wide.yaxis.get_minorticklocs()} == {
        2,
        5,
    }
    assert len(narrow_span.yaxis.get_minorticklocs()) >= 5  # 2..9 within one decade
    assert "64k" in [t.get_text() for t in tokens.xaxis.get_ticklabels()]


def test_a_command_breaks_only_between_flags() -> None:
    cmd = "python -m sglang.launch_server --model-path MODEL --tp 1 --enforce-eager"
    assert flag_groups(cmd) == [
        "python",
        "-m sglang.launch_server",
        "--model-path MODEL",
        "--tp 1",
        "--enforce-eager",
    ]
    assert command_html("attnbench models") == "attnbench models"  # no flag: as it is
    html = command_html(cmd)
    assert html.count('<span class="fl">') == 5
    assert '<span class="fl">--model-path MODEL</span> <span' in html  # a space between
    assert "span.fl{white-space:nowrap}" in CSS


def test_the_decision_cells_commands_are_non_breaking_flag_groups(page: str) -> None:
    first = page.split("<main>", 1)[1].split("</section>", 1)[0]
    codes = re.findall(r"<code>(.*?)</code>", first)
    commands = [c for c in codes if "vllm serve" in c or "sglang.launch_server" in c]
    assert len(commands) >= 2
    for c in commands:
        outside = re.sub(r'<span class="fl">[^<]*</span>', "", c)
        assert outside.strip() == "", c  # only spaces between the groups
        for group in re.findall(r'<span class="fl">([^<]*)</span>', c)[1:]:
            assert group.startswith("-"), group  # each later group is one flag and its values


def test_on_a_phone_the_decision_table_stacks_its_cells_under_their_labels(page: str) -> None:
    """At <= 640 px the decision's cells stack, each under its column's name (`data-label`):
    three columns of commands do not fit 390 px."""
    first = page.split("<main>", 1)[1].split("</section>", 1)[0]
    labels = re.findall(r'<td data-label="([^"]*)">', first)
    assert {"model", "vLLM", "SGLang"} <= set(labels)
    assert 'section[id$="decision"] thead{display:none}' in CSS
    assert 'section[id$="decision"] td::before{content:attr(data-label)' in CSS
    # the selector holds where the section id carries the GPU's name too (issue 49: `#decision`
    # missed `nvidia-h200-decision`, and the table was cut off at 390 px)
    assert "#decision" not in CSS
    assert re.match(r'<section id="[^"]*decision">', page.split("<main>", 1)[1])


def test_figures_fit_the_width_and_the_first_screen_has_a_phone_rendition(page: str) -> None:
    assert "figure img{max-width:100%;height:auto" in CSS
    assert "figure img.fit{max-width:100%}" in CSS  # at <= 640 px too, where others scroll
    assert "p,li{overflow-wrap:break-word}" in CSS  # a long path never widens the page
    first = page.split("<main>", 1)[1].split("</section>", 1)[0]
    (pic,) = re.findall(r"<picture>.*?</picture>", first, re.S)
    assert '<source media="(max-width:640px)" srcset="data:image/png;base64,' in pic
    assert '<img class="fit"' in pic
    frame = load(sorted((ROOT / "results").glob("h200-*engines*.jsonl.gz"))).frame
    (fig,) = [b for b in first_screen_blocks(frame) if isinstance(b, Figure)]
    assert fig.narrow is not None
    assert fig.narrow.startswith(PNG)
    width, height = _png_size(fig.narrow)
    assert width <= 400 < height  # drawn for a phone: panels one above the other
    assert _png_size(fig.png)[0] > width


def test_the_report_and_recommend_import_no_torch() -> None:
    """Importing torch took ~2 s of `attnbench report`'s ~15 (issue 34: <= 15 s), through the
    fp8 study's document type and the head_dim section's FlashInfer rules: every report and
    analysis module, and the commands that read results, load without it."""
    code = (
        "import sys, pkgutil, importlib, attnbench.report, attnbench.analysis\n"
        "for pkg in (attnbench.report, attnbench.analysis):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(m.name)\n"
        "import attnbench.cli.analyze, attnbench.cli.recommend, attnbench.cli.show\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT)


def test_a_model_only_another_gpu_answers_for_is_pointed_to() -> None:
    """The lead GPU's first screen lists the models it has no deployable rows for; where
    another GPU's rows answer for one (engine decode rows), it says which."""
    import pandas as pd

    from attnbench.report.first_screen import _missing_text, elsewhere

    others = pd.DataFrame(
        {
            "library": ["vllm", "sglang", "flashinfer", "vllm"],
            "kind": ["decode", "decode", "decode", "prefill"],
            "model": ["llama-3.1-70b", "llama-3.1-70b", "llama-3.1-8b", "qwen2.5-7b"],
            "tp": [8, 8, 1, 1],
            "gpu": ["NVIDIA H100 80GB HBM3"] * 4,
        }
    )
    found = elsewhere(others)
    assert found == {"llama-3.1-70b tp8": ["H100 80GB HBM3"]}  # raw kernels, prefill: no
    text = _missing_text(["gemma-2-9b tp1", "llama-3.1-70b tp8"], found)
    want = "`gemma-2-9b tp1`, `llama-3.1-70b tp8` (measured on H100 80GB HBM3: its Decision)"
    assert want in text
