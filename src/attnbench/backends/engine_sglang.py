"""SGLang's attention backends on Hopper as attnbench variants (`engine_variant`), and its
own Triton backend (`engine_triton`)."""

from __future__ import annotations

from attnbench.backends.engine_triton import TritonEngineVariant
from attnbench.backends.engine_triton import backends as triton_backends
from attnbench.backends.engine_variant import EngineVariant, engine_backends


def backends() -> list[EngineVariant | TritonEngineVariant]:
    return [*engine_backends("sglang"), *triton_backends("sglang")]
