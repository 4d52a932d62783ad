"""`replay-validate` fits its cost models on the GPU whose steps it judges (`replay.fitgpu`):
rows of two GPUs in, the timing GPU's rows fit; a GPU without rows is refused in one line that
names both GPUs and the command that fits it; without a timing GPU, one GPU's rows only."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import replay_rows as rr
from attnbench.cli.app import app
from attnbench.replay.deployment import Deployment
from attnbench.replay.fitgpu import fit_command, fitting_gpu, rows_at_shape
from attnbench.replay.pipeline import ReplayError, rows_by_gpu
from attnbench.results import ResultWriter
from attnbench.workload.spec import WorkloadSpec

H100 = "NVIDIA H100 80GB HBM3"
SLOWER = 1.3
"""The H100's steps take 1.3x the H200's in these rows (its bandwidth gap)."""


def write_h100(path: Path) -> Path:
    """rr's rows as an H100 run measured them: every latency x SLOWER."""
    hdr = rr.header("replay-h100")
    hdr = hdr.model_copy(
        update={
            "device": {**hdr.device, "name": H100},
            "provenance": {**hdr.provenance, "gpu": H100},
        }
    )
    with ResultWriter(path) as w:
        w.write(hdr)
        for r in rr.rows():
            assert r.latency_us is not None
            w.write(
                r.model_copy(update={"run_id": "replay-h100", "latency_us": SLOWER * r.latency_us})
            )
    return path


@pytest.fixture
def two_gpus(tmp_path: Path) -> list[Path]:
    """The H200 with more rows than the H100 (the GPU a replay picks by default)."""
    h200 = rr.write(tmp_path / "h200.jsonl", rr.rows() + rr.rows(seed=1))
    return [h200, write_h100(tmp_path / "h100.jsonl")]


def test_each_gpus_rows_are_kept_apart(two_gpus: list[Path]) -> None:
    by_gpu = rows_by_gpu(two_gpus)
    assert set(by_gpu) == {rr.GPU, H100}
    counts = rows_at_shape(by_gpu, Deployment())
    assert list(counts) == [rr.GPU, H100]
    assert counts[rr.GPU] > counts[H100] > 0


def test_the_timing_gpus_own_rows_fit(two_gpus: list[Path]) -> None:
    assert fitting_gpu(two_gpus, H100, Deployment()) == (H100, [])
    assert fitting_gpu(two_gpus, rr.GPU, Deployment()) == (rr.GPU, [])


def test_a_gpu_without_rows_is_refused_naming_both_and_the_command(tmp_path: Path) -> None:
    h200 = [rr.write(tmp_path / "h200.jsonl")]
    with pytest.raises(ReplayError) as exc:
        fitting_gpu(h200, H100, Deployment())
    msg = str(exc.value)
    assert "\n" not in msg
    assert f"timed on {H100}" in msg
    assert f"rows of {rr.GPU} (" in msg
    assert f"`attnbench run --suite replay-calibration` on {H100}" in msg


def test_without_a_timing_gpu_one_gpus_rows_fit_with_a_note(two_gpus: list[Path]) -> None:
    gpu, notes = fitting_gpu(two_gpus, None, Deployment())
    assert gpu == rr.GPU
    assert notes == [f"the steps name no GPU: the cost models are fitted on {gpu}'s rows only"]


def test_fit_command_is_the_calibration_suite_at_the_calibrated_shape() -> None:
    assert fit_command(Deployment()) == "`attnbench run --suite replay-calibration`"
    other = fit_command(Deployment(model="llama-3.1-8b", tp=1))
    assert "--suite replay --model llama-3.1-8b --tp 1" in other


def _h100_timer(device: str, rows_path: str, max_time_ms: float) -> tuple:
    def timer(spec: WorkloadSpec, names: list[str]) -> dict[str, float | None]:
        return {n: SLOWER * rr.decode_us(n, list(spec.kv_lens)) for n in names}

    return timer, lambda: None, H100


def _live(monkeypatch: pytest.MonkeyPatch, paths: list[Path], out: Path) -> object:
    import attnbench.cli.replay_validate as cli
    import attnbench.replay.live as live
    import attnbench.replay.validate as validate

    monkeypatch.setattr(cli, "_check_live_device", lambda device, command="": None)
    monkeypatch.setattr(live, "cuda_device", lambda device, why: SimpleNamespace(name=H100))
    monkeypatch.setattr(validate, "gpu_timer", _h100_timer)
    args = ["replay-validate", *map(str, paths), "--trace", "azure-conv", "--limit", "120"]
    args += ["--steps", "6", "--out", str(out), "--device", "cuda"]
    return CliRunner().invoke(app, args)


def test_live_validation_on_an_h100_fits_the_h100s_rows(
    two_gpus: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps timed on the H100 are judged by models fitted on the H100's rows: no error
    (fitted on the H200's, which has more rows here, every step would be 30% off)."""
    out = tmp_path / "v.json"
    res = _live(monkeypatch, two_gpus, out)
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["summary"]
    for name, s in doc["summary"].items():
        assert s["median_abs_err"] < 1e-6, name


def test_live_validation_without_the_timing_gpus_rows_refuses_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    res = _live(monkeypatch, [rr.write(tmp_path / "h200.jsonl")], tmp_path / "v.json")
    assert res.exit_code != 0
    text = " ".join(res.output.split())
    assert f"timed on {H100}" in text
    assert rr.GPU in text
    assert "attnbench run --suite replay-calibration" in text
    assert "Traceback" not in res.output
    assert not (tmp_path / "v.json").exists()


def _document(gpu: str | None, path: Path) -> Path:
    """A validation document of H100-timed steps (measured = SLOWER x the H200 model)."""
    steps = []
    for i, kv in enumerate(([1000], [4000, 300], [200] * 8)):
        for b in rr.COEFS:
            us = SLOWER * rr.decode_us(b, kv)
            steps.append(
                {
                    "trace": "azure-conv", "step": i, "backend": b, "requests": len(kv),
                    "kv_total": sum(kv), "kv_max": max(kv), "predicted_us": us,
                    "measured_us": us, "rel_err": 0.0, "outside": False, "kv_lens": kv,
                }
            )  # fmt: skip
    doc = {
        "schema": "attnbench.replay-validation/1",
        "provenance": {"gpu": gpu} if gpu else {},
        "complete": True,
        "traces": ["azure-conv"],
        "sources": [],
        "target": {},
        "models": [],
        "summary": {},
        "steps": steps,
    }
    path.write_text(json.dumps(doc))
    return path


def test_rescore_fits_the_gpu_that_timed_the_steps(two_gpus: list[Path], tmp_path: Path) -> None:
    src = _document(H100, tmp_path / "old.json")
    out = tmp_path / "new.json"
    args = ["replay-validate", *map(str, two_gpus), "--rescore", str(src), "--out", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    for name, s in json.loads(out.read_text())["summary"].items():
        assert s["median_abs_err"] < 1e-6, name
    res = CliRunner().invoke(app, [*args[:1], str(two_gpus[0]), *args[3:]])
    assert res.exit_code != 0
    assert f"timed on {H100}" in " ".join(res.output.split())


def test_rescore_of_steps_without_a_gpu_uses_one_gpus_rows_and_says_so(
    two_gpus: list[Path], tmp_path: Path
) -> None:
    src = _document(None, tmp_path / "old.json")
    out = tmp_path / "new.json"
    args = ["replay-validate", *map(str, two_gpus), "--rescore", str(src), "--out", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "name no GPU: the cost models are fitted on" in " ".join(res.output.split())
