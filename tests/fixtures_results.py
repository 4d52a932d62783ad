"""Realistic result rows built in the test (never committed as results): a fake H200 run where
each backend follows a simple cost model, so winners, ties and crossovers are known in advance.

    latency_us = overhead_us + bytes / bandwidth + flops / tflops   (x ragged penalty)

- `flashinfer:tc`: low overhead, 2800 GB/s, 380 TFLOP/s, ragged-aware, fp16/bf16/fp8.
- `flash-attn:fa3`: higher overhead, 3300 GB/s, 620 TFLOP/s: loses short decode, wins long
  decode (a context-length crossover between 1k and 4k) and prefill; bf16 only; its fp8 rows
  fail the accuracy gate.
- `sdpa:cudnn`: pads ragged batches to the longest request; no fp8 (unsupported rows).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnbench.measure import metrics
from attnbench.measure.stats import summarize
from attnbench.results import Header, ResultRow, ResultWriter, thin_samples
from attnbench.workload.spec import WorkloadSpec
from attnbench.workload.trees import get_tree

GPU = "NVIDIA H200"
COPY_GBPS = 4240.0
MATMUL = {"bfloat16": 720.0, "fp8_e4m3": 1300.0}


@dataclass(frozen=True)
class CostModel:
    overhead_us: float
    bandwidth_gbps: float
    tflops: float
    pads_ragged: bool = False
    dtypes: tuple[str, ...] = ("float16", "bfloat16")
    fp8: str = "ok"
    """ok, mismatch or unsupported."""
    fp8_efficiency: float = 1.0
    """Bandwidth multiplier on fp8 rows (< 1: the fp8 path is slower per byte)."""


MODELS: dict[str, CostModel] = {
    "flashinfer:tc": CostModel(8.0, 2800.0, 380.0),
    "flash-attn:fa3": CostModel(25.0, 3300.0, 620.0, dtypes=("bfloat16",), fp8="mismatch"),
    "sdpa:cudnn": CostModel(40.0, 2000.0, 560.0, pads_ragged=True, fp8="unsupported"),
}


PAGED = {"kv_cache": "paged"}
"""What today's `flash-attn:fa3` rows record (rows without it are read as the old contiguous
variant, `results.legacy`)."""


def header(run_id: str = "fake-h200", time: str = "2026-09-01T12:00:00+00:00") -> Header:
    return Header(
        run_id=run_id,
        provenance={
            "attnbench": "0.1.0",
            "git_sha": "abc123def456",
            "torch": "2.11.0",
            "cuda": "13.0",
            "gpu": GPU,
            "time": time,
            "libraries": {"flashinfer-python": "0.7.4", "fa3-fwd": "0.0.3"},
        },
        device={"name": GPU, "sm": 90},
        ceilings={
            "copy_bandwidth_gbps": COPY_GBPS,
            "matmul_tflops": dict(MATMUL),
            "method": {"copy": "fake"},
        },
    )


def spec(kind: str, kv_lens: list[int], **kw: Any) -> WorkloadSpec:
    qo = kw.pop("qo_lens", None)
    if qo is None:
        qo = [1] * len(kv_lens) if kind in ("decode", "shared_prefix") else list(kv_lens)
    base: dict[str, Any] = dict(num_qo_heads=32, num_kv_heads=8, head_dim=128, page_size=16)
    base.update(kw)
    return WorkloadSpec(kind=kind, kv_lens=tuple(kv_lens), qo_lens=tuple(qo), **base)


def row(
    s: WorkloadSpec,
    backend: str,
    *,
    scale: float = 1.0,
    noise: float = 0.01,
    seed: int = 0,
    n: int = 64,
    run_id: str = "fake-h200",
    keep_samples: bool = True,
    model: CostModel | None = None,
) -> ResultRow:
    """The row `backend` would produce on `s` under its cost model (or `model`), x `scale`."""
    m = model or MODELS[backend]
    common: dict[str, Any] = dict(
        run_id=run_id,
        case_id=s.case_id,
        backend=backend,
        spec=s.model_dump(mode="json"),
        details=PAGED if backend == "flash-attn:fa3" else {},
    )
    if s.is_fp8 and m.fp8 == "unsupported":
        return ResultRow(status="unsupported", reason="sdpa has no fp8 KV path", **common)
    if s.dtype not in m.dtypes:
        return ResultRow(status="unsupported", reason=f"no {s.dtype} build", **common)
    if s.is_fp8 and m.fp8 == "mismatch":
        acc = {"rel_l2_err": 0.2, "budget": 0.05, "passed": False, "precision": "fp8_e4m3"}
        return ResultRow(
            status="mismatch", reason="rel_l2_err 2.00e-01 exceeds budget", accuracy=acc, **common
        )
    nbytes = metrics.bytes_moved(s)
    nflops = metrics.flops(s)
    moved = nbytes.total
    if m.pads_ragged and len(set(s.kv_lens)) > 1:
        moved = int(moved * max(s.kv_lens) * s.batch_size / s.total_kv)
    bw = m.bandwidth_gbps * (m.fp8_efficiency if s.is_fp8 else 1.0)
    true_us = scale * (m.overhead_us + moved / (bw * 1e3) + nflops / (m.tflops * 1e6))
    rng = np.random.default_rng(zlib.crc32(f"{s.case_id}|{backend}|{seed}".encode()))
    samples = (true_us * np.exp(rng.normal(0.0, noise, n))).tolist()
    stats = summarize(samples)
    lat = stats.median_us
    gbps = metrics.bandwidth_gbps(nbytes.total, lat)
    tf = metrics.tflops_per_s(nflops, lat)
    return ResultRow(
        status="ok",
        resolved=backend.split(":")[-1],
        latency_us=lat,
        latency=stats.as_dict(),
        samples_us=thin_samples(samples) if keep_samples else None,
        plan_us=5.0,
        per_token_ms=metrics.per_token_ms(lat, 5.0, s.num_layers),
        bytes=nbytes.as_dict(),
        flops=nflops,
        bandwidth_gbps=gbps,
        tflops=tf,
        bandwidth_frac_measured=gbps / COPY_GBPS,
        tflops_frac_measured=tf / MATMUL["bfloat16"],
        accuracy={"rel_l2_err": 1e-3, "budget": 4e-3, "passed": True, "precision": s.dtype},
        measurement={"timer": "cuda-graph", "l2_policy": "flush", "repeats": n},
        **common,
    )


def suite_specs() -> list[WorkloadSpec]:
    """Decode (uniform 1k..64k, mixed, equal-total skew + padded twins, bf16/fp16/fp8), prefill,
    tree and shared-prefix cases of the brief's head shape."""
    out: list[WorkloadSpec] = []
    for dtype in ("bfloat16", "float16"):
        for ctx in (1024, 4096, 16384, 65536):
            out.append(spec("decode", [ctx] * 32, dtype=dtype, kv_dtype=dtype, lengths=f"ctx{ctx}"))
    for ctx in (1024, 4096, 16384, 65536):
        out.append(spec("decode", [ctx] * 32, kv_dtype="fp8_e4m3", lengths=f"ctx{ctx}"))
    rng = np.random.default_rng(0)
    mixed = [256, 65536] + [int(x) for x in np.exp(rng.uniform(np.log(256), np.log(65536), 30))]
    out.append(spec("decode", mixed, lengths="mixed(256..65536)"))
    total = 32 * 4096
    skews = {
        "uniform": [4096] * 32,
        "sigma1": [1024] * 16 + [7168] * 16,
        "giant": [total - 31 * 256] + [256] * 31,
    }
    for level, lens in skews.items():
        label = f"skew-{level}({total})"
        out.append(spec("decode", lens, lengths=label))
        if level != "uniform":
            out.append(spec("decode", [max(lens)] * 32, lengths=f"padded({label})"))
    for ctx, bs in ((1024, 16), (4096, 4), (16384, 1)):
        out.append(spec("prefill", [ctx] * bs, lengths=f"ctx{ctx}"))
    tree = get_tree("chain-8")
    for ctx in (1024, 4096):
        out.append(
            spec(
                "tree", [ctx + 8] * 8, qo_lens=[8] * 8, tree=tree, causal=False, lengths=f"ctx{ctx}"
            )
        )
    for prefix in (1024, 4096):
        out.append(
            spec(
                "shared_prefix",
                [prefix + 256] * 16,
                shared_prefix_len=prefix,
                lengths=f"ctx{prefix + 256}",
            )
        )
    return out


def make_rows(specs: list[WorkloadSpec] | None = None, **kw: Any) -> list[ResultRow]:
    return [row(s, b, **kw) for s in (specs or suite_specs()) for b in MODELS]


def decode_specs(
    contexts: tuple[int, ...] = (1024, 4096, 16384, 65536), batch: int = 32, **kw: Any
) -> list[WorkloadSpec]:
    """Uniform decode batches of the brief's shape, one per context length."""
    return [spec("decode", [c] * batch, lengths=f"ctx{c}", **kw) for c in contexts]


def write_results(path: Path, rows: list[ResultRow], hdr: Header | None = None) -> Path:
    with ResultWriter(path) as w:
        w.write(hdr or header())
        for r in rows:
            w.write(r)
    return path
