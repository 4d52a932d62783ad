"""Plain streaming readers of a large buffer: the read ceiling decode kernels are a fraction of.

A torch fp32 sum is not the fastest reader on an H200: decode kernels stream faster than it
reads. A Triton kernel with one program per 4-16k-element block, loading with `.cg` (bypass
L1), reads faster than any decode row; the read probe (`scripts/h200/read_probe.py`,
`results/h200-read-probe.json`) has the figures per reader and block size, and `docs/findings.md`
quotes them. The ceiling is the fastest of the readers here, each checked to have read every
element.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from attnbench.measure import metrics

if TYPE_CHECKING:
    from attnbench.measure.config import MeasureConfig

BLOCK = 8192
"""fp32 elements per Triton program (32 KiB); 4k-16k read alike in the probe."""
NUM_WARPS = 8


@functools.cache
def one_block_sum_kernel() -> Any:
    """The Triton kernel: program i stores the sum of elements [i * BLOCK, (i + 1) * BLOCK)."""
    import triton  # type: ignore[import-not-found]
    import triton.language as tl  # type: ignore[import-not-found]

    @triton.jit  # type: ignore[untyped-decorator]
    def one_block_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offs, mask=offs < n, other=0.0, cache_modifier=".cg")
        tl.store(out_ptr + pid, tl.sum(v))

    return one_block_sum


def triton_reader(x: torch.Tensor) -> Callable[[], torch.Tensor] | str:
    """A call that reads all of `x` (contiguous fp32 on a GPU) once, one Triton program per
    `BLOCK` elements, and returns the per-block sums; or why there is none here. The caller
    checks the sums (`reads_everything`) before timing it."""
    if x.device.type != "cuda" or x.dtype != torch.float32 or not x.is_contiguous():
        return "the Triton reader takes a contiguous fp32 CUDA tensor"
    try:
        kernel = one_block_sum_kernel()
    except ImportError as exc:
        return f"Triton is not installed ({exc})"
    n = x.numel()
    grid = -(-n // BLOCK)
    out = torch.empty(grid, device=x.device, dtype=torch.float32)

    def run() -> torch.Tensor:
        kernel[(grid,)](x, out, n, BLOCK=BLOCK, num_warps=NUM_WARPS)
        return out

    return run


def reads_everything(partial_sums: torch.Tensor, x: torch.Tensor) -> bool:
    """Whether a reader's output sums to `x`'s sum (fp64), to fp32 accumulation error."""
    want = x.sum(dtype=torch.float64).item()
    got = partial_sums.double().sum().item()
    scale = x.abs().sum(dtype=torch.float64).item()
    return abs(got - want) <= 1e-5 * scale + 1e-6


def measure_read_ceiling(nbytes: int, cfg: MeasureConfig, dev: torch.device) -> tuple[float, str]:
    """The fastest plain reader of an `nbytes` fp32 buffer (a torch sum; on a GPU with Triton
    also the one-program-per-block kernel, once it is checked to read every
    element): bytes read / median time, and which reader set it, with every reader's figure."""
    from attnbench.measure.engine import measure

    x = torch.empty(nbytes // 4, dtype=torch.float32, device=dev).normal_()
    readers: dict[str, Callable[[], object]] = {"torch sum fp32": lambda: x.sum()}
    notes = []
    if dev.type == "cuda":
        reader = triton_reader(x)
        if isinstance(reader, str):
            notes.append(reader)
        elif not reads_everything(reader(), x):
            notes.append("the Triton reader's sums do not match torch's: not used")
        else:
            readers["Triton one program per block"] = reader
    gbps = {}
    for name, fn in readers.items():
        m = measure(fn, cfg, device=dev, graph_safe=False)
        gbps[name] = metrics.bandwidth_gbps(nbytes, m.stats.median_us)
    best = max(gbps, key=lambda k: gbps[k])
    each = ", ".join(f"{k} {v:.0f} GB/s" for k, v in gbps.items())
    note = "".join(f"; {n}" for n in notes)
    return gbps[best], f"{best}: {nbytes >> 20} MiB fp32, bytes read / median ({each}){note}"
