from __future__ import annotations

import pytest
from pydantic import ValidationError

from attnbench.workload.models import MODELS, get_model
from attnbench.workload.spec import WorkloadSpec, normalize_dtype


def _spec(**kw: object) -> WorkloadSpec:
    base: dict[str, object] = dict(
        kind="decode",
        num_qo_heads=32,
        num_kv_heads=8,
        head_dim=128,
        kv_lens=(100, 37),
        qo_lens=(1, 1),
    )
    base.update(kw)
    return WorkloadSpec.model_validate(base)


def test_spec_derived_sizes() -> None:
    s = _spec(page_size=16)
    assert s.batch_size == 2
    assert s.group_size == 4
    assert s.total_kv == 137
    assert s.num_pages == 7 + 3


def test_spec_case_id_is_deterministic_and_distinguishes_lengths() -> None:
    a, b = _spec(), _spec()
    assert a.case_id == b.case_id
    assert a.case_id.startswith("decode/h32-8-d128/bs2/ctx37..100/bfloat16/kv=bfloat16/p16/NHD#")
    assert _spec(kv_lens=(100, 38)).case_id != a.case_id


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(num_kv_heads=5), "multiple of num_kv_heads"),
        (dict(page_size=12), "power of two"),
        (dict(qo_lens=(2, 1)), "one query token"),
        (dict(kv_lens=(100,)), "differ in length"),
        (dict(kind="prefill"), "qo_lens must equal kv_lens"),
        (dict(kv_lens=(0, 1)), "positive"),
    ],
)
def test_spec_rejects_inconsistent_cases(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _spec(**kw)


def test_normalize_dtype_aliases_and_errors() -> None:
    assert normalize_dtype("fp16") == "float16"
    assert normalize_dtype("BF16") == "bfloat16"
    assert normalize_dtype("e4m3") == "fp8_e4m3"
    with pytest.raises(ValueError, match=r"allowed: float16, bfloat16$"):
        normalize_dtype("e4m3", allow_fp8=False)
    with pytest.raises(ValueError, match="dtype='int8'"):
        normalize_dtype("int8")


def test_models_shard_like_serving_engines() -> None:
    m = get_model("Llama-3.1-70B")
    s = m.shard(8)
    assert (s.num_qo_heads, s.num_kv_heads, s.num_layers) == (8, 1, 80)
    s16 = get_model("llama-3.1-405b").shard(16)  # 8 KV heads over 16 GPUs: replicated
    assert (s16.num_qo_heads, s16.num_kv_heads) == (8, 1)
    with pytest.raises(ValueError, match="tp=3 must divide"):
        m.shard(3)
    assert len({(x.num_qo_heads, x.num_kv_heads, x.head_dim) for x in MODELS.values()}) >= 4
    with pytest.raises(ValueError, match="allowed:"):
        get_model("gpt-5")
