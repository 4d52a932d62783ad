"""A backend variant's identity, parsed once from its name.

A variant is named `<library>:<kernel path>` (`flashinfer:ragged-fa2`, `flash-attn:fa3`,
`sdpa:cudnn`), or by its library alone where the library has one path (`flex`, `reference`);
an engine variant names the engine as its library (`vllm:flash-attn`, `sglang:fa3`); `attnbench
tune`'s rows add `+tuned`. Code that asks what a variant is (its library, whether it reads the
paged cache or a contiguous copy made in plan, whether it is an engine's path or a tuned row)
reads these fields instead of testing the name's text.

The cache layout is that of the KV the timed kernel reads: `paged` (the page table, in place)
or `contiguous` (a contiguous, packed or padded copy the variant builds in plan, untimed): the
`-contiguous` and `-cascade` FA3 variants, `flash-attn:fa2` (varlen on a packed copy),
FlashInfer's `ragged-*` prefill, and the libraries that only read dense tensors (SDPA, Flex,
the fp64 reference).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

CacheLayout = Literal["paged", "contiguous"]
TUNED_SUFFIX = "+tuned"
"""The suffix of the rows `attnbench tune` writes: the variant at its fastest knobs."""
LIBRARIES = ("reference", "sdpa", "flex", "flashinfer", "flash-attn", "cudnn", "flashmla", "faulty")
"""Kernel libraries, and `faulty`: the test-only backends (fault injection, test doubles)."""
ENGINES = ("vllm", "sglang")
"""Serving engines whose attention path is a variant of its own (`backends/engine_*.py`)."""
DENSE_LIBRARIES = frozenset({"reference", "sdpa", "flex"})
"""Libraries that read dense K/V tensors only: their copy of the cache is made in plan."""
BASELINE_SUFFIX = "-contiguous"
CONTIGUOUS_SUFFIXES = (BASELINE_SUFFIX, "-cascade")
PACKED_KERNELS = frozenset({("flash-attn", "fa2")})
"""Kernel paths that read a packed (varlen) copy: FlashAttention-2 has no paged path here."""
RAGGED_PREFIX = "ragged-"


class UnknownVariant(ValueError):
    """A name that is no variant: its library is neither a kernel library nor an engine."""


@dataclass(frozen=True)
class Variant:
    """One backend variant (see the module docstring)."""

    library: str
    """`flashinfer`, `flash-attn`, `sdpa`, ..., or the engine (`vllm`, `sglang`)."""
    kernel: str = ""
    """The path within the library (`fa2`, `ragged-fa3`, `fa3-contiguous`, `cudnn`); empty
    for a library with one path."""
    tuned: bool = False
    """A `+tuned` row: the variant at the knobs `attnbench tune` found fastest."""

    @classmethod
    def parse(cls, name: str) -> Variant:
        """The variant `name` names; UnknownVariant (one line, the allowed libraries) if none."""
        text = name.strip()
        tuned = text.endswith(TUNED_SUFFIX)
        if tuned:
            text = text[: -len(TUNED_SUFFIX)]
        library, _, kernel = text.partition(":")
        if library not in LIBRARIES and library not in ENGINES:
            allowed = ", ".join((*LIBRARIES, *ENGINES))
            raise UnknownVariant(
                f"variant={name!r}: library {library!r} is not known; allowed: {allowed}"
            )
        if not kernel and ":" in text:
            raise UnknownVariant(f"variant={name!r}: empty kernel path after {library!r}:")
        return cls(library, kernel, tuned)

    @classmethod
    def maybe(cls, name: str) -> Variant | None:
        """The variant `name` names, or None (a hybrid, a cost model's label)."""
        try:
            return cls.parse(name)
        except UnknownVariant:
            return None

    @property
    def base(self) -> str:
        """The name without `+tuned`: the variant the sweep runs."""
        return f"{self.library}:{self.kernel}" if self.kernel else self.library

    @property
    def name(self) -> str:
        """The name as rows carry it."""
        return self.base + (TUNED_SUFFIX if self.tuned else "")

    @property
    def engine(self) -> str | None:
        """The serving engine whose attention path this is, or None for a kernel variant."""
        return self.library if self.library in ENGINES else None

    @property
    def ragged(self) -> bool:
        """FlashInfer's ragged prefill (K/V gathered from the pages in plan)."""
        return self.kernel.startswith(RAGGED_PREFIX)

    @property
    def baseline(self) -> bool:
        """A `-contiguous` variant: its paged twin's kernel on a contiguous copy of the cache,
        kept as the baseline the paged path is compared with (no engine runs it)."""
        return self.kernel.endswith(BASELINE_SUFFIX)

    @property
    def cache(self) -> CacheLayout:
        """The layout of the KV the timed kernel reads (see the module docstring)."""
        if (
            self.library in DENSE_LIBRARIES
            or self.ragged
            or self.kernel.endswith(CONTIGUOUS_SUFFIXES)
            or (self.library, self.kernel) in PACKED_KERNELS
        ):
            return "contiguous"
        return "paged"

    def as_tuned(self) -> Variant:
        """This variant's `+tuned` row."""
        return replace(self, tuned=True)

    def __str__(self) -> str:
        return self.name


def tuned_name(name: str) -> str:
    """`name`'s `+tuned` row name. Total, unlike `Variant.parse`: the worker pool's watchdog
    names the row of a job that died with it, whatever backend the job named."""
    return name + TUNED_SUFFIX


def is_tuned(name: str) -> bool:
    """Whether `name` is a variant's `+tuned` row (a name no variant parses is none)."""
    variant = Variant.maybe(name)
    return variant is not None and variant.tuned


def is_engine(name: str) -> bool:
    """Whether `name` is a serving engine's attention path (`vllm:...`, `sglang:...`)."""
    variant = Variant.maybe(name)
    return variant is not None and variant.engine is not None
