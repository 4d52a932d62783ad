"""Per-model answers of `recommend` ("for deepseek-v3 decode on this GPU use ..."), when the rows
hold more than one model shape (so the decision matrix mixes shapes).

A model is a named preset (`attnbench models`): rows whose spec carries its `model` name, with
its tp. Rows run without one (the GQA sweep's anonymous head shapes `h8/8 d128`..`h128/8 d128`)
are no model: they still count towards "several shapes", but get no answer of their own (the
GQA-sweep section covers them). For each model, the decode and prefill winners are ranked
exactly as the decision matrix ranks its classes (`recommend.rank` on DECODE_ALL / PREFILL_ALL,
restricted to that model's rows), so a model's answer never rests on another model's cases.
Each answer also says:

- which ceiling binds the decode winner's cases and how close it gets: `metrics.binding_fraction`
  of each row (compute when its TFLOP/s fraction exceeds its bandwidth fraction, i.e. the case is
  above the ridge: MLA decode with 128 heads on one latent is) - the median over its rows;
- for a model whose layers differ (gpt-oss: sliding and full; Gemma-3: local and global), the
  model-level decode ms per token of the winner: `metrics.model_per_token_ms` over the layer
  kinds of each batch where every kind was measured (rows equal but for layer_type, window_left
  and num_layers), median over those batches;
- for an MLA model, the engine options that run the decode winner's kernel (`MLA_ENGINES`), or
  that no engine exposes it on that GPU.

Engine MLA backends, read in the engines' sources (each file at the commit the search index
holds):

- vLLM `--attention-backend NAME`, `AttentionBackendEnum` in vllm/v1/attention/backends/
  registry.py @0033bf03: FLASHINFER_MLA, FLASHMLA, FLASH_ATTN_MLA, TRITON_MLA, CUTLASS_MLA...
  mla/flashinfer_mla.py @002d68ef: FLASHINFER_MLA calls `trtllm_batch_decode_with_kv_cache_mla`
  (trtllm-gen / cute-dsl) and `supports_compute_capability` is `capability.major == 10`: it is
  not FlashInfer's `BatchMLAPagedAttentionWrapper` (attnbench's flashinfer:mla-fa2/-fa3) and
  does not run on an H100/H200. On SM90 vLLM offers mla/flashmla.py @01b1d340 (FLASHMLA, major
  9 or 10, page 64, fp8 KV), mla/flashattn_mla.py @00b9b7ad (FLASH_ATTN_MLA, major 9, 16-bit
  KV only) and TRITON_MLA; attnbench measures none of those kernels.
- SGLang `--attention-backend`, `ATTENTION_BACKEND_CHOICES` in python/sglang/srt/server_args.py
  (flashinfer, fa3, flashmla, cutlass_mla, trtllm_mla, triton, ...). For an MLA model
  `flashinfer` is python/sglang/srt/layers/attention/flashinfer_mla_backend.py @004d79cf:
  `BatchMLAPagedAttentionWrapper(workspace, backend="auto")` for decode, and FlashInfer's
  `auto` is `determine_mla_backend` (flashinfer/utils.py): "fa3" on SM90, else "fa2". So
  `--attention-backend flashinfer` runs flashinfer:mla-fa3 on an H200 and flashinfer:mla-fa2
  on other GPUs; no option picks fa2 on SM90.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from attnbench.analysis.compare import NOISE_FLOOR, SEED
from attnbench.analysis.frame import add_key, fmt_us, records, shape_label
from attnbench.analysis.recommend import DECODE_ALL, PREFILL_ALL, ClassResult, Replicates, rank
from attnbench.measure.metrics import binding_fraction, model_per_token_ms

LAYER_FIELDS = ("layer_type", "window_left", "num_layers")
"""Spec fields in which the layer kinds of one model step differ."""
CEILING = {"compute": "matmul", "memory": "copy-bandwidth"}


@dataclass
class ModelAnswer:
    model: str
    """A named preset and its tp: `deepseek-v3`, `llama-3.1-70b/tp8`."""
    decode: ClassResult
    prefill: ClassResult
    bound: str | None = None
    """The ceiling the decode winner's cases are bound by: `compute` or `memory`."""
    roof_frac: float | None = None
    """Median fraction of that (measured) ceiling the decode winner reaches."""
    step_ms: float | None = None
    """Model-level decode ms per token of the winner, its layer kinds added (None: one kind)."""
    step_batches: int = 0
    engines: str | None = None
    """For an MLA model: the engine options that run the decode winner's kernel, or why none."""

    def as_dict(self, gpu: str) -> dict[str, Any]:
        """For `recommend --json`."""
        return {
            "model": self.model,
            "decode": self.decode.winner,
            "decode_margin": self.decode.margin_text(),
            "prefill": self.prefill.winner,
            "prefill_margin": self.prefill.margin_text(),
            "decode_bound": self.bound,
            "decode_roof_frac": self.roof_frac,
            "model_step_ms": self.step_ms,
            "model_step_batches": self.step_batches,
            "engine_flags": self.engines,
            "answer": self.sentence(gpu).replace("**", ""),
        }

    def sentence(self, gpu: str) -> str:
        """`for deepseek-v3 decode on NVIDIA H200 use flashinfer:mla-fa3 (...)`, and prefill."""
        parts = []
        for role, res in (("decode", self.decode), ("prefill", self.prefill)):
            if res.winner is None:
                continue
            text = f"{role} use **{res.winner}** ({res.margin_text()}"
            if role == "decode" and self.bound and self.roof_frac is not None:
                text += (
                    f"; {self.bound}-bound: {100 * self.roof_frac:.0f}% of the measured "
                    f"{CEILING[self.bound]} ceiling"
                )
            if role == "decode" and self.step_ms is not None:
                text += (
                    f"; model step {self.step_ms:.2f} ms/token over its layer kinds, median "
                    f"of {self.step_batches} batches"
                )
            if role == "decode" and self.engines:
                text += f"; engines: {self.engines}"
            parts.append(text + ")")
        if not parts:
            return f"for {self.model} on {gpu}: no row passed the accuracy gate"
        return f"for {self.model} on {gpu}: " + "; ".join(parts)


def _field(spec: Any, name: str, default: Any) -> Any:
    """A spec field from a `WorkloadSpec` or its dict form."""
    if isinstance(spec, dict):
        return spec.get(name, default)
    return getattr(spec, name, default)


def shape_labels(rows: pd.DataFrame) -> pd.Series:
    return pd.Series([shape_label(r) for r in records(rows)], index=rows.index)


def per_model(
    rows: pd.DataFrame, noise_floor: float = NOISE_FLOOR, reps: Replicates | None = None
) -> list[ModelAnswer]:
    """One answer per named model in `rows` (ok, gated rows of one GPU); [] when the rows hold
    one shape (the decision matrix is then that shape's answer). Anonymous head shapes get none."""
    if rows.empty:
        return []
    labels = shape_labels(rows)
    if labels.nunique() < 2:
        return []
    named = (rows["model"].fillna("").astype(str) != "").to_numpy()
    reps = reps or Replicates(np.random.default_rng(SEED))
    out = []
    for label in sorted(set(labels[named])):
        sub = rows[labels == label]
        dec = rank(sub[DECODE_ALL.select(sub)], DECODE_ALL, noise_floor, reps)
        pre = rank(sub[PREFILL_ALL.select(sub)], PREFILL_ALL, noise_floor, reps)
        answer = ModelAnswer(label, dec, pre)
        if dec.winner is not None:
            won = sub[DECODE_ALL.select(sub) & (sub["backend"] == dec.winner)]
            answer.bound, answer.roof_frac = _binding(won)
            answer.step_ms, answer.step_batches = _model_step(won)
            if any(_field(s, "mla", None) is not None for s in won["spec"]):
                answer.engines = mla_engines(dec.winner)
        out.append(answer)
    return out


SM90_NOTE = "(on SM90; vLLM's FLASHINFER_MLA is trtllm-gen, SM100 only)"
MLA_ENGINES: dict[str, str] = {
    "flashinfer:mla-fa3": (
        "SGLang `--attention-backend flashinfer` (its MLA wrapper, backend auto = fa3 on SM90); "
        "vLLM has no backend that runs it " + SM90_NOTE + ": its SM90 MLA backends FLASHMLA, "
        "FLASH_ATTN_MLA and TRITON_MLA are not measured here"
    ),
    "flashinfer:mla-fa2": (
        "SGLang `--attention-backend flashinfer` runs it on GPUs other than SM90 (auto = fa3 on "
        "SM90, and no option picks fa2 there); vLLM has no backend that runs it " + SM90_NOTE
    ),
    "flash-attn:mla": (
        "vLLM `--attention-backend FLASH_ATTN_MLA` (SM90, 16-bit KV cache only); "
        "SGLang `--attention-backend fa3`"
    ),
}
"""Engine options per attnbench MLA kernel (the module docstring has the sources)."""


def mla_engines(winner: str) -> str:
    """The engine options that run `winner` on MLA decode, or that no engine exposes it."""
    base = winner.split("+")[0]  # a tuned row runs the same kernel
    return MLA_ENGINES.get(base, f"attnbench knows no vLLM or SGLang option that runs {base}")


def _binding(rows: pd.DataFrame) -> tuple[str | None, float | None]:
    found = [
        binding_fraction(
            _num(r.get("bandwidth_frac_measured")), _num(r.get("tflops_frac_measured"))
        )
        for r in records(rows)
    ]
    pairs = [f for f in found if f is not None]
    if not pairs:
        return None, None
    bounds = [b for b, _ in pairs]
    bound = max(set(bounds), key=bounds.count)
    return bound, float(np.median([frac for b, frac in pairs if b == bound]))


def _num(v: Any) -> float | None:
    return None if v is None or pd.isna(v) else float(v)


def _model_step(rows: pd.DataFrame) -> tuple[float | None, int]:
    """Median model-level ms/token over batches whose every layer kind was measured."""
    kinds = {_field(s, "layer_type", "") for s in rows["spec"]}
    if len(kinds) < 2 or "" in kinds:
        return None, 0
    keyed = add_key(rows, "step", LAYER_FIELDS)
    steps = []
    for _, group in keyed.groupby("step"):
        by_kind = {_field(r["spec"], "layer_type", ""): r for r in records(group)}
        if set(by_kind) != kinds:
            continue
        parts = [
            (float(r["latency_us"]), _num(r.get("plan_us")) or 0.0, int(r["num_layers"]))
            for r in by_kind.values()
        ]
        steps.append(model_per_token_ms(parts))
    if not steps:
        return None, 0
    return float(np.median(steps)), len(steps)


def answers_table(answers: list[ModelAnswer]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the per-model table (the report's and the terminal's)."""
    headers = ["model", "decode", "prefill", "decode bound", "model step"]
    table = []
    for a in answers:
        dec = a.decode.winner or "-"
        if a.decode.standings:
            dec += f" ({fmt_us(a.decode.standings[0].median_us)}, {a.decode.n_cases} cases)"
        pre = a.prefill.winner or "-"
        if a.prefill.standings:
            pre += f" ({fmt_us(a.prefill.standings[0].median_us)}, {a.prefill.n_cases} cases)"
        bound = "-"
        if a.bound and a.roof_frac is not None:
            bound = f"{a.bound}: {100 * a.roof_frac:.0f}% of {CEILING[a.bound]}"
        step = f"{a.step_ms:.2f} ms/token" if a.step_ms is not None else "-"
        table.append([a.model, dec, pre, bound, step])
    return headers, table
