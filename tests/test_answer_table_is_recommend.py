"""One source of truth (issues 44 and 45): every row of the findings' answer table is what
`attnbench recommend` prints for that GPU, model, engine, traffic and KV dtype."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.cli import app
from attnbench.report.findings import load_inputs
from attnbench.report.findings.core import REGISTRY
from attnbench.report.findings.engines import ANSWER_MODELS

runner = CliRunner()
TP = dict(ANSWER_MODELS)
KV = {"bf16": "auto", "fp8_e4m3": "fp8_e4m3"}


def _table_rows() -> list[list[str]]:
    section = REGISTRY["answer"](load_inputs())
    if section is None:
        return []
    return [r for r in section.tables[0].rows if r[2] != "committed rows"]


@pytest.mark.slow
def test_every_answer_row_is_what_recommend_prints(tmp_path: Path) -> None:
    """One test over the table's rows, built when it runs (a parametrized test would build
    the table at collection, in every worker of the default run, which deselects it)."""
    rows = _table_rows()
    assert rows
    for i, row in enumerate(rows):
        _check_row(row, tmp_path / f"answer-{i}.json")


def _check_row(row: list[str], out: Path) -> None:
    model, engine, trace, kv, gpu = row[:5]
    args = ["recommend", "--model", model, "--tp", str(TP[model]), "--engine", engine]
    args += ["--trace", trace, "--kv-dtype", KV[kv], "--gpu", gpu, "--json", str(out)]
    res = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert res.exit_code == 0, (row[:5], res.output)
    ans = json.loads(out.read_text())
    choice = ans["choice"]
    assert ans["gpu"].removeprefix("NVIDIA ") == gpu, row[:5]
    command = " ".join(choice["command"])
    assert all(flag.strip("- ") in command for flag in row[5].strip("`").split(" --")), row[:5]
    if ans["keeps_default"]:
        assert row[6].startswith("the default"), row[:5]
        return
    if ans["default_refused"]:  # a stand-in baseline: the table says the default cannot run
        assert "default cannot run here" in row[6], row[:5]
        if row[6].startswith("default cannot run here; fastest run"):
            assert choice["option"] == ans["default"]["option"], row[:5]
            return
    d = choice["decode_vs_default"]
    want = f"{d['ratio']:.2f}x [{d['ci_low']:.2f}-{d['ci_high']:.2f}]"
    assert row[6].startswith(want), (row[:5], row[6], want)
