from __future__ import annotations

import re
from collections import Counter

import pytest
import torch

from attnbench.config import Settings
from attnbench.workload.ragged import length_stats, unpadded_label
from attnbench.workload.spec import ITEMSIZE, WorkloadSpec
from attnbench.workload.suite import builtin_suites, load_suite, suite_specs

WORKLOAD_SUITES = (
    "ragged",
    "traces",
    "prefill",
    "trees",
    "shared_prefix",
    "brief70b",
    "gqa",
    "mla",
    "mla-pr1770",
    "gptoss",
    "replay-calibration-fp8",
    "headdim",
    "headdim-models",
)
KV_BUDGET_BYTES = 40e9
"""The largest case's KV cache must leave room on the 139 GiB H200 for backend copies."""


def _specs(name: str) -> list[WorkloadSpec]:
    return suite_specs(load_suite(name), Settings())


def _kv_bytes(spec: WorkloadSpec) -> float:
    return (
        2
        * spec.num_pages
        * spec.page_size
        * spec.num_kv_heads
        * spec.head_dim
        * (ITEMSIZE[spec.kv_dtype])
    )


@pytest.mark.parametrize("name", sorted(builtin_suites()))
def test_every_builtin_suite_expands(name: str) -> None:
    specs = _specs(name)
    assert specs
    assert len({s.case_id for s in specs}) == len(specs)


@pytest.mark.parametrize("name", WORKLOAD_SUITES)
def test_workload_suites_state_their_case_count_and_fit_in_memory(name: str) -> None:
    suite = load_suite(name)
    stated = re.search(r"(\d+) cases", suite.description)
    assert stated, f"{name}: the description must state its case count"
    specs = _specs(name)
    assert len(specs) == int(stated.group(1))
    assert max(_kv_bytes(s) for s in specs) < KV_BUDGET_BYTES


def test_ragged_suite_pairs_equal_total_batches_with_padded_twins() -> None:
    specs = _specs("ragged")
    ragged = [s for s in specs if unpadded_label(s.lengths) is None]
    pads = [s for s in specs if unpadded_label(s.lengths) is not None]
    assert {s.total_kv for s in ragged} == {131072}
    assert len(ragged) == 10  # 7 bf16 levels + uniform, mixed, giant with fp8
    assert len(pads) == 6
    by_label = {(s.lengths, s.kv_dtype): s for s in ragged}
    for pad in pads:
        twin = by_label[(unpadded_label(pad.lengths) or "", pad.kv_dtype)]
        assert pad.kv_lens == (max(twin.kv_lens),) * twin.batch_size
    skews = [length_stats(s.kv_lens).max_over_mean for s in ragged if s.kv_dtype == "bfloat16"]
    assert skews == sorted(skews)
    assert skews[0] == 1.0
    assert skews[-1] > 30


def test_brief70b_is_llama70b_at_tp8_across_batch_sizes() -> None:
    specs = _specs("brief70b")
    shapes = {(s.num_qo_heads, s.num_kv_heads, s.head_dim, s.num_layers) for s in specs}
    assert shapes == {(8, 1, 128, 80)}
    assert {s.batch_size for s in specs} == {1, 8, 32, 128, 256, 512}
    assert Counter((s.dtype, s.kv_dtype) for s in specs) == {
        ("bfloat16", "bfloat16"): 12,
        ("bfloat16", "fp8_e4m3"): 12,
        ("float16", "float16"): 3,
    }
    mixed512 = next(s for s in specs if s.batch_size == 512 and s.lengths.startswith("mixed"))
    assert min(mixed512.kv_lens) == 256
    assert max(mixed512.kv_lens) == 65536


def test_trees_suite_covers_every_shape_and_context() -> None:
    specs = _specs("trees")
    grid = {(s.tree.name if s.tree else "", s.kv_lens[0] - s.qo_lens[0]) for s in specs}
    shapes = ("chain-4", "sglang-8", "eagle1-26", "eagle2-60", "medusa-64")
    assert grid == {(t, c) for t in shapes for c in (1024, 4096, 16384, 32768)}
    assert all(s.kind == "tree" and s.batch_size == 16 for s in specs)


def test_shared_prefix_suite_sweeps_p_and_n_and_uses_mooncake_groups() -> None:
    specs = _specs("shared_prefix")
    synthetic = {
        (s.shared_prefix_len, s.batch_size) for s in specs if s.lengths.startswith("prefix")
    }
    assert synthetic == {(p, n) for p in (1024, 4096, 16384, 32768) for n in (8, 16, 32, 64, 128)}
    real = [s for s in specs if s.lengths.startswith("trace-prefix")]
    assert len(real) == 4
    assert all(s.shared_prefix_len >= 16384 for s in real)
    for s in specs:
        assert s.kind == "shared_prefix"
        assert 0 < s.shared_prefix_len < min(s.kv_lens)
        assert s.shared_prefix_len % s.page_size == 0


def test_traces_and_prefill_suites_draw_from_every_trace() -> None:
    decode = _specs("traces")
    names = {s.lengths for s in decode}
    assert {"trace(azure-code)", "trace(azure-conv)", "trace(mooncake-conv)"} <= names
    assert {s.batch_size for s in decode} == {32, 128}
    prefill = _specs("prefill")
    assert all(s.kind == "prefill" and s.total_q <= 65536 for s in prefill)
    assert {s.lengths for s in prefill} >= {"prompts(mooncake-conv)", "ctx65536"}


@pytest.mark.gpu
@pytest.mark.parametrize("name", WORKLOAD_SUITES)
def test_the_largest_case_of_each_suite_materialises_on_the_gpu(
    name: str, gpu_device: torch.device
) -> None:
    from attnbench.workload.inputs import make_inputs

    biggest = max(_specs(name), key=_kv_bytes)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(gpu_device)
    inputs = make_inputs(biggest, gpu_device)
    assert inputs.kv_cache.is_cuda
    assert inputs.q.shape[0] == biggest.total_q
    peak = torch.cuda.max_memory_allocated(gpu_device)
    del inputs
    torch.cuda.empty_cache()
    assert peak < 2.5 * KV_BUDGET_BYTES


def test_gqa_suite_covers_every_group_size_mqa_and_qwen25_7b() -> None:
    specs = _specs("gqa")
    assert {s.group_size for s in specs if s.num_kv_heads == 8} == set(range(1, 17))
    assert {s.num_qo_heads for s in specs if s.num_kv_heads == 1} == {8, 16}
    qwen = [s for s in specs if s.model == "qwen2.5-7b"]
    assert {(s.num_qo_heads, s.num_kv_heads, s.num_layers) for s in qwen} == {(28, 4, 28)}
    assert {s.kind for s in specs} == {"decode"}
    assert {(s.dtype, s.kv_dtype, s.head_dim) for s in specs} == {("bfloat16", "bfloat16", 128)}
    assert Counter(s.lengths for s in specs) == {"ctx4096": 19, "mixed(256..16384)": 19}


def test_replay_calibration_covers_live_replay_shapes() -> None:
    # 116 decode rows of the grid plus 20 live-replay shapes and 8 odd-longest probes; prefill
    # and append as in `replay`
    specs = _specs("replay-calibration")
    assert Counter(s.kind for s in specs) == {"decode": 144, "prefill": 5, "append": 6}
    assert {(s.num_qo_heads, s.num_kv_heads, s.head_dim, s.page_size) for s in specs} == {
        (8, 1, 128, 16)
    }
    decode = [s for s in specs if s.kind == "decode"]
    # tiny contexts at batch 1 and a few requests: below the grid's shortest (256)
    tiny = [s for s in decode if max(s.kv_lens) < 256]
    assert {s.batch_size for s in tiny} == {1, 2, 4, 8}
    assert min(min(s.kv_lens) for s in tiny) <= 32
    # a padded kernel's band between the SMs (132) and 256 requests, longest 64k and 128k
    band = [s for s in decode if 132 < s.batch_size < 256 and max(s.kv_lens) % 2 == 0]
    assert {(s.batch_size, max(s.kv_lens)) for s in band} == {
        (n, mx) for n in (136, 168, 200) for mx in (65536, 131072)
    }
    # SDPA cuDNN's odd-length padding mask from 72 to 200 requests (the live steps' slow regime)
    odd = [s for s in decode if s.batch_size > 64 and max(s.kv_lens) % 2 == 1]
    assert {(s.batch_size, max(s.kv_lens)) for s in odd} == {
        (n, mx) for n in (72, 100, 136, 200) for mx in (65535, 131071)
    }
    assert max(_kv_bytes(s) for s in specs) < KV_BUDGET_BYTES


def test_headdim_suite_crosses_every_head_dim_with_groups_and_batches() -> None:
    specs = _specs("headdim")
    decode = Counter((s.head_dim, s.group_size, s.lengths) for s in specs if s.kind == "decode")
    dims = (64, 80, 96, 112, 128, 192, 256)
    assert set(decode) == {
        (d, g, length)
        for d in dims
        for g in (1, 4, 8)
        for length in ("mixed(256..65536)", "ctx8192")
    }
    prefill = {(s.head_dim, s.group_size) for s in specs if s.kind == "prefill"}
    assert prefill == {(d, 4) for d in dims}
    assert {s.dtype for s in specs} == {s.kv_dtype for s in specs} == {"bfloat16"}
    models = _specs("headdim-models")
    assert {s.model for s in models} == {
        "gemma-2-9b", "gemma-2-27b", "phi-3-mini-4k", "phi-3-medium-4k"
    }  # fmt: skip
    gemma = [s for s in models if s.model and s.model.startswith("gemma")]
    assert {s.logits_soft_cap for s in gemma} == {50.0}
    assert {s.layer_type for s in gemma} == {"sliding_attention", "full_attention"}
    assert all(max(s.kv_lens) > s.window_left for s in models if s.window_left >= 0)
