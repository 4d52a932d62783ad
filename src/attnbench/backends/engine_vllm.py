"""vLLM's attention backends on Hopper as attnbench variants (`engine_variant`)."""

from __future__ import annotations

from attnbench.backends.engine_variant import EngineVariant, engine_backends


def backends() -> list[EngineVariant]:
    return engine_backends("vllm")
