"""Fidelity and tuning documents built in the test, in the shapes `attnbench fidelity --out`
and `attnbench tune --out` write (never committed as results)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from attnbench.results import ResultRow
from fixtures_results import GPU, CostModel, header, row, spec, write_results

PROVENANCE = {"attnbench": "0.1.0", "git_sha": "abc123def456", "gpu": GPU, "torch": "2.11.0"}


def clocks(throttled: int = 0, samples: int = 40) -> dict[str, Any]:
    return {
        "source": "nvml",
        "sm_mhz_min": 1755 if throttled else 1980,
        "sm_mhz_median": 1980,
        "sm_mhz_max": 1980,
        "max_sm_mhz": 1980,
        "throttled_samples": throttled,
        "samples": samples,
        "slowdowns": ["sw_power_cap"] if throttled else [],
    }


def case(
    name: str,
    backend: str,
    engine_us: float,
    profiler_us: float,
    ncu_us: float | None,
    *,
    sm_active: float = 90.0,
    occupancy: float = 40.0,
    throttled: int = 0,
    total_kv: int = 524288,
) -> dict[str, Any]:
    """One case as `run.fidelity.check_case` + `ncu_case` write it."""
    out: dict[str, Any] = {
        "case": name,
        "backend": backend,
        "resolved": backend.split(":")[-1],
        "status": "ok",
        "timer": "cuda-graph",
        "engine_us": engine_us,
        "engine_repeat_us": engine_us * 1.004,
        "repeat_diff": 0.004,
        "profiler_kernel_us": profiler_us,
        "profiler_diff": (engine_us - profiler_us) / profiler_us,
        "total_kv_tokens": total_kv,
        "clocks": clocks(throttled),
    }
    if ncu_us is not None:
        out["ncu"] = {
            "status": "ok",
            "kernels_per_call": 1.0,
            "kernel_names": ["kernel"],
            "gpu_time_us": ncu_us,
            "dram_read_bytes": 1e9,
            "dram_throughput_pct": 80.0,
            "achieved_occupancy_pct": occupancy,
            "sm_active_pct": sm_active,
            "waves_per_sm": 1.5,
        }
        out["ncu_diff"] = (engine_us - ncu_us) / ncu_us
    else:
        out["ncu"] = {"status": "unsupported", "reason": "ncu not found"}
    return out


def fidelity_doc() -> dict[str, Any]:
    """Two long kernels that agree, a long prefill 5% off ncu (throttled), a short kernel 10%
    off (under 10 us: no verdict) and a case that failed."""
    return {
        "provenance": PROVENANCE,
        "cases": [
            case("decode-32x16k", "flashinfer:tc", 500.0, 495.0, 498.0),
            case("decode-32x16k", "flash-attn:fa3", 505.0, 500.0, 502.0),
            case("prefill-4x16k", "flash-attn:fa3", 1050.0, 1040.0, 1000.0, throttled=6),
            case("decode-1x1k", "flashinfer:fa2", 8.8, 8.0, 8.0),
            {
                "case": "decode-mixed",
                "backend": "flashinfer:fa2",
                "status": "error",
                "reason": "RuntimeError: fails the accuracy gate",
            },
        ],
    }


SM = {  # backend -> SM active % on (uniform, mixed, 4-long)
    "flashinfer:fa2": (96.0, 40.0, 30.0),  # the claim holds (70% idle on 4-long)
    "flashinfer:tc": (97.0, 80.0, 75.0),  # partly: 25% idle, 22 points over uniform
    "flash-attn:fa3": (98.0, 97.0, 95.0),  # does not hold
}


def sm_doc() -> dict[str, Any]:
    cases = []
    for backend, actives in SM.items():
        for batch, active in zip(("uniform", "mixed", "4-long"), actives, strict=True):
            cases.append(case(f"sm-{batch}", backend, 480.0, 478.0, 479.0, sm_active=active))
    return {"provenance": PROVENANCE, "cases": cases}


def write_doc(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return path


def _fixed(us: float) -> CostModel:
    """A cost model whose latency is `us` whatever the case."""
    return CostModel(us, 1e15, 1e15)


def tuned_rows() -> tuple[list[ResultRow], list[ResultRow]]:
    """(tuned rows, trials): flashinfer:tc twice as fast tuned, flash-attn:fa3 a tie, and
    flashinfer:fa2 whose default knobs stayed the fastest."""
    s = spec("decode", [16384] * 32, lengths="ctx16384")
    tuned, trials = [], []
    for variant, default_us, tuned_us, knobs in (
        ("flashinfer:tc", 980.0, 490.0, "fixed_split_size=256"),
        ("flash-attn:fa3", 500.0, 499.0, "pack_gqa=False"),
        ("flashinfer:fa2", 776.0, 776.0, "default"),
    ):
        base = row(s, variant, model=_fixed(default_us), seed=1)
        final = {"kv_cache": "paged", "tune": {"stage": "final", "role": "default"}}
        base = base.model_copy(update={"details": final})
        trials.append(base)
        best = row(s, variant, model=_fixed(tuned_us), seed=2)
        details = {
            "kv_cache": "paged",
            "knobs_label": knobs,
            "default_latency_us": base.latency_us,
            "speedup_vs_default": (base.latency_us or 0) / (best.latency_us or 1),
            "tune": {"method": "halving", "configs": 16, "trials": 29, "stages": 4},
        }
        best = best.model_copy(update={"backend": variant + "+tuned", "details": details})
        tuned.append(best)
    return tuned, trials


def write_tune(folder: Path, gz: bool = True) -> tuple[Path, Path]:
    """`<folder>/tune.jsonl` and its trials file (`tune.trials.jsonl[.gz]`)."""
    tuned, trials = tuned_rows()
    out = write_results(folder / "tune.jsonl", tuned, header("tune"))
    plain = write_results(folder / "tune.trials.jsonl", trials, header("tune"))
    if not gz:
        return out, plain
    packed = folder / "tune.trials.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    return out, packed
