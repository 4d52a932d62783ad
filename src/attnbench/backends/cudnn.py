"""cuDNN attention through the cuDNN frontend (`import cudnn`): reported, not re-implemented.

Every cuDNN attention case attnbench serves is already measured through an integration that
owns the graph building and is tested by its authors:

- paged decode and paged prefill/append on the FlashInfer cache layout: FlashInfer's
  cuDNN-frontend path (`cudnn_batch_decode_with_kv_cache`, `cudnn_batch_prefill_with_kv_cache`,
  the wrappers' `backend="cudnn"`), i.e. the `flashinfer:cudnn` variant;
- dense/padded attention: torch SDPA's cuDNN kernel, the `sdpa:cudnn` variant.

A third, hand-built cuDNN graph (paged SDPA with ragged offsets, fp8 scales) would duplicate
those cases and could not be verified without a GPU, so this module only reports whether the
frontend loads and which variants carry cuDNN. `check` always answers with that reason.
"""

from __future__ import annotations

from collections.abc import Mapping

from attnbench.backends.base import PlannedRun, Unsupported, UnsupportedCase
from attnbench.measure.hardware import DeviceInfo
from attnbench.workload.inputs import AttentionInputs
from attnbench.workload.spec import WorkloadSpec

INSTALL_HINT = "pip install nvidia-cudnn-frontend"
COVERED_BY = (
    "cuDNN attention is measured through flashinfer:cudnn (FlashInfer's cuDNN-frontend paged "
    "decode/prefill) and sdpa:cudnn (torch's cuDNN SDPA kernel); a separate cuDNN graph "
    "would duplicate those cases"
)


def frontend_versions() -> tuple[str, int] | str:
    """(frontend version, cuDNN backend version) if `cudnn` loads, else why not."""
    try:
        import cudnn
    except ImportError:
        return f"cuDNN frontend not installed: {INSTALL_HINT}"
    except Exception as exc:  # a frontend that cannot find libcudnn
        return f"cuDNN frontend does not load: {type(exc).__name__}: {exc}"[:300]
    try:
        backend = int(cudnn.backend_version())
    except Exception:
        backend = 0
    return str(getattr(cudnn, "__version__", "")), backend


class CudnnFrontendBackend:
    name = "cudnn:frontend"
    devices = ("cuda",)
    hidden = True
    """Left out of `all`: it only ever answers `unsupported` (see the module docstring)."""
    knobs: Mapping[str, tuple[object, ...]] = {}

    def available(self) -> str | None:
        found = frontend_versions()
        return found if isinstance(found, str) else None

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> Unsupported | None:
        found = frontend_versions()
        if isinstance(found, str):
            return Unsupported(found)
        version, backend = found
        return Unsupported(f"{COVERED_BY} (frontend {version}, cuDNN {backend})")

    def plan(
        self,
        spec: WorkloadSpec,
        inputs: AttentionInputs,
        knobs: Mapping[str, object] | None = None,
    ) -> PlannedRun:
        raise UnsupportedCase(COVERED_BY)  # check() always says so first


def backends() -> list[CudnnFrontendBackend]:
    return [CudnnFrontendBackend()]
