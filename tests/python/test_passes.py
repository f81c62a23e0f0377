"""Graph passes (tt.optimize, and tt.compile with optimize=True): each rewrite happens where
it should and nowhere it must not, and the optimised graph computes what onnxruntime computes
on the original model."""

from __future__ import annotations

import warnings
from collections import Counter

import numpy as np
import onnx
import pytest
import tether as tt
import torch
from _onnx_oracle import run_ort
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from torch import nn

OPSET = 20


# ---- helpers ------------------------------------------------------------------------------------


def make_model(nodes, inputs, outputs, inits=(), opset=OPSET, input_names_from_inits=()):
    """An ONNX model: `inputs` maps name -> shape (float32), `outputs` lists names (types left
    to inference), `inits` maps name -> array. `input_names_from_inits` are initializers that
    are also graph inputs (overridable defaults)."""
    vis = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs.items()]
    for n in input_names_from_inits:
        a = dict(inits)[n]
        vis.append(helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)))
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
    init = [numpy_helper.from_array(np.asarray(a), n) for n, a in dict(inits).items()]
    graph = helper.make_graph(nodes, "g", vis, outs, init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def rnd(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    """Largest error relative to the reference's largest magnitude (at least 1)."""
    assert got.shape == ref.shape, (got.shape, ref.shape)
    return float(np.abs(got.astype(np.float64) - ref).max(initial=0.0) / max(1.0, np.abs(ref).max(initial=0.0)))


def op_counts(model: tt.Model, layout: bool = False) -> Counter[str]:
    """Nodes per op type. Unless ``layout``, what the channels-last pass adds is left out: its
    Transposes, and the channels_last form of a node counts as the node it came from (a
    FusedConv with neither an activation nor a summand as Conv)."""
    counts: Counter[str] = Counter()
    for n in model.nodes:
        last = n.domain == "ai.tether" and n.attributes.get("channels_last", 0) == 1
        if not layout and n.op_type == "Transpose" and ("_nhwc" in n.name or "_nchw" in n.name):
            continue
        plain = last and n.op_type == "FusedConv" and "activation" not in n.attributes and len(n.inputs) < 4
        counts["Conv" if not layout and plain else n.op_type] += 1
    return counts


def saved_nodes(model: tt.Model) -> dict[str, onnx.NodeProto]:
    """The model's nodes as the onnx package reads them back, by node name."""
    return {n.name: n for n in onnx.load_from_string(model.to_bytes()).graph.node}


def fused_from(node: onnx.NodeProto) -> str | None:
    return next((p.value for p in node.metadata_props if p.key == "tether.fused_from"), None)


def check_parity(proto: onnx.ModelProto, feeds: dict[str, np.ndarray], tol: float = 1e-5) -> tt.Model:
    """tether unoptimised and optimised both agree with onnxruntime on the original model;
    returns tt.optimize(model) for the caller to inspect."""
    data = proto.SerializeToString()
    expected = dict(zip([o.name for o in proto.graph.output], run_ort(data, feeds), strict=True))
    model = tt.load(data)
    results = {}
    for optimize in (False, True):
        results[optimize] = tt.compile(model, threads=1, optimize=optimize).run(feeds)
        assert list(results[optimize]) == list(expected)
        for name, ref in expected.items():
            err = rel_err(results[optimize][name], ref)
            assert err <= tol, f"optimize={optimize} output {name}: error {err:.3g} > {tol}"
    return tt.optimize(model)


# ---- constant folding -----------------------------------------------------------------------------


def test_constant_nodes_and_arithmetic_on_them_fold_into_one_initializer():
    rng = np.random.default_rng(0)
    c1, c2 = rnd(rng, 3, 4), rnd(rng, 4)
    nodes = [
        helper.make_node("Constant", [], ["c1"], value=numpy_helper.from_array(c1)),
        helper.make_node("Constant", [], ["c2"], value=numpy_helper.from_array(c2)),
        helper.make_node("Constant", [], ["two"], value_float=2.0),
        helper.make_node("Add", ["c1", "c2"], ["s"], name="add_consts"),
        helper.make_node("Mul", ["s", "two"], ["t"], name="scale"),
        helper.make_node("Identity", ["t"], ["t_id"]),
        helper.make_node("Add", ["x", "t_id"], ["y"], name="use"),
    ]
    proto = make_model(nodes, {"x": (2, 3, 4)}, ["y"])
    opt = check_parity(proto, {"x": rnd(rng, 2, 3, 4)})
    assert op_counts(opt) == Counter({"Add": 1})
    # The folded value keeps its name and holds what numpy computes.
    np.testing.assert_allclose(opt.initializer("t"), (c1 + c2) * 2.0, rtol=1e-6)


def shape_chain_model(dims):
    """Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])): flatten all but the first dim,
    as the TorchScript exporter writes x.view(x.size(0), -1)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0, name="gather"),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"], name="unsqueeze"),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0, name="concat"),
        helper.make_node("Reshape", ["x", "target"], ["flat"], name="reshape"),
        helper.make_node("Relu", ["flat"], ["y"], name="relu"),
    ]
    inits = {"zero": np.array(0, np.int64), "axes0": np.array([0], np.int64), "minus1": np.array([-1], np.int64)}
    return make_model(nodes, {"x": dims}, ["y"], inits)


def test_shape_gather_concat_chain_folds_when_the_input_shape_is_static():
    rng = np.random.default_rng(1)
    opt = check_parity(shape_chain_model((2, 3, 5, 7)), {"x": rnd(rng, 2, 3, 5, 7)})
    assert op_counts(opt) == Counter({"Reshape": 1, "Relu": 1})
    np.testing.assert_array_equal(opt.initializer("target"), [2, -1])


def test_shape_chain_over_a_symbolic_batch_is_not_folded():
    rng = np.random.default_rng(2)
    proto = shape_chain_model(("N", 3, 5, 7))
    model = tt.load(proto.SerializeToString())
    assert op_counts(tt.optimize(model))["Shape"] == 1
    for batch in (1, 4):
        check_parity(proto, {"x": rnd(rng, batch, 3, 5, 7)})


def test_shape_slice_of_static_dims_folds_beside_a_symbolic_batch():
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("Shape", ["x"], ["tail"], start=1, name="tail_shape"),
        helper.make_node("ReduceProd", ["tail"], ["features"], keepdims=1, name="prod"),
        helper.make_node("Shape", ["x"], ["full"], end=1, name="batch_shape"),
        helper.make_node("Concat", ["full", "features"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    proto = make_model(nodes, {"x": ("N", 3, 4, 5)}, ["y"])
    model = tt.load(proto.SerializeToString())
    opt = tt.optimize(model)
    # Shape(start=1) is [3, 4, 5] whatever N is; the product folds with it. Shape(end=1) is N.
    assert op_counts(opt) == Counter({"Shape": 1, "Concat": 1, "Reshape": 1})
    np.testing.assert_array_equal(opt.initializer("features"), [60])
    # Unoptimised, the engine cannot plan this graph (inference does not track ReduceProd of a
    # shape); folded, the Reshape target is [N, 60] and it can.
    sess = tt.compile(model, threads=1)
    for batch in (1, 3):
        x = rnd(rng, batch, 3, 4, 5)
        assert rel_err(sess(x), run_ort(proto.SerializeToString(), {"x": x})[0]) <= 1e-6


def test_results_over_a_mebibyte_are_not_folded_unless_the_inputs_were_larger():
    rng = np.random.default_rng(4)
    one = numpy_helper.from_array(np.array([1.5], np.float32))
    nodes = [
        helper.make_node("ConstantOfShape", ["big_shape"], ["big"], value=one, name="big_fill"),  # 2 MiB
        helper.make_node("ConstantOfShape", ["small_shape"], ["small"], value=one, name="small_fill"),
        helper.make_node("Expand", ["row", "big_shape"], ["wide"], name="expand"),  # 2 MiB from 2 KiB
        helper.make_node("Tile", ["row2d", "reps"], ["tiled"], name="tile"),  # 2 MiB from 2 KiB
        helper.make_node("Transpose", ["weight"], ["weight_t"], name="transpose"),  # 2 MiB from 2 MiB
        helper.make_node("Add", ["x", "big"], ["a"]),
        helper.make_node("Add", ["a", "wide"], ["b"]),
        helper.make_node("Add", ["b", "tiled"], ["c"]),
        helper.make_node("Add", ["c", "weight_t"], ["d"]),
        helper.make_node("Mul", ["d", "small"], ["y"]),
    ]
    inits = {
        "big_shape": np.array([512, 1024], np.int64),
        "small_shape": np.array([1024], np.int64),
        "row": rnd(rng, 512, 1),
        "row2d": rnd(rng, 1, 1024)[:, :512],
        "reps": np.array([512, 2], np.int64),
        "weight": rnd(rng, 1024, 512),
    }
    proto = make_model(nodes, {"x": (512, 1024)}, ["y"], inits)
    opt = check_parity(proto, {"x": rnd(rng, 512, 1024)})
    assert "small" in opt.initializer_names and "weight_t" in opt.initializer_names
    counts = op_counts(opt)
    assert (counts["ConstantOfShape"], counts["Expand"], counts["Tile"], counts["Transpose"]) == (1, 1, 1, 0)


def test_folding_keeps_graph_output_names_and_multi_output_nodes():
    rng = np.random.default_rng(5)
    c = rnd(rng, 6, 4)
    nodes = [
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(c), name="const"),
        helper.make_node("Split", ["c", "sizes"], ["top", "bottom"], axis=0, name="split"),
        helper.make_node("Neg", ["top"], ["neg_top"], name="neg"),  # a graph output, computed from constants
        helper.make_node("Add", ["x", "bottom"], ["y"], name="add"),
    ]
    proto = make_model(nodes, {"x": (4, 4)}, ["y", "neg_top", "top"], {"sizes": np.array([2, 4], np.int64)})
    opt = check_parity(proto, {"x": rnd(rng, 4, 4)})
    assert [o.name for o in opt.outputs] == ["y", "neg_top", "top"]
    assert op_counts(opt) == Counter({"Add": 1})
    np.testing.assert_array_equal(opt.initializer("neg_top"), -c[:2])


def test_initializer_that_is_also_a_graph_input_is_not_folded():
    rng = np.random.default_rng(6)
    nodes = [helper.make_node("Mul", ["bias", "two"], ["b2"]), helper.make_node("Add", ["x", "b2"], ["y"])]
    inits = {"bias": rnd(rng, 4), "two": np.array(2.0, np.float32)}
    proto = make_model(nodes, {"x": (3, 4)}, ["y"], inits, input_names_from_inits=["bias"])
    opt = check_parity(proto, {"x": rnd(rng, 3, 4), "bias": rnd(rng, 4)})
    assert op_counts(opt) == Counter({"Mul": 1, "Add": 1})
    check_parity(proto, {"x": rnd(rng, 3, 4)})  # the default itself


def test_random_ops_and_training_dropout_are_kept():
    nodes = [
        helper.make_node("RandomUniformLike", ["c"], ["r"], name="random"),
        helper.make_node("Dropout", ["x", "ratio", "training"], ["d"], name="dropout"),
        helper.make_node("Add", ["d", "r"], ["y"]),
    ]
    inits = {"c": np.zeros((3, 4), np.float32), "ratio": np.array(0.5, np.float32), "training": np.array(True)}
    model = tt.load(make_model(nodes, {"x": (3, 4)}, ["y"], inits).SerializeToString())
    assert op_counts(tt.optimize(model)) == Counter({"RandomUniformLike": 1, "Dropout": 1, "Add": 1})


def test_inference_dropout_and_identity_are_removed():
    rng = np.random.default_rng(7)
    nodes = [
        helper.make_node("Dropout", ["x", "ratio", "training"], ["d"], name="dropout"),
        helper.make_node("Identity", ["d"], ["i"]),
        helper.make_node("Relu", ["i"], ["y"]),
    ]
    inits = {"ratio": np.array(0.5, np.float32), "training": np.array(False)}
    opt = check_parity(make_model(nodes, {"x": (3, 4)}, ["y"], inits), {"x": rnd(rng, 3, 4)})
    assert op_counts(opt) == Counter({"Relu": 1})


# ---- Conv + BatchNormalization ----------------------------------------------------------------------


def bn_params(rng, c):
    return {
        "scale": rng.uniform(0.5, 1.5, c).astype(np.float32),
        "shift": rng.uniform(-0.5, 0.5, c).astype(np.float32),
        "mean": rng.uniform(-0.5, 0.5, c).astype(np.float32),
        "var": rng.uniform(0.2, 1.5, c).astype(np.float32),
    }


CONV_BN_CASES = {
    # id: (op, x shape, w shape, attrs, bias)
    "conv": ("Conv", (2, 3, 13, 11), (5, 3, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 1]}, True),
    "conv_no_bias": ("Conv", (1, 4, 7, 9), (7, 4, 1, 3), {}, False),
    "conv_groups": ("Conv", (2, 6, 9, 9), (9, 2, 3, 3), {"group": 3, "dilations": [2, 1]}, True),
    "conv_1d": ("Conv", (3, 4, 13), (6, 4, 5), {"auto_pad": "SAME_UPPER"}, False),
    "conv_transpose": ("ConvTranspose", (2, 4, 5, 7), (4, 3, 3, 3), {"strides": [2, 2]}, True),
    "conv_transpose_groups": ("ConvTranspose", (1, 6, 5, 5), (6, 2, 2, 3), {"group": 3, "pads": [0, 1, 0, 1]}, False),
}


@pytest.mark.parametrize("case", sorted(CONV_BN_CASES))
def test_conv_batchnorm_folds_into_the_conv_weights(case):
    op, xs, ws, attrs, bias = CONV_BN_CASES[case]
    rng = np.random.default_rng(10)
    cout = ws[1] * attrs.get("group", 1) if op == "ConvTranspose" else ws[0]
    inits = {"w": rnd(rng, *ws), **bn_params(rng, cout)}
    conv_inputs = ["x", "w"]
    if bias:
        inits["b"] = rnd(rng, cout)
        conv_inputs.append("b")
    nodes = [
        helper.make_node(op, conv_inputs, ["c"], name="conv", **attrs),
        helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["y"], name="bn", epsilon=1e-3),
    ]
    opt = check_parity(make_model(nodes, {"x": xs}, ["y"], inits), {"x": rnd(rng, *xs)}, tol=1e-4)
    assert op_counts(opt) == Counter({op: 1})
    node = saved_nodes(opt)["bn"]
    assert (node.op_type, fused_from(node), list(node.output)) == (op, "conv,bn", ["y"])
    # The original weights are gone; only the folded ones remain.
    assert "w" not in opt.initializer_names and len(opt.initializer_names) == 2


@pytest.mark.parametrize("reader", ["graph_output", "second_reader"])
def test_batchnorm_is_not_folded_when_the_conv_output_is_read_elsewhere(reader):
    rng = np.random.default_rng(11)
    inits = {"w": rnd(rng, 4, 3, 3, 3), **bn_params(rng, 4)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["bn_out"], name="bn"),
    ]
    outputs = ["bn_out"]
    if reader == "graph_output":
        outputs.append("c")
    else:
        nodes.append(helper.make_node("Sigmoid", ["c"], ["side"]))
        outputs.append("side")
    opt = check_parity(make_model(nodes, {"x": (2, 3, 8, 8)}, outputs, inits), {"x": rnd(rng, 2, 3, 8, 8)})
    assert op_counts(opt)["BatchNormalization"] == 1


def test_batchnorm_with_parameters_from_graph_inputs_is_not_folded():
    rng = np.random.default_rng(12)
    inits = {"w": rnd(rng, 4, 3, 3, 3), **bn_params(rng, 4)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["y"]),
    ]
    proto = make_model(nodes, {"x": (1, 3, 6, 6)}, ["y"], inits, input_names_from_inits=["mean"])
    opt = check_parity(proto, {"x": rnd(rng, 1, 3, 6, 6), "mean": rnd(rng, 4)})
    assert op_counts(opt)["BatchNormalization"] == 1


# ---- MatMul + Add ---------------------------------------------------------------------------------


MATMUL_ADD_CASES = {
    # id: (A shape, B shape, B constant, bias shape, bias first in the Add, expected op)
    "2d_row_bias": ((7, 13), (13, 5), True, (5,), False, "Gemm"),
    "2d_row_bias_2d": ((7, 13), (13, 5), True, (1, 5), True, "Gemm"),
    "2d_scalar_bias": ((1, 3), (3, 1), True, (1,), False, "Gemm"),
    "batched_a": ((2, 3, 13), (13, 5), True, (5,), False, "FusedMatMul"),
    "batched_both": ((2, 3, 13), (2, 13, 5), True, (1, 1, 5), True, "FusedMatMul"),
    "2d_runtime_b": ((7, 13), (13, 5), False, (5,), False, "FusedMatMul"),
}


@pytest.mark.parametrize("case", sorted(MATMUL_ADD_CASES))
def test_matmul_add_becomes_gemm_or_fused_matmul(case):
    a_shape, b_shape, b_const, bias_shape, bias_first, expected = MATMUL_ADD_CASES[case]
    rng = np.random.default_rng(20)
    inputs = {"a": a_shape}
    feeds = {"a": rnd(rng, *a_shape)}
    inits = {"bias": rnd(rng, *bias_shape)}
    if b_const:
        inits["b"] = rnd(rng, *b_shape)
    else:
        inputs["b"] = b_shape
        feeds["b"] = rnd(rng, *b_shape)
    add_inputs = ["bias", "mm"] if bias_first else ["mm", "bias"]
    nodes = [helper.make_node("MatMul", ["a", "b"], ["mm"], name="mm"), helper.make_node("Add", add_inputs, ["y"], name="add")]
    opt = check_parity(make_model(nodes, inputs, ["y"], inits), feeds)
    assert op_counts(opt) == Counter({expected: 1})
    node = saved_nodes(opt)["add"]
    assert fused_from(node) == "mm,add"
    assert not any(a.name == "activation" for a in node.attribute)
    if expected == "FusedMatMul":
        assert node.domain == "ai.tether" and opt.opset["ai.tether"] == 1
    np.testing.assert_array_equal(opt.initializer(node.input[2]), np.broadcast_to(inits["bias"].reshape(-1), (b_shape[-1],)))


@pytest.mark.parametrize("case", ["bias_over_columns", "bias_from_input", "matmul_read_twice", "bias_widens_output"])
def test_matmul_add_that_is_not_a_row_bias_stays(case):
    rng = np.random.default_rng(21)
    inputs, inits = {"a": (7, 13)}, {"b": rnd(rng, 13, 5)}
    feeds = {"a": rnd(rng, 7, 13)}
    nodes = [helper.make_node("MatMul", ["a", "b"], ["mm"]), helper.make_node("Add", ["mm", "bias"], ["y"])]
    outputs = ["y"]
    if case == "bias_over_columns":
        inits["bias"] = rnd(rng, 7, 1)
    elif case == "bias_from_input":
        inputs["bias"] = (5,)
        feeds["bias"] = rnd(rng, 5)
    elif case == "matmul_read_twice":
        inits["bias"] = rnd(rng, 5)
        nodes.append(helper.make_node("Relu", ["mm"], ["r"]))
        outputs.append("r")
    else:
        inits["bias"] = rnd(rng, 2, 1, 5)
    opt = check_parity(make_model(nodes, inputs, outputs, inits), feeds)
    assert op_counts(opt)["MatMul"] == 1 and op_counts(opt)["Add"] == 1


# ---- activation fusion ------------------------------------------------------------------------------


ACTIVATIONS = {
    # id: (nodes reading "z" and writing "y", initializers, fused activation, params)
    "Relu": (lambda: [helper.make_node("Relu", ["z"], ["y"], name="act")], {}, "Relu", []),
    "LeakyRelu": (lambda: [helper.make_node("LeakyRelu", ["z"], ["y"], name="act", alpha=0.3)], {}, "LeakyRelu", [0.3]),
    "Clip": (lambda: [helper.make_node("Clip", ["z", "lo", "hi"], ["y"], name="act")],
             {"lo": np.array(-0.4, np.float32), "hi": np.array(0.6, np.float32)}, "Clip", [-0.4, 0.6]),
    "ClipMaxOnly": (lambda: [helper.make_node("Clip", ["z", "", "hi"], ["y"], name="act")],
                    {"hi": np.array(6.0, np.float32)}, "Clip", [-np.inf, 6.0]),
    "Sigmoid": (lambda: [helper.make_node("Sigmoid", ["z"], ["y"], name="act")], {}, "Sigmoid", []),
    "HardSigmoid": (lambda: [helper.make_node("HardSigmoid", ["z"], ["y"], name="act", alpha=0.25, beta=0.4)], {},
                    "HardSigmoid", [0.25, 0.4]),
    "HardSwish": (lambda: [helper.make_node("HardSwish", ["z"], ["y"], name="act")], {}, "HardSwish", []),
    "Gelu": (lambda: [helper.make_node("Gelu", ["z"], ["y"], name="act")], {}, "Gelu", []),
    "GeluTanh": (lambda: [helper.make_node("Gelu", ["z"], ["y"], name="act", approximate="tanh")], {}, "GeluTanh", []),
    "Tanh": (lambda: [helper.make_node("Tanh", ["z"], ["y"], name="act")], {}, "Tanh", []),
    "SiLU": (lambda: [helper.make_node("Sigmoid", ["z"], ["s"], name="sig"), helper.make_node("Mul", ["s", "z"], ["y"], name="act")],
             {}, "SiLU", []),
}


def producer(kind, rng):
    """(nodes writing "z", inputs, feeds, initializers, fused op, names the fusion replaces)."""
    if kind == "Conv":
        return ([helper.make_node("Conv", ["x", "w", "b"], ["z"], name="p", pads=[1, 0, 1, 0], strides=[1, 2])],
                {"x": (2, 3, 7, 13)}, {"x": rnd(rng, 2, 3, 7, 13)}, {"w": rnd(rng, 5, 3, 3, 3), "b": rnd(rng, 5)},
                "FusedConv", "p")
    if kind == "Gemm":
        return ([helper.make_node("Gemm", ["x", "w", "b"], ["z"], name="p", transB=1, alpha=0.7, beta=0.5)],
                {"x": (3, 13)}, {"x": rnd(rng, 3, 13)}, {"w": rnd(rng, 6, 13), "b": rnd(rng, 1, 6)}, "FusedGemm", "p")
    if kind == "MatMul":
        return ([helper.make_node("MatMul", ["x", "w"], ["z"], name="p")], {"x": (2, 3, 13)},
                {"x": rnd(rng, 2, 3, 13)}, {"w": rnd(rng, 13, 5)}, "FusedMatMul", "p")
    if kind == "MatMulBias":  # batched: FusedMatMul with the bias
        return ([helper.make_node("MatMul", ["x", "w"], ["m"], name="p"), helper.make_node("Add", ["b", "m"], ["z"], name="bias")],
                {"x": (2, 3, 13)}, {"x": rnd(rng, 2, 3, 13)}, {"w": rnd(rng, 13, 5), "b": rnd(rng, 5)},
                "FusedMatMul", "p,bias")
    assert kind == "MatMulBias2D"  # 2-D with constant weights: Gemm, then FusedGemm
    return ([helper.make_node("MatMul", ["x", "w"], ["m"], name="p"), helper.make_node("Add", ["m", "b"], ["z"], name="bias")],
            {"x": (5, 13)}, {"x": rnd(rng, 5, 13)}, {"w": rnd(rng, 13, 7), "b": rnd(rng, 7)}, "FusedGemm", "p,bias")


PRODUCERS = ["Conv", "Gemm", "MatMul", "MatMulBias", "MatMulBias2D"]


@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
@pytest.mark.parametrize("kind", PRODUCERS)
def test_activation_fuses_into_its_producer(kind, act):
    rng = np.random.default_rng(30)
    p_nodes, inputs, feeds, inits, fused_op, p_names = producer(kind, rng)
    a_nodes, a_inits, a_name, a_params = ACTIVATIONS[act]
    a_nodes = a_nodes()
    proto = make_model(p_nodes + a_nodes, inputs, ["y"], {**inits, **a_inits})
    opt = check_parity(proto, feeds)
    assert op_counts(opt) == Counter({fused_op: 1})
    node = saved_nodes(opt)["act"]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert (node.domain, node.op_type, list(node.output)) == ("ai.tether", fused_op, ["y"])
    assert attrs["activation"] == a_name.encode()
    np.testing.assert_array_equal(attrs.get("activation_params", []), np.float32(a_params))
    assert fused_from(node) == ",".join([p_names] + [n.name for n in a_nodes])
    assert opt.opset["ai.tether"] == 1


def test_clip_bounds_in_attributes_fuse_under_opset_10():
    rng = np.random.default_rng(31)
    nodes = [helper.make_node("Conv", ["x", "w"], ["z"], name="conv"),
             helper.make_node("Clip", ["z"], ["y"], name="clip", min=0.0, max=6.0)]
    proto = make_model(nodes, {"x": (1, 2, 5, 5)}, ["y"], {"w": rnd(rng, 3, 2, 3, 3) * 4}, opset=10)
    opt = check_parity(proto, {"x": rnd(rng, 1, 2, 5, 5)})
    node = saved_nodes(opt)["clip"]
    assert node.op_type == "FusedConv"
    assert list(helper.get_attribute_value(next(a for a in node.attribute if a.name == "activation_params"))) == [0, 6]


@pytest.mark.parametrize("case", ["two_readers", "graph_output", "clip_bounds_from_input", "clip_min_above_max",
                                  "silu_input_read_thrice", "producer_is_add"])
def test_activation_is_not_fused_where_it_must_not_be(case):
    rng = np.random.default_rng(32)
    inputs, feeds = {"x": (2, 3, 6, 6)}, {"x": rnd(rng, 2, 3, 6, 6)}
    inits = {"w": rnd(rng, 4, 3, 3, 3)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["z"], name="conv")]
    outputs = ["y"]
    if case == "two_readers":
        nodes += [helper.make_node("Relu", ["z"], ["y"]), helper.make_node("Neg", ["z"], ["other"])]
        outputs.append("other")
    elif case == "graph_output":
        nodes.append(helper.make_node("Relu", ["z"], ["y"]))
        outputs.append("z")
    elif case == "clip_bounds_from_input":
        nodes.append(helper.make_node("Clip", ["z", "lo", "hi"], ["y"]))
        inputs.update(lo=(), hi=())
        feeds.update(lo=np.array(-0.5, np.float32), hi=np.array(0.5, np.float32))
    elif case == "clip_min_above_max":
        nodes.append(helper.make_node("Clip", ["z", "lo", "hi"], ["y"]))
        inits.update(lo=np.array(0.5, np.float32), hi=np.array(-0.5, np.float32))
    elif case == "silu_input_read_thrice":
        nodes += [helper.make_node("Sigmoid", ["z"], ["s"]), helper.make_node("Mul", ["z", "s"], ["y"]),
                  helper.make_node("Neg", ["z"], ["other"])]
        outputs.append("other")
    else:  # an activation whose input no conv, gemm or matmul makes
        nodes = [helper.make_node("Add", ["x", "x"], ["z"]), helper.make_node("Relu", ["z"], ["y"])]
    proto = make_model(nodes, inputs, outputs, inits)
    model = tt.load(proto.SerializeToString())
    opt = tt.optimize(model)
    # (The conv may run channels last, as an ai.tether FusedConv without an activation.)
    assert not any(n.domain == "ai.tether" and "activation" in n.attributes for n in opt.nodes)
    if case != "clip_min_above_max":  # what Clip does with min > max is not what this test is about
        check_parity(proto, feeds)


def test_activation_after_an_already_fused_activation_stays():
    rng = np.random.default_rng(33)
    nodes = [helper.make_node("Conv", ["x", "w"], ["z"], name="conv"), helper.make_node("Relu", ["z"], ["r"], name="relu"),
             helper.make_node("Sigmoid", ["r"], ["y"], name="sig")]
    opt = check_parity(make_model(nodes, {"x": (1, 3, 5, 5)}, ["y"], {"w": rnd(rng, 2, 3, 3, 3)}),
                       {"x": rnd(rng, 1, 3, 5, 5)})
    assert op_counts(opt) == Counter({"FusedConv": 1, "Sigmoid": 1})


def test_conv_batchnorm_relu_becomes_one_fused_conv_that_traces_all_three():
    rng = np.random.default_rng(34)
    inits = {"w": rnd(rng, 6, 3, 3, 3), **bn_params(rng, 6)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="stem.conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["b"], name="stem.bn"),
        helper.make_node("Relu", ["b"], ["y"], name="stem.relu"),
    ]
    opt = check_parity(make_model(nodes, {"x": (2, 3, 9, 9)}, ["y"], inits), {"x": rnd(rng, 2, 3, 9, 9)}, tol=1e-4)
    node = saved_nodes(opt)["stem.relu"]
    assert (node.op_type, fused_from(node)) == ("FusedConv", "stem.conv,stem.bn,stem.relu")


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_conv_batchnorm_activation_over_random_geometry_agrees_with_onnxruntime(data):
    """Conv (any group, stride, dilation, padding) + BN + an activation: folded, fused, and
    the same function as onnxruntime computes on the original graph."""
    group = data.draw(st.sampled_from([1, 2, 3]))
    cin, cout = group * data.draw(st.integers(1, 3)), group * data.draw(st.integers(1, 3))
    k = [data.draw(st.integers(1, 3)) for _ in range(2)]
    dil = [data.draw(st.integers(1, 2)) for _ in range(2)]
    pads = [data.draw(st.integers(0, kk - 1)) for kk in k] * 2
    size = [data.draw(st.integers((kk - 1) * d + 1, 13)) for kk, d in zip(k, dil, strict=True)]
    strides = [data.draw(st.integers(1, 3)) for _ in range(2)]
    act = data.draw(st.sampled_from(sorted(ACTIVATIONS)))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    inits = {"w": rnd(rng, cout, cin // group, *k), **bn_params(rng, cout)}
    a_nodes, a_inits, a_name, _ = ACTIVATIONS[act]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", group=group, dilations=dil, pads=pads, strides=strides),
        helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["z"], name="bn"),
        *a_nodes(),
    ]
    shape = (data.draw(st.integers(1, 2)), cin, *size)
    opt = check_parity(make_model(nodes, {"x": shape}, ["y"], {**inits, **a_inits}), {"x": rnd(rng, *shape)}, tol=1e-4)
    assert op_counts(opt) == Counter({"FusedConv": 1})


def test_a_constant_graph_output_that_is_also_read_folds_and_runs():
    rng = np.random.default_rng(35)
    c = rnd(rng, 3, 4)
    nodes = [
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(c), name="const"),
        helper.make_node("Add", ["x", "c"], ["y"], name="add"),
    ]
    proto = make_model(nodes, {"x": (3, 4)}, ["y", "c"])
    x = rnd(rng, 3, 4)
    expected = run_ort(proto.SerializeToString(), {"x": x})
    out = tt.compile(tt.load(proto.SerializeToString()), threads=1).run({"x": x})
    assert list(out) == ["y", "c"]
    for got, ref in zip(out.values(), expected, strict=True):
        assert rel_err(got, ref) <= 1e-6
    assert tt.optimize(proto.SerializeToString()).initializer_names == ["c"]


# ---- Conv + residual Add -------------------------------------------------------------------------


CONV_ADD_CASES = {
    # id: (conv has a bias, the Add reads the conv output first, BN between conv and Add, activation after)
    "conv_add_relu": (True, True, False, True),
    "residual_first": (True, False, False, True),
    "no_bias": (False, True, False, True),
    "batchnorm_between": (False, False, True, True),
    "no_activation": (True, True, False, False),
}


@pytest.mark.parametrize("case", sorted(CONV_ADD_CASES))
def test_conv_add_becomes_fused_conv_with_the_summand_as_fourth_input(case):
    bias, conv_first, bn, act = CONV_ADD_CASES[case]
    rng = np.random.default_rng(50)
    inits = {"w": rnd(rng, 4, 3, 3, 3), **bn_params(rng, 4)}
    conv_in = ["x", "w"]
    if bias:
        inits["b"] = rnd(rng, 4)
        conv_in.append("b")
    nodes = [helper.make_node("Conv", conv_in, ["c"], name="conv", pads=[1, 1, 1, 1], strides=[2, 2])]
    names = ["conv"]
    if bn:
        nodes.append(helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["cb"], name="bn"))
        names.append("bn")
    z = nodes[-1].output[0]
    # The residual is computed after the conv in graph order, as in a downsampling block.
    nodes.append(helper.make_node("Neg", ["r_in"], ["r"], name="neg"))
    nodes.append(helper.make_node("Add", [z, "r"] if conv_first else ["r", z], ["s"], name="add"))
    names.append("add")
    if act:
        nodes.append(helper.make_node("Relu", ["s"], ["y"], name="relu"))
        names.append("relu")
    inputs = {"x": ("n", 3, 9, 7), "r_in": ("n", 4, 5, 4)}
    feeds = {"x": rnd(rng, 2, 3, 9, 7), "r_in": rnd(rng, 2, 4, 5, 4)}
    opt = check_parity(make_model(nodes, inputs, ["y" if act else "s"], inits), feeds, tol=1e-4)
    assert op_counts(opt) == Counter({"FusedConv": 1, "Neg": 1})
    node = saved_nodes(opt)[names[-1]]
    assert (node.domain, node.op_type, list(node.output)) == ("ai.tether", "FusedConv", ["y" if act else "s"])
    assert len(node.input) == 4 and node.input[3] == "r"
    assert (node.input[2] != "") == (bias or bn)
    assert fused_from(node) == ",".join(names)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs.get("activation") == (b"Relu" if act else None)
    assert attrs["strides"] == [2, 2] and attrs["pads"] == [1, 1, 1, 1]


@pytest.mark.parametrize("case", ["broadcast_channels", "broadcast_batch", "widens_output", "other_symbol",
                                  "second_reader", "graph_output", "activation_before_add", "conv_transpose"])
def test_conv_add_is_not_fused_where_it_must_not_be(case):
    rng = np.random.default_rng(51)
    inits = {"w": rnd(rng, 4, 3, 3, 3)}
    inputs = {"x": (2, 3, 6, 6), "r": (2, 4, 4, 4)}
    op = "ConvTranspose" if case == "conv_transpose" else "Conv"
    if op == "ConvTranspose":
        inits["w"] = rnd(rng, 3, 4, 3, 3)
        inputs["r"] = (2, 4, 8, 8)
    nodes = [helper.make_node(op, ["x", "w"], ["z"], name="conv")]
    outputs = ["y"]
    add_in = "z"
    if case == "broadcast_channels":
        inputs["r"] = (4, 1, 1)
    elif case == "broadcast_batch":
        inputs["r"] = (1, 4, 4, 4)
    elif case == "widens_output":
        inputs["x"] = (1, 3, 6, 6)
    elif case == "other_symbol":
        inputs["x"], inputs["r"] = ("n", 3, 6, 6), ("m", 4, 4, 4)
    elif case == "second_reader":
        nodes.append(helper.make_node("Sigmoid", ["z"], ["side"]))
        outputs.append("side")
    elif case == "graph_output":
        outputs.append("z")
    elif case == "activation_before_add":
        nodes.append(helper.make_node("Relu", ["z"], ["zr"], name="relu"))
        add_in = "zr"
    nodes.append(helper.make_node("Add", [add_in, "r"], ["y"], name="add"))
    feeds = {k: rnd(rng, *[2 if isinstance(d, str) else d for d in v]) for k, v in inputs.items()}
    opt = check_parity(make_model(nodes, inputs, outputs, inits), feeds)
    assert op_counts(opt)["Add"] == 1
    assert all(len(n.input) <= 3 for n in onnx.load_from_string(opt.to_bytes()).graph.node if n.op_type == "FusedConv")


def test_conv_add_fusion_keeps_a_second_residual_add_separate():
    """Add(conv1, conv2) in a downsampling block: one conv takes the other's output as its
    summand; the Relu after the Add then fuses as usual."""
    rng = np.random.default_rng(52)
    inits = {"w1": rnd(rng, 4, 3, 3, 3), "w2": rnd(rng, 4, 3, 1, 1)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="main", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w2"], ["b"], name="down"),
             helper.make_node("Add", ["a", "b"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    opt = check_parity(make_model(nodes, {"x": (1, 3, 8, 8)}, ["y"], inits), {"x": rnd(rng, 1, 3, 8, 8)})
    assert op_counts(opt) == Counter({"Conv": 1, "FusedConv": 1})
    assert fused_from(saved_nodes(opt)["relu"]) == "main,add,relu"


# ---- reports, saving, and the real models ---------------------------------------------------------


def test_session_report_counts_each_pass():
    rng = np.random.default_rng(40)
    nodes = [helper.make_node("Conv", ["x", "w"], ["z"]), helper.make_node("Relu", ["z"], ["y"])]
    model = tt.load(make_model(nodes, {"x": (1, 2, 4, 4)}, ["y"], {"w": rnd(rng, 2, 2, 1, 1)}).SerializeToString())
    report = tt.compile(model).report
    for line in ("pass remove_identities: 0", "pass fold_constants: 0", "pass fold_conv_batchnorm: 0",
                 "pass fuse_matmul_add: 0", "pass fuse_conv_add: 0", "pass fuse_activations: 1", "pass remove_dead_nodes: 0"):
        assert line in report, report
    assert "pass" not in tt.compile(model, optimize=False).report


def test_optimize_returns_a_copy_and_accepts_bytes():
    rng = np.random.default_rng(41)
    nodes = [helper.make_node("Gemm", ["x", "w"], ["z"]), helper.make_node("Relu", ["z"], ["y"])]
    data = make_model(nodes, {"x": (2, 3)}, ["y"], {"w": rnd(rng, 3, 4)}).SerializeToString()
    model = tt.load(data)
    assert op_counts(tt.optimize(data)) == Counter({"FusedGemm": 1})
    assert op_counts(model) == Counter({"Gemm": 1, "Relu": 1})


def check_saved_optimized_model(proto_or_path, feeds, tmp_path, tol):
    """Saves tt.optimize(model), reloads it, runs it on tether and compares with onnxruntime on
    the original; every fused node's trace names nodes of the original model."""
    data = proto_or_path.SerializeToString() if isinstance(proto_or_path, onnx.ModelProto) else None
    original = onnx.load_from_string(data) if data else onnx.load(str(proto_or_path))
    opt = tt.optimize(tt.load(data if data else proto_or_path))
    path = tmp_path / "optimized.onnx"
    opt.save(path)
    saved = onnx.load(str(path))
    names = {n.name for n in original.graph.node}
    for node in saved.graph.node:
        trace = fused_from(node)
        if trace is not None:
            assert set(trace.split(",")) <= names, trace
            assert node.name == trace.split(",")[-1]
    expected = run_ort(data if data else proto_or_path, feeds)
    for optimize in (False, True):
        out = tt.compile(tt.load(path), threads=1, optimize=optimize).run(feeds)
        assert list(out) == [o.name for o in original.graph.output]
        for got, ref in zip(out.values(), expected, strict=True):
            assert rel_err(got, ref) <= tol
    return opt


def test_real_models_optimized_agree_with_onnxruntime(exported, tmp_path):
    model = tt.load(exported.path)
    before = op_counts(model)
    opt = tt.optimize(model)
    after = op_counts(opt)
    for batch in (1, 3):
        feeds = exported.inputs(batch, seed=batch)
        expected = run_ort(exported.path, feeds)[0]
        for optimize in (False, True):
            got = tt.compile(model, threads=1, optimize=optimize)(feeds["x"])
            assert rel_err(got, expected) <= 1e-4
    check_saved_optimized_model(exported.path, exported.inputs(2), tmp_path, 1e-4)
    assert sum(after.values()) <= sum(before.values())
    assert "BatchNormalization" not in after and "Identity" not in after
    if before["Conv"]:
        assert after["Conv"] + after["FusedConv"] == before["Conv"]
    print(f"\n{exported.name}: {sum(before.values())} -> {sum(after.values())} nodes; "
          f"before {dict(before)}; after {dict(after)}")


# TorchScript exports keep BatchNormalization, Identity, Constant and Shape chains.


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()

        def block(cin, cout, act, stride=1):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), act)

        self.features = nn.Sequential(
            block(3, 8, nn.ReLU()), block(8, 12, nn.ReLU6(), 2), block(12, 12, nn.Hardswish()),
            block(12, 16, nn.SiLU(), 2), nn.ConvTranspose2d(16, 8, 2, stride=2), nn.BatchNorm2d(8), nn.LeakyReLU(0.1),
        )
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(8 * 16 * 16, 32), nn.GELU(), nn.Linear(32, 32),
                                  nn.Hardsigmoid(), nn.Linear(32, 10), nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.features(x)
        return self.head(y.view(y.size(0), -1))


class TokenMLP(nn.Module):
    """Linear layers over [batch, tokens, features]: MatMul + Add, batched."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(12, 24), nn.GELU(approximate="tanh"), nn.Linear(24, 12), nn.Sigmoid())
        self.norm = nn.LayerNorm(12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.net(x))


def torchscript_export(module: nn.Module, shape, path, dynamic: bool, opset: int):
    torch.manual_seed(0)
    module.eval()
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.zeros(shape),), str(path), input_names=["x"], output_names=["y"],
                          dynamo=False, opset_version=opset, do_constant_folding=False,
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}} if dynamic else None)
    return path


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic_batch"])
def test_torchscript_convnet_is_folded_and_fused_and_agrees_with_onnxruntime(dynamic, tmp_path):
    torch.manual_seed(0)
    module = ConvNet()
    path = torchscript_export(module, (2, 3, 32, 32), tmp_path / "convnet.onnx", dynamic, opset=20)
    model = tt.load(path)
    before = op_counts(model)
    assert before["BatchNormalization"] == 5 and before["Shape"] >= int(dynamic)
    batches = (1, 3) if dynamic else (2,)
    for batch in batches:
        x = np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)
        with torch.no_grad():
            ref = module(torch.from_numpy(x)).numpy()
        opt = check_saved_optimized_model(path, {"x": x}, tmp_path, 1e-4)
        assert rel_err(tt.compile(model, threads=1)(x), ref) <= 1e-4
    after = op_counts(opt)
    # Every conv absorbed its BN and its activation; the Linear layers became FusedGemm.
    assert "BatchNormalization" not in after and "Conv" not in after and "ConvTranspose" in after
    assert after["FusedConv"] == 4 and after["FusedGemm"] == 3
    assert "Identity" not in after and "Constant" not in after and "Dropout" not in after
    # The flatten's Shape chain folds when the batch is static and stays when it is not.
    assert ("Shape" in after) == dynamic
    print(f"\nconvnet ({'dynamic' if dynamic else 'static'}): {sum(before.values())} -> {sum(after.values())} nodes; "
          f"before {dict(before)}; after {dict(after)}")


def test_torchscript_token_mlp_uses_fused_matmul_with_bias_and_activation(tmp_path):
    torch.manual_seed(0)
    module = TokenMLP()
    path = torchscript_export(module, (2, 5, 12), tmp_path / "tokens.onnx", True, opset=20)
    x = np.random.default_rng(0).standard_normal((3, 5, 12)).astype(np.float32)
    opt = check_saved_optimized_model(path, {"x": x}, tmp_path, 1e-5)
    with torch.no_grad():
        ref = module(torch.from_numpy(x)).numpy()
    assert rel_err(tt.compile(path, threads=1)(x), ref) <= 1e-5
    fused = [n for n in opt.nodes if n.op_type == "FusedMatMul"]
    assert sorted(n.attributes["activation"] for n in fused) == ["GeluTanh", "Sigmoid"]
    assert all(len(n.inputs) == 3 for n in fused)
