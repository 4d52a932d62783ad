from __future__ import annotations

from pathlib import Path

import pytest

from attnbench.config import ConfigError, load_settings


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for key in list(__import__("os").environ):
        if key.startswith("ATTNBENCH_"):
            monkeypatch.delenv(key)


def test_briefs_defaults() -> None:
    s, src = load_settings()
    assert (s.batch_size, s.num_heads, s.num_kv_heads, s.head_dim) == (32, 32, 8, 128)
    assert s.context_lengths == [1024, 4096, 16384, 65536]
    assert s.page_size == 16
    assert s.fp8_mode is True
    assert set(src.values()) == {"default"}


def test_precedence_cli_env_dotenv_toml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "attnbench.toml").write_text(
        "batch_size = 1\nhead_dim = 64\npage_size = 4\nseed = 9\n"
    )
    (tmp_path / ".env").write_text(
        "ATTNBENCH_BATCH_SIZE=2\nATTNBENCH_HEAD_DIM=96\nATTNBENCH_PAGE_SIZE=8\n"
    )
    monkeypatch.setenv("ATTNBENCH_BATCH_SIZE", "3")
    monkeypatch.setenv("ATTNBENCH_HEAD_DIM", "256")
    s, src = load_settings({"batch_size": 4})
    assert (s.batch_size, s.head_dim, s.page_size, s.seed) == (4, 256, 8, 9)
    assert src["batch_size"] == "cli"
    assert src["head_dim"] == "env"
    assert src["page_size"] == ".env"
    assert src["seed"].endswith("attnbench.toml")


def test_lists_from_env_accept_commas_and_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNBENCH_CONTEXT_LENGTHS", "512, 2048")
    assert load_settings()[0].context_lengths == [512, 2048]
    monkeypatch.setenv("ATTNBENCH_CONTEXT_LENGTHS", "[8, 16]")
    assert load_settings()[0].context_lengths == [8, 16]
    monkeypatch.setenv("ATTNBENCH_LENGTHS", "1024,4096;mixed")
    assert load_settings()[0].lengths == ["1024,4096", "mixed"]


@pytest.mark.parametrize(
    ("cli", "message"),
    [
        ({"num_heads": 32, "num_kv_heads": 5}, "num_heads=32 is not divisible by num_kv_heads=5"),
        ({"page_size": 12}, "page_size=12: must be a power of two"),
        ({"batch_size": 0}, "batch_size=0: must be a positive integer"),
        ({"context_lengths": [1024, -1]}, "context_lengths"),
        ({"dtype": "int4"}, "dtype='int4' is not a known dtype; allowed: float16, bfloat16"),
        ({"kv_dtype": "fp4"}, "kv_dtype='fp4' is not a known dtype"),
        ({"device": "tpu"}, "device='tpu': allowed: auto, cpu, cuda, cuda:N"),
        ({"kv_layout": "XYZ"}, "kv_layout='XYZ' is not allowed; allowed: 'NHD' or 'HND'"),
        ({"model": "gpt-5"}, "model='gpt-5' is not known"),
        ({"model": "llama-3.1-70b", "tp": 3}, "tp=3 must divide"),
    ],
)
def test_invalid_values_give_one_clear_line(cli: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(cli)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_toml_and_unknown_fields(tmp_path: Path) -> None:
    (tmp_path / "attnbench.toml").write_text("batch_size = [\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_settings()
    (tmp_path / "attnbench.toml").write_text("batch_sise = 3\n")
    with pytest.raises(ConfigError, match="unknown field 'batch_sise'"):
        load_settings()


def test_bad_env_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNBENCH_BATCH_SIZE", "many")
    with pytest.raises(ConfigError, match="batch_size='many'"):
        load_settings()


def test_repeated_length_flags_may_hold_semicolons() -> None:
    s, _ = load_settings({"lengths": ["16384;mixed", "uniform:1-9"]})
    assert s.lengths == ["16384", "mixed", "uniform:1-9"]


def test_non_string_lengths_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match="lengths"):
        load_settings({"lengths": [0]})
