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
    features: tuple[str, ...] | None = None
    """The attention features rows must have (`WorkloadSpec.features` with the window's size,
    `feature_names`); None: any (a plain GQA deployment, as before layer kinds)."""
    v_head_dim: int = 0
    """MLA: the values' width (kv_lora_rank); 0: head_dim (K and V cached apart)."""

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token for one layer (MLA: the one latent)."""
        if self.v_head_dim:
            return self.num_kv_heads * self.head_dim * ITEMSIZE[self.kv_dtype]
        return self.num_kv_heads * self.head_dim * 2 * ITEMSIZE[self.kv_dtype]

    @property
    def flops_per_pair(self) -> int:
        """`metrics.flops` per attended pair: 2 x (head_dim + v_head_dim) x q heads."""
        return 2 * (self.head_dim + (self.v_head_dim or self.head_dim)) * self.num_qo_heads

    def matches(self, spec: WorkloadSpec, *, any_page: bool = False) -> bool:
        return (
            spec.num_qo_heads == self.num_qo_heads
            and spec.num_kv_heads == self.num_kv_heads
            and spec.head_dim == self.head_dim
            and spec.dtype == self.dtype
            and spec.kv_dtype == self.kv_dtype
            and (any_page or spec.page_size == self.page_size)
            and (self.features is None or feature_names(spec) == self.features)
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
        more = "".join(f" {f}" for f in self.features or ())
        return (
            f"q{self.num_qo_heads}/kv{self.num_kv_heads}/d{self.head_dim} {self.dtype} "
            f"kv={self.kv_dtype} p{self.page_size}{more}"
        )


def feature_names(spec: WorkloadSpec) -> tuple[str, ...]:
    """The features of `spec` that change its cost: mla, win<window_left>, sinks, cap<cap>."""
    out = ["mla"] if spec.mla is not None else []
    if spec.window_left >= 0:
        out.append(f"win{spec.window_left}")
    if spec.sinks:
        out.append("sinks")
    if spec.logits_soft_cap:
        out.append(f"cap{spec.logits_soft_cap:g}")
    return tuple(out)
