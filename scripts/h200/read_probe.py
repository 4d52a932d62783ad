"""Which plain kernel reads HBM fastest: candidates for the streaming-read ceiling.

Session 10's default suite measured FA3 (contiguous) and SDPA cuDNN decode at bs32 x 64k bf16
streaming 4.47 TB/s, 105% of the run's copy ceiling and above its streaming-read figure (a torch
fp32 sum, 4.28-4.29 TB/s). A ceiling the kernels pass is not a ceiling. This probe times other
readers over the same bytes with attnbench's engine (CUDA events, median) and prints GB/s per
reader and size, to choose the read ceiling from data:

    source .device/setup.sh; python3 scripts/h200/read_probe.py --out $OUT/h200-read-probe.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from attnbench.measure.config import MeasureConfig
from attnbench.measure.engine import measure
from attnbench.measure.metrics import bandwidth_gbps
from attnbench.measure.stream_read import one_block_sum_kernel
from attnbench.results.provenance import provenance


def triton_readers(x: torch.Tensor, num_sms: int) -> dict[str, Callable[[], object]]:
    """A Triton sum over `x` (fp32): persistent grids of k x SMs programs and one program per
    block, at a few block sizes and warp counts."""
    import triton  # type: ignore[import-not-found]
    import triton.language as tl  # type: ignore[import-not-found]

    @triton.jit  # type: ignore[untyped-decorator]
    def persistent(x_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        pid = tl.program_id(0)
        step = tl.num_programs(0) * BLOCK
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(pid * BLOCK, n, step):
            offs = start + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0, cache_modifier=".cg")
        tl.store(out_ptr + pid, tl.sum(acc))

    one_block = one_block_sum_kernel()  # the reader the read ceiling uses (stream_read.py)
    n = x.numel()
    out = torch.empty(n // 1024 + num_sms * 16, device=x.device, dtype=torch.float32)

    def launch(kernel: Any, grid: int, block: int, warps: int) -> Callable[[], object]:
        return lambda: kernel[(grid,)](x, out, n, BLOCK=block, num_warps=warps)

    readers: dict[str, Callable[[], object]] = {}
    for block, warps in ((4096, 8), (8192, 8), (8192, 16), (16384, 16)):
        for k in (2, 4, 8):
            name = f"triton persistent {k}xSM block {block} warps {warps}"
            readers[name] = launch(persistent, num_sms * k, block, warps)
        name = f"triton one block per program {block} warps {warps}"
        readers[name] = launch(one_block, triton.cdiv(n, block), block, warps)
    return readers


def probe(gib: float, num_sms: int, cfg: MeasureConfig) -> list[dict[str, object]]:
    """Every reader over a `gib` GiB fp32 buffer: GB/s (bytes read, or read + written for
    the copy) at the median, or the error that stopped it."""
    dev = torch.device("cuda")
    nbytes = int(gib * (1 << 30))
    x = torch.empty(nbytes // 4, dtype=torch.float32, device=dev).normal_()
    xb = x.view(torch.bfloat16)
    dst = torch.empty_like(x)
    readers: dict[str, Callable[[], object]] = {
        "torch copy_ (read + write bytes)": lambda: dst.copy_(x),
        "torch sum fp32": lambda: x.sum(),
        "torch sum bf16 (fp32 accumulate)": lambda: xb.sum(dtype=torch.float32),
        "torch amax fp32": lambda: x.amax(),
    }
    rows: list[dict[str, object]] = []
    try:
        readers |= triton_readers(x, num_sms)
    except Exception as exc:  # no triton here
        rows.append({"gib": gib, "reader": "triton", "error": f"{type(exc).__name__}: {exc}"})
    for name, fn in readers.items():
        try:
            m = measure(fn, cfg, device=dev, graph_safe=False)
        except Exception as exc:  # a kernel that does not compile or launch here
            rows.append({"gib": gib, "reader": name, "error": f"{type(exc).__name__}: {exc}"})
            continue
        moved = 2 * nbytes if name.startswith("torch copy_") else nbytes
        gbps = bandwidth_gbps(moved, m.stats.median_us)
        rows.append({"gib": gib, "reader": name, "median_us": m.stats.median_us,
                     "gbps": gbps, "repeats": m.stats.n})  # fmt: skip
        print(f"{gib:4.1f} GiB  {gbps:7.0f} GB/s  {name}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--gib", default="1,4", help="buffer sizes in GiB, comma-separated")
    args = ap.parse_args()
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    cfg = MeasureConfig(timer="cuda-event", cold_l2=False, min_runs=10, max_runs=100)
    rows = [r for g in args.gib.split(",") for r in probe(float(g), num_sms, cfg)]
    doc = {"provenance": provenance(), "num_sms": num_sms, "rows": rows}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
