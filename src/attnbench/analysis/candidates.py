"""Which measured variants a recommendation may choose from: the rows of serving kernels,
not the oracle, the baselines or the engine variants (each of those is measured for a reason
of its own, named below)."""

from __future__ import annotations

import pandas as pd

NON_SERVING = frozenset({"reference"})
"""Libraries that are not serving kernels (the fp64/fp32 oracle): never recommended."""
BASELINE_VARIANTS = frozenset({"flash-attn:fa3-contiguous"})
"""Variants measured as baselines, not as something to deploy: FA3 on a contiguous copy of the
KV cache prices paging (beside the paged `flash-attn:fa3`), but no serving engine runs it."""


ENGINE_LIBRARIES = frozenset({"vllm", "sglang"})
"""Engine variants (`vllm:*`, `sglang:*`) replay an engine's calls into the same kernels: they
are ranked by `recommend --engine` (`engine_rank`), not in the kernel matrix, whose engine
flags would otherwise have to map an engine's own configuration back onto an engine."""


def deployable(ok: pd.DataFrame) -> pd.DataFrame:
    """Rows the kernel matrix may choose from: no oracle, no baseline variant (tuned or not),
    no engine variant."""
    if ok.empty:
        return ok
    variant = ok["backend"].astype(str).str.replace(r"\+tuned$", "", regex=True)
    library = ok["library"]
    return ok[
        ~library.isin(NON_SERVING)
        & ~library.isin(ENGINE_LIBRARIES)
        & ~variant.isin(BASELINE_VARIANTS)
    ]
