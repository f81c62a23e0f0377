"""tether's fused ops (ai.tether FusedConv, FusedGemm, FusedMatMul) compute what the ONNX
ops they replace compute, checked with onnxruntime on the unfused graph."""

from __future__ import annotations

import numpy as np
import pytest
import tether as tt
from _onnx_oracle import run_ort
from onnx import TensorProto, helper, numpy_helper

ACTIVATIONS = [
    ("Relu", {}, []),
    ("LeakyRelu", {"alpha": 0.2}, [0.2]),
    ("Clip", None, [-0.5, 0.7]),
    ("Sigmoid", {}, []),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, [0.3, 0.4]),
    ("HardSwish", {}, []),
    ("Gelu", {}, []),
    ("Tanh", {}, []),
]


def activation_nodes(name, attrs, params, x, y):
    if name == "Clip":
        return [helper.make_node("Clip", [x, "clip_min", "clip_max"], [y])], [
            numpy_helper.from_array(np.array(params[0], np.float32), "clip_min"),
            numpy_helper.from_array(np.array(params[1], np.float32), "clip_max"),
        ]
    return [helper.make_node(name, [x], [y], **attrs)], []


def models(op, act, attrs, params, inputs, weights, op_attrs):
    """(onnx reference model, tether fused model) as bytes."""
    init = [numpy_helper.from_array(w, n) for n, w in weights.items()]
    vis = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape)) for n, v in inputs.items()]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    names = list(inputs) + list(weights)
    if op == "MatMul":
        ref_nodes = [helper.make_node("MatMul", names[:2], ["mm"]), helper.make_node("Add", ["mm", names[2]], ["z"])]
    else:
        ref_nodes = [helper.make_node(op, names, ["z"], **op_attrs)]
    act_nodes, act_init = activation_nodes(act, attrs, params, "z", "y")
    ref = helper.make_model(helper.make_graph(ref_nodes + act_nodes, "ref", vis, out, init + act_init),
                            opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    extra = {"activation_params": params} if params else {}
    fused_node = helper.make_node("Fused" + op, names, ["y"], domain="ai.tether", activation=act, **extra, **op_attrs)
    fused = helper.make_model(helper.make_graph([fused_node], "fused", vis, out, init),
                              opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("ai.tether", 1)], ir_version=10)
    return ref, fused


@pytest.mark.parametrize("act,attrs,params", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
@pytest.mark.parametrize("op", ["Conv", "Conv1x1", "Gemm", "MatMul"])
def test_fused_op_matches_onnx_op_then_activation(op, act, attrs, params):
    rng = np.random.default_rng(0)
    if op == "Conv1x1":  # the packed GEMM path, the activation inside the micro-kernel's store when it can
        op = "Conv"
        inputs = {"x": rng.standard_normal((2, 7, 9, 13)).astype(np.float32)}
        weights = {"w": rng.standard_normal((20, 7, 1, 1)).astype(np.float32), "b": rng.standard_normal(20).astype(np.float32)}
        op_attrs = {}
    elif op == "Conv":
        inputs = {"x": rng.standard_normal((2, 3, 13, 11)).astype(np.float32)}
        weights = {"w": rng.standard_normal((5, 3, 3, 3)).astype(np.float32), "b": rng.standard_normal(5).astype(np.float32)}
        op_attrs = {"pads": [1, 1, 1, 1], "strides": [2, 1]}
    elif op == "Gemm":
        inputs = {"x": rng.standard_normal((7, 13)).astype(np.float32)}
        weights = {"w": rng.standard_normal((5, 13)).astype(np.float32), "b": rng.standard_normal(5).astype(np.float32)}
        op_attrs = {"transB": 1, "alpha": 0.5}
    else:
        inputs = {"x": rng.standard_normal((2, 3, 13)).astype(np.float32)}
        weights = {"w": rng.standard_normal((13, 5)).astype(np.float32), "b": rng.standard_normal(5).astype(np.float32)}
        op_attrs = {}
    ref, fused = models(op, act, attrs, params, inputs, weights, op_attrs)
    expected = run_ort(ref.SerializeToString(), inputs)[0]
    got = tt.compile(tt.load(fused.SerializeToString()), threads=1).run(inputs)["y"]
    assert np.abs(got - expected).max() <= 1e-5 * max(1.0, np.abs(expected).max())


def test_unknown_fused_activation_is_a_model_error():
    ref, fused = models("Gemm", "Relu", {}, [], {"x": np.zeros((2, 3), np.float32)},
                        {"w": np.zeros((3, 4), np.float32), "b": np.zeros(4, np.float32)}, {})
    fused.graph.node[0].attribute[0].s = b"Wobble"
    with pytest.raises(tt.ModelError, match="unknown fused activation 'Wobble'"):
        tt.compile(tt.load(fused.SerializeToString()))


def residual_models(cin, cout, spatial, conv_attrs, act, with_bias, rng):
    """(onnx model: Conv -> Add(r, conv) -> activation, tether model: FusedConv with r as its
    summand and the activation, feeds)."""
    w = rng.standard_normal((cout, cin // conv_attrs.get("group", 1), 3, 3)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    x = rng.standard_normal((2, cin, *spatial)).astype(np.float32)
    s = conv_attrs.get("strides", [1, 1])
    out = [(n + 2 - 3) // st + 1 for n, st in zip(spatial, s, strict=True)]
    r = rng.standard_normal((2, cout, *out)).astype(np.float32)
    attrs = {"pads": [1, 1, 1, 1], **conv_attrs}
    init = [numpy_helper.from_array(w, "w")] + ([numpy_helper.from_array(b, "b")] if with_bias else [])
    vis = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape)),
           helper.make_tensor_value_info("r", TensorProto.FLOAT, list(r.shape))]
    out_vi = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    name, act_attrs, params = act
    act_nodes, act_init = activation_nodes(name, act_attrs, params, "s", "y")
    ref_nodes = [helper.make_node("Conv", ["x", "w", "b"] if with_bias else ["x", "w"], ["z"], **attrs),
                 helper.make_node("Add", ["r", "z"], ["s"])]
    ref = helper.make_model(helper.make_graph(ref_nodes + act_nodes, "ref", vis, out_vi, init + act_init),
                            opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    extra = {"activation_params": params} if params else {}
    fused_node = helper.make_node("FusedConv", ["x", "w", "b" if with_bias else "", "r"], ["y"], domain="ai.tether",
                                  activation=name, **extra, **attrs)
    fused = helper.make_model(helper.make_graph([fused_node], "fused", vis, out_vi, init),
                              opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("ai.tether", 1)],
                              ir_version=10)
    return ref, fused, {"x": x, "r": r}


# Geometries reaching each convolution path: GEMM (3x3, strided), depthwise row by row (output
# width >= 32) and depthwise channels last (narrow outputs, channels off the 16-block).
RESIDUAL_PATHS = {
    "gemm": (6, 10, (13, 11), {}),
    "gemm_strided_groups": (6, 9, (13, 11), {"strides": [2, 1], "group": 3}),
    "depthwise_rows": (5, 5, (7, 40), {"group": 5}),
    "depthwise_rows_strided": (5, 5, (7, 80), {"group": 5, "strides": [2, 2]}),
    "depthwise_channels_last": (19, 19, (9, 7), {"group": 19, "strides": [2, 1]}),
}


@pytest.mark.parametrize("act", ACTIVATIONS[:3], ids=[a[0] for a in ACTIVATIONS[:3]])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("path", sorted(RESIDUAL_PATHS))
@pytest.mark.parametrize("threads", [1, 2])
def test_fused_conv_with_summand_matches_conv_add_activation(path, with_bias, act, threads):
    rng = np.random.default_rng(1)
    cin, cout, spatial, attrs = RESIDUAL_PATHS[path]
    ref, fused, feeds = residual_models(cin, cout, spatial, attrs, act, with_bias, rng)
    expected = run_ort(ref.SerializeToString(), feeds)[0]
    got = tt.compile(tt.load(fused.SerializeToString()), threads=threads).run(feeds)["y"]
    assert got.shape == expected.shape
    assert np.abs(got - expected).max() <= 1e-5 * max(1.0, np.abs(expected).max())


def test_fused_conv_summand_of_another_shape_is_a_shape_error():
    rng = np.random.default_rng(2)
    _, fused, feeds = residual_models(3, 4, (5, 5), {}, ACTIVATIONS[0], True, rng)
    fused.graph.input[1].type.tensor_type.shape.dim[3].dim_value = 4
    with pytest.raises(tt.ShapeError, match="summand"):
        tt.compile(tt.load(fused.SerializeToString())).run({"x": feeds["x"], "r": feeds["r"][..., :4]})


CLAMPS = [ACTIVATIONS[0], ACTIVATIONS[2]]  # Relu, Clip


@pytest.mark.parametrize("act", CLAMPS, ids=[a[0] for a in CLAMPS])
@pytest.mark.parametrize("op,kernel", [("Conv", 1), ("Conv", 3), ("Gemm", 0)], ids=["conv1x1", "conv3x3", "gemm"])
def test_fused_clamp_lets_nan_through_as_the_unfused_activation_does(op, kernel, act):
    """Relu and Clip run inside the GEMM micro-kernels' store: NaN from the input must reach the
    output where the product is NaN, and every other element must be the activation of the
    product (onnxruntime computes the product, numpy the activation)."""
    name, attrs, params = act
    rng = np.random.default_rng(3)
    if op == "Conv":
        x = rng.standard_normal((2, 6, 11, 37)).astype(np.float32)
        x[0, 2, 4, 5] = np.nan
        x[1, 0, 0, 36] = np.nan
        weights = {"w": rng.standard_normal((14, 6, kernel, kernel)).astype(np.float32),
                   "b": rng.standard_normal(14).astype(np.float32)}
        op_attrs = {"pads": [kernel // 2] * 4}
    else:
        x = rng.standard_normal((9, 40)).astype(np.float32)
        x[3, 7] = np.nan
        weights = {"w": rng.standard_normal((40, 33)).astype(np.float32), "b": rng.standard_normal(33).astype(np.float32)}
        op_attrs = {}
    ref, fused = models(op, "Relu", {}, [], {"x": x}, weights, op_attrs)  # ref: product then Relu, unused
    product = helper.make_model(helper.make_graph(list(ref.graph.node)[:1], "p", list(ref.graph.input),
                                                  [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                                                  list(ref.graph.initializer)),
                                opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    z = run_ort(product.SerializeToString(), {"x": x})[0]
    lo, hi = (0.0, np.inf) if name == "Relu" else (params[0], params[1])
    expected = np.where(np.isnan(z), np.nan, np.minimum(np.maximum(z, lo), hi)).astype(np.float32)
    _, fused = models(op, name, attrs, params, {"x": x}, weights, op_attrs)
    got = tt.compile(tt.load(fused.SerializeToString()), threads=2).run({"x": x})["y"]
    assert np.isnan(z).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    ok = ~np.isnan(expected)
    assert np.abs(got[ok] - expected[ok]).max() <= 1e-5 * max(1.0, np.abs(expected[ok]).max())
