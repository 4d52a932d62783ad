"""FlashInfer's known bugs (`known_bugs.KnownBug`), by the kernel a variant's route reaches: pure
rules, no flashinfer import, tested on CPU. `FlashInferBackend.check` asks `bug_refusal` after
the route is found, so a known-bad case is refused before anything is built.

Both were met on the H200 with Phi-3-mini's shape (32 query and 32 KV heads, head_dim 96, the
brief's mixed 256..64k batch of 32, bf16), and a direct call of FlashInfer 0.7.4
outside attnbench reproduced them:

- `fa2-prefill-head-dim`: FlashInfer's FA2 prefill kernel (flashinfer:tc's decode, the fa2 and
  auto paged prefill below SM90's fa3 head dims, ragged-fa2, the cascade) faults with an illegal
  memory access at a head_dim that is not a multiple of 64 (80, 96, 112): its shared-memory
  layout assumes one (flashinfer-ai/flashinfer#4299, open; #4312 proposes refusing such a
  head_dim before the JIT build).
- `cuda-core-decode-head-dim`: the CUDA-core decode kernel (flashinfer:fa2 and flashinfer:auto
  on single-token decode) returns a wrong answer at a head_dim other than 64, 128 and 256. On
  the H200 (session 12, `results/h200-headdim-fa2.jsonl.gz`) it did so at 80, 96, 112 and 192
  with 32/32 heads (relative error 0.72-0.79, every row); at GQA groups 4 and 8 the same head
  dims stopped in FlashInfer's own merge dispatch ("Unsupported head_dim", cascade.cuh), which
  the run records as FlashInfer's refusal.

- `fa2-prefill-head-dim-192`: the same FA2 prefill kernel, on a paged prefill at head_dim 192
  (32/8 heads, 7-8 requests of 256..8192 tokens), stops in its own dispatch with "FlashInfer
  Internal Error: Invalid configuration: NUM_MMA_Q=2 NUM_MMA_D_QK=12 ..." (prefill.cuh:5355)
  and asks for an issue to be filed. tc's decode at head_dim 192 (one query row per request)
  ran right: the rule covers prefill only, on fa2 and on auto (FA3 takes no head_dim 192, so
  auto runs the same FA2 kernel there).

`evidence` names the committed row that shows each bug. The witness of `fa2-prefill-head-dim`
ran in session 15 on an H100 (a call for an H200 was given one; the same SM90 kernels of
FlashInfer 0.7.4): flashinfer:tc lost the CUDA context with an illegal memory access, as on
the H200 outside attnbench; from that row on the witness case is refused too.
"""

from __future__ import annotations

from attnbench.backends.base import Unsupported
from attnbench.backends.flashinfer_rules import Route
from attnbench.backends.known_bugs import Evidence, KnownBug, refusal
from attnbench.workload.spec import WorkloadSpec

PHI3_MINI_SHAPE = "decode, 32/32 heads, head_dim 96, the mixed(256..65536) batch of 32, bf16"


def phi3_mini_case(spec: WorkloadSpec) -> bool:
    """The shape both bugs were reported on: the headdim suite's group-1 ragged
    decode at head_dim 96."""
    return (
        spec.kind == "decode"
        and (spec.num_qo_heads, spec.num_kv_heads, spec.head_dim) == (32, 32, 96)
        and spec.batch_size == 32
        and spec.lengths == "mixed(256..65536)"
        and spec.dtype == spec.kv_dtype == "bfloat16"
        and not spec.features()
    )


FA2_PREFILL_HEAD_DIM = KnownBug(
    key="fa2-prefill-head-dim",
    distribution="flashinfer-python",
    seen_on="0.7.4",
    what=(
        "its FA2 prefill kernel (also flashinfer:tc's decode) faults with an illegal memory "
        "access at a head_dim that is not a multiple of 64, losing the CUDA context"
    ),
    source="flashinfer-ai/flashinfer#4299: head_dim 80, 96, 112... fault; #4312 proposes a check",
    crashes=True,
    witness=phi3_mini_case,
    witness_backend="flashinfer:tc",
    witness_text="flashinfer:tc, " + PHI3_MINI_SHAPE,
    evidence=Evidence(
        "results/h100-headdim-fi.jsonl.gz",
        "decode/h32-32-d96/bs32/mixed(256..65536)/bfloat16/kv=bfloat16/p16/NHD#35496225",
        "flashinfer:tc",
        "error",
    ),
)
CUDA_CORE_DECODE_HEAD_DIMS = (64, 128, 256)
"""The head dims FlashInfer 0.7.4's CUDA-core decode answered right on the H200."""
CUDA_CORE_DECODE_HEAD_DIM = KnownBug(
    key="cuda-core-decode-head-dim",
    distribution="flashinfer-python",
    seen_on="0.7.4",
    what=(
        "its CUDA-core decode kernel gives a wrong answer at a head_dim other than 64, 128 or "
        "256 (relative error 0.72-0.79 at 80, 96, 112 and 192)"
    ),
    source="issue 36: a direct call of FlashInfer 0.7.4 reproduced it at head_dim 96",
    crashes=False,
    witness=phi3_mini_case,
    witness_backend="flashinfer:fa2",
    witness_text="flashinfer:fa2, " + PHI3_MINI_SHAPE,
    evidence=Evidence(
        "results/h200-headdim-fa2.jsonl.gz",
        "decode/h32-32-d96/bs32/mixed(256..65536)/bfloat16/kv=bfloat16/p16/NHD#35496225",
        "flashinfer:fa2",
        "mismatch",
    ),
)


def headdim_192_prefill_case(spec: WorkloadSpec) -> bool:
    """The headdim suite's uniform prefill at head_dim 192 (32/8 heads, 8 x 2048, bf16)."""
    return (
        spec.kind == "prefill"
        and (spec.num_qo_heads, spec.num_kv_heads, spec.head_dim) == (32, 8, 192)
        and spec.lengths == "ctx2048"
        and spec.dtype == spec.kv_dtype == "bfloat16"
    )


FA2_PREFILL_HEAD_DIM_192 = KnownBug(
    key="fa2-prefill-head-dim-192",
    distribution="flashinfer-python",
    seen_on="0.7.4",
    what=(
        "its FA2 paged prefill stops at head_dim 192 with 'FlashInfer Internal Error: Invalid "
        "configuration: NUM_MMA_Q=2 NUM_MMA_D_QK=12 ...' (prefill.cuh:5355)"
    ),
    source="the headdim suite on an H100, session 15: both prefill cases at head_dim 192",
    crashes=False,
    witness=headdim_192_prefill_case,
    witness_backend="flashinfer:fa2",
    witness_text="flashinfer:fa2, prefill 32/8 heads, head_dim 192, 8 x 2048, bf16",
    evidence=Evidence(
        "results/h100-headdim-fi.jsonl.gz",
        "prefill/h32-8-d192/bs8/ctx2048/bfloat16/kv=bfloat16/p16/NHD#42a41777",
        "flashinfer:fa2",
        "error",
    ),
)
BUGS = (FA2_PREFILL_HEAD_DIM, CUDA_CORE_DECODE_HEAD_DIM, FA2_PREFILL_HEAD_DIM_192)


def uses_fa2_prefill_kernel(route: Route, spec: WorkloadSpec) -> bool:
    """The route runs FlashInfer's FA2 prefill kernel: tensor-core decode, the fa2 paged or
    ragged prefill, `auto` on a paged case at a head_dim SM90's fa3 does not take (64/128/256,
    all multiples of 64), and both levels of the cascade."""
    if route.api == "decode":
        return route.use_tensor_cores and route.backend == "fa2"
    if route.api in ("paged", "ragged"):
        return route.backend == "fa2" or (route.backend == "auto" and spec.head_dim % 64 != 0)
    return route.api == "cascade"


def applies(bug: KnownBug, route: Route, spec: WorkloadSpec) -> bool:
    if bug is FA2_PREFILL_HEAD_DIM:
        return spec.head_dim % 64 != 0 and uses_fa2_prefill_kernel(route, spec)
    if bug is FA2_PREFILL_HEAD_DIM_192:  # auto too: fa3 takes no head_dim 192, so auto is fa2
        paged_fa2 = route.api == "paged" and route.backend in ("fa2", "auto")
        return spec.kind == "prefill" and spec.head_dim == 192 and paged_fa2
    if bug is CUDA_CORE_DECODE_HEAD_DIM:
        cuda_core = route.api == "decode" and not route.use_tensor_cores
        wrong_dim = spec.head_dim not in CUDA_CORE_DECODE_HEAD_DIMS
        return cuda_core and route.backend in ("fa2", "auto") and wrong_dim
    return False


def bug_refusal(short: str, route: Route, spec: WorkloadSpec) -> Unsupported | None:
    """The first known bug of `route` on `spec` that refuses it here, or None."""
    for bug in BUGS:
        if applies(bug, route, spec):
            found = refusal(bug, f"flashinfer:{short}", spec)
            if found is not None:
                return found
    return None
