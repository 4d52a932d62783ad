"""Serving replay: per-token latency (ITL) and TTFT under real traffic, from measured kernels.

    traffic.py     requests: real traces (workload.traces), the brief's `agents:N`, rate scaling
    deployment.py  model at its TP degree: GEMM shapes, weights, KV bytes, the KV page budget
    prefix.py      prefix cache over Mooncake's hash_ids (shared, refcounted, LRU blocks)
    steps.py       a step's exact batch and its features; the StepCost protocol
    simresult.py   the scheduler's limits, the recorded blocks of steps, the replay step by step
    simulator.py   continuous batching (chunked prefill or not), deterministic, exact steps
    fit.py         non-negative least squares, held-out error, fitted range
    costmodel.py   attention cost per variant fitted on sweep rows (decode, prefill, plan)
    gemm.py        non-attention roofline from the measured ceilings
    stepcost.py    step time = attention x layers + plan + GEMMs (hybrids, padded twins)
    summary.py     ITL / TTFT percentiles, throughput, time split, extrapolation
    study.py       candidates x rate scales, the p99-ITL crossing rate, padded vs ragged
    records.py     typed parts of the document: runs, crossings, padded vs ragged, live check
    document.py    the replay document (ReplayDocument) and its options (ReplayConfig)
    pipeline.py    results files + trace -> replay document (what the CLI runs)
    live.py        --live: the replayed steps measured on the GPU vs the model
    validate.py    replay-validate: drawn steps of several traces timed per variant vs the model
    validation_doc.py  the validation document read back, and found beside the rows
    trust.py       per candidate: validated error, steps beyond the fit; ties inside the error


Reads result files only; only `live` touches a GPU. The terminal tables (`report.replay_tables`) and
the report's "Serving replay" section (`report.replay_section`) render the document.
"""

from attnbench.replay.document import ReplayConfig, ReplayDocument, load_document
from attnbench.replay.pipeline import ReplayError, run_replay
from attnbench.replay.simresult import SchedulerConfig, SimResult
from attnbench.replay.simulator import simulate
from attnbench.replay.traffic import ReplayRequest, load_requests

__all__ = [
    "ReplayConfig",
    "ReplayDocument",
    "ReplayError",
    "ReplayRequest",
    "SchedulerConfig",
    "SimResult",
    "load_document",
    "load_requests",
    "run_replay",
    "simulate",
]
