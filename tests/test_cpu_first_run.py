"""The CPU default run (issue 34: <= 60 s on 2 cores, first run included): what `all` and the
CPU suite are there, said in the output; a suite's measurement settings apply to the run."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.cli import app
from attnbench.config import Settings
from attnbench.results import read_results
from attnbench.workload.suite import load_suite, suite_specs

pytestmark = pytest.mark.usefixtures("isolated")


def test_all_on_a_cpu_leaves_out_the_timed_oracle() -> None:
    from attnbench.backends import all_backends
    from attnbench.run.policy import backends_for, runnable_here

    kept, notes = runnable_here(all_backends(), "cpu")
    assert {b.name for b in kept} >= {"flex", "sdpa:math"}
    assert "reference" not in {b.name for b in kept}
    assert notes[-1] == "on a CPU, `all` leaves out reference: name it to time it"
    named, _ = backends_for(["reference"], "cpu")
    assert [b.name for b in named] == ["reference"]


def test_the_cpu_suite_is_small_and_says_why() -> None:
    suite = load_suite("cpu")
    specs = suite_specs(suite, Settings(device="cpu"))
    assert len(specs) == 4
    assert {s.kv_dtype for s in specs} == {"bfloat16"}
    assert "no CPU backend has an fp8 KV path" in suite.description


SUITE = """name = "tiny"
description = "one decode case"
[defaults]
batch_size = 1
num_heads = 2
num_kv_heads = 1
head_dim = 16
max_time_ms = 7
min_runs = 3
[[group]]
kinds = ["decode"]
lengths = ["32"]
kv_dtype = "bfloat16"
"""


@pytest.mark.usefixtures("fake_timer")
@pytest.mark.parametrize(("flags", "max_time_ms"), [([], 7.0), (["--max-time-ms", "9"], 9.0)])
@pytest.mark.slow
def test_a_suites_measurement_settings_apply(
    tmp_path: Path, flags: list[str], max_time_ms: float
) -> None:
    """`max_time_ms` and `min_runs` in a suite's [defaults] reach the measurement (they were
    ignored: the CPU suite's 150 ms ran as 400); a flag still wins."""
    suite = tmp_path / "tiny.toml"
    suite.write_text(SUITE)
    out = tmp_path / "r.jsonl"
    args = ["run", "--device", "cpu", "--suite", str(suite), "-b", "reference", *flags]
    res = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    header = read_results(out).header
    assert header is not None
    assert (header.settings["max_time_ms"], header.settings["min_runs"]) == (max_time_ms, 3)


def test_a_bad_measurement_value_in_a_suite_is_refused(tmp_path: Path) -> None:
    suite = tmp_path / "tiny.toml"
    suite.write_text(SUITE.replace("min_runs = 3", "min_runs = 0"))
    res = CliRunner().invoke(app, ["run", "--device", "cpu", "--suite", str(suite)])
    assert res.exit_code != 0
    assert "min_runs" in res.output


def test_workers_above_the_cores_are_capped_and_said() -> None:
    """`--workers 64` on 2 cores started 64 processes (8.5 GB, nothing finished in 120 s)."""
    from attnbench.measure.hardware import DeviceInfo
    from attnbench.run.plan import cap_workers, placement

    assert cap_workers(2, 2) == (2, None)
    assert cap_workers(64, 2) == (2, "workers=64: capped at 2, the CPU cores this process may use")
    from attnbench.config import usable_cpus

    cpu = DeviceInfo("cpu", 0, "cpu", None, 0, 0, 0)
    assert len(placement(cpu, workers=10**6).gpus) == usable_cpus()
