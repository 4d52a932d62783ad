from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest

from attnbench.results import (
    SCHEMA_VERSION,
    Details,
    Header,
    ResultRow,
    ResultsFileError,
    ResultWriter,
    dumps,
    finished_keys,
    finite,
    is_results_path,
    is_trials_name,
    read_results,
    read_text,
    thin_samples,
)
from attnbench.workload.spec import WorkloadSpec

ROOT = Path(__file__).resolve().parents[1]
SPEC = WorkloadSpec(
    kind="decode", num_qo_heads=4, num_kv_heads=2, head_dim=16, kv_lens=(64, 96), qo_lens=(1, 1)
)


def _row(case: str, status: str = "ok", **kw: object) -> ResultRow:
    return ResultRow(
        run_id="r",
        case_id=case,
        backend="reference",
        status=status,  # type: ignore[arg-type]
        spec=SPEC.model_dump(mode="json"),
        **kw,
    )


def _write(path: Path, rows: list[ResultRow]) -> None:
    with ResultWriter(path) as w:
        w.write(Header(run_id="r", provenance={"attnbench": "test"}))
        for r in rows:
            w.write(r)


def test_round_trip_and_resume_keys(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    _write(p, [_row("a", latency_us=1.5), _row("b", "error", reason="boom"), _row("c", "mismatch")])
    f = read_results(p)
    assert [r.case_id for r in f.rows] == ["a", "b", "c"]
    assert f.rows[0].latency_us == 1.5
    assert finished_keys(p) == {("a", "reference"), ("c", "reference")}  # errors are retried


def test_nan_is_stored_as_null(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    _write(p, [_row("a", accuracy={"rel_l2_err": float("nan")})])
    acc = read_results(p).rows[0].accuracy
    assert acc is not None
    assert acc.rel_l2_err is None
    assert acc.model_dump(mode="json") == {"rel_l2_err": None}  # no key added on the way


def test_torn_last_line_is_skipped_with_a_warning(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    _write(p, [_row("a"), _row("b")])
    text = p.read_text()
    p.write_text(text[:-40])  # a crash in the middle of the last write
    f = read_results(p)
    assert [r.case_id for r in f.rows] == ["a"]
    assert "torn last line" in f.warnings[0]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"type": "header", "schema_version": 99, "run_id": "x", "provenance": {}}\n',
            "schema_version=99",
        ),
        ('{"hello": "world"}\n', "not an attnbench row"),
        ("[1, 2, 3]\n", "not an attnbench row"),
        ("not json at all\n{}\n", "not JSON"),
        ("", "no header row"),
        (json.dumps({"type": "result", "run_id": "r"}) + "\n", "before any header"),
    ],
)
def test_foreign_or_future_files_give_one_line_errors(
    tmp_path: Path, content: str, message: str
) -> None:
    p = tmp_path / "x.jsonl"
    p.write_text(content)
    with pytest.raises(ResultsFileError, match=message):
        read_results(p)


def test_bad_row_names_the_field(tmp_path: Path) -> None:
    p = tmp_path / "x.jsonl"
    header = {"type": "header", "schema_version": SCHEMA_VERSION, "run_id": "r", "provenance": {}}
    row = {
        "type": "result",
        "run_id": "r",
        "case_id": "a",
        "backend": "b",
        "status": "great",
        "spec": SPEC.model_dump(mode="json"),
    }
    p.write_text(json.dumps(header) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(ResultsFileError, match=r"x.jsonl:2: field status"):
        read_results(p)


def test_thin_samples() -> None:
    assert len(thin_samples([1.0] * 1000, limit=256)) == 250
    assert thin_samples([1.23456]) == [1.235]


def test_bad_spec_names_the_field(tmp_path: Path) -> None:
    p = tmp_path / "x.jsonl"
    _write(p, [_row("a")])
    text = p.read_text().replace('"page_size": 16', '"page_size": 3')
    p.write_text(text)
    with pytest.raises(ResultsFileError, match=r"x.jsonl:2: field spec: .*page_size=3"):
        read_results(p)


# -- typed rows -------------------------------------------------------------------------------


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in read_text(path).splitlines() if line.strip()]


def test_a_row_built_from_dicts_is_typed_and_writes_the_same_keys(tmp_path: Path) -> None:
    """The sweep's keyword arguments (plain dicts) become typed records; the JSON keeps exactly
    the keys it was given (a partial accuracy stays partial; no None for unset fields)."""
    latency = {"n": 3, "median_us": 2.0, "mean_us": 2.1, "std_us": 0.1, "min_us": 1.9}
    latency |= {"max_us": 2.3, "p10_us": 1.9, "p90_us": 2.3, "q1_us": 1.95, "q3_us": 2.2}
    latency |= {"iqr_us": 0.25, "ci_low_us": 1.9, "ci_high_us": 2.3, "num_outliers": 0}
    latency |= {"rel_ci": math.inf}
    clocks = {"source": "nvml", "sm_mhz_min": 1980, "sm_mhz_median": 1980, "sm_mhz_max": 1980}
    clocks |= {"max_sm_mhz": 1980, "throttled_samples": 0, "samples": 3, "slowdowns": []}
    measurement = {"timer": "cpu", "l2_policy": "flush", "warmup_runs": 2, "repeats": 3}
    measurement |= {"converged": True, "notes": [], "clocks": clocks}
    details = {"kv_cache": "paged", "worker": 1, "knobs": {"tile": 64}, "memory": {"free": 1}}
    row = _row(
        "a",
        latency=latency,
        accuracy={"rel_l2_err": 1e-3, "passed": True, "precision": "bfloat16"},
        measurement=measurement,
        bytes={"q": 1, "kv": 2, "o": 3, "page_table": 4, "total": 10},
        details=details,
    )
    assert row.spec.batch_size == 2
    assert row.spec.total_kv == 160
    assert not row.spec.is_fp8
    assert row.latency is not None
    assert row.latency.median_us == 2.0
    assert row.measurement is not None
    assert row.measurement.clocks is not None
    assert row.measurement.clocks.sm_mhz_median == 1980
    assert row.bytes is not None
    assert row.bytes.total == 10
    assert row.details.kv_cache == "paged"
    assert row.details.worker == 1
    assert row.details.get("knobs") == {"tile": 64}  # an unknown key, kept as it came
    assert row.details.get("absent", "x") == "x"
    assert "memory" in row.details
    assert "traceback" not in row.details
    assert {**row.details} == details == dict(row.details)

    p = tmp_path / "r.jsonl"
    _write(p, [row])
    written = _lines(p)[1]
    assert written["latency"] == latency | {"rel_ci": None}  # inf is not JSON
    assert written["accuracy"] == {"rel_l2_err": 1e-3, "passed": True, "precision": "bfloat16"}
    assert written["measurement"] == measurement
    assert written["details"] == details
    again = read_results(p).rows[0]
    assert again.model_dump(mode="json") == written


def test_assigning_or_copying_with_a_dict_gives_the_typed_record() -> None:
    """What worker and tune code does: `row.details = {**row.details, ...}` and
    `row.model_copy(update={"details": {...}})` both end as `Details`."""
    row = _row("a", details={"kv_cache": "contiguous"})
    row.details = {**row.details, "worker": 0, "gpu": 1}  # type: ignore[assignment]
    assert isinstance(row.details, Details)
    assert row.details.gpu == 1
    copy = row.model_copy(update={"details": {**row.details, "tune": {"stage": 1}}})
    assert isinstance(copy.details, Details)
    assert copy.details["tune"] == {"stage": 1}
    assert copy.details.kv_cache == "contiguous"
    assert "tune" not in row.details


def test_every_committed_results_file_round_trips_unchanged() -> None:
    """Old and new files are interchangeable: each committed row, read and written again, is
    the JSON it was (apart from the legacy FA3 rename, top-level fields added since, and the
    FLOP/s fractions of rows that multiplied in fp8, now of the fp8 matmul ceiling)."""
    paths = sorted(
        p
        for p in (ROOT / "results").rglob("*.jsonl*")
        if is_results_path(p) and not is_trials_name(p.name)
    )
    assert len(paths) >= 10
    assert any(p.name.endswith(".gz") for p in paths)
    for path in paths:
        stored = [d for d in _lines(path) if d["type"] == "result"]
        rows = read_results(path).rows
        assert len(rows) == len(stored)
        for before, row in zip(stored, rows, strict=True):
            after = json.loads(dumps(row.model_dump(mode="json")))
            after["backend"] = before["backend"]
            if row.tflops_ceiling == "fp8_e4m3" and "tflops_ceiling" not in before:
                for key in ("tflops_frac_measured", "tflops_frac_spec"):
                    after[key] = before[key]
            assert {k: v for k, v in after.items() if k in before} == before, path


# -- the one loader: gzip, resume headers, legacy FA3 rows ------------------------------------


def test_gzip_files_read_like_plain_ones_and_a_cut_stream_loses_only_its_tail(
    tmp_path: Path,
) -> None:
    packed = ROOT / "results" / "h200-brief.jsonl.gz"
    plain = tmp_path / "brief.jsonl"
    plain.write_bytes(gzip.decompress(packed.read_bytes()))
    a, b = read_results(plain), read_results(packed)
    assert [r.model_dump() for r in a.rows] == [r.model_dump() for r in b.rows]
    assert not b.warnings

    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(packed.read_bytes()[: len(packed.read_bytes()) // 2])
    f = read_results(cut)
    assert 0 < len(f.rows) < len(a.rows)
    assert any("gzip stream cut short" in w for w in f.warnings)
    assert any("torn last line" in w for w in f.warnings)

    (tmp_path / "bad.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(ResultsFileError, match="not a gzip file"):
        read_results(tmp_path / "bad.jsonl.gz")


def test_a_resumed_file_has_a_header_per_run_and_rows_find_theirs(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    with ResultWriter(p) as w:
        w.write(Header(run_id="one", provenance={}, device={"name": "GPU A"}))
        w.write(_row("a").model_copy(update={"run_id": "one"}))
    with ResultWriter(p) as w:  # --resume appends a header and its rows
        w.write(Header(run_id="two", provenance={"gpu": "GPU B"}))
        w.write(_row("b").model_copy(update={"run_id": "two"}))
    f = read_results(p)
    assert [h.run_id for h in f.headers] == ["one", "two"]
    assert [f.gpu_of(r) for r in f.rows] == ["GPU A", "GPU B"]


def test_old_fa3_rows_ran_on_a_contiguous_cache_and_load_under_that_name() -> None:
    """Before FA3 ran on the paged cache, `flash-attn:fa3` was the contiguous-copy variant."""
    old = read_results(ROOT / "results" / "archive" / "h200-brief70b.jsonl.gz")
    fa3 = [r for r in old.rows if r.library == "flash-attn"]
    assert fa3
    assert {r.backend for r in fa3} == {"flash-attn:fa3-contiguous"}
    assert old.migrated == len(fa3)
    assert {r.details.kv_cache for r in fa3} <= {"contiguous", "packed"}

    new = read_results(ROOT / "results" / "h200-brief.jsonl.gz")
    assert new.migrated == 0
    by_name: dict[str, set[str | None]] = {}
    for r in new.rows:
        by_name.setdefault(r.backend, set()).add(r.details.kv_cache)
    assert by_name["flash-attn:fa3"] == {"paged"}
    assert by_name["flash-attn:fa3-contiguous"] <= {"contiguous", "packed"}


def _fa3(run_id: str, details: dict[str, Any], backend: str = "flash-attn:fa3") -> ResultRow:
    return _row("c", details=details).model_copy(update={"run_id": run_id, "backend": backend})


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([_fa3("r", {"kv_cache": "paged"})], ["flash-attn:fa3"]),
        ([_fa3("r", {"kv_cache": "contiguous"})], ["flash-attn:fa3-contiguous"]),
        ([_fa3("r", {"contiguous": True})], ["flash-attn:fa3-contiguous"]),
        (
            [_fa3("r", {"kv_cache": "packed"}, "flash-attn:fa3+tuned")],
            ["flash-attn:fa3-contiguous+tuned"],
        ),
        ([_fa3("r", {})], ["flash-attn:fa3-contiguous"]),  # an old failure row
        (  # a new run's failure row: its run already knows the variants apart
            [_fa3("r", {}), _fa3("r", {"kv_cache": "contiguous"}, "flash-attn:fa3-contiguous")],
            ["flash-attn:fa3", "flash-attn:fa3-contiguous"],
        ),
        ([_fa3("r", {"kv_cache": "contiguous"}, "flash-attn:fa2")], ["flash-attn:fa2"]),
        (  # a run of refusals only, written after FA3 went paged (FA3 refusing a soft-cap)
            [_fa3("r", {}).model_copy(update={"timestamp": "2026-12-04T19:15:21+00:00"})],
            ["flash-attn:fa3"],
        ),
    ],
)
def test_legacy_fa3_rule(tmp_path: Path, rows: list[ResultRow], expected: list[str]) -> None:
    p = tmp_path / "r.jsonl"
    _write(p, rows)
    assert [r.backend for r in read_results(p).rows] == expected


def test_finite_cleans_at_any_depth() -> None:
    doc = {"a": [1.0, math.nan, (math.inf, -math.inf)], "b": {"c": math.nan}, "d": "x"}
    assert finite(doc) == {"a": [1.0, None, [None, None]], "b": {"c": None}, "d": "x"}
    assert json.loads(dumps(doc)) == finite(doc)


def test_a_folder_with_plain_and_gzipped_twins_is_refused(tmp_path: Path) -> None:
    """Copying a session's plain file beside its committed .gz would double every row."""
    import gzip

    from attnbench.analysis.frame import NoResultsError, resolve_paths

    src = ROOT / "results" / "h200-fp8.jsonl.gz"
    (tmp_path / "h200-fp8.jsonl").write_bytes(gzip.decompress(src.read_bytes()))
    assert resolve_paths([tmp_path]) == [tmp_path / "h200-fp8.jsonl"]
    (tmp_path / "h200-fp8.jsonl.gz").write_bytes(src.read_bytes())
    with pytest.raises(NoResultsError, match=r"h200-fp8.jsonl and h200-fp8.jsonl.gz are both"):
        resolve_paths([tmp_path])
