"""MLA engine settings (`engines.mla`): each vLLM/SGLang MLA backend's kernel path for a
DeepSeek-V3 tp8 decode shard (16 query heads, kv_lora_rank 512, rope 64), the refusals (page
size, KV dtype, family, prefill, backends not valid on Hopper), the defaults per family and the
launch commands. CPU only."""

from __future__ import annotations

from typing import Any

import pytest

from attnbench.backends.engine_variant import EngineVariant, raw_backend
from attnbench.engines.mla import MLA_SETTINGS, family
from attnbench.engines.paths import (
    ALL_SETTINGS,
    SETTINGS,
    KernelPath,
    default_setting,
    kernel_path,
    release,
    release_command,
    settings_for,
)
from attnbench.measure.hardware import DeviceInfo
from attnbench.workload.models import get_model, layer_shapes
from attnbench.workload.spec import WorkloadSpec

H200 = DeviceInfo("cuda", 0, "NVIDIA H200", (9, 0), 132, 50 << 20, 141 << 30)
(V3,) = layer_shapes(get_model("deepseek-v3"), 8)
MLA_VARIANTS = [s.variant for s in ALL_SETTINGS if "mla" in s.families]


def mla(kind: str = "decode", page: int = 64, **kw: Any) -> WorkloadSpec:
    kv = (4096, 1000, 300)
    qo = {"decode": (1, 1, 1), "prefill": kv, "append": (8, 8, 8)}[kind]
    fields: dict[str, Any] = {
        "kind": kind,
        "kv_lens": kv,
        "qo_lens": qo,
        "num_qo_heads": V3.num_qo_heads,
        "num_kv_heads": V3.num_kv_heads,
        "head_dim": V3.head_dim,
        "page_size": page,
        **V3.spec_fields,
    }
    fields.update(kw)
    return WorkloadSpec(**fields)


def gqa() -> WorkloadSpec:
    return WorkloadSpec(
        kind="decode", kv_lens=(300, 1000), qo_lens=(1, 1), num_qo_heads=32, num_kv_heads=8,
        head_dim=128, page_size=64,
    )  # fmt: skip


def test_deepseek_v3_tp8_shard_is_the_case() -> None:
    s = mla()
    assert s.mla is not None
    assert (s.num_qo_heads, s.mla.kv_lora_rank, s.mla.qk_rope_head_dim) == (16, 512, 64)
    assert family(s) == "mla"
    assert family(gqa()) == "gqa"


@pytest.mark.parametrize(
    ("variant", "page", "raw", "knobs"),
    [
        ("vllm:flash-attn-mla", 64, "flash-attn:mla", {"num_splits": 32, "scheduler_metadata": 1}),
        ("vllm:flashmla", 64, "flashmla:dense", {}),
        ("sglang:fa3", 1, "flash-attn:mla", {}),
        ("sglang:fa3", 64, "flash-attn:mla", {}),
        ("sglang:flashinfer", 1, "flashinfer:mla-fa3", {}),
        ("sglang:flashmla", 64, "flashmla:dense", {}),
    ],
)  # fmt: skip
def test_decode_kernel_paths(variant: str, page: int, raw: str, knobs: dict[str, Any]) -> None:
    path = kernel_path(variant, mla(page=page))
    assert isinstance(path, KernelPath), path
    assert (path.variant, dict(path.knobs)) == (raw, knobs)
    assert "@" in path.why  # cites the source file at its commit


def test_vllm_flash_attn_mla_split_cap_follows_the_release() -> None:
    big = mla(kv_lens=(300,) * 600, qo_lens=(1,) * 600)
    path = kernel_path("vllm:flash-attn-mla", big)
    assert isinstance(path, KernelPath)
    assert path.knobs["num_splits"] == 0
    old = kernel_path("vllm:flash-attn-mla", mla(), release("vllm", "0.34.0"))
    assert isinstance(old, KernelPath)
    assert old.knobs["num_splits"] == 32


@pytest.mark.parametrize(
    ("variant", "case", "words"),
    [
        ("vllm:flashinfer-mla", mla(), "SM100 only"),
        ("vllm:triton-mla", mla(page=16), "lives in the vllm wheel"),
        ("vllm:flashmla", mla(page=16), "page_size=16; the engine runs this backend at 64"),
        ("sglang:flashmla", mla(page=1), "page_size=1"),
        ("vllm:flash-attn-mla", mla(page=8), "page_size=8"),
        ("sglang:flashinfer", mla(page=64), "page_size=64; the engine runs this backend at 1"),
        ("vllm:flash-attn-mla", mla(kv_dtype="fp8_e4m3"), "allowed for MLA: auto"),
        ("vllm:flashmla", mla(kv_dtype="fp8_e4m3"), "flash_mla_with_kvcache_fp8"),
        ("sglang:fa3", mla(kv_dtype="fp8_e4m3"), "no fp8 qv path"),
        ("sglang:flashmla", mla(kv_dtype="fp8_e4m3"), "allowed for MLA: auto"),
        ("vllm:flash-attn-mla", mla("prefill"), "mla_prefill_backend FLASH_ATTN"),
        ("vllm:flashmla", mla("append", qo_lens=(8, 4, 8)), "unequal query lengths"),
        ("sglang:fa3", mla("prefill", page=1), "non-absorbed"),
        ("sglang:flashinfer", mla("append", page=1), "non-absorbed"),
    ],
)
def test_mla_refusals_name_the_reason(variant: str, case: WorkloadSpec, words: str) -> None:
    found = kernel_path(variant, case)
    assert isinstance(found, str)
    assert words in found


def test_small_extends_take_vllm_decode_path() -> None:
    """vLLM's `reorder_batch_threshold`: up to 512 new tokens (FLASH_ATTN_MLA, varlen) or
    uniform lengths up to 128 (FLASHMLA) run the absorbed decode kernel."""
    fa = kernel_path("vllm:flash-attn-mla", mla("append"))
    assert isinstance(fa, KernelPath)
    assert fa.variant == "flash-attn:mla"
    fm = kernel_path("vllm:flashmla", mla("append"))
    assert isinstance(fm, KernelPath)
    assert fm.variant == "flashmla:dense"


def test_families_refuse_each_other_in_one_line() -> None:
    for s in MLA_SETTINGS:
        why = kernel_path(s.variant, gqa())
        assert isinstance(why, str)
        assert "serves MLA models only" in why
        assert "\n" not in why
    for variant in ("vllm:flash-attn", "vllm:flashinfer"):
        why = kernel_path(variant, mla())
        assert isinstance(why, str)
        assert "vllm:flash-attn-mla" in why
        assert "\n" not in why
    assert isinstance(kernel_path("sglang:fa3", gqa()), KernelPath)  # fa3 serves both


def test_defaults_per_family() -> None:
    assert default_setting("vllm").variant == "vllm:flash-attn"
    assert default_setting("sglang").variant == "sglang:fa3"
    vm = default_setting("vllm", "mla")
    assert (vm.variant, vm.default_page_size) == ("vllm:flash-attn-mla", 64)
    assert default_setting("sglang", "mla").variant == "sglang:fa3"
    assert [s.variant for s in settings_for("sglang", "mla")] == [
        "sglang:fa3",
        "sglang:flashinfer",
        "sglang:flashmla",
    ]
    assert [s.variant for s in settings_for("vllm", "gqa")] == [s.variant for s in SETTINGS[:3]]


def test_release_commands_for_mla_settings() -> None:
    v = release_command("vllm:flashmla", "fp8_e4m3", 64, 8, release("vllm", "pinned"))
    assert v[1:] == [
        "vllm serve MODEL",
        "--tensor-parallel-size 8",
        "--attention-backend FLASHMLA",
        "--kv-cache-dtype fp8_e4m3",
        "--block-size 64",
    ]
    s = release_command("sglang:flashmla", "auto", 64, 8, release("sglang"))
    assert "--attention-backend flashmla" in s
    assert "--page-size 64" in s


def test_mla_engine_variants_delegate_and_refuse() -> None:
    v = EngineVariant("vllm:flash-attn-mla")
    assert v.check(gqa(), H200) is not None
    refused = v.check(mla(), H200)
    assert refused is not None  # the build flag here, else no num_splits knob: another call
    assert "runs flash-attn:mla" in refused.reason or "takes no such knob" in refused.reason
    assert EngineVariant("vllm:triton-mla").available() is not None
    assert EngineVariant("vllm:flashinfer-mla").check(mla(), H200) is not None
    dense = raw_backend("flashmla:dense")
    assert dense.name == "flashmla:dense"
    found = EngineVariant("sglang:flashmla").path(mla(page=64))
    assert not isinstance(found, str)
    assert found.variant == "flashmla:dense"
