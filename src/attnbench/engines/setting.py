"""The types of `engines.paths` and `engines.mla`: an engine's sources, settings, releases and
the kernel path a rule returns, with the constants both modules' rules read. Data only, so the
GQA rules (`paths`) and the MLA rules (`mla`) import it and not each other."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Engine = Literal["vllm", "sglang"]
ENGINES: tuple[Engine, ...] = ("vllm", "sglang")


@dataclass(frozen=True)
class Source:
    repo: str
    commit: str
    path: str

    def cite(self) -> str:
        return f"{self.repo} {self.path} @ {self.commit[:8]}"


VLLM_FI = Source(
    "vllm-project/vllm",
    "00a817ada81626793c9e2432903ee4c5b33ab33a",
    "vllm/v1/attention/backends/flashinfer.py",
)
VLLM_FA = Source(
    "vllm-project/vllm",
    "0084b783bcda6d7ee15c337b1062cbee9985c954",
    "vllm/v1/attention/backends/flash_attn.py",
)
VLLM_GRAPHS = Source(
    "vllm-project/vllm", "002f10e0cfa1373a19a0d2756598a34b700d20e5", "vllm/config/compilation.py"
)
VLLM_TRITON = Source("vllm-project/vllm", "62d4bc3c7", "vllm/v1/attention/backends/triton_attn.py")
"""vLLM 0.34.0's TRITON_ATTN backend (the release's commit)."""
SGLANG_FI = Source(
    "sgl-project/sglang",
    "0005834cdb2a5b7472789ccbf0d3361b5cf853b8",
    "python/sglang/srt/layers/attention/flashinfer_backend.py",
)
SGLANG_FA = Source(
    "sgl-project/sglang",
    "003e7b77aeee2fba80ff241c7f45dcb0e613164d",
    "python/sglang/srt/layers/attention/flashattention_backend.py",
)
SGLANG_ARGS = Source("sgl-project/sglang", "001067ff", "python/sglang/srt/server_args.py")
SGLANG_TRITON = Source(
    "sgl-project/sglang", "v0.5.23", "python/sglang/srt/layers/attention/triton_backend.py"
)
"""SGLang 0.5.23's triton attention backend (the wheel's release tag)."""
SOURCES: tuple[Source, ...] = (VLLM_FI, VLLM_FA, VLLM_GRAPHS, SGLANG_FI, SGLANG_FA, SGLANG_ARGS)

VLLM_MAX_CAPTURE = 512
"""`max_cudagraph_capture_size` default: min(max_num_seqs * 2, 512) (compilation.py)."""
VLLM_CUDA_GRAPH_SPLITS = 16
"""`_DEFAULT_MAX_NUM_SPLITS_FOR_CUDA_GRAPH` (flash_attn.py)."""


@dataclass(frozen=True)
class Setting:
    """One engine attention backend, as a user selects it."""

    engine: Engine
    name: str
    """The engine's backend name (`FLASHINFER`, `FLASH_ATTN`, `flashinfer`, `fa3`)."""
    variant: str
    """The attnbench engine variant that reproduces it (`vllm:flashinfer`, ...)."""
    page_sizes: tuple[int, ...] | None
    """Block/page sizes this backend runs (None: any size the kernel takes)."""
    default_page_size: int
    sources: tuple[Source, ...]
    summary: str
    default: bool = False
    """The engine's own choice on Hopper for a GQA model when no backend is named."""
    kv_dtypes: tuple[str, ...] = ("auto", "fp8_e4m3", "fp8_e5m2")
    extra: Mapping[str, str] = field(default_factory=dict)
    families: tuple[str, ...] = ("gqa",)
    """The attention families it serves: `gqa` (GQA/MHA), `mla` (`engines.mla`)."""
    mla_default: bool = False
    """The engine's own choice on Hopper for an MLA model when no backend is named."""


@dataclass(frozen=True)
class KernelPath:
    """The raw attnbench variant and knobs that are the engine's call for one case."""

    variant: str
    knobs: Mapping[str, object]
    why: str
    """The engine rule that chose it (one line, with the source file)."""


@dataclass(frozen=True)
class Release:
    """One engine release's launch flags and the rules attnbench reproduces that depend on it.

    `flags` are the command-line flags the release's argument parser has, of those attnbench
    prints or names (backend, KV dtype, page size, CUDA-graph sizes, per-phase backends);
    `checked` names the releases whose source the table was read from: a command is stated
    valid for those only."""

    engine: Engine
    version: str
    checked: tuple[str, ...]
    flags: frozenset[str]
    read_from: str
    changes: tuple[str, ...] = ()
    """What changed against the pinned commits (`SOURCES`), one rule a line."""
    fa3_cuda_graph_splits: int | None = None
    """vLLM FLASH_ATTN: FA3's num_splits cap under full CUDA graphs."""
    sinks_backend: str | None = None
    """SGLang: the backend a model with attention sinks gets by default on Hopper."""

    def label(self) -> str:
        return f"{self.engine} {', '.join(self.checked)}"


def vllm_fa3_splits(rel: Release | None = None) -> int:
    """FA3's num_splits cap under full CUDA graphs in vLLM release `rel` (default: the
    pinned commit's, which the committed engine rows reproduce)."""
    cap = rel.fa3_cuda_graph_splits if rel is not None else None
    return VLLM_CUDA_GRAPH_SPLITS if cap is None else cap
