"""The settings of one fp8 study run: sizes and axes of its three parts and the summary's
bounds (`StudyConfig`), apart from the package face so every part can import it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from attnbench.workload.quant import SCHEMES, Scheme

DEPTHS_11 = tuple(i / 10 for i in range(11))


@dataclass(frozen=True)
class StudyConfig:
    """Sizes and axes of one study run. `small()` runs in seconds on a CPU; `full()` is the
    H200 study (contexts up to 64k)."""

    device: str = "cpu"
    seed: int = 0
    formats: tuple[str, ...] = ("e4m3", "e5m2")
    schemes: tuple[Scheme, ...] = SCHEMES
    # error study
    data_kinds: tuple[str, ...] = ("random", "outlier_channels", "fa3_outliers", "small")
    num_tokens: int = 512
    num_queries: int = 8
    num_qo_heads: int = 32
    num_kv_heads: int = 8
    head_dim: int = 128
    calibration_tokens: int | None = None
    """Tokens of the held-out calibration sample of static schemes; None: num_tokens."""
    # needle study
    needle_data: tuple[str, ...] = ("random", "outlier_channels")
    needle_lengths: tuple[int, ...] = (256, 1024)
    needle_depths: tuple[float, ...] = DEPTHS_11
    needle_targets: tuple[str, ...] = ("max+0.1", "max+1", "lse+0")
    needle_heads: int = 4
    needle_trials: int = 2
    # kernel study (CUDA + FlashInfer and/or FA3)
    kernel: bool = True
    kernel_shapes: tuple[tuple[str, int, str], ...] = (
        ("ctx1024", 8, "1024"),
        ("mixed", 8, "mixed:256-16384"),
    )
    """(label, batch_size, lengths) of the decode batches the kernel runs."""
    kernel_page_size: int = 16
    # summary bounds
    recall_bound: float = 0.99
    rel_l2_bound: float = 0.05

    @classmethod
    def small(cls, device: str = "cpu", seed: int = 0) -> StudyConfig:
        return cls(device=device, seed=seed)

    @classmethod
    def full(cls, device: str = "cuda", seed: int = 0) -> StudyConfig:
        return cls(
            device=device,
            seed=seed,
            num_tokens=16384,
            num_queries=32,
            needle_lengths=(1024, 4096, 16384, 65536),
            needle_targets=("max+0.1", "max+0.3", "max+1", "lse+0"),
            needle_heads=8,
            needle_trials=8,
            kernel_shapes=(
                ("ctx1024", 32, "1024"),
                ("ctx16384", 8, "16384"),
                ("mixed", 16, "mixed"),
            ),
        )

    def with_overrides(self, **changes: Any) -> StudyConfig:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})
