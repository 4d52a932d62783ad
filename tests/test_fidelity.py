# ruff: noqa: E501  (ncu CSV lines are long)
from __future__ import annotations

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
