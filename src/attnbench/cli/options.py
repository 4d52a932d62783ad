"""Help text every option gets without repeating it in each command, laid out to fit 80 columns.

- `run` and `tune` options that override a setting default to None (so the setting's own
  sources can apply): one without help text takes the setting's description, and its help
  says the setting's default (the same text `attnbench config` prints). Other commands'
  options of the same name (`replay --backend`) are their own and keep their own help.
- Every option gets a metavar (`INTEGER`, `TEXT`, `PATH`...; none for on/off flags) instead of
  Typer's type names such as `<list[str]>`.
- Help texts are plain text: square brackets (`[defaults]`, `[[group]]`, `N[@LO-HI]`) are
  escaped once, so rich's markup shows them instead of eating them, and a docstring's single
  line breaks are joined (the commands panel would keep them mid-sentence).
- Options are listed in three columns (names, metavar, help) with each alias and each `--no-`
  form on a line of its own under the first name: Typer's own panel puts them side by side
  in columns that, at 80 columns, it can only cut (`--num-heads,--num-qo-…`). Typer has no
  setting for this layout, so `_options_panel` replaces its panel printer in this process.

`DocumentedGroup` applies all of it to the command being invoked (so `attnbench run --help`
shows it), and only then, so `attnbench --help` does not import the settings.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

from rich.markup import escape
from typer.core import TyperArgument, TyperGroup, TyperOption

SETTINGS_COMMANDS = frozenset({"run", "tune"})
"""The commands whose options are settings (`cli.run_options`): elsewhere a `--backend` or
`--model` is the command's own option, and the setting's default is not its default."""
SETTING_ALIASES = {"backend": "backends", "kind": "kinds"}
"""Option names that differ from their setting's name (repeatable flags are singular)."""
METAVARS = {"integer": "INTEGER", "float": "NUMBER", "text": "TEXT", "path": "PATH"}
"""click type names (older typer) -> metavar."""
_DONE = "_attnbench_documented"
"""Set on a command or parameter whose help text has been made plain (escaped once)."""


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
            _plain_help(param)
        return params

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """`attnbench --help`: every command's help plain in the commands panel."""
        for command in self.commands.values():
            _plain_help(command)
        _use_options_panel()
        super().format_help(ctx, formatter)


def document_params(command: Any, ctx: Any) -> None:
    """Fill in help text and metavars on a click command's parameters, `--help` included,
    and make every help text plain (idempotent)."""
    _plain_help(command)
    _use_options_panel()
    fields: dict[str, Any] | None = None
    from_settings = getattr(command, "name", None) in SETTINGS_COMMANDS
    for param in command.get_params(ctx):
        if (
            from_settings
            and isinstance(param, TyperOption)
            and param.default is None
            and "--help" not in param.opts
        ):
            setting = SETTING_ALIASES.get(param.name or "", param.name or "")
            if fields is None:
                fields = _setting_fields()
            field = fields.get(setting)
            if field is not None and not getattr(param, _DONE, False):
                _describe_from_setting(param, setting, field)
        if isinstance(param, TyperOption) and param.metavar is None:
            param.metavar = "" if param.is_flag else _metavar(param)
        elif isinstance(param, TyperArgument):
            # The argument's name (RESULTS...) is its metavar; its type reads as an option's.
            setattr(param, "display_type_rich", _shown_as(_metavar(param)))  # noqa: B010
        _plain_help(param)


def _plain_help(obj: Any) -> None:
    """Escape the rich markup characters of `obj.help` once, and join a docstring's single
    line breaks (paragraphs stay apart)."""
    if getattr(obj, _DONE, False):
        return
    text = getattr(obj, "help", None)
    if text:
        paragraphs = str(text).split("\n\n")
        obj.help = "\n\n".join(escape(" ".join(p.split())) for p in paragraphs)
    setattr(obj, _DONE, True)


def _setting_fields() -> dict[str, Any]:
    from attnbench.config import Settings

    return dict(Settings.model_fields)


def _describe_from_setting(param: TyperOption, setting: str, field: Any) -> None:
    """Help from the setting's description when the option has none; the setting's default
    (what applies when no flag, variable or file sets it) appended once."""
    marker = "[default: "
    help_text = param.help or " ".join((field.description or "").split())
    if field.default is not None and marker not in help_text:
        default = field.default
        if isinstance(default, bool) and param.secondary_opts:
            shown = param.opts[0] if default else param.secondary_opts[0]
        elif isinstance(default, list | tuple):
            shown = ",".join(str(v) for v in default)
        else:
            shown = str(default)
        help_text = f"{help_text} {marker}{shown}]"
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


def _use_options_panel() -> None:
    """Have Typer print option panels with `_options_panel` (in this process only)."""
    from typer import rich_utils

    if hasattr(rich_utils, "_print_options_panel"):
        rich_utils._print_options_panel = _options_panel


def _options_panel(
    *, name: str, params: list[Any], ctx: Any, markup_mode: Any, console: Any
) -> None:
    """One panel of arguments or options: names (one per line), metavar, and the help as one
    paragraph (Typer's text, default and `[required]`, then a number range such as `[x>=1]`)."""
    from rich.panel import Panel
    from rich.table import Table
    from typer import rich_utils as ru

    if not params:
        return
    table = Table(highlight=True, show_header=False, expand=True, box=None, pad_edge=False)
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True, style=ru.STYLE_TYPES)
    table.add_column(ratio=1)
    for param in params:
        display = getattr(param, "display_type_rich", None)
        kind = (display(ctx=ctx) if callable(display) else None) or ""
        table.add_row(_names(param), kind, _help_cell(param, ctx, markup_mode))
    console.print(
        Panel(table, border_style=ru.STYLE_OPTIONS_PANEL_BORDER, title=name, title_align="left")
    )


def _help_cell(param: Any, ctx: Any, markup_mode: Any) -> Any:
    """Typer's help cell as one paragraph that wraps at spaces (Typer lays its parts out as
    columns), with the option's number range after it."""
    from rich.text import Text
    from typer import rich_utils as ru

    cell = ru._get_parameter_help(param=param, ctx=ctx, markup_mode=markup_mode)
    parts = list(getattr(cell, "renderables", [cell]))
    ranged = getattr(param, "_get_number_range_help_str", None)
    limits = ranged() if callable(ranged) else None
    if limits:
        parts.append(Text(f"[{limits}]", style=ru.STYLE_OPTION_DEFAULT))
    if not all(isinstance(p, Text) for p in parts):
        return cell
    return Text(" ").join(parts)


def _names(param: Any) -> Any:
    """`--backend, -b`, then each further long name and the `--no-` forms on lines below."""
    from rich.text import Text
    from typer import rich_utils as ru

    if isinstance(param, TyperArgument):
        shown = str(getattr(param, "display_name_raw", None) or param.name or "")
        if param.metavar is None and param.nargs != 1:
            shown += "..."
        return Text(shown)
    longs = [o for o in param.opts if o.startswith("--")]
    shorts = [o for o in param.opts if not o.startswith("--")]
    first = ", ".join(longs[:1] + shorts)
    lines = [ru.highlighter(Text(first))] + [ru.highlighter(Text(o)) for o in longs[1:]]
    lines += [ru.negative_highlighter(Text(o)) for o in param.secondary_opts]
    return Text("\n").join(lines)
