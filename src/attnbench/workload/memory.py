"""How much memory a case needs before it is built, and how much is free: checked by the sweep
before `make_inputs`, so a case that cannot fit is an `unsupported` row that says so, instead of
a process the kernel kills (CPU) or a late out-of-memory error (GPU).

The estimate follows what the code allocates, in bytes, at its peak (all pure functions of the
spec; E = elements of the paged KV cache, L = the longest request, n its query tokens):

    inputs     q [total_q, Hq, D] at dtype, the paged cache (E at kv_dtype, whole pages, a shared
               prefix's pages once) and the page table (int32)
    staging    fp8 only, while `make_inputs` quantises: the bf16 source (2E) and `quantize`'s
               fp32 temporaries for K or V (2 x 4E/2), freed before anything below
    reference  the fp64 oracle (`backends/reference.py`), kept for the whole case: its output
               [total_q, Hq, D] in fp64; while it runs, per request, the gathered pages and their
               reshaped copy at kv_dtype, K and V in fp64 with one conversion temporary, one
               einsum operand copy, and logits + softmax [Hq, c, L] in fp64 (c queries per
               chunk, at most 512 MiB of logits per chunk, as the oracle chunks them)
    workspace  per variant, while it runs: its own copies of K/V (see `variant_workspace`), its
               output, and the accuracy gate (output, difference and rounded reference in fp64);
               fp8 cases add a second reference pass (kernels that see a quantised query)

    total = inputs + max(staging, reference output + max(reference working set, workspace))

An MLA case (spec.mla) caches one latent of head_dim = kv_lora_rank + qk_rope_head_dim values
per token, read as keys and (its first kv_lora_rank values) as values: E counts it once, not as
K plus V, and outputs are kv_lora_rank wide; counting it as K and V doubled the cache estimate.

Estimates round up, not down: a case refused here would almost certainly not have fit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from attnbench.workload.spec import ITEMSIZE, WorkloadSpec

GIB = 1 << 30
FP64 = 8
FP32 = 4
INDEX = 4
LOGITS_BUDGET_BYTES = 1 << 29
"""Logits per chunk of queries in the oracle (`backends.reference._LOGITS_BUDGET_BYTES`)."""
HEADROOM = 0.9
"""A case may use at most this fraction of the free memory (allocator slack, fragmentation,
the rest of the process)."""
PAGED_WORKSPACE_BYTES = 256 << 20
"""Paged kernels (FlashInfer, cuDNN...) keep the cache in place; their workspace buffers and
split-KV partials stay within this."""


@dataclass(frozen=True)
class MemoryEstimate:
    """Peak bytes of one (case, variant), by part (see the module docstring)."""

    kv_cache: int
    q: int
    page_table: int
    staging: int
    reference_out: int
    reference_work: int
    workspace: int

    @property
    def inputs(self) -> int:
        return self.kv_cache + self.q + self.page_table

    @property
    def total(self) -> int:
        running = self.reference_out + max(self.reference_work, self.workspace)
        return self.inputs + max(self.staging, running)

    def summary(self) -> str:
        """`12.3 GiB (KV cache 8.0, q 0.1, reference 2.1, workspace 3.0 GiB)`."""
        parts = [
            f"KV cache {_gib(self.kv_cache)}",
            f"q {_gib(self.q)}",
            f"reference {_gib(self.reference_out + self.reference_work)}",
            f"workspace {_gib(self.workspace)}",
        ]
        if self.staging:
            parts.append(f"fp8 staging {_gib(self.staging)}")
        return f"{_gib(self.total)} GiB ({', '.join(parts)} GiB)"

    def as_dict(self) -> dict[str, int]:
        return asdict(self) | {"total": self.total}


def _gib(nbytes: int) -> str:
    return f"{nbytes / GIB:.1f}"


def _elems(tokens: int, spec: WorkloadSpec) -> int:
    """Cached elements of `tokens` tokens: K and V, or for MLA the one latent per token
    (kv_lora_rank + qk_rope_head_dim = head_dim values, keys and values alike: no V copy)."""
    if spec.mla is not None:
        return tokens * spec.head_dim
    return 2 * tokens * spec.num_kv_heads * spec.head_dim


def unique_pages(spec: WorkloadSpec) -> int:
    """Pages the cache holds: a shared prefix's whole pages are stored once (`page_table`)."""
    if spec.kind != "shared_prefix":
        return spec.num_pages
    shared = spec.shared_prefix_len // spec.page_size
    return spec.num_pages - shared * (spec.batch_size - 1)


def kv_cache_bytes(spec: WorkloadSpec) -> int:
    return _elems(unique_pages(spec) * spec.page_size, spec) * ITEMSIZE[spec.kv_dtype]


def staging_bytes(spec: WorkloadSpec) -> int:
    """fp8: the bf16 source cache and `quantize`'s fp32 temporaries for half of it."""
    if not spec.is_fp8:
        return 0
    elems = _elems(unique_pages(spec) * spec.page_size, spec)
    return 2 * elems + 2 * FP32 * (elems // 2)


def reference_working_bytes(spec: WorkloadSpec, accum_bytes: int = FP64) -> int:
    """The oracle's largest per-request working set (its output not included)."""
    worst = 0
    for kv_len, qo_len in zip(spec.kv_lens, spec.qo_lens, strict=True):
        pages = -(-kv_len // spec.page_size)
        gathered = 2 * _elems(pages * spec.page_size, spec) * ITEMSIZE[spec.kv_dtype]
        kv_accum = _elems(kv_len, spec) * accum_bytes  # K and V in the accumulation dtype
        temporaries = kv_accum  # one conversion temporary and one einsum operand copy
        q_accum = qo_len * spec.num_qo_heads * spec.head_dim * accum_bytes
        row = spec.num_qo_heads * kv_len * accum_bytes
        # the oracle sizes chunks as if logits were fp64, whatever the accumulation dtype
        chunk = min(qo_len, max(1, LOGITS_BUDGET_BYTES // (spec.num_qo_heads * kv_len * FP64)))
        # the previous chunk's logits and softmax are alive while the next chunk's einsum and
        # its scaled copy are made: 4 chunks of logits, plus the mask and its negation
        logits = 4 * chunk * row + 2 * chunk * kv_len
        worst = max(worst, gathered + kv_accum + temporaries + q_accum + logits)
    return worst


def output_bytes(spec: WorkloadSpec, itemsize: int) -> int:
    """The attention output; MLA's is kv_lora_rank wide per head (the values), not head_dim."""
    width = spec.mla.kv_lora_rank if spec.mla is not None else spec.head_dim
    return spec.total_q * spec.num_qo_heads * width * itemsize


def variant_workspace(spec: WorkloadSpec, variant: str) -> int:
    """Bytes a variant allocates besides the shared inputs, by how it holds K and V:

    - `reference` (timed, fp32): the oracle's working set in fp32 and an fp32 output;
    - `sdpa:*`: K and V gathered into a padded `[B, L, Hkv, D]` copy and a padded q; the math
      kernel also expands K/V to every query head in fp32 (twice: measured 3.5 GiB for 0.25 GiB
      of bf16 K/V at group 4 on the CPU) and materialises scores, masked scores and softmax in fp32;
    - `flex`: a packed copy of K and V, its transposed copy and a quarter more, plus 4 KiB per
      query token and head (measured on the CPU: linear in query tokens, 4k-16k prefill);
    - `flash-attn:*`: a contiguous copy of K and V and its transposed copy;
    - `vllm:triton-attn`: the whole paged cache copied into vLLM's layout;
    - anything else (paged kernels): PAGED_WORKSPACE_BYTES.

    Plus the variant's output at dtype and the accuracy gate (3 fp64 outputs).
    """
    item = ITEMSIZE[spec.dtype]
    b, max_q, max_kv = spec.batch_size, max(spec.qo_lens), max(spec.kv_lens)
    family = variant.split(":")[0].split("+")[0]
    if variant.startswith("reference"):
        own = reference_working_bytes(spec, FP32) + output_bytes(spec, FP32)
    elif family == "sdpa":
        copies = 1 if spec.mla is not None else 2  # sdpa:mla's v is a view of its latent copy
        own = copies * b * max_kv * spec.num_kv_heads * spec.head_dim * item
        own += b * max_q * spec.num_qo_heads * spec.head_dim * item
        if spec.sinks:  # the additive mask with its sink column, per query head
            own += b * spec.num_qo_heads * max_q * (max_kv + 1) * item
        if variant.split("+")[0] == "sdpa:math":
            own += 4 * b * max_kv * spec.num_qo_heads * spec.head_dim * FP32
            own += 3 * b * spec.num_qo_heads * max_q * max_kv * FP32 + b * max_q * max_kv
    elif family == "flex":
        packed = _elems(spec.total_kv, spec) * ITEMSIZE[spec.kv_dtype]
        own = packed * 5 // 2 + spec.total_q * spec.num_qo_heads * 1024 * FP32
    elif family == "flash-attn":
        own = 2 * _elems(spec.total_kv, spec) * ITEMSIZE[spec.kv_dtype]
    elif variant == "vllm:triton-attn":  # the paged cache copied into vLLM's layout
        own = kv_cache_bytes(spec) + PAGED_WORKSPACE_BYTES
    else:
        own = PAGED_WORKSPACE_BYTES
    gate = 3 * output_bytes(spec, FP64)
    second_reference = 0
    if spec.is_fp8:
        second_reference = output_bytes(spec, FP64) + reference_working_bytes(spec)
    return own + output_bytes(spec, item) + gate + second_reference


def estimate(spec: WorkloadSpec, variant: str) -> MemoryEstimate:
    """Peak bytes of running `variant` on `spec` in the sweep (inputs and reference included)."""
    index = (unique_pages(spec) + 3 * spec.batch_size + 3) * INDEX
    return MemoryEstimate(
        kv_cache=kv_cache_bytes(spec),
        q=spec.total_q * spec.num_qo_heads * spec.head_dim * ITEMSIZE[spec.dtype],
        page_table=index,
        staging=staging_bytes(spec),
        reference_out=output_bytes(spec, FP64),
        reference_work=reference_working_bytes(spec),
        workspace=variant_workspace(spec, variant),
    )


def too_big(est: MemoryEstimate, free: int, where: str) -> str | None:
    """The `unsupported` reason when `est` does not fit in HEADROOM x `free` bytes, else None."""
    if est.total <= HEADROOM * free:
        return None
    return (
        f"needs ~{est.summary()} of {where} memory; {_gib(free)} GiB free "
        f"(at most {HEADROOM:.0%} of it is used)"
    )


# -- free memory now (the one part that reads the machine) -------------------------------------


def host_available_bytes(
    meminfo: Path = Path("/proc/meminfo"), cgroup: Path = Path("/sys/fs/cgroup")
) -> int | None:
    """Host memory this process may still use: MemAvailable, lowered to what the cgroup (v2)
    limit leaves (limit - usage + reclaimable file cache). None when neither can be read."""
    found: list[int] = []
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
                break
    except (OSError, ValueError, IndexError):
        pass
    limit = _cgroup_room(cgroup)
    if limit is not None:
        found.append(limit)
    return min(found) if found else None


def _cgroup_room(cgroup: Path) -> int | None:
    try:
        limit_text = (cgroup / "memory.max").read_text().strip()
        if limit_text == "max":
            return None
        usage = int((cgroup / "memory.current").read_text())
        inactive = 0
        for line in (cgroup / "memory.stat").read_text().splitlines():
            if line.startswith("inactive_file "):
                inactive = int(line.split()[1])
        return max(0, int(limit_text) - usage + inactive)
    except (OSError, ValueError, IndexError):
        return None


def free_bytes(device: object) -> int | None:
    """Free memory where a case's tensors go: the GPU's (driver free plus what torch's caching
    allocator holds unused) or the host's. None when unknown (then nothing is refused)."""
    import torch

    dev = torch.device(str(device))
    if dev.type == "cuda":
        try:
            free, _total = torch.cuda.mem_get_info(dev)
            cached = torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
        except RuntimeError:
            return None
        return int(free) + max(0, int(cached))
    if dev.type == "cpu":
        return host_available_bytes()
    return None
