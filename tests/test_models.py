"""Model presets: published values with their provenance, attention features (windows, sinks,
MLA, Gemma-2's soft-cap and softmax scale), TP sharding, and `--model` running every preset."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from attnbench.cli import app
from attnbench.config_load import ConfigError, load_settings
from attnbench.workload.models import MODELS, get_model, layer_shapes
from attnbench.workload.shapes import MLAShape, ModelShape, layer_cycle
from attnbench.workload.suite import settings_specs

pytestmark = pytest.mark.usefixtures("isolated")

SHAPE = ("num_qo_heads", "num_kv_heads", "head_dim", "num_layers")
CORE = (*SHAPE, "hidden_size", "intermediate_size", "vocab_size")

PINNED = {
    "llama-3.1-8b": (32, 8, 128, 32, 4096, 14336, 128256),
    "llama-3.1-70b": (64, 8, 128, 80, 8192, 28672, 128256),
    "llama-3.1-405b": (128, 8, 128, 126, 16384, 53248, 128256),
    "qwen2.5-72b": (64, 8, 128, 80, 8192, 29568, 152064),
    "qwen3-32b": (64, 8, 128, 64, 5120, 25600, 151936),
    "mistral-7b": (32, 8, 128, 32, 4096, 14336, 32768),
    "gemma-2-27b": (32, 16, 128, 46, 4608, 36864, 256000),
    "gemma-2-9b": (16, 8, 256, 42, 3584, 14336, 256000),
}
"""The presets before this table grew: committed results and the replay reference them."""

BRIEF = {
    "qwen2.5-7b": (28, 4, 128, 28),
    "qwen3-235b-a22b": (64, 4, 128, 94),
    "mixtral-8x7b": (32, 8, 128, 32),
    "gemma-3-27b": (32, 16, 128, 62),
    "gpt-oss-20b": (64, 8, 64, 24),
    "gpt-oss-120b": (64, 8, 64, 36),
    "deepseek-v3": (128, 128, 192, 61),
    "deepseek-r1": (128, 128, 192, 61),
    "kimi-k2": (64, 64, 192, 61),
}


def _values(m: ModelShape, fields: tuple[str, ...]) -> tuple[int, ...]:
    return tuple(int(getattr(m, f)) for f in fields)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_existing_presets_keep_their_numbers(name: str) -> None:
    assert _values(MODELS[name], CORE) == PINNED[name]


def test_llama70b_at_tp8_is_still_the_committed_shape() -> None:
    s = get_model("llama-3.1-70b").shard(8)
    assert (s.num_qo_heads, s.num_kv_heads, s.head_dim, s.num_layers) == (8, 1, 128, 80)


@pytest.mark.parametrize("name", sorted(BRIEF))
def test_new_presets_have_the_published_heads(name: str) -> None:
    assert _values(MODELS[name], SHAPE) == BRIEF[name]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_preset_cites_the_file_its_values_come_from(name: str) -> None:
    m = MODELS[name]
    assert m.name == name == name.lower()
    assert any(f in m.source for f in ("config.json", "config.py", "sku_list.py", "README.md"))
    assert any(w in m.source for w in ("num_attention_heads", "n_heads", "attention heads"))


def test_gpt_oss_alternates_128_token_windows_from_layer_0_with_sinks() -> None:
    m = get_model("gpt-oss-120b")
    assert m.sliding_window == 128
    assert m.sinks
    assert m.layer_types[:2] == ("sliding_attention", "full_attention")
    assert m.num_sliding_layers == 18
    assert m.window_pattern() == "window 128 on 18/36 layers (1:1)"
    assert (m.num_experts, m.num_experts_per_tok) == (128, 4)
    assert get_model("gpt-oss-20b").num_sliding_layers == 12


def test_gemma3_has_five_local_layers_per_global_one() -> None:
    m = get_model("gemma-3-27b")
    assert m.sliding_window == 1024
    full = [i for i, t in enumerate(m.layer_types) if t == "full_attention"]
    assert full == [i for i in range(62) if (i + 1) % 6 == 0]
    assert m.window_pattern() == "window 1024 on 52/62 layers (5:1)"
    assert not m.logits_soft_cap
    assert get_model("gemma-2-27b").logits_soft_cap == 50.0


def test_mla_presets_cache_one_latent_shared_by_every_query_head() -> None:
    v3 = get_model("deepseek-v3")
    assert v3.mla == MLAShape(
        kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
        yarn_factor=40.0, yarn_mscale=1.0,
    )  # fmt: skip
    assert (v3.mla.latent_dim, v3.mla.qk_head_dim) == (576, 192)
    assert get_model("deepseek-r1").mla == v3.mla
    kimi = get_model("kimi-k2").mla
    assert kimi is not None
    assert (kimi.latent_dim, kimi.qk_head_dim, kimi.yarn_factor) == (576, 192, 0.0)
    assert get_model("kimi-k2").num_qo_heads == 64


@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-r1", "kimi-k2"])
def test_mla_presets_refuse_gqa_sharding(name: str) -> None:
    """KV capacity and the replay shard KV heads; an MLA cache has none to shard."""
    with pytest.raises(ValueError, match="uses MLA: its cache holds one latent"):
        get_model(name).shard(8)


def test_every_preset_runs_soft_capped_gemma2_included() -> None:
    assert {n for n, m in MODELS.items() if m.unsupported_reason() is not None} == set()
    for model in ("gemma-2-9b", "gemma-2-27b"):
        s, _ = load_settings({"model": model, "lengths": ["256"], "batch_size": 2})
        specs = settings_specs(s)
        assert {x.layer_type for x in specs} == {"sliding_attention", "full_attention"}
        assert {x.logits_soft_cap for x in specs} == {50.0}
        assert {x.window_left for x in specs} == {4095, -1}


def test_gemma2_softmax_scale_follows_query_pre_attn_scalar() -> None:
    """Gemma-2-27b scales by 144 ** -0.5 at head_dim 128; Gemma-2-9b's 256 is its head_dim, so its
    cases keep the default scale and the plain serialisation."""
    big = layer_shapes(get_model("gemma-2-27b"))
    assert {layer.spec_fields["query_pre_attn_scalar"] for layer in big} == {144.0}
    small = layer_shapes(get_model("gemma-2-9b"))
    assert all("query_pre_attn_scalar" not in layer.spec_fields for layer in small)
    assert get_model("gemma-2-9b").query_pre_attn_scalar == 256.0
    s, _ = load_settings({"model": "gemma-2-27b", "lengths": ["256"], "batch_size": 2})
    spec = settings_specs(s)[0]
    assert spec.sm_scale == pytest.approx(1 / 12)
    assert "/cap50/qscale144/" in spec.case_id


@pytest.mark.parametrize(
    ("name", "core"),
    [
        ("phi-3-mini-4k", (32, 32, 96, 32, 3072, 8192, 32064)),
        ("phi-3-medium-4k", (40, 10, 128, 40, 5120, 17920, 32064)),
    ],
)
def test_phi3_presets_window_every_layer(name: str, core: tuple[int, ...]) -> None:
    m = get_model(name)
    assert _values(m, CORE) == core
    assert m.sliding_window == 2047
    assert m.window_pattern() == f"window 2047 on {m.num_layers}/{m.num_layers} layers (1:0)"
    (layer,) = layer_shapes(m)
    assert layer.spec_fields == {"layer_type": "sliding_attention", "window_left": 2046}
    assert layer.num_layers == m.num_layers
    assert "sliding_window 2047" in m.source


def test_model_flag_sets_qwen25_7b_group_7_shape() -> None:
    s, _ = load_settings({"model": "qwen2.5-7b", "lengths": ["256"], "batch_size": 2})
    specs = settings_specs(s)
    assert {(x.num_qo_heads, x.num_kv_heads, x.head_dim, x.num_layers) for x in specs} == {
        (28, 4, 128, 28)
    }
    assert {x.group_size for x in specs} == {7}
    with pytest.raises(ConfigError, match=r"tp=8 must divide qwen2\.5-7b's 28 query heads"):
        load_settings({"model": "qwen2.5-7b", "tp": 8})


def test_layer_cycle_starts_with_the_windowed_layers() -> None:
    assert layer_cycle(5, 2, 1) == (
        "sliding_attention",
        "sliding_attention",
        "full_attention",
        "sliding_attention",
        "sliding_attention",
    )


@pytest.mark.parametrize(
    ("num_kv_heads", "kwargs", "message"),
    [
        (3, {}, "must divide num_qo_heads"),
        (2, {"layer_types": layer_cycle(3, 1, 1), "sliding_window": 8}, "one entry per layer"),
        (2, {"sliding_window": 8}, "sliding_window needs sliding layers"),
        (2, {"layer_types": layer_cycle(4, 1, 1)}, "sliding_window needs sliding layers"),
        (2, {"mla": MLAShape(512, 64, 128, 128)}, r"qk_nope \+ qk_rope"),
        (2, {"num_experts": 2, "num_experts_per_tok": 4}, "exceeds num_experts"),
    ],
)
def test_inconsistent_presets_are_rejected(
    num_kv_heads: int, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ModelShape("toy", 8, num_kv_heads, 128, 4, 1024, 4096, 1000, **kwargs)


def test_models_command_lists_features_and_sources() -> None:
    res = CliRunner().invoke(app, ["models"], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    for name in MODELS:
        assert name in res.output
    for text in (
        "MLA latent 512+64",
        "window 128 on 18/36 layers (1:1); attention sinks",
        "window 4096 on 21/42 layers (1:1); logit soft-cap 50",
        "window 2047 on 32/32 layers (1:0)",
        "GQA 7",
        "inference/configs/config_671B.json",
        "[LOCAL_SLIDING, GLOBAL]",
    ):
        assert text in res.output
