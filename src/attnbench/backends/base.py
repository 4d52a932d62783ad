"""The backend contract: `check` says whether a case can run (a reason, never an exception),
`plan` prepares it (may allocate, sync, build metadata; timed on the host as `plan_us`) and
returns a `PlannedRun` whose `run` is zero-argument, allocation-free and CUDA-graph capturable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    from attnbench.measure.hardware import DeviceInfo
    from attnbench.workload.inputs import AttentionInputs
    from attnbench.workload.spec import WorkloadSpec


MISSING_LIBRARY = ("not installed", "not importable", "not usable")
"""Words of an `available()` reason that says the library was absent where a row ran (a
device pack without it), as opposed to a refusal by the library's own rules."""


def says_missing_library(reason: str) -> bool:
    return any(w in reason for w in MISSING_LIBRARY)


@dataclass(frozen=True)
class Unsupported:
    """Why a backend cannot run a case: a value, recorded as an `unsupported` row."""

    reason: str


class UnsupportedCase(Exception):
    """Raised by `plan` when the library itself refuses the case (e.g. torch finds no SDPA
    kernel for these inputs): recorded as an `unsupported` row with the message, not an error.
    Prefer returning an `Unsupported` from `check` when the reason is known beforehand."""


class BackendUnavailable(Exception):
    """The backend's library is missing or cannot load here (not a failure of a case)."""


def _identity(out: torch.Tensor) -> torch.Tensor:
    return out


@dataclass
class PlannedRun:
    """What `Backend.plan` returns.

    `run()` launches the kernel(s) and returns the output in the backend's native layout;
    `unpack(out)` turns it into `[total_q, num_qo_heads, head_dim]` for the accuracy gate (it may
    allocate: it is never timed).
    """

    run: Callable[[], torch.Tensor]
    resolved: str = ""
    """The variant that actually ran, e.g. FlashInfer's `resolved_backend` (`fa2`, `fa3`)."""
    details: dict[str, str | int | float | bool] = field(default_factory=dict)
    """Knobs and facts worth keeping in the row (padded, contiguous-cache, num_splits...)."""
    unpack: Callable[[torch.Tensor], torch.Tensor] = _identity
    out: torch.Tensor | None = None
    """The output buffer `run` writes, if fixed: poisoned with NaN before the accuracy check."""
    q_effective: torch.Tensor | None = None
    """The query values the kernel really saw, if it quantised them (FA3 fp8 needs fp8 q):
    the reference then uses these, so the gate measures kernel error, not quantisation error."""
    precision: str = ""
    """Lowest precision on the output path (e.g. `fp8_e4m3` when P is fp8); sets the error
    budget. Empty: the output dtype."""
    extra_bytes: int = 0
    """Bytes the kernel moves beyond the spec's minimum (padding, a contiguous copy...)."""
    workspace_bytes: int = 0
    graph_safe: bool = True
    """False when `run` cannot be captured in a CUDA graph (then it is timed eagerly)."""
    plan_mode: str = "eager"
    """How the library planned the call: `cuda-graph` where the plan is built for capture
    (FlashInfer's wrappers with `use_cuda_graph=True`: fixed index buffers and a split-KV
    choice that one captured graph can replay for every step, which changes the split and so
    the time), else `eager` (planned for eager launches, or a plan that does not depend on
    graphs)."""
    replan: Callable[[], None] | None = None
    """The per-step planning work (e.g. `wrapper.plan(...)`), re-run to time `plan_us`: in
    serving it runs once per decode step and is shared by all layers. None: no per-step plan."""


@runtime_checkable
class Backend(Protocol):
    """One backend variant, e.g. `flashinfer:tc` or `sdpa:cudnn`."""

    name: str
    devices: tuple[str, ...]
    """Device types it runs on: ("cuda",) or ("cpu", "cuda")."""
    knobs: Mapping[str, tuple[object, ...]]
    """Tunable settings and their legal values, the default first (e.g. `num_splits`:
    (0, 1, 2, 4, 8)). `attnbench tune` searches them; `plan` records the ones it used in
    `PlannedRun.details`."""

    def available(self) -> str | None:
        """None if the library loads here, else why not (with the install hint)."""
        ...

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> Unsupported | None: ...

    def plan(
        self,
        spec: WorkloadSpec,
        inputs: AttentionInputs,
        knobs: Mapping[str, object] | None = None,
    ) -> PlannedRun:
        """Prepare the case; `knobs` overrides defaults (values from `self.knobs`)."""
        ...
