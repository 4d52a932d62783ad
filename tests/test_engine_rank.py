"""The engine ranking (`analysis.engine_rank`, read by findings' "Engine rows ranked" and the
deploy options): deployable configurations only, per CUDA-graph bucket, against the engine
default, raw gains apart."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.analysis.engine_buckets import bucket_of, bucket_weights
from attnbench.analysis.engine_rank import engine_rows, knobs_match, rank_engine
from attnbench.analysis.frame import load, ok_rows
from attnbench.cli import app
from attnbench.engines.paths import KernelPath, vllm_capture_sizes
from fixtures_results import MODELS, row, spec, write_results

RESULTS = Path(__file__).resolve().parents[1] / "results"
COMMITTED = [
    RESULTS / n for n in ("h200-brief.jsonl.gz", "h200-fp8.jsonl.gz", "h200-traces.jsonl.gz")
]


def test_buckets_pad_up_and_weights_normalise() -> None:
    sizes = vllm_capture_sizes()
    assert [bucket_of(b, sizes) for b in (1, 3, 9, 100, 300, 600)] == [1, 4, 16, 104, 304, 512]
    uniform = bucket_weights(sizes, None)
    assert len(uniform) == 51
    assert abs(sum(uniform.values()) - 1) < 1e-12
    w = bucket_weights(sizes, {3: 2, 4: 2, 100: 4})
    assert w[4] == 0.5
    assert w[104] == 0.5
    assert w[1] == 0.0
    with pytest.raises(ValueError, match="no positive count"):
        bucket_weights(sizes, {0: 5})


def test_raw_knobs_match_only_the_engine_path() -> None:
    fa = KernelPath(
        "flash-attn:fa3", {"num_splits": 0, "pack_gqa": None, "scheduler_metadata": True}, ""
    )
    in_plan = {"num_splits": 0, "pack_gqa": "auto", "scheduler_metadata": "per-step, in plan"}
    assert knobs_match(fa, in_plan)
    assert not knobs_match(fa, {**in_plan, "num_splits": 16})
    assert not knobs_match(fa, {**in_plan, "scheduler_metadata": "in each run"})
    fi = KernelPath("flashinfer:fa2", {"use_cuda_graph": True, "fixed_split_size": None}, "")
    assert knobs_match(fi, {"use_cuda_graph": True, "knobs_ignored": "fixed_split_size"})
    assert not knobs_match(fi, {"use_cuda_graph": False, "fixed_split_size": "none"})
    assert not knobs_match(fi, {})  # a row that does not say how it ran is not the path


def test_committed_h200_rows_rank_what_vllm_runs_not_xqa() -> None:
    frame = load(COMMITTED).frame
    (rec,) = rank_engine(frame, "vllm")
    assert rec.inferred
    assert "inferred from raw variant" in rec.notes[0]
    assert "weighted uniformly" in " ".join(rec.notes)
    assert rec.choice is not None
    # vLLM's FLASHINFER decode is the tensor-core wrapper, never XQA or the CUDA-core kernel.
    assert rec.choice.config.variant == "vllm:flashinfer"
    assert "flashinfer:xqa" not in rec.choice.inferred_from
    assert rec.choice.config.command.startswith("vllm serve MODEL --attention-backend FLASHINFER")
    assert rec.regret is not None
    assert rec.regret >= 0
    assert rec.default is not None
    assert rec.default.variant == "vllm:flash-attn"
    # raw FA3 at its default num_splits is not what FLASH_ATTN runs under CUDA graphs
    assert all("num_splits=16" in g.note for g in rec.raw_gains if g.raw == "flash-attn:fa3")


def test_engine_variant_rows_are_ranked_per_bucket_with_regret(tmp_path: Path) -> None:
    rows = []
    for bs, fast in ((8, "vllm:flashinfer"), (128, "vllm:flash-attn")):
        for ctx in (1024, 4096):
            s = spec("decode", [ctx] * bs)
            for variant in ("vllm:flashinfer", "vllm:flash-attn"):
                scale = 0.8 if variant == fast else 1.0
                rows.append(row(s, variant, scale=scale, model=MODELS["flashinfer:tc"]))
    pre = spec("prefill", [2048, 1024])
    rows += [
        row(pre, v, model=MODELS["flashinfer:tc"]) for v in ("vllm:flashinfer", "vllm:flash-attn")
    ]
    frame = load([write_results(tmp_path / "e.jsonl", rows)]).frame
    own, inferred = engine_rows(ok_rows(frame), "vllm")
    assert not inferred
    assert set(own["backend"]) == {"vllm:flashinfer", "vllm:flash-attn"}
    (rec,) = rank_engine(frame, "vllm", running={8: 1.0, 100: 3.0})
    assert [b.batch for b in rec.batches] == [8, 128]
    by = {b.batch: b for b in rec.batches}
    assert by[8].best is not None
    assert by[8].best.variant == "vllm:flashinfer"
    assert by[128].best is not None
    assert by[128].best.variant == "vllm:flash-attn"
    assert by[128].weight == pytest.approx(0.75)  # 100 pads to 104, nearest measured is 128
    assert rec.choice is not None
    assert rec.choice.config.variant == "vllm:flash-attn"
    assert rec.regret is not None
    assert 0 < rec.regret < 0.25
    assert rec.choice.decode_vs_default == pytest.approx(1.0)  # FLASH_ATTN is the default
    assert rec.choice.prefill_cases == 1


def test_cli_recommend_engine(tmp_path: Path) -> None:
    runner = CliRunner()
    engines = [RESULTS / "h200-traces-engines.jsonl.gz", RESULTS / "h200-fp8-engines.jsonl.gz"]
    args = ["recommend", *map(str, COMMITTED + engines), "--model", "llama-3.1-8b"]
    out = runner.invoke(app, [*args, "--engine", "vllm"], env={"COLUMNS": "80"})
    assert out.exit_code == 0, out.output
    assert out.output.count("vllm serve MODEL") == 1  # one command for one engine
    assert "--attention-backend FLASH" in out.output
    bad = runner.invoke(app, [*args, "--engine", "trt"])
    assert bad.exit_code == 2
    assert "--engine='trt' is not known; allowed: vllm, sglang, none" in bad.output
    assert "Traceback" not in bad.output
