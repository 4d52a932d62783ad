"""Rows written by older attnbench versions, brought to today's meaning in one place.

- FlashAttention-3 on a paged cache. Before FA3 ran on the paged KV cache, `flash-attn:fa3`
  ran on a contiguous (or packed) copy made in plan; that variant is now
  `flash-attn:fa3-contiguous`, and `flash-attn:fa3` reads the pages. An `flash-attn:fa3` row
  (or its `+tuned` form) whose `details.kv_cache` is not `paged` is such an old row and is read
  under the new name. A row with neither `kv_cache` nor the older `contiguous` key (a failure
  row) is renamed too, unless its run already knows the two variants apart (it has a paged
  `flash-attn:fa3` row or a `flash-attn:fa3-contiguous` row).
"""

from __future__ import annotations

from collections.abc import Iterable

from attnbench.results.rows import ResultRow

FA3 = "flash-attn:fa3"
FA3_CONTIGUOUS = "flash-attn:fa3-contiguous"


def _base(backend: str) -> tuple[str, str]:
    """(`flash-attn:fa3`, `+tuned`) of `flash-attn:fa3+tuned`."""
    name, plus, rest = backend.partition("+")
    return name, plus + rest


def _paged(row: ResultRow) -> bool:
    return row.details.kv_cache == "paged"


def migrate_rows(rows: Iterable[ResultRow]) -> int:
    """Rename old contiguous-cache FA3 rows in place (see the module docstring); returns how
    many were renamed."""
    rows = list(rows)
    knows_paged = {
        r.run_id
        for r in rows
        if _base(r.backend)[0] == FA3_CONTIGUOUS or (_base(r.backend)[0] == FA3 and _paged(r))
    }
    renamed = 0
    for r in rows:
        name, suffix = _base(r.backend)
        if name != FA3 or _paged(r):
            continue
        d = r.details
        described = d.kv_cache is not None or d.contiguous is not None
        if not described and r.run_id in knows_paged:
            continue
        r.backend = FA3_CONTIGUOUS + suffix
        renamed += 1
    return renamed
