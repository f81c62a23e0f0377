"""Loading large weights: embedded ones are copied exactly once, external ones and the inline
ones of files tether wrote not at all; packed weights replace the originals in memory."""

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
    # One private copy of the weights stays; the mapped file pages it was copied from leave
    # memory as soon as the copy is made, so the peak is one copy, not two.
    assert 0.95 * WEIGHT_BYTES <= anon <= 1.15 * WEIGHT_BYTES, anon / MIB
    assert peak <= 1.3 * WEIGHT_BYTES, peak / MIB
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



def test_inline_weights_of_a_file_tether_wrote_are_mapped_not_copied(tmp_path):
    import onnxruntime as ort
    import tether as tt

    w = weights()
    src = tmp_path / "src.onnx"
    onnx.save(gather_model(w), str(src))
    path = tmp_path / "inline.onnx"
    tt.load(src).save(path)  # raw data at 64-byte offsets in the file
    m = measure(path)
    anon = m["touched"]["RssAnon"] - m["before"]["RssAnon"]
    assert anon <= 0.05 * WEIGHT_BYTES, anon / MIB
    assert m["checksum"] == float(w[::4096].sum())
    # The padding is a field other readers skip: onnx checks the file, onnxruntime runs it.
    onnx.checker.check_model(str(path))
    idx = np.array([0, 5, 65535], np.int64)
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"idx": idx})[0]
    np.testing.assert_array_equal(got, w[idx])
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(onnx.load(str(path)).graph.initializer[0]), w)


_MEASURE_COMPILE = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import tether as tt

    def rss():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024

    model = tt.load(sys.argv[1])
    before = rss()
    sess = tt.compile(model, threads=1)
    y = sess(np.ones((2, 2048), np.float32))
    after = rss()
    print(json.dumps({"before": before, "after": after, "y": y.tolist()}))
    """
)


def test_weights_packed_from_a_mapped_file_leave_memory(tmp_path):
    import onnxruntime as ort
    import tether as tt

    rng = np.random.default_rng(0)
    w = rng.standard_normal((2048, 8192), dtype=np.float32)  # 64 MiB
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2048])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 8192])],
        initializer=[numpy_helper.from_array(w, "w")],
    )
    src = tmp_path / "src.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), str(src))
    path = tmp_path / "mm.onnx"
    tt.load(src).save(path)
    out = subprocess.run([sys.executable, "-c", _MEASURE_COMPILE, str(path)], capture_output=True, text=True,
                         check=True)
    m = json.loads(out.stdout)
    nbytes = w.nbytes
    # The packed copy is what stays resident: the file's pages of w were dropped once packed
    # (keeping both would add another 64 MiB).
    assert m["after"] - m["before"] <= 1.25 * nbytes, (m["after"] - m["before"]) / MIB
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.ones((2, 2048), np.float32)})[0]
    np.testing.assert_allclose(np.array(m["y"], np.float32), ref, rtol=1e-4, atol=1e-3)
