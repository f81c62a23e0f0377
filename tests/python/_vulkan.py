"""Shared by the Vulkan tests: whether this machine has a Vulkan device, and how results are
compared with their oracle."""

from __future__ import annotations

import numpy as np
import pytest
import tether as tt

VULKAN_DEVICES = [d for d in tt.devices() if d["backend"] == "vulkan"]
NO_VULKAN = "no Vulkan device on this machine (apt-get install mesa-vulkan-drivers gives lavapipe, one on the CPU)"
requires_vulkan = pytest.mark.skipif(not VULKAN_DEVICES, reason=NO_VULKAN)

# Every backend the shared op table runs on: the CPU engine, and Vulkan where there is a device.
BACKENDS = ["cpu", pytest.param("vulkan", marks=requires_vulkan)]


def assert_close(got: np.ndarray, ref: np.ndarray, rtol: float = 1e-4, what: str = "") -> None:
    """`got` has `ref`'s shape and dtype and differs from it by at most rtol times ref's largest
    magnitude (exactly, for integers)."""
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    assert got.dtype == ref.dtype, (what, got.dtype, ref.dtype)
    if not np.issubdtype(ref.dtype, np.floating):
        assert np.array_equal(got, ref), what
        return
    assert np.array_equal(np.isnan(got), np.isnan(ref)), f"{what}: NaN in different places"
    finite = ~np.isnan(ref)
    scale = max(float(np.abs(ref[finite]).max(initial=0.0)), 1e-30)
    err = float(np.abs(got[finite].astype(np.float64) - ref[finite]).max(initial=0.0))
    assert err <= rtol * scale, f"{what}: max error {err:.3g}, {err / scale:.3g} of the largest magnitude {scale:.3g}"
