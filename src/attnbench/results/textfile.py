"""Reading files that may be gzipped: the one place that decompresses what attnbench reads.

Committed results are stored compressed (`.jsonl.gz`, `.json.gz`) so the tree stays small. The
results loader reads rows through `gunzip`; every reader of a JSON document (fp8 study, replay,
fidelity) reads it through `read_json`, so `x.json` and `x.json.gz` read alike everywhere.
"""

from __future__ import annotations

import functools
import json
import zlib
from pathlib import Path
from typing import Any

DOCUMENT_SUFFIXES = (".json", ".json.gz")
"""Names JSON documents (fp8 studies, replay and fidelity documents) end with."""


class CompressedFileError(ValueError):
    """A file whose name ends in .gz but that is not (all) a gzip stream; names the file."""


FP8_STUDY_TYPE = "fp8-study"
"""The `type` of an fp8 study document (`attnbench fp8 --out`): here, apart from the study's
package, so readers that only look at the document need not import torch (its `quant`)."""


def is_document_path(path: Path | str) -> bool:
    """True for a name ending in `.json` or `.json.gz` (not `.jsonl`: those are results)."""
    return str(path).endswith(DOCUMENT_SUFFIXES)


def is_gzip_name(path: Path | str) -> bool:
    return str(path).endswith(".gz")


def gunzip(data: bytes, path: Path | str) -> tuple[bytes, bool]:
    """Every gzip member of `data` (a file `gzip` wrote, or appended to) decompressed, and
    whether the last member is complete (False: a write was cut short).

    Raises CompressedFileError when `data` is not gzip, or when a member after the first is
    damaged (the message gives the byte where the damage starts)."""
    chunks: list[bytes] = []
    offset = 0
    while offset < len(data):
        d = zlib.decompressobj(zlib.MAX_WBITS | 16)  # one gzip member
        try:
            chunks.append(d.decompress(data[offset:]))
        except zlib.error:
            raise CompressedFileError(_damage(path, data, offset)) from None
        if not d.eof:
            return b"".join(chunks), False
        offset = len(data) - len(d.unused_data)
    return b"".join(chunks), True


def _damage(path: Path | str, data: bytes, offset: int) -> str:
    if offset == 0 and not data.startswith(GZIP_MAGIC):
        return f"{path}: not a gzip file (the name ends in .gz)"
    return (
        f"{path}: damaged gzip stream: the member at byte {offset} of {len(data)} does not "
        "decompress (was something written to it uncompressed?); restore the file, e.g. with "
        "`git checkout` for a committed one"
    )


GZIP_MAGIC = b"\x1f\x8b"


def complete_gzip_prefix(data: bytes) -> int | None:
    """How many leading bytes of `data` are complete gzip members (what appending keeps);
    None when `data` is not gzip or is damaged before its last member."""
    offset = 0
    while offset < len(data):
        d = zlib.decompressobj(zlib.MAX_WBITS | 16)
        try:
            d.decompress(data[offset:])
        except zlib.error:
            return None
        if not d.eof:
            return offset
        offset = len(data) - len(d.unused_data)
    return offset


def read_bytes(path: Path | str) -> bytes:
    """The file's bytes, decompressed when its name ends in .gz.

    Raises OSError when it cannot be read, CompressedFileError (a ValueError) when a `.gz` name
    holds no gzip stream or one cut short."""
    data = Path(path).read_bytes()
    if not is_gzip_name(path):
        return data
    data, complete = gunzip(data, path)
    if not complete:
        raise CompressedFileError(f"{path}: gzip stream cut short (interrupted write)")
    return data


def read_text(path: Path | str) -> str:
    """The file's UTF-8 text, decompressed when its name ends in .gz.

    Raises OSError when it cannot be read, ValueError (CompressedFileError or
    UnicodeDecodeError) when its content is not gzip or not UTF-8 text."""
    return read_bytes(path).decode("utf-8")


def read_json(path: Path | str) -> Any:
    """A JSON document (`.json` or `.json.gz`), parsed as JSON (never evaluated).

    Raises OSError when it cannot be read, ValueError when it is not gzip, UTF-8 or JSON."""
    return json.loads(read_text(path))


def read_json_shared(path: Path | str) -> Any:
    """`read_json`, parsed once per process while the file keeps its size and time: the
    report's command and each of its sections look through the same documents (an fp8 study
    is megabytes of JSON), and its worker processes inherit what the command parsed. The same
    object for every caller: read it, never change it.

    Raises what `read_json` raises (nothing failed is kept)."""
    p = Path(path)
    stat = p.stat()
    return _parsed(str(p.resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _parsed(path: str, mtime_ns: int, size: int) -> Any:
    return read_json(path)
