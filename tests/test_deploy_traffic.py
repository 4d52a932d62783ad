"""`recommend --engine E --trace T` (`deploy.traffic`): the capture buckets are
weighted by how often the trace's running batch falls in each, from the replay simulator on the
deployment the committed rows describe, instead of uniformly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from attnbench.analysis.engine_buckets import bucket_weights, capture_sizes
from attnbench.cli import app
from attnbench.deploy.traffic import TRACE_LIMIT, check_trace, running_batches
from attnbench.replay.pipeline import ReplayError

RESULTS = Path(__file__).resolve().parents[1] / "results"
COMMITTED = [
    RESULTS / n for n in ("h200-brief.jsonl.gz", "h200-fp8.jsonl.gz", "h200-traces.jsonl.gz")
]
GPU = "NVIDIA H200"


@pytest.fixture(scope="module")
def committed() -> list[Path]:
    if not all(p.is_file() for p in COMMITTED):
        pytest.skip("no committed H200 brief rows")
    return COMMITTED


def _mean(hist: dict[int, int]) -> float:
    sizes = np.array(list(hist), dtype=float)
    steps = np.array(list(hist.values()), dtype=float)
    return float((sizes * steps).sum() / steps.sum())


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_bundled_trace_weights_are_non_uniform_on_captured_sizes(
    committed: list[Path], engine: str
) -> None:
    run = running_batches(committed, GPU, "vllm" if engine == "vllm" else "sglang", "azure-code")
    assert run.requests == TRACE_LIMIT
    assert run.deployment.startswith("llama-3.1-8b at tp 1, q32/kv8/d128 bfloat16")
    assert run.steps == sum(run.histogram.values()) > 1000
    assert min(run.histogram) >= 1
    assert max(run.histogram) <= 256  # replay's batch limit
    sizes = capture_sizes("vllm" if engine == "vllm" else "sglang")
    weights = bucket_weights(sizes, run.histogram)
    assert sum(weights.values()) == pytest.approx(1.0)
    assert set(weights) == set(sizes)
    held = {b for b, w in weights.items() if w > 0}
    assert held <= set(sizes)
    assert 1 < len(held) < len(sizes)
    assert max(weights.values()) > 3 / len(sizes)  # far from uniform
    # every step's batch lands in the bucket it pads to
    one = weights[1]
    assert one == pytest.approx(run.histogram.get(1, 0) / run.steps)
    mixed = "prefill chunks mixed into decode steps" if engine == "vllm" else "prefill batches"
    assert mixed in run.source()


@pytest.mark.slow
def test_traffic_sets_the_running_batch(committed: list[Path]) -> None:
    """Mooncake's conversations run many requests at once; Azure's code trace mostly one or two:
    the histogram is the replay's, not a fixed table."""
    code = running_batches(committed, GPU, "vllm", "azure-code")
    moon = running_batches(committed, GPU, "vllm", "mooncake-conv")
    assert _mean(moon.histogram) > 5 * _mean(code.histogram)
    agents = running_batches(committed, GPU, "vllm", "agents:450")
    assert agents.requests == 450
    assert "at most 450 running" in agents.source()


def test_rows_without_a_replayable_shape_say_so(tmp_path: Path) -> None:
    gqa = sorted(RESULTS.glob("h200-gqa.jsonl*"))
    if not gqa:
        pytest.skip("no committed GQA rows")
    with pytest.raises(ReplayError, match="no 16-bit decode and prefill rows on NVIDIA H200"):
        running_batches(gqa, GPU, "vllm", "azure-conv")


def test_check_trace_names_the_allowed_traces(tmp_path: Path) -> None:
    for ok in ("azure-conv", "Azure-Code", "mooncake-conv", "agents:450", "agents:8@256-1024"):
        assert check_trace(ok) is None
    f = tmp_path / "t.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    assert check_trace(str(f)) is None
    assert check_trace("azure") == (
        "--trace='azure' is not a known trace or a file; allowed: azure-code, azure-conv, "
        "mooncake-conv, agents:N[@LO-HI] or a trace file"
    )


@pytest.mark.slow
def test_cli_weights_buckets_by_the_trace(committed: list[Path], tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "rec.json"
    rows = [*committed, committed[0].parent / "h200-traces-engines.jsonl.gz"]
    args = ["recommend", *map(str, rows), "--model", "llama-3.1-8b", "--engine", "vllm"]
    res = runner.invoke(app, [*args, "--trace", "azure-conv", "--json", str(out)])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "decode steps replayed from trace azure-conv (first 2,000 requests" in text
    doc = json.loads(out.read_text())
    assert doc["weighting"].startswith("the running batch of")
    assert sum(b["weight"] for b in doc["buckets"]) == pytest.approx(1.0)
    assert doc["extrapolated_share"] is not None
    flat_out = tmp_path / "flat.json"
    assert runner.invoke(app, [*args, "--json", str(flat_out)]).exit_code == 0
    flat = json.loads(flat_out.read_text())
    assert flat["weighting"] == "measured cases, equally"
    assert flat["buckets"] == []


def test_cli_bad_trace_is_one_line(committed: list[Path]) -> None:
    runner = CliRunner()
    args = ["recommend", *map(str, committed), "--model", "llama-3.1-8b"]
    bad = runner.invoke(app, [*args, "--engine", "sglang", "--trace", "azure"])
    assert bad.exit_code == 2
    assert "allowed: azure-code, azure-conv, mooncake-conv, agents:N[@LO-HI]" in bad.output
    assert len(bad.output.strip().splitlines()) == 1
    assert "Traceback" not in bad.output
    agents = runner.invoke(app, [*args, "--engine", "vllm", "--trace", "agents:x"])
    assert agents.exit_code == 2
    assert "expected agents:N or agents:N@LO-HI" in agents.output
    both = runner.invoke(app, [*args, "--trace", "azure-conv", "--lengths", "ctx1024"])
    assert both.exit_code == 2
    assert "--trace and --lengths both weight the cases: give one" in both.output
