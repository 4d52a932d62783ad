"""The typed variant: every registered name parses once into its parts and back."""

from __future__ import annotations

import pytest

from attnbench.backends import all_backends
from attnbench.backends.variant import UnknownVariant, Variant, tuned_name


def test_every_registered_variant_parses_and_round_trips() -> None:
    for backend in all_backends():
        variant = Variant.parse(backend.name)
        assert variant.name == backend.name
        assert not variant.tuned
        assert Variant.parse(tuned_name(backend.name)) == variant.as_tuned()


@pytest.mark.parametrize(
    ("name", "library", "kernel", "cache", "engine"),
    [
        ("flash-attn:fa3", "flash-attn", "fa3", "paged", None),
        ("flash-attn:fa3-contiguous", "flash-attn", "fa3-contiguous", "contiguous", None),
        ("flash-attn:fa3-cascade", "flash-attn", "fa3-cascade", "contiguous", None),
        ("flash-attn:fa2", "flash-attn", "fa2", "contiguous", None),
        ("flashinfer:fa2", "flashinfer", "fa2", "paged", None),
        ("flashinfer:ragged-fa3", "flashinfer", "ragged-fa3", "contiguous", None),
        ("sdpa:cudnn", "sdpa", "cudnn", "contiguous", None),
        ("flex", "flex", "", "contiguous", None),
        ("vllm:flash-attn", "vllm", "flash-attn", "paged", "vllm"),
        ("sglang:flashinfer", "sglang", "flashinfer", "paged", "sglang"),
    ],
)
def test_variant_fields(
    name: str, library: str, kernel: str, cache: str, engine: str | None
) -> None:
    v = Variant.parse(name)
    assert (v.library, v.kernel, v.cache, v.engine) == (library, kernel, cache, engine)
    assert v.ragged == kernel.startswith("ragged-")


def test_tuned_suffix_is_a_field() -> None:
    v = Variant.parse("flashinfer:tc+tuned")
    assert v.tuned
    assert v.base == "flashinfer:tc"
    assert v.name == "flashinfer:tc+tuned"
    assert str(v) == "flashinfer:tc+tuned"


def test_the_fa3_cache_layouts_match_what_the_backends_build() -> None:
    """The layout parsed from the name is the one `flash_attn` builds the variant with."""
    from attnbench.backends.flash_attn import backends

    for b in backends():
        built = "paged" if b.layout == "paged" else "contiguous"
        assert Variant.parse(b.name).cache == built, b.name


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("hybrid(prefill a, decode b)", "library 'hybrid(prefill a, decode b)' is not known"),
        ("flashinfr:fa2", "library 'flashinfr' is not known; allowed: reference, sdpa"),
        ("flashinfer:", "empty kernel path after 'flashinfer':"),
    ],
)
def test_unknown_names_are_refused_in_one_line(name: str, message: str) -> None:
    with pytest.raises(UnknownVariant, match="variant=") as info:
        Variant.parse(name)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert Variant.maybe(name) is None


def test_tuned_rows_and_baselines_are_read_from_the_variant() -> None:
    """`+tuned` rows and `-contiguous` baselines are fields of the parsed name, not text."""
    from attnbench.backends.variant import is_tuned

    assert is_tuned("flashinfer:tc+tuned")
    assert is_tuned("flex+tuned")
    assert not is_tuned("flashinfer:tc")
    assert not is_tuned("hybrid+tuned")
    assert Variant.parse("flash-attn:fa3-contiguous+tuned").baseline
    assert not Variant.parse("flash-attn:fa3").baseline
    assert not Variant.parse("flash-attn:fa3-cascade").baseline
