"""The device: its facts, its spec-sheet peaks, and ceilings measured on it in the same run.

Measured ceilings are what every result is a fraction of: a large device-to-device copy
(bytes read + bytes written over time) for bandwidth, large matrix products for TFLOP/s.
Spec-sheet peaks are kept beside them, never instead of them.
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass, field

import torch

from attnbench.measure import metrics
from attnbench.measure.config import MeasureConfig

DEVICES = ("auto", "cpu", "cuda", "cuda:N")


@dataclass(frozen=True)
class SpecSheet:
    """Vendor datasheet peaks (dense, no sparsity)."""

    bandwidth_gbps: float
    tflops: dict[str, float]


# NVIDIA datasheets: H100 SXM5 3.35 TB/s, H200 SXM 4.8 TB/s; dense bf16 989, fp8 1979 TFLOP/s.
SPEC_SHEETS: dict[str, SpecSheet] = {
    "H200": SpecSheet(4800.0, {"bfloat16": 989.0, "float16": 989.0, "fp8_e4m3": 1979.0}),
    "H100": SpecSheet(3350.0, {"bfloat16": 989.0, "float16": 989.0, "fp8_e4m3": 1979.0}),
    "A100": SpecSheet(2039.0, {"bfloat16": 312.0, "float16": 312.0}),
}


@dataclass(frozen=True)
class DeviceInfo:
    kind: str
    """`cpu` or `cuda`."""
    index: int
    name: str
    compute_capability: tuple[int, int] | None
    num_sms: int
    l2_bytes: int
    memory_bytes: int

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.kind, self.index) if self.kind == "cuda" else torch.device("cpu")

    @property
    def sm(self) -> int:
        """Compute capability as one number (90 for Hopper), 0 on CPU."""
        cc = self.compute_capability
        return cc[0] * 10 + cc[1] if cc else 0

    @property
    def spec_sheet(self) -> SpecSheet | None:
        for key, sheet in SPEC_SHEETS.items():
            if key in self.name:
                return sheet
        return None

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["sm"] = self.sm
        return d


def resolve_device(device: str) -> tuple[str, str | None]:
    """Map a device setting to a concrete torch device string.

    Returns (device, note): `auto` becomes `cuda:0` when a GPU is visible, else `cpu` with a note
    saying so. Raises ValueError for an unknown spelling or a GPU that is not there.
    """
    d = device.strip().lower()
    if d == "auto":
        if torch.cuda.is_available():
            return "cuda:0", None
        return "cpu", "no CUDA GPU found: running the CPU-capable backends on a small suite"
    if d == "cpu":
        return "cpu", None
    if d == "cuda" or d.startswith("cuda:"):
        index = d.partition(":")[2] or "0"
        if not index.isdigit():
            raise ValueError(f"device={device!r} is not valid; allowed: {', '.join(DEVICES)}")
        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r}: no CUDA GPU is visible here; use cpu or auto")
        if int(index) >= torch.cuda.device_count():
            raise ValueError(
                f"device={device!r}: only {torch.cuda.device_count()} GPU(s) are visible"
            )
        return f"cuda:{index}", None
    raise ValueError(f"device={device!r} is not valid; allowed: {', '.join(DEVICES)}")


def detect(device: str) -> DeviceInfo:
    dev = torch.device(device)
    if dev.type == "cuda":
        index = dev.index or 0
        props = torch.cuda.get_device_properties(index)
        return DeviceInfo(
            kind="cuda",
            index=index,
            name=props.name,
            compute_capability=(props.major, props.minor),
            num_sms=props.multi_processor_count,
            l2_bytes=int(getattr(props, "L2_cache_size", 50 << 20)),
            memory_bytes=int(props.total_memory),
        )
    return DeviceInfo(
        kind="cpu",
        index=0,
        name=platform.processor() or platform.machine() or "cpu",
        compute_capability=None,
        num_sms=torch.get_num_threads(),
        l2_bytes=0,
        memory_bytes=0,
    )


@dataclass
class Ceilings:
    """Measured on this device in this run; the denominators of every `*_frac_measured`."""

    copy_bandwidth_gbps: float
    """Device-to-device copy: (bytes read + bytes written) / median time."""
    read_bandwidth_gbps: float | None = None
    """The fastest plain streaming read of a large buffer (`stream_read.measure_read_ceiling`: a
    torch sum; on a GPU also a Triton reader): the ceiling of read-only kernels such as decode,
    which pass the copy figure (no read/write turnaround)."""
    matmul_tflops: dict[str, float] = field(default_factory=dict)
    """Large square matrix product per input dtype (bfloat16, fp8_e4m3 where supported)."""
    method: dict[str, str] = field(default_factory=dict)

    def tflops_for(self, mma_dtype: str) -> float | None:
        """The matmul ceiling of a kernel that multiplies in `mma_dtype` (`metrics.mma_dtype`):
        the fp8 GEMM's for an fp8 format, the bf16 GEMM's for 16 bits; None where that one was
        not measured (never the other precision's)."""
        return self.matmul_tflops.get(metrics.matmul_ceiling_key(mma_dtype))

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _copy_ceiling(copy_bytes: int, cfg: MeasureConfig, dev: torch.device) -> tuple[float, str]:
    """The copy bandwidth (read + write bytes over the median `copy_`) and how it was taken;
    the buffers are freed before it returns."""
    from attnbench.measure.engine import measure

    src = torch.empty(copy_bytes, dtype=torch.uint8, device=dev).random_(0, 255)
    dst = torch.empty_like(src)
    m = measure(lambda: dst.copy_(src), cfg, device=dev, graph_safe=False)
    copy_gbps = metrics.bandwidth_gbps(2 * copy_bytes, m.stats.median_us)
    src = dst = torch.empty(0, device=dev)  # free the copy buffers before the matmuls
    how = (
        f"torch copy_ of {copy_bytes >> 20} MiB, read+write bytes / median of "
        f"{m.stats.n} ({m.timer})"
    )
    return copy_gbps, how


def _matmul_ceilings(
    info: DeviceInfo, n: int, cfg: MeasureConfig, method: dict[str, str]
) -> dict[str, float]:
    """TFLOP/s of an n x n x n matmul in bf16 (float32 on the CPU) and, from SM 8.9, fp8 e4m3;
    `method` gains how each was taken (or why fp8 was not)."""
    from attnbench.measure.engine import measure

    dev = info.torch_device
    cuda = dev.type == "cuda"
    tflops: dict[str, float] = {}
    gen = torch.Generator(device=dev).manual_seed(0)
    mm_dtype = torch.bfloat16 if cuda else torch.float32
    a = torch.randn(n, n, device=dev, dtype=mm_dtype, generator=gen)
    b = torch.randn(n, n, device=dev, dtype=mm_dtype, generator=gen)
    m = measure(lambda: a @ b, cfg, device=dev, graph_safe=False)
    key = "bfloat16" if cuda else "float32"
    tflops[key] = 2 * n**3 / (m.stats.median_us * 1e6)
    method["matmul"] = f"{n}x{n}x{n} random normal, median of {m.stats.n}"
    if cuda and info.sm >= 89:
        try:
            fp8 = torch.float8_e4m3fn
            a8 = a.to(fp8)
            b8 = b.to(fp8).t().contiguous().t()  # column-major second operand, as _scaled_mm needs
            one = torch.ones((), device=dev)
            m = measure(
                lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16),
                cfg,
                device=dev,
                graph_safe=False,
            )
            tflops["fp8_e4m3"] = 2 * n**3 / (m.stats.median_us * 1e6)
        except Exception as exc:  # fp8 GEMM unsupported by this torch build
            method["fp8"] = f"not measured: {type(exc).__name__}: {exc}"[:200]
    return tflops


def measure_ceilings(info: DeviceInfo, *, quick: bool = False) -> Ceilings:
    """Copy and read bandwidth and matmul TFLOP/s on `info`'s device, each the median of timed
    repeats."""
    from attnbench.measure.stream_read import measure_read_ceiling

    dev = info.torch_device
    cuda = dev.type == "cuda"
    cfg = MeasureConfig(
        timer="cuda-event" if cuda else "cpu",
        cold_l2=False,
        min_runs=10,
        max_runs=50 if quick else 200,
        max_time_ms=300 if quick else 1500,
    )

    copy_bytes = (1 << 30) if cuda else (256 << 20)
    if quick:
        copy_bytes //= 4
    copy_gbps, copy_method = _copy_ceiling(copy_bytes, cfg, dev)
    read_bytes = copy_bytes
    if cuda and not quick and torch.cuda.mem_get_info(dev)[0] > 3 * (4 << 30):
        read_bytes = 4 << 30  # decode reads GBs of KV: 4 GiB read 1-3% faster than 1 GiB
    read_gbps, read_method = measure_read_ceiling(read_bytes, cfg, dev)
    n = (8192 if not quick else 4096) if cuda else 1024
    method = {"copy": copy_method, "read": read_method}
    tflops = _matmul_ceilings(info, n, cfg, method)
    return Ceilings(
        copy_bandwidth_gbps=copy_gbps,
        read_bandwidth_gbps=read_gbps,
        matmul_tflops=tflops,
        method=method,
    )
