"""Engine variants: `vllm:flashinfer`, `vllm:flash-attn`, `sglang:flashinfer`, `sglang:fa3`,
and for MLA models `vllm:flash-attn-mla`, `vllm:flashmla`, `vllm:flashinfer-mla`,
`vllm:triton-mla`, `sglang:flashmla` (`engines.mla`; SGLang's fa3 and flashinfer serve both).

Each runs, for a case, the raw attnbench variant and knobs that are the engine's own call on
Hopper (`engines.paths.kernel_path`: the FlashInfer wrapper with the engine's tensor-core rule,
CUDA-graph mode and split settings, or FA3 with the engine's num_splits and scheduler
metadata), and refuses, with the reason, a case the engine would not run through that backend
(a page size it does not use, fp8 e5m2 on FA3, a draft tree vLLM does not verify, a backend
that is not valid on Hopper). A path whose knobs the raw variant does not take is refused too
(it would run another call). The row records the engine path in its details (`engine_path`,
`engine_rule`). The variants take no knobs: the engine fixes them. The raw variants are
unchanged; `flashmla:dense` is looked up lazily (`attnbench.backends.flashmla`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from attnbench.backends.base import Backend, PlannedRun, Unsupported, UnsupportedCase
from attnbench.engines.paths import KernelPath, Setting, kernel_path, setting
from attnbench.measure.hardware import DeviceInfo
from attnbench.workload.inputs import AttentionInputs
from attnbench.workload.spec import WorkloadSpec

__all__ = ["EngineVariant", "engine_backends"]


def raw_backend(name: str) -> Backend:
    """The raw variant `name` (`flashinfer:tc`, `flash-attn:fa3`, `flash-attn:mla`...)."""
    from attnbench.backends import fa3_mla, flash_attn, flashinfer, flashinfer_mla, flashmla

    found: list[object] = [
        *flashinfer.backends(),
        *flash_attn.backends(),
        *flashinfer_mla.backends(),
        *fa3_mla.backends(),
        *flashmla.backends(),
    ]
    for b in found:
        if getattr(b, "name", None) == name:
            return cast(Backend, b)
    raise ValueError(f"no raw variant {name!r}")


class EngineVariant:
    """One engine attention backend as the engine runs it on Hopper."""

    devices: tuple[str, ...] = ("cuda",)

    def __init__(self, variant: str) -> None:
        self.setting: Setting = setting(variant)
        self.name = variant
        self.summary = self.setting.summary
        self.knobs: Mapping[str, tuple[object, ...]] = {}

    def __repr__(self) -> str:
        return f"EngineVariant({self.name!r})"

    def _raw_names(self) -> list[str]:
        return {
            "vllm:flashinfer": ["flashinfer:tc", "flashinfer:auto"],
            "vllm:flash-attn": ["flash-attn:fa3"],
            "sglang:flashinfer": ["flashinfer:tc", "flashinfer:ragged-fa3"],
            "sglang:fa3": ["flash-attn:fa3"],
            "vllm:flash-attn-mla": ["flash-attn:mla"],
            "vllm:flashmla": ["flashmla:dense"],
            "sglang:flashmla": ["flashmla:dense"],
        }.get(self.name, [])

    def available(self) -> str | None:
        """None when the library behind the engine's kernels runs here, else why not."""
        if "unavailable" in self.setting.extra:
            return self.setting.extra["unavailable"]
        for raw in self._raw_names():
            why = raw_backend(raw).available()
            if why is not None:
                return why
        return None

    def describe(self) -> str:
        cites = "; ".join(s.cite() for s in self.setting.sources)
        return f"{self.setting.summary} (from {cites})"

    def path(self, spec: WorkloadSpec) -> KernelPath | str:
        return kernel_path(self.name, spec)

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> Unsupported | None:
        found = self.path(spec)
        if isinstance(found, str):
            return Unsupported(found)
        raw = raw_backend(found.variant)
        refused = raw.check(spec, device)
        if refused is not None:
            return Unsupported(f"{self.name} runs {found.variant}: {refused.reason}")
        fixed = self._fixed_knobs(found, raw)
        return Unsupported(fixed) if fixed else None

    def _fixed_knobs(self, found: KernelPath, raw: Backend) -> str | None:
        """Why the raw variant cannot make the engine's call: knobs it does not take."""
        fixed = sorted(set(found.knobs) - set(raw.knobs))
        if fixed:
            return (
                f"{self.name} runs {found.variant} with {', '.join(fixed)} set by the engine; "
                f"{found.variant} takes no such knob, so it would time another call"
            )
        return None

    def plan(
        self,
        spec: WorkloadSpec,
        inputs: AttentionInputs,
        knobs: Mapping[str, object] | None = None,
    ) -> PlannedRun:
        if knobs:
            raise ValueError(
                f"{self.name} takes no knobs (the engine fixes them: {sorted(knobs)} given); "
                "tune the raw variants instead"
            )
        found = self.path(spec)
        if isinstance(found, str):
            raise UnsupportedCase(f"{self.name} cannot run this case: {found}")
        raw = raw_backend(found.variant)
        fixed = self._fixed_knobs(found, raw)
        if fixed:
            raise UnsupportedCase(fixed)
        planned = raw.plan(spec, inputs, dict(found.knobs))
        planned.details["engine_path"] = found.variant
        planned.details["engine_rule"] = found.why
        return planned


def engine_backends(engine: str) -> list[EngineVariant]:
    from attnbench.backends.engine_triton import KERNEL_FILES
    from attnbench.engines.paths import ALL_SETTINGS

    own = [s for s in ALL_SETTINGS if s.engine == engine and s.variant not in KERNEL_FILES]
    return [EngineVariant(s.variant) for s in own]  # the engines' own kernels: engine_triton
