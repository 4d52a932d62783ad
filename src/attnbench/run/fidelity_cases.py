"""The cases `attnbench fidelity` times (`--cases default`, `sm-activity`, `small`), each one
backend variant on one spec with its knobs, and the filters that narrow them (`--backend`,
`--knob`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from attnbench.backends import select_backends
from attnbench.run.ncu import SM_ACTIVITY, TIMING, NcuProfile
from attnbench.workload.spec import WorkloadSpec


@dataclass(frozen=True)
class FidelityCase:
    name: str
    backend: str
    spec: WorkloadSpec
    ncu_profile: NcuProfile = TIMING
    """What `--ncu` measures of this case (run.ncu.TIMING or SM_ACTIVITY)."""
    knobs: tuple[tuple[str, object], ...] = ()
    """Knob overrides for the plan (`--knob`), e.g. (("enable_pdl", False),)."""


def _spec(kind: Any, lens: tuple[int, ...], **kw: Any) -> WorkloadSpec:
    qo = lens if kind == "prefill" else (1,) * len(lens)
    return WorkloadSpec(
        kind=kind,
        num_qo_heads=32,
        num_kv_heads=8,
        head_dim=128,
        kv_lens=lens,
        qo_lens=qo,
        page_size=16,
        dtype="bfloat16",
        **kw,
    )


def default_cases() -> list[FidelityCase]:
    """Decode short and long (one- and two-kernel paths), a ragged batch, and a long prefill."""
    from attnbench.workload.lengths import parse_lengths

    (mixed,) = parse_lengths("mixed", 32, 0)
    return [
        FidelityCase("decode-32x1k", "flashinfer:fa2", _spec("decode", (1024,) * 32)),
        FidelityCase("decode-32x16k", "flashinfer:tc", _spec("decode", (16384,) * 32)),
        FidelityCase("decode-32x16k", "flash-attn:fa3", _spec("decode", (16384,) * 32)),
        FidelityCase(
            "decode-mixed", "flashinfer:fa2", _spec("decode", mixed.kv_lens, lengths=mixed.label)
        ),
        FidelityCase("prefill-4x16k", "flash-attn:fa3", _spec("prefill", (16384,) * 4)),
    ]


SM_ACTIVITY_BACKENDS = (
    "flashinfer:fa2",
    "flashinfer:tc",
    "flashinfer:xqa",
    "flash-attn:fa3",
    "flash-attn:fa3-contiguous",
)


def sm_activity_cases() -> list[FidelityCase]:
    """The brief's claim that uniform grids leave most SMs idle on ragged batches, put to ncu:
    every decode kernel on three batches of 32 requests holding the same total KV (the brief's
    mixed 256..64k batch, the same tokens spread evenly, and four 64k requests beside 28 short
    ones), so only the raggedness differs."""
    from attnbench.workload.lengths import parse_lengths

    (mixed,) = parse_lengths("mixed", 32, 0)
    total = sum(mixed.kv_lens)
    uniform = (round(total / 32),) * 32
    short = round((total - 4 * 65536) / 28)
    four_long = (65536,) * 4 + (short,) * 28
    batches = {
        "uniform": _spec("decode", uniform),
        "mixed": _spec("decode", mixed.kv_lens, lengths=mixed.label),
        "4-long": _spec("decode", four_long, lengths=f"4x65536+28x{short}"),
    }
    return [
        FidelityCase(f"sm-{name}", backend, spec, SM_ACTIVITY)
        for backend in SM_ACTIVITY_BACKENDS
        for name, spec in batches.items()
    ]


PR2055 = "pr2055-bs1x8k"
"""FlashInfer's H200 decode benchmark in its PR #2055: batch 1, 8,192 KV tokens, 64/8 heads,
head_dim 128, page 32, bf16, CUPTI with cold L2 (published: fa2 0.035 ms, cuDNN 0.020 ms)."""
SMALL_VARIANTS: tuple[tuple[str, tuple[tuple[str, object], ...]], ...] = (
    ("flashinfer:fa2", ()),
    ("flashinfer:fa2", (("use_cuda_graph", False),)),
    ("flashinfer:tc", ()),
    ("flashinfer:tc", (("use_cuda_graph", False),)),
    ("sdpa:cudnn", ()),
    ("flash-attn:fa3", ()),
)
"""FlashInfer's decode wrapper in both plan modes (its default CUDA-graph plan, and eager), the
cuDNN and FA3 kernels beside them."""


def small_cases() -> list[FidelityCase]:
    """Kernels of 10-50 us, where launch and timer overheads are a visible share: batch 1-8
    decode, FlashInfer's PR #2055 shape first, then 2 x 2k and 8 x 4k tokens (32/8 heads)."""
    pr = WorkloadSpec(
        kind="decode",
        num_qo_heads=64,
        num_kv_heads=8,
        head_dim=128,
        kv_lens=(8192,),
        qo_lens=(1,),
        page_size=32,
        dtype="bfloat16",
    )
    specs = {
        PR2055: pr,
        "decode-2x2k": _spec("decode", (2048,) * 2),
        "decode-8x4k": _spec("decode", (4096,) * 8),
    }
    return [
        FidelityCase(name, backend, spec, knobs=knobs)
        for name, spec in specs.items()
        for backend, knobs in SMALL_VARIANTS
    ]


def with_knobs(cases: list[FidelityCase], knobs: dict[str, object]) -> list[FidelityCase]:
    """The cases with `knobs` set on every plan; ValueError (naming the allowed knobs and
    values) where a case's variant does not declare one of them."""
    if not knobs:
        return cases
    from attnbench.backends.flashinfer_rules import resolve_knobs

    out = []
    for c in cases:
        (backend,) = select_backends([c.backend])
        try:
            resolve_knobs(backend.knobs, knobs)
        except ValueError as exc:
            raise ValueError(f"--knob: {c.backend}: {exc}") from None
        out.append(replace(c, knobs=tuple(sorted((dict(c.knobs) | knobs).items()))))
    return out


def select_cases(cases: list[FidelityCase], backends: list[str]) -> list[FidelityCase]:
    """The cases of the named variants (all when none is named); an unknown name is an error
    listing the allowed ones."""
    if not backends:
        return cases
    allowed = sorted({c.backend for c in cases})
    unknown = [b for b in backends if b not in allowed]
    if unknown:
        raise ValueError(
            f"--backend: {', '.join(unknown)} not among these cases' variants "
            f"({', '.join(allowed)})"
        )
    return [c for c in cases if c.backend in backends]
