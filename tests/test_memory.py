"""Memory estimates (pure) and the sweep's check before a case is built: a case that cannot fit
is an `unsupported` row that says how much it needs and how much is free."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.backends import select_backends
from attnbench.backends.reference import _LOGITS_BUDGET_BYTES
from attnbench.cli import app
from attnbench.measure.config import MeasureConfig
from attnbench.measure.hardware import detect
from attnbench.results import ResultWriter, finished_keys, read_results
from attnbench.run.sweep import SweepContext, run_case
from attnbench.workload import memory
from attnbench.workload.spec import TreeSpec, WorkloadSpec

GIB = 1 << 30


def spec(**kw: object) -> WorkloadSpec:
    base: dict[str, object] = dict(
        kind="decode", num_qo_heads=32, num_kv_heads=8, head_dim=128, dtype="bfloat16"
    )
    base.update(kw)
    if "kv_lens" not in base:
        base["kv_lens"] = (65536,) * 32
    if "qo_lens" not in base:
        lens = base["kv_lens"]
        assert isinstance(lens, tuple)
        base["qo_lens"] = lens if base["kind"] == "prefill" else (1,) * len(lens)
    base.setdefault("kv_dtype", base["dtype"])
    return WorkloadSpec.model_validate(base)


def test_brief_decode_at_64k_needs_its_kv_cache_and_more() -> None:
    s = spec()
    est = memory.estimate(s, "reference")
    # 32 requests x 65536 tokens x 8 heads x 128 x (K, V) x 2 bytes = 8 GiB, whole pages
    assert est.kv_cache == 8 * GIB
    assert est.staging == 0
    assert est.total > est.kv_cache
    assert est.reference_work > 1 * GIB  # K and V of the longest request in fp64 alone: 1 GiB


def test_variants_that_copy_kv_need_more_than_paged_ones() -> None:
    s = spec()
    paged = memory.estimate(s, "flashinfer:fa2").total
    assert memory.estimate(s, "flex").total > paged
    assert memory.estimate(s, "sdpa:math").total > memory.estimate(s, "sdpa:cudnn").total
    assert memory.estimate(s, "sdpa:cudnn").total > paged
    assert memory.estimate(s, "flashinfer:tc+tuned").total == paged
    copied = memory.variant_workspace(s, "vllm:triton-attn")  # the cache in vLLM's layout
    assert copied - memory.variant_workspace(s, "flashinfer:fa2") == memory.kv_cache_bytes(s)
    assert memory.estimate(s, "vllm:triton-attn").total > paged


def test_fp8_counts_the_bf16_staging_copy() -> None:
    bf16 = memory.estimate(spec(), "flashinfer:fa2")
    fp8 = memory.estimate(spec(kv_dtype="fp8_e4m3"), "flashinfer:fa2")
    assert fp8.kv_cache == bf16.kv_cache // 2
    assert fp8.staging >= 2 * bf16.kv_cache  # bf16 source + fp32 temporaries


def test_shared_prefix_pages_are_stored_once() -> None:
    shared = spec(kind="shared_prefix", kv_lens=(4096,) * 8, shared_prefix_len=4096)
    assert memory.unique_pages(shared) == 4096 // 16
    assert memory.kv_cache_bytes(shared) * 8 == memory.kv_cache_bytes(spec(kv_lens=(4096,) * 8))


def test_prefill_reference_chunks_its_logits() -> None:
    s = spec(kind="prefill", kv_lens=(65536,))
    # the whole 64k x 64k x 32-head score matrix in fp64 would be 1 TiB: the oracle chunks it;
    # what stays is q, K and V in fp64 (2 + 1 GiB), temporaries and a few chunks of logits
    assert 3 * GIB < memory.reference_working_bytes(s) < 8 * GIB


def test_tree_and_estimates_are_positive() -> None:
    tree = TreeSpec(name="chain-4", parents=(-1, 0, 1, 2))
    s = spec(kind="tree", kv_lens=(100, 200), qo_lens=(4, 4), tree=tree)
    for variant in ("reference", "sdpa:math", "flex", "flash-attn:fa3", "flashinfer:tc"):
        assert memory.estimate(s, variant).total > 0


def test_logits_budget_matches_the_oracle() -> None:
    assert memory.LOGITS_BUDGET_BYTES == _LOGITS_BUDGET_BYTES


def test_too_big_names_need_and_free() -> None:
    est = memory.estimate(spec(), "sdpa:math")
    reason = memory.too_big(est, 2 * GIB, "host")
    assert reason is not None
    assert "needs ~" in reason
    assert "KV cache 8.0" in reason
    assert "2.0 GiB free" in reason
    assert memory.too_big(est, 10 * est.total, "host") is None


def test_host_available_reads_meminfo_and_the_cgroup_limit(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 100 kB\nMemAvailable:    2048 kB\n")
    cg = tmp_path / "cg"
    cg.mkdir()
    assert memory.host_available_bytes(meminfo, cg) == 2048 * 1024
    (cg / "memory.max").write_text("1000000\n")
    (cg / "memory.current").write_text("900000\n")
    (cg / "memory.stat").write_text("anon 1\ninactive_file 50000\n")
    assert memory.host_available_bytes(meminfo, cg) == 150000
    (cg / "memory.max").write_text("max\n")
    assert memory.host_available_bytes(meminfo, cg) == 2048 * 1024
    assert memory.host_available_bytes(tmp_path / "none", tmp_path / "none") is None


def test_free_bytes_on_this_cpu_is_known() -> None:
    free = memory.free_bytes("cpu")
    if os.path.exists("/proc/meminfo"):
        assert free is not None
        assert free > 0


def _ctx(free: int | None, rows: list[object]) -> SweepContext:
    return SweepContext(
        run_id="t",
        info=detect("cpu"),
        measure_cfg=MeasureConfig(timer="fake", max_time_ms=1, min_runs=1),
        on_row=rows.append,
        free_memory=lambda device: free,
    )


def test_sweep_refuses_a_case_that_cannot_fit_before_building_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_inputs(*args: object, **kw: object) -> None:
        raise AssertionError("inputs must not be built for a case that cannot fit")

    monkeypatch.setattr("attnbench.run.sweep.make_inputs", no_inputs)
    rows: list[object] = []
    out = run_case(spec(kv_lens=(64,)), select_backends(["reference"]), _ctx(1024, rows))
    assert [r.status for r in out] == ["unsupported"]
    row = out[0]
    assert "needs ~" in row.reason
    assert "host memory" in row.reason
    assert row.details["memory"]["free_bytes"] == 1024
    assert row.details["memory"]["total"] > 1024


def test_sweep_keeps_the_variants_that_fit() -> None:
    s = spec(kv_lens=(64, 32))
    small = memory.estimate(s, "reference").total
    big = memory.estimate(s, "sdpa:math").total
    free = int((small + big) / 2 / memory.HEADROOM)
    assert small < free * memory.HEADROOM < big
    rows: list[object] = []
    out = run_case(s, select_backends(["reference", "sdpa:math"]), _ctx(free, rows))
    status = {r.backend: r.status for r in out}
    assert status == {"sdpa:math": "unsupported", "reference": "ok"}


def test_unknown_free_memory_refuses_nothing() -> None:
    rows: list[object] = []
    out = run_case(spec(kv_lens=(16,)), select_backends(["reference"]), _ctx(None, rows))
    assert [r.status for r in out] == ["ok"]


def test_resume_retries_rows_refused_for_memory(tmp_path: Path) -> None:
    rows: list[object] = []
    refused = run_case(spec(kv_lens=(16,)), select_backends(["reference"]), _ctx(1, rows))
    ok = run_case(spec(kv_lens=(32,)), select_backends(["reference"]), _ctx(None, rows))
    path = tmp_path / "r.jsonl"
    from attnbench.results import Header

    with ResultWriter(path) as w:
        w.write(Header(run_id="t", provenance={}))
        for r in refused + ok:
            w.write(r)
    assert finished_keys(path) == {ok[0].key}


@pytest.mark.usefixtures("fake_timer")
def test_run_where_nothing_fits_exits_3_with_the_need(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("attnbench.workload.memory.free_bytes", lambda device: 1 << 20)
    out = tmp_path / "r.jsonl"
    res = CliRunner().invoke(
        app,
        [
            *["run", "--device", "cpu", "-b", "reference", "-l", "4096", "--batch-size", "2"],
            *["--kv-dtype", "bf16", "--out", str(out)],
        ],
    )
    assert res.exit_code == 3, res.output
    assert "nothing could run" in res.output
    [row] = read_results(out).rows
    assert row.status == "unsupported"
    assert "needs ~" in row.reason
    assert "1.0 MiB" not in row.reason  # sizes in GiB
    assert "0.0 GiB free" in row.reason


def test_release_memory_collects_what_was_made_since_and_freezes_the_rest() -> None:
    """After a backend: cyclic garbage made since the last release is collected; what lives
    on is frozen, so the next collection does not scan torch's objects again (0.25 s each on
    an H100 host, 31 s of one default run)."""
    import gc
    import weakref

    from attnbench.run.sweep import release_memory

    class Node:
        def __init__(self) -> None:
            self.me = self

    try:
        release_memory()
        assert gc.get_freeze_count() > 0
        cycle = Node()
        gone = weakref.ref(cycle)
        del cycle
        release_memory()
        assert gone() is None
    finally:
        gc.unfreeze()
