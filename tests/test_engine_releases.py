"""`engines.paths.RELEASES`: each engine release's flags, the commands printed for it, and the
rules that depend on it (vLLM FA3's split cap under CUDA graphs)."""

from __future__ import annotations

import pytest

from attnbench.engines.paths import (
    ENGINES,
    SETTINGS,
    VLLM_CUDA_GRAPH_SPLITS,
    KernelPath,
    command_flags,
    kernel_path,
    release,
    release_command,
    releases,
)
from attnbench.workload.spec import WorkloadSpec


@pytest.mark.parametrize("engine", ENGINES)
def test_every_printed_flag_exists_in_the_release_it_names(engine: str) -> None:
    for rel in releases(engine):  # type: ignore[arg-type]
        for s in (s for s in SETTINGS if s.engine == engine):
            for kv in s.kv_dtypes:
                lines = release_command(s.variant, kv, s.default_page_size, 2, rel)
                assert lines[0] == f"# flags of {rel.label()}"
                assert command_flags(lines) <= rel.flags, (rel.version, s.variant)


def test_the_default_release_is_the_newest_known() -> None:
    assert release("vllm").version == "0.34.0"
    assert release("sglang").version == "0.5.23"
    assert release("vllm", "pinned").version == "pinned"
    with pytest.raises(ValueError, match=r"allowed: pinned, 0\.34\.0"):
        release("vllm", "0.1")


def test_each_release_says_what_changed_since_the_pinned_commits() -> None:
    for engine in ENGINES:
        newest = release(engine)
        assert newest.changes
        assert newest.read_from
    assert "--cuda-graph-max-bs" not in release("sglang").flags
    assert "--cuda-graph-max-bs-decode" in release("sglang").flags
    assert "--decode-attention-backend" in release("sglang").flags
    assert release("sglang").sinks_backend == "fa3"  # triton only off Hopper and SM100
    assert "--cudagraph-capture-sizes" in release("vllm").flags


def _splits(rel_version: str | None) -> object:
    spec = WorkloadSpec(
        kind="decode",
        kv_lens=(4096,) * 8,
        qo_lens=(1,) * 8,
        num_qo_heads=32,
        num_kv_heads=8,
        head_dim=128,
        page_size=16,
    )
    rel = release("vllm", rel_version) if rel_version else None
    path = kernel_path("vllm:flash-attn", spec, rel)
    assert isinstance(path, KernelPath)
    return path.knobs["num_splits"]


def test_the_vllm_fa3_split_cap_is_the_named_releases() -> None:
    assert _splits(None) == VLLM_CUDA_GRAPH_SPLITS == 16
    assert _splits("pinned") == 16
    assert _splits("0.34.0") == 32


def test_recommend_prints_the_decision_for_the_asked_release() -> None:
    from typer.testing import CliRunner

    from attnbench.cli import app

    runner = CliRunner()
    args = ["recommend", "--model", "llama-3.1-70b", "--tp", "8", "--engine", "vllm"]
    res = runner.invoke(app, [*args, "--engine-version", "0.34.0"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "flags of vllm 0.34.0:" in text
    assert "changed since the rows' commits:" in text
    bad = runner.invoke(app, [*args, "--engine-version", "9"])
    assert bad.exit_code == 2
    assert "allowed: pinned, 0.34.0" in bad.output
    assert "Traceback" not in bad.output
