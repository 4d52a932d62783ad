"""The core on a real GPU: device facts, ceilings, timers, cold L2, the reference."""

from __future__ import annotations

import pytest
import torch

from attnbench.backends.reference import reference_attention
from attnbench.measure.config import MeasureConfig
from attnbench.measure.engine import measure
from attnbench.measure.hardware import detect, measure_ceilings
from attnbench.measure.l2 import L2Flusher
from attnbench.workload.inputs import make_inputs
from attnbench.workload.spec import WorkloadSpec

pytestmark = pytest.mark.gpu


def test_gpu_device_facts_and_ceilings() -> None:
    info = detect("cuda:0")
    assert info.sm >= 80
    assert info.l2_bytes >= 40 << 20
    ceil = measure_ceilings(info, quick=True)
    assert ceil.copy_bandwidth_gbps > 500
    assert ceil.matmul_tflops["bfloat16"] > 50


def test_gpu_graph_and_event_timers_agree_on_a_long_kernel() -> None:
    dev = torch.device("cuda:0")
    a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    out = torch.empty_like(a)
    cfg = MeasureConfig(timer="cuda-event", cold_l2=False, min_runs=20, max_time_ms=200)
    ev = measure(lambda: torch.matmul(a, a, out=out), cfg, device=dev)
    cfg = MeasureConfig(timer="cuda-graph", cold_l2=False, min_runs=20, max_time_ms=200)
    gr = measure(lambda: torch.matmul(a, a, out=out), cfg, device=dev)
    assert gr.timer == "cuda-graph"
    assert abs(gr.stats.median_us / ev.stats.median_us - 1) < 0.1


def test_gpu_cold_l2_is_slower_than_warm_for_an_l2_resident_read() -> None:
    dev = torch.device("cuda:0")
    info = detect("cuda:0")
    x = torch.randn(info.l2_bytes // 16, device=dev)  # a quarter of L2, in fp32
    flusher = L2Flusher(dev, info.l2_bytes)
    warm = measure(
        x.sum,
        MeasureConfig(timer="cuda-event", cold_l2=False, min_runs=50),
        device=dev,
        flusher=flusher,
    )
    cold = measure(
        x.sum,
        MeasureConfig(timer="cuda-event", cold_l2=True, min_runs=50),
        device=dev,
        flusher=flusher,
    )
    assert cold.l2_policy.startswith("cold")
    assert cold.stats.median_us > warm.stats.median_us


def test_gpu_reference_matches_cpu() -> None:
    spec = WorkloadSpec(
        kind="append",
        num_qo_heads=8,
        num_kv_heads=2,
        head_dim=64,
        kv_lens=(300, 41),
        qo_lens=(5, 3),
    )
    gpu = reference_attention(make_inputs(spec, "cuda:0")).cpu()
    cpu_inputs = make_inputs(spec, "cuda:0")
    cpu_inputs.q, cpu_inputs.kv_cache = cpu_inputs.q.cpu(), cpu_inputs.kv_cache.cpu()
    cpu_inputs.kv_indptr, cpu_inputs.kv_indices = (
        cpu_inputs.kv_indptr.cpu(),
        cpu_inputs.kv_indices.cpu(),
    )
    cpu = reference_attention(cpu_inputs)
    torch.testing.assert_close(gpu, cpu, rtol=1e-10, atol=1e-12)
