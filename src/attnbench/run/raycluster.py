"""Cases as Ray tasks: the same jobs as the local worker pool, on a Ray cluster.

Each task runs one case (all its requested variants) on one GPU (`num_gpus=1`; Ray sets
CUDA_VISIBLE_DEVICES) or one CPU, and returns its rows; the driver writes them as tasks finish.
A task process measures its device's ceilings once and keeps them for later tasks. A task whose
worker dies is retried once by Ray (`max_retries=1`); if it fails again, each of its variants
becomes an `error` row. Needs `pip install 'attnbench[ray]'`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attnbench.measure.config import MeasureConfig
from attnbench.results import Details, ResultRow

_CEILINGS: dict[str, Any] = {}
CONNECT_TIMEOUT_S = 5.0


def check_address(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Fail at once, with one line, for a Ray address that cannot work: Ray itself retries an
    unreachable address for minutes. `local` starts a cluster here; `auto` is Ray's own lookup;
    anything else must be `[ray://]HOST:PORT` with something listening there."""
    import importlib.util
    import socket

    if importlib.util.find_spec("ray") is None:
        raise ValueError("ray: not installed; pip install 'attnbench[ray]'")
    if address in ("local", "auto"):
        return
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"ray={address!r}: allowed: local, auto, or [ray://]HOST:PORT")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ValueError(f"ray={address!r}: cannot reach {host}:{port} ({exc})") from None


class ClusterError(RuntimeError):
    """Ray could not start here or reach the cluster: one line naming the address."""


def connect(address: str) -> None:
    """Join (or, for `local`, start) the Ray cluster; ClusterError when that fails (Ray's
    own retries take about 30 s for an address where nothing answers as Ray)."""
    try:
        import ray
    except ImportError:
        raise ClusterError("ray: not installed; pip install 'attnbench[ray]'") from None
    if ray.is_initialized():
        return
    try:
        if address == "local":
            ray.init(include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError, TimeoutError...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ClusterError(f"--ray={address}: cannot connect: {first}") from None


def _run_job(
    spec_json: dict[str, Any],
    backend_names: tuple[str, ...],
    run_id: str,
    measure_cfg: MeasureConfig,
    device_kind: str,
) -> list[dict[str, Any]]:
    """Body of a Ray task (also callable directly, which the tests do)."""
    import socket

    from attnbench.backends import select_backends
    from attnbench.measure.hardware import Ceilings, detect, measure_ceilings
    from attnbench.run.sweep import SweepContext, run_case
    from attnbench.workload.spec import WorkloadSpec

    info = detect("cuda:0" if device_kind == "cuda" else "cpu")
    key = f"{info.kind}:{info.name}"
    if key not in _CEILINGS:
        _CEILINGS[key] = measure_ceilings(info, quick=info.kind == "cpu")
    ceilings: Ceilings = _CEILINGS[key]
    rows: list[dict[str, Any]] = []
    host = socket.gethostname()

    def on_row(row: ResultRow) -> None:
        tags = {"host": host, "ceilings": ceilings.as_dict()}
        row.details = Details.model_validate({**row.details, **tags})
        rows.append(row.model_dump(mode="json"))

    ctx = SweepContext(
        run_id=run_id, info=info, measure_cfg=measure_cfg, ceilings=ceilings, on_row=on_row
    )
    run_case(WorkloadSpec.model_validate(spec_json), select_backends(list(backend_names)), ctx)
    return rows


def run_on_ray(
    address: str,
    jobs: list[Any],
    run_id: str,
    measure_cfg: MeasureConfig,
    device_kind: str,
    write: Callable[[ResultRow], None],
) -> None:
    try:
        import ray
    except ImportError:
        raise ValueError("ray: not installed; pip install 'attnbench[ray]'") from None
    from attnbench.run.sweep import failure_row
    from attnbench.workload.spec import WorkloadSpec

    connect(address)
    gpus = 1 if device_kind == "cuda" else 0
    task = ray.remote(num_gpus=gpus, num_cpus=1, max_retries=1)(_run_job)
    pending = {task.remote(j.spec, j.backends, run_id, measure_cfg, device_kind): j for j in jobs}
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            job = pending.pop(ref)
            try:
                rows = ray.get(ref)
            except Exception as exc:  # the task died twice or raised: every variant is a row
                spec = WorkloadSpec.model_validate(job.spec)
                for name in job.backends:
                    reason = f"ray task failed: {type(exc).__name__}: {exc}"[:400]
                    write(failure_row(run_id, spec, name, "error", reason))
                continue
            for row in rows:
                write(ResultRow.model_validate(row))
