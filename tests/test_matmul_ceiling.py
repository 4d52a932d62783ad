"""Each FLOP/s fraction uses its own ceiling (issue 32): a kernel that multiplies in fp8 is a
fraction of the fp8 matmul ceiling, one that dequantises an fp8 cache to 16 bits of the bf16
one; every measured row names the ceiling, and committed rows load with the right fraction."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnbench.backends.base import PlannedRun
from attnbench.measure import metrics
from attnbench.measure.config import MeasureConfig
from attnbench.measure.engine import measure
from attnbench.measure.hardware import Ceilings, detect
from attnbench.results import ResultRow, read_results
from attnbench.run.rows import TimedRun, ok_row
from attnbench.workload.spec import WorkloadSpec

ROOT = Path(__file__).resolve().parent.parent
CEILINGS = Ceilings(4000.0, 4200.0, {"bfloat16": 800.0, "fp8_e4m3": 1400.0})


@pytest.mark.parametrize(
    ("dtype", "precision", "key"),
    [
        ("bfloat16", "", "bfloat16"),
        ("float16", "", "bfloat16"),
        ("bfloat16", "bfloat16", "bfloat16"),
        ("bfloat16", "fp8_e4m3", "fp8_e4m3"),
        ("bfloat16", "fp8_e5m2", "fp8_e4m3"),
    ],
)
def test_the_ceiling_follows_the_multiply_precision(dtype: str, precision: str, key: str) -> None:
    assert metrics.matmul_ceiling_key(metrics.mma_dtype(dtype, precision)) == key
    assert CEILINGS.tflops_for(metrics.mma_dtype(dtype, precision)) == CEILINGS.matmul_tflops[key]


def test_an_unmeasured_fp8_ceiling_is_no_fraction_rather_than_bf16s() -> None:
    assert Ceilings(4000.0, matmul_tflops={"bfloat16": 800.0}).tflops_for("fp8_e4m3") is None


def _row(precision: str, ceilings: Ceilings = CEILINGS) -> tuple[float, float | None, str | None]:
    spec = WorkloadSpec(
        kind="prefill",
        num_qo_heads=4,
        num_kv_heads=2,
        head_dim=16,
        kv_lens=(64,),
        qo_lens=(64,),
        kv_dtype="fp8_e4m3",
    )
    m = measure(lambda: None, MeasureConfig(timer="fake"), device=torch.device("cpu"))
    planned = PlannedRun(run=lambda: torch.empty(0), precision=precision)
    row = ok_row("r", detect("cpu"), ceilings, spec, "b", TimedRun(planned, 0.0, m, {}, None, {}))
    assert row.tflops is not None
    return row.tflops, row.tflops_frac_measured, row.tflops_ceiling


def test_a_row_is_a_fraction_of_its_own_ceiling_and_names_it() -> None:
    tflops, frac, ceiling = _row("fp8_e4m3")  # P in fp8: FA3's fp8 path
    assert (ceiling, frac) == ("fp8_e4m3", pytest.approx(tflops / 1400.0))
    tflops, frac, ceiling = _row("")  # an fp8 cache dequantised to bf16 (FlashInfer fa2)
    assert (ceiling, frac) == ("bfloat16", pytest.approx(tflops / 800.0))
    _, frac, ceiling = _row("fp8_e4m3", Ceilings(4000.0, matmul_tflops={"bfloat16": 800.0}))
    assert (ceiling, frac) == ("fp8_e4m3", None)


def test_committed_fp8_rows_load_as_fractions_of_the_fp8_ceiling() -> None:
    """h200-fp8: FA3's fp8 prefill was written as 107% of the bf16 matmul ceiling; read, it is
    58% of the fp8 GEMM measured in the same run. fa2 on the same fp8 cache stays bf16's."""
    rf = read_results(ROOT / "results" / "h200-fp8.jsonl.gz")  # a resumed run: 8 headers
    measured = [h.ceilings["matmul_tflops"] for h in rf.headers if h.ceilings]
    assert measured

    def ceiling_of(r: ResultRow) -> float:
        assert r.tflops
        assert r.tflops_frac_measured
        return r.tflops / r.tflops_frac_measured

    ok = [r for r in rf.rows if r.status == "ok" and r.tflops is not None]
    fp8 = [r for r in ok if r.accuracy and r.accuracy.precision.startswith("fp8")]
    sixteen = [r for r in ok if r not in fp8]
    assert fp8
    assert sixteen
    for rows, key in ((fp8, "fp8_e4m3"), (sixteen, "bfloat16")):
        for r in rows:
            assert r.tflops_ceiling == key
            assert min(abs(ceiling_of(r) / m[key] - 1) for m in measured) < 1e-9
    prefill = next(
        r for r in fp8 if r.backend == "flash-attn:fa3-contiguous" and r.spec.kind == "prefill"
    )
    assert prefill.tflops is not None
    assert prefill.tflops / max(m["bfloat16"] for m in measured) > 1.0
    assert prefill.tflops_frac_measured == pytest.approx(0.58, abs=0.01)
