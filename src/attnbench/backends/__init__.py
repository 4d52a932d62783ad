"""Backend registry: library name -> module, imported only when asked for.

Each module exposes `backends() -> list[Backend]`, one object per variant (`flashinfer:fa2`,
`sdpa:cudnn`, ...). Importing a module must not import its optional library: that happens in
`available()`, `check()` or `plan()`.
"""

from __future__ import annotations

import importlib
import importlib.util

from attnbench.backends.base import Backend, BackendUnavailable, PlannedRun, Unsupported
from attnbench.backends.variant import Variant

_MODULES: dict[str, str] = {
    "reference": "attnbench.backends.reference",
    "sdpa": "attnbench.backends.sdpa",
    "flex": "attnbench.backends.flex",
    "flashinfer": "attnbench.backends.flashinfer",
    "flash-attn": "attnbench.backends.flash_attn",
    "cudnn": "attnbench.backends.cudnn",
    "faulty": "attnbench.backends.faults",
    "sdpa-mla": "attnbench.backends.sdpa_mla",
    "flashinfer-mla": "attnbench.backends.flashinfer_mla",
    "flash-attn-mla": "attnbench.backends.fa3_mla",
    "flashmla": "attnbench.backends.flashmla",
    "vllm": "attnbench.backends.engine_vllm",
    "sglang": "attnbench.backends.engine_sglang",
}
"""Modules whose variants set `hidden = True` (fault injection) are left out of `all`. The MLA
modules' variants carry their library's name (`sdpa:mla`, `flashinfer:mla-fa2`,
`flash-attn:mla`, `flashmla:dense`), so `--backend flashinfer` selects them with the others.
`vllm` and `sglang` are the engines' own paths (`engines.paths`): `vllm:flashinfer`,
`sglang:fa3`..."""

__all__ = [
    "Backend",
    "BackendUnavailable",
    "PlannedRun",
    "Unsupported",
    "all_backends",
    "known_libraries",
    "select_backends",
]


def known_libraries() -> list[str]:
    return [name for name in _MODULES if importlib.util.find_spec(_MODULES[name]) is not None]


def _load(library: str) -> list[Backend]:
    module = importlib.import_module(_MODULES[library])
    found: list[Backend] = module.backends()
    return found


def all_backends() -> list[Backend]:
    """Every variant of every library attnbench knows, installed or not."""
    out: list[Backend] = []
    for lib in known_libraries():
        out += _load(lib)
    return out


def select_backends(names: list[str] | None) -> list[Backend]:
    """Variants matching `names`: a library (`flashinfer`) selects all its variants, a full
    name (`flashinfer:tc`) one. None or `all` selects every variant. Unknown names raise
    ValueError listing what is allowed."""
    everything = all_backends()
    if not names or names == ["all"]:
        return [b for b in everything if not getattr(b, "hidden", False)]
    chosen: list[Backend] = []
    for raw in names:
        name = raw.strip().lower()
        matches = [b for b in everything if name in (b.name, Variant.parse(b.name).library)]
        if not matches:
            listed = [b for b in everything if not getattr(b, "hidden", False)]
            libraries = {Variant.parse(b.name).library for b in listed}
            allowed = sorted(libraries | {b.name for b in listed})
            raise ValueError(f"backend={raw!r} is not known; allowed: all, {', '.join(allowed)}")
        chosen += [b for b in matches if b not in chosen]
    return chosen
