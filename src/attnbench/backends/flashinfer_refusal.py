"""FlashInfer's own refusals, read from its error text: the sweep's safety net for cases the
routing rules (`flashinfer_rules.route`) do not foresee, turned into `unsupported` rows."""

from __future__ import annotations

import re

from attnbench.backends.known_bugs import installed_version

_REFUSAL = re.compile(
    r"Error in function '[^']*' at (?:[^\s:]*/)?([^/\s:]+:\d+): (Unsupported [A-Za-z_ ]+: [^\s;,]+)"
)
"""FlashInfer's C++ refusals: `FLASHINFER_ERROR` (0.7.4 include/flashinfer/exception.h) formats
"Error in function 'F' at FILE:LINE: MSG", and its DISPATCH_* macros (utils.cuh) say
"Unsupported group_size: 7", "Unsupported head_dim: 96"..."""


def library_refusal(message: str) -> str | None:
    """The refusal, as one line naming FlashInfer's version and source file, when `message` is
    FlashInfer saying "Unsupported <what>: <value>" from inside a kernel's dispatch (its merge
    kernel dispatches head_dim 64/128/256/512 only); None for any other error. The sweep's
    safety net for cases `route` does not foresee: an `unsupported` row."""
    found = _REFUSAL.search(message)
    if found is None:
        return None
    where, what = found.groups()
    hint = "; use flashinfer:tc (tensor cores take any group size)" if "group_size" in what else ""
    version = installed_version("flashinfer-python")
    who = f"FlashInfer {version}" if version else "FlashInfer"
    return f"{who} refused the case inside its kernel dispatch ({where}): {what}{hint}"
