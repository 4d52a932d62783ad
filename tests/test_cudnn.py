"""cuDNN frontend module: it reports whether the frontend loads and answers every case with
the variants that already measure cuDNN attention (flashinfer:cudnn, sdpa:cudnn)."""

from __future__ import annotations

import pytest

from attnbench.backends import cudnn, select_backends
from attnbench.backends.base import UnsupportedCase
from attnbench.measure.hardware import DeviceInfo
from attnbench.workload.spec import WorkloadSpec

H200 = DeviceInfo("cuda", 0, "NVIDIA H200", (9, 0), 132, 50 << 20, 141 << 30)
SPEC = WorkloadSpec(
    kind="decode", num_qo_heads=8, num_kv_heads=2, head_dim=128, kv_lens=(100,), qo_lens=(1,)
)


def test_missing_frontend_is_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cudnn, "frontend_versions", lambda: "cuDNN frontend not installed: x")
    b = cudnn.CudnnFrontendBackend()
    assert b.available() == "cuDNN frontend not installed: x"
    why = b.check(SPEC, H200)
    assert why is not None
    assert why.reason == "cuDNN frontend not installed: x"


def test_installed_frontend_points_to_the_covering_variants(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cudnn, "frontend_versions", lambda: ("1.32.0", 91900))
    b = cudnn.CudnnFrontendBackend()
    assert b.available() is None
    why = b.check(SPEC, H200)
    assert why is not None
    assert "flashinfer:cudnn" in why.reason
    assert "sdpa:cudnn" in why.reason
    assert "1.32.0" in why.reason
    with pytest.raises(UnsupportedCase):
        b.plan(SPEC, None, None)  # type: ignore[arg-type]


def test_real_import_answers_with_a_reason_or_versions() -> None:
    found = cudnn.frontend_versions()
    if isinstance(found, str):
        assert "cuDNN frontend" in found
    else:
        version, backend = found
        assert version.count(".") >= 1
        assert backend >= 0


def test_hidden_from_all_but_selectable_by_name() -> None:
    assert all(b.name != "cudnn:frontend" for b in select_backends(["all"]))
    assert [b.name for b in select_backends(["cudnn"])] == ["cudnn:frontend"]


@pytest.mark.gpu
def test_gpu_frontend_loads_on_the_h200() -> None:
    pytest.importorskip("cudnn")
    found = cudnn.frontend_versions()
    assert not isinstance(found, str), found
    assert found[1] >= 90000  # cuDNN 9
