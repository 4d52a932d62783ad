"""The head_dim section (issue 36) on rows built in the test: per head_dim the fastest kernel,
refusals with their reason (the head_dim left out, so one line covers them), wrong answers and
crashes named with the library version, FlashInfer's known bugs with the row to cite, and
Gemma-2's soft-capped cases."""

from __future__ import annotations

from pathlib import Path

from attnbench.analysis.headdim_study import general_reason, headdim_zoos, known_bug_status
from attnbench.report.headdim_section import headdim_section
from attnbench.results import ResultRow
from fixtures_results import CostModel, row, spec, write_results
from test_model_studies import by_first, report_data, table, texts

DIMS = (64, 96, 128, 256)
MIXED = [256] * 31 + [65536]
FA2 = CostModel(10.0, 2500.0, 300.0, dtypes=("bfloat16",))
TC = CostModel(8.0, 2800.0, 380.0, dtypes=("bfloat16",))
CRASH = "RuntimeError: CUDA error: an illegal memory access was encountered"
KNOWN = (
    "flashinfer:tc: known bug of flashinfer-python 0.7.4: its FA2 prefill kernel (also "
    "flashinfer:tc's decode) faults with an illegal memory access at a head_dim that is not a "
    "multiple of 64, losing the CUDA context (flashinfer-ai/flashinfer#4299)"
)


def _failed(s: object, backend: str, status: str, reason: str) -> ResultRow:
    assert hasattr(s, "case_id")
    return ResultRow(
        run_id="fake-h200",
        case_id=s.case_id,  # type: ignore[attr-defined]
        backend=backend,
        spec=s.model_dump(mode="json"),  # type: ignore[attr-defined]
        status=status,
        reason=reason,
    )


def zoo_rows() -> list[ResultRow]:
    """Decode at 4 head dims x (group 1 on the mixed batch, group 4 on 32 x 4k); at d96
    FlashInfer's fa2 is wrong on the witness case and tc crashes there, refused elsewhere."""
    out: list[ResultRow] = []
    for dim in DIMS:
        for kv_heads, lens, label in (
            (32, MIXED, "mixed(256..65536)"),
            (8, [4096] * 32, "ctx4096"),
        ):
            s = spec("decode", lens, num_kv_heads=kv_heads, head_dim=dim, dtype="bfloat16",
                     kv_dtype="bfloat16", lengths=label)  # fmt: skip
            out.append(row(s, "flash-attn:fa3"))
            witness = dim == 96 and kv_heads == 32
            if witness:
                out.append(_failed(s, "flashinfer:fa2", "mismatch", "rel_l2_err 7.2e-01 exceeds"))
                out.append(_failed(s, "flashinfer:tc", "error", CRASH))
            else:
                out.append(row(s, "flashinfer:fa2", model=FA2))
                if dim == 96:
                    out.append(_failed(s, "flashinfer:tc", "unsupported", KNOWN))
                else:
                    out.append(row(s, "flashinfer:tc", model=TC))
    return out


def test_the_zoo_names_the_fastest_refusals_wrong_answers_and_crashes(tmp_path: Path) -> None:
    path = write_results(tmp_path / "hd.jsonl", zoo_rows())
    data = report_data([path])
    (zoo,) = headdim_zoos(data.rows, {path.name: {"flashinfer-python": "0.7.4"}})
    assert zoo.head_dims == list(DIMS)
    assert zoo.points == ["g1 bs32 mixed(256..65536)", "g4 bs32 ctx4096"]
    sec = headdim_section(data)
    assert sec is not None
    rows = by_first(table(sec))
    assert set(rows) == {f"d{d}" for d in DIMS}
    assert rows["d96"]["flashinfer:fa2"].endswith("x; WRONG at 1")  # right on the other point
    assert rows["d96"]["flashinfer:tc"] == "error"  # the crash, then refused (worst first)
    assert rows["d128"]["flash-attn:fa3"] == "**fastest**"
    assert rows["d128"]["flashinfer:tc"].endswith("x")
    assert rows["d96"]["fastest (points won)"] == "flash-attn:fa3 (2 of 2)"
    assert rows["d64"]["fastest (points won)"] == "flash-attn:fa3 (1 of 2), flashinfer:tc (1 of 2)"
    assert rows["d64"]["flashinfer:tc"].endswith("x (fastest at 1 of 2)")
    words = texts(sec)
    assert (
        "`flashinfer:tc` refuses d96: known bug of flashinfer-python 0.7.4: its FA2 prefill"
        in words
    )
    assert "`flashinfer:fa2` WRONG on 1 cases (d96; flashinfer-python 0.7.4): rel_l2_err" in words
    assert f"`flashinfer:tc` error on 1 cases (d96; flashinfer-python 0.7.4): {CRASH}" in words
    # the known bugs: each refused citing its committed row; the witness rows here show them
    assert "`fa2-prefill-head-dim` (flashinfer-python 0.7.4): its FA2 prefill kernel" in words
    cite = "citing results/h100-headdim-fi.jsonl.gz: flashinfer:tc on decode/h32-32-d96"
    assert f"Refused in `check` on 0.7.4, {cite}" in words
    statuses = known_bug_status(data.rows, {path.name: {"flashinfer-python": "0.7.4"}})
    assert [s.state for s in statuses] == ["refused"] * 3
    assert [len(s.shown_by) for s in statuses] == [1, 1, 0]  # no d192 prefill rows here
    # rows from a file of another version show nothing
    other = known_bug_status(data.rows, {path.name: {"flashinfer-python": "0.8.0"}})
    assert [len(s.shown_by) for s in other] == [0, 0, 0]


def test_points_fewer_head_dims_share_stay_out_of_the_zoo(tmp_path: Path) -> None:
    """A d128-only point (another suite's rows) does not join the zoo; fewer than four head dims
    is no zoo."""
    extra = spec("decode", [1024] * 32, head_dim=128, dtype="bfloat16", kv_dtype="bfloat16")
    rows = [*zoo_rows(), row(extra, "flash-attn:fa3")]
    data = report_data([write_results(tmp_path / "hd.jsonl", rows)])
    (zoo,) = headdim_zoos(data.rows, {})
    assert "g4 bs32 ctx1024" not in zoo.points
    few = [r for r in zoo_rows() if r.spec.head_dim in (64, 96, 128)]
    data = report_data([write_results(tmp_path / "few.jsonl", few)])
    assert headdim_zoos(data.rows, {}) == []
    assert headdim_section(data) is None


def test_soft_capped_cases_name_who_ran_and_who_refused(tmp_path: Path) -> None:
    s = spec("decode", [8192] * 32, num_qo_heads=16, head_dim=256, dtype="bfloat16",
             kv_dtype="bfloat16", logits_soft_cap=50.0, model="gemma-2-9b", num_layers=21,
             layer_type="full_attention", lengths="ctx8192")  # fmt: skip
    rows = [
        row(s, "flashinfer:tc", model=TC),
        row(s, "flashinfer:fa2", model=FA2),
        _failed(s, "sdpa:cudnn", "unsupported", "no logit soft-cap"),
    ]
    data = report_data([write_results(tmp_path / "g.jsonl", rows)])
    sec = headdim_section(data)
    assert sec is not None
    capped = next(t for t in sec.blocks if getattr(t, "headers", [""])[0] == "case (soft-cap 50)")
    (line,) = capped.rows  # type: ignore[attr-defined]
    assert line[0].startswith("decode gemma-2-9b ctx8192 bs32 full")
    assert line[1].startswith("flashinfer:tc ")
    assert line[2].startswith("flashinfer:fa2 ")
    assert line[3] == "sdpa:cudnn"


def test_general_reason_leaves_the_head_dim_out() -> None:
    why = "flashinfer:fa3: FA3 prefill takes head_dim in (64, 128, 256), not 96"
    assert general_reason("flashinfer:fa3", why, 96) == (
        "FA3 prefill takes head_dim in (64, 128, 256), not d"
    )
    built = "flash_attn_interface 3 was built without a head_dim kernel that holds 80"
    assert general_reason("flash-attn:fa3", built, 80).endswith("that holds d")
    assert general_reason("x", "head_dim=72 unsupported: needs <= 256", 72).startswith("head_dim=d")
