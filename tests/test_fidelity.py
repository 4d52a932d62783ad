# ruff: noqa: E501  (ncu CSV lines are long)
from __future__ import annotations

from pathlib import Path

import pytest

from attnbench.run.fidelity import default_cases, parse_ncu_csv

NCU_CSV = """==PROF== Connected to process 123
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","python","h","BatchDecodeKernel","1","7","(128,1,1)","(32,8,1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","12.35"
"0","1","python","h","BatchDecodeKernel","1","7","(128,1,1)","(32,8,1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","Mbyte","1,024.50"
"1","1","python","h","MergeStates","1","7","(128,1,1)","(32,8,1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","800"
==PROF== Disconnected from process 123
"""


def test_parse_ncu_csv_groups_metrics_by_kernel_in_base_units() -> None:
    kernels = parse_ncu_csv(NCU_CSV)
    assert [k["name"] for k in kernels] == ["BatchDecodeKernel", "MergeStates"]
    assert kernels[0]["metrics"]["gpu__time_duration.sum"] == pytest.approx(12350.0)
    assert kernels[0]["metrics"]["dram__bytes_read.sum"] == pytest.approx(1.0245e9)
    assert kernels[1]["metrics"]["gpu__time_duration.sum"] == 800.0
    assert parse_ncu_csv("no csv here") == []


def test_default_cases_cover_decode_and_prefill() -> None:
    cases = default_cases()
    kinds = {c.spec.kind for c in cases}
    assert kinds == {"decode", "prefill"}
    assert any(min(c.spec.kv_lens) != max(c.spec.kv_lens) for c in cases)


@pytest.mark.gpu
def test_gpu_engine_agrees_with_the_profiler() -> None:
    from attnbench.measure.config import MeasureConfig
    from attnbench.run.fidelity import check_case

    rec = check_case(default_cases()[1], MeasureConfig(max_time_ms=200, min_runs=20))
    assert rec["status"] == "ok", rec
    assert abs(rec["profiler_diff"]) < 0.05
    assert rec["repeat_diff"] < 0.02


def test_select_cases_names_the_allowed_variants() -> None:
    from attnbench.run.fidelity import select_cases, sm_activity_cases

    cases = sm_activity_cases()
    xqa = select_cases(cases, ["flashinfer:xqa"])
    assert len(xqa) == 3
    assert {c.backend for c in xqa} == {"flashinfer:xqa"}
    assert select_cases(cases, []) == cases
    with pytest.raises(ValueError, match=r"--backend: sdpa:math not among .*flash-attn:fa3"):
        select_cases(cases, ["sdpa:math"])


def test_fidelity_cli_rejects_bad_input_before_any_gpu_work() -> None:
    from typer.testing import CliRunner

    from attnbench.cli import app

    res = CliRunner().invoke(app, ["fidelity", "-b", "nope"])
    assert res.exit_code == 2
    assert "--backend: nope not among" in res.output
    res = CliRunner().invoke(app, ["fidelity", "--resume"])
    assert res.exit_code == 2
    assert "--resume needs --out" in res.output


def test_fidelity_writes_after_every_case_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run cut short keeps its finished cases; --resume runs only the missing ones."""
    import json

    import torch
    from typer.testing import CliRunner

    import attnbench.run.fidelity as fid
    from attnbench.cli import app

    calls: list[str] = []

    def fake_check(case: fid.FidelityCase, cfg: object) -> dict[str, object]:
        calls.append(case.name)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the step's time limit arrives mid-run
        return {"case": case.name, "backend": case.backend, "status": "error", "reason": "x"}

    import attnbench.results as results

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(results, "provenance", lambda: {"gpu": "test"})
    monkeypatch.setattr(fid, "check_case", fake_check)
    out = tmp_path / "fid.json"
    res = CliRunner().invoke(app, ["fidelity", "--out", str(out)])
    assert res.exit_code == 130, res.output
    doc = json.loads(out.read_text())
    assert doc["complete"] is False
    assert len(doc["cases"]) == 1
    first = doc["cases"][0]["case"]

    calls.clear()
    timed = {"engine_us": 100.0, "repeat_diff": 0.01, "profiler_kernel_us": 99.0}
    monkeypatch.setattr(
        fid,
        "check_case",
        lambda c, cfg: {
            "case": c.name,
            "backend": c.backend,
            "status": "ok",
            "profiler_diff": 0.01,
            **timed,
        },
    )
    res = CliRunner().invoke(app, ["fidelity", "--out", str(out), "--resume"])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["complete"] is True
    assert len(doc["cases"]) == len(fid.default_cases())
    assert doc["cases"][0]["case"] == first
    assert doc["cases"][0]["reason"] == "x"
    assert calls == []  # the kept case is not run again
    assert "resume: 1 cases kept" in res.output
