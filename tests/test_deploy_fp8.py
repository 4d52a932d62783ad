"""The fp8 evidence of a deployment answer (`deploy.fp8`): from the study of the answer's GPU
and head shape, else labelled with the GPU and heads it comes from; FA3's query quantisation;
the study's verdict on its bounds."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from attnbench.deploy import fp8
from attnbench.deploy.options import Option, OptionKey

H200 = "NVIDIA H200"
H100 = "NVIDIA H100 80GB HBM3"
FA3 = Option(OptionKey("vllm:flash-attn", "fp8_e4m3", 16), [])
TC = Option(OptionKey("sglang:flashinfer", "fp8_e4m3", 1), [])


def _err(rel: float) -> dict[str, float]:
    return {"rel_l2_err": rel}


def study_doc(
    gpu: str | None, heads: tuple[int, int, int], total: float = 0.05, *, within: bool = False
) -> dict[str, Any]:
    """A small fp8 study document: FA3 (query quantised) and FlashInfer tc kernel records at
    e4m3 per-tensor, the summary's needle recall and verdict."""
    q, kv, d = heads
    fa3 = {"variant": "flash-attn:fa3", "q_quant": _err(0.027), "total": _err(total)}
    tc = {"variant": "flashinfer:tc", "total": _err(total / 2)}
    kernel = [{**r, "format": "e4m3", "scheme": "tensor", "status": "ok"} for r in (fa3, tc)]
    needle = {"max+0.1": {"recall": 0.985, "recall_min": 0.9375}}
    return {
        "type": "fp8-study",
        "settings": {
            "device": "cuda:0" if gpu else "cpu",
            "num_qo_heads": q,
            "num_kv_heads": kv,
            "head_dim": d,
            "needle_targets": ["max+0.1", "max+1"],
            "rel_l2_bound": 0.05,
            "recall_bound": 0.99,
        },
        "provenance": {"gpu": gpu} if gpu else {},
        "kernel": kernel if gpu else [],
        "summary": [
            {
                "format": "e4m3",
                "scheme": "tensor",
                "rel_l2_err_max": 0.04 if within else 0.09,
                "rel_l2_err_max_data": "fa3_outliers",
                "needle": needle,
                "needle_recall_min": 0.995 if within else 0.985,
                "within_bounds": within,
            }
        ],
    }


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ATTNBENCH_RESULTS", str(tmp_path))
    return tmp_path


def _write(folder: Path, name: str, doc: dict[str, Any]) -> None:
    (folder / name).write_text(json.dumps(doc))


def test_the_answers_own_gpu_and_heads_are_quoted_when_studied(folder: Path) -> None:
    _write(folder, "h200-fp8-study.json", study_doc(H200, (32, 8, 128), 0.05))
    _write(folder, "h100-fp8-study-70b.json", study_doc(H100, (8, 1, 128), 0.03))
    e = fp8.study_error(FA3, "vllm", gpu=H100, heads=(8, 1, 128))
    assert e["source"] == "h100-fp8-study-70b.json"
    assert e["total_rel_l2_max"] == pytest.approx(0.03)
    assert (e["same_gpu"], e["same_heads"]) == (True, True)
    assert "not this answer's" not in e["scope"]
    e = fp8.study_error(FA3, "vllm", gpu=H200, heads=(32, 8, 128))
    assert e["source"] == "h200-fp8-study.json"
    assert e["scope"] == f"fp8 study on {H200}, heads 32/8 d128 (this answer's GPU and heads)"


def test_another_gpus_study_names_its_gpu_and_heads(folder: Path) -> None:
    """The H100 70B answer quoting the H200 8B study says so (it read "fp8 study")."""
    _write(folder, "h200-fp8-study.json", study_doc(H200, (32, 8, 128)))
    e = fp8.study_error(FA3, "vllm", gpu=H100, heads=(8, 1, 128))
    assert (e["same_gpu"], e["same_heads"]) == (False, False)
    assert e["scope"] == (
        f"fp8 study on {H200}, heads 32/8 d128 (not this answer's {H100}, 8/1 d128)"
    )
    assert e["scope"] in fp8.fp8_evidence(e)


def test_the_same_head_shape_is_preferred_to_the_same_gpu(folder: Path) -> None:
    _write(folder, "a-fp8-study.json", study_doc(H100, (32, 8, 128)))
    _write(folder, "b-fp8-study.json", study_doc(H200, (8, 1, 128)))
    e = fp8.study_error(FA3, "vllm", gpu=H100, heads=(8, 1, 128))
    assert e["source"] == "b-fp8-study.json"
    assert e["scope"].endswith(f"(not this answer's {H100})")


def test_a_cpu_study_says_cpu_and_a_study_with_kernel_figures_comes_first(folder: Path) -> None:
    _write(folder, "fp8-study-cpu.json", study_doc(None, (8, 1, 128)))
    e = fp8.study_error(TC, "sglang", gpu=H100, heads=(8, 1, 128))
    assert e["study_gpu"] == "CPU"
    assert e["scope"].startswith("fp8 study on CPU, heads 8/1 d128 (not this answer's")
    text = fp8.fp8_evidence(e)
    assert "no flashinfer:tc error figures in the study" in text
    assert "needle recall >= 93.8%" in text
    _write(folder, "h200-fp8-study.json", study_doc(H200, (32, 8, 128)))
    assert fp8.study_error(TC, "sglang", gpu=H100, heads=(8, 1, 128))["study_gpu"] == H200


def test_fa3s_error_includes_the_query_quantisation(folder: Path) -> None:
    """FA3 quantises q too: the line says so, gives q's share, and the needle recall (K/V
    quantisation only) is not quoted as FA3's."""
    _write(folder, "h200-fp8-study.json", study_doc(H200, (32, 8, 128), 0.054))
    e = fp8.study_error(FA3, "vllm", gpu=H200, heads=(32, 8, 128))
    text = fp8.fp8_evidence(e)
    assert e["query_quantised"] is True
    assert "flash-attn:fa3 with q and KV in e4m3" in text
    assert "rel. L2 <= 5.4%" in text
    assert "q's quantisation alone <= 2.7%" in text
    assert "KV quantisation only (the needle test keeps q 16-bit)" in text
    assert "+ e4m3 quantisation" not in text
    tc = fp8.fp8_evidence(fp8.study_error(TC, "sglang", gpu=H200, heads=(32, 8, 128)))
    assert "flashinfer:tc + e4m3 KV quantisation" in tc
    assert "q's quantisation" not in tc
    assert "KV quantisation only" not in tc


def test_outside_its_bounds_is_said_and_within_is_not(folder: Path) -> None:
    _write(folder, "h200-fp8-study.json", study_doc(H200, (32, 8, 128)))
    text = fp8.fp8_evidence(fp8.study_error(FA3, "vllm", gpu=H200, heads=(32, 8, 128)))
    assert (
        "the study judges e4m3 per-tensor outside its bounds (rel. L2 9.0% on fa3_outliers "
        "data > 5.0%; needle recall 98.5% < 99.0%)"
    ) in text
    _write(folder, "h200-fp8-study.json", study_doc(H200, (32, 8, 128), within=True))
    text = fp8.fp8_evidence(fp8.study_error(FA3, "vllm", gpu=H200, heads=(32, 8, 128)))
    assert "bounds" not in text


def test_no_study_and_16_bit_options_give_nothing(folder: Path) -> None:
    assert fp8.study_error(FA3, "vllm", gpu=H200, heads=(32, 8, 128)) == {}
    assert fp8.fp8_evidence({}) == "; no fp8 study figures for this kernel and format"
    _write(folder, "h200-fp8-study.json", study_doc(H200, (32, 8, 128)))
    sixteen = Option(OptionKey("vllm:flash-attn", "auto", 16), [])
    assert fp8.study_error(sixteen, "vllm") == {}


def test_without_the_answers_gpu_the_scope_names_the_study_only(folder: Path) -> None:
    _write(folder, "h200-fp8-study.json", study_doc(H200, (32, 8, 128)))
    e = fp8.study_error(FA3, "vllm")
    assert (e["same_gpu"], e["same_heads"]) == (None, None)
    assert e["scope"] == f"fp8 study on {H200}, heads 32/8 d128"


def test_the_committed_study_is_scoped() -> None:
    path = Path(__file__).resolve().parents[1] / "results" / fp8.STUDY_FILE
    if not path.exists():
        pytest.skip("no committed fp8 study")
    pool = fp8.studies(path.parent)
    assert any(s.name == fp8.STUDY_FILE for s in pool)
    assert any(s.gpu == "CPU" for s in pool)
    doc = next(s for s in pool if s.name == fp8.STUDY_FILE).doc
    e = fp8.study_error(FA3, "vllm", doc, gpu=H100, heads=(8, 1, 128))
    assert e["within_bounds"] is False
    assert e["query_quantised"] is True
    assert "not this answer's" in e["scope"]


def test_the_studies_folder_reads_a_long_list_of_results_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`$ATTNBENCH_RESULTS` may join many files (the committed set is over 4 kB of paths):
    the studies' folder is the first folder it names, else results/, never an OSError."""
    from attnbench.deploy.fp8 import results_dir

    files = [str(tmp_path / f"h100-run-{i:03d}-{'x' * 40}.jsonl.gz") for i in range(120)]
    monkeypatch.setenv("ATTNBENCH_RESULTS", os.pathsep.join(files))
    assert results_dir() == Path("results")
    monkeypatch.setenv("ATTNBENCH_RESULTS", os.pathsep.join([*files[:3], str(tmp_path)]))
    assert results_dir() == tmp_path
