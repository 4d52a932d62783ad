"""Result rows built in the test for the replay (never committed as results): each backend's
latency follows the replay cost model with known coefficients, so a fit must recover them.

    decode  us = c0 + c1 * seqs + c2 * kv_mb + c3 * crit_mb + c4 * splits + c5 * chain
                 + c6 * ragged + c7 * odd + c8 * odd_row_mb + c9 * odd_pad_mb
                 + c10 * combine
            (the split-KV features of the backend's plan, `replay.kernelplan`, no tail term:
            streams = inf)
    prefill us = c0 + c1 * seqs + c2 * q_ktokens + c3 * gflop
    plan    us = p0 + p1 * seqs
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnbench.measure import metrics
from attnbench.replay.kernelplan import KernelPlan, family_of
from attnbench.results import Header, ResultRow, ResultWriter
from attnbench.workload.spec import WorkloadSpec

GPU = "NVIDIA H200"
COPY_GBPS = 4200.0
MATMUL_TFLOPS = 700.0
SHAPE = dict(num_qo_heads=8, num_kv_heads=1, head_dim=128, page_size=16, dtype="bfloat16")
"""Llama-3.1-70B at TP 8 on one GPU."""

# backend -> (decode coefs, prefill coefs, plan coefs)
COEFS: dict[str, tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]] = {
    # ragged-aware: ~3 TB/s, small skew term
    "flashinfer:fa2": (
        (6.0, 0.05, 1e3 / 3000.0, 0.5, 0.01, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0),
        (10.0, 0.5, 0.3, 1e3 / 350.0),
        (15.0, 0.2),
    ),
    # faster per byte but a large per-CTA (longest work unit) term
    "flash-attn:fa3": (
        (4.0, 0.02, 1e3 / 3300.0, 30.0, 0.02, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0),
        (12.0, 0.5, 0.2, 1e3 / 600.0),
        (0.0, 0.0),
    ),
}


def header(run_id: str = "replay-fake", gpu: str = GPU) -> Header:
    return Header(
        run_id=run_id,
        provenance={"attnbench": "0.1.0", "gpu": gpu, "time": "2026-09-01T00:00:00+00:00"},
        device={"name": gpu, "kind": "cuda", "sm": 90},
        ceilings={
            "copy_bandwidth_gbps": COPY_GBPS,
            "matmul_tflops": {"bfloat16": MATMUL_TFLOPS},
        },
    )


PADDED = "sdpa:cudnn"
PADDED_DECODE = (5.0, 0.02, 1e3 / 4000.0, 1.5, 0.05, 0.02, 7.0, 2.0, 30.0, 0.1, 0.0)
"""A padded kernel's decode coefs: its mask (`ragged`), odd-length mask (`odd`) and unsplit
odd batches (`odd_row_mb`, `odd_pad_mb`)."""


def decode_us(backend: str, kv: list[int], coefs: tuple[float, ...] | None = None) -> float:
    c = COEFS[backend][0] if coefs is None else coefs
    h, d, page = SHAPE["num_kv_heads"], SHAPE["head_dim"], SHAPE["page_size"]
    plan = KernelPlan(family_of(backend), h, page, d, h * d * 2 * 2)
    f = plan.features(len(kv), sum(kv), max(kv), kv)
    return c[0] + c[1] * len(kv) + sum(ci * fi for ci, fi in zip(c[2:], f, strict=True))


def prefill_us(backend: str, spec: WorkloadSpec) -> float:
    c = COEFS[backend][1]
    gflop = metrics.flops(spec) / 1e9
    return c[0] + c[1] * spec.batch_size + c[2] * spec.total_q / 1e3 + c[3] * gflop


def plan_us(backend: str, n: int) -> float:
    p = COEFS[backend][2]
    return p[0] + p[1] * n


def decode_batches(seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    out: list[list[int]] = []
    for n in (1, 4, 16, 64, 256):
        for hi in (1024, 16384, 65536):
            out.append([hi] * n)
            out.append([int(v) for v in rng.integers(64, hi + 1, size=n)])
    return out


def padded_decode_rows(odd_reach: int = 256) -> list[ResultRow]:
    """`PADDED` decode rows following `PADDED_DECODE`: uniform batches (no mask), masked ones whose
    longest is even, and masked ones whose longest is odd, the last only up to `odd_reach`
    requests."""
    rng = np.random.default_rng(1)
    out = []
    for n in (1, 2, 4, 8, 16, 64, 128, 256):
        for hi in (2048, 16384, 65536):
            batches = [[hi] * n]
            if n > 1:
                rest = [int(v) for v in rng.integers(64, hi // 2, size=n - 1)]
                batches.append([hi, *rest])
                if n <= odd_reach:
                    batches.append([hi - 1, *rest])
            for kv in batches:
                spec = WorkloadSpec(kind="decode", kv_lens=tuple(kv), qo_lens=(1,) * n, **SHAPE)
                lat = decode_us(PADDED, kv, PADDED_DECODE)
                out.append(result_row(PADDED, spec, lat, 0.0))
    return out


def result_row(backend: str, spec: WorkloadSpec, lat: float, plan: float) -> ResultRow:
    """An ok row of `backend` on `spec`, as the sweep writes it (FA3's paged marker too)."""
    return ResultRow(
        run_id="replay-fake",
        case_id=spec.case_id,
        backend=backend,
        status="ok",
        spec=spec.model_dump(mode="json"),
        latency_us=lat,
        plan_us=plan,
        details={"kv_cache": "paged"} if backend == "flash-attn:fa3" else {},
    )


def prefill_specs() -> list[WorkloadSpec]:
    out = []
    for lens in ([512], [2048], [8192], [1024] * 4, [4096, 512], [16384], [256] * 16):
        out.append(WorkloadSpec(kind="prefill", kv_lens=tuple(lens), qo_lens=tuple(lens), **SHAPE))
    for q, kv in ((512, 8192), (2048, 32768), (8192, 65536)):
        out.append(WorkloadSpec(kind="append", kv_lens=(kv,), qo_lens=(q,), **SHAPE))
    return out


def rows(
    backends: tuple[str, ...] = tuple(COEFS), noise: float = 0.0, seed: int = 0
) -> list[ResultRow]:
    """ok rows of every backend (multiplicative noise `noise` when > 0)."""
    rng = np.random.default_rng(seed)
    out = []
    for b in backends:
        specs = [
            WorkloadSpec(kind="decode", kv_lens=tuple(kv), qo_lens=(1,) * len(kv), **SHAPE)
            for kv in decode_batches(seed)
        ] + prefill_specs()
        for s in specs:
            lat = decode_us(b, list(s.kv_lens)) if s.kind == "decode" else prefill_us(b, s)
            if noise:
                lat *= float(np.exp(rng.normal(0, noise)))
            plan = plan_us(b, s.batch_size) if s.kind == "decode" else 0.0
            out.append(result_row(b, s, lat, plan))
    return out


def write(path: Path, result_rows: list[ResultRow] | None = None, gpu: str = GPU) -> Path:
    with ResultWriter(path) as w:
        w.write(header(gpu=gpu))
        for r in result_rows if result_rows is not None else rows():
            w.write(r)
    return path
