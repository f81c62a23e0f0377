"""Float CNNs run channels last (passes/channels_last_float.cc): the convolutions and the nodes
that follow them run on [N, H, W, C] between a Transpose at each end, compute what onnxruntime
computes on the model as written, and every value a caller can read keeps the ONNX layout."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnxruntime as ort
import pytest
import tether as tt
from onnx import TensorProto, helper, numpy_helper
from tether.parity import OnnxRuntimeRunner, TetherRunner

RNG = np.random.default_rng(7)


def weight(*shape: int, scale: float = 0.3) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def model(nodes, x_shape, inits: dict[str, np.ndarray], outputs=("y",), opset: int = 17) -> bytes:
    graph = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10).SerializeToString()


def conv(x: str, y: str, w: str, cin: int, cout: int, inits: dict, k: int = 3, stride: int = 1, group: int = 1,
         dilation: int = 1) -> helper.NodeProto:
    inits[w] = weight(cout, cin // group, k, k)
    inits[w + "_b"] = weight(cout)
    pad = dilation * (k // 2)
    return helper.make_node("Conv", [x, w, w + "_b"], [y], kernel_shape=[k, k], strides=[stride, stride],
                            pads=[pad] * 4, group=group, dilations=[dilation, dilation], name=y)


def check(blob: bytes, x: np.ndarray, threads: int = 1, **compile_options) -> tt.Session:
    """Compiles and runs `blob` in tether and onnxruntime; returns the session."""
    sess = tt.compile(tt.load(blob), threads=threads, **compile_options)
    want = ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = sess.run({"x": x})
    for w, g in zip(want, got.values(), strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())))
    return sess


def ops(sess: tt.Session) -> Counter[str]:
    return Counter(s["op_type"] for s in sess._core.steps())


def resnet_style() -> tuple[bytes, np.ndarray]:
    inits: dict[str, np.ndarray] = {"fc_w": weight(32, 10), "fc_b": weight(10)}
    nodes = [conv("x", "stem", "w0", 3, 16, inits, k=7, stride=2), helper.make_node("Relu", ["stem"], ["stem_r"]),
             helper.make_node("MaxPool", ["stem_r"], ["pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])]
    h, c = "pool", 16
    for b in range(2):
        cout = c * 2 if b == 1 else c
        nodes += [conv(h, f"b{b}c1", f"w{b}1", c, cout, inits, stride=1 + b), helper.make_node("Relu", [f"b{b}c1"], [f"b{b}r1"]),
                  conv(f"b{b}r1", f"b{b}c2", f"w{b}2", cout, cout, inits)]
        short = h if b == 0 else f"b{b}down"
        if b == 1:
            nodes.append(conv(h, short, f"w{b}d", c, cout, inits, k=1, stride=2))
        nodes += [helper.make_node("Add", [f"b{b}c2", short], [f"b{b}sum"]), helper.make_node("Relu", [f"b{b}sum"], [f"b{b}out"])]
        h, c = f"b{b}out", cout
    nodes += [helper.make_node("GlobalAveragePool", [h], ["gap"]), helper.make_node("Flatten", ["gap"], ["flat"]),
              helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["y"])]
    return model(nodes, (2, 3, 37, 41), inits), RNG.standard_normal((2, 3, 37, 41)).astype(np.float32)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_resnet_style_net_runs_channels_last_between_two_transposes(threads: int) -> None:
    blob, x = resnet_style()
    sess = check(blob, x, threads)
    counts = ops(sess)
    assert counts["Transpose"] == 2  # the input, and the pooled features before Flatten
    assert counts["ai.tether:FusedConv"] == 6 and counts["ai.tether:MaxPool"] == 1
    assert counts["ai.tether:GlobalAveragePool"] == 1


def test_squeeze_excite_and_per_channel_operands_follow_the_convolutions() -> None:
    inits: dict[str, np.ndarray] = {"scale": weight(24, 1, 1), "shift": weight(1, 24, 1, 1), "one": np.array(0.5, np.float32)}
    nodes = [
        conv("x", "c0", "w0", 5, 24, inits), helper.make_node("Sigmoid", ["c0"], ["s0"]),
        helper.make_node("Mul", ["c0", "s0"], ["a0"]),  # SiLU, fused into the conv
        helper.make_node("ReduceMean", ["a0"], ["sq"], axes=[2, 3], keepdims=1),
        conv("sq", "e1", "w1", 24, 6, inits, k=1), helper.make_node("Relu", ["e1"], ["e1r"]),
        conv("e1r", "e2", "w2", 6, 24, inits, k=1), helper.make_node("HardSigmoid", ["e2"], ["gate"]),
        helper.make_node("Mul", ["a0", "gate"], ["excited"]),
        helper.make_node("Mul", ["excited", "scale"], ["scaled"]), helper.make_node("Add", ["scaled", "shift"], ["shifted"]),
        helper.make_node("Add", ["shifted", "one"], ["lifted"]), helper.make_node("Tanh", ["lifted"], ["t"]),
        conv("t", "y", "w3", 24, 7, inits, k=3, group=1),
    ]
    x = RNG.standard_normal((2, 5, 13, 11)).astype(np.float32)
    sess = check(model(nodes, x.shape, inits), x)
    counts = ops(sess)
    # In at the first conv, out before the last one (its output is the graph's, so it keeps NCHW).
    assert counts["Transpose"] == 2
    assert counts["ReduceMean"] == 1 and counts["Mul"] >= 2


def test_concat_of_branches_and_average_pooling_follow() -> None:
    inits: dict[str, np.ndarray] = {}
    nodes = [
        conv("x", "a", "wa", 4, 8, inits), conv("x", "b", "wb", 4, 12, inits, dilation=2),
        helper.make_node("Concat", ["a", "b"], ["ab"], axis=1),
        helper.make_node("AveragePool", ["ab"], ["avg"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 1],
                         count_include_pad=1),
        helper.make_node("MaxPool", ["avg"], ["mx"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
        helper.make_node("GlobalMaxPool", ["mx"], ["gm"]), helper.make_node("Add", ["mx", "gm"], ["s"]),
        conv("s", "y", "wy", 20, 3, inits, k=1),
    ]
    x = RNG.standard_normal((1, 4, 19, 23)).astype(np.float32)
    counts = ops(check(model(nodes, x.shape, inits), x))
    assert counts["Transpose"] == 2
    assert counts["ai.tether:AveragePool"] == 1 and counts["ai.tether:GlobalMaxPool"] == 1 and counts["Concat"] == 1


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_split_resize_and_shape_follow_a_yolo_style_neck(mode: str) -> None:
    inits: dict[str, np.ndarray] = {"scales": np.array([1, 1, 2, 2], np.float32), "hw": np.array([26, 22], np.int64)}
    nodes = [
        conv("x", "c", "wc", 3, 16, inits),
        helper.make_node("Split", ["c"], ["p", "q"], axis=1, num_outputs=2),
        conv("q", "q2", "wq", 8, 8, inits), helper.make_node("Sigmoid", ["q2"], ["qs"]),
        helper.make_node("Resize", ["qs", "", "scales"], ["up"], mode=mode),
        # A resize to sizes computed from a Shape, as exporters write "interpolate to x's size".
        helper.make_node("Shape", ["up"], ["nc"], end=2), helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
        helper.make_node("Resize", ["p", "", "", "sizes"], ["p_up"], mode=mode),
        helper.make_node("Concat", ["up", "p_up"], ["cat"], axis=1),
        conv("cat", "y", "wy", 16, 5, inits, k=1),
    ]
    x = RNG.standard_normal((1, 3, 13, 11)).astype(np.float32)
    counts = ops(check(model(nodes, x.shape, inits, opset=18), x))
    assert counts["Transpose"] == 2 and counts["Split"] == 1 and counts["Resize"] == 2


def test_a_unet_style_decoder_upsamples_channels_last() -> None:
    inits: dict[str, np.ndarray] = {"up_w": weight(16, 8, 2, 2), "up_b": weight(8)}
    nodes = [
        conv("x", "e1", "w1", 3, 8, inits), helper.make_node("Relu", ["e1"], ["e1r"]),
        helper.make_node("MaxPool", ["e1r"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        conv("p1", "e2", "w2", 8, 16, inits), helper.make_node("Relu", ["e2"], ["e2r"]),
        helper.make_node("ConvTranspose", ["e2r", "up_w", "up_b"], ["up"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Concat", ["up", "e1r"], ["cat"], axis=1),
        conv("cat", "y", "wy", 16, 2, inits, k=1),
    ]
    x = RNG.standard_normal((2, 3, 14, 10)).astype(np.float32)
    counts = ops(check(model(nodes, x.shape, inits), x))
    assert counts["Transpose"] == 2 and counts["ai.tether:ConvTranspose"] == 1


def test_a_convnext_block_drops_its_own_transposes() -> None:
    c = 16
    inits = {"g": weight(c) + 1, "beta": weight(c), "w1": weight(c, 4 * c), "w2": weight(4 * c, c)}
    nodes = [
        conv("x", "dw", "wdw", c, c, inits, k=7, group=c),
        helper.make_node("Transpose", ["dw"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("LayerNormalization", ["t", "g", "beta"], ["ln"], axis=-1),
        helper.make_node("MatMul", ["ln", "w1"], ["h"]), helper.make_node("Gelu", ["h"], ["hg"]),
        helper.make_node("MatMul", ["hg", "w2"], ["o"]),
        helper.make_node("Transpose", ["o"], ["back"], perm=[0, 3, 1, 2]),
        helper.make_node("Add", ["back", "x"], ["res"]),
        conv("res", "y", "wy", c, c, inits, k=1),
    ]
    x = RNG.standard_normal((1, c, 14, 14)).astype(np.float32)
    counts = ops(check(model(nodes, x.shape, inits, opset=20), x))  # (Gelu is opset 20)
    # The model's own pair of Transposes cancels the conv's: left are the input's (to channels
    # last for the depthwise conv) and the residual's.
    assert counts["Transpose"] <= 3


def test_graph_outputs_and_kept_values_keep_the_onnx_layout() -> None:
    inits: dict[str, np.ndarray] = {}
    nodes = [conv("x", "c1", "w1", 3, 8, inits), helper.make_node("Relu", ["c1"], ["r1"]),
             conv("r1", "c2", "w2", 8, 8, inits), helper.make_node("Neg", ["c2"], ["y"])]
    x = RNG.standard_normal((1, 3, 9, 9)).astype(np.float32)
    blob = model(nodes, x.shape, inits, outputs=("y", "r1"))
    sess = check(blob, x)
    assert sess.run({"x": x})["r1"].shape == (1, 8, 9, 9)
    kept = check(blob, x, keep=["c2"])
    _, captured = kept._core.run_capture({"x": x}, ["c2"])
    want = ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(-dict(captured)["c2"], want, rtol=1e-5, atol=1e-5)


def test_intermediates_of_a_channels_last_run_are_read_in_the_onnx_layout() -> None:
    blob, x = resnet_style()
    sess = tt.compile(tt.load(blob), threads=1)
    _, captured = sess._core.run_capture({"x": x}, [])
    values = dict(captured)
    assert values["b0out"].shape == (2, 16, 10, 11)
    rep = tt.compare(OnnxRuntimeRunner(blob), TetherRunner(blob), {"x": x}, layerwise=True)
    assert rep.ok, rep.table()
    compared = {layer.value for layer in rep.layers if layer.status == "compared"}
    assert {"b0out", "b1out", "pool"} <= compared


def test_convolutions_the_kernel_cannot_take_stay_channels_first() -> None:
    # Weights computed at run time, and a 3-D convolution.
    nodes = [helper.make_node("Mul", ["wv", "two"], ["wrt"]), helper.make_node("Conv", ["x", "wrt"], ["c"], pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6]),
                                             helper.make_tensor_value_info("wv", TensorProto.FLOAT, [4, 2, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array(2, np.float32), "two")])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()
    sess = tt.compile(tt.load(blob), threads=1)
    assert "Transpose" not in ops(sess)
    feeds = {"x": RNG.standard_normal((1, 2, 6, 6)).astype(np.float32), "wv": weight(4, 2, 3, 3)}
    want = ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(sess.run(feeds)["y"], want, rtol=1e-5, atol=1e-5)
