"""Where and with what a run happened: git commit, library versions, host, GPU and driver."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

LIBRARIES = (
    "torch",
    "triton",
    "flashinfer-python",
    "fa3-fwd",
    "tokenspeed-fa3",
    "flash-attn",
    "flash-attn-3",
    "sgl-flash-mla",
    "nvidia-cudnn-frontend",
    "nvidia-cudnn-cu12",
    "nvidia-cudnn-cu13",
)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def git_sha() -> str:
    """The source's git commit (`-dirty` with local edits). A copy without `.git` (a remote GPU
    machine gets the working tree only) can name it in `ATTNBENCH_GIT_SHA`."""
    if os.environ.get("ATTNBENCH_GIT_SHA"):
        return os.environ["ATTNBENCH_GIT_SHA"]
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
        sha = out.stdout.strip()
        if out.returncode or not sha:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def library_versions() -> dict[str, str]:
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def provenance() -> dict[str, Any]:
    """Where and with what a run happened (no heavy imports beyond torch)."""
    import torch

    from attnbench import __version__

    prov: dict[str, Any] = {
        "attnbench": __version__,
        "git_sha": git_sha(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "time": now_iso(),
        "libraries": library_versions(),
    }
    if torch.cuda.is_available():
        prov["gpu"] = torch.cuda.get_device_name(0)
        prov["cudnn"] = torch.backends.cudnn.version()
        prov["driver"] = _driver_version()
    return prov


def _driver_version() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout else ""
    except (OSError, subprocess.SubprocessError, IndexError):
        return ""
