"""Cold-cache timing: evict the GPU's L2 before each timed call.

A memset of a buffer twice the L2 size (read off the device, not hard-coded: the H200 reports
60 MiB) leaves none of the kernel's inputs in L2, so a decode over a KV cache smaller than L2
is not flattered (triton's do_bench and FlashInfer's bench_gpu_time do the same).
"""

from __future__ import annotations

import torch


class L2Flusher:
    """`flush()` overwrites `2 * l2_bytes` of device memory; a no-op on CPU."""

    def __init__(self, device: torch.device, l2_bytes: int) -> None:
        self.device = device
        self.nbytes = 2 * l2_bytes if device.type == "cuda" else 0
        self._buffer = (
            torch.empty(self.nbytes, dtype=torch.uint8, device=device) if self.nbytes else None
        )

    @property
    def policy(self) -> str:
        return f"cold (flush {self.nbytes >> 20} MiB)" if self._buffer is not None else "none"

    def flush(self) -> None:
        if self._buffer is not None:
            self._buffer.zero_()
