"""A replay and its live validation with an fp8 KV cache, on CPU: the `replay-calibration-fp8`
suite (the fp8 rows `replay-calibration`'s decode grid lacks), the error that names it when fp8
prefill rows are missing, and the fit and validate path on synthetic fp8 rows."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

import replay_rows as rr
from attnbench.cli.app import app
from attnbench.config import Settings
from attnbench.measure import metrics
from attnbench.replay.deployment import Deployment
from attnbench.replay.document import ReplayConfig
from attnbench.replay.kernelplan import KernelPlan, family_of
from attnbench.replay.pipeline import ReplayError, calibration_command, run_replay
from attnbench.replay.validate import TRACES, draw_steps, error_stats, measure
from attnbench.results import ResultRow
from attnbench.workload.spec import WorkloadSpec
from attnbench.workload.suite import load_suite, suite_specs

FP8 = "fp8_e4m3"
PREFILL_FACTOR = {"flashinfer:fa2": 1.5, "flash-attn:fa3": 0.8}
"""fp8 prefill against bf16 prefill in the synthetic rows (on the H200 `fp8` suite FlashInfer's
fa2 ran 22-56% slower with fp8 KV, FA3 20% faster): a fit that reused bf16 rows would miss."""


def _specs(name: str) -> list[WorkloadSpec]:
    return suite_specs(load_suite(name), Settings())


def _twin(spec: WorkloadSpec) -> str:
    """The case with its KV dtype left out (a bf16 case and its fp8 twin match)."""
    d = spec.model_dump(mode="json")
    d.pop("kv_dtype")
    return repr(sorted(d.items()))


def _odd_mask_probe(spec: WorkloadSpec) -> bool:
    return spec.kind == "decode" and spec.batch_size > 64 and max(spec.kv_lens) % 2 == 1


def test_fp8_suite_is_the_fp8_rows_the_calibration_suite_lacks() -> None:
    specs = _specs("replay-calibration-fp8")
    assert len(specs) == 34
    assert Counter(s.kind for s in specs) == {"decode": 23, "prefill": 5, "append": 6}
    assert {s.kv_dtype for s in specs} == {FP8}
    assert {(s.num_qo_heads, s.num_kv_heads, s.head_dim, s.dtype, s.page_size) for s in specs} == {
        (8, 1, 128, "bfloat16", 16)
    }
    assert {s.model for s in specs} == {"llama-3.1-70b"}
    calibration = _specs("replay-calibration")
    # nothing measured twice: the grid's fp8 rows are already in the calibration file
    assert not {s.case_id for s in specs} & {s.case_id for s in calibration}
    # with the grid's fp8 cases, every bf16 case of the calibration has its fp8 twin
    fp8 = {_twin(s) for s in specs} | {_twin(s) for s in calibration if s.kv_dtype == FP8}
    bf16 = [s for s in calibration if s.kv_dtype == "bfloat16"]
    # (but the odd-longest cases, which probe SDPA cuDNN's padding mask alone)
    assert all(_twin(s) in fp8 for s in bf16 if not _odd_mask_probe(s))
    assert sum(_odd_mask_probe(s) for s in bf16) == 8
    # an fp8 cache holds twice the tokens: the replays reach 319 requests and a 124k longest
    # among 256 requests, beyond the grid (256 x 64k, 64 x 128k)
    decode = [s for s in specs if s.kind == "decode"]
    assert max(s.batch_size for s in decode) >= 320
    assert (256, 131072) in {(s.batch_size, max(s.kv_lens)) for s in decode}
    assert min(max(s.kv_lens) for s in decode) <= 32


def test_flag_and_suite_agree_on_the_kv_dtype() -> None:
    """`run --suite replay-calibration-fp8 --kv-dtype fp8_e4m3` runs the same cases."""
    from attnbench.cli.run_suite import flags_win

    suite = load_suite("replay-calibration-fp8")
    flagged = suite_specs(flags_win(suite, {"kv_dtype"}), Settings(kv_dtype=FP8))
    assert [s.case_id for s in flagged] == [s.case_id for s in _specs(suite.name)]


def test_calibration_command_names_the_fp8_suite_only_at_its_shape() -> None:
    assert calibration_command(Deployment()) == (
        "`attnbench run --suite replay --model llama-3.1-70b --tp 8`"
    )
    fp8 = calibration_command(Deployment(kv_dtype=FP8))
    assert "`attnbench run --suite replay-calibration-fp8`" in fp8
    assert "`attnbench run --suite replay --model llama-3.1-70b --tp 8 --kv-dtype fp8_e4m3`" in fp8
    other = calibration_command(Deployment(model="llama-3.1-8b", tp=1, kv_dtype=FP8))
    assert other == "`attnbench run --suite replay --model llama-3.1-8b --tp 1 --kv-dtype fp8_e4m3`"
    e5m2 = calibration_command(Deployment(kv_dtype="fp8_e5m2", page_size=32))
    assert "replay-calibration-fp8" not in e5m2
    assert "--kv-dtype fp8_e5m2 --page-size 32`" in e5m2


# -- synthetic rows: rr's coefficients, the fp8 plan (1 byte per KV element) ------------------


def _decode_us(backend: str, kv: list[int]) -> float:
    c = rr.COEFS[backend][0]
    h, d, page = rr.SHAPE["num_kv_heads"], rr.SHAPE["head_dim"], rr.SHAPE["page_size"]
    plan = KernelPlan(family_of(backend), h, page, d, h * d * 2 * 1, kv_dtype=FP8)
    f = plan.features(len(kv), sum(kv), max(kv), kv)
    coef = list(c[2:]) + [0.0] * (len(f) - len(c[2:]))  # features the rows leave at zero
    return c[0] + c[1] * len(kv) + sum(ci * fi for ci, fi in zip(coef, f, strict=True))


def _fp8_rows(kinds: tuple[str, ...]) -> list[ResultRow]:
    out = []
    for b in rr.COEFS:
        specs = [
            WorkloadSpec(kind="decode", kv_lens=tuple(kv), qo_lens=(1,) * len(kv), **rr.SHAPE)
            for kv in rr.decode_batches()
        ] + rr.prefill_specs()
        for bf16 in specs:
            if bf16.kind not in kinds:
                continue
            s = bf16.model_copy(update={"kv_dtype": FP8})
            decode = s.kind == "decode"
            lat = _decode_us(b, list(s.kv_lens)) if decode else _prefill_us(b, s)
            plan = rr.plan_us(b, s.batch_size) if decode else 0.0
            out.append(rr.result_row(b, s, lat, plan))
    return out


def _prefill_us(backend: str, spec: WorkloadSpec) -> float:
    return PREFILL_FACTOR[backend] * rr.prefill_us(backend, spec)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the calibration file: bf16 rows and fp8 decode rows, as results/h200-replay-calibration
    holds; the fp8 suite's file: fp8 prefill and append rows)."""
    folder = tmp_path_factory.mktemp("fp8")
    calibration = folder / "calibration.jsonl"
    rr.write(calibration, rr.rows() + _fp8_rows(("decode",)))
    complement = rr.write(folder / "calibration-fp8.jsonl", _fp8_rows(("prefill", "append")))
    return calibration, complement


def test_fp8_replay_without_fp8_prefill_rows_names_the_fp8_suite(files: tuple[Path, Path]) -> None:
    calibration, _ = files
    cfg = ReplayConfig(trace="azure-code", limit=120, deployment=Deployment(kv_dtype=FP8))
    with pytest.raises(ReplayError) as err:
        run_replay(cfg, [calibration])
    msg = str(err.value)
    assert "no prefill rows of shape q8/kv1/d128 bfloat16 kv=fp8_e4m3 p16" in msg
    assert "`attnbench run --suite replay-calibration-fp8`" in msg
    assert "--kv-dtype fp8_e4m3`" in msg


def test_replay_validate_at_fp8_fails_at_once_naming_the_fp8_suite(
    files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    import attnbench.cli.replay_validate as cli_replay
    import attnbench.replay.live as live

    monkeypatch.setattr(cli_replay, "_check_live_device", lambda device, command="": None)
    monkeypatch.setattr(live, "cuda_device", lambda device, why: SimpleNamespace(name=rr.GPU))
    calibration, _ = files
    res = CliRunner().invoke(
        app,
        [
            "replay-validate", str(calibration), "--kv-dtype", FP8, "--limit", "120",
            "--device", "cuda", "--out", str(tmp_path / "v.json"),
        ],
    )  # fmt: skip
    assert res.exit_code != 0
    assert "replay-calibration-fp8" in res.output
    assert "--kv-dtype fp8_e4m3" in res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "v.json").exists()


@pytest.mark.slow
def test_fp8_models_fit_fp8_rows_and_validate_on_live_steps(files: tuple[Path, Path]) -> None:
    """With both files, the fp8 replay fits decode on the fp8 grid and prefill on the fp8 rows
    (not the bf16 ones, which differ), and a timer that follows the fp8 rows finds no error."""
    dep = Deployment(kv_dtype=FP8)
    sims, models = {}, {}
    for t in TRACES:
        outcome = run_replay(ReplayConfig(trace=t, limit=120, deployment=dep), list(files))
        sims[t] = outcome.study.sims[outcome.study.main]
        models = outcome.study.models
    assert set(models) == set(rr.COEFS)
    for name, m in models.items():
        assert m.key.kv_dtype == FP8
        assert m.prefill is not None
        assert m.decode is not None
        for bf16 in rr.prefill_specs():
            s = bf16.model_copy(update={"kv_dtype": FP8})
            got = m.prefill_us([s.batch_size], [s.total_q], [metrics.attended_pairs(s)])[0]
            assert got == pytest.approx(_prefill_us(name, s), rel=1e-3), (name, s.case_id)
    drawn = draw_steps(sims, dep, 15)
    assert {d.spec.kv_dtype for d in drawn} == {FP8}

    def timer(spec: WorkloadSpec, names: list[str]) -> dict[str, float | None]:
        return {n: _decode_us(n, list(spec.kv_lens)) for n in names}

    stats = error_stats(measure(drawn, models, timer))
    assert set(stats) == set(rr.COEFS)
    for s in stats.values():
        assert s["p90_abs_err"] < 1e-3
        assert s["measured"] == len(drawn)
