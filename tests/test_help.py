"""Every option of every command has help text, shows its default where it has one, and reads
as a metavar (INTEGER, PATH...) rather than a Python type name; completion is on."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from attnbench.cli import app
from attnbench.cli.options import document_params

runner = CliRunner()
GROUP = typer.main.get_command(app)
COMMANDS: dict[str, Any] = dict(GROUP.commands)  # type: ignore[attr-defined]
TYPE_NAME = re.compile(r"<(list\[|str|int|float|bool|path)")


def _params(name: str) -> list[Any]:
    command = COMMANDS[name]
    ctx = command.make_context(name, [], resilient_parsing=True)
    document_params(command, ctx)
    return list(command.get_params(ctx))


def test_commands_include_show_export_and_models() -> None:
    assert {"run", "show", "export", "models", "backends", "hw", "tune", "report"} <= set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_has_help_text(name: str) -> None:
    missing = [p.name for p in _params(name) if not (getattr(p, "help", None) or "").strip()]
    assert not missing, f"`attnbench {name}`: no help text for {missing}"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_default_is_shown(name: str) -> None:
    hidden = [
        p.name
        for p in _params(name)
        if p.default is not None and p.name != "help" and not p.required and p.show_default is False
    ]
    assert not hidden, f"`attnbench {name}`: defaults not shown for {hidden}"


def test_run_options_show_the_settings_default() -> None:
    params = {p.name: p for p in _params("run")}
    assert "[default: 32]" in params["batch_size"].help.replace("\\", "")
    assert "[default: all]" in params["backend"].help.replace("\\", "")
    assert "[default: --cold-l2]" in params["cold_l2"].help.replace("\\", "")


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_has_no_python_type_names(name: str) -> None:
    res = runner.invoke(app, [name, "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert not TYPE_NAME.search(res.output), TYPE_NAME.findall(res.output)


def test_top_level_help_offers_version_and_completion() -> None:
    res = runner.invoke(app, ["--help"], terminal_width=200)
    assert res.exit_code == 0
    for flag in ("--version", "--install-completion", "--show-completion"):
        assert flag in res.output
    assert not TYPE_NAME.search(res.output)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("run", "the suite's [defaults] and [[group]] values"),
        ("tune", "the suite's [defaults] and [[group]] values"),
        ("replay", "agents:N[@LO-HI]"),
        ("run", "[default: all]"),
    ],
)
def test_help_keeps_square_brackets(name: str, text: str) -> None:
    """Help texts are plain text: rich markup must not eat `[defaults]` or `[[group]]`."""
    res = runner.invoke(app, [name, "--help"], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    assert text in " ".join(res.output.split())
    assert "\\[" not in res.output


def test_run_help_names_the_folder_rows_go_to() -> None:
    res = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "400"})
    flat = " ".join(res.output.split())
    assert "runs/" in flat
    # results/ is named only by the guard that keeps runs out of it
    assert flat.count("results/") == flat.count("Allow an --out inside the committed results/")


def test_options_list_each_alias_and_negative_form_on_its_own_line() -> None:
    res = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "80"})
    lines = [ln.strip("│ ") for ln in res.output.splitlines()]
    assert any(ln.startswith("--num-qo-heads") for ln in lines), res.output
    assert any(ln.startswith("--no-fp8-mode") for ln in lines), res.output
    assert "…" not in res.output


@pytest.mark.parametrize("name", ["replay", "replay-validate", "fidelity"])
def test_other_commands_backend_options_do_not_claim_the_settings_default(name: str) -> None:
    """`replay -b` is replay's own option: `all` is run's default, not its (it refuses `all`)."""
    params = {p.name: p for p in _params(name)}
    assert "[default: all]" not in (params["backend"].help or "").replace("\\", "")
