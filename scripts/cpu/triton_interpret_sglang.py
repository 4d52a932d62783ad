r"""CPU check of attnbench's `sglang:triton` calls into SGLang 0.5.23's `decode_attention_fwd`,
`extend_attention_fwd` and `get_num_kv_splits_triton`, run under Triton's interpreter
(TRITON_INTERPRET=1), the sibling of `triton_interpret.py` (vLLM's), whose patches it reuses
by importing it (TRITON_INTERPRET, CUDA_VISIBLE_DEVICES="", get_device_capability -> (9, 0),
the interpreter's bf16 dot and round-to-nearest fixes).

Per case: WorkloadSpec -> make_inputs on CPU, planned by attnbench's own SglangTritonAttn.plan
(the real call: token pool, CUDA-graph-padded decode batch, kv splits from SGLang's own kernel,
window indices, sinks, logit_cap, fp8 scales), run into a NaN-poisoned output and judged by the
project's gate (reference_attention in fp64 with the kernel's query where it quantises it, and
check_accuracy). It also checks that the kernels launched are the plan's `resolved` label
(grouped / mha stage 1 + the split reduction, or extend), and that the kv splits SGLang's
kernel wrote equal `engines.paths.sglang_triton_decode` (the rule's Python mirror). Patched
here too: torch.cuda.get_device_properties / current_device (132 SMs: an H100 SXM or H200).

A windowed decode case whose requests outgrow the window is SGLang's own off-by-one
(sgl-project/sglang#32087: decode reads the last min(kv_len, W) tokens, W keys, not W + 1):
it must FAIL the gate as specified and PASS against the window SGLang reads (window_left - 1);
such a case prints XFAIL when both hold.

Negative controls: `--mutate NAME` (see MUTATIONS) spoils the call; the cases it touches must
FAIL. Run from the repository root, in the venv triton_interpret.py names:

    PYTHONPATH=src /tmp/tritoncpu/bin/python scripts/cpu/triton_interpret_sglang.py \
        [--list | --mutate NAME | case ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
import triton_interpret as base

torch.cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(  # type: ignore[assignment]
    multi_processor_count=132
)
torch.cuda.current_device = lambda: 0  # type: ignore[assignment]


def _patch_interpreter_pdl() -> None:
    """The grouped decode kernel runs with `USE_PDL` on SM90 (`is_arch_support_pdl`), calling
    tl.extra.cuda.gdc_wait / gdc_launch_dependents, programmatic-dependent-launch hints the
    interpreter cannot build (no `_semantic` outside a compiled kernel). They only order two
    launches on a GPU; in the interpreter, which runs launches one after the other, they are
    no-ops."""
    cuda = base.tl.extra.cuda
    for hint in ("gdc_wait", "gdc_launch_dependents"):
        setattr(cuda, hint, lambda *args, **kwargs: None)


def _patch_interpreter_bf16_arith() -> None:
    """Triton 3.7.1's interpreter stores bf16 as raw uint16 bits and its binary_op applies numpy
    ops to those bits, so an elementwise bf16 product (the MHA decode stage 1's `q[None, :] *
    k`) is an integer product of bit patterns (overflow, NaN). Do bf16 (op) bf16 in fp32 and
    round the result to bf16 (to nearest even), as the GPU's bf16 arithmetic does. A fix to
    the interpreter, like triton_interpret.py's two."""
    interp = base._interp
    orig = interp.InterpreterBuilder.binary_op

    def binary_op(self: Any, lhs: Any, rhs: Any, op: Any) -> Any:
        if lhs.dtype.scalar != base.tl.bfloat16 or rhs.dtype.scalar != base.tl.bfloat16:
            return orig(self, lhs, rhs, op)
        f32 = [
            interp._convert_float(h.data, base.tl.bfloat16, base.tl.float32, None).view(
                base.np.float32
            )
            for h in (lhs, rhs)
        ]
        out = base.np.asarray(op(*f32), dtype=base.np.float32)
        bits = interp._convert_float(out, base.tl.float32, base.tl.bfloat16, None)
        return interp.TensorHandle(bits.view(base.np.uint16), base.tl.bfloat16)

    interp.InterpreterBuilder.binary_op = binary_op


_patch_interpreter_pdl()
if os.environ.get("NO_BF16_ARITH_PATCH") != "1":
    _patch_interpreter_bf16_arith()

from attnbench.backends.base import PlannedRun  # noqa: E402
from attnbench.backends.engine_triton_load import (  # noqa: E402
    pack_dir,
    sglang_decode_attention,
    sglang_extend_attention,
)
from attnbench.backends.reference import reference_attention  # noqa: E402
from attnbench.backends.sglang_triton import SglangTritonAttn, refusal  # noqa: E402
from attnbench.engines.paths import sglang_triton_decode  # noqa: E402
from attnbench.measure.accuracy import Accuracy, check_accuracy  # noqa: E402
from attnbench.workload.inputs import make_inputs  # noqa: E402
from attnbench.workload.spec import WorkloadSpec  # noqa: E402

spec, oss, gemma, MANY = base.spec, base.oss, base.gemma, base.MANY
MANY40 = tuple(20 + (11 * i) % 300 for i in range(40))  # 40 requests: graph batch 40

CASES: dict[str, WorkloadSpec] = {
    # decode, GQA 4, few and many requests (graph batch 4 and 24: other kv splits)
    "decode-gqa4": spec(),
    "decode-gqa4-many": spec(num_qo_heads=16, num_kv_heads=4, kv_lens=MANY),
    "decode-long-few": spec(kv_lens=(590, 400, 33)),
    "decode-gqa2-40req": spec(num_qo_heads=4, num_kv_heads=2, kv_lens=MANY40),
    "decode-mha-hd128": spec(num_qo_heads=4, num_kv_heads=4, head_dim=128, kv_lens=(70, 300)),
    "decode-gqa8-hd256": spec(num_qo_heads=8, num_kv_heads=1, head_dim=256, kv_lens=(90, 41)),
    "decode-gqa3-hd64": spec(num_qo_heads=6, num_kv_heads=2, kv_lens=(100, 7, 64)),
    "decode-gqa5-page1": spec(num_qo_heads=5, num_kv_heads=1, page_size=1, kv_lens=(50, 20)),
    "decode-gqa6-hd128": spec(num_qo_heads=12, num_kv_heads=2, head_dim=128, kv_lens=(45, 8)),
    "decode-gqa7": spec(num_qo_heads=7, num_kv_heads=1, kv_lens=(64, 65, 31)),
    "decode-gqa8-hd64": spec(num_qo_heads=16, num_kv_heads=2, kv_lens=(130, 17, 64)),
    "decode-fp16": spec(dtype="float16", kv_dtype="float16"),
    "shared-prefix": spec(
        kind="shared_prefix", kv_lens=(40, 37, 60), qo_lens=(1, 1, 1), shared_prefix_len=20
    ),
    # extend: prefill (no cached prefix) and append (cached prefix + new tokens)
    "prefill-gqa4": spec(kind="prefill", kv_lens=(20, 45, 33)),
    "prefill-mha-hd128": spec(
        kind="prefill", num_qo_heads=2, num_kv_heads=2, head_dim=128, kv_lens=(150, 70)
    ),
    "prefill-gqa8-hd256": spec(
        kind="prefill", num_qo_heads=8, num_kv_heads=1, head_dim=256, kv_lens=(70, 40)
    ),
    "append-gqa4": spec(kind="append", kv_lens=(40, 70, 25), qo_lens=(5, 12, 3)),
    "append-gqa2-hd128": spec(
        kind="append",
        num_qo_heads=4,
        num_kv_heads=2,
        head_dim=128,
        kv_lens=(300, 90),
        qo_lens=(140, 9),
    ),
    # gpt-oss: window + sinks (window 24 < context, and 128 on long contexts)
    "oss-decode-in-window": oss(kv_lens=(20, 23, 9)),  # W = 23: every key read
    "oss-decode-window": oss(kv_lens=(37, 80, 16)),  # XFAIL: SGLang reads 23 keys, not 24
    "oss-decode-w128-long": oss(window_left=127, kv_lens=(600, 300, 90)),  # XFAIL likewise
    "oss-decode-full-sinks": oss(window_left=-1),
    "oss-prefill-window": oss(kind="prefill", kv_lens=(40, 60, 18)),
    "oss-append-window": oss(kind="append", kv_lens=(80, 45, 30), qo_lens=(9, 30, 4)),
    # Gemma-2: soft-cap 50 + window
    "gemma-decode-in-window": gemma(kv_lens=(30, 12)),
    "gemma-decode-window": gemma(kv_lens=(70, 45, 80)),  # XFAIL (decode window)
    "gemma-decode-softcap": gemma(window_left=-1, kv_lens=(70, 45, 80)),
    "gemma-prefill": gemma(kind="prefill", kv_lens=(50, 70)),
    "gemma-append-hd256": gemma(kind="append", head_dim=256, kv_lens=(70, 45), qo_lens=(6, 40)),
    # fp8 e4m3 KV (per-tensor scales)
    "fp8-decode-gqa4": spec(kv_dtype="fp8_e4m3"),
    "fp8-decode-mha": spec(num_qo_heads=4, num_kv_heads=4, kv_dtype="fp8_e4m3"),
    "fp8-decode-many": spec(num_qo_heads=16, num_kv_heads=4, kv_lens=MANY, kv_dtype="fp8_e4m3"),
    "fp8-prefill": spec(kind="prefill", kv_lens=(20, 45, 33), kv_dtype="fp8_e4m3"),
    "fp8-append": spec(
        kind="append", kv_lens=(40, 70, 25), qo_lens=(5, 12, 3), kv_dtype="fp8_e4m3"
    ),
    "fp8-gemma-decode-softcap": gemma(window_left=-1, kv_dtype="fp8_e4m3"),
}

Mutation = Callable[[dict[str, Any]], None]


def _k_is_v(kw: dict[str, Any]) -> None:
    kw["k_buffer"] = kw["v_buffer"]
    if "k_extend" in kw:
        kw["k_extend"] = kw["v_extend"]


MUTATIONS: dict[str, Mutation] = {
    "no-softcap": lambda kw: kw.update(logit_cap=0.0),
    "no-sinks": lambda kw: kw.update(sinks=None),
    "k-is-v": _k_is_v,
    "no-fp8-scale": lambda kw: kw.update(k_scale=1.0, v_scale=1.0),
    "indices-rolled": lambda kw: kw.update(kv_indices=kw["kv_indices"].roll(1)),
    "extend-window-plus-one": lambda kw: kw.update(
        {"sliding_window_size": kw["sliding_window_size"] + 1}
        if "sliding_window_size" in kw
        else {}
    ),
}

KERNELS = {
    "_fwd_grouped_kernel_stage1": "grouped",
    "_fwd_kernel_stage1": "mha",
    "_fwd_kernel_stage2": "reduce",
    "_fwd_kernel": "extend",
}


def install_spies() -> list[base.Launch]:
    """Spy on SGLang's decode and extend kernels (the modules' globals the launchers call)."""
    sglang_decode_attention(pack_dir())
    sglang_extend_attention(pack_dir())
    log: list[base.Launch] = []
    for mod_name in ("decode_attention", "extend_attention"):
        mod: Any = sys.modules[f"sglang.kernels.ops.attention.{mod_name}"]
        for fn, label in KERNELS.items():
            if hasattr(mod, fn) and not isinstance(getattr(mod, fn), base.Spy):
                setattr(mod, fn, base.Spy(getattr(mod, fn), log, label))
    return log


def call_kwargs(planned: PlannedRun) -> dict[str, Any]:
    for cell in getattr(planned.run, "__closure__", None) or ():
        kw = cell.cell_contents
        if isinstance(kw, dict) and "k_buffer" in kw:
            return kw
    raise LookupError("kernel kwargs not found in the run closure")


def drops_oldest(s: WorkloadSpec) -> bool:
    """SGLang's decode window off-by-one bites: a windowed decode request past W tokens."""
    decode = s.kind in ("decode", "shared_prefix")
    return decode and s.window_left >= 0 and max(s.kv_lens) > s.window_left


@dataclasses.dataclass(frozen=True)
class Result:
    name: str
    acc: Accuracy
    launched: str
    resolved: str
    splits_ok: bool
    detail: str
    secs: float
    sglang_window: Accuracy | None  # against SGLang's window (window_left - 1)

    @property
    def status(self) -> str:
        if self.launched != self.resolved or not self.splits_ok:
            return "FAIL"
        if self.sglang_window is not None:
            xfail = not self.acc.passed and self.sglang_window.passed
            return "XFAIL" if xfail else "FAIL"
        return "PASS" if self.acc.passed else "FAIL"

    def line(self) -> str:
        a = self.acc
        extra = ""
        if self.sglang_window is not None:
            w = self.sglang_window
            extra = f" | vs W-1: rel_l2={w.rel_l2_err:.3e} pass={w.passed}"
        bad = "" if self.launched == self.resolved else f" LAUNCH {self.launched}!={self.resolved}"
        split = "" if self.splits_ok else " SPLITS != paths mirror"
        return (
            f"{self.status:5} {self.name:25} max_abs={a.max_abs_err:.3e} rel_l2={a.rel_l2_err:.3e}"
            f" budget={a.budget:.3e} {a.precision or '-'} launch={self.launched}{bad}{split}"
            f" {self.detail}{extra} {self.secs:.1f}s"
        )


def run_case(name: str, s: WorkloadSpec, log: list[base.Launch], mutate: str) -> Result | str:
    why = refusal(s, base.H200)
    if why is not None:
        return why
    inputs = make_inputs(s, "cpu")
    planned = SglangTritonAttn().plan(s, inputs)
    if mutate:
        MUTATIONS[mutate](call_kwargs(planned))
    assert planned.out is not None
    planned.out.fill_(float("nan"))
    log.clear()
    t0 = time.perf_counter()
    out = planned.unpack(planned.run())
    secs = time.perf_counter() - t0
    precision = planned.precision or s.dtype
    acc = check_accuracy(out, reference_attention(inputs, q=planned.q_effective), precision)
    theirs = None
    if drops_oldest(s):
        narrow = s.model_copy(update={"window_left": s.window_left - 1})
        ref = reference_attention(dataclasses.replace(inputs, spec=narrow), q=planned.q_effective)
        theirs = check_accuracy(out, ref, precision)
    kinds = {e.kernel for e in log}
    launched = next((k for k in ("extend", "grouped", "mha") if k in kinds), "?")
    if launched in ("grouped", "mha") and "reduce" not in kinds:
        launched += "-no-reduce"
    splits_ok, detail = True, ""
    if "kv_splits" in planned.details:
        graph, mirror = sglang_triton_decode(s, sms=132)
        got = str(planned.details["kv_splits"])
        splits_ok = got == ",".join(map(str, mirror)) and planned.details["graph_batch"] == graph
        detail = f"graph_bs={graph} splits={got}"
    return Result(name, acc, launched, planned.resolved, splits_ok, detail, secs, theirs)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description="sglang:triton under TRITON_INTERPRET=1 on CPU")
    p.add_argument("cases", nargs="*", metavar="case")
    p.add_argument("--list", action="store_true")
    p.add_argument("--mutate", default="", choices=sorted(MUTATIONS))
    args = p.parse_args(argv)
    if args.list:
        print("\n".join(CASES))
        return 0
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        p.error(f"unknown case(s) {', '.join(unknown)} (see --list)")
    print(
        f"torch {torch.__version__}  triton {base.triton.__version__}  TRITON_INTERPRET=1  "
        f"pack {pack_dir()}  mutate={args.mutate or '-'}",
        flush=True,
    )
    log = install_spies()
    bad = 0
    for name in args.cases or list(CASES):
        try:
            r = run_case(name, CASES[name], log, args.mutate)
        except Exception as exc:  # report and go on
            traceback.print_exc()
            bad += 1
            print(f"ERROR {name:25} {type(exc).__name__}: {exc}", flush=True)
            continue
        if isinstance(r, str):
            bad += 1
            print(f"FAIL  {name:25} refused: {r}", flush=True)
            continue
        bad += r.status == "FAIL"
        print(r.line(), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
