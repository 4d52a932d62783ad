"""vLLM's attention backends on Hopper as attnbench variants (`engine_variant`), and its
own Triton backend (`engine_triton`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnbench.backends.engine_triton import backends as triton_backends
from attnbench.backends.engine_variant import EngineVariant, engine_backends

if TYPE_CHECKING:
    from attnbench.backends.engine_triton import EngineTriton


def backends() -> list[EngineVariant | EngineTriton]:
    return [*engine_backends("vllm"), *triton_backends("vllm")]
