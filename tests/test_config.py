from __future__ import annotations

from pathlib import Path

import pytest

from attnbench.config_load import ConfigError, load_settings

pytestmark = pytest.mark.usefixtures("isolated")


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


# -- .env and ATTNBENCH_* variables: one error naming the file, line or variable -------------


def test_seed_must_be_a_valid_generator_seed() -> None:
    with pytest.raises(ConfigError, match=r"seed=-5: must be an integer from 0 to 4294967295"):
        load_settings({"seed": -5})
    assert load_settings({"seed": 4294967295})[0].seed == 4294967295


def test_binary_dotenv_names_the_file(tmp_path: Path) -> None:
    (tmp_path / ".env").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match=r"^\.env: not a UTF-8 text file"):
        load_settings()


def test_malformed_dotenv_is_one_error_naming_the_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / ".env").write_text("ATTNBENCH_PAGE_SIZE=32\nfoo bar baz\n=3\n")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value) == ".env:2: cannot parse 'foo bar baz'; expected KEY=VALUE"
    assert not [r for r in caplog.records if "dotenv" in r.name]  # no stream of warnings


def test_dotenv_key_without_value(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("# settings\nATTNBENCH_PAGE_SIZE\n")
    with pytest.raises(ConfigError, match=r"\.env:2: ATTNBENCH_PAGE_SIZE has no value"):
        load_settings()


def test_unknown_attnbench_names_are_errors_in_env_and_dotenv_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATTNBENCH_PAGESIZE", "32")
    with pytest.raises(ConfigError) as info:
        load_settings()
    msg = str(info.value)
    assert msg.startswith("environment variable ATTNBENCH_PAGESIZE is not an attnbench setting")
    assert "did you mean ATTNBENCH_PAGE_SIZE?" in msg
    assert "ATTNBENCH_BATCH_SIZE" in msg  # the allowed names
    monkeypatch.delenv("ATTNBENCH_PAGESIZE")
    (tmp_path / ".env").write_text("HF_TOKEN=abc\nATTNBENCH_PAGESIZE=32\n")
    with pytest.raises(ConfigError, match=r"^\.env:2: ATTNBENCH_PAGESIZE is not an attnbench"):
        load_settings()


def test_other_tools_keys_and_known_non_settings_are_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".env").write_text("HF_TOKEN=abc\nexport ATTNBENCH_PAGE_SIZE=32\n")
    monkeypatch.setenv("ATTNBENCH_RESULTS", "results")
    monkeypatch.setenv("ATTNBENCH_GIT_SHA", "abc123")
    s, src = load_settings()
    assert s.page_size == 32
    assert src["page_size"] == ".env"


def test_bad_values_name_where_they_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATTNBENCH_SEED", "-1")
    with pytest.raises(ConfigError, match=r"seed='-1' \(from environment ATTNBENCH_SEED\)"):
        load_settings()
    monkeypatch.delenv("ATTNBENCH_SEED")
    (tmp_path / "attnbench.toml").write_text("page_size = 3\n")
    with pytest.raises(ConfigError, match=r"page_size=3 \(from attnbench.toml\): must be a power"):
        load_settings()


def test_binary_toml_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "attnbench.toml").write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match=r"attnbench.toml: not a UTF-8 text file"):
        load_settings()
