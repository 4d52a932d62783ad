"""One timing path: a `RunSession` opened once runs any number of jobs (the studies hand it
their cases one at a time), rows reach the sink and come back per call; the fp8 study's job
kind (`run.kernel_error`) goes through the sweep's gate; `replay-validate`'s timer is a
session's job."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnbench.measure.config import MeasureConfig
from attnbench.measure.hardware import detect
from attnbench.results import Header, ResultRow, read_results
from attnbench.run.jobs import KernelErrorJob
from attnbench.run.plan import RunPlan, RunSink, placement
from attnbench.run.session import RunSession
from attnbench.workload.spec import WorkloadSpec

FAKE = MeasureConfig(timer="fake", fake_samples_us=(50.0,), cold_l2=False)


def _spec(n: int, kv_dtype: str = "bfloat16", label: str = "") -> WorkloadSpec:
    return WorkloadSpec(
        kind="decode", num_qo_heads=4, num_kv_heads=2, head_dim=16, kv_lens=(n, n + 7),
        qo_lens=(1, 1), kv_dtype=kv_dtype, label=label,
    )  # fmt: skip


def _plan(**kw: object) -> RunPlan:
    info = detect("cpu")
    return RunPlan(run_id="s", device=info, where=placement(info), measure_cfg=FAKE, **kw)


@pytest.mark.slow
def test_a_session_runs_many_batches_under_one_header() -> None:
    rows: list[ResultRow] = []
    headers: list[Header] = []
    done = (_spec(24).case_id, "reference")
    plan = _plan(skip=frozenset({done}))
    with RunSession(plan, RunSink(on_row=rows.append, on_header=headers.append)) as session:
        first = session.run_case(_spec(16), ["reference"])
        second = session.run_case(_spec(32), ["reference", "faulty:raise"])
        finished = session.run_case(_spec(24), ["reference"])  # --resume: nothing left to run
    assert len(headers) == 1
    assert headers[0].ceilings is not None
    assert [(r.backend, r.status) for r in first] == [("reference", "ok")]
    assert [(r.backend, r.status) for r in second] == [
        ("reference", "ok"),
        ("faulty:raise", "error"),
    ]
    assert finished == []
    assert rows == first + second
    assert all(r.latency_us == 50.0 for r in rows if r.status == "ok")


def test_a_session_is_used_inside_its_with_block_only() -> None:
    session = RunSession(_plan(), RunSink())
    with pytest.raises(RuntimeError, match="outside"):
        session.run_case(_spec(16), ["reference"])


@pytest.mark.slow
def test_a_pool_session_starts_its_workers_once() -> None:
    """CPU workers: two batches, one header naming the worker, rows tagged with it."""
    rows: list[ResultRow] = []
    headers: list[Header] = []
    info = detect("cpu")
    plan = RunPlan(run_id="p", device=info, where=placement(info, workers=1), measure_cfg=FAKE)
    with RunSession(plan, RunSink(on_row=rows.append, on_header=headers.append)) as session:
        a = session.run_case(_spec(16), ["reference"])
        b = session.run_case(_spec(32), ["reference"])
    assert len(headers) == 1
    assert headers[0].model_extra is not None
    assert len(headers[0].model_extra["workers"]) == 1
    assert [r.status for r in a + b] == ["ok", "ok"]
    assert {r.details.get("worker") for r in rows} == {0}


@pytest.mark.slow
def test_kernel_error_jobs_split_the_gated_output_error() -> None:
    """The fp8 study's job kind: each variant through the sweep's gate, its error split beside
    it. The reference kernel reads the per-tensor fp8 cache right (kernel error: fp32
    rounding); it ignores per-(token, head) scales, and the gate says so (a mismatch row)."""
    rows: list[ResultRow] = []
    spec = _spec(40, "fp8_e4m3", "tensor")
    token = _spec(40, "fp8_e4m3", "token")
    with RunSession(_plan(), RunSink(on_row=rows.append)) as session:
        [tensor_row] = session.run_case(spec, ["reference"], KernelErrorJob("tensor"))
        [token_row] = session.run_case(token, ["reference"], KernelErrorJob("token"))
    assert tensor_row.status == "ok", tensor_row.reason
    e = tensor_row.details.get("kernel_error")
    assert e["scheme"] == "tensor"
    assert e["k_scale"] > 0
    assert e["kernel"]["rel_l2_err"] < 1e-5 < 1e-2 < e["quant"]["rel_l2_err"]
    assert e["total"]["rel_l2_err"] == pytest.approx(e["quant"]["rel_l2_err"], rel=1e-3)
    assert "q_quant" not in e  # the reference kernel reads the 16-bit query as it is
    assert e["bf16_kernel"]["rel_l2_err"] < 1e-5
    assert e["bf16_resolved"] == "torch-fp32"
    assert token_row.status == "mismatch"
    t = token_row.details.get("kernel_error")
    assert t["scheme"] == "token"
    assert t["kernel"]["rel_l2_err"] > 0.5  # the error the gate refused, kept for the study
    assert 0 < t["quant"]["rel_l2_err"] < 0.1


def test_a_kernel_error_job_keeps_the_quant_error_of_a_refused_variant() -> None:
    [row] = _error_rows(_spec(40, "fp8_e5m2"), ["flash-attn:fa3"])
    assert row.status == "unsupported"
    assert row.details.get("kernel_error")["quant"]["rel_l2_err"] > 0


def _error_rows(spec: WorkloadSpec, names: list[str]) -> list[ResultRow]:
    with RunSession(_plan(), RunSink()) as session:
        return session.run_case(spec, names, KernelErrorJob("tensor"))


@pytest.mark.slow
def test_the_validation_timer_is_a_session_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`replay-validate`'s timer on the CPU (the device check bypassed): each batch one job of
    one session, every row in the rows file under one header; an unknown variant is a
    ValueError, not a worker's crash."""
    import attnbench.replay.live as live
    from attnbench.replay.validate import gpu_timer

    monkeypatch.setattr(live, "cuda_device", lambda device, why: detect("cpu"))
    path = tmp_path / "v.jsonl"
    timer, close, name = gpu_timer("cpu", str(path), max_time_ms=5.0)
    try:
        got = [timer(_spec(n), ["reference", "faulty:raise"]) for n in (16, 32)]
        with pytest.raises(ValueError, match="not known"):
            timer(_spec(16), ["no-such-kernel"])
    finally:
        close()
    assert name == detect("cpu").name
    for measured in got:
        assert measured["faulty:raise"] is None
        assert (measured["reference"] or 0) > 0
    saved = read_results(path)
    assert saved.header is not None
    assert saved.header.settings == {"replay_validate": True}
    assert len(saved.rows) == 4
