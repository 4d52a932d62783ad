"""`attnbench export FILE... --csv OUT`: one flat row per result for spreadsheets and
notebooks (the columns are `EXPORT_COLUMNS`)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from attnbench.cli.app import app
from attnbench.cli.common import (
    check_input_file,
    check_output_file,
    console,
    fail,
    note,
    write_output,
)

if TYPE_CHECKING:
    from attnbench.results import Header, ResultRow
    from attnbench.workload.spec import WorkloadSpec

EXPORT_COLUMNS = (
    "source",
    "run_id",
    "gpu",
    "case_id",
    "case",
    "kind",
    "model",
    "tp",
    "batch_size",
    "num_qo_heads",
    "num_kv_heads",
    "head_dim",
    "page_size",
    "kv_layout",
    "dtype",
    "kv_dtype",
    "lengths",
    "label",
    "kv_min",
    "kv_mean",
    "kv_max",
    "total_kv",
    "total_q",
    "tree",
    "shared_prefix_len",
    "backend",
    "resolved",
    "status",
    "reason",
    "latency_us",
    "ci_low_us",
    "ci_high_us",
    "p10_us",
    "p90_us",
    "iqr_us",
    "n_samples",
    "plan_us",
    "per_token_ms",
    "bytes_total",
    "flops",
    "bandwidth_gbps",
    "tflops",
    "bandwidth_frac_measured",
    "bandwidth_frac_read",
    "bandwidth_frac_spec",
    "tflops_frac_measured",
    "tflops_frac_spec",
    "rel_l2_err",
    "max_abs_err",
    "accuracy_budget",
    "accuracy_passed",
    "timer",
    "commit",
    "timestamp",
)


@app.command()
def export(
    files: Annotated[
        list[Path],
        typer.Argument(help="Results files (.jsonl) to export.", metavar="FILE"),
    ],
    csv_out: Annotated[
        Path,
        typer.Option(
            "--csv",
            help="CSV file to write: one row per result, the columns named in its first line.",
            metavar="OUT",
            show_default=False,
        ),
    ],
) -> None:
    """Write results as CSV: case fields, backend, status, latency statistics, bandwidth,
    TFLOP/s, fractions of the ceilings, accuracy and the commit that measured them."""
    from attnbench.results import ResultsFileError, read_results

    check_csv_target(csv_out, files)
    for path in files:
        check_input_file(path, "export")
        check_results_name(path)
    files = once_each(files)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=EXPORT_COLUMNS, lineterminator="\n")
    writer.writeheader()
    count = 0
    for path in files:
        try:
            rf = read_results(path)
        except ResultsFileError as exc:
            fail(str(exc))
        for warning in rf.warnings:
            note(warning)
        for row in rf.rows:
            writer.writerow(export_record(row, rf.header_of(row), path))
            count += 1
    write_output(csv_out, buffer.getvalue(), "--csv")
    console.print(f"{count} rows -> {csv_out}", markup=False, highlight=False)


def once_each(files: list[Path]) -> list[Path]:
    """The files in order, each once (the same file given twice would write its rows twice)."""
    seen: dict[Path, Path] = {}
    for f in files:
        if f.resolve() in seen:
            note(f"{f} is given twice (as {seen[f.resolve()]}): its rows are exported once")
        else:
            seen[f.resolve()] = f
    return list(seen.values())


def check_results_name(path: Path) -> None:
    """A JSON document (fp8 study, replay, fidelity) holds no result rows: say what it is."""
    from attnbench.results import is_results_path
    from attnbench.results.textfile import is_document_path

    if is_document_path(path) and not is_results_path(path):
        fail(
            f"{path}: a JSON document (an fp8 study, replay or fidelity record), not a results "
            f"file of rows (.jsonl, .jsonl.gz); `attnbench show {path}` prints it"
        )


def check_csv_target(csv_out: Path, files: list[Path]) -> None:
    """`--csv` may replace an earlier export (its first line is the header `export` writes),
    never one of the inputs or any other file."""
    check_output_file(csv_out, "--csv")
    if any(csv_out.resolve() == f.resolve() for f in files):
        fail(f"--csv={csv_out} is one of the results files being exported; give another file")
    if not csv_out.is_file() or csv_out.stat().st_size == 0:
        return
    try:
        with csv_out.open(encoding="utf-8") as fh:
            first = fh.readline().rstrip("\r\n")
    except (OSError, UnicodeDecodeError):
        first = ""
    if first != ",".join(EXPORT_COLUMNS):
        fail(
            f"--csv={csv_out} exists and is not a CSV that `attnbench export` wrote (its "
            "first line is not the export header); it would be replaced: give another file, "
            "or remove it first"
        )


def export_record(row: ResultRow, header: Header | None, path: Path) -> dict[str, Any]:
    """One result as the flat record `export` writes (None becomes an empty cell)."""
    from attnbench.report.table import short_case

    spec = row.spec
    return {
        "source": path.name,
        "run_id": row.run_id,
        "gpu": header.gpu if header is not None else "unknown",
        "case_id": row.case_id,
        "case": short_case(spec),
        **_spec_record(spec),
        "backend": row.backend,
        "resolved": row.resolved,
        "status": row.status,
        "reason": row.reason,
        **_measured_record(row),
        "timer": row.measurement.timer if row.measurement else "",
        "commit": str(header.provenance.get("git_sha", "")) if header is not None else "",
        "timestamp": row.timestamp,
    }


def _spec_record(spec: WorkloadSpec) -> dict[str, Any]:
    """The case's fields: kind, shape, layout, dtypes, lengths and their spread, tree."""
    kv = list(spec.kv_lens) or [0]
    return {
        "kind": spec.kind,
        "model": spec.model or "",
        "tp": spec.tp,
        "batch_size": len(spec.kv_lens),
        "num_qo_heads": spec.num_qo_heads,
        "num_kv_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "page_size": spec.page_size,
        "kv_layout": spec.kv_layout,
        "dtype": spec.dtype,
        "kv_dtype": spec.kv_dtype,
        "lengths": spec.lengths,
        "label": spec.label,
        "kv_min": min(kv),
        "kv_mean": sum(kv) / len(kv),
        "kv_max": max(kv),
        "total_kv": sum(spec.kv_lens),
        "total_q": sum(spec.qo_lens),
        "tree": spec.tree.name if spec.tree is not None else "",
        "shared_prefix_len": spec.shared_prefix_len,
    }


def _measured_record(row: ResultRow) -> dict[str, Any]:
    """The measurement's fields: latency and its spread, plan time, bytes, FLOPs, fractions of
    the ceilings, accuracy."""
    lat = row.latency
    acc = row.accuracy
    return {
        "latency_us": row.latency_us,
        "ci_low_us": lat.ci_low_us if lat else None,
        "ci_high_us": lat.ci_high_us if lat else None,
        "p10_us": lat.p10_us if lat else None,
        "p90_us": lat.p90_us if lat else None,
        "iqr_us": lat.iqr_us if lat else None,
        "n_samples": lat.n if lat else None,
        "plan_us": row.plan_us,
        "per_token_ms": row.per_token_ms,
        "bytes_total": row.bytes.total if row.bytes else None,
        "flops": row.flops,
        "bandwidth_gbps": row.bandwidth_gbps,
        "tflops": row.tflops,
        "bandwidth_frac_measured": row.bandwidth_frac_measured,
        "bandwidth_frac_read": row.bandwidth_frac_read,
        "bandwidth_frac_spec": row.bandwidth_frac_spec,
        "tflops_frac_measured": row.tflops_frac_measured,
        "tflops_frac_spec": row.tflops_frac_spec,
        "rel_l2_err": acc.rel_l2_err if acc else None,
        "max_abs_err": acc.max_abs_err if acc else None,
        "accuracy_budget": acc.budget if acc else None,
        "accuracy_passed": acc.passed if acc else None,
    }
