"""Loading `Settings` from their sources (CLI overrides, environment, `.env`, attnbench.toml)
with one-line errors: which source set each field, and the checks that turn a typo in an
`ATTNBENCH_*` name or a `.env` line into an error instead of a silently ignored value.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_settings import SettingsConfigDict, SettingsError

from attnbench.config import CONFIG_FILE, ENV_PREFIX, OTHER_ENV_VARS, Settings


class ConfigError(ValueError):
    """Invalid configuration: one line naming the field, the value and what is allowed."""


SOURCE_NAMES = ("cli", "env", ".env", CONFIG_FILE)


def _field_label(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) if loc else "settings"


def load_settings(
    cli: dict[str, Any] | None = None, *, config_file: Path | None = None
) -> tuple[Settings, dict[str, str]]:
    """Build Settings from the CLI overrides and the other sources.

    Returns the settings and, for each field, the source that set it (`cli`, `env`, `.env`,
    `attnbench.toml` or `default`). Raises ConfigError with one readable line.
    """
    cli = {k: v for k, v in (cli or {}).items() if v is not None}
    toml_path = config_file or Path(CONFIG_FILE)
    if config_file is not None and not config_file.is_file():
        raise ConfigError(f"config file {config_file}: not found")
    if toml_path.is_file():
        try:
            toml_data = tomllib.loads(toml_path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{toml_path}: not a UTF-8 text file (offset {exc.start})") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{toml_path}: invalid TOML: {exc}") from None
        unknown = sorted(set(toml_data) - set(Settings.model_fields))
        if unknown:
            raise ConfigError(
                f"{toml_path}: unknown field {unknown[0]!r}; allowed: "
                + ", ".join(Settings.model_fields)
            )

    check_environment(os.environ)
    check_dotenv(Path(".env"))
    sources = _sources(cli, toml_path)

    class _Settings(Settings):
        model_config = SettingsConfigDict(toml_file=toml_path)

    try:
        settings = _Settings(**cli)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, sources)) from None
    except SettingsError as exc:
        raise ConfigError(str(exc).splitlines()[0]) from None
    except ValueError as exc:
        raise ConfigError(str(exc).splitlines()[0]) from None
    check_model_shape(settings, sources)
    return settings, sources


MODEL_FIELDS = {"num_heads": "num_qo_heads", "num_kv_heads": "num_kv_heads", "head_dim": "head_dim"}
"""Settings a `model` sets (setting -> the preset's attribute)."""


def check_model_shape(settings: Settings, sources: dict[str, str]) -> None:
    """A model sets the heads and head_dim: raise ConfigError when one is also given (by a
    flag, the environment or a file) with another value, which the model would silently
    override (`--model llama-3.1-8b --num-heads 16` ran 32 heads)."""
    if settings.model is None:
        return
    from attnbench.workload.models import get_model

    model = get_model(settings.model)
    for field, attribute in MODEL_FIELDS.items():
        value, preset = getattr(settings, field), getattr(model, attribute)
        if sources.get(field, "default") != "default" and value != preset:
            raise ConfigError(
                f"{_given(field, value, sources[field])} conflicts with model={model.name!r}, "
                f"whose {field} is {preset}: a model sets num_heads, num_kv_heads and "
                "head_dim, so give the model or the shape, not both"
            )


def _given(field: str, value: object, source: str) -> str:
    """`--num-heads=16` for a flag, else `head_dim=64 (from environment ATTNBENCH_HEAD_DIM)`."""
    if source == "cli":
        return f"--{field.replace('_', '-')}={value}"
    env = ENV_PREFIX + field.upper()
    where = {"env": f"environment {env}", ".env": f".env {env}"}.get(source, source)
    return f"{field}={value} (from {where})"


def setting_env_names() -> list[str]:
    """The environment variable of every setting: ATTNBENCH_BATCH_SIZE, ..."""
    return [ENV_PREFIX + name.upper() for name in Settings.model_fields]


def _unknown_name(name: str, where: str) -> str:
    """`WHERE NAME is not a setting (did you mean ...?); allowed: ...`."""
    import difflib

    fields = [f.upper() for f in Settings.model_fields]
    close = difflib.get_close_matches(name.upper().removeprefix(ENV_PREFIX), fields, n=1)
    hint = f" (did you mean {ENV_PREFIX}{close[0]}?)" if close else ""
    return f"{where}{name} is not an attnbench setting{hint}; allowed: " + ", ".join(
        setting_env_names() + list(OTHER_ENV_VARS)
    )


def check_environment(environ: Mapping[str, str]) -> None:
    """Raise ConfigError for an `ATTNBENCH_*` variable that is neither a setting nor one of
    OTHER_ENV_VARS (names are matched case-insensitively, as the settings read them)."""
    known = set(setting_env_names()) | set(OTHER_ENV_VARS)
    for key in sorted(environ):
        if key.upper().startswith(ENV_PREFIX) and key.upper() not in known:
            raise ConfigError(_unknown_name(key, "environment variable "))


def check_dotenv(path: Path) -> None:
    """Raise ConfigError, naming the file and line, for a `.env` that is not UTF-8 text, a line
    that is not KEY=VALUE, an `ATTNBENCH_*` key that is not a setting or a key without a value.
    Keys without the prefix belong to other tools and are ignored."""
    if not path.is_file():
        return
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not a UTF-8 text file (byte {exc.object[exc.start]:#04x} at offset "
            f"{exc.start}); expected KEY=VALUE lines"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    if "\x00" in text:
        raise ConfigError(f"{path}: binary file (NUL byte); expected KEY=VALUE lines")
    import io

    from dotenv.parser import parse_stream

    for binding in parse_stream(io.StringIO(text)):
        where = f"{path}:{binding.original.line}"
        if binding.error:
            statement = binding.original.string.strip()[:80]
            raise ConfigError(f"{where}: cannot parse {statement!r}; expected KEY=VALUE")
        key = binding.key
        if key is None or not key.upper().startswith(ENV_PREFIX):
            continue
        if key.upper() not in setting_env_names():
            raise ConfigError(_unknown_name(key, f"{where}: "))
        if binding.value is None:
            raise ConfigError(f"{where}: {key} has no value; write {key}=VALUE")


def _one_line(exc: ValidationError, sources: dict[str, str] | None = None) -> str:
    err = exc.errors()[0]
    loc = tuple(err["loc"])
    label = _field_label(loc)
    msg = err["msg"].removeprefix("Value error, ")
    field = str(loc[0]) if loc else ""
    source = (sources or {}).get(field, "default")
    env_name = ENV_PREFIX + field.upper()
    origin = {
        "cli": "",
        "default": "",
        "env": f" (from environment {env_name})",
        ".env": f" (from .env {env_name})",
    }.get(source, f" (from {source})")
    if err["type"] == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        return f"{label}={err.get('input')!r}{origin} is not allowed; allowed: {expected}"
    if err["type"] == "extra_forbidden":
        return f"unknown setting {label!r}; allowed: {', '.join(Settings.model_fields)}"
    if err.get("loc"):
        if msg.startswith(f"{label}="):  # the validator named the field and value already
            return msg + origin
        return f"{label}={err.get('input')!r}{origin}: {msg}"
    return msg


def _sources(cli: dict[str, Any], toml_path: Path) -> dict[str, str]:
    from dotenv import dotenv_values

    env = {k[len(ENV_PREFIX) :].lower() for k in os.environ if k.upper().startswith(ENV_PREFIX)}
    dotenv = set()
    if Path(".env").is_file():
        dotenv = {
            k[len(ENV_PREFIX) :].lower()
            for k in dotenv_values(".env")
            if k.upper().startswith(ENV_PREFIX)
        }
    toml: set[str] = set()
    if toml_path.is_file():
        toml = set(tomllib.loads(toml_path.read_text(encoding="utf-8")))
    sources = {}
    for name in Settings.model_fields:
        if name in cli:
            sources[name] = "cli"
        elif name in env:
            sources[name] = "env"
        elif name in dotenv:
            sources[name] = ".env"
        elif name in toml:
            sources[name] = str(toml_path)
        else:
            sources[name] = "default"
    return sources


__all__ = ["ConfigError", "load_settings"]
