"""Inputs whose shapes break what the ONNX spec says must agree between them (indices wider
than data, a scalar operand that is empty, parameters of two lengths, pads past the kernel):
a typed error naming the node, never a read or write outside a buffer. Where the shapes are
valid, the result is onnxruntime's (or numpy's, where onnxruntime cannot run the case)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import tether as tt
from onnx import TensorProto, helper, numpy_helper

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def model(nodes, inputs, consts=(), opset=21, outputs=("y",)) -> bytes:
    """A graph of `nodes`; `inputs` are (name, elem type, dims) graph inputs (None dims are
    symbolic); `consts` are (name, array) initializers."""
    ins = [helper.make_tensor_value_info(n, t, [d if d is not None else f"{n}{k}" for k, d in enumerate(dims)])
           for n, t, dims in inputs]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in consts]
    outs = [helper.make_empty_tensor_value_info(o) for o in outputs]
    graph = helper.make_graph(list(nodes), "g", ins, outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10).SerializeToString()


def ort_run(blob: bytes, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(None, feeds)


def refused_by_both(blob: bytes, feeds: dict, match: str) -> None:
    """onnxruntime refuses the model or its inputs, and tether raises a ShapeError matching `match`."""
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's own error types vary by version
        ort_run(blob, feeds)
    with pytest.raises(tt.ShapeError, match=match):
        tt.compile(blob).run(feeds)


def agrees_with_ort(blob: bytes, feeds: dict) -> None:
    got = tt.compile(blob).run(feeds)
    for name, want in zip(got, ort_run(blob, feeds), strict=True):
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6)


# ---- ScatterElements / Scatter: indices and updates no longer than data off the axis -----------

DATA = np.arange(4, dtype=np.float32).reshape(2, 2)


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatter_elements_indices_wider_than_data_off_the_axis_are_refused(reduction):
    node = helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], name="sc", axis=0, reduction=reduction)
    idx = np.zeros((2, 4), np.int64)
    feeds = {"d": DATA, "i": idx, "u": np.ones((2, 4), np.float32)}
    static = model([node], [("d", F, [2, 2]), ("i", I64, [2, 4]), ("u", F, [2, 4])])
    refused_by_both(static, feeds, r"ScatterElements 'sc': indices \[2, 4\] are longer than data \[2, 2\] on axis 1")
    # Symbolic dims: the shapes meet only at run time, 64k wider.
    dynamic = model([node], [("d", F, [None, None]), ("i", I64, [None, None]), ("u", F, [None, None])])
    wide = {"d": DATA, "i": np.zeros((2, 65536), np.int64), "u": np.ones((2, 65536), np.float32)}
    refused_by_both(dynamic, wide, "on axis 1")


def test_scatter_elements_constant_indices_with_more_rows_than_data_are_refused():
    node = helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], name="sc", axis=1)
    blob = model([node], [("d", F, [2, 2]), ("u", F, [4096, 1])], consts=[("i", np.zeros((4096, 1), np.int64))])
    refused_by_both(blob, {"d": DATA, "u": np.ones((4096, 1), np.float32)}, "on axis 0")


def test_scatter_opset_10_indices_wider_than_data_are_refused():
    node = helper.make_node("Scatter", ["d", "i", "u"], ["y"], name="sc", axis=0)
    blob = model([node], [("d", F, [None, None]), ("i", I64, [None, None]), ("u", F, [None, None])], opset=10)
    feeds = {"d": DATA, "i": np.zeros((2, 4096), np.int64), "u": np.ones((2, 4096), np.float32)}
    with pytest.raises(tt.ShapeError, match=r"Scatter 'sc': indices \[2, 4096\] are longer than data"):
        tt.compile(blob).run(feeds)


def test_scatter_elements_indices_narrower_than_data_match_onnxruntime():
    node = helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=1, reduction="add")
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    feeds = {"d": data, "i": np.array([[3, 0], [1, 1]], np.int64), "u": np.array([[10, 20], [30, 40]], np.float32)}
    agrees_with_ort(model([node], [("d", F, [None, None]), ("i", I64, [None, None]), ("u", F, [None, None])]), feeds)


# ---- GatherElements: indices no longer than data off the axis --------------------------------


@pytest.mark.parametrize("axis,idx_shape", [(0, (2, 65536)), (1, (3, 2))])
def test_gather_elements_indices_longer_than_data_off_the_axis_are_refused(axis, idx_shape):
    node = helper.make_node("GatherElements", ["d", "i"], ["y"], name="ge", axis=axis)
    feeds = {"d": DATA, "i": np.zeros(idx_shape, np.int64)}
    other = 1 - axis
    refused_by_both(model([node], [("d", F, [None, None]), ("i", I64, [None, None])]), feeds, f"on axis {other}")
    refused_by_both(model([node], [("d", F, [2, 2]), ("i", I64, list(idx_shape))]), feeds, f"on axis {other}")


def test_gather_elements_indices_shorter_than_data_match_onnxruntime():
    node = helper.make_node("GatherElements", ["d", "i"], ["y"], axis=0)
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    feeds = {"d": data, "i": np.array([[2, 0, 1], [-1, 1, 0]], np.int64)}
    agrees_with_ort(model([node], [("d", F, [None, None]), ("i", I64, [None, None])]), feeds)


# ---- scalar operands: Clip's bounds, Pad's constant_value -------------------------------------

X = np.linspace(-3, 3, 8, dtype=np.float32).reshape(2, 4)


@pytest.mark.parametrize("which", ["min", "max"])
@pytest.mark.parametrize("bound", [np.zeros(0, np.float32), np.array([0.5, 1.0], np.float32)])
def test_clip_bound_of_other_than_one_value_is_refused(which, bound):
    inputs = ["x", "b", ""] if which == "min" else ["x", "", "b"]
    node = helper.make_node("Clip", inputs, ["y"], name="clip")
    as_const = model([node], [("x", F, [2, 4])], consts=[("b", bound)])
    as_input = model([node], [("x", F, [2, 4]), ("b", F, [None])])
    for blob, feeds in [(as_const, {"x": X}), (as_input, {"x": X, "b": bound})]:
        with pytest.raises(tt.ShapeError, match=rf"Clip 'clip': {which} must hold one value \(a scalar\), got shape"):
            tt.compile(blob).run(feeds)


def test_clip_with_scalar_bounds_matches_onnxruntime():
    node = helper.make_node("Clip", ["x", "lo", "hi"], ["y"])
    feeds = {"x": X, "lo": np.array(-1.5, np.float32), "hi": np.array(2.0, np.float32)}
    agrees_with_ort(model([node], [("x", F, [2, 4]), ("lo", F, []), ("hi", F, [])]), feeds)


@pytest.mark.parametrize("value", [np.zeros(0, np.float32), np.array([1, 2, 3], np.float32)])
def test_pad_constant_value_of_other_than_one_value_is_refused(value):
    node = helper.make_node("Pad", ["x", "p", "v"], ["y"], name="pad", mode="constant")
    pads = np.array([0, 100, 0, 100], np.int64)
    for blob, feeds in [(model([node], [("x", F, [2, 4])], consts=[("p", pads), ("v", value)]), {"x": X}),
                        (model([node], [("x", F, [2, 4]), ("v", F, [None])], consts=[("p", pads)]), {"x": X, "v": value})]:
        with pytest.raises(tt.ShapeError, match=r"Pad 'pad': constant_value must hold one value"):
            tt.compile(blob).run(feeds)


def test_pad_with_a_scalar_constant_value_matches_onnxruntime():
    node = helper.make_node("Pad", ["x", "p", "v"], ["y"], mode="constant")
    feeds = {"x": X, "v": np.array(-7.0, np.float32)}
    agrees_with_ort(model([node], [("x", F, [2, 4]), ("v", F, [])], consts=[("p", np.array([1, 2, 0, 3], np.int64))]), feeds)


def test_constant_of_shape_with_an_empty_value_is_refused():
    node = helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos",
                            value=numpy_helper.from_array(np.zeros(0, np.float32)))
    blob = model([node], [], consts=[("s", np.array([2, 3], np.int64))])
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's oracle: it refuses too
        ort_run(blob, {})
    with pytest.raises(tt.ShapeError, match="ConstantOfShape 'cos': value must hold one element, got a tensor of 0"):
        tt.compile(blob)


# ---- GroupNormalization: scale and bias of one length ----------------------------------------


@pytest.mark.parametrize("scale_len,bias_len", [(4096, 1), (1, 4096)])
def test_group_norm_scale_and_bias_of_two_lengths_are_refused(scale_len, bias_len):
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], name="gn", num_groups=1)
    blob = model([node], [("x", F, [1, 4096, 2])],
                 consts=[("s", np.ones(scale_len, np.float32)), ("b", np.zeros(bias_len, np.float32))])
    with pytest.raises(tt.ShapeError, match=f"GroupNormalization 'gn': scale has {scale_len} values and bias {bias_len}"):
        tt.compile(blob)


def test_group_norm_21_per_channel_matches_onnxruntime():
    rng = np.random.default_rng(0)
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2, epsilon=1e-5)
    consts = [("s", rng.standard_normal(4).astype(np.float32)), ("b", rng.standard_normal(4).astype(np.float32))]
    feeds = {"x": rng.standard_normal((3, 4, 5)).astype(np.float32)}
    agrees_with_ort(model([node], [("x", F, [3, 4, 5])], consts=consts), feeds)


# ---- pools: pads smaller than the kernel ---------------------------------------------------


@pytest.mark.parametrize("op,pad", [("MaxPool", 2), ("AveragePool", 3), ("LpPool", 2)])
def test_pool_pads_not_smaller_than_the_kernel_are_refused(op, pad):
    node = helper.make_node(op, ["x"], ["y"], name="p", kernel_shape=[2, 2], pads=[0, pad, 0, 0])
    blob = model([node], [("x", F, [1, 1, 4, 4])])
    refused_by_both(blob, {"x": np.ones((1, 1, 4, 4), np.float32)},
                    f"{op} 'p': a pad of {pad} on spatial axis 1 is not smaller than the kernel size 2")


def test_pool_pads_below_the_kernel_match_onnxruntime():
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[2, 2, 2, 2], strides=[2, 2])
    x = np.random.default_rng(1).standard_normal((1, 2, 5, 6)).astype(np.float32)
    agrees_with_ort(model([node], [("x", F, [1, 2, 5, 6])]), {"x": x})


# ---- Split: num_outputs names the outputs --------------------------------------------------


def test_split_num_outputs_other_than_the_outputs_is_refused():
    node = helper.make_node("Split", ["x"], ["a", "b"], name="sp", axis=1, num_outputs=3)
    blob = model([node], [("x", F, [2, 6])], outputs=("a", "b"), opset=18)
    refused_by_both(blob, {"x": np.ones((2, 6), np.float32)}, "Split 'sp': num_outputs is 3 but the node has 2 outputs")


def test_split_with_both_sizes_and_num_outputs_is_refused():
    node = helper.make_node("Split", ["x", "s"], ["a", "b"], name="sp", axis=1, num_outputs=2)
    blob = model([node], [("x", F, [2, 6])], consts=[("s", np.array([2, 4], np.int64))], outputs=("a", "b"), opset=18)
    refused_by_both(blob, {"x": np.ones((2, 6), np.float32)}, "has both the split input and num_outputs")


# ---- opset versions ------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, -1])
def test_an_opset_version_below_one_is_a_model_error(version):
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, [2])],
                              [helper.make_empty_tensor_value_info("y")])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", version)], ir_version=8).SerializeToString()
    with pytest.raises(tt.ModelError, match=f"opset_import of domain '' has version {version}; opset versions start at 1"):
        tt.load(blob)


def test_an_opset_newer_than_tether_knows_is_a_model_error():
    relu = [helper.make_node("Relu", ["x"], ["y"])]
    x = np.array([-1.0, 2.0], np.float32)
    np.testing.assert_array_equal(tt.compile(model(relu, [("x", F, [2])], opset=28)).run({"x": x})["y"], np.maximum(x, 0))
    with pytest.raises(tt.ModelError, match="imports ONNX opset 999; tether knows opsets 1 to 28"):
        tt.compile(model(relu, [("x", F, [2])], opset=999))


# ---- Conv: strides far past the input --------------------------------------------------------


def conv_reference(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    """The one output pixel of a convolution whose stride passes the whole input: the window at
    the padded origin."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    window = xp[:, :, :kh, :kw].astype(np.float64)
    return np.einsum("nchw,mchw->nm", window, w.astype(np.float64))[:, :, None, None]


@pytest.mark.parametrize("stride", [20000, 2**30, 2**31, 2**62])
@pytest.mark.parametrize("pad", [0, 1])
def test_conv_with_a_stride_past_the_input_gives_one_pixel_in_bounded_memory(stride, pad):
    rng = np.random.default_rng(stride % 97 + pad)
    x = rng.standard_normal((1, 2, 8, 8)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=[stride, stride], pads=[pad] * 4)
    blob = model([node], [("x", F, [1, 2, None, None])], consts=[("w", w)])
    # 16 MiB is far above what the one pixel needs; phase planes of stride^2 floats would not fit.
    got = tt.compile(blob, max_memory=16 << 20).run({"x": x})["y"]
    np.testing.assert_allclose(got, conv_reference(x, w, pad), rtol=1e-5, atol=1e-5)
