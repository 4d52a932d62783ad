# ruff: noqa: E501  (ncu CSV lines are long)
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from attnbench.run.fidelity import default_cases
from attnbench.run.ncu import parse_ncu_csv

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


def test_knobs_set_on_every_case_and_travel_to_the_ncu_child(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--knob enable_pdl=false` re-times XQA without programmatic dependent launch: parsed to
    a boolean, checked against the variant's declared knobs, and handed to the ncu child."""
    import attnbench.run.fidelity as fid
    from attnbench.cli.fidelity import parse_knobs

    assert parse_knobs(["enable_pdl=false", "fixed_split_size=64", "x=None", "y=abc"]) == {
        "enable_pdl": False,
        "fixed_split_size": 64,
        "x": None,
        "y": "abc",
    }
    with pytest.raises(ValueError, match="expected NAME=VALUE"):
        parse_knobs(["enable_pdl"])
    xqa = fid.select_cases(fid.sm_activity_cases(), ["flashinfer:xqa"])
    off = fid.with_knobs(xqa, {"enable_pdl": False})
    assert {c.knobs for c in off} == {(("enable_pdl", False),)}
    assert fid.with_knobs(xqa, {}) == xqa
    with pytest.raises(ValueError, match=r"--knob: flashinfer:xqa: .*enable_pdl=3.*allowed"):
        fid.with_knobs(xqa, {"enable_pdl": 3})
    fa3 = fid.select_cases(fid.sm_activity_cases(), ["flash-attn:fa3"])
    with pytest.raises(ValueError, match=r"--knob: flash-attn:fa3: knob 'enable_pdl' is not"):
        fid.with_knobs(fa3, {"enable_pdl": False})

    sent: list[dict[str, object]] = []

    def fake_group(
        specs: list[dict[str, object]], profile: object, module: str, timeout_s: object
    ) -> list[dict[str, object]]:
        sent.extend(specs)
        return [{"status": "ok"} for _ in specs]

    monkeypatch.setattr(fid, "profile_group", fake_group)
    fid.ncu_cases(off)
    assert [s["knobs"] for s in sent] == [{"enable_pdl": False}] * 3


def test_fidelity_cli_rejects_bad_input_before_any_gpu_work() -> None:
    from typer.testing import CliRunner

    from attnbench.cli import app

    res = CliRunner().invoke(app, ["fidelity", "-b", "nope"])
    assert res.exit_code == 2
    assert "--backend: nope not among" in res.output
    res = CliRunner().invoke(app, ["fidelity", "--resume"])
    assert res.exit_code == 2
    assert "--resume needs --out" in res.output
    res = CliRunner().invoke(app, ["fidelity", "-b", "flash-attn:fa3", "--knob", "enable_pdl=0"])
    assert res.exit_code == 2
    assert "--knob: flash-attn:fa3: knob 'enable_pdl' is not known here" in res.output


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

    def fake_check(case: fid.FidelityCase, cfg: object, *kept: object) -> dict[str, object]:
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
        lambda c, cfg, *kept: {
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


HEADER = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'


def _rows(kid: int, name: str, **metrics: tuple[str, str]) -> str:
    return "\n".join(
        f'"{kid}","1","python","h","{name}","1","7","(128,1,1)","(1,1,1)","0","9.0","Command line profiler metrics","{m}","{unit}","{value}"'
        for m, (unit, value) in metrics.items()
    )


def _kernel(kid: int, name: str, us: str, sm: str, occ: str, grid: str, waves: str) -> str:
    return _rows(
        kid,
        name,
        **{
            "gpu__time_duration.sum": ("usecond", us),
            "sm__cycles_active.avg.pct_of_peak_sustained_elapsed": ("%", sm),
            "sm__warps_active.avg.pct_of_peak_sustained_active": ("%", occ),
            "launch__grid_size": ("", grid),
            "launch__waves_per_multiprocessor": ("", waves),
        },
    )


MARKER = "spin_kernel"
GROUP_STDOUT = "\n".join(
    [
        "==PROF== Connected to process 123",
        'ATTNBENCH-NCU {"i": 0, "status": "ok", "window": true}',
        'ATTNBENCH-NCU {"i": 1, "status": "error", "window": false, "reason": "RuntimeError: boom"}',
        'ATTNBENCH-NCU {"i": 2, "status": "ok", "window": true}',
        '==PROF== Profiling "spin_kernel" - 0: 0%....50%....100% - 2 passes',
        '==PROF== Profiling "BatchDecodeKernel" - 1: 0%....50%....100% - 3 passes',
        "==PROF== Disconnected from process 123",
        HEADER,
        _kernel(0, MARKER, "1.50", "0.1", "0.1", "1", "0.00"),
        _kernel(1, "BatchDecodeKernel", "100", "50", "20", "264", "1.00"),
        _kernel(2, "MergeStates", "10", "90", "60", "32", "0.10"),
        _kernel(3, "at::cuda::<unnamed>::spin_kernel(long)", "1.50", "0.1", "0.1", "1", "0.00"),
        _kernel(4, "BatchDecodeKernel", "200", "80", "30", "528", "2.00"),
    ]
)


def test_group_output_splits_per_spec_at_the_markers() -> None:
    """Three specs in one child: the second failed before its window; the kernels after each
    marker are the next profiled spec's, and the markers count in no sum."""
    from attnbench.run.ncu import group_records, is_marker

    assert is_marker({"name": "spin_kernel"})
    assert not is_marker({"name": "my_spin_kernel_v2"})
    recs = group_records(GROUP_STDOUT, "", 0, 3, calls=1)
    first, failed, third = recs
    assert first["status"] == "ok"
    assert first["gpu_time_us"] == pytest.approx(110.0)
    assert first["kernels_per_call"] == 2
    assert first["kernel_names"] == ["BatchDecodeKernel", "MergeStates"]
    assert first["sm_active_pct"] == pytest.approx((50 * 100 + 90 * 10) / 110)
    assert first["achieved_occupancy_pct"] == pytest.approx((20 * 100 + 60 * 10) / 110)
    assert first["grid_size"] == 264
    assert first["waves_per_sm"] == 1.0
    assert first["passes"] == 3
    assert [k["name"] for k in first["first_call"]] == ["BatchDecodeKernel", "MergeStates"]
    assert "dram_throughput_pct" not in first  # not asked for: not invented
    assert failed == {"status": "error", "reason": "RuntimeError: boom"}
    assert third["gpu_time_us"] == pytest.approx(200.0)
    assert third["sm_active_pct"] == pytest.approx(80.0)
    assert third["waves_per_sm"] == 2.0


def test_group_output_over_several_calls_is_per_call() -> None:
    from attnbench.run.ncu import group_records

    out = "\n".join(
        [
            'ATTNBENCH-NCU {"i": 0, "status": "ok", "window": true}',
            HEADER,
            _kernel(0, MARKER, "1", "0", "0", "1", "0"),
            *(_kernel(i, "Decode", "100", "50", "20", "264", "1") for i in (1, 2, 3)),
        ]
    )
    (rec,) = group_records(out, "", 0, 1, calls=3)
    assert rec["gpu_time_us"] == pytest.approx(100.0)
    assert rec["kernels_per_call"] == 1
    assert len(rec["first_call"]) == 1


def test_group_output_that_does_not_split_is_an_error_for_every_profiled_spec() -> None:
    from attnbench.run.ncu import group_records

    no_marker = "\n".join(
        [
            'ATTNBENCH-NCU {"i": 0, "status": "ok", "window": true}',
            HEADER,
            _kernel(0, "Decode", "100", "50", "20", "264", "1"),
            "==WARNING== something ncu said",
        ]
    )
    (rec,) = group_records(no_marker, "", 0, 1, calls=1)
    assert rec["status"] == "error"
    assert "split into 0 windows, not 1" in rec["reason"]
    assert "==WARNING== something ncu said" in rec["reason"]
    # a spec the child never reported (it stopped early) is named as such
    one = "\n".join(
        [
            'ATTNBENCH-NCU {"i": 0, "status": "ok", "window": true}',
            HEADER,
            _kernel(0, MARKER, "1", "0", "0", "1", "0"),
            _kernel(1, "Decode", "100", "50", "20", "264", "1"),
        ]
    )
    done, missing = group_records(one, "", 0, 2, calls=1)
    assert done["gpu_time_us"] == pytest.approx(100.0)
    assert missing == {"status": "error", "reason": "the ncu child never reached this case"}


def _fake_ncu(tmp_path: Path, body: str) -> str:
    script = tmp_path / "ncu"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)
    return str(script)


def test_a_crashed_or_timed_out_child_fails_every_case_of_its_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    import attnbench.run.ncu as ncu

    specs = [{"backend": "flashinfer:fa2", "spec": {}}] * 3
    crash = _fake_ncu(
        tmp_path, 'echo "==ERROR== The application returned an error code (11)" >&2; exit 11'
    )
    monkeypatch.setattr(ncu, "find_ncu", lambda: crash)
    recs = ncu.profile_group(specs, ncu.SM_ACTIVITY, "attnbench.run.fidelity")
    assert [r["status"] for r in recs] == ["error"] * 3
    assert all("rc 11" in r["reason"] and "error code (11)" in r["reason"] for r in recs)
    assert recs[0]["options"][:2] == ["--clock-control", "none"]
    assert recs[0]["calls"] == ncu.NCU_CALLS
    assert recs[0]["group_size"] == 3

    (tmp_path / "slow").mkdir()
    slow = _fake_ncu(tmp_path / "slow", "sleep 30 & wait")
    monkeypatch.setattr(ncu, "find_ncu", lambda: slow)
    t0 = time.monotonic()
    recs = ncu.profile_group(specs, ncu.TIMING, "attnbench.run.fidelity", timeout_s=0.5)
    assert time.monotonic() - t0 < 10  # the child's whole process group was killed
    assert [r["status"] for r in recs] == ["timeout"] * 3
    assert recs[0]["reason"] == "the ncu child for 3 case(s) took over 0.5 s"
    assert recs[0]["group_wall_s"] < 10

    monkeypatch.setattr(ncu, "find_ncu", lambda: None)
    assert ncu.profile_group(specs[:1], ncu.TIMING, "m") == [
        {"status": "unsupported", "reason": "ncu not found"}
    ]
    assert ncu.group_timeout_s(3) > ncu.group_timeout_s(1) > 0


def test_a_fake_ncu_run_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """profile_group through a real child process: the payload reaches it, the output splits."""
    import attnbench.run.ncu as ncu

    (tmp_path / "out.txt").write_text(GROUP_STDOUT)
    script = _fake_ncu(tmp_path, f'echo "$@" > {tmp_path}/args; cat {tmp_path}/out.txt')
    monkeypatch.setattr(ncu, "find_ncu", lambda: script)
    specs = [{"backend": "b", "spec": {"n": i}} for i in range(3)]
    one_call = replace(ncu.SM_ACTIVITY, calls=1)  # GROUP_STDOUT holds one call per spec
    recs = ncu.profile_group(specs, one_call, "attnbench.run.fidelity")
    assert [r["status"] for r in recs] == ["ok", "error", "ok"]
    assert recs[2]["gpu_time_us"] == pytest.approx(200.0)
    assert recs[0]["profile"] == "sm-activity"
    args = (tmp_path / "args").read_text()
    assert ",".join(ncu.SM_ACTIVITY_METRICS) in args
    assert "dram__" not in args
    assert '"calls": 1' in args
    assert "--child" in args


def test_ncu_cases_run_one_child_per_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    import attnbench.run.fidelity as fid
    from attnbench.run.ncu import NCU_CALLS

    calls: list[tuple[list[str], str, int]] = []

    def fake_group(
        specs: list[dict[str, object]], profile: object, module: str, timeout_s: object
    ) -> list[dict[str, object]]:
        assert module == "attnbench.run.fidelity"
        calls.append(([str(s["backend"]) for s in specs], profile.name, profile.calls))  # type: ignore[attr-defined]
        return [{"status": "ok", "n": i, "backend": s["backend"]} for i, s in enumerate(specs)]

    monkeypatch.setattr(fid, "profile_group", fake_group)
    cases = fid.sm_activity_cases()
    recs = fid.ncu_cases(cases)
    assert len(calls) == len(fid.SM_ACTIVITY_BACKENDS)
    assert all(len(b) == 3 and len(set(b)) == 1 for b, _, _ in calls)
    assert {(p, n) for _, p, n in calls} == {("sm-activity", 3)}  # ncu's one call varied 6%
    assert [r["backend"] for r in recs] == [c.backend for c in cases]
    assert [r["n"] for r in recs] == [0, 1, 2] * len(fid.SM_ACTIVITY_BACKENDS)

    calls.clear()
    default = fid.default_cases()
    recs = fid.ncu_cases(default)
    assert [r["backend"] for r in recs] == [c.backend for c in default]
    assert len(calls) == len({c.backend for c in default})
    assert {(p, n) for _, p, n in calls} == {("timing", NCU_CALLS)}
    assert fid.ncu_case(default[0])["backend"] == default[0].backend


def test_fidelity_ncu_writes_after_every_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    import torch
    from typer.testing import CliRunner

    import attnbench.results as results
    import attnbench.run.fidelity as fid
    from attnbench.cli import app

    saved: list[int] = []
    out = tmp_path / "fid.json"

    def fake_check(case: fid.FidelityCase, cfg: object, *kept: object) -> dict[str, object]:
        saved.append(len(json.loads(out.read_text())["cases"]) if out.exists() else 0)
        status = "error" if case.backend == "flashinfer:xqa" else "ok"
        return {
            "case": case.name,
            "backend": case.backend,
            "status": status,
            "reason": "x",
            "engine_us": 110.0,
            "repeat_diff": 0.0,
            "profiler_kernel_us": 100.0,
            "profiler_diff": 0.1,
        }

    def fake_ncu(cases: list[fid.FidelityCase]) -> list[dict[str, object]]:
        assert all(c.backend != "flashinfer:xqa" for c in cases)  # failed checks are not profiled
        return [
            {
                "status": "ok",
                "gpu_time_us": 100.0,
                "achieved_occupancy_pct": 30.0,
                "sm_active_pct": 40.0,
                "group_wall_s": 12.0,
            }
            for _ in cases
        ]

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(results, "provenance", lambda: {"gpu": "test"})
    monkeypatch.setattr(fid, "check_case", fake_check)
    monkeypatch.setattr(fid, "ncu_cases", fake_ncu)
    res = CliRunner().invoke(
        app, ["fidelity", "--ncu", "--cases", "sm-activity", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert saved == [0, 0, 0, 3, 3, 3, 6, 6, 6, 9, 9, 9, 12, 12, 12]  # after each group of 3
    doc = json.loads(out.read_text())
    ok = [c for c in doc["cases"] if c["status"] == "ok"]
    assert len(ok) == 12
    assert all(c["ncu_diff"] == pytest.approx(0.1) for c in ok)
    assert all("ncu" not in c for c in doc["cases"] if c["status"] != "ok")
    assert "in one child: sm-uniform ok, sm-mixed ok, sm-4-long ok (12 s)" in res.output
