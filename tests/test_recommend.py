"""recommend: winners, ties, crossovers, the fp8 decision and the engine export, on crafted rows
whose answer is known from their cost models (tests/fixtures_results.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from attnbench.analysis.engines import export_sglang, export_vllm
from attnbench.analysis.frame import load
from attnbench.analysis.hybrid import Recommendation, recommend
from attnbench.analysis.recommend import DECODE_ALL, crossovers, rank
from attnbench.cli import app
from attnbench.results import ResultRow
from fixtures_results import (
    MODELS,
    CostModel,
    decode_specs,
    make_rows,
    row,
    spec,
    write_results,
)

runner = CliRunner()
FAST = CostModel(8.0, 2800.0, 380.0)


def _frame(tmp_path: Path, rows: list[ResultRow], name: str = "r.jsonl") -> pd.DataFrame:
    return load([write_results(tmp_path / name, rows)]).frame


def _one(tmp_path: Path, rows: list[ResultRow]) -> Recommendation:
    (rec,) = recommend(_frame(tmp_path, rows))
    return rec


def _cls(rec: Recommendation, name: str):  # type: ignore[no-untyped-def]
    return next(c for c in rec.classes if c.cls.name == name)


def test_winner_with_a_significant_margin(tmp_path: Path) -> None:
    specs = decode_specs((1024, 4096, 16384))
    rows = [row(s, "flashinfer:tc") for s in specs]
    rows += [row(s, "sdpa:cudnn") for s in specs]
    rec = _one(tmp_path, rows)
    res = _cls(rec, "decode uniform")
    assert res.winner == "flashinfer:tc"
    assert res.runner_up == "sdpa:cudnn"
    assert res.margin is not None
    assert res.margin.verdict == "slower"  # the runner-up is slower than the winner
    assert res.margin.ci_low > 1.2
    assert not res.is_tie
    assert "3 cases" in res.margin_text()


def test_identical_backends_tie(tmp_path: Path) -> None:
    specs = decode_specs((1024, 4096, 16384))
    rows = [row(s, "flashinfer:tc", seed=1) for s in specs]
    rows += [row(s, "flashinfer:fa2", seed=2, model=FAST) for s in specs]
    res = _cls(_one(tmp_path, rows), "decode uniform")
    assert res.is_tie
    assert res.margin_text().startswith("tie with")
    assert {s.wins for s in res.standings} == {0}


def test_crossover_along_context(tmp_path: Path) -> None:
    specs = decode_specs()
    rows = [row(s, b) for s in specs for b in ("flashinfer:tc", "flash-attn:fa3")]
    frame = _frame(tmp_path, rows)
    (x,) = crossovers(frame, "context")
    assert (x.before, x.after) == ("flashinfer:tc", "flash-attn:fa3")
    assert (x.lo, x.hi) == (1024, 4096)
    assert x.estimate is not None
    assert 1024 < x.estimate < 4096
    assert x.significant
    assert "bs32" in x.describe()


def test_crossover_along_batch(tmp_path: Path) -> None:
    slow_start = CostModel(60.0, 5000.0, 900.0)  # wins once the batch is large
    specs = [spec("decode", [4096] * bs, lengths="ctx4096") for bs in (1, 8, 64)]
    rows = [row(s, "flashinfer:tc") for s in specs]
    rows += [row(s, "flashinfer:fa2", model=slow_start) for s in specs]
    res = rank(_frame(tmp_path, rows).query("status == 'ok'"), DECODE_ALL)
    axes = {c.axis: c for c in res.crossovers}
    assert "batch" not in axes  # DECODE_ALL looks along context only
    (x,) = crossovers(_frame(tmp_path, rows, "b.jsonl"), "batch")
    assert (x.before, x.after) == ("flashinfer:tc", "flashinfer:fa2")
    rec = _one(tmp_path, rows)
    assert _cls(rec, "decode small batch").winner == "flashinfer:tc"
    assert _cls(rec, "decode large batch").winner == "flashinfer:fa2"


def test_plan_takes_fp8_when_faster_and_accurate(tmp_path: Path) -> None:
    specs = decode_specs((1024, 4096, 16384))
    specs += decode_specs((1024, 4096, 16384), kv_dtype="fp8_e4m3")
    rows = [row(s, "flashinfer:tc") for s in specs]
    plan = _one(tmp_path, rows).plan
    assert plan.kv_dtype == "fp8_e4m3"
    assert plan.decode_backend == "flashinfer:tc"
    kv = next(c for c in plan.choices if c.role == "kv_dtype")
    assert "3 cases" in kv.evidence[0]


def test_plan_rejects_fp8_when_slower(tmp_path: Path) -> None:
    slow_fp8 = CostModel(8.0, 2800.0, 380.0, fp8_efficiency=0.3)  # the H200 probe's finding
    specs = decode_specs((1024, 4096, 16384))
    specs += decode_specs((1024, 4096, 16384), kv_dtype="fp8_e4m3")
    plan = _one(tmp_path, [row(s, "flashinfer:tc", model=slow_fp8) for s in specs]).plan
    assert plan.kv_dtype == "auto"
    kv = next(c for c in plan.choices if c.role == "kv_dtype")
    assert "slower" in kv.evidence[0]


def test_plan_rejects_fp8_when_inaccurate(tmp_path: Path) -> None:
    fast_but_wrong = CostModel(8.0, 2800.0, 380.0)
    specs = decode_specs((1024, 4096))
    fp8 = decode_specs((1024, 4096), kv_dtype="fp8_e4m3")
    rows = [row(s, "flashinfer:tc", model=fast_but_wrong) for s in specs + fp8]
    # one fp8 row of the same variant fails the accuracy gate: the variant is out for fp8
    rows.append(row(spec("decode", [512] * 32, kv_dtype="fp8_e4m3"), "flash-attn:fa3"))
    rows[-1] = rows[-1].model_copy(update={"backend": "flashinfer:tc"})
    plan = _one(tmp_path, rows).plan
    assert plan.kv_dtype == "auto"
    kv = next(c for c in plan.choices if c.role == "kv_dtype")
    assert "rejected" in kv.evidence[0]
    assert "accuracy" in kv.evidence[0]


def test_page_size_from_measurements(tmp_path: Path) -> None:
    specs16 = decode_specs((1024, 4096), page_size=16)
    specs64 = decode_specs((1024, 4096), page_size=64)
    rows = [row(s, "flashinfer:tc") for s in specs16]
    rows += [row(s, "flashinfer:tc", scale=0.8) for s in specs64]  # 64 is 20% faster
    plan = _one(tmp_path, rows).plan
    assert plan.page_size == 64
    rows = [row(s, "flashinfer:tc", seed=i) for i, s in enumerate(specs16 + specs64)]
    assert _one(tmp_path, rows).plan.page_size == 16  # a tie keeps the first most measured


def test_full_suite_hybrid_and_engine_flags(tmp_path: Path) -> None:
    rec = _one(tmp_path, make_rows())
    plan = rec.plan
    assert plan.prefill_backend == "flash-attn:fa3"  # 620 TFLOP/s beats 380
    assert plan.decode_backend == "flashinfer:tc"  # fp8 decode, fa3's fp8 is inaccurate
    assert plan.kv_dtype == "fp8_e4m3"
    assert _cls(rec, "tree").winner == "flashinfer:tc"
    assert _cls(rec, "append").n_cases == 0
    sgl = export_sglang(plan)
    assert sgl.args[:4] == [
        "--prefill-attention-backend",
        "fa3",
        "--decode-attention-backend",
        "flashinfer",
    ]
    assert sgl.args[-4:] == ["--kv-cache-dtype", "fp8_e4m3", "--page-size", "16"]
    vllm = export_vllm(plan)
    assert vllm.args[:2] == ["--attention-backend", "FLASHINFER"]
    assert "--block-size" in vllm.args
    assert any("cannot express the hybrid" in n for n in vllm.notes)
    assert plan.prefill_penalty is not None
    assert plan.prefill_penalty.ratio > 1


def test_mismatch_rows_never_win(tmp_path: Path) -> None:
    specs = decode_specs((1024, 4096), kv_dtype="fp8_e4m3")
    rows = [row(s, "flash-attn:fa3") for s in specs]  # all mismatch under its model
    assert MODELS["flash-attn:fa3"].fp8 == "mismatch"
    rows += [row(s, "flashinfer:tc", scale=3.0) for s in specs]
    rec = _one(tmp_path, rows)
    assert _cls(rec, "fp8 KV decode").winner == "flashinfer:tc"


def test_the_contiguous_fa3_baseline_is_never_recommended(tmp_path: Path) -> None:
    """FA3 on a contiguous copy of the cache prices paging; no engine runs it, so even when it
    is the fastest row the recommendation takes the paged variant (issue 14)."""
    specs = decode_specs((1024, 4096, 16384))
    rows = [row(s, "flash-attn:fa3") for s in specs]
    rows += [
        row(s, "flash-attn:fa3", scale=0.8).model_copy(
            update={"backend": "flash-attn:fa3-contiguous"}
        )
        for s in specs
    ]
    rec = _one(tmp_path, rows)
    assert rec.decode.winner == "flash-attn:fa3"
    assert all(c.winner != "flash-attn:fa3-contiguous" for c in rec.classes)


def test_engine_variants_are_left_to_recommend_engine(tmp_path: Path) -> None:
    """`sglang:fa3` replays SGLang's call into FA3: even when it is the fastest row, the kernel
    matrix chooses among kernels (an engine variant's flags cannot be mapped back onto an
    engine); `recommend --engine` ranks the engine variants (issue 21)."""
    specs = decode_specs((1024, 4096, 16384))
    rows = [row(s, "flash-attn:fa3") for s in specs]
    rows += [
        row(s, "flash-attn:fa3", scale=0.8).model_copy(update={"backend": "sglang:fa3"})
        for s in specs
    ]
    rec = _one(tmp_path, rows)
    assert rec.decode.winner == "flash-attn:fa3"
    assert all(not str(c.winner).startswith(("sglang:", "vllm:")) for c in rec.classes)


def test_cli_recommend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_results(tmp_path / "res" / "run.jsonl", make_rows())
    out = tmp_path / "decision.json"
    monkeypatch.setenv("ATTNBENCH_RESULTS", str(path.parent))
    res = runner.invoke(app, ["recommend", "--json", str(out)])
    assert res.exit_code == 0, res.output
    # without --model: the index of model shapes, never one global winner or command
    assert "one line per model shape" in res.output
    assert "vllm serve" not in res.output
    assert "sglang.launch_server" not in res.output
    doc = json.loads(out.read_text())
    assert doc
    assert all({"model", "tp", "heads", "cases"} <= set(d) for d in doc)


def test_cli_recommend_without_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNBENCH_RESULTS", str(tmp_path))
    res = runner.invoke(app, ["recommend"])
    assert res.exit_code == 2
    assert "no results files found" in res.output


def test_cli_recommend_from_another_folder_reads_the_committed_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnbench.analysis.frame import checkout_results

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ATTNBENCH_RESULTS", raising=False)
    committed = checkout_results()
    assert committed == Path(__file__).resolve().parents[1] / "results"
    res = runner.invoke(app, ["recommend", "--model", "llama-3.1-8b"])
    assert res.exit_code == 0, res.output
    assert "decision:" in res.output
    assert not list(tmp_path.iterdir())  # nothing written where it ran


def test_the_traffic_is_replayed_on_the_answers_own_gpu() -> None:
    """Issue 44: with rows of two GPUs, `-v` names the GPU whose step costs made the traffic,
    and it is the answer's GPU, whichever GPU answers."""
    from typer.testing import CliRunner

    from attnbench.cli import app

    results = Path(__file__).resolve().parents[1] / "results"
    h100, h200 = sorted(results.glob("h100-*.jsonl.gz")), sorted(results.glob("h200-*.jsonl.gz"))
    if not h100 or not h200:
        pytest.skip("needs committed rows of both GPUs")
    runner = CliRunner()
    args = ["recommend", "--model", "llama-3.1-8b", "--engine", "vllm", "--trace", "azure-conv"]
    for gpu, name in (("H100", "NVIDIA H100 80GB HBM3"), ("H200", "NVIDIA H200")):
        res = runner.invoke(app, [*args, "--gpu", gpu, "-v"], env={"COLUMNS": "200"})
        assert res.exit_code in (0, 2), res.output
        text = " ".join(res.output.split())
        assert text.startswith(f"llama-3.1-8b tp1 (h32/8 d128) on {name},"), text[:120]
        traffic = text[text.index("traffic:") : text.index("decision:")]
        assert f"on {name}" in traffic, traffic
        other = "NVIDIA H200" if gpu == "H100" else "NVIDIA H100 80GB HBM3"
        assert f"cost on {other}" not in traffic
        assert f"drew on {other}" not in traffic


def test_a_trace_with_no_decode_step_is_an_error_with_its_reason(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from attnbench.cli import app

    trace = tmp_path / "big.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 900000, "output_length": 5}\n')
    args = ["recommend", "--model", "llama-3.1-8b", "--gpu", "H200", "--trace", str(trace)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert "yield no decode step" in res.output
    assert "decision:" not in res.output
    assert "Traceback" not in res.output
