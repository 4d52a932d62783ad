"""Shared fixtures. Tests marked `gpu` skip unless CUDA is available (run them on the H200 with
`pytest -m gpu`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

# The CLI sizes its console once, at import (`cli.common._width`): 160 columns where the
# output is no terminal and $COLUMNS is unset, as in a plain `pytest` run. pytest-xdist's
# workers get COLUMNS=80 and LINES=24 from their parent: dropped, so `pytest -n 2` prints
# (and wraps) what `pytest` does.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)
# No test reads or writes the user's frame cache (`analysis.frame_cache`; its own test turns
# it on in a temporary folder): a test that changes how files read must see them read.
FRAME_CACHE = "ATTNBENCH_FRAME_CACHE"
os.environ[FRAME_CACHE] = "0"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def gpu_device() -> torch.device:
    return torch.device("cuda:0")


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in an empty temporary folder with no ATTNBENCH_* variables, so no settings file,
    environment or results folder of the machine leaks into the test. Modules that need it
    say `pytestmark = pytest.mark.usefixtures("isolated")`."""
    monkeypatch.chdir(tmp_path)
    for key in list(os.environ):
        if key.upper().startswith("ATTNBENCH_") and key != FRAME_CACHE:
            monkeypatch.delenv(key)


@pytest.fixture
def fake_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs the CLI starts in this process time with the scripted fake timer, which no flag or
    setting reaches (`measure.config.FAKE_TIMER`): say `pytest.mark.usefixtures("fake_timer")`.
    Subprocesses do not see it; they time for real."""
    from dataclasses import replace

    from attnbench.config import Settings

    real = Settings.measure_config
    monkeypatch.setattr(Settings, "measure_config", lambda self: replace(real(self), timer="fake"))


# Property tests draw the same examples on every run (a CI run must not fail by luck);
# `HYPOTHESIS_PROFILE=explore pytest tests/test_properties.py` draws fresh ones to hunt for bugs.
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("ci", derandomize=True)
_hypothesis_settings.register_profile("explore", derandomize=False)
_hypothesis_settings.load_profile(__import__("os").environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def committed_findings() -> tuple[Any, list[Any]]:
    """The findings of the committed `results/`: (inputs, sections), read and built once per
    test process (several modules check them; each build reads every file, about 10 s).
    Read-only: a test that changes them must build its own."""
    from attnbench.report.findings import build, load_inputs

    inputs = load_inputs([Path(__file__).resolve().parents[1] / "results"])
    return inputs, build(inputs)
