"""Regenerate the committed extract of NVIDIA AIConfigurator's attention tables.

    pip download aiconfigurator-core==0.12.0 --no-deps -d /tmp
    pip install 'attnbench[aic]'        # pyarrow, to read the parquet files
    python scripts/aic_extract.py /tmp/aiconfigurator_core-0.12.0-*.whl

writes `src/attnbench/data/anchors/aiconfigurator-0.12.0.csv.gz` (`--out` to change): the rows
of `systems/data/{h100_sxm,h200_sxm}/attention/{vllm,sglang,trtllm}/<version>/`
`{generation,context}_attention_perf.parquet` whose heads are attnbench's committed engine
cases' (`SHAPES`), full attention only (window_size 0), one beam. The wheel is read in place
(a zip); it is never committed. The header lines (`# key: value`) name the wheel, its version
and sha256 and every parquet path read; `attnbench.analysis.aic` reads the file.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import re
import sys
import zipfile
from pathlib import Path

SYSTEMS = ("h100_sxm", "h200_sxm")
FRAMEWORKS = ("vllm", "sglang", "trtllm")
TABLES = ("generation_attention_perf", "context_attention_perf")
SHAPES = ((32, 8, 128), (8, 1, 128))
"""(num_qo_heads, num_kv_heads, head_dim) of the committed engine cases: Llama-3.1-8B at TP 1,
Llama-3.1-70B at TP 8."""
COLUMNS = (
    "system",
    "framework",
    "version",
    "kernel_source",
    "op_name",
    "batch_size",
    "isl",
    "step",
    "num_heads",
    "num_key_value_heads",
    "head_dim",
    "attn_dtype",
    "kv_cache_dtype",
    "latency_ms",
)
OUT = Path("src/attnbench/data/anchors/aiconfigurator-0.12.0.csv.gz")
_PATH = re.compile(
    r"aiconfigurator_core/systems/data/(?P<system>[^/]+)/attention/(?P<fw>[^/]+)/"
    r"(?P<version>[^/]+)/(?P<table>[a-z_]+)\.parquet$"
)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def parquet_paths(wheel: zipfile.ZipFile) -> list[str]:
    """The attention tables of the systems and frameworks read, in a stable order."""
    found = []
    for name in sorted(wheel.namelist()):
        m = _PATH.search(name)
        if m and m["system"] in SYSTEMS and m["fw"] in FRAMEWORKS and m["table"] in TABLES:
            found.append(name)
    return found


def table_rows(wheel: zipfile.ZipFile, name: str) -> list[list[str]]:
    """One parquet table's rows at `SHAPES`, full attention, as CSV fields."""
    import pandas as pd  # pyarrow reads the parquet (the `aic` extra)

    m = _PATH.search(name)
    assert m is not None
    frame = pd.read_parquet(io.BytesIO(wheel.read(name)))
    heads = list(zip(frame.num_heads, frame.num_key_value_heads, frame.head_dim, strict=True))
    keep = pd.Series([h in SHAPES for h in heads], index=frame.index)
    keep &= (frame.window_size == 0) & (frame.beam_width == 1)
    out = []
    for r in frame[keep].sort_values(list(COLUMNS[4:13])).itertuples(index=False):
        fields = [m["system"], str(r.framework), str(r.version), str(r.kernel_source)]
        fields += [str(r.op_name), *(str(int(getattr(r, c))) for c in COLUMNS[5:11])]
        fields += [str(r.attn_dtype), str(r.kv_cache_dtype), f"{float(r.latency):.6g}"]
        out.append(fields)
    return out


def header(wheel_path: Path, version: str, paths: list[str]) -> list[str]:
    lines = [
        "source: NVIDIA AIConfigurator per-op attention tables (Apache-2.0), read by "
        "scripts/aic_extract.py",
        f"wheel: {wheel_path.name}",
        f"version: {version}",
        f"sha256: {sha256(wheel_path)}",
        "heads: " + ", ".join(f"{q}/{k} d{d}" for q, k, d in SHAPES),
        "kept: window_size 0, beam_width 1; KV length = isl + step; latency in ms, 6 digits",
    ]
    lines += [f"parquet: {p}" for p in paths]
    return [f"# {line}" for line in lines]


def extract(wheel_path: Path, out: Path) -> int:
    m = re.match(r"aiconfigurator_core-([^-]+)-", wheel_path.name)
    if m is None:
        raise SystemExit(f"{wheel_path}: not an aiconfigurator_core wheel")
    with zipfile.ZipFile(wheel_path) as wheel:
        paths = parquet_paths(wheel)
        if not paths:
            raise SystemExit(f"{wheel_path}: no attention parquet tables for {SYSTEMS}")
        rows = [row for p in paths for row in table_rows(wheel, p)]
    text = "\n".join([*header(wheel_path, m[1], paths), ",".join(COLUMNS)])
    text += "\n" + "\n".join(",".join(r) for r in rows) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))
    return len(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path, help="aiconfigurator_core-<version>-*.whl")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if not args.wheel.is_file():
        print(f"{args.wheel}: no such file", file=sys.stderr)
        return 2
    n = extract(args.wheel, args.out)
    print(f"wrote {args.out}: {n} rows, {args.out.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
