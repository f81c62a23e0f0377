"""Models in onnxruntime's QOperator format: quantize_static(quant_format=QOperator) writes
quantized activations, pooling and joins as com.microsoft contrib ops (QLinearSigmoid,
QLinearLeakyRelu, QLinearMul, QLinearConcat, QLinearAveragePool, QLinearSoftmax beside
QLinearConv, QLinearGlobalAveragePool and QGemm). compile writes each of the first six as its
definition, DequantizeLinear -> float op -> QuantizeLinear, so the CPU engine and Vulkan run
them; the outputs agree with onnxruntime's own kernels on the same file within a few steps of
the output's quantization (onnxruntime computes Sigmoid and Softmax through approximate
tables, one step apart at most per node). The op table (_op_cases.py) checks each op alone."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tether as tt
import torch
from _vulkan import requires_vulkan
from onnx import TensorProto, helper, numpy_helper

EXPANDED = ("QLinearSigmoid", "QLinearLeakyRelu", "QLinearMul", "QLinearConcat", "QLinearAveragePool", "QLinearSoftmax")


class _Net(torch.nn.Module):
    """SiLU (Sigmoid and Mul), LeakyRelu, a channel Concat, average pooling and a Softmax head:
    what EfficientNet-, YOLO- and classifier-style nets put between their convolutions."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 3, padding=1)
        self.c3, self.fc = torch.nn.Conv2d(16, 8, 1), torch.nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.c1(x)
        a = a * torch.sigmoid(a)
        b = torch.nn.functional.leaky_relu(self.c2(a), 0.1)
        d = torch.nn.functional.avg_pool2d(self.c3(torch.cat([a, b], 1)), 2)
        return torch.softmax(self.fc(torch.nn.functional.adaptive_avg_pool2d(d, 1).flatten(1)), -1)


def _images(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3, 16, 16)).astype(np.float32)


@pytest.fixture(scope="module")
def qoperator_model(tmp_path_factory) -> str:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Batches(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter([{"x": _images(i, 1)} for i in range(8)])

        def get_next(self):
            return next(self.it, None)

    d = tmp_path_factory.mktemp("qoperator")
    torch.manual_seed(0)
    torch.onnx.export(_Net().eval(), (torch.randn(1, 3, 16, 16),), str(d / "f.onnx"), input_names=["x"],
                      output_names=["y"], opset_version=17, dynamo=False, dynamic_axes={"x": {0: "n"}})
    quantize_static(str(d / "f.onnx"), str(d / "q.onnx"), Batches(), quant_format=QuantFormat.QOperator,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    ops = {n.op_type for n in onnx.load(str(d / "q.onnx")).graph.node}
    assert set(EXPANDED) <= ops, ops
    return str(d / "q.onnx")


def _output_step(path: str) -> float:
    """The scale of the quantized output the model dequantizes last."""
    m = onnx.load(path)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    last = next(n for n in reversed(m.graph.node) if n.op_type == "DequantizeLinear")
    return float(inits[last.input[1]])


def _assert_within_steps(got: np.ndarray, want: np.ndarray, step: float, steps: int) -> None:
    diff = np.abs(got - want)
    assert diff.max() <= steps * step * 1.001, f"{diff.max() / step:.2f} steps apart"


@pytest.mark.parametrize("optimize", [True, False])
def test_qoperator_model_runs_on_the_cpu_engine_like_onnxruntime(qoperator_model, optimize):
    x = _images(100, 4)
    want = ort.InferenceSession(qoperator_model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    sess = tt.compile(qoperator_model, optimize=optimize)
    got = sess.run({"x": x})["y"]
    _assert_within_steps(got, want, _output_step(qoperator_model), 3)
    assert np.mean(np.abs(got - want) < 1e-9) > 0.9
    assert (got.argmax(1) == want.argmax(1)).all()
    # Each contrib node became a QuantizeLinear of its own name, after its float op; with the
    # graph passes, the unary ones then one table lookup of that name, the Mul one integer node.
    steps = {s["name"]: s["op_type"] for s in sess.steps()}
    assert not {f"com.microsoft:{e}" for e in EXPANDED} & set(steps.values()), steps
    fused = {"/Sigmoid_quant": "ai.tether:QLinearLookup", "/LeakyRelu_quant": "ai.tether:QLinearLookup",
             "/Mul_quant": "ai.tether:QLinearMul"}
    for name in ("/Sigmoid_quant", "/LeakyRelu_quant", "/Mul_quant", "/Concat_quant", "/AveragePool_quant", "/Softmax_quant"):
        want = fused.get(name, "QuantizeLinear") if optimize else "QuantizeLinear"
        assert steps.get(name) == want, (name, steps)
    assert "expand_qoperator_ops: 6 onnxruntime QOperator nodes" in sess.report


@requires_vulkan
@pytest.mark.usefixtures("vulkan_validation")
def test_qoperator_model_runs_wholly_on_vulkan_like_the_cpu_engine(qoperator_model):
    """The whole model runs on the device (strict): the expanded ops, and the contrib ops Vulkan
    has kernels for (QLinearConv, QLinearAdd, QLinearGlobalAveragePool, QGemm)."""
    x = _images(101, 2)
    sess = tt.compile(qoperator_model, device="vulkan", strict=True)
    on_device = {s["op_type"] for s in sess.steps() if s["backend"] == "vulkan"}
    assert {"ai.tether:QLinearLookup", "Concat", "AveragePool", "Softmax", "QuantizeLinear",
            "com.microsoft:QLinearGlobalAveragePool", "com.microsoft:QGemm"} <= on_device, on_device
    got, ref = sess.run({"x": x})["y"], tt.compile(qoperator_model).run({"x": x})["y"]
    _assert_within_steps(got, ref, _output_step(qoperator_model), 3)


@pytest.mark.parametrize("optimize", [True, False])
def test_ops_config_of_a_qoperator_model_lists_the_kernels_it_runs_on(qoperator_model, optimize):
    """A reduced deployment build keeps the kernels the contrib ops become, not the contrib ops."""
    from tether._ops_config import ops_config

    ops = set(ops_config([qoperator_model], optimize=optimize))
    assert not {("com.microsoft", op) for op in EXPANDED} & ops, ops
    want = {("", "DequantizeLinear"), ("", "QuantizeLinear"), ("", "Concat"), ("", "AveragePool"), ("", "Softmax")}
    want |= {("", "Sigmoid"), ("", "LeakyRelu")}  # with optimize, to compute the lookups' tables at compile
    want |= {("ai.tether", "QLinearLookup"), ("ai.tether", "QLinearMul")} if optimize else {("", "Mul")}
    assert want <= ops, want - ops


def _contrib(op: str, inputs: list[str], consts: dict[str, np.ndarray], x_shape: list[int], **attrs: object):
    node = helper.make_node(op, inputs, ["y"], name="bad", domain="com.microsoft", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    return tt.load(model.SerializeToString())


def test_malformed_qoperator_nodes_are_model_errors_naming_the_node():
    q = {"s": np.array(0.1, np.float32), "z": np.array(3, np.uint8)}
    with pytest.raises(tt.ModelError, match=r"QLinearConcat 'bad'.*\(X, X_scale, X_zero_point\) per input, got 4 inputs"):
        tt.compile(_contrib("QLinearConcat", ["s", "z", "x", "s"], q, [2, 3]))
    with pytest.raises(tt.ModelError, match=r"QLinearSoftmax 'bad'.*axis 3 is out of range for X of rank 2"):
        tt.compile(_contrib("QLinearSoftmax", ["x", "s", "z", "s", "z"], q, [2, 3], axis=3, opset=13))
    with pytest.raises(tt.ModelError, match=r"QLinearSigmoid 'bad'.*takes X, X_scale.*got 2 inputs"):
        tt.compile(_contrib("QLinearSigmoid", ["x", "s"], q, [2, 3]))
