"""Which attention features beyond plain GQA a backend variant computes: MLA's latent cache, a
sliding window, attention sinks, logit soft-capping (`WorkloadSpec.features()`), and the
one-line reason a variant gives for a case that needs one it does not.

Every variant's `check` asks `missing_feature` first, so a case is refused before anything is
built, with a reason that says where such cases run instead; a variant that ignored the feature
would otherwise compute plain attention and only the accuracy gate would notice.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from attnbench.backends.base import Unsupported
from attnbench.workload.spec import WorkloadSpec

MLA_VARIANTS = "sdpa:mla, flashinfer:mla-fa2, flashinfer:mla-fa3, flashmla:dense"
SOFT_CAP_VARIANTS = (
    "flashinfer:fa2/tc/fa3/auto/ragged-fa2/ragged-fa3 (logits_soft_cap), flex (a score_mod) and "
    "flash-attn:fa3 builds with softcap"
)
DEFAULT_REASONS: dict[str, str] = {
    "mla": (
        "{who} computes grouped-query attention; MLA cases (one latent shared by every query "
        "head) run on " + MLA_VARIANTS
    ),
    "window": "{who} takes no sliding window (window_left)",
    "sinks": "{who} takes no attention sinks",
    "softcap": "{who} takes no logit soft-cap (logits_soft_cap); soft-capped cases (Gemma-2) run "
    "on " + SOFT_CAP_VARIANTS,
}


def missing_feature(
    who: str,
    spec: WorkloadSpec,
    supported: Collection[str] = (),
    reasons: Mapping[str, str] | None = None,
) -> Unsupported | None:
    """Why `who` cannot run `spec`: the first feature of the case it does not support, with
    `reasons[feature]` (or the default reason); None when it supports them all."""
    for feature in spec.features():
        if feature not in supported:
            why = (reasons or {}).get(feature) or DEFAULT_REASONS[feature]
            return Unsupported(why.format(who=who))
    return None


def mla_only(who: str, spec: WorkloadSpec, instead: str) -> Unsupported | None:
    """The refusal of an MLA-only variant for a plain attention case (None for an MLA case)."""
    if spec.mla is not None:
        return None
    return Unsupported(f"{who} runs MLA cases only (--model deepseek-v3, kimi-k2...); {instead}")
