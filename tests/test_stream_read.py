"""The read ceiling's readers: each must read every element before it is timed."""

from __future__ import annotations

import pytest
import torch

from attnbench.measure.config import MeasureConfig
from attnbench.measure.hardware import detect, measure_ceilings
from attnbench.measure.stream_read import (
    BLOCK,
    measure_read_ceiling,
    reads_everything,
    triton_reader,
)


def test_triton_reader_says_why_it_cannot_run_on_a_cpu_tensor() -> None:
    why = triton_reader(torch.ones(16))
    assert isinstance(why, str)
    assert "CUDA" in why


def test_a_reader_that_skips_a_block_is_caught() -> None:
    x = torch.rand(4 * BLOCK, dtype=torch.float32) + 0.5  # all positive: no cancellation
    sums = x.view(4, BLOCK).sum(dim=1)
    assert reads_everything(sums, x)
    assert not reads_everything(sums[:3], x)
    assert not reads_everything(sums * 0.999, x)


def test_cpumeasure_read_ceiling_is_the_torch_sum_and_names_it() -> None:
    cfg = MeasureConfig(timer="cpu", cold_l2=False, min_runs=3, max_runs=5, max_time_ms=50)
    gbps, method = measure_read_ceiling(8 << 20, cfg, torch.device("cpu"))
    assert gbps > 0
    assert method.startswith("torch sum fp32: 8 MiB")
    assert "Triton" not in method


@pytest.mark.gpu
def test_gpu_triton_reader_reads_everything_and_sets_the_ceiling() -> None:
    pytest.importorskip("triton")
    x = torch.randn(64 * BLOCK + 5, device="cuda")  # a partial last block
    reader = triton_reader(x)
    assert not isinstance(reader, str), reader
    assert reads_everything(reader(), x)
    ceil = measure_ceilings(detect("cuda:0"))
    assert ceil.read_bandwidth_gbps is not None
    assert "Triton one program per block" in ceil.method["read"], ceil.method["read"]
    # the fastest reader sets it: on the H200 the Triton reader beat torch's sum by ~5%
    assert ceil.method["read"].startswith("Triton"), ceil.method["read"]
