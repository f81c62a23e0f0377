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
@pytest.mark.parametrize("op", ["Conv", "Gemm", "MatMul"])
def test_fused_op_matches_onnx_op_then_activation(op, act, attrs, params):
    rng = np.random.default_rng(0)
    if op == "Conv":
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
