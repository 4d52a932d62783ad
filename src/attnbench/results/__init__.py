"""Result rows and their JSONL store: the one format every layer above the sweep reads and
writes. `rows` (Header, ResultRow) and `records` (their typed parts), `loader` (the one reader,
with `legacy`'s migration), `writer`, `provenance`, `jsonsafe` (strict JSON for every writer)
and `textfile` (plain or gzipped: every JSON document is read through `read_json`). The public
names are re-exported here."""

from attnbench.results.jsonsafe import dumps, finite
from attnbench.results.legacy import mixed_plan_modes, plan_mode, plan_mode_label
from attnbench.results.loader import (
    SUFFIXES,
    TRIALS_SUFFIXES,
    ResultFile,
    ResultsFileError,
    finished_keys,
    interrupted_first_write,
    is_results_path,
    is_trials_name,
    iter_rows,
    read_for_analysis,
    read_results,
)
from attnbench.results.provenance import (
    LIBRARIES,
    git_sha,
    library_versions,
    now_iso,
    provenance,
)
from attnbench.results.records import (
    AccuracyRecord,
    BytesMoved,
    ClockSummary,
    Details,
    LatencyStats,
    MeasurementRecord,
)
from attnbench.results.rows import (
    FINAL_STATUSES,
    MAX_SAMPLES,
    SCHEMA_VERSION,
    STATUSES,
    Footer,
    Header,
    ResultRow,
    thin_samples,
)
from attnbench.results.textfile import (
    DOCUMENT_SUFFIXES,
    FP8_STUDY_TYPE,
    CompressedFileError,
    is_document_path,
    read_json,
    read_json_shared,
    read_text,
)
from attnbench.results.writer import ResultWriter, drop_torn_tail

__all__ = [
    "DOCUMENT_SUFFIXES",
    "FINAL_STATUSES",
    "FP8_STUDY_TYPE",
    "LIBRARIES",
    "MAX_SAMPLES",
    "SCHEMA_VERSION",
    "STATUSES",
    "SUFFIXES",
    "TRIALS_SUFFIXES",
    "AccuracyRecord",
    "BytesMoved",
    "ClockSummary",
    "CompressedFileError",
    "Details",
    "Footer",
    "Header",
    "LatencyStats",
    "MeasurementRecord",
    "ResultFile",
    "ResultRow",
    "ResultWriter",
    "ResultsFileError",
    "drop_torn_tail",
    "dumps",
    "finished_keys",
    "finite",
    "git_sha",
    "interrupted_first_write",
    "is_document_path",
    "is_results_path",
    "is_trials_name",
    "iter_rows",
    "library_versions",
    "mixed_plan_modes",
    "now_iso",
    "plan_mode",
    "plan_mode_label",
    "provenance",
    "read_for_analysis",
    "read_json",
    "read_json_shared",
    "read_results",
    "read_text",
    "thin_samples",
]
