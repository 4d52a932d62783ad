"""The report's study sections (issue 15): shared-prefix crossover, speculative-tree winners,
timing fidelity, SM activity, tuning before/after; and the page itself (issue 17): the
recommendation first, device-labelled navigation, no machine paths, legends off the data."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from attnbench.analysis.cascade import (
    Crossover,
    PrefixPoint,
    crossovers,
    family,
    is_cascade,
    prefix_points,
)
from attnbench.analysis.compare import RatioEstimate
from attnbench.analysis.engines import measured_contiguous
from attnbench.analysis.fidelity import (
    agreement,
    claim_verdict,
    disagreement_cause,
    is_fidelity_document,
    kernel_timing,
    kernel_timings,
    sm_activity,
)
from attnbench.analysis.frame import load, ok_rows
from attnbench.analysis.tuning import trials_candidates
from attnbench.report import blocks as report_blocks
from attnbench.report.blocks import ReportData, Section, Table, Text, register_section
from attnbench.report.build import no_machine_paths, write_report
from attnbench.results import ResultRow, is_trials_name
from fixtures_results import CostModel, header, make_rows, row, spec, write_results
from report_documents import SM, case, fidelity_doc, sm_doc, write_doc, write_tune

ROOT = Path(__file__).resolve().parents[1]
PREFIXES = (1024, 4096)
BATCHES = (8, 16, 32, 64)


def plain_us(prefix: int, batch: int) -> float:
    """Plain decode: every request reads the whole prefix."""
    return 5.0 + batch * prefix / 2000


def cascade_us(prefix: int, batch: int) -> float:
    """Cascade: the prefix read once, a fixed cost for the second pass and the merge."""
    return 20.0 + prefix / 400 + 0.2 * batch


def prefix_rows() -> list[ResultRow]:
    rows = []
    for prefix in PREFIXES:
        for batch in BATCHES:
            s = spec(
                "shared_prefix",
                [prefix + 64] * batch,
                shared_prefix_len=prefix,
                lengths=f"prefix{prefix}+uniform(1..256)",
            )
            for backend, us in (
                ("flashinfer:tc", plain_us(prefix, batch)),
                ("flashinfer:fa2", 1.5 * plain_us(prefix, batch)),
                ("flashinfer:cascade", cascade_us(prefix, batch)),
                ("flash-attn:fa3-cascade", 1.2 * cascade_us(prefix, batch)),
            ):
                rows.append(row(s, backend, model=CostModel(us, 1e15, 1e15)))
    return rows


def expected_start(prefix: int) -> int | None:
    """The smallest batch from which the cascade is faster at every larger batch (the cost
    models differ by at least 5% wherever they differ, far beyond 1% noise)."""
    start = None
    for b in sorted(BATCHES, reverse=True):
        if cascade_us(prefix, b) >= plain_us(prefix, b):
            break
        start = b
    return start


def test_cascade_crossover_found_from_rows(tmp_path: Path) -> None:
    frame = load([write_results(tmp_path / "p.jsonl", prefix_rows())]).frame
    (grid,) = crossovers(prefix_points(ok_rows(frame)))
    assert grid.prefix_lens == list(PREFIXES)
    assert grid.batch_sizes == list(BATCHES)
    for prefix in PREFIXES:
        assert grid.min_batch(prefix) == expected_start(prefix)
    assert [grid.min_batch(p) for p in PREFIXES] == [64, 16]
    assert [grid.min_prefix(b) for b in BATCHES] == [None, 4096, 4096, 1024]
    p = grid.at(1024, 64)
    assert p is not None
    assert p.cascade == "flashinfer:cascade"
    assert p.plain == "flashinfer:tc"
    assert p.verdict == "wins"
    assert p.speedup == pytest.approx(37.77 / 35.36, rel=0.02)
    lo, hi = p.speedup_ci
    assert lo < p.speedup < hi
    lost = grid.at(1024, 32)
    assert lost is not None
    assert lost.verdict == "loses"


def _point(batch: int, ratio: float, significant: bool = True) -> PrefixPoint:
    est = RatioEstimate(ratio, ratio * 0.98, ratio * 1.02, 0.001, significant, 0.01, "test")
    return PrefixPoint(
        "g", 1024, batch, "flashinfer:cascade", ratio * 100, "flashinfer:tc", 100, est
    )


def test_crossover_needs_wins_at_every_larger_batch() -> None:
    # wins at 8, loses at 16, ties at 32 (not significant), wins at 64 and 128
    grid = Crossover(
        "g",
        [
            _point(8, 0.8),
            _point(16, 1.2),
            _point(32, 0.9, False),
            _point(64, 0.7),
            _point(128, 0.5),
        ],
    )
    assert [p.verdict for p in grid.points] == ["wins", "loses", "tie", "wins", "wins"]
    assert grid.min_batch(1024) == 64
    assert grid.wins_at(1024) == [8, 64, 128]
    assert grid.min_prefix(8) == 1024
    assert grid.min_prefix(16) is None
    assert Crossover("g", []).min_batch(1024) is None
    assert is_cascade("flashinfer:cascade+tuned")
    assert not is_cascade("flashinfer:tc")
    assert family("prefix4096+uniform(1..256)") == "suffixes uniform(1..256)"
    assert family("trace-prefix(mooncake-conv,74240)") == "mooncake-conv trace"


def test_committed_h200_crossover() -> None:
    """The committed H200 rows: cascade beats the best plain decode at prefix 1k from batch 64
    (51 vs 54 us) and at prefix 4k from batch 16."""
    path = ROOT / "results" / "h200-shared-prefix.jsonl.gz"
    if not path.exists():
        pytest.skip("no committed shared-prefix rows")
    grids = crossovers(prefix_points(ok_rows(load([path]).frame)))
    synthetic = next(g for g in grids if "uniform(1..256)" in g.group)
    assert synthetic.min_batch(1024) == 64
    assert synthetic.min_batch(4096) == 16
    p = synthetic.at(1024, 64)
    assert p is not None
    assert round(p.cascade_us) == 51
    assert round(p.plain_us) == 54


@pytest.mark.slow
def test_shared_prefix_and_tree_sections(tmp_path: Path) -> None:
    res = write_results(tmp_path / "h200.jsonl", make_rows() + prefix_rows())
    md_path, _html_path = write_report(load([res]), tmp_path / "out")
    md = md_path.read_text()
    sec = md.split("## Shared prefix\n", 1)[1].split("\n## ", 1)[0]
    assert "- prefix 1k: cascade wins from batch 64 (1.07x: `flashinfer:cascade`" in sec
    assert "- prefix 4k: cascade wins from batch 16" in sec
    assert "below it (8, 16, 32) it loses" in sec
    assert "| 1k | 0." in sec
    assert "| batch 64 |" in sec
    assert "(figures/" in sec
    assert "cascade-crossover.png" in sec
    trees = md.split("## Speculative trees\n", 1)[1].split("\n## ", 1)[0]
    assert "fastest variant per tree shape x context" in trees
    assert "| chain-8 (8 tokens), bs8 | **flashinfer:tc**" in trees
    assert re.search(r"`flashinfer:tc` in 2 of 2", trees)
    assert "Rows per variant: " in trees
    assert "`flashinfer:tc` 2 ok" in trees


def test_fidelity_document_read() -> None:
    doc = fidelity_doc()
    assert is_fidelity_document(doc)
    assert not is_fidelity_document({"cases": []})
    timings = kernel_timings(doc)
    agr = agreement(timings)
    assert (agr.long, agr.agree) == (3, 2)
    (bad,) = agr.disagree
    assert bad.case == "prefill-4x16k"
    assert bad.ncu_diff == pytest.approx(0.05)
    short = next(t for t in timings if t.case == "decode-1x1k")
    assert not short.long
    assert not short.disagrees
    assert timings[-1].status == "error"
    assert timings[-1].engine_us is None
    assert disagreement_cause(bad).startswith("power cap: NVML reported sw_power_cap in 6 of 40")
    assert disagreement_cause(timings[0]) == ""


def test_fidelity_is_judged_against_ncu_and_names_a_cause_per_row() -> None:
    """The tolerance judges engine vs Nsight Compute; the torch profiler is a second opinion.
    An engine faster than ncu with steady clocks is not blamed on the clocks."""
    off_profiler = kernel_timing(case("d", "flashinfer:fa2", 64.0, 60.0, 63.5))
    assert off_profiler.profiler_diff == pytest.approx(4 / 60)
    assert off_profiler.agrees
    no_ncu = kernel_timing(case("d", "flashinfer:fa2", 64.0, 60.0, None))
    assert no_ncu.disagrees  # judged against the profiler when ncu did not run
    assert disagreement_cause(no_ncu).startswith("vs CUPTI (+6.7%): not explained by")
    faster = kernel_timing(case("d", "flashinfer:xqa", 545.0, 542.0, 573.0))
    assert faster.disagrees
    assert "no clock slowdown" in disagreement_cause(faster)
    assert "programmatic dependent launch" in disagreement_cause(faster)
    # the profiler's CUPTI trace agrees with the engine (542 vs 545 us): the gap is ncu's
    assert "(CUPTI) timed the same calls at 542.0 us, +0.6% from the engine" in (
        disagreement_cause(faster)
    )
    assert "CUPTI" not in disagreement_cause(kernel_timing(case("d", "x", 545.0, 500.0, 573.0)))
    # re-timed with PDL off, the engine agrees with ncu: the cause is named from that A/B
    off = {**case("d", "flashinfer:xqa", 571.0, 570.0, 573.0), "knobs": {"enable_pdl": False}}
    retimed = kernel_timing(off)
    assert retimed.backend == "flashinfer:xqa [enable_pdl=False]"
    cause = disagreement_cause(faster, [faster, retimed])
    assert cause.startswith("programmatic dependent launch:")
    assert "enable_pdl=False the engine measures 571.0 us, -0.3% vs ncu" in cause
    # the H200's A/B (session 7): PDL off leaves the engine where it was; not PDL, and where
    # ncu's own time of the call moved as much as the gap, its spread is named
    same = {**case("d", "flashinfer:xqa", 546.7, 544.0, 568.5), "knobs": {"enable_pdl": False}}
    cause = disagreement_cause(faster, [kernel_timing(same)])
    assert cause.startswith("not programmatic dependent launch: re-timed with enable_pdl=False")
    assert "(+0.3% vs PDL on)" in cause
    assert "on-chip state" in cause
    long4 = kernel_timing(case("d", "flashinfer:xqa", 827.0, 826.0, 874.2))
    moved = {**case("d", "flashinfer:xqa", 825.1, 826.0, 819.3), "knobs": {"enable_pdl": False}}
    cause = disagreement_cause(long4, [kernel_timing(moved)])
    assert "ncu's time of the same call moved -6.3%" in cause
    assert "run-to-run spread is as large as the disagreement" in cause
    slower_steady = kernel_timing(case("d", "flash-attn:fa3", 600.0, 598.0, 560.0))
    assert disagreement_cause(slower_steady) == "not explained by the clocks recorded with the row"


def test_sm_activity_verdicts() -> None:
    activity = sm_activity(sm_doc())
    assert set(activity) == set(SM)
    verdicts = {b: claim_verdict(b, by).verdict for b, by in activity.items()}
    assert verdicts == {
        "flashinfer:fa2": "holds",
        "flashinfer:tc": "partly",
        "flash-attn:fa3": "does not hold",
    }
    text = claim_verdict("flashinfer:fa2", activity["flashinfer:fa2"]).sentence
    assert "96% on the uniform batch, 40% on the mixed batch, 30% on the 4-long batch" in text
    assert "At most 70% idle, on the 4-long batch, +66 points" in text


@pytest.mark.slow
def test_fidelity_sections_render(tmp_path: Path) -> None:
    res = write_results(tmp_path / "h200.jsonl", make_rows())
    fid = write_doc(tmp_path / "h200-fidelity.json", fidelity_doc())
    sm = write_doc(tmp_path / "h200-sm-activity.json", sm_doc())
    md = write_report(load([res, fid, sm]), tmp_path / "out")[0].read_text()
    fidelity = md.split("## Timing fidelity\n", 1)[1].split("\n## ", 1)[0]
    assert "Of 12 kernels of 10 µs or more with a profiler time, **11 agree within 3%**" in fidelity
    assert "prefill-4x16k `flash-attn:fa3` (+5.0% vs ncu: power cap: NVML reported " in fidelity
    assert "sw_power_cap in 6 of 40 samples" in fidelity
    assert "6 of 520 samples throttled" in fidelity
    assert "| prefill-4x16k | flash-attn:fa3 | 1.05 ms |" in fidelity
    assert "**differs by more than 3%**" in fidelity
    assert "under 10 µs" in fidelity
    assert "| 1755 | 1980 | 1980 | 6 of 40 |" in fidelity
    sm_sec = md.split("## SM activity\n", 1)[1].split("\n## ", 1)[0]
    assert "**The claim holds for 1 of 3 kernels**" in sm_sec
    assert "- flashinfer:tc: SMs active 97% on the uniform batch" in sm_sec
    assert "| flashinfer:fa2 | 4-long | 524,288 | 480.0 µs | 30% | 70% | 40% |" in sm_sec
    assert "sm-activity.png" in sm_sec


@pytest.mark.slow
def test_study_sections_absent_without_documents(tmp_path: Path) -> None:
    res = write_results(tmp_path / "h200.jsonl", make_rows())
    md = write_report(load([res]), tmp_path / "out")[0].read_text()
    for title in ("Timing fidelity", "SM activity", "Tuning"):
        assert f"## {title}" not in md


@pytest.mark.parametrize("gz", [True, False])
def test_tuning_before_after(tmp_path: Path, gz: bool) -> None:
    tuned, trials = write_tune(tmp_path, gz=gz)
    assert is_trials_name(trials.name)
    assert trials in trials_candidates(tuned)
    # the folder holds the trials too: their rows are evidence for the table, not results
    md = write_report(load([tmp_path / "tune.jsonl", trials]), tmp_path / "out")[0].read_text()
    sec = md.split("## Tuning\n", 1)[1].split("\n## ", 1)[0]
    assert "1 of 3 (case, variant) pairs are significantly faster tuned" in sec
    assert "(most: `flashinfer:tc` 2.00x with `fixed_split_size=256`" in sec
    assert "in 1 the default knobs stayed the fastest" in sec
    assert f"Trials from `{trials.name}`" in sec
    line = next(ln for ln in sec.splitlines() if "| flashinfer:tc |" in ln)
    assert "| fixed_split_size=256 |" in line
    assert "| **2.00x** |" in line
    assert "| faster |" in line
    assert "| flash-attn:fa3 | pack_gqa=False |" in sec
    assert "| tie |" in sec
    overview = md.split("## Overview\n", 1)[1].split("\n## ", 1)[0]
    assert "+tuned" in overview
    assert "| flashinfer:tc |" not in overview


def test_tuning_without_trials_has_no_ci(tmp_path: Path) -> None:
    tuned, trials = write_tune(tmp_path)
    trials.unlink()
    md = write_report(load([tuned]), tmp_path / "out")[0].read_text()
    sec = md.split("## Tuning\n", 1)[1].split("\n## ", 1)[0]
    assert "No trials file was found" in sec
    assert "| no trials |" in sec


def test_contiguous_caveat_only_for_contiguous_rows() -> None:
    assert measured_contiguous("flash-attn:fa3-contiguous", {"kv_cache": "packed"})
    assert measured_contiguous("flash-attn:fa3-contiguous+tuned", {})
    assert measured_contiguous("flash-attn:fa3", {"kv_cache": "contiguous"})  # legacy row
    assert not measured_contiguous("flash-attn:fa3", {"kv_cache": "paged"})
    assert not measured_contiguous("flash-attn:fa3+tuned", {"kv_cache": "paged"})
    assert not measured_contiguous("sdpa:cudnn", {"kv_cache": "contiguous"})
    assert not measured_contiguous("flashinfer:tc", {})


@pytest.mark.slow
def test_recommendation_first_decision_before_evidence(tmp_path: Path) -> None:
    res = write_results(tmp_path / "h200.jsonl", make_rows())
    md_path, html_path = write_report(load([res]), tmp_path / "out")
    md = md_path.read_text()
    assert md.index("## Decision") < md.index("## Kernels per workload class")
    assert md.index("## Kernels per workload class") < md.index("## Overview")
    rec = md.split("## Kernels per workload class\n", 1)[1].split("\n## ", 1)[0]
    # the library-level ranking says it is evidence; its flags are marked as not measured
    assert rec.index("Evidence, not a deployment") < rec.index("decision matrix")
    assert "not measured as a deployment, unlike the Decision at the top" in rec
    nav = re.search(r"<nav>(.*?)</nav>", html_path.read_text(), re.S)
    assert nav is not None
    assert nav.group(1).index("Kernels per workload class") < nav.group(1).index("Overview")


@pytest.mark.slow
def test_navigation_names_the_device(tmp_path: Path) -> None:
    h200 = write_results(tmp_path / "h200.jsonl", make_rows())
    other = header("fake-b200")
    other.device = {"name": "NVIDIA B200", "sm": 100}
    other.provenance = {**other.provenance, "gpu": "NVIDIA B200"}
    b200 = write_results(tmp_path / "b200.jsonl", make_rows(run_id="fake-b200"), other)
    md_path, html_path = write_report(load([h200, b200]), tmp_path / "out")
    page = html_path.read_text()
    nav = re.search(r"<nav>(.*?)</nav>", page, re.S)
    assert nav is not None
    links = re.findall(r'<a href="#([^"]+)">([^<]+)</a>', nav.group(1))
    sections = [(a, t) for a, t in links if "·" in t or a.startswith("nvidia")]
    assert ("nvidia-h200-overview", "Overview · H200") in links
    assert ("nvidia-b200-overview", "Overview · B200") in links
    names = [t for _, t in links if not t.startswith("NVIDIA")]
    assert len(names) == len(set(names))
    assert len(sections) == len(links)
    for anchor, _ in links:
        assert f'id="{anchor}"' in page
    md = md_path.read_text()
    assert "## Overview (H200)" in md
    assert "## Overview (B200)" in md


@pytest.fixture
def path_section() -> Iterator[None]:
    name = "zz machine paths"

    @register_section(name, order=99, per_gpu=False)
    def paths(data: ReportData) -> Section | None:
        return Section(
            name,
            [
                Text("rows in /root/out/replay-live.jsonl and `~/runs/x/h200.jsonl`"),
                Table(["file"], [["/home/ci/work/results/h200-brief.jsonl"]], "from /tmp/a/b.json"),
            ],
        )

    yield
    report_blocks._SECTIONS.pop(name, None)


@pytest.mark.slow
def test_no_machine_paths_in_the_page(tmp_path: Path, path_section: None) -> None:
    res = write_results(tmp_path / "h200.jsonl", make_rows())
    md_path, html_path = write_report(load([res]), tmp_path / "out")
    for text in (md_path.read_text(), html_path.read_text()):
        assert "/root/" not in text
        assert "/home/ci" not in text
        assert "~/runs" not in text
        assert str(tmp_path) not in text
        assert "rows in replay-live.jsonl" in text
        assert "h200-brief.jsonl" in text
    assert no_machine_paths("h32/8 d128, 4.2 GB/s, tokens/s, a / b") == (
        "h32/8 d128, 4.2 GB/s, tokens/s, a / b"
    )
    assert no_machine_paths("see https://docs.vllm.ai/en/v0.32.0/x") == (
        "see https://docs.vllm.ai/en/v0.32.0/x"
    )


def _single_rate_figure() -> tuple[Any, Any]:
    """One panel where every candidate sits at one x (a single-rate replay): a legend inside
    covers the points."""
    from attnbench.report.plots import _figure

    fig, (ax,) = _figure(1)
    for i in range(9):
        name = f"hybrid(prefill flash-attn:fa3, decode flashinfer:tc) candidate {i}"
        ax.plot([450.0], [400.0 + 40 * i], "o", label=name)
    ax.legend(fontsize=7)
    return fig, ax


def test_legend_moves_off_data() -> None:
    from attnbench.report.plot_layout import legend_hides_data
    from attnbench.report.plots import _lay_out

    fig, ax = _single_rate_figure()
    assert legend_hides_data(fig, ax)
    _lay_out(fig, "t", "label", shared_legend=False)
    assert not legend_hides_data(fig, ax)
    renderer = fig.canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    assert legend.x0 > ax.get_window_extent(renderer).x1  # beside the panel


def test_on_a_phone_the_legend_goes_below_its_panel_and_stays_in_the_figure() -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from attnbench.report.plots import _finish

    fig, ax = _single_rate_figure()
    drawing = _finish(fig, "t", "label")
    assert drawing.png.startswith(b"\x89PNG")
    assert drawing.narrow.startswith(b"\x89PNG")
    FigureCanvasAgg(fig)  # the figure was closed, as laid out for phones: measure it again
    renderer = fig.canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    assert legend.y1 < ax.get_window_extent(renderer).y0  # below the panel
    assert legend.x0 >= 0
    assert legend.x1 <= fig.bbox.width  # its longest entry is not cut
