"""Loading large weights: embedded ones are copied exactly once, external ones not at all."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MIB = 1 << 20
WEIGHT_BYTES = 256 * MIB

_MEASURE = textwrap.dedent(
    """
    import json, sys
    import tether as tt

    def status():
        fields = {}
        for line in open("/proc/self/status"):
            key, _, value = line.partition(":")
            if key in ("VmHWM", "RssAnon", "VmRSS"):
                fields[key] = int(value.split()[0]) * 1024
        return fields

    before = status()
    model = tt.load(sys.argv[1])
    after = status()
    w = model.initializer("w")
    checksum = float(w[:: 4096].sum())        # touch one float per page of the weights
    touched = status()
    print(json.dumps({"before": before, "after": after, "touched": touched, "checksum": checksum}))
    """
)


def gather_model(weights: np.ndarray) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Gather", ["w", "idx"], ["y"], axis=0)], "big",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, [None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, weights.shape[1]])],
        initializer=[numpy_helper.from_array(weights, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def measure(path) -> dict:
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def weights() -> np.ndarray:
    w = np.ones((WEIGHT_BYTES // 4096, 1024), np.float32)
    w[:, 0] = np.arange(w.shape[0])
    return w


def test_embedded_weights_are_copied_once(tmp_path):
    w = weights()
    path = tmp_path / "embedded.onnx"
    onnx.save(gather_model(w), str(path))
    m = measure(path)
    anon = m["after"]["RssAnon"] - m["before"]["RssAnon"]
    peak = m["after"]["VmHWM"] - m["before"]["VmHWM"]
    # One private copy of the weights stays; while loading, the mapped file pages it was
    # copied from count too: 2x the weights at the peak. A second copy would make it 3x.
    assert 0.95 * WEIGHT_BYTES <= anon <= 1.15 * WEIGHT_BYTES, anon / MIB
    assert peak <= 2.3 * WEIGHT_BYTES, peak / MIB
    assert m["checksum"] == float(w[::4096].sum())


def test_aligned_external_weights_are_mapped_not_copied(tmp_path):
    import tether as tt

    w = weights()
    src = tmp_path / "src.onnx"
    onnx.save(gather_model(w), str(src))
    path = tmp_path / "external.onnx"
    tt.load(src).save(path, external_data=True)  # tether aligns offsets to 4096
    m = measure(path)
    anon = m["touched"]["RssAnon"] - m["before"]["RssAnon"]
    assert anon <= 0.05 * WEIGHT_BYTES, anon / MIB  # even after reading every page of them
    assert m["after"]["VmHWM"] - m["before"]["VmHWM"] <= 0.05 * WEIGHT_BYTES
    assert m["checksum"] == float(w[::4096].sum())

