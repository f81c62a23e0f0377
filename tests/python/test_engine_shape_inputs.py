"""Inputs whose values decide shapes ("shape tensors"): a Reshape target, Slice bounds, a
Resize size or TopK's K given as a model input. The CPU engine plans once per set of input
shapes and shape-tensor values; results are checked against onnxruntime and numpy."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import tether as tt
from onnx import TensorProto, helper


def _model(nodes, inputs, outputs, opset=18) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model.SerializeToString()


def _ort(model: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)


def test_reshape_target_from_input_plans_per_value() -> None:
    model = _model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    sess = tt.compile(model, threads=1)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for target in ([6, 4], [4, -1], [2, 12], [6, 4]):
        shape = np.array(target, dtype=np.int64)
        got = sess.run({"x": x, "shape": shape})["y"]
        np.testing.assert_array_equal(got, x.reshape(target))
    assert sess.memory()["plans"] == 3  # [6, 4] came back to its plan


def test_slice_bounds_from_inputs_match_onnxruntime() -> None:
    model = _model(
        [helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 7]),
         *[helper.make_tensor_value_info(n, TensorProto.INT64, [2]) for n in ("starts", "ends", "axes", "steps")]],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    sess = tt.compile(model, threads=1)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 7)).astype(np.float32)
    for starts, ends, steps in (([0, 1], [5, 6], [1, 2]), ([4, -1], [-9, 0], [-1, -2]), ([1, 2], [100, 3], [2, 1])):
        feeds = {"x": x, "starts": np.array(starts), "ends": np.array(ends), "axes": np.array([0, 1]),
                 "steps": np.array(steps)}
        np.testing.assert_array_equal(sess.run(feeds)["y"], _ort(model, feeds)[0])


def test_resize_sizes_and_topk_k_from_inputs_match_onnxruntime() -> None:
    model = _model(
        [helper.make_node("Resize", ["x", "", "", "sizes"], ["r"], mode="linear"),
         helper.make_node("Flatten", ["r"], ["f"], axis=0),
         helper.make_node("TopK", ["f", "k"], ["values", "indices"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4]),
         helper.make_tensor_value_info("sizes", TensorProto.INT64, [4]),
         helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("values", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("indices", TensorProto.INT64, None)],
    )
    sess = tt.compile(model, threads=1)
    x = np.random.default_rng(1).standard_normal((1, 2, 4, 4)).astype(np.float32)
    for sizes, k in (([1, 2, 8, 6], 5), ([1, 2, 3, 3], 18)):
        feeds = {"x": x, "sizes": np.array(sizes), "k": np.array([k])}
        want = _ort(model, feeds)
        got = sess.run(feeds)
        np.testing.assert_allclose(got["r"], want[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got["values"], want[1], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got["indices"], want[2])


def test_shape_computed_from_a_large_input_is_refused_by_name() -> None:
    # n = int(max(x)) decides the length of Range's output: x is a shape tensor of 5000 elements.
    model = _model(
        [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
         helper.make_node("Cast", ["m"], ["n"], to=TensorProto.INT64),
         helper.make_node("Range", ["zero", "n", "one"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5000]),
         helper.make_tensor_value_info("zero", TensorProto.INT64, []),
         helper.make_tensor_value_info("one", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
    )
    sess = tt.compile(model, threads=1)
    feeds = {"x": np.full(5000, 3, np.float32), "zero": np.array(0), "one": np.array(1)}
    with pytest.raises(tt.UnsupportedError, match="input 'x' decides output shapes by its values, and has 5000 elements"):
        sess.run(feeds)
