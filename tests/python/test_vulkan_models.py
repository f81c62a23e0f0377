"""The real-model set (tests/python/_models.py: torch.nn with random weights, exported to ONNX)
on Vulkan agrees with the CPU engine within 1e-4 of the largest output, at two batch sizes.
Every net, the UNet with its bilinear Resize included, runs on the device alone (compiled
strict: only shape arithmetic stays on the CPU); with float16 storage (precision="fp16"),
and with the GPU kernel forms' float16 products, within 1e-2."""

from __future__ import annotations

import numpy as np
import pytest
import tether as tt
from _vulkan import assert_close, requires_vulkan

pytestmark = [requires_vulkan, pytest.mark.usefixtures("vulkan_validation")]

ON_DEVICE = ["mlp", "resnet", "mobilenetv2", "transformer", "vit", "unet"]


@pytest.mark.parametrize("name", ON_DEVICE)
def test_real_model_on_vulkan_matches_the_cpu_engine(name, exported_models):
    e = exported_models[name]
    model = tt.load(e.path)
    sess = tt.compile(model, device="vulkan", strict=True)
    cpu = tt.compile(model, device="cpu")
    for batch in (1, 3):
        feeds = e.inputs(batch, seed=batch)
        got, ref = sess.run(feeds), cpu.run(feeds)
        for k in ref:
            assert_close(got[k], ref[k], what=f"{name} batch {batch} output {k}")
    steps = sess.steps()
    on_cpu = sorted({s["op_type"] for s in steps if s["backend"] == "cpu"})
    # Shape arithmetic (Shape of a value, integer ops on it) is all that may stay on the CPU.
    assert set(on_cpu) <= {"Shape", "Slice", "Concat", "Gather", "Unsqueeze", "Squeeze", "Reshape"}
    assert "cpu fallback" not in sess.report
    if name == "unet":
        assert any(s["op_type"] == "Resize" and s["backend"] == "vulkan" for s in steps)


@pytest.mark.parametrize("form", ["device", "gpu-half-products"])
@pytest.mark.parametrize("name", ON_DEVICE)
def test_real_model_with_float16_storage_matches_the_cpu_engine_within_1e_2(name, form, exported_models, monkeypatch):
    """Float16 in memory, in the device's own kernel forms, and in the GPU forms with float16
    products (TETHER_VULKAN_FP16_ARITHMETIC=1; lavapipe computes in float16)."""
    if form != "device":
        monkeypatch.setenv("TETHER_VULKAN_KERNELS", "gpu")
        monkeypatch.setenv("TETHER_VULKAN_FP16_ARITHMETIC", "1")
    e = exported_models[name]
    model = tt.load(e.path)
    sess = tt.compile(model, device="vulkan", strict=True, precision="fp16")
    feeds = {k: v.astype(np.float16).astype(np.float32) if v.dtype == np.float32 else v
             for k, v in e.inputs(2, seed=2).items()}
    ref = tt.compile(model, device="cpu").run(feeds)
    got = sess.run(feeds)
    for k in ref:
        assert_close(got[k], ref[k], 1e-2, what=f"{name} in fp16 ({form} kernels), output {k}")
