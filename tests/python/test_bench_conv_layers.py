"""bench/conv_layers.py runs on a small CNN: a row per distinct convolution, each within rounding
of onnxruntime (the script's own column, computed against onnxruntime), and the model's sums.
A smoke run of the machinery: no timing is asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

BENCH = Path(__file__).resolve().parents[2] / "bench" / "conv_layers.py"


def test_conv_layers_lists_each_distinct_convolution_with_its_error(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in [("w1", (8, 3, 3, 3)), ("w2", (8, 1, 3, 3)), ("w3", (8, 8, 3, 3))]]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1] * 4),
             helper.make_node("Conv", ["a", "w2"], ["b"], pads=[1] * 4, group=8),
             helper.make_node("Conv", ["b", "w3"], ["c"], pads=[1] * 4),
             helper.make_node("Conv", ["c", "w3"], ["y"], pads=[1] * 4)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    path = tmp_path / "net.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    out = subprocess.run([sys.executable, str(BENCH), str(path), "--min-time", "0.02"], capture_output=True, text=True,
                         check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith("| ") and "x[" in line]
    assert len(rows) == 3 and any(row.startswith("|  2x") for row in rows)  # w3's conv twice
    assert all(float(row.rstrip(" |").rsplit("|", 1)[1]) < 1e-4 for row in rows)
    assert re.search(r"sum over the model's convolutions: tether [\d.]+ ms, onnxruntime [\d.]+ ms", out)
