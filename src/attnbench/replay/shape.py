"""The attention shape a replay deployment needs, as result rows describe it."""

from __future__ import annotations

from dataclasses import dataclass

from attnbench.workload.spec import ITEMSIZE, WorkloadSpec


@dataclass(frozen=True)
class ShapeKey:
    """What a row must match to describe the deployment's attention."""

    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str
    kv_dtype: str
    page_size: int

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token for one layer."""
        return self.num_kv_heads * self.head_dim * 2 * ITEMSIZE[self.kv_dtype]

    @property
    def flops_per_pair(self) -> int:
        return 4 * self.head_dim * self.num_qo_heads

    def matches(self, spec: WorkloadSpec, *, any_page: bool = False) -> bool:
        return (
            spec.num_qo_heads == self.num_qo_heads
            and spec.num_kv_heads == self.num_kv_heads
            and spec.head_dim == self.head_dim
            and spec.dtype == self.dtype
            and spec.kv_dtype == self.kv_dtype
            and (any_page or spec.page_size == self.page_size)
        )

    @classmethod
    def of(cls, spec: WorkloadSpec) -> ShapeKey:
        """The shape `spec` has."""
        return cls(
            spec.num_qo_heads,
            spec.num_kv_heads,
            spec.head_dim,
            spec.dtype,
            spec.kv_dtype,
            spec.page_size,
        )

    def describe(self) -> str:
        return (
            f"q{self.num_qo_heads}/kv{self.num_kv_heads}/d{self.head_dim} {self.dtype} "
            f"kv={self.kv_dtype} p{self.page_size}"
        )
