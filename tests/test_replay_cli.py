"""`attnbench replay` end to end on rows built in the test (CliRunner), and its report section."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import replay_rows as rr
from attnbench.cli import app

runner = CliRunner()


def _strict(text: str) -> Any:
    def bad(token: str) -> None:
        raise ValueError(f"non-JSON constant {token}")

    return json.loads(text, parse_constant=bad)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    return rr.write(tmp_path / "fake-h200.jsonl")


def test_replay_slice_with_rates_target_and_json(results: Path, tmp_path: Path) -> None:
    out = tmp_path / "replay.json"
    res = runner.invoke(
        app,
        [
            "replay", str(results), "--trace", "azure-code", "--limit", "120",
            "--rate-scale", "0.5,1,4", "--itl-target-ms", "20", "--out", str(out),
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "ITL p99" in res.output
    assert "crosses 20 ms" in res.output
    doc = _strict(out.read_text())
    assert doc["schema"] == "attnbench.replay/1"
    assert doc["trace"]["requests"] == 120
    assert doc["gpu"] == rr.GPU
    assert doc["gemm"]["copy_gbps"] == rr.COPY_GBPS
    assert doc["gemm"]["allreduce"] == "not modelled"
    assert {m["backend"] for m in doc["models"]} == set(rr.COEFS)
    names = {c["name"] for c in doc["candidates"]}
    assert len(doc["runs"]) == 3 * len(names)
    assert set(doc["crossing"]) == names
    for run in doc["runs"]:
        assert run["finished"] == 120
        assert run["ttft_ms"]["p99"] >= run["ttft_ms"]["p50"]
    # the deployment's options sit flat in `config`, as in every older document
    assert doc["config"]["model"] == "llama-3.1-70b"
    assert doc["config"]["tp"] == 8
    assert doc["config"]["rate_scales"] == [0.5, 1, 4]
    assert doc["deployment"]["kv_pages"] > 0
    # the provenance block of result files (issue 20)
    from attnbench.results import git_sha, library_versions

    prov = doc["provenance"]
    assert prov["git_sha"] == git_sha()
    assert prov["libraries"] == library_versions()
    assert "python" in prov
    assert "time" in prov
    # and the file reads back through the typed document
    from attnbench.replay.document import load_document

    typed = load_document(out)
    assert typed.trace.requests == 120
    assert typed.config.deployment.tp == 8


def test_agents_scenario_compares_padded_and_ragged(results: Path, tmp_path: Path) -> None:
    out = tmp_path / "agents.json"
    res = runner.invoke(
        app,
        ["replay", str(results), "--trace", "agents:96", "-b", "flashinfer:fa2", "--out", str(out)],
    )
    assert res.exit_code == 0, res.output
    assert "padded vs ragged" in res.output
    assert "[padded]" in res.output
    doc = _strict(out.read_text())
    assert doc["scheduler"]["max_batch"] == 256
    (row,) = doc["padded_vs_ragged"]
    assert row["backend"] == "flashinfer:fa2"
    assert row["ratio_decode_step_ms_p50"] > 1.0


def test_report_gets_a_replay_section(results: Path, tmp_path: Path) -> None:
    out = tmp_path / "replay.json"
    res = runner.invoke(
        app,
        ["replay", str(results), "--trace", "mooncake-conv", "--limit", "40", "--out", str(out)],
    )
    assert res.exit_code == 0, res.output
    doc = _strict(out.read_text())
    assert doc["scheduler"]["prefix_cache"] is True  # Mooncake has hash_ids
    pytest.importorskip("matplotlib")
    from attnbench.analysis.frame import load
    from attnbench.report.blocks import Figure, Table
    from attnbench.report.build import build_sections

    groups = build_sections(load([results, out]))
    sections = [s for _, secs in groups for s in secs if s.title == "Serving replay"]
    assert len(sections) == 1
    kinds = [type(b) for b in sections[0].blocks]
    assert Figure in kinds
    assert Table in kinds


def test_no_rows_of_the_model_shape_is_one_clear_error(results: Path) -> None:
    res = runner.invoke(app, ["replay", str(results), "--model", "llama-3.1-8b", "--tp", "1"])
    assert res.exit_code == 2
    assert "no ok rows of shape q32/kv8/d128" in res.output
    assert "q8/kv1/d128" in res.output  # what the files do hold


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rate-scale", "1,x"], "comma-separated numbers"),
        (["--hybrid", "flashinfer:fa2"], "PREFILL,DECODE"),
        (["--trace", "no-such-trace"], "no-such-trace"),
        (["--backend", "cudnn"], "no cost model"),
        (["--page-size", "24"], "page_size=24 must be a power of two"),
        (["--kv-dtype", "int3"], "kv_dtype"),
    ],
)
def test_bad_input_fails_with_one_line(results: Path, args: list[str], message: str) -> None:
    res = runner.invoke(app, ["replay", str(results), "--limit", "5", *args])
    assert res.exit_code == 2
    assert message in res.output
    assert "Traceback" not in res.output


def test_live_without_a_gpu_says_so(results: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    res = runner.invoke(
        app, ["replay", str(results), "--trace", "azure-code", "--limit", "10", "--live", "2"]
    )
    assert res.exit_code == 3  # nothing could run here
    assert "needs a CUDA GPU" in res.output
