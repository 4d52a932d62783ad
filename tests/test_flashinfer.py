"""FlashInfer backend: variant naming, check() reasons, routes, knobs and helpers on CPU;
every variant through the accuracy gate on small cases of every kind on the GPU (`-m gpu`).

On the H200 the GPU cases keep to the kernel modules the carried JIT cache holds (head_dim 128,
pages of 16, bf16/fp16, fp8 e4m3 KV, XQA at group 4) where the case is not about another one;
each module missing from it costs a 15-100 s compile. The e5m2 cases compile three such modules
(`gpu_slow`); scripts/h200/gpu_tests.sh runs the rest in group b and them in group d.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
import torch

from attnbench.backends import select_backends
from attnbench.backends.base import Backend, Unsupported
from attnbench.backends.flashinfer import FlashInferBackend, backends
from attnbench.backends.flashinfer_common import (
    dense_block_tables,
    knob_details,
    quantize_query,
    workspace,
    xqa_causal_mask,
)
from attnbench.backends.flashinfer_refusal import library_refusal
from attnbench.backends.flashinfer_rules import (
    CUDA_CORE_DECODE_GROUP_SIZES,
    VARIANTS,
    Route,
    cascade_levels,
    cascade_shared_pages,
    is_chain,
    resolve_knobs,
    route,
)
from attnbench.measure.hardware import DeviceInfo
from attnbench.workload.inputs import make_inputs, page_table
from attnbench.workload.spec import KINDS, KV_DTYPES, TreeSpec, WorkloadSpec
from attnbench.workload.trees import chain

NAMES = [
    "flashinfer:fa2",
    "flashinfer:tc",
    "flashinfer:fa3",
    "flashinfer:cudnn",
    "flashinfer:auto",
    "flashinfer:xqa",
    "flashinfer:trtllm-gen",
    "flashinfer:ragged-fa2",
    "flashinfer:ragged-fa3",
    "flashinfer:cascade",
]
TREE = TreeSpec(name="tree-5", parents=(-1, 0, 0, 1, 1))


@pytest.fixture(autouse=True)
def _cudnn_frontend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The routing rules are tested as on a machine with the cuDNN frontend installed; GPU
    tests see the machine as it is (on the H200 the frontend is missing, so cudnn is refused)."""
    import attnbench.backends.flashinfer as fi

    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setattr(fi, "_has_cudnn_frontend", lambda: True)


def device(sm: int = 90, kind: str = "cuda") -> DeviceInfo:
    cc = (sm // 10, sm % 10) if kind == "cuda" else None
    return DeviceInfo(kind, 0, "NVIDIA H200", cc, 132, 50 << 20, 141 << 30)


H200 = device(90)


def make_spec(kind: str = "decode", **overrides: Any) -> WorkloadSpec:
    """Small cases of every kind: 8 query heads over 2 KV heads, head_dim 128, pages of 16."""
    shapes: dict[str, dict[str, Any]] = {
        "decode": {"kv_lens": (150, 37, 513), "qo_lens": (1, 1, 1)},
        "append": {"kv_lens": (150, 60, 300), "qo_lens": (4, 4, 4)},
        "prefill": {"kv_lens": (100, 37, 200), "qo_lens": (100, 37, 200)},
        "tree": {"kv_lens": (150, 60, 300), "qo_lens": (5, 5, 5), "tree": TREE},
        "shared_prefix": {
            "kv_lens": (200, 180, 300),
            "qo_lens": (1, 1, 1),
            "shared_prefix_len": 160,
        },
    }
    fields: dict[str, Any] = {
        "kind": kind,
        "num_qo_heads": 8,
        "num_kv_heads": 2,
        "head_dim": 128,
        "page_size": 16,
        **shapes[kind],
    }
    fields.update(overrides)
    if kind == "tree" and "tree" in overrides:
        n = fields["tree"].num_nodes
        fields["qo_lens"] = (n,) * len(fields["kv_lens"])
    return WorkloadSpec(**fields)


def variant(short: str) -> FlashInferBackend:
    return FlashInferBackend(short)


def reason(short: str, spec: WorkloadSpec, dev: DeviceInfo = H200) -> str:
    found = variant(short).check(spec, dev)
    assert found is not None, f"{short} unexpectedly supports {spec.case_id}"
    return found.reason


# -- naming and registry ------------------------------------------------------------------


def test_flashinfer_variant_names_are_stable_and_unique() -> None:
    names = [b.name for b in backends()]
    assert names == NAMES
    assert len(set(names)) == len(names)
    for b in backends():
        assert isinstance(b, Backend)
        assert b.devices == ("cuda",)


def test_flashinfer_registry_selects_all_variants_without_importing_flashinfer() -> None:
    chosen = [b.name for b in select_backends(["flashinfer"])]
    assert chosen == [*NAMES, "flashinfer:mla-fa2", "flashinfer:mla-fa3"]  # flashinfer_mla
    assert [b.name for b in select_backends(["flashinfer:xqa"])] == ["flashinfer:xqa"]


def test_flashinfer_knobs_declare_defaults_first() -> None:
    for b in backends():
        for name, legal in b.knobs.items():
            assert legal, f"{b.name}: knob {name} has no values"
        assert resolve_knobs(b.knobs, None) == {k: v[0] for k, v in b.knobs.items()}
    assert variant("tc").knobs["fixed_split_size"][0] is None
    assert variant("tc").knobs["use_cuda_graph"] == (True, False)
    assert variant("fa3").knobs == {}


@pytest.mark.skipif(
    importlib.util.find_spec("flashinfer") is not None, reason="flashinfer is installed here"
)
def test_flashinfer_available_gives_install_hint_when_missing() -> None:
    why = variant("fa2").available()
    assert why is not None
    assert "pip install flashinfer-python" in why


# -- check(): reasons ---------------------------------------------------------------------


def test_flashinfer_check_needs_a_cuda_gpu_of_sm80() -> None:
    spec = make_spec("decode")
    assert "CUDA GPU" in reason("fa2", spec, device(kind="cpu"))
    assert "SM80" in reason("fa2", spec, device(75))


def test_flashinfer_check_never_raises_and_always_explains() -> None:
    devices = [device(80), H200, device(100), device(kind="cpu")]
    for kind in KINDS:
        for kv_dtype in KV_DTYPES:
            spec = make_spec(kind, kv_dtype=kv_dtype)
            for dev in devices:
                for b in backends():
                    found = b.check(spec, dev)
                    assert found is None or (isinstance(found, Unsupported) and found.reason)


@pytest.mark.parametrize(
    ("short", "kind", "overrides", "needle"),
    [
        ("cudnn", "decode", {"kv_dtype": "fp8_e4m3"}, "no fp8"),
        ("xqa", "decode", {"kv_dtype": "fp8_e5m2"}, "e4m3 only"),
        ("xqa", "decode", {"page_size": 8}, "page_size"),
        ("fa3", "tree", {}, "custom mask"),
        ("fa3", "decode", {"head_dim": 96}, "head_dim"),
        ("fa2", "decode", {"head_dim": 72}, "multiple of 16"),
        ("fa2", "decode", {"dtype": "float16", "kv_dtype": "bfloat16"}, "query dtype"),
        ("tc", "prefill", {}, "decode path"),
        ("tc", "append", {"qo_lens": (4, 2, 4)}, "same qo_len"),
        ("tc", "append", {"causal": False}, "causal"),
        ("cudnn", "tree", {}, "chain"),
        ("xqa", "tree", {}, "chain"),
        ("ragged-fa2", "decode", {}, "kind=prefill"),
        ("ragged-fa3", "append", {}, "kind=prefill"),
        ("cascade", "decode", {}, "shared_prefix"),
        ("cascade", "shared_prefix", {"kv_dtype": "fp8_e4m3"}, "k_scale"),
        ("cascade", "shared_prefix", {"shared_prefix_len": 10}, "no whole shared page"),
        ("trtllm-gen", "decode", {}, "SM100"),
    ],
)
def test_flashinfer_check_reasons(
    short: str, kind: str, overrides: dict[str, Any], needle: str
) -> None:
    assert needle in reason(short, make_spec(kind, **overrides))


def test_flashinfer_fa3_needs_hopper() -> None:
    assert "SM90" in reason("fa3", make_spec("prefill"), device(80))
    assert "SM90" in reason("ragged-fa3", make_spec("prefill"), device(100))
    assert variant("fa3").check(make_spec("prefill"), H200) is None


def test_flashinfer_trtllm_gen_only_on_blackwell() -> None:
    assert variant("trtllm-gen").check(make_spec("decode"), device(100)) is None
    assert "SM100" in reason("trtllm-gen", make_spec("decode"), device(120))


def test_flashinfer_cudnn_needs_the_frontend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without nvidia-cudnn-frontend FlashInfer falls back to cubins it must download: refused
    before anything is built, saying what to install (on the H200 it was an error row)."""
    import attnbench.backends.flashinfer as fi

    monkeypatch.setattr(fi, "_has_cudnn_frontend", lambda: False)
    assert "nvidia-cudnn-frontend" in reason("cudnn", make_spec("decode"), H200)
    monkeypatch.setattr(fi, "_has_cudnn_frontend", lambda: True)
    assert variant("cudnn").check(make_spec("decode"), H200) is None


def test_flashinfer_expected_support_on_h200() -> None:
    """Which variants serve which kind on SM90 with bf16 (the GPU test relies on these)."""
    expected = {
        "decode": {"fa2", "tc", "fa3", "cudnn", "auto", "xqa"},
        "append": {"fa2", "tc", "fa3", "cudnn", "auto", "xqa"},
        "prefill": {"fa2", "fa3", "auto", "ragged-fa2", "ragged-fa3"},
        "tree": {"fa2", "auto"},
        "shared_prefix": {"fa2", "tc", "fa3", "cudnn", "auto", "xqa", "cascade"},
    }
    for kind, shorts in expected.items():
        spec = make_spec(kind)
        supported = {b.short for b in backends() if b.check(spec, H200) is None}
        assert supported == shorts, kind
    chain_spec = make_spec("tree", tree=chain(4))
    supported = {b.short for b in backends() if b.check(chain_spec, H200) is None}
    assert supported == {"fa2", "auto", "tc", "cudnn", "xqa"}


# -- routes ---------------------------------------------------------------------------------


def _route(short: str, spec: WorkloadSpec) -> Route:
    found = route(short, spec, H200)
    assert isinstance(found, Route), found
    return found


def test_flashinfer_fa2_decode_is_the_cuda_core_decode_kernel() -> None:
    r = _route("fa2", make_spec("decode"))
    assert (r.api, r.backend, r.use_tensor_cores) == ("decode", "fa2", False)
    assert _route("fa2", make_spec("shared_prefix")).api == "decode"
    assert _route("fa2", make_spec("append")).api == "paged"
    assert _route("fa2", make_spec("shared_prefix", qo_lens=(2, 2, 2))).api == "paged"


def test_flashinfer_tree_routes_use_custom_masks_or_chains() -> None:
    assert _route("fa2", make_spec("tree")).custom_mask
    assert _route("auto", make_spec("tree")).custom_mask
    r = _route("tc", make_spec("tree", tree=chain(4)))
    assert (r.api, r.use_tensor_cores, r.q_len_per_req, r.custom_mask) == ("decode", True, 4, False)
    assert is_chain(chain(3))
    assert not is_chain(TREE)
    assert not is_chain(None)


def test_flashinfer_multi_token_rows_on_decode_paths() -> None:
    assert _route("tc", make_spec("append")).q_len_per_req == 4
    assert _route("cudnn", make_spec("append")).q_len_per_req == 4
    assert _route("xqa", make_spec("append")).q_len_per_req == 4
    assert _route("xqa", make_spec("decode")).q_len_per_req == 1
    long = make_spec("append", kv_lens=(8192,), qo_lens=(8192,))
    why = route("xqa", long, H200)
    assert isinstance(why, Unsupported)
    assert "at most 1024 query rows" in why.reason
    at_bound = make_spec("append", kv_lens=(2048,), qo_lens=(1024,))
    assert _route("xqa", at_bound).q_len_per_req == 1024


def test_flashinfer_fa3_quantises_the_query_for_fp8_kv() -> None:
    assert _route("fa3", make_spec("decode", kv_dtype="fp8_e4m3")).fp8_query
    assert _route("ragged-fa3", make_spec("prefill", kv_dtype="fp8_e5m2")).fp8_query
    assert not _route("fa3", make_spec("decode")).fp8_query
    assert not _route("fa2", make_spec("append", kv_dtype="fp8_e4m3")).fp8_query


def test_flashinfer_unknown_variant_raises() -> None:
    with pytest.raises(ValueError, match="allowed"):
        route("fa9", make_spec("decode"), H200)


# -- knobs --------------------------------------------------------------------------------


def test_flashinfer_resolve_knobs_overrides_and_rejects() -> None:
    knobs = variant("tc").knobs
    values = resolve_knobs(knobs, {"fixed_split_size": 256, "use_cuda_graph": False})
    assert values == {"use_cuda_graph": False, "disable_split_kv": False, "fixed_split_size": 256}
    with pytest.raises(ValueError, match="allowed: use_cuda_graph"):
        resolve_knobs(knobs, {"num_splits": 4})
    with pytest.raises(ValueError, match="not allowed"):
        resolve_knobs(knobs, {"fixed_split_size": 100})
    with pytest.raises(ValueError, match="not allowed"):
        resolve_knobs(knobs, {"use_cuda_graph": 1})
    with pytest.raises(ValueError, match="allowed: none"):
        resolve_knobs(variant("fa3").knobs, {"use_cuda_graph": True})


def test_flashinfer_knob_details_record_used_and_ignored() -> None:
    r = _route("fa2", make_spec("decode"))
    details = knob_details(r, resolve_knobs(variant("fa2").knobs, None))
    assert details == {
        "use_cuda_graph": True,
        "knobs_ignored": "disable_split_kv,fixed_split_size",
    }
    r = _route("fa2", make_spec("prefill"))
    details = knob_details(r, resolve_knobs(variant("fa2").knobs, None))
    assert details["fixed_split_size"] == "none"
    assert details["disable_split_kv"] is False
    assert details["knobs_ignored"] == "use_cuda_graph"


# -- helpers --------------------------------------------------------------------------------


def _library_xqa_mask(batch_size: int, q_len: int) -> torch.Tensor:
    """flashinfer 0.7.4 decode.py `_make_xqa_mtp_causal_mask`, restated as the oracle."""
    words = (q_len + 31) // 32
    causal = torch.arange(q_len).unsqueeze(0) <= torch.arange(q_len).unsqueeze(1)
    if words * 32 > q_len:
        causal = torch.cat([causal, torch.zeros(q_len, words * 32 - q_len, dtype=torch.bool)], 1)
    bits = 1 << torch.arange(32, dtype=torch.int64)
    packed = (causal.view(q_len, words, 32).to(torch.int64) * bits).sum(-1).to(torch.uint32)
    return packed.unsqueeze(0).expand(batch_size, q_len, words).contiguous().view(torch.uint16)


@pytest.mark.parametrize("q_len", [1, 4, 31, 32, 33, 40, 64, 70])
def test_flashinfer_xqa_causal_mask_matches_the_library(q_len: int) -> None:
    mine = xqa_causal_mask(3, q_len, torch.device("cpu"))
    assert mine.dtype == torch.uint16
    assert mine.shape == (3, q_len, 2 * ((q_len + 31) // 32))
    assert torch.equal(mine.to(torch.int32), _library_xqa_mask(3, q_len).to(torch.int32))


def test_flashinfer_dense_block_tables_follow_the_page_table() -> None:
    spec = make_spec("decode")
    inputs = make_inputs(spec)
    table = dense_block_tables(inputs)
    pages = [-(-n // spec.page_size) for n in spec.kv_lens]
    assert table.shape == (spec.batch_size, max(pages))
    assert table.dtype == torch.int32
    indptr, indices = inputs.kv_indptr.tolist(), inputs.kv_indices.tolist()
    for b, n in enumerate(pages):
        assert table[b, :n].tolist() == indices[indptr[b] : indptr[b + 1]]
        assert not table[b, n:].any()


def test_flashinfer_cascade_levels_split_the_shared_pages() -> None:
    spec = make_spec("shared_prefix")
    assert cascade_shared_pages(spec) == 10
    indptr, indices = page_table(spec, torch.Generator().manual_seed(0))
    level0, indptr1, indices1 = cascade_levels(indptr, indices, 10)
    assert level0 == indices[:10]
    assert indptr1 == [0, 3, 5, 14]  # 13, 12 and 19 pages per request, minus 10 shared
    assert sorted(level0 + indices1) == sorted(set(indices))
    with pytest.raises(ValueError, match="shared prefix"):
        cascade_levels(indptr, list(reversed(indices)), 10)


def test_flashinfer_cascade_keeps_a_page_for_each_request() -> None:
    # kv_len 160 ends on the last shared page: that page moves to level 1.
    spec = make_spec("shared_prefix", kv_lens=(160, 200, 300))
    assert cascade_shared_pages(spec) == 9
    # a query that does not see the whole shared level under the causal mask
    spec = make_spec("shared_prefix", kv_lens=(170, 200, 300), qo_lens=(20, 1, 1))
    assert "causal" in str(cascade_shared_pages(spec))


def test_flashinfer_quantize_query_round_trips_within_fp8() -> None:
    q = torch.randn(6, 8, 128, dtype=torch.bfloat16)
    q8, scale, q_eff = quantize_query(q, "fp8_e4m3")
    assert q8.dtype == torch.float8_e4m3fn
    assert q_eff.dtype == torch.float32
    assert scale > 0
    rel = float((q_eff - q.float()).norm() / q.float().norm())
    assert rel < 0.06  # e4m3 keeps 3 mantissa bits


def test_flashinfer_workspace_is_created_once_per_device_and_tag() -> None:
    cpu = torch.device("cpu")
    a = workspace(cpu, "test", nbytes=1024)
    assert a is workspace(cpu, "test", nbytes=1024)
    assert a is not workspace(cpu, "test-other", nbytes=1024)
    assert a.dtype == torch.uint8
    assert not a.any()


def test_flashinfer_plan_refuses_a_case_check_rejects() -> None:
    """A refusal found again in plan is an `unsupported` row (UnsupportedCase), not an error."""
    from attnbench.backends.base import UnsupportedCase

    spec = make_spec("decode")
    with pytest.raises(UnsupportedCase, match="cannot run"):
        variant("fa2").plan(spec, make_inputs(spec))


def test_flashinfer_every_variant_is_described() -> None:
    assert set(VARIANTS) == {name.split(":", 1)[1] for name in NAMES}
    for summary, _ in VARIANTS.values():
        assert summary


# -- GQA group sizes --------------------------------------------------------------------------

CUDA_CORE = {"fa2", "auto"}
"""Variants whose single-token decode is FlashInfer's CUDA-core kernel (use_tensor_cores=False)."""
ANY_GROUP = {"tc", "fa3", "cudnn", "xqa"}


def _gqa(group: int, kind: str = "decode", **overrides: Any) -> WorkloadSpec:
    return make_spec(kind, num_qo_heads=2 * group, num_kv_heads=2, **overrides)


def test_flashinfer_cuda_core_decode_group_sizes_are_the_dispatch_list() -> None:
    """0.7.4 utils.cuh DISPATCH_GQA_GROUP_SIZE: 1, 2, 3, 4, 6, 8, 16 and nothing else."""
    assert CUDA_CORE_DECODE_GROUP_SIZES == (1, 2, 3, 4, 6, 8, 16)


@pytest.mark.parametrize("group", range(1, 17))
def test_flashinfer_decode_group_sizes_per_variant(group: int) -> None:
    spec = _gqa(group)
    supported = {b.short for b in backends() if b.check(spec, H200) is None}
    if group in CUDA_CORE_DECODE_GROUP_SIZES:
        assert supported == CUDA_CORE | ANY_GROUP
    else:
        assert supported == ANY_GROUP
        for short in CUDA_CORE:
            why = reason(short, spec)
            assert f"group size {group} ({2 * group}/2 heads)" in why
            assert "CUDA-core decode supports 1, 2, 3, 4, 6, 8, 16; use flashinfer:tc" in why


def test_flashinfer_qwen25_7b_group_7_is_refused_before_any_kernel_is_built() -> None:
    spec = make_spec("decode", num_qo_heads=28, num_kv_heads=4)
    assert reason("fa2", spec) == (
        "flashinfer:fa2: group size 7 (28/4 heads): FlashInfer's CUDA-core decode supports "
        "1, 2, 3, 4, 6, 8, 16; use flashinfer:tc (tensor cores take any group size)"
    )
    assert variant("tc").check(spec, H200) is None
    assert variant("xqa").check(spec, H200) is None


@pytest.mark.parametrize("kind", ["append", "prefill", "tree", "shared_prefix"])
def test_flashinfer_prefill_kernels_take_any_group_size(kind: str) -> None:
    """Multi-token rows run fa2/fa3 prefill kernels, which divide by the group at run time."""
    spec = _gqa(7, kind, **({"qo_lens": (2, 2, 2)} if kind == "shared_prefix" else {}))
    assert variant("fa2").check(spec, H200) is None
    assert variant("auto").check(spec, H200) is None


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "Error in function 'operator()' at /root/.cache/flashinfer/0.7.4/90a/generated/"
            "batch_decode_with_kv_cache_dtype_q_bf16_head_dim_qk_128/batch_decode.cu:63: "
            "Unsupported group_size: 7",
            "FlashInfer refused the case inside its kernel dispatch (batch_decode.cu:63): "
            "Unsupported group_size: 7; use flashinfer:tc (tensor cores take any group size)",
        ),
        (
            "Error in function 'operator()' at csrc/batch_prefill.cu:120: Unsupported head_dim: "
            "96\nStack trace: ...",
            "FlashInfer refused the case inside its kernel dispatch (batch_prefill.cu:120): "
            "Unsupported head_dim: 96",
        ),
        ("Error in function 'f' at a.cu:3: Check failed: x == y", None),
        ("CUDA error: an illegal memory access was encountered", None),
        ("Unsupported group_size: 7", None),
    ],
)
def test_flashinfer_library_refusal_reads_only_dispatch_refusals(
    message: str, expected: str | None
) -> None:
    assert library_refusal(message) == expected


class _RefusingBackend:
    """plan() raises what FlashInfer's CUDA-core decode raised on the H200 for 28/4 heads."""

    name = "flashinfer:fa2"
    devices: tuple[str, ...] = ("cpu",)

    def __init__(self, message: str) -> None:
        self.message = message

    def available(self) -> str | None:
        return None

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> Unsupported | None:
        return None

    def plan(self, spec: WorkloadSpec, inputs: Any, knobs: Any = None) -> Any:
        raise RuntimeError(self.message)


@pytest.mark.parametrize(
    ("message", "status"),
    [
        (
            "Error in function 'operator()' at /root/.cache/flashinfer/generated/"
            "batch_decode.cu:63: Unsupported group_size: 7",
            "unsupported",
        ),
        ("Error in function 'operator()' at batch_decode.cu:80: Check failed: status", "error"),
    ],
)
def test_sweep_records_a_flashinfer_refusal_inside_the_kernel_as_unsupported(
    message: str, status: str
) -> None:
    from attnbench.backends.reference import reference_attention
    from attnbench.measure.config import MeasureConfig
    from attnbench.measure.hardware import detect
    from attnbench.run.sweep import SweepContext, run_backend

    spec = make_spec("decode", num_qo_heads=28, num_kv_heads=4, kv_lens=(40, 17, 3))
    inputs = make_inputs(spec, "cpu")
    cfg = MeasureConfig(timer="fake", warmup_ms=0.0, min_runs=3, max_runs=3)
    ctx = SweepContext(run_id="test-flashinfer-refusal", info=detect("cpu"), measure_cfg=cfg)
    row = run_backend(spec, _RefusingBackend(message), inputs, reference_attention(inputs), ctx)
    assert row.status == status
    if status == "unsupported":
        assert row.reason == (
            "FlashInfer refused the case inside its kernel dispatch (batch_decode.cu:63): "
            "Unsupported group_size: 7; use flashinfer:tc (tensor cores take any group size)"
        )


# -- GPU: every variant through the accuracy gate ---------------------------------------------

# Every case is head_dim 128, 8/2 heads (group 4), pages of 16: the modules the carried JIT cache
# holds (bf16, fp16 and e4m3-KV decode, fa2 and fa3 prefill, XQA group 4). Modules they still
# compile: XQA's multi-token build at q_len 4 (append-bf16 with tree-chain-bf16, append-fp8e4m3),
# the cascade merge (shared_prefix-bf16), and for e5m2 (gpu_slow) decode, fa2 and fa3 prefill.
GPU_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "decode-bf16": ("decode", {}),
    "decode-fp16": ("decode", {"dtype": "float16", "kv_dtype": "float16"}),
    "decode-bf16-hnd": ("decode", {"kv_layout": "HND"}),
    "decode-fp8e4m3": ("decode", {"kv_dtype": "fp8_e4m3"}),
    "decode-fp8e5m2": ("decode", {"kv_dtype": "fp8_e5m2"}),
    "append-bf16": ("append", {}),
    "append-fp8e4m3": ("append", {"kv_dtype": "fp8_e4m3"}),
    "prefill-bf16": ("prefill", {}),
    "prefill-fp16": ("prefill", {"dtype": "float16", "kv_dtype": "float16"}),
    "prefill-fp8e4m3": ("prefill", {"kv_dtype": "fp8_e4m3"}),
    "prefill-fp8e5m2": ("prefill", {"kv_dtype": "fp8_e5m2"}),
    "tree-bf16": ("tree", {}),
    "tree-chain-bf16": ("tree", {"tree": chain(4)}),
    "tree-fp8e4m3": ("tree", {"kv_dtype": "fp8_e4m3"}),
    "shared_prefix-bf16": ("shared_prefix", {}),
    "shared_prefix-fp8e4m3": ("shared_prefix", {"kv_dtype": "fp8_e4m3"}),
}

# What must resolve to what on SM90 (from decode.py / prefill.py / utils.py in 0.7.4).
EXPECTED_RESOLVED = {
    ("decode-bf16", "flashinfer:fa2"): "fa2",
    ("decode-bf16", "flashinfer:tc"): "fa2",
    ("decode-bf16", "flashinfer:fa3"): "fa3",
    ("decode-bf16", "flashinfer:cudnn"): "cudnn",
    ("decode-bf16", "flashinfer:auto"): "fa2",
    ("decode-bf16", "flashinfer:xqa"): "xqa",
    ("prefill-bf16", "flashinfer:auto"): "fa3",  # fa3 on SM90 once a query is > 64 rows
    ("prefill-bf16", "flashinfer:ragged-fa3"): "fa3",
    ("prefill-fp8e4m3", "flashinfer:auto"): "fa2",  # fa3 needs an fp8 query for fp8 KV
    ("tree-bf16", "flashinfer:auto"): "fa2",  # fa3 takes no custom mask
    ("shared_prefix-bf16", "flashinfer:cascade"): "cascade:fa2+fa2",
}


GPU_SLOW_CASES = {"decode-fp8e5m2", "prefill-fp8e5m2"}
"""Cases whose modules the carried JIT cache leaves out (scripts/h200/jit_cache.sh drops e5m2 to
stay under the carry limit): e5m2 decode, fa2 and fa3 prefill, three compiles (the FP8 study's
GPU test, in group b, compiles the first two as well; run after it on a warm machine, only the
fa3 one is left)."""


@pytest.mark.gpu
@pytest.mark.parametrize(
    "case",
    [
        pytest.param(case, id=case, marks=pytest.mark.gpu_slow if case in GPU_SLOW_CASES else ())
        for case in GPU_CASES
    ],
)
def test_gpu_flashinfer_every_variant_passes_the_gate(case: str) -> None:
    pytest.importorskip("flashinfer")
    from attnbench.measure.config import MeasureConfig
    from attnbench.measure.hardware import detect
    from attnbench.run.sweep import SweepContext, run_case

    kind, overrides = GPU_CASES[case]
    spec = make_spec(kind, **overrides)
    info = detect("cuda:0")
    cfg = MeasureConfig(warmup_ms=1.0, min_runs=3, max_runs=5, max_time_ms=5.0)
    ctx = SweepContext(run_id="test-flashinfer", info=info, measure_cfg=cfg)
    rows = run_case(spec, list(backends()), ctx)
    assert sorted(r.backend for r in rows) == sorted(NAMES)
    failures = []
    for row in rows:
        supported = variant(row.backend.split(":", 1)[1]).check(spec, info) is None
        if row.status == "unsupported" and not supported and row.reason:
            continue
        if row.status != "ok":
            tb = row.details.get("traceback", "")
            failures.append(f"{row.backend}: {row.status}: {row.reason}\n{tb}")
        elif "graph capture failed" in row.reason:
            failures.append(f"{row.backend}: run() is not graph-capturable: {row.reason}")
        expected = EXPECTED_RESOLVED.get((case, row.backend))
        if info.sm == 90 and expected and row.resolved != expected:
            failures.append(f"{row.backend}: resolved {row.resolved!r}, expected {expected!r}")
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
def test_gpu_flashinfer_knobs_are_recorded_and_honoured() -> None:
    pytest.importorskip("flashinfer")
    from attnbench.backends.reference import reference_attention
    from attnbench.measure.accuracy import check_accuracy

    spec = make_spec("decode", kv_lens=(4000, 37, 513))
    inputs = make_inputs(spec, "cuda:0")
    oracle = reference_attention(inputs)
    knobs = {"use_cuda_graph": False, "disable_split_kv": True, "fixed_split_size": 64}
    planned = variant("tc").plan(spec, inputs, knobs)
    assert planned.details["use_cuda_graph"] is False
    assert planned.details["disable_split_kv"] is True
    assert planned.details["fixed_split_size"] == 64
    assert planned.replan is not None
    planned.replan()
    out = planned.run()
    torch.cuda.synchronize()
    assert check_accuracy(planned.unpack(out), oracle, spec.dtype).passed


XQA_GROUP = 7
"""The one group size of the GPU dispatch test that runs XQA: XQA builds a module per group
size (15-30 s each; the carried cache holds 4 and 8 only), and one size outside the CUDA-core
list shows it takes any (7: Qwen2.5-7B's). The other variants reuse one module at every size."""


@pytest.mark.gpu
@pytest.mark.parametrize("group", [5, 6, 7, 16])
def test_gpu_flashinfer_group_sizes_follow_the_dispatch_rule(group: int) -> None:
    """Decode at group sizes around the CUDA-core dispatch list: the variants check() admits
    pass the gate (XQA at XQA_GROUP only); at 5 and 7 the CUDA-core kernel itself refuses, as
    the rule says."""
    pytest.importorskip("flashinfer")
    from attnbench.backends import flashinfer_decode
    from attnbench.measure.config import MeasureConfig
    from attnbench.measure.hardware import detect
    from attnbench.run.sweep import SweepContext, run_case

    spec = _gqa(group)
    info = detect("cuda:0")
    cfg = MeasureConfig(warmup_ms=1.0, min_runs=3, max_runs=5, max_time_ms=5.0)
    ctx = SweepContext(run_id="test-flashinfer-gqa", info=info, measure_cfg=cfg)
    # without nvidia-cudnn-frontend the cudnn variant needs downloaded cubins: leave it out
    wanted = CUDA_CORE | ANY_GROUP - (set() if importlib.util.find_spec("cudnn") else {"cudnn"})
    if group != XQA_GROUP:
        wanted -= {"xqa"}
    chosen = [b for b in backends() if b.short in wanted]
    rows = {r.backend.split(":", 1)[1]: r for r in run_case(spec, chosen, ctx)}
    assert set(rows) == {b.short for b in chosen}
    for short, row in rows.items():
        expected = "unsupported" if variant(short).check(spec, info) else "ok"
        assert row.status == expected, f"{short}: {row.status}: {row.reason}"
    if group not in CUDA_CORE_DECODE_GROUP_SIZES:
        inputs = make_inputs(spec, "cuda:0")
        with pytest.raises(Exception) as err:  # noqa: PT011 - whatever the FFI raises
            flashinfer_decode.plan_decode(
                Route("decode", "fa2"), spec, inputs, {"use_cuda_graph": False}
            )
        assert library_refusal(str(err.value)), str(err.value)


@pytest.mark.gpu
@pytest.mark.gpu_slow
def test_a_prebuilt_module_is_not_compiled_again_at_first_use(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real FlashInfer: `run.prebuild_worker` builds the CUDA-core decode module at
    head_dim 64 with fp16 (one no other GPU test builds), then the module's own
    `build_and_load`, as a wrapper's plan calls it, finds it up to date: FlashInfer's JIT
    build log records a ninja no-op, not a compile (at 1fe251d the prebuild's modules were
    all compiled again)."""
    pytest.importorskip("flashinfer")
    import json
    import os

    from attnbench.measure.hardware import detect
    from attnbench.run import prebuild, prebuild_worker

    spec = make_spec(head_dim=64, dtype="float16", kv_dtype="float16")
    needs = prebuild.module_needs("flashinfer:fa2", spec, detect("cuda:0"))
    assert isinstance(needs, list), needs
    (need,) = needs
    report = prebuild_worker.build_flashinfer([need], os.cpu_count() or 1)
    assert report["failed"] == [], report
    (name,) = report["modules"]
    log = tmp_path / "jit-builds.jsonl"
    monkeypatch.setenv("FLASHINFER_JIT_BUILD_LOG", str(log))
    (jit_spec,), _ = prebuild_worker.collect_specs([need])
    jit_spec.build_and_load()
    builds = [json.loads(line) for line in log.read_text().splitlines()]
    assert [b["name"] for b in builds] == [name]
    assert builds[0]["seconds"] < prebuild.FIRST_USE_MIN_S, builds
    assert prebuild.first_use_builds(log) == []


@pytest.mark.gpu
def test_prebuild_makes_the_prefill_modules_flashinfer_loads() -> None:
    """The real FlashInfer: the prebuild's fa2 prefill spec is the equal-stride primary
    module that 0.7.4's `get_batch_prefill_module` loads for fa2 (and for flashinfer:tc's
    decode); fa3's is the public one. In session 15 (H100, fresh) the prebuild built the
    public fa2 module, which nothing loaded, and tc's first plan compiled the primary one."""
    pytest.importorskip("flashinfer")
    from attnbench.measure.hardware import detect
    from attnbench.run import prebuild, prebuild_worker

    spec = make_spec(head_dim=128)
    device = detect("cuda:0")
    tc = prebuild.module_needs("flashinfer:tc", spec, device)
    fa3 = prebuild.module_needs("flashinfer:fa3", make_spec(kind="prefill"), device)
    assert isinstance(tc, list), tc
    assert isinstance(fa3, list), fa3
    specs, failed = prebuild_worker.collect_specs([*tc, *fa3])
    assert failed == []
    names = [str(s.name) for s in specs]
    assert any(n.endswith("_kv_stride_equal") for n in names), names
    assert any(n.endswith("_sm90") for n in names), names
