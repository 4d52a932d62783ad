"""FlashInfer's known head_dim bugs as refusals decided in check() (issue 36): on the version they
were seen on, with the witness case left to run until the committed row that shows a bug is
cited, lifted on another version and by ATTNBENCH_RECHECK_KNOWN_BUGS; and each bug either cites
a committed row that shows it or has its witness in the headdim suite."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from attnbench.backends import flashinfer_bugs, flashinfer_refusal, known_bugs
from attnbench.backends.flashinfer import FlashInferBackend
from attnbench.backends.known_bugs import RECHECK_ENV, Evidence
from attnbench.config import Settings
from attnbench.results import read_results
from attnbench.workload.spec import WorkloadSpec
from attnbench.workload.suite import load_suite, suite_specs
from backend_cases import device

ROOT = Path(__file__).resolve().parents[1]
H200 = device(90)


@pytest.fixture(autouse=True)
def flashinfer_074(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on the H200: flashinfer-python 0.7.4 installed, no re-check asked for."""
    monkeypatch.setattr(known_bugs, "installed_version", lambda dist: "0.7.4")
    monkeypatch.delenv(RECHECK_ENV, raising=False)


def zoo_case(
    kind: str = "decode", head_dim: int = 96, kv_heads: int = 32, **kw: Any
) -> WorkloadSpec:
    """A case like the headdim suite's: 32 query heads, bf16, page 16; decode on a 256..64k
    batch of 32 labelled as the suite's mixed one, prefill of 8 x 2k."""
    decode = kind == "decode"
    kv = kw.pop("kv_lens", (256,) * 31 + (65536,) if decode else (2048,) * 8)
    fields: dict[str, Any] = {
        "kind": kind,
        "num_qo_heads": 32,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "kv_lens": kv,
        "qo_lens": (1,) * len(kv) if decode else kv,
        "page_size": 16,
        "lengths": "mixed(256..65536)" if decode else "ctx2048",
    }
    return WorkloadSpec(**(fields | kw))


def check(short: str, spec: WorkloadSpec) -> str | None:
    why = FlashInferBackend(short).check(spec, H200)
    return None if why is None else why.reason


def test_the_witness_records_the_crash_and_the_rest_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before its row was cited (session 14): the witness runs, to record the crash once."""
    uncited = dataclasses.replace(flashinfer_bugs.FA2_PREFILL_HEAD_DIM, evidence=None)
    bugs = (uncited, *flashinfer_bugs.BUGS[1:])
    monkeypatch.setattr(flashinfer_bugs, "BUGS", bugs)
    monkeypatch.setattr(flashinfer_bugs, "FA2_PREFILL_HEAD_DIM", uncited)
    witness = zoo_case()
    assert flashinfer_bugs.phi3_mini_case(witness)
    assert check("tc", witness) is None  # runs: the first run records the crash as a row
    for other in (zoo_case(kv_heads=8), zoo_case(head_dim=80), zoo_case(head_dim=112)):
        why = check("tc", other)
        assert why is not None
        assert why.startswith("flashinfer:tc: known bug of flashinfer-python 0.7.4: its FA2")
        assert "flashinfer-ai/flashinfer#4299" in why
        assert f"{RECHECK_ENV}=fa2-prefill-head-dim runs it anyway" in why
    for short in ("fa2", "auto", "ragged-fa2"):  # the same kernel on prefill
        why = check(short, zoo_case("prefill"))
        assert why is not None, short
        assert "fa2-prefill-head-dim" in why, short
    # multiples of 64, and auto where SM90's fa3 serves the prefill, are not affected
    assert check("tc", zoo_case(head_dim=192, kv_heads=8)) is None
    assert check("ragged-fa2", zoo_case("prefill", head_dim=192)) is None
    assert check("auto", zoo_case("prefill", head_dim=128)) is None


def test_the_cited_crash_refuses_its_witness_too() -> None:
    """Session 15 recorded the witness's crash (on an H100, the same SM90 kernels): the row is
    cited, and the witness is refused like every other case, naming the row."""
    why = check("tc", zoo_case())
    assert why is not None
    assert why.startswith("flashinfer:tc: known bug of flashinfer-python 0.7.4: its FA2")
    assert "measured: results/h100-headdim-fi.jsonl.gz: flashinfer:tc on decode/h32-32-d96" in why
    assert "(error)" in why


def test_fa2_paged_prefill_at_head_dim_192_is_refused_decode_is_not() -> None:
    """FA2's paged prefill stopped at head_dim 192 ('Invalid configuration'); tc's decode at
    192 (one query row per request) ran right, and fa3's prefill takes 192."""
    why = check("fa2", zoo_case("prefill", head_dim=192, kv_heads=8))
    assert why is not None
    assert "fa2-prefill-head-dim-192" in why
    assert "Invalid configuration" in why
    assert "measured: results/h100-headdim-fi.jsonl.gz: flashinfer:fa2 on prefill/h32-8-d192" in why
    auto = check("auto", zoo_case("prefill", head_dim=192, kv_heads=8))  # fa2 there: no fa3
    assert auto is not None
    assert "fa2-prefill-head-dim-192" in auto
    fa3 = check("fa3", zoo_case("prefill", head_dim=192, kv_heads=8))
    assert fa3 == "flashinfer:fa3: FA3 prefill takes head_dim in (64, 128, 256), not 192"
    assert check("tc", zoo_case(head_dim=192, kv_heads=8)) is None
    assert check("fa2", zoo_case("prefill", head_dim=256, kv_heads=8)) is None


def test_a_wrong_answer_bug_refuses_nothing_until_its_row_is_cited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Wrong answers cost no CUDA context: before its row is cited, every CUDA-core decode at
    an affected head_dim runs, so the first run records which ones are wrong (mismatch rows,
    never timed)."""
    uncited = dataclasses.replace(flashinfer_bugs.CUDA_CORE_DECODE_HEAD_DIM, evidence=None)
    bugs = (flashinfer_bugs.FA2_PREFILL_HEAD_DIM, uncited, flashinfer_bugs.FA2_PREFILL_HEAD_DIM_192)
    monkeypatch.setattr(flashinfer_bugs, "BUGS", bugs)
    monkeypatch.setattr(flashinfer_bugs, "CUDA_CORE_DECODE_HEAD_DIM", uncited)
    assert check("fa2", zoo_case()) is None
    assert check("fa2", zoo_case(kv_heads=8, kv_lens=(8192,) * 32, lengths="ctx8192")) is None
    assert check("auto", zoo_case(kv_heads=4)) is None


def test_cited_evidence_refuses_every_case_and_a_new_version_or_the_override_lifts_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    row = Evidence("results/h200-headdim.jsonl.gz", "decode/h32-32-d96/x#1", "flashinfer:fa2",
                   "mismatch")  # fmt: skip
    cited = dataclasses.replace(flashinfer_bugs.CUDA_CORE_DECODE_HEAD_DIM, evidence=row)
    monkeypatch.setattr(flashinfer_bugs, "BUGS", (flashinfer_bugs.FA2_PREFILL_HEAD_DIM, cited))
    monkeypatch.setattr(flashinfer_bugs, "CUDA_CORE_DECODE_HEAD_DIM", cited)
    why = check("fa2", zoo_case())  # the witness too, now
    assert why is not None
    assert "known bug of flashinfer-python 0.7.4: its CUDA-core decode kernel gives a wrong" in why
    assert "measured: results/h200-headdim.jsonl.gz: flashinfer:fa2 on decode/h32-32-d96" in why
    assert check("fa2", zoo_case(head_dim=80)) is not None  # every head_dim but 64/128/256
    assert check("fa2", zoo_case(head_dim=192)) is not None
    assert check("fa2", zoo_case(head_dim=128)) is None
    monkeypatch.setenv(RECHECK_ENV, "cuda-core-decode-head-dim")
    assert check("fa2", zoo_case()) is None
    monkeypatch.setenv(RECHECK_ENV, "all")
    assert check("tc", zoo_case(head_dim=80)) is None
    monkeypatch.delenv(RECHECK_ENV)
    monkeypatch.setattr(known_bugs, "installed_version", lambda dist: "0.7.5")
    assert check("fa2", zoo_case()) is None
    assert check("tc", zoo_case(head_dim=80)) is None


def test_library_refusals_name_the_installed_flashinfer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flashinfer_refusal, "installed_version", lambda dist: "0.7.4")
    why = flashinfer_refusal.library_refusal(
        "Error in function 'VariableLengthMergeStates' at include/flashinfer/attention/"
        "cascade.cuh:703: Unsupported head_dim: 96"
    )
    assert why == (
        "FlashInfer 0.7.4 refused the case inside its kernel dispatch (cascade.cuh:703): "
        "Unsupported head_dim: 96"
    )


@pytest.mark.parametrize("bug", flashinfer_bugs.BUGS, ids=lambda b: b.key)
def test_every_bug_cites_a_committed_row_or_its_witness_runs_in_the_headdim_suite(
    bug: known_bugs.KnownBug,
) -> None:
    if bug.evidence is None:
        specs = suite_specs(load_suite("headdim"), Settings())
        assert sum(bug.witness(s) for s in specs) == 1, "the suite must hold the witness case"
        return
    found = read_results(ROOT / bug.evidence.path)
    rows = [
        r
        for r in found.rows
        if (r.case_id, r.backend) == (bug.evidence.case_id, bug.evidence.backend)
    ]
    assert rows, f"{bug.evidence.cite()}: no such row"
    # the measured row; a later run of the same file records the refusal it became
    measured = [r for r in rows if r.status == bug.evidence.status]
    assert measured, f"{bug.evidence.cite()}: no {bug.evidence.status} row"
    assert all(r.status in (bug.evidence.status, "unsupported") for r in rows)
    header = found.header_of(measured[0])
    assert header is not None
    libraries = (header.provenance or {}).get("libraries") or {}
    assert libraries.get(bug.distribution) == bug.seen_on


@pytest.mark.usefixtures("isolated")
def test_the_override_is_an_attnbench_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings refuse unknown ATTNBENCH_* names; the override is one they know."""
    from attnbench.config import OTHER_ENV_VARS
    from attnbench.config_load import load_settings

    assert RECHECK_ENV in OTHER_ENV_VARS
    monkeypatch.setenv(RECHECK_ENV, "fa2-prefill-head-dim")
    settings, _ = load_settings({})
    assert settings.batch_size == 32
