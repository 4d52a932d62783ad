"""`attnbench show` on a saved fp8 study: the kernel records, FA3's error split beside
FlashInfer's kernel error, one row per (shape, format, scheme, variant), the reasons of the rows
that did not run. The study is built here (not read from results/) and saved as `attnbench fp8`
saves it (strict JSON: NaN becomes null)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from attnbench.cli import app
from attnbench.fp8study import DOCUMENT_TYPE, write_study
from attnbench.fp8study.summary import summarize

runner = CliRunner()
E5M2_REASON = "FlashAttention has no fp8_e5m2 kernels (its fp8 path is e4m3 only)"
WIDTH_COLUMNS = 80


def _rel(err: float) -> dict[str, float]:
    return {"rel_l2_err": err}


def _kernel_records() -> list[dict[str, Any]]:
    """FlashInfer tc and FA3 on one shape in e4m3 (per-tensor), FA3 refusing e5m2, FlashInfer
    with per-(token, head) scales, and a FlashInfer record whose bf16 baseline failed."""
    shape = {"shape": "ctx1024", "batch_size": 32, "lengths": "1024", "max_kv_len": 1024}
    e4m3 = {**shape, "format": "e4m3", "scheme": "tensor", "quant": _rel(0.03822)}
    e5m2 = {**shape, "format": "e5m2", "scheme": "tensor", "quant": _rel(0.07595)}
    ok = {"status": "ok", "reason": ""}
    return [
        {**e4m3, **ok, "variant": "flashinfer:tc", "resolved": "fa2"}
        | {"kernel": _rel(0.00273), "total": _rel(0.03833), "bf16_kernel": _rel(0.00213)},
        {**e4m3, **ok, "variant": "flash-attn:fa3", "resolved": "fa3"}
        | {"q_quant": _rel(0.02703), "kernel": _rel(0.02387), "total": _rel(0.05239)}
        | {"bf16_kernel": _rel(0.00222)},
        {**e5m2, **ok, "variant": "flashinfer:fa2", "resolved": "fa2"}
        | {"kernel": _rel(0.00287), "total": _rel(0.07599)}
        | {"bf16_reason": "RuntimeError: out of memory"},
        {**e5m2, "variant": "flash-attn:fa3", "status": "unsupported", "reason": E5M2_REASON},
        {**shape, "format": "e4m3", "scheme": "token", "quant": _rel(0.03712), **ok}
        | {"variant": "flashinfer:tc", "resolved": "fa2"}
        | {"kernel": _rel(0.00303), "total": _rel(0.03722), "bf16_kernel": _rel(0.00213)},
    ]


def _study() -> dict[str, Any]:
    stats = {"underflow_fraction": 0.0, "saturated_fraction": 0.0, "subnormal_fraction": 0.0}
    errors = [
        {"data": "random", "format": fmt, "scheme": scheme, "k_scheme": scheme}
        | {"v_scheme": scheme, "rel_l2_err": err, "max_abs_err": 1e-3, "rmse": 1e-4}
        | {"cosine": cos, "k": stats, "v": stats}
        for fmt, scheme, err, cos in (
            ("e4m3", "tensor", 0.0382, 0.9993),
            ("e5m2", "tensor", 0.0759, 0.9971),
            ("e4m3", "token", 0.0371, 0.9993),
            ("fp64", "exact", float("nan"), float("nan")),  # saved as null
        )
    ]
    kernel = _kernel_records()
    return {
        "type": DOCUMENT_TYPE,
        "schema_version": 1,
        "settings": {"device": "cuda", "rel_l2_bound": 0.05, "recall_bound": 0.99},
        "provenance": {"git_sha": "abc1234", "gpu": "NVIDIA H200"},
        "complete": False,
        "timings": {"errors_s": 1.0, "needle_s": 2.0, "kernel_s": 3.0},
        "errors": errors,
        "needle": [],
        "kernel": kernel,
        "kernel_skipped": "partial: the run stopped during the kernel part",
        "summary": summarize(errors, [], kernel, recall_bound=0.99, rel_l2_bound=0.05),
    }


def _show(path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    console = Console(width=WIDTH_COLUMNS, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    monkeypatch.setattr("attnbench.cli.show.console", console)
    res = runner.invoke(app, ["show", str(path)])
    assert res.exit_code == 0, res.output
    assert "partial: the run stopped during the kernel part" in res.output  # the note
    return console.export_text()


def _section(text: str, title: str) -> list[str]:
    """The lines of the kernel table titled `title`, down to the blank line after it."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == title)
    assert not lines[start - 1].strip()  # the tables stand apart
    end = next(i for i in range(start + 3, len(lines)) if not lines[i].strip())
    return lines[start:end]


def _cells(lines: list[str], variant: str) -> list[str]:
    row = next(line for line in lines if variant in line.split())
    return row.split()


def test_show_prints_a_saved_studys_kernel_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_study(_study(), tmp_path / "fp8.json")
    assert json.loads(path.read_text())["summary"][-1]["cosine_min"] is None
    text = _show(path, monkeypatch)
    assert all(len(line) <= WIDTH_COLUMNS for line in text.splitlines())
    words = " ".join(text.split())  # the heading wraps at 80 columns
    head = f"{path}: fp8 study on NVIDIA H200, git abc1234, 5 kernel records"
    # a path longer than a line (pytest-xdist's `popen-gw0/` folders) breaks inside itself
    assert "".join(words.split()).startswith("".join(head.split()))
    assert "incomplete: the run stopped early (parts begun: errors, needle, kernel)" in words

    e4m3 = _section(text, "e4m3, per-tensor scales")
    assert e4m3[1].split() == ["shape", "variant", "quant", "q", "quant", "kernel", "total", "bf16"]
    # FlashInfer: no query quantisation; FA3: q quant, kernel and total side by side
    assert _cells(e4m3, "flashinfer:tc") == [
        "ctx1024", "bs32", "flashinfer:tc", "3.822%", "-", "0.273%", "3.833%", "0.213%",
    ]  # fmt: skip
    assert _cells(e4m3, "flash-attn:fa3") == [
        "ctx1024", "bs32", "flash-attn:fa3", "3.822%", "2.703%", "2.387%", "5.239%", "0.222%",
    ]  # fmt: skip

    e5m2 = _section(text, "e5m2, per-tensor scales")
    assert _cells(e5m2, "flashinfer:fa2")[2:] == [
        "flashinfer:fa2", "7.595%", "-", "0.287%", "7.599%", "-", "[1]",
    ]  # fmt: skip
    assert _cells(e5m2, "flash-attn:fa3")[2:] == [
        "flash-attn:fa3", "[2]", "7.595%", "-", "-", "-", "-",
    ]  # fmt: skip

    token = _section(text, "e4m3, per-(token, head) scales")
    assert _cells(token, "flashinfer:tc")[2:] == [
        "flashinfer:tc", "3.712%", "-", "0.303%", "3.722%", "0.213%",
    ]  # fmt: skip
    assert len([line for line in text.splitlines() if "ctx1024 bs32" in line]) == 5

    # each reason once, in full, after the tables (wrapped at 80 columns, never cut)
    notes = words[words.index("[1] bf16") : words.index("Summary:")]
    assert (
        notes == f"[1] bf16 run failed: RuntimeError: out of memory [2] unsupported: {E5M2_REASON} "
    )
    # the summary renders too, its null cosine (fp64 reference row) as `-`
    summary = next(line for line in text.splitlines() if line.lstrip("│ ").startswith("fp64"))
    assert "-" in summary.split()


def test_show_names_a_json_document_that_is_no_fp8_study(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"what": "something else"}))
    res = runner.invoke(app, ["show", str(other)])
    assert res.exit_code == 2
    assert "not a document `attnbench show` reads (results rows, an fp8 study, a replay" in (
        res.output
    )
    assert "Traceback" not in res.output
    broken = tmp_path / "replay.json"  # claims to be a replay document: the bad field named
    broken.write_text(json.dumps({"schema": "attnbench.replay/1"}))
    res = runner.invoke(app, ["show", str(broken)])
    assert res.exit_code == 2
    assert "not a valid replay document: field" in res.output
    assert "Traceback" not in res.output
