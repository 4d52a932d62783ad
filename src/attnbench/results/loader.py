"""The one reader of results files: every command that reads rows goes through `read_results`
(or `iter_rows`).

A results file is JSON Lines: a `header` row, then `result` rows; a resumed run appends another
header and its rows. A last line an interrupted write left incomplete is skipped with a warning;
anything else that is not a header or result row of this schema version is a ResultsFileError
naming the file, the line and the field. `.jsonl.gz` files are read the same way (a gzip stream
cut short loses only its torn last line). Rows from older versions are migrated on the way in
(`results.legacy`). Files are parsed as JSON, never evaluated.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from attnbench.results.legacy import matmul_fractions, migrate_rows
from attnbench.results.rows import FINAL_STATUSES, SCHEMA_VERSION, Footer, Header, ResultRow
from attnbench.results.textfile import CompressedFileError, gunzip, is_gzip_name

SUFFIXES = (".jsonl", ".jsonl.gz")
"""Names results files end with."""


class ResultsFileError(ValueError):
    """A results file that cannot be read: names the file, the line and what is wrong."""


TRIALS_SUFFIXES = (".trials.jsonl", ".trials.jsonl.gz")


def is_trials_name(name: str) -> bool:
    """`x.trials.jsonl` or `x.trials.jsonl.gz`: every trial of a tune run, not result rows."""
    return name.endswith(TRIALS_SUFFIXES)


def is_results_path(path: Path | str) -> bool:
    """True for a name ending in `.jsonl` or `.jsonl.gz`."""
    return str(path).endswith(SUFFIXES)


@dataclass
class ResultFile:
    path: Path
    headers: list[Header] = field(default_factory=list)
    rows: list[ResultRow] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    migrated: int = 0
    """Rows renamed from an older version's meaning (`results.legacy`)."""
    footers: list[Footer] = field(default_factory=list)
    """One per run that ran to its end (`rows.Footer`: wall and setup time); none in files
    written before footers existed."""
    row_headers: list[int] = field(default_factory=list)
    """For each row, the index in `headers` of the header written before it: the run (and
    commit) that wrote the row, also in a resumed file whose runs share one run_id."""

    @property
    def header(self) -> Header | None:
        return self.headers[-1] if self.headers else None

    def header_of(self, row: ResultRow) -> Header | None:
        """The header of the run that wrote `row` (by run_id), else the file's last."""
        for h in reversed(self.headers):
            if h.run_id == row.run_id:
                return h
        return self.header

    def header_at(self, index: int) -> Header:
        """The header written before `rows[index]`."""
        return self.headers[self.row_headers[index]]

    def gpu_of(self, row: ResultRow) -> str:
        """The device `row` ran on, as its run's header names it (`unknown` without one)."""
        header = self.header_of(row)
        return header.gpu if header is not None else "unknown"


def _text(path: Path) -> tuple[str, list[str]]:
    """The file's text (decompressed for .gz) and warnings about how it ends."""
    data = path.read_bytes()
    warnings: list[str] = []
    if is_gzip_name(path):
        try:
            data, complete = gunzip(data, path)
        except CompressedFileError as exc:
            raise ResultsFileError(str(exc)) from None
        if not complete:
            warnings.append(f"{path}: gzip stream cut short (interrupted write)")
    try:
        return data.decode("utf-8"), warnings
    except UnicodeDecodeError:
        raise ResultsFileError(f"{path}: not a UTF-8 text file") from None


def read_results(path: Path | str) -> ResultFile:
    """Parse a results file (.jsonl or .jsonl.gz); a torn last line is skipped with a warning,
    anything else that is not a header or result row of this schema version raises
    ResultsFileError."""
    path = Path(path)
    if not path.is_file():
        raise ResultsFileError(f"{path}: no such results file")
    text, warnings = _text(path)
    lines = text.splitlines()
    out = ResultFile(path, warnings=warnings)
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            if lineno == len(lines) and not text.endswith("\n"):
                out.warnings.append(f"{path}:{lineno}: torn last line skipped (interrupted write)")
                continue
            raise ResultsFileError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
        _parse_line(out, data, lineno)
    if not out.headers:
        raise ResultsFileError(f"{path}: no header row: not an attnbench results file")
    out.migrated = migrate_rows(out.rows)
    matmul_fractions(out.rows, out.headers)
    return out


SCRIPTED_TIMER = "fake"
"""`measure.config.FAKE_TIMER`: the tests' scripted timer, whose latencies are not measurements."""


def read_for_analysis(path: Path | str) -> ResultFile:
    """`read_results` for the readers that analyse rows (`report`, `recommend`, `compare`,
    `replay`): a file holding a row timed by the test-only fake timer is refused
    (ResultsFileError naming the file, how many rows and the first one), since its latencies
    were scripted, not measured, and a figure built on them would read as real."""
    rf = read_results(path)
    scripted = [r for r in rf.rows if r.measurement and r.measurement.timer == SCRIPTED_TIMER]
    if scripted:
        first = scripted[0]
        raise ResultsFileError(
            f"{rf.path}: {len(scripted)} row(s) timed by the test-only fake timer (first: "
            f"{first.case_id} {first.backend}); their latencies are scripted, not measured, "
            "so report, recommend, compare and replay do not read this file"
        )
    return rf


def _parse_line(out: ResultFile, data: object, lineno: int) -> None:
    where = f"{out.path}:{lineno}"
    kind = data.get("type") if isinstance(data, dict) else None
    try:
        if kind == "header":
            assert isinstance(data, dict)
            version = data.get("schema_version")
            if version != SCHEMA_VERSION:
                raise ResultsFileError(
                    f"{where}: schema_version={version!r}; this attnbench reads "
                    f"schema_version={SCHEMA_VERSION}"
                )
            out.headers.append(Header.model_validate(data))
        elif kind == "result":
            if not out.headers:
                raise ResultsFileError(f"{where}: result row before any header")
            out.rows.append(ResultRow.model_validate(data))
            out.row_headers.append(len(out.headers) - 1)
        elif kind == "footer":
            if not out.headers:
                raise ResultsFileError(f"{where}: footer row before any header")
            out.footers.append(Footer.model_validate(data))
        else:
            raise ResultsFileError(
                f"{where}: not an attnbench row (type must be 'header', 'result' or 'footer')"
            )
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ResultsFileError(f"{where}: field {loc}: {first['msg']}") from None


def iter_rows(paths: Iterable[Path | str]) -> Iterator[tuple[ResultFile, ResultRow]]:
    """Every row of every file, with the file it came from (for its headers)."""
    for p in paths:
        f = read_results(p)
        for row in f.rows:
            yield f, row


def interrupted_first_write(path: Path) -> bool:
    """True for a file that holds only the start of a header row: a run killed while writing
    its first line. Such a file has no finished row; appending starts it afresh."""
    if not path.is_file():
        return False
    data = path.read_bytes()
    if b"\n" in data or not data.startswith(b'{"type": "header"'):
        return False
    try:
        json.loads(data)
    except ValueError:
        return True
    return False


def finished_keys(path: Path) -> set[tuple[str, str]]:
    """(case_id, backend) pairs already in `path` with a final status, for `--resume`.

    A case refused for want of free memory (`unsupported` with `details.memory`) is not final:
    memory may have been freed since, so a resumed run tries it again."""
    if not path.exists() or interrupted_first_write(path):
        return set()
    rows = read_results(path).rows
    return {r.key for r in rows if r.status in FINAL_STATUSES and "memory" not in r.details}
