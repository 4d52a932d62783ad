"""`analysis.frame.records`: the rows of a results frame as dicts, exactly what pandas'
`to_dict("records")` gives (the report's analyses read rows this way, thousands of times)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnbench.analysis.frame import load, records

ROOT = Path(__file__).resolve().parents[1]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return bool(np.array_equal(a, b))
    return bool(a == b)


def test_records_equal_to_dict_on_the_committed_rows() -> None:
    frame = load(sorted((ROOT / "results").glob("h100-*.jsonl.gz"))).frame
    assert len(frame) > 100
    want, got = frame.to_dict("records"), records(frame)
    assert len(got) == len(want)
    for w, g in zip(want, got, strict=True):
        assert list(g) == list(w)
        bad = [k for k in w if not _same(w[k], g[k])]
        assert not bad, {k: (w[k], g[k]) for k in bad}


def test_records_of_empty_frames() -> None:
    assert records(pd.DataFrame()) == []
    assert records(pd.DataFrame({"a": pd.Series([], dtype=int)})) == []
    assert records(pd.DataFrame({"a": [1], "b": ["x"]})) == [{"a": 1, "b": "x"}]
