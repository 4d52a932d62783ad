"""Engine kernel paths (`engines.paths`) and engine variants (`engine_variant`): the
mapping names real attnbench variants and knobs they accept, each engine's rules as its
source says, and refusals with the reason. CPU only."""

from __future__ import annotations

from typing import Any

import pytest

from attnbench.backends import all_backends, select_backends
from attnbench.backends.engine_variant import EngineVariant
from attnbench.backends.flashinfer_rules import resolve_knobs
from attnbench.engines.paths import (
    SETTINGS,
    VLLM_CUDA_GRAPH_SPLITS,
    KernelPath,
    command,
    default_setting,
    engine_page_size,
    kernel_path,
    sglang_capture_sizes,
    vllm_capture_sizes,
)
from attnbench.measure.hardware import DeviceInfo
from attnbench.workload.spec import TreeSpec, WorkloadSpec

H200 = DeviceInfo("cuda", 0, "NVIDIA H200", (9, 0), 132, 50 << 20, 141 << 30)
CHAIN = TreeSpec(name="chain4", parents=(-1, 0, 1, 2))
TREE = TreeSpec(name="fork", parents=(-1, 0, 0, 1))


def spec(kind: str = "decode", heads: tuple[int, int] = (32, 8), **kw: Any) -> WorkloadSpec:
    kv = (300, 1000, 70)
    qo = {"decode": (1, 1, 1), "prefill": kv, "append": (8, 8, 8), "shared_prefix": (1, 1, 1)}
    fields: dict[str, Any] = {
        "kind": kind,
        "kv_lens": kv,
        "qo_lens": qo.get(kind, (4, 4, 4)),
        "num_qo_heads": heads[0],
        "num_kv_heads": heads[1],
        "head_dim": 128,
        "page_size": 16,
    }
    if kind == "tree":
        fields["tree"] = kw.pop("tree", CHAIN)
    if kind == "shared_prefix":
        fields["shared_prefix_len"] = 64
    fields.update(kw)
    return WorkloadSpec(**fields)


CASES = [
    spec(kind, heads, page_size=page, kv_dtype=kv)
    for kind in ("decode", "prefill", "append", "tree", "shared_prefix")
    for heads in ((32, 8), (32, 16), (64, 8))
    for page in (1, 16)
    for kv in ("bfloat16", "fp8_e4m3")
]


FEATURE_CASES = [
    spec(kind, (64, 8), head_dim=64, window_left=127, sinks=True, model="gpt-oss-120b")
    for kind in ("decode", "prefill")
] + [
    spec(kind, (16, 8), head_dim=256, window_left=4095, logits_soft_cap=50.0, page_size=1)
    for kind in ("decode", "prefill")
]
"""gpt-oss (window and sinks) and Gemma-2 (window and soft-cap) layers."""


def path(variant: str, s: WorkloadSpec) -> KernelPath:
    found = kernel_path(variant, s)
    assert isinstance(found, KernelPath), found
    return found


def test_every_mapped_path_is_an_attnbench_variant_with_knobs_it_accepts() -> None:
    variants = {b.name: b for b in all_backends()}
    seen = set()
    for s in SETTINGS:
        assert s.variant in variants  # the engine variant itself is registered
        for case in [*CASES, *FEATURE_CASES]:
            found = kernel_path(s.variant, case)
            if isinstance(found, str):
                assert s.variant in found or "SGLang" in found  # a reason naming who refuses
                continue
            raw = variants[found.variant]
            seen.add(found.variant)
            knobs = dict(found.knobs)
            assert set(knobs) <= set(raw.knobs), (found.variant, knobs)
            resolve_knobs(raw.knobs, knobs)  # raises on a value the variant does not accept
            if found.variant.startswith("flashinfer:"):  # its rules need no library here
                assert raw.check(case, H200) is None, (s.variant, case.kind)
    assert seen == {
        "flashinfer:tc",
        "flashinfer:fa2",
        "flashinfer:auto",
        "flashinfer:ragged-fa3",
        "flash-attn:fa3",
        "vllm:triton-attn",  # the engines' own kernels are their own variants
        "sglang:triton",
    }


def test_sglang_tensor_cores_by_group_size_and_vllm_always() -> None:
    # SGLang should_use_tensor_core: fp8 KV -> True; 16-bit KV -> group size >= 4.
    g2, g4, g8 = (spec(heads=h, page_size=1) for h in ((32, 16), (32, 8), (64, 8)))
    assert path("sglang:flashinfer", g2).variant == "flashinfer:fa2"
    assert path("sglang:flashinfer", g4).variant == "flashinfer:tc"
    assert path("sglang:flashinfer", g8).variant == "flashinfer:tc"
    fp8_g2 = spec(heads=(32, 16), page_size=1, kv_dtype="fp8_e4m3")
    assert path("sglang:flashinfer", fp8_g2).variant == "flashinfer:tc"
    # vLLM: use_tensor_cores=True for every group size, CUDA-graph wrapper, default split.
    for s in (g2, g4, g8):
        p = path("vllm:flashinfer", s.model_copy(update={"page_size": 16}))
        assert p.variant == "flashinfer:tc"
        assert p.knobs == {
            "use_cuda_graph": True,
            "disable_split_kv": False,
            "fixed_split_size": None,
        }


def test_vllm_flash_attn_splits_under_cuda_graphs_only_up_to_the_capture_size() -> None:
    small = path("vllm:flash-attn", spec())
    assert small.knobs["num_splits"] == VLLM_CUDA_GRAPH_SPLITS
    assert small.knobs["scheduler_metadata"] is True
    big = path("vllm:flash-attn", spec("prefill"))  # 1370 tokens > 512
    assert big.knobs["num_splits"] == 0
    sg = path("sglang:fa3", spec())
    assert sg.knobs == {"num_splits": 0, "pack_gqa": None, "scheduler_metadata": False}


def test_prefill_and_verification_paths() -> None:
    assert path("vllm:flashinfer", spec("prefill")).variant == "flashinfer:auto"
    assert path("vllm:flashinfer", spec("tree")).variant == "flashinfer:auto"
    assert path("sglang:flashinfer", spec("prefill")).variant == "flashinfer:ragged-fa3"
    verify = path("sglang:flashinfer", spec("tree", tree=TREE, page_size=1))
    assert verify.variant == "flashinfer:fa2"
    assert engine_page_size("sglang:flashinfer", spec("prefill")) == 1
    assert engine_page_size("sglang:fa3", spec("prefill")) == 16


@pytest.mark.parametrize(
    ("variant", "case", "words"),
    [
        ("sglang:flashinfer", spec(), "page_size=16"),
        ("vllm:flashinfer", spec(page_size=8), "page_size=8"),
        ("vllm:flash-attn", spec(kv_dtype="fp8_e5m2"), "allowed: auto, fp8_e4m3"),
        ("sglang:fa3", spec(kv_dtype="fp8_e5m2"), "kv_dtype=fp8_e5m2"),
        ("vllm:flashinfer", spec("tree", tree=TREE), "draft chains"),
        ("sglang:flashinfer", spec("append", page_size=1), "no attnbench variant"),
        ("sglang:flashinfer", spec("prefill", kv_dtype="fp8_e4m3"), "model dtype"),
    ],
)
def test_refusals_name_the_reason(variant: str, case: WorkloadSpec, words: str) -> None:
    why = kernel_path(variant, case)
    assert isinstance(why, str)
    assert words in why
    refused = EngineVariant(variant).check(case, H200)
    assert refused is not None
    assert words in refused.reason


def test_engine_variants_are_registered_and_delegate_to_the_raw_check() -> None:
    names = [b.name for b in select_backends(["vllm"])]
    assert names == [
        "vllm:flash-attn",
        "vllm:flashinfer",
        "vllm:flash-attn-mla",
        "vllm:flashmla",
        "vllm:flashinfer-mla",
        "vllm:triton-mla",
        "vllm:triton-attn",
    ]
    assert [b.name for b in select_backends(["sglang:fa3"])] == ["sglang:fa3"]
    v = EngineVariant("vllm:flashinfer")
    assert v.knobs == {}
    assert v.check(spec(), H200) is None  # flashinfer:tc's own rules accept it on SM90
    cpu = DeviceInfo("cpu", None, "cpu", None, 0, 0, 0)
    refused = v.check(spec(), cpu)
    assert refused is not None
    assert "runs flashinfer:tc" in refused.reason
    with pytest.raises(ValueError, match="takes no knobs"):
        v.plan(spec(), None, {"use_cuda_graph": False})  # type: ignore[arg-type]


def test_capture_sizes_and_commands() -> None:
    v = vllm_capture_sizes()
    assert v[:4] == [1, 2, 4, 8]
    assert v[-1] == 512
    assert len(v) == 51
    s = sglang_capture_sizes()
    assert s[:6] == [1, 2, 4, 8, 12, 16]
    assert s[-1] == 256
    assert default_setting("vllm").name == "FLASH_ATTN"
    assert default_setting("sglang").name == "fa3"
    fi = next(x for x in SETTINGS if x.variant == "vllm:flashinfer")
    assert command(fi, "fp8_e4m3", 16) == (
        "vllm serve MODEL --attention-backend FLASHINFER --kv-cache-dtype fp8_e4m3 --block-size 16"
    )
    sg = default_setting("sglang")
    assert command(sg, "bfloat16", 1).endswith(
        "--attention-backend fa3 --kv-cache-dtype auto --page-size 1"
    )
