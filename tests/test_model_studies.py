"""The MLA and GQA-sweep report sections (issue 18), on the committed H200 rows and on rows built
in the test: per MLA case each kernel's latency and both fractions of the measured ceilings
(MLA decode binds on the matmul ceiling), and per group size which decode kernel is fastest,
which refuses (with the reason), which gives wrong answers (with the library versions) and which
errors (named, with the build that raised it)."""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

from attnbench.analysis.frame import ceilings_for, latest, load, ok_rows, provenance_label
from attnbench.analysis.model_studies import gqa_sweeps, mla_cases, refusal_reason
from attnbench.report.blocks import Figure, ReportData, Section, Table, Text
from attnbench.report.gqa_section import gqa_section
from attnbench.report.mla_section import mla_section
from attnbench.results import ResultRow
from fixtures_results import CostModel, row, spec, write_results

ROOT = Path(__file__).resolve().parents[1]


def committed(stem: str) -> list[Path]:
    """The committed results file `stem` (.jsonl or .jsonl.gz: files may be compressed)."""
    found = sorted(glob.glob(str(ROOT / "results" / f"{stem}.jsonl*")))
    if not found:
        pytest.skip(f"no committed {stem} rows")
    return [Path(p) for p in found]


def report_data(paths: list[Path]) -> ReportData:
    loaded = load(paths)
    frame = latest(loaded.frame)
    gpu = str(frame["gpu"].iloc[0])
    return ReportData(
        loaded,
        gpu,
        frame,
        ok_rows(loaded.frame),
        provenance_label(loaded.headers, gpu),
        ceilings_for(loaded.headers, gpu),
    )


def texts(sec: Section) -> str:
    return "\n".join(b.markdown for b in sec.blocks if isinstance(b, Text))


def table(sec: Section) -> Table:
    return next(b for b in sec.blocks if isinstance(b, Table))


def by_first(t: Table) -> dict[str, dict[str, str]]:
    return {str(r[0]): dict(zip(t.headers, map(str, r), strict=True)) for r in t.rows}


# -- MLA on the committed H200 rows ----------------------------------------------------------------


def test_committed_mla_cases_put_mla_fa3_first_and_bind_on_the_matmul_ceiling() -> None:
    data = report_data(committed("h200-mla"))
    cases = {c.label: c for c in mla_cases(data.rows, data.ok)}
    big = cases["decode bs128 x 8k bf16"]
    best = big.fastest
    assert best is not None
    assert best.backend == "flashinfer:mla-fa3"
    assert best.bound == "compute"
    assert best.matmul_frac is not None
    assert best.bandwidth_frac is not None
    assert 0.70 < best.matmul_frac < 0.80  # 585 TFLOP/s of the run's 800
    assert best.matmul_frac > best.bandwidth_frac
    fa2 = big.cell("flashinfer:mla-fa2")
    assert fa2 is not None
    assert fa2.latency_us > 2 * best.latency_us
    decode = [c for c in cases.values() if c.kind == "decode"]
    assert len(decode) >= 10
    assert all(c.fastest is not None and c.fastest.bound == "compute" for c in decode)
    assert {c.label for c in cases.values() if c.kind == "prefill"} == {
        "prefill bs1 x 4k bf16",
        "prefill bs1 x 16k bf16",
    }


def test_committed_mla_section_names_the_fastest_kernel_and_the_binding_fraction() -> None:
    sec = mla_section(report_data(committed("h200-mla")))
    assert sec is not None
    t = table(sec)
    assert t.headers[1] == "flashinfer:mla-fa3"  # fastest on most cases: first column
    cells = by_first(t)["decode bs128 x 8k bf16"]
    assert cells["flashinfer:mla-fa3"].startswith("**497.3 µs**")
    assert "74% mm" in cells["flashinfer:mla-fa3"]
    assert "59% bw" in cells["flashinfer:mla-fa3"]
    assert cells["binds (fastest)"] == "matmul (74%)"
    assert "sdpa:mla" in t.headers
    words = texts(sec)
    assert "`flashinfer:mla-fa3` in 17 of 17" in words
    assert "**matmul ceiling** is the one MLA decode is judged against" in words
    assert "`flash-attn:mla`: unsupported" in words
    assert "HDIMDIFF64" in words
    # the fp8 latent cache (5 cases): only FlashInfer's two MLA kernels take it
    fp8 = by_first(t)["decode bs32 x 8k e4m3"]
    assert fp8["flashinfer:mla-fa3"].startswith("**478.4 µs**")
    figures = [b for b in sec.blocks if isinstance(b, Figure)]
    assert figures
    assert figures[0].png.startswith(b"\x89PNG")


# -- the GQA sweep on the committed H200 rows ------------------------------------------------------


def test_committed_gqa_sweep_lists_refusals_errors_and_winners() -> None:
    data = report_data(committed("h200-gqa"))
    sec = gqa_section(data)
    assert sec is not None
    rows = by_first(table(sec))
    assert set(rows) >= {f"{g} ({8 * g}/8)" for g in range(1, 17)}
    assert "7 (28/4) qwen2.5-7b" in rows
    assert "8 (8/1, MQA)" in rows
    assert "16 (16/1, MQA)" in rows
    for g in (5, 7, 9, 15):
        assert rows[f"{g} ({8 * g}/8)"]["flashinfer:fa2"] == "refused"
    assert rows["6 (48/8)"]["flashinfer:fa2"].endswith("x")  # group 6 runs on CUDA cores
    assert rows["7 (28/4) qwen2.5-7b"]["flashinfer:tc"].startswith("1.")
    assert all(r["flashinfer:cudnn"] == "error" for r in rows.values())
    assert rows["16 (128/8)"]["flex"] == "error"
    assert "ctx4096: sdpa:cudnn" in rows["4 (32/8)"]["fastest per length"]
    words = texts(sec)
    assert (
        "`flashinfer:fa2` refuses group 5, 7, 9, 10, 11, 12, 13, 14, 15: FlashInfer's CUDA-core "
        "decode supports 1, 2, 3, 4, 6, 8, 16" in words
    )
    assert "`flashinfer:trtllm-gen` refuses every case here: trtllm-gen kernels" in words
    # the old build's cuDNN errors show as what they were, with the versions that raised them
    assert (
        "`flashinfer:cudnn` error on 38 cases (every group size; flashinfer-python 0.7.4, "
        "nvidia-cudnn-cu13 9.19.0.56): RuntimeError: Failed to load cubin for decode" in words
    )
    assert "`flex` error on 4 cases (group 16; torch 2.11.0, triton 3.6.0): InductorError" in words
    found = re.search(r"\*\*Wrong answers found\*\*: none; all (\d+) rows that ran passed", words)
    assert found is not None
    assert int(found[1]) == int((data.rows["status"] == "ok").sum())
    assert int(found[1]) > 300


# -- rows built in the test: a wrong answer is named with its versions --------------------------


def _sweep_rows() -> list[ResultRow]:
    tc = CostModel(8.0, 2800.0, 380.0, dtypes=("bfloat16",))
    fa3 = CostModel(25.0, 3300.0, 620.0, dtypes=("bfloat16",), fp8="mismatch")
    out = []
    for group in range(1, 7):
        s = spec(
            "decode", [4096] * 8, num_qo_heads=8 * group, dtype="bfloat16", kv_dtype="fp8_e4m3"
        )
        out.append(row(s, "flashinfer:tc", model=tc))
        out.append(row(s, "flash-attn:fa3", model=fa3))
        if group == 5:
            why = "flashinfer:fa2: group size 5 (40/8 heads): no CUDA-core kernel"
            out.append(
                ResultRow(
                    run_id="fake-h200",
                    case_id=s.case_id,
                    backend="flashinfer:fa2",
                    spec=s.model_dump(mode="json"),
                    status="unsupported",
                    reason=why,
                )
            )
        else:
            out.append(row(s, "flashinfer:fa2", model=tc, scale=1.3))
    return out


def test_a_wrong_answer_is_listed_with_the_library_versions(tmp_path: Path) -> None:
    path = write_results(tmp_path / "gqa.jsonl", _sweep_rows())
    data = report_data([path])
    (sweep,) = gqa_sweeps(data.rows, {path.name: {"fa3-fwd": "0.0.3", "torch": "2.11.0"}})
    assert [p["backend"] for p in sweep.problems] == ["flash-attn:fa3"]
    assert sweep.problems[0]["versions"] == "fa3-fwd 0.0.3"
    assert sweep.problems[0]["groups"] == [1, 2, 3, 4, 5, 6]
    sec = gqa_section(data)
    assert sec is not None
    rows = by_first(table(sec))
    assert rows["3 (24/8)"]["flash-attn:fa3"] == "WRONG"
    assert rows["3 (24/8)"]["flashinfer:tc"].startswith("**fastest**")
    assert rows["3 (24/8)"]["flashinfer:fa2"] == "1.30x"
    assert rows["5 (40/8)"]["flashinfer:fa2"] == "refused"
    words = texts(sec)
    assert "**Wrong answers found** (the accuracy gate failed them)" in words
    assert "`flash-attn:fa3` WRONG on 6 cases (every group size; fa3-fwd 0.0.3)" in words
    assert "`flashinfer:fa2` refuses group 5: no CUDA-core kernel" in words


def test_fewer_than_four_group_sizes_is_no_sweep(tmp_path: Path) -> None:
    rows = [r for r in _sweep_rows() if r.spec.num_qo_heads <= 24]
    data = report_data([write_results(tmp_path / "few.jsonl", rows)])
    assert gqa_sweeps(data.rows, {}) == []
    assert gqa_section(data) is None
    assert mla_section(data) is None


def test_refusal_reason_drops_what_varies_along_the_sweep() -> None:
    why = (
        "flashinfer:fa2: group size 14 (112/8 heads): FlashInfer's CUDA-core decode supports "
        "1, 2, 3, 4, 6, 8, 16; use flashinfer:tc"
    )
    assert refusal_reason("flashinfer:fa2", why) == (
        "FlashInfer's CUDA-core decode supports 1, 2, 3, 4, 6, 8, 16; use flashinfer:tc"
    )
    assert refusal_reason("sdpa:flash", "needs sm80+") == "needs sm80+"
