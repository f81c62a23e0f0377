"""The QDQ pass: DequantizeLinear -> Conv / MatMul / Gemm (-> Relu / Clip) -> QuantizeLinear
becomes one integer node (QLinearConv / QLinearMatMul), on models written by onnxruntime's
quantize_static and by tether's own quantizer; the fused model's outputs are checked against
onnxruntime's (which fuses the same patterns into its own int8 kernels), the fused nodes keep
the names they replace, and patterns the integer kernels cannot take stay as they are."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tether as tt
import torch
from conftest import ORT_U8S8_EXACT
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator


class _Net(torch.nn.Module):
    """Conv + Relu, a residual Add, depthwise Conv + Relu6 (Clip), pooling, Linear: what
    ResNet- and MobileNet-style nets put between their Q/DQ pairs."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 16, 3, padding=1, stride=1)
        self.dw = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pw = torch.nn.Conv2d(16, 24, 1)
        self.fc = torch.nn.Linear(24, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.max_pool2d(torch.relu(self.c1(x)), 3, stride=1, padding=1)
        z = torch.relu(self.c2(y)) + y
        z = torch.clamp(self.dw(z), 0.0, 6.0)
        z = self.pw(z)
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(z, 1).flatten(1))


def _images(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    return [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(n)]


@pytest.fixture(scope="module")
def float_model(tmp_path_factory: pytest.TempPathFactory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("qdq") / "net.onnx"
    torch.onnx.export(_Net().eval(), (torch.randn(1, 3, 16, 16),), str(path), input_names=["x"], output_names=["y"],
                      opset_version=17, dynamo=False)
    return path


def _ort_qdq(src, dst, per_channel: bool, activation_type) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(1)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter({"x": x} for x in _images(rng, 16))

        def get_next(self):
            return next(self.batches, None)

    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                    activation_type=activation_type, weight_type=QuantType.QInt8)


def _fused_ops(path) -> list[tuple[str, str]]:
    return [(n.domain, n.op_type) for n in tt.optimize(tt.load(str(path))).nodes]


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("activation", ["QUInt8", "QInt8"])
def test_onnxruntime_qdq_model_fuses_and_matches_onnxruntime(float_model, tmp_path, per_channel, activation):
    from onnxruntime.quantization import QuantType

    dst = tmp_path / "qdq.onnx"
    _ort_qdq(float_model, dst, per_channel, getattr(QuantType, activation))
    ops = _fused_ops(dst)
    # Four convolutions and the Linear, each one integer node; Relu and the Clip of Relu6 folded in.
    assert sum(op in ("QLinearConv", "QLinearMatMul") for _, op in ops) == 5, ops
    assert ("", "Conv") not in ops and ("", "Gemm") not in ops and ("", "Relu") not in ops and ("", "Clip") not in ops
    assert ("ai.tether", "QLinearAdd") in ops and ("", "Add") not in ops, ops  # the residual connection
    # The MaxPool between them runs on the integers, read from the QLinearConv (channels last,
    # through a Transpose back to NCHW): no DequantizeLinear between them.
    opt_nodes = tt.optimize(tt.load(str(dst))).nodes
    pool = next(n for n in opt_nodes if n.op_type == "MaxPool")
    producer = next(n for n in opt_nodes if pool.inputs[0] in n.outputs)
    while producer.op_type == "Transpose":
        producer = next(n for n in opt_nodes if producer.inputs[0] in n.outputs)
    assert producer.op_type == "QLinearConv"
    # From the first convolution to the last, the chain runs channels last: the convolutions, the
    # residual QLinearAdd and the MaxPool, with one Transpose at each end.
    last = [n for n in opt_nodes if dict(n.attributes).get("channels_last") == 1]
    assert sorted(n.op_type for n in last) == ["MaxPool"] + ["QLinearConv"] * 4, [(n.op_type, n.name) for n in opt_nodes]
    assert ("ai.tether", "QLinearAdd") in ops and sum(op == "Transpose" for _, op in ops) == 2, ops
    # Each fused node keeps the names it replaces (layer-wise parity maps it back by them).
    opt = onnx.load_from_string(tt.optimize(tt.load(str(dst))).to_bytes())
    fused_from = {n.name: {p.key: p.value for p in n.metadata_props}.get("tether.fused_from", "")
                  for n in opt.graph.node if n.op_type == "QLinearConv"}
    assert len(fused_from) == 4 and all("Conv" in f and "QuantizeLinear" in f for f in fused_from.values()), fused_from
    assert sum("Relu" in f for f in fused_from.values()) == 2 and sum("Clip" in f for f in fused_from.values()) == 1

    out_dq = next(n for n in onnx.load(str(dst)).graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "y")
    step = float(numpy_helper.to_array(next(t for t in onnx.load(str(dst)).graph.initializer if t.name == out_dq.input[1])))
    ref = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(2)
    exact = 0
    for threads in (1, 2):
        sess = tt.compile(str(dst), threads=threads)
        for x in _images(rng, 6):
            got, want = sess.run({"x": x})["y"], ref.run(None, {"x": x})[0]
            # The convolutions are the same integer arithmetic; the residual Add and the pooling
            # run in float between Q/DQ on tether and as int8 kernels in onnxruntime: one step.
            assert np.abs(got - want).max() <= step * 1.001
            exact += int(np.array_equal(got, want))
    assert exact >= 1


def test_tethers_quantizer_output_fuses_and_stays_close_to_float(float_model, tmp_path):
    rng = np.random.default_rng(3)
    res = tt.quantize.static(str(float_model), [{"x": x} for x in _images(rng, 16)], eval_samples=0)
    path = tmp_path / "tether.qdq.onnx"
    res.save(path)
    ops = _fused_ops(path)
    assert sum(op in ("QLinearConv", "QLinearMatMul") for _, op in ops) >= 4, ops
    sess = tt.compile(str(path))
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    fp = ort.InferenceSession(str(float_model), providers=["CPUExecutionProvider"])
    for x in _images(rng, 4):
        got, want, f = sess.run({"x": x})["y"], ref.run(None, {"x": x})[0], fp.run(None, {"x": x})[0]
        assert np.abs(got - want).max() <= 0.05 * np.abs(f).max()
        assert np.abs(got - f).max() <= 0.1 * np.abs(f).max()


def _single_conv_qdq(bias_scale_factor: float) -> bytes:
    """x -> DQ -> Conv(DQ(w), DQ(bias)) -> Q: the bias scale is x_scale * w_scale times the factor."""
    rng = np.random.default_rng(4)
    w = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    xs, ws = np.float32(0.05), np.float32(0.01)
    bias = rng.integers(-300, 300, 4).astype(np.int32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(xs), "xs"),
             numpy_helper.from_array(np.array(128, np.uint8), "xz"), numpy_helper.from_array(np.array(ws), "ws"),
             numpy_helper.from_array(np.array(0, np.int8), "wz"), numpy_helper.from_array(bias, "b"),
             numpy_helper.from_array(np.array(xs * ws * np.float32(bias_scale_factor), np.float32), "bs"),
             numpy_helper.from_array(np.array(0.2, np.float32), "ys"), numpy_helper.from_array(np.array(100, np.uint8), "yz")]
    nodes = [helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xf"], name="dq_x"),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], name="dq_w"),
             helper.make_node("DequantizeLinear", ["b", "bs"], ["bf"], name="dq_b"),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["y"], name="q_y")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("xq", onnx.TensorProto.UINT8, [1, 3, 9, 9])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.UINT8, [1, 4, 9, 9])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9).SerializeToString()


@pytest.mark.parametrize("factor, fused", [(1.0, True), (2.0, False)])
def test_a_bias_with_another_scale_is_not_fused_and_stays_right(factor, fused):
    model = _single_conv_qdq(factor)
    ops = [n.op_type for n in tt.optimize(tt.load(model)).nodes]
    assert ("QLinearConv" in ops) == fused, ops
    assert ("Conv" in ops) == (not fused)
    x = np.random.default_rng(5).integers(0, 256, (1, 3, 9, 9)).astype(np.uint8)
    got = tt.compile(tt.load(model)).run({"xq": x})["y"]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, {"xq": x})[0]
    # Fused: integer sums requantized once; as written: float Conv then Q. One step apart at most.
    assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1
    assert np.mean(got == want) > 0.95


@pytest.mark.parametrize("every_matmul", [False, True])
def test_dynamic_quantized_transformer_runs_like_onnxruntime(tmp_path, every_matmul):
    """Attention's activation-by-activation MatMuls too when quantize_dynamic is told to quantize
    them (MatMulConstBOnly off): their B comes from a DynamicQuantizeLinear, and they fuse as
    the weights' MatMuls do."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    torch.manual_seed(0)
    enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0), 2)
    src, dst = tmp_path / "enc.onnx", tmp_path / "enc.int8.onnx"
    torch.onnx.export(enc.eval(), (torch.randn(2, 16, 64),), str(src), input_names=["x"], output_names=["y"],
                      opset_version=17, dynamo=False)
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, extra_options={"MatMulConstBOnly": not every_matmul})
    q = onnx.load(str(dst))
    quantized_at_run_time = {o for n in q.graph.node if n.op_type == "DynamicQuantizeLinear" for o in n.output}
    b_at_run_time = [n.name for n in q.graph.node if n.op_type == "MatMulInteger" and n.input[1] in quantized_at_run_time]
    # at least the scores and the context of each layer's attention
    assert len(b_at_run_time) >= 4 if every_matmul else not b_at_run_time, b_at_run_time
    x = np.random.default_rng(6).standard_normal((2, 16, 64)).astype(np.float32)
    want = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for threads in (1, 2):
        got = tt.compile(str(dst), threads=threads).run({"x": x})["y"]
        # The same integer products; what differs is float rounding in LayerNorm and Softmax.
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    # Each MatMulInteger -> Cast -> Mul (-> Add) is one node.
    ops = _fused_ops(dst)
    assert ("ai.tether", "MatMulIntegerToFloat") in ops and ("", "MatMulInteger") not in ops and ("", "Cast") not in ops, ops


class _Mlp(torch.nn.Module):
    def __init__(self, act: str) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(48, 96), torch.nn.Linear(96, 20, bias=False)
        self.act = {"relu": torch.nn.ReLU(), "gelu": torch.nn.GELU(), "none": torch.nn.Identity()}[act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.act(self.a(x)))


@pytest.mark.parametrize("act", ["relu", "gelu", "none"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_dynamic_matmul_chain_fuses_and_equals_the_unfused_nodes(tmp_path, act, per_channel):
    """quantize_dynamic's MatMulInteger -> Cast -> Mul -> Add (-> activation) becomes one
    MatMulIntegerToFloat whose outputs equal the unfused nodes' bit for bit (the same float
    operations in the same order), with and without bias and per-column weight scales."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    torch.manual_seed(1)
    src, dst = tmp_path / "mlp.onnx", tmp_path / "mlp.int8.onnx"
    torch.onnx.export(_Mlp(act).eval(), (torch.randn(3, 7, 48),), str(src), input_names=["x"], output_names=["y"],
                      opset_version=20, dynamo=False, dynamic_axes={"x": {0: "n"}})
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=per_channel)
    fused = [n for n in tt.optimize(tt.load(str(dst))).nodes if n.op_type == "MatMulIntegerToFloat"]
    assert len(fused) == 2 and len(fused[0].inputs) == 6 and len(fused[1].inputs) == 5, [(n.name, n.inputs) for n in fused]
    if act != "none":
        assert dict(fused[0].attributes)["activation"] == {"relu": "Relu", "gelu": "Gelu"}[act]
    x = np.random.default_rng(8).standard_normal((5, 7, 48)).astype(np.float32)
    plain = tt.compile(str(dst), optimize=False).run({"x": x})["y"]
    for threads in (1, 2):
        got = tt.compile(str(dst), threads=threads).run({"x": x})["y"]
        if act == "gelu":  # the epilogue's erf and the Gelu kernel's may round apart
            np.testing.assert_allclose(got, plain, rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(got, plain)
    if ORT_U8S8_EXACT:
        want = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    else:  # onnxruntime's uint8 x int8 kernel saturates on this CPU: the ONNX reference decides
        want = ReferenceEvaluator(onnx.load(str(dst))).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * float(np.abs(want).max()))


class _Cnn(torch.nn.Module):
    """Convolutions of every form the integer GEMM takes: group 1 (+ Relu), depthwise with a
    stride, grouped 1x1 without bias, and 1-D."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, stride=2, groups=8)
        self.g2 = torch.nn.Conv2d(8, 6, 1, groups=2, bias=False)
        self.c1d = torch.nn.Conv1d(6, 5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.g2(self.dw(torch.relu(self.c1(x))))
        return self.c1d(y.flatten(2))


def test_dynamic_conv_chain_fuses_and_equals_the_unfused_nodes(tmp_path):
    """quantize_dynamic's ConvInteger -> Cast -> Mul -> Add (-> Relu) becomes one
    ConvIntegerToFloat, equal to the unfused nodes bit for bit at 1 and 2 threads, and to
    onnxruntime (or the ONNX reference where onnxruntime's uint8 x int8 kernel saturates)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    torch.manual_seed(2)
    src, dst = tmp_path / "cnn.onnx", tmp_path / "cnn.int8.onnx"
    torch.onnx.export(_Cnn().eval(), (torch.randn(2, 3, 9, 10),), str(src), input_names=["x"], output_names=["y"],
                      opset_version=17, dynamo=False)
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
    fused = [n for n in tt.optimize(tt.load(str(dst))).nodes if n.op_type == "ConvIntegerToFloat"]
    assert [len(n.inputs) for n in fused] == [6, 6, 5, 6], [(n.name, n.inputs) for n in fused]
    assert dict(fused[0].attributes)["activation"] == "Relu" and dict(fused[1].attributes)["group"] == 8
    x = np.random.default_rng(9).standard_normal((2, 3, 9, 10)).astype(np.float32)
    plain = tt.compile(str(dst), optimize=False).run({"x": x})["y"]
    for threads in (1, 2):
        np.testing.assert_array_equal(tt.compile(str(dst), threads=threads).run({"x": x})["y"], plain)
    if ORT_U8S8_EXACT:
        want = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    else:
        want = ReferenceEvaluator(onnx.load(str(dst))).run(None, {"x": x})[0]
    np.testing.assert_allclose(plain, want, rtol=0, atol=1e-4 * float(np.abs(want).max()))


def test_conv_chains_that_must_not_fuse_stay_as_they_are():
    """A scale over another axis than the channels, a bias over the width, and a Cast to
    float16 keep their nodes (each would change what the chain computes)."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.integers(-100, 100, (4, 3, 3, 3)).astype(np.int8), "w")

    def chain(scale: np.ndarray, bias: np.ndarray, to: int = onnx.TensorProto.FLOAT) -> list[str]:
        nodes = [helper.make_node("ConvInteger", ["x", "w"], ["i"]), helper.make_node("Cast", ["i"], ["f"], to=to),
                 helper.make_node("Mul", ["f", "s"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
        inits = [w, numpy_helper.from_array(scale.astype(np.float32 if to == onnx.TensorProto.FLOAT else np.float16), "s"),
                 numpy_helper.from_array(bias.astype(np.float32 if to == onnx.TensorProto.FLOAT else np.float16), "b")]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, [1, 3, 6, 6])],
                                  [helper.make_tensor_value_info("y", to, None)], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        return [n.op_type for n in tt.optimize(tt.load(model.SerializeToString())).nodes]

    ok = chain(np.full((4, 1, 1), 0.01), np.zeros((1, 4, 1, 1)))
    assert ok == ["ConvIntegerToFloat"], ok
    for scale, bias, to in [(np.full((1, 4, 1), 0.01), np.zeros(4), onnx.TensorProto.FLOAT),  # scale over H
                            (np.full(4, 0.01), np.zeros(4), onnx.TensorProto.FLOAT),  # scale over the width
                            (np.float32(0.01), np.zeros(4), onnx.TensorProto.FLOAT16)]:  # a Cast to float16
        assert "ConvIntegerToFloat" not in chain(np.asarray(scale), bias, to)
    # a bias over the width: the product fuses, the Add stays
    assert chain(np.full((4, 1, 1), 0.01), np.zeros(4)) == ["ConvIntegerToFloat", "Add"]


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("attrs", [{"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
                                   {"kernel_shape": [2, 3], "dilations": [2, 1], "ceil_mode": 1, "strides": [2, 2]},
                                   {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER"}])
def test_maxpool_between_qdq_runs_on_the_integers(dtype, attrs):
    """DQ -> MaxPool -> Q with one scale and zero point: the 8-bit MaxPool, equal to onnxruntime's."""
    zp = np.array(3 if dtype == np.uint8 else -5, dtype)
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s"), numpy_helper.from_array(zp, "z")]
    nodes = [helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xf"], name="dq"),
             helper.make_node("MaxPool", ["xf"], ["p"], name="pool", **attrs),
             helper.make_node("QuantizeLinear", ["p", "s", "z"], ["y"], name="q")]
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("xq", t, [2, 3, 11, 10])],
                              [helper.make_tensor_value_info("y", t, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9).SerializeToString()
    assert [n.op_type for n in tt.optimize(tt.load(model)).nodes] == ["MaxPool"]
    info = np.iinfo(dtype)
    x = np.random.default_rng(7).integers(info.min, info.max + 1, (2, 3, 11, 10)).astype(dtype)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"xq": x})[0]
    for threads in (1, 2):
        got = tt.compile(tt.load(model), threads=threads).run({"xq": x})["y"]
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, want)


def test_different_scales_around_a_maxpool_stay_in_float():
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s"), numpy_helper.from_array(np.array(0.2, np.float32), "s2"),
             numpy_helper.from_array(np.array(3, np.uint8), "z")]
    nodes = [helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xf"]),
             helper.make_node("MaxPool", ["xf"], ["p"], kernel_shape=[2, 2]),
             helper.make_node("QuantizeLinear", ["p", "s2", "z"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("xq", onnx.TensorProto.UINT8, [1, 2, 4, 4])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.UINT8, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9).SerializeToString()
    assert [n.op_type for n in tt.optimize(tt.load(model)).nodes] == ["DequantizeLinear", "MaxPool", "QuantizeLinear"]
    x = np.random.default_rng(8).integers(0, 256, (1, 2, 4, 4)).astype(np.uint8)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"xq": x})[0]
    np.testing.assert_array_equal(tt.compile(tt.load(model)).run({"xq": x})["y"], want)


@pytest.mark.parametrize("types", [(np.uint8, np.uint8, np.uint8), (np.int8, np.int8, np.int8), (np.uint8, np.int8, np.int8)])
@pytest.mark.parametrize("relu", [False, True])
def test_residual_add_between_qdq_is_one_node_equal_to_the_nodes_it_replaces(types, relu):
    """Add(DQ(a), DQ(b)) [-> Relu] -> Q: QLinearAdd, bit for bit what the unfused nodes compute."""
    ta, tb, ty = types
    inits = [numpy_helper.from_array(np.array(0.037, np.float32), "sa"), numpy_helper.from_array(np.array(ta(7)), "za"),
             numpy_helper.from_array(np.array(0.021, np.float32), "sb"), numpy_helper.from_array(np.array(tb(-3 if tb == np.int8 else 200)), "zb"),
             numpy_helper.from_array(np.array(0.05, np.float32), "sy"), numpy_helper.from_array(np.array(ty(1)), "zy")]
    nodes = [helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["af"]),
             helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bf"]),
             helper.make_node("Add", ["af", "bf"], ["s"], name="add")]
    if relu:
        nodes.append(helper.make_node("Relu", ["s"], ["r"], name="relu"))
    nodes.append(helper.make_node("QuantizeLinear", ["r" if relu else "s", "sy", "zy"], ["y"], name="q"))
    shape = [2, 5, 7, 9]
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(t)), shape) for n, t in (("a", ta), ("b", tb))]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(ty)), None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9).SerializeToString()
    assert [(n.op_type) for n in tt.optimize(tt.load(model)).nodes] == ["QLinearAdd"]
    rng = np.random.default_rng(9)
    feeds = {n: rng.integers(np.iinfo(t).min, np.iinfo(t).max + 1, shape).astype(t) for n, t in (("a", ta), ("b", tb))}
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    for threads in (1, 2):
        np.testing.assert_array_equal(tt.compile(tt.load(model), threads=threads).run(feeds)["y"], want)


def test_kept_integer_values_keep_their_layout(float_model, tmp_path):
    """A value kept for an observer (compile(keep=...)) stays NCHW: the node that writes it is
    not made channels last, and what is captured equals the unoptimized run's integers."""
    from onnxruntime.quantization import QuantType

    dst = tmp_path / "qdq.onnx"
    _ort_qdq(float_model, dst, True, QuantType.QUInt8)
    model = tt.load(str(dst))
    # Every QuantizeLinear output of a convolution: the integer outputs the QDQ pass fuses into.
    convs = [s for s in tt.compile(model, optimize=False)._core.steps() if s["op_type"] == "Conv"]
    quantized = [s["outputs"][0] for s in tt.compile(model, optimize=False)._core.steps()
                 if s["op_type"] == "QuantizeLinear" and any(s["inputs"][0] in c["outputs"] for c in convs)]
    assert quantized
    x = _images(np.random.default_rng(5), 1)[0]
    _, reference = tt.compile(model, optimize=False, threads=1)._core.run_capture({"x": x}, [])
    kept = tt.compile(model, threads=1, keep=quantized)
    _, captured = kept._core.run_capture({"x": x}, quantized)
    reference, captured = dict(reference), dict(captured)
    for name in quantized:
        assert captured[name].shape == reference[name].shape, name
        # The fused convolution requantizes once where the unfused run rounds in float: one step.
        assert np.abs(captured[name].astype(np.int32) - reference[name].astype(np.int32)).max() <= 1, name


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("same", [True, False])
def test_concat_between_qdq_runs_on_the_integers_when_the_parameters_match(dtype, same):
    """DQ(a), DQ(b) -> Concat -> Q with one scale and zero point everywhere: Concat of the
    integers, equal to onnxruntime's; with another scale on one input it stays in float."""
    zp = np.array(3 if dtype == np.uint8 else -5, dtype)
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s"), numpy_helper.from_array(zp, "z"),
             numpy_helper.from_array(np.array(0.1 if same else 0.2, np.float32), "s2")]
    nodes = [helper.make_node("DequantizeLinear", ["aq", "s", "z"], ["af"], name="dqa"),
             helper.make_node("DequantizeLinear", ["bq", "s2", "z"], ["bf"], name="dqb"),
             helper.make_node("Concat", ["af", "bf"], ["c"], name="cat", axis=1),
             helper.make_node("QuantizeLinear", ["c", "s", "z"], ["y"], name="q")]
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("aq", t, [2, 3, 5]),
                                           helper.make_tensor_value_info("bq", t, [2, 4, 5])],
                              [helper.make_tensor_value_info("y", t, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9).SerializeToString()
    ops = [n.op_type for n in tt.optimize(tt.load(model)).nodes]
    assert ops == (["Concat"] if same else ["DequantizeLinear", "DequantizeLinear", "Concat", "QuantizeLinear"]), ops
    info = np.iinfo(dtype)
    rng = np.random.default_rng(9)
    feeds = {"aq": rng.integers(info.min, info.max + 1, (2, 3, 5)).astype(dtype),
             "bq": rng.integers(info.min, info.max + 1, (2, 4, 5)).astype(dtype)}
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = tt.compile(tt.load(model)).run(feeds)["y"]
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)


def test_onnxruntime_qoperator_model_runs_channels_last_and_matches_onnxruntime(float_model, tmp_path):
    """quantize_static's QOperator format (QLinearConv, com.microsoft QLinearAdd, QGemm and
    QLinearGlobalAveragePool): tether runs it, its convolutions and residual adds channels last,
    within one output step of onnxruntime (whose QLinearAdd rounds with fixed-point multipliers)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(1)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter({"x": x} for x in _images(rng, 8))

        def get_next(self):
            return next(self.batches, None)

    dst = tmp_path / "qop.onnx"
    quantize_static(str(float_model), str(dst), Reader(), quant_format=QuantFormat.QOperator, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    written = {(n.domain, n.op_type) for n in onnx.load(str(dst)).graph.node}
    assert {("com.microsoft", "QLinearAdd"), ("com.microsoft", "QGemm"), ("com.microsoft", "QLinearGlobalAveragePool"),
            ("", "QLinearConv")} <= written, written
    nodes = tt.optimize(tt.load(str(dst))).nodes
    assert sum(dict(n.attributes).get("channels_last") == 1 for n in nodes) >= 4
    graph = onnx.load(str(dst)).graph
    out_dq = next(n for n in graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "y")
    step = float(numpy_helper.to_array(next(t for t in graph.initializer if t.name == out_dq.input[1])))
    ref = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    for threads in (1, 2):
        sess = tt.compile(str(dst), threads=threads)
        for x in _images(np.random.default_rng(3), 4):
            got, want = sess.run({"x": x})["y"], ref.run(None, {"x": x})[0]
            assert np.abs(got - want).max() <= step * 1.001


# ---- a unary op between DequantizeLinear and QuantizeLinear: one table lookup -------------------


def _qdq_unary(op: str, x_type: type, y_type: type, opset: int = 20, **attrs) -> bytes:
    """x -> DequantizeLinear -> op -> QuantizeLinear -> y, per tensor (Clip's bounds constant)."""
    extra = {"Clip": ["lo", "hi"]}.get(op, [])
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node(op, ["xf", *extra], ["f"], **attrs),
             helper.make_node("QuantizeLinear", ["f", "ys", "yz"], ["y"])]
    onnx_type = {np.int8: onnx.TensorProto.INT8, np.uint8: onnx.TensorProto.UINT8}
    inits = [numpy_helper.from_array(np.array(0.047, np.float32), "xs"), numpy_helper.from_array(np.array(7, x_type), "xz"),
             numpy_helper.from_array(np.array(0.021, np.float32), "ys"), numpy_helper.from_array(np.array(3, y_type), "yz"),
             numpy_helper.from_array(np.array(-1.5, np.float32), "lo"), numpy_helper.from_array(np.array(2.25, np.float32), "hi")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx_type[x_type], ["n"])],
                              [helper.make_tensor_value_info("y", onnx_type[y_type], ["n"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


LOOKUP_OPS = [("Sigmoid", {}), ("Tanh", {}), ("LeakyRelu", {"alpha": 0.2}), ("HardSwish", {}), ("Clip", {}),
              ("Exp", {}), ("Softplus", {}), ("Gelu", {"approximate": "tanh"}), ("Elu", {"alpha": 0.7})]


@pytest.mark.parametrize("op,attrs", LOOKUP_OPS, ids=[op for op, _ in LOOKUP_OPS])
@pytest.mark.parametrize("types", [(np.uint8, np.uint8), (np.int8, np.int8), (np.int8, np.uint8)])
def test_unary_op_between_dq_and_q_becomes_a_lookup_equal_to_the_unfused_nodes(op, attrs, types):
    """Every byte of X (and a ragged length, so that vector bodies and tails both run) gives
    the unfused nodes' value bit for bit, at 1 and 2 threads."""
    model = tt.load(_qdq_unary(op, *types, **attrs))
    lo, hi = (-128, 127) if types[0] == np.int8 else (0, 255)
    x = np.concatenate([np.arange(lo, hi + 1), np.random.default_rng(5).integers(lo, hi + 1, 100_003)]).astype(types[0])
    plain = tt.compile(model, optimize=False).run({"x": x})["y"]
    for threads in (1, 2):
        sess = tt.compile(model, threads=threads)
        assert [s["op_type"] for s in sess.steps()] == ["ai.tether:QLinearLookup"]
        np.testing.assert_array_equal(sess.run({"x": x})["y"], plain)


def test_chains_a_lookup_cannot_stand_for_stay_as_they_are():
    """A dequantized value read twice, a per-axis scale, and Clip bounds from the graph."""
    def ops(model: onnx.ModelProto) -> list[str]:
        return [n.op_type for n in tt.optimize(tt.load(model.SerializeToString())).nodes]

    base = onnx.load_from_string(_qdq_unary("Sigmoid", np.uint8, np.uint8))
    twice = onnx.ModelProto()
    twice.CopyFrom(base)
    twice.graph.output.append(helper.make_tensor_value_info("xf", onnx.TensorProto.FLOAT, None))
    assert "QLinearLookup" not in ops(twice)
    per_axis = onnx.ModelProto()
    per_axis.CopyFrom(base)
    for t in per_axis.graph.initializer:
        if t.name in ("xs", "xz"):
            t.CopyFrom(numpy_helper.from_array(np.array([0.05, 0.06] if t.name == "xs" else [7, 8],
                                                        np.float32 if t.name == "xs" else np.uint8), t.name))
    per_axis.graph.input[0].CopyFrom(helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, [3, 2]))
    per_axis.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", onnx.TensorProto.UINT8, [3, 2]))
    per_axis.graph.node[0].attribute.append(helper.make_attribute("axis", 1))
    assert "QLinearLookup" not in ops(per_axis)
    runtime_bounds = onnx.load_from_string(_qdq_unary("Clip", np.uint8, np.uint8))
    runtime_bounds.graph.initializer.remove(next(t for t in runtime_bounds.graph.initializer if t.name == "hi"))
    runtime_bounds.graph.input.append(helper.make_tensor_value_info("hi", onnx.TensorProto.FLOAT, []))
    assert "QLinearLookup" not in ops(runtime_bounds)
    x = np.arange(6, dtype=np.uint8).reshape(3, 2)
    got = tt.compile(tt.load(per_axis.SerializeToString())).run({"x": x})["y"]
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # (its own fusion takes per tensor only)
    want = ort.InferenceSession(per_axis.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


# ---- a Mul of two dequantized tensors, quantized: one integer node -----------------------------


@pytest.mark.parametrize("shapes", [([2, 3, 5, 7], [2, 3, 5, 7]), ([2, 3, 5, 7], [2, 3, 1, 1]), ([3, 1, 7], [2, 1, 5, 1]),
                                    ([7], [4, 7])], ids=["same", "per_channel", "both_broadcast", "row"])
@pytest.mark.parametrize("relu", [False, True])
def test_mul_of_dequantized_tensors_fuses_and_equals_the_unfused_nodes(shapes, relu):
    """DequantizeLinear(a) * DequantizeLinear(b) (-> Relu) -> QuantizeLinear becomes ai.tether
    QLinearMul, bit for bit the unfused nodes' values at 1 and 2 threads; onnxruntime within one
    step (it fuses the same chain into its own QLinearMul, rounding its own way)."""
    rng = np.random.default_rng(11)
    a = rng.integers(0, 256, shapes[0]).astype(np.uint8)
    b = rng.integers(-128, 128, shapes[1]).astype(np.int8)
    tail = [helper.make_node("Relu", ["m"], ["r"])] if relu else []
    nodes = [helper.make_node("DequantizeLinear", ["a", "as", "az"], ["af"]),
             helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bf"]),
             helper.make_node("Mul", ["af", "bf"], ["m"]), *tail,
             helper.make_node("QuantizeLinear", ["r" if relu else "m", "ys", "yz"], ["y"])]
    inits = [numpy_helper.from_array(np.array(v, t), n) for n, v, t in
             (("as", 0.031, np.float32), ("az", 120, np.uint8), ("bs", 0.017, np.float32), ("bz", -5, np.int8),
              ("ys", 0.025, np.float32), ("yz", 100, np.uint8))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", onnx.TensorProto.UINT8, shapes[0]),
                                           helper.make_tensor_value_info("b", onnx.TensorProto.INT8, shapes[1])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.UINT8, None)], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model = tt.load(proto.SerializeToString())
    plain = tt.compile(model, optimize=False).run({"a": a, "b": b})["y"]
    for threads in (1, 2):
        sess = tt.compile(model, threads=threads)
        assert "ai.tether:QLinearMul" in [s["op_type"] for s in sess.steps()]
        np.testing.assert_array_equal(sess.run({"a": a, "b": b})["y"], plain)
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a, "b": b})[0]
    assert np.abs(plain.astype(int) - want.astype(int)).max() <= 1
