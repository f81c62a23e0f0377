"""tether.GraphBuilder: models built from numpy weights compute what numpy and torch compute,
through tether and onnxruntime alike, and every mistake raises a typed error naming the node."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tether as tt
import torch
import torch.nn.functional as F

RNG = np.random.default_rng(7)
D_IN, D_HIDDEN, D_OUT = 12, 32, 5  # w1 holds 1536 bytes: over the 1 KiB external-data threshold


def _mlp_weights() -> dict[str, np.ndarray]:
    return {
        "w1": RNG.standard_normal((D_IN, D_HIDDEN)).astype(np.float32) * 0.4,
        "b1": RNG.standard_normal(D_HIDDEN).astype(np.float32) * 0.1,
        "w2": RNG.standard_normal((D_OUT, D_HIDDEN)).astype(np.float32) * 0.4,  # Gemm with transB
        "b2": RNG.standard_normal(D_OUT).astype(np.float32) * 0.1,
    }


def _build_mlp(w: dict[str, np.ndarray]) -> tt.GraphBuilder:
    b = tt.GraphBuilder("mlp")
    x = b.input("x", "float32", ("batch", D_IN))
    for k, v in w.items():
        b.initializer(k, v)
    h = b.node("MatMul", [x, "w1"], name="fc1")
    h = b.node("Add", [h, "b1"], name="fc1.bias")
    h = b.node("Relu", [h], name="act")
    logits = b.node("Gemm", [h, "w2", "b2"], name="fc2", transB=1, alpha=1.0)
    probs = b.node("Softmax", [logits], name="probs", axis=-1, outputs=["probs"])
    b.output(probs)
    return b


def _numpy_mlp(w: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    f = {k: v.astype(np.float64) for k, v in w.items()}
    h = np.maximum(x.astype(np.float64) @ f["w1"] + f["b1"], 0.0)
    z = h @ f["w2"].T + f["b2"]
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)  # type: ignore[no-any-return]


def test_mlp_from_numpy_weights_matches_numpy_in_tether_and_onnxruntime_at_batch_1_and_5(tmp_path: Path) -> None:
    w = _mlp_weights()
    b = _build_mlp(w)
    assert b.shape("probs") == ("batch", D_OUT)
    assert b.dtype("probs") == "float32"
    path = tmp_path / "mlp.onnx"
    b.save(path)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    sess = tt.compile(b.build())
    ort_sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch in (1, 5):
        x = RNG.standard_normal((batch, D_IN)).astype(np.float32)
        expected = _numpy_mlp(w, x)
        np.testing.assert_allclose(sess.run({"x": x})["probs"], expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ort_sess.run(None, {"x": x})[0], expected, rtol=1e-5, atol=1e-6)


def test_saved_mlp_declares_symbolic_batch_and_producer_tether(tmp_path: Path) -> None:
    path = tmp_path / "mlp.onnx"
    files = _build_mlp(_mlp_weights()).save(path, external_data=True)
    assert files == [path, tmp_path / "mlp.onnx.data"]
    proto = onnx.load(str(path))
    assert proto.producer_name == "tether"
    assert [(o.domain, o.version) for o in proto.opset_import] == [("", 17)]
    dims = proto.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", D_OUT]
    onnx.checker.check_model(str(path), full_check=True)


def test_small_cnn_from_numpy_weights_matches_torch_functional(tmp_path: Path) -> None:
    conv_w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3
    conv_b = RNG.standard_normal(4).astype(np.float32) * 0.1
    gamma = RNG.uniform(0.5, 1.5, 4).astype(np.float32)
    beta = RNG.standard_normal(4).astype(np.float32) * 0.1
    mean = RNG.standard_normal(4).astype(np.float32) * 0.1
    var = RNG.uniform(0.5, 2.0, 4).astype(np.float32)
    fc_w = RNG.standard_normal((6, 4 * 4 * 4)).astype(np.float32) * 0.2
    fc_b = RNG.standard_normal(6).astype(np.float32) * 0.1

    b = tt.GraphBuilder("cnn")
    x = b.input("image", np.float32, ("batch", 3, 9, 9))
    for name, arr in [("conv.w", conv_w), ("conv.b", conv_b), ("bn.gamma", gamma), ("bn.beta", beta),
                      ("bn.mean", mean), ("bn.var", var), ("fc.w", fc_w), ("fc.b", fc_b)]:
        b.initializer(name, arr)
    h = b.node("Conv", [x, "conv.w", "conv.b"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    h = b.node("BatchNormalization", [h, "bn.gamma", "bn.beta", "bn.mean", "bn.var"], name="bn", epsilon=1e-5)
    h = b.node("Relu", [h])
    h = b.node("MaxPool", [h], name="pool", kernel_shape=[2, 2], strides=[2, 2])
    assert b.shape(h) == ("batch", 4, 4, 4)
    h = b.node("Flatten", [h], axis=1)
    assert b.shape(h) == ("batch", 64)
    b.output(b.node("Gemm", [h, "fc.w", "fc.b"], name="fc", transB=1, outputs=["logits"]))
    path = tmp_path / "cnn.onnx"
    b.save(path)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)

    sess = tt.compile(tt.load(path))
    for batch in (1, 5):
        img = RNG.standard_normal((batch, 3, 9, 9)).astype(np.float32)
        with torch.no_grad():
            t = F.conv2d(torch.from_numpy(img), torch.from_numpy(conv_w), torch.from_numpy(conv_b), padding=1)
            t = F.batch_norm(t, torch.from_numpy(mean), torch.from_numpy(var), torch.from_numpy(gamma),
                             torch.from_numpy(beta), training=False, eps=1e-5)
            t = F.max_pool2d(F.relu(t), 2, 2)
            expected = F.linear(torch.flatten(t, 1), torch.from_numpy(fc_w), torch.from_numpy(fc_b)).numpy()
        np.testing.assert_allclose(sess.run({"image": img})["logits"], expected, rtol=1e-4, atol=1e-5)


def test_multiple_outputs_and_constant_tensor_attribute_match_numpy() -> None:
    b = tt.GraphBuilder("split")
    x = b.input("x", "float32", (2, 6))
    c = b.node("Constant", [], value=np.arange(6, dtype=np.float32).reshape(1, 6))
    s = b.node("Add", [x, c])
    left, right = b.node("Split", [s, b.initializer("sizes", np.array([2, 4], np.int64))], axis=1,
                         outputs=["left", "right"])
    assert (b.shape(left), b.shape(right)) == ((2, 2), (2, 4))
    b.output(left, right)
    xv = RNG.standard_normal((2, 6)).astype(np.float32)
    out = tt.compile(b.build()).run({"x": xv})
    ref = xv.astype(np.float64) + np.arange(6)
    np.testing.assert_allclose(out["left"], ref[:, :2], rtol=1e-6)
    np.testing.assert_allclose(out["right"], ref[:, 2:], rtol=1e-6)


# ---- mistakes -----------------------------------------------------------------------------


def _builder_with_x() -> tt.GraphBuilder:
    b = tt.GraphBuilder("g")
    b.input("x", "float32", ("batch", 784))
    return b


def test_unknown_input_name_raises_graph_error_naming_node_and_input() -> None:
    b = _builder_with_x()
    with pytest.raises(tt.GraphError, match=r"Relu 'act': input 0 'xx' names no value"):
        b.node("Relu", ["xx"], name="act")


def test_matmul_shape_mismatch_raises_shape_error_with_both_shapes_and_leaves_builder_unchanged() -> None:
    b = _builder_with_x()
    b.initializer("w", np.zeros((100, 10), np.float32))
    with pytest.raises(tt.ShapeError, match=r"MatMul 'fc1'.*\[batch, 784\].*\[100, 10\].*784 vs 100"):
        b.node("MatMul", ["x", "w"], name="fc1")
    with pytest.raises(tt.ArgumentError, match="fc1_output_0"):
        b.shape("fc1_output_0")  # the refused node left no value behind
    b.initializer("w_ok", np.zeros((784, 10), np.float32))
    assert b.shape(b.node("MatMul", ["x", "w_ok"], name="fc1")) == ("batch", 10)


def test_add_of_float32_and_int64_raises_shape_error_naming_both_dtypes() -> None:
    b = _builder_with_x()
    b.initializer("offset", np.zeros(784, np.int64))
    with pytest.raises(tt.ShapeError, match=r"Add 'shift': input 0 'x' is float32 but input 1 'offset' is int64"):
        b.node("Add", ["x", "offset"], name="shift")


def test_duplicate_value_and_node_names_raise_graph_error() -> None:
    b = _builder_with_x()
    with pytest.raises(tt.GraphError, match=r"input 'x': the name is taken by a graph input"):
        b.input("x", "float32", (1,))
    with pytest.raises(tt.GraphError, match=r"initializer 'x'"):
        b.initializer("x", np.zeros(3, np.float32))
    b.node("Relu", ["x"], name="act", outputs=["y"])
    with pytest.raises(tt.GraphError, match=r"a node called 'act' exists already"):
        b.node("Sigmoid", ["x"], name="act")
    with pytest.raises(tt.GraphError, match=r"output 'y' is taken by an output of Relu 'act'"):
        b.node("Sigmoid", ["x"], outputs=["y"])


def test_unknown_onnx_op_raises_argument_error_but_custom_domain_is_accepted() -> None:
    b = _builder_with_x()
    with pytest.raises(tt.ArgumentError, match=r"tether knows no ONNX op 'Rleu'"):
        b.node("Rleu", ["x"])
    y = b.node("MyOp", ["x"], domain="com.example")
    assert b.dtype(y) == "undefined"
    b.output(y)
    assert b.build().opset == {"ai.onnx": 17, "com.example": 1}


def test_attribute_of_wrong_kind_or_unknown_name_raises_argument_error() -> None:
    b = _builder_with_x()
    with pytest.raises(tt.ArgumentError, match=r"Softmax 'sm': attribute 'axis' must be int, got string"):
        b.node("Softmax", ["x"], name="sm", axis="last")
    with pytest.raises(tt.ArgumentError, match=r"Gemm has no attribute 'transb'"):
        b.node("Gemm", ["x", "x"], name="g", transb=1)
    with pytest.raises(tt.ArgumentError, match=r"attribute 'pads'.*list attribute"):
        b.node("Conv", ["x", "x"], pads=[1, "a"])
    with pytest.raises(tt.ArgumentError, match=r"attribute 'alpha' has Python type dict"):
        b.node("LeakyRelu", ["x"], alpha={})


def test_output_of_unknown_name_and_build_without_outputs_raise_graph_error() -> None:
    b = _builder_with_x()
    with pytest.raises(tt.GraphError, match=r"output 'nope' names no value"):
        b.output("nope")
    with pytest.raises(tt.GraphError, match=r"graph 'g' has no outputs"):
        b.build()


def test_bad_dim_and_unknown_dtype_raise_argument_error() -> None:
    b = tt.GraphBuilder()
    with pytest.raises(tt.ArgumentError, match=r"input 'x': dim -1 is negative"):
        b.input("x", "float32", (-1, 3))
    with pytest.raises(tt.ArgumentError, match=r"unknown data type 'float31'"):
        b.input("x", "float31", (3,))
