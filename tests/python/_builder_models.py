"""Small test models built with tt.GraphBuilder (no torch needed)."""

from __future__ import annotations

import numpy as np
import tether as tt


def residual_cnn(size: int = 12) -> tt.Model:
    """Conv -> Relu -> Conv (+ residual) -> Relu -> GlobalAveragePool -> Flatten -> Gemm on
    [batch, 3, size, size], five logits; seeded weights."""
    rng = np.random.default_rng(0)
    b = tt.GraphBuilder("cnn")
    x = b.input("x", "float32", ("batch", 3, size, size))
    b.initializer("w1", rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3)
    b.initializer("b1", rng.standard_normal(8).astype(np.float32) * 0.1)
    b.initializer("w2", rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2)
    b.initializer("b2", rng.standard_normal(8).astype(np.float32) * 0.1)
    b.initializer("fc", rng.standard_normal((5, 8)).astype(np.float32) * 0.5)
    b.initializer("fcb", rng.standard_normal(5).astype(np.float32) * 0.1)
    h = b.node("Relu", [b.node("Conv", [x, "w1", "b1"], name="conv1", pads=[1, 1, 1, 1])], name="relu1")
    y = b.node("Conv", [h, "w2", "b2"], name="conv2", pads=[1, 1, 1, 1])
    s = b.node("Relu", [b.node("Add", [y, h], name="add")], name="relu2")
    p = b.node("Flatten", [b.node("GlobalAveragePool", [s], name="gap")], name="flat")
    b.output(b.node("Gemm", [p, "fc", "fcb"], name="fc", transB=1, outputs=["logits"]))
    return b.build()
