"""Strict JSON for every document attnbench writes: NaN and infinities become null.

JSON has no spelling for them (Python's `json` would write `NaN`, which other readers reject),
so every writer (result rows, fp8 studies, replay documents, `--json`/`--out` files) passes its
data through `finite` or writes with `dumps`.
"""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """`value` with every NaN and infinity (at any depth of dicts, lists and tuples) as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """`json.dumps` of `finite(value)`, strict (no NaN spelling); objects json does not know are
    written as their `str` unless `default` says otherwise."""
    kwargs.setdefault("default", str)
    return json.dumps(finite(value), allow_nan=False, **kwargs)
