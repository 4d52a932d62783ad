"""Help text every option gets without repeating it in each command.

- `run` and `tune` options that override a setting default to None (so the setting's own
  sources can apply): one without help text takes the setting's description, and its help
  says the setting's default (the same text `attnbench config` prints).
- Every option gets a metavar (`INTEGER`, `TEXT`, `PATH`...; none for on/off flags) instead of
  Typer's type names such as `<list[str]>`.

`DocumentedGroup` applies both to the command being invoked (so `attnbench run --help` shows
them), and only then, so `attnbench --help` does not import the settings.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

from rich.markup import escape
from typer.core import TyperArgument, TyperGroup, TyperOption

SETTING_ALIASES = {"backend": "backends", "kind": "kinds"}
"""Option names that differ from their setting's name (repeatable flags are singular)."""
METAVARS = {"integer": "INTEGER", "float": "NUMBER", "text": "TEXT", "path": "PATH"}
"""click type names (older typer) -> metavar."""


class DocumentedGroup(TyperGroup):
    """The Typer group of `attnbench`: documents the options of the command it resolves."""

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None:
            document_params(cmd, ctx)
        return name, cmd, rest

    def get_params(self, ctx: Any) -> list[Any]:
        params: list[Any] = super().get_params(ctx)
        for param in params:
            if isinstance(param, TyperOption) and param.metavar is None and param.is_flag:
                param.metavar = ""
        return params


def document_params(command: Any, ctx: Any) -> None:
    """Fill in help text and metavars on a click command's parameters, `--help` included
    (idempotent)."""
    fields: dict[str, Any] | None = None
    for param in command.get_params(ctx):
        if isinstance(param, TyperOption) and param.default is None and "--help" not in param.opts:
            setting = SETTING_ALIASES.get(param.name or "", param.name or "")
            if fields is None:
                fields = _setting_fields()
            field = fields.get(setting)
            if field is not None:
                _describe_from_setting(param, setting, field)
        if isinstance(param, TyperOption) and param.metavar is None:
            param.metavar = "" if param.is_flag else _metavar(param)
        elif isinstance(param, TyperArgument):
            # The argument's name (RESULTS...) is its metavar; its type reads as an option's.
            setattr(param, "display_type_rich", _shown_as(_metavar(param)))  # noqa: B010


def _setting_fields() -> dict[str, Any]:
    from attnbench.config import Settings

    return dict(Settings.model_fields)


def _describe_from_setting(param: TyperOption, setting: str, field: Any) -> None:
    """Help from the setting's description when the option has none; the setting's default
    (what applies when no flag, variable or file sets it) appended once."""
    marker = "[default: "
    help_text = param.help or " ".join((field.description or "").split())
    if field.default is not None and marker not in help_text and "\\" + marker not in help_text:
        default = field.default
        if isinstance(default, bool) and param.secondary_opts:
            shown = param.opts[0] if default else param.secondary_opts[0]
        elif isinstance(default, list | tuple):
            shown = ",".join(str(v) for v in default)
        else:
            shown = str(default)
        help_text = f"{help_text} {escape(marker + shown + ']')}"
    param.help = help_text


def _shown_as(kind: str) -> Callable[[Any], str]:
    """A `display_type_rich` that shows `kind` (an instance attribute: typer has no option
    for an argument's type label)."""

    def display(ctx: Any) -> str:
        return kind

    return display


def _metavar(param: TyperOption | TyperArgument) -> str:
    """INTEGER, NUMBER, PATH or TEXT (for a list: of its items)."""
    desc = getattr(param, "type_descriptor", None)
    if desc is None:  # typer < 0.20: click's own types
        name = str(getattr(getattr(param, "type", None), "name", "") or "text")
        return METAVARS.get(name, name.upper())
    annotation = get_args(desc.annotation)[0] if desc.is_list else desc.annotation
    if desc.is_path or annotation is Path:
        return "PATH"
    if annotation is int:
        return "INTEGER"
    if annotation is float:
        return "NUMBER"
    return "TEXT"
