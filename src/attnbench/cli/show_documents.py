"""`attnbench show` on the JSON documents other commands write, beside results files: a
replay (`replay --out`: the tables `replay` printed), a replay validation (`replay-validate`:
each variant's error over the drawn steps) and a timing-fidelity or SM-activity document
(`fidelity --out`: one line per case), a read-bandwidth probe (`scripts/h200/read_probe.py`:
one line per reader) and a device record (the device and its measured ceilings). Every table
is split to fit the terminal."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnbench.cli.common import console, fail, note, print_fitted

if TYPE_CHECKING:
    from rich.table import Table

    from attnbench.replay.document import ReplayDocument
    from attnbench.replay.validation_doc import ValidationDocument

KINDS = (
    "results rows, an fp8 study, a replay, replay-validation, fidelity, read-probe, device "
    "or traffic document"
)


def print_other_document(path: Path, data: Any) -> None:
    """`data` (the parsed JSON of `path`, not an fp8 study) printed as its kind of document;
    one line naming the kinds `show` reads when it is none of them."""
    from attnbench.analysis.fidelity import is_fidelity_document
    from attnbench.replay.document import is_replay_document
    from attnbench.replay.validation_doc import is_validation_document

    if is_replay_document(data):
        print_replay(path, data)
    elif is_validation_document(data):
        print_validation(path, data)
    elif is_fidelity_document(data):
        print_fidelity(path, data)
    elif _is_read_probe(data):
        print_read_probe(path, data)
    elif _is_device_record(data):
        print_device_record(path, data)
    elif isinstance(data, dict) and isinstance(data.get("traffic"), list):
        print_traffic(path, data)
    else:
        fail(f"{path}: not a document `attnbench show` reads ({KINDS})")


def _heading(text: str) -> None:
    console.print(text, style="bold", markup=False, highlight=False)


def print_replay(path: Path, data: Any) -> None:
    """The tables and lines `attnbench replay` printed when it wrote the document."""
    from attnbench.replay.document import ReplayDocumentError, parse_document

    try:
        doc = parse_document(data, str(path))
    except ReplayDocumentError as exc:
        fail(str(exc))
    _heading(f"{path}: replay of {doc.trace.name} on {doc.gpu}, {len(doc.runs)} runs")
    print_replay_summary(doc)


def print_replay_summary(doc: ReplayDocument) -> None:
    """What `replay` prints: its tables (split to fit the terminal), a line per candidate on
    how far it is validated (wrapped at spaces), the notes on extrapolated steps."""
    from attnbench.report.replay_tables import (
        answer_lines,
        escape,
        extrapolation_notes,
        printed_tables,
        trust_lines,
    )

    for table, keys in printed_tables(doc):
        print_fitted(table, keys)
    for line in answer_lines(doc):
        console.print(escape(line), highlight=False)
    for line in trust_lines(doc):
        console.print(escape(line), highlight=False)
    for n in extrapolation_notes(doc) + (doc.trust.notes if doc.trust else []):
        note(n)


def print_validation(path: Path, data: Any) -> None:
    """Per variant: the drawn steps measured, the cost model's error over them, whether it
    meets the target (held out: on every trace, and the worst trace)."""
    from attnbench.replay.validation_doc import ValidationDocumentError, parse_validation

    try:
        doc = parse_validation(data, str(path))
    except ValidationDocumentError as exc:
        fail(str(exc))
    traces = ", ".join(doc.traces) or "no trace named"
    _heading(f"{path}: replay validation ({doc.method}) on {traces}")
    print_fitted(validation_table(doc), 1)


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def validation_table(doc: ValidationDocument) -> Table:
    from rich.table import Table

    t = doc.target
    table = Table(
        title=f"cost model vs measured steps (target: median {_pct(t.median_abs_err)}, "
        f"p90 {_pct(t.p90_abs_err)} over >= {t.steps} steps)"
    )
    heads = ["variant", "measured", "median |err|", "p90 |err|", "max |err|", "bias"]
    heads += ["beyond rows", "meets", "worst trace"]
    for col in heads:
        table.add_column(col, justify="left" if col in ("variant", "worst trace") else "right")
    for name, v in sorted(doc.summary.items()):
        meets = "yes" if v.meets_target else "no"
        table.add_row(
            name,
            f"{v.measured}/{v.steps}",
            _pct(v.median_abs_err),
            _pct(v.p90_abs_err),
            _pct(v.max_abs_err),
            f"{100 * v.mean_err:+.1f}%",
            _pct(v.outside_share),
            meets,
            v.worst_trace or "-",
        )
    return table


def print_fidelity(path: Path, data: dict[str, Any]) -> None:
    """The table `attnbench fidelity` printed: one line per case and variant."""
    from attnbench.cli.fidelity import fidelity_table

    cases = data["cases"]
    done = "complete" if data.get("complete") else "not complete"
    _heading(f"{path}: timing fidelity, {len(cases)} cases ({done})")
    print_fitted(fidelity_table(cases), 2)


def _is_read_probe(data: Any) -> bool:
    rows = data.get("rows") if isinstance(data, dict) else None
    return isinstance(rows, list) and all(
        isinstance(r, dict) and {"reader", "gbps"} <= set(r) for r in rows
    )


def _is_device_record(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("device"), dict) and "ceilings" in data


def _num(value: Any, spec: str) -> str:
    return format(value, spec) if isinstance(value, int | float) else "-"


def print_read_probe(path: Path, data: dict[str, Any]) -> None:
    """One line per reader: the bytes read, its median time and the bandwidth it reached."""
    from rich.markup import escape
    from rich.table import Table

    gpu = (data.get("provenance") or {}).get("gpu", "unknown device")
    _heading(f"{path}: read bandwidth on {gpu}, {data.get('num_sms', '?')} SMs")
    table = Table(title="read bandwidth per reader")
    for col in ("reader", "GiB", "median µs", "GB/s", "repeats"):
        table.add_column(col, justify="left" if col == "reader" else "right")
    for r in data["rows"]:
        table.add_row(
            escape(str(r["reader"])),
            _num(r.get("gib"), "g"),
            _num(r.get("median_us"), ".1f"),
            _num(r.get("gbps"), ".0f"),
            _num(r.get("repeats"), "d"),
        )
    print_fitted(table, 1)


def print_device_record(path: Path, data: dict[str, Any]) -> None:
    """The device's name, SMs and memory, then its measured copy bandwidth and matmul rates."""
    from rich.markup import escape

    dev, ceil = data["device"], data.get("ceilings") or {}
    memory = dev.get("memory_bytes")
    mem = f", {memory / 2**30:.1f} GiB" if isinstance(memory, int | float) else ""
    _heading(f"{path}: {dev.get('name', 'unknown device')}, {dev.get('num_sms', '?')} SMs{mem}")
    lines = [f"copy bandwidth: {_num(ceil.get('copy_bandwidth_gbps'), '.0f')} GB/s"]
    for dtype, tflops in sorted((ceil.get("matmul_tflops") or {}).items()):
        lines.append(f"matmul {dtype}: {_num(tflops, '.0f')} TFLOP/s")
    for what, how in sorted((ceil.get("method") or {}).items()):
        lines.append(f"{what} measured by: {how}")
    for line in lines:
        console.print(escape(line), highlight=False)


def print_traffic(path: Path, data: Any) -> None:
    """A traffic document (`recommend --measure`'s replays, `deploy.traffic`): per GPU, model,
    engine and trace, the decode steps and the heaviest capture buckets."""
    from rich.table import Table

    from attnbench.analysis.engine_buckets import capture_sizes
    from attnbench.deploy.traffic import Traffic, per_bucket

    _heading(f"{path}: {len(data['traffic'])} replayed traffics (commit {data.get('commit', '?')})")
    table = Table("GPU", "model", "engine", "trace", "steps", "heaviest buckets")
    for d in data["traffic"]:
        t = Traffic.from_dict(d)
        share = per_bucket(t.histogram, capture_sizes("sglang" if t.engine == "sglang" else "vllm"))
        total = sum(share.values()) or 1
        top = sorted(share.items(), key=lambda kv: -kv[1])[:3]
        buckets = ", ".join(f"{b}: {100 * n / total:.0f}%" for b, n in top)
        gpu = t.gpu.removeprefix("NVIDIA ")
        table.add_row(gpu, f"{t.model} tp{t.tp}", t.engine, t.trace, f"{total:,}", buckets)
    print_fitted(table)
