"""The real-model set (tests/python/_models.py: torch.nn with random weights, exported to ONNX)
on Vulkan agrees with the CPU engine within 1e-4 of the largest output, at two batch sizes.
Every net, the UNet with its bilinear Resize included, runs on the device alone (compiled
strict: only shape arithmetic stays on the CPU)."""

from __future__ import annotations

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
