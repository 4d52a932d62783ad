from __future__ import annotations

import time
from pathlib import Path

import pytest
import typer

from attnbench.cli.run import execute
from attnbench.measure.config import MeasureConfig
from attnbench.results import read_results
from attnbench.run.raycluster import _run_job
from attnbench.run.worker import parse_gpus
from attnbench.workload.spec import WorkloadSpec

pytestmark = pytest.mark.usefixtures("isolated", "fake_timer")


def test_parse_gpus() -> None:
    assert parse_gpus("all", 4) == [0, 1, 2, 3]
    assert parse_gpus("2", 4) == [0, 1]
    assert parse_gpus("0,0", 1) == [0, 0]
    with pytest.raises(ValueError, match="not visible"):
        parse_gpus("3", 2)
    with pytest.raises(ValueError, match="allowed"):
        parse_gpus("many", 2)
    with pytest.raises(ValueError, match="no CUDA GPU"):
        parse_gpus("all", 0)


@pytest.mark.slow
def test_cpu_worker_pool_shards_cases_into_one_file(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    execute(
        {
            "device": "cpu",
            "backends": ["reference"],
            "batch_size": 2,
            "lengths": ["16,32,48,64"],
            "kv_dtype": "bfloat16",
            "workers": 2,
            "out": out,
        }
    )
    f = read_results(out)
    assert len(f.rows) == 4
    assert all(r.status == "ok" for r in f.rows)
    assert f.header is not None
    assert f.header.model_extra is not None
    assert len(f.header.model_extra["workers"]) == 2
    assert {r.details["worker"] for r in f.rows} <= {0, 1}


@pytest.mark.slow
def test_ray_task_body_runs_a_case() -> None:
    spec = WorkloadSpec(
        kind="decode", num_qo_heads=4, num_kv_heads=2, head_dim=16, kv_lens=(20, 7), qo_lens=(1, 1)
    )
    rows = _run_job(
        spec.model_dump(mode="json"), ("reference",), "r", MeasureConfig(timer="fake"), "cpu"
    )
    assert [r["status"] for r in rows] == ["ok"]


@pytest.mark.slow
def test_ray_local_cluster_runs_the_sweep(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    out = tmp_path / "r.jsonl"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with pytest.raises(typer.Exit):  # only the oracle passed: nothing ran (exit 3)
            execute(
                {
                    "device": "cpu",
                    "backends": ["reference", "faulty:raise"],
                    "batch_size": 2,
                    "lengths": ["16,32"],
                    "kv_dtype": "bfloat16",
                    "ray": "local",
                    "out": out,
                }
            )
    finally:
        ray.shutdown()
    rows = read_results(out).rows
    assert sorted((r.backend, r.status) for r in rows) == [
        ("faulty:raise", "error"),
        ("faulty:raise", "error"),
        ("reference", "ok"),
        ("reference", "ok"),
    ]
    assert all("host" in r.details for r in rows)


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("not-an-address:99", "cannot reach not-an-address:99"),
        ("127.0.0.1:1", "cannot reach 127.0.0.1:1"),
        ("bogus", "allowed: local, auto, or [ray://]HOST:PORT"),
        ("ray://host:0", "allowed"),
    ],
)
def test_a_bad_ray_address_fails_at_once(address: str, message: str) -> None:
    pytest.importorskip("ray")
    from attnbench.run.raycluster import check_address

    t0 = time.monotonic()
    with pytest.raises(ValueError, match="ray=") as err:
        check_address(address, timeout_s=2.0)
    assert message in str(err.value)
    assert time.monotonic() - t0 < 10
