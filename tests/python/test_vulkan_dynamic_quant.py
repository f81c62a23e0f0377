"""Dynamic quantization on Vulkan: DynamicQuantizeLinear (its range found on the device),
MatMulInteger and ConvInteger with zero points and scales computed at run time, and the
ai.tether MatMulIntegerToFloat and ConvIntegerToFloat that compile's passes fuse from
MatMulInteger / ConvInteger -> Cast -> Mul (-> Add) (-> activation), compiled strict (every node on the device). Each agrees with the CPU
engine and with onnxruntime running the unfused nodes one by one (bit for bit on lavapipe), and
with a numpy version of the ONNX definition; models quantized by onnxruntime's quantize_dynamic
run wholly on Vulkan and agree with the CPU engine."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import tether as tt
from _vulkan import assert_close, requires_vulkan
from onnx import TensorProto, helper, numpy_helper

pytestmark = [requires_vulkan, pytest.mark.usefixtures("vulkan_validation")]

ONNX_TYPE = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8, np.float32: TensorProto.FLOAT,
             np.int32: TensorProto.INT32}
RANGE = {np.int8: (-128, 127), np.uint8: (0, 255)}


@pytest.fixture(params=["dot", "plain"])
def product_path(request, monkeypatch) -> str:
    """The integer products on the device's dot products, then on plain multiply-adds."""
    if request.param == "plain":
        monkeypatch.setenv("TETHER_VULKAN_NO_INTEGER_DOT", "1")
    else:
        monkeypatch.delenv("TETHER_VULKAN_NO_INTEGER_DOT", raising=False)
    return request.param


def _proto(nodes, inputs, outputs, inits, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def _io(name, dtype, shape):
    return helper.make_tensor_value_info(name, ONNX_TYPE[dtype], shape)


def _ort(proto, feeds):
    """onnxruntime with its graph optimisations off: the nodes as written, one by one."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))


def _ort_is_exact(a_type, b_type) -> bool:
    """Whether onnxruntime's integer products are the ONNX definition's for these types: on x86
    its uint8 x int8 kernel adds pairs of products in int16 with saturation (vpmaddubsw), which
    large weights overflow, so there it is no oracle."""
    return not (a_type == np.uint8 and b_type == np.int8)


def _run_both(proto, feeds):
    """The model on Vulkan (strict: every node on the device) and on the CPU engine, and the
    Vulkan session's op types."""
    model = tt.load(proto.SerializeToString())
    sess = tt.compile(model, device="vulkan", strict=True)
    assert all(s["backend"] == "vulkan" for s in sess.steps()), sess.report
    ops = [s["op_type"] for s in sess.steps()]
    return sess.run(feeds), tt.compile(model, device="cpu").run(feeds), ops


def _ints(rng, dtype, shape):
    lo, hi = RANGE[dtype]
    return rng.integers(lo, hi + 1, size=shape).astype(dtype)


def _dynamic_quantize_numpy(x):
    """The ONNX definition in float32: the range widened to include 0, scale = range / 255 (1
    for a zero range, as onnxruntime and the CPU engine give it), zero point and values rounded
    half to even and saturated to uint8."""
    lo, hi = np.float32(min(0.0, x.min(initial=0.0))), np.float32(max(0.0, x.max(initial=0.0)))
    scale = np.float32(1) if hi == lo else np.float32((hi - lo) / np.float32(255))
    zero = np.float32(np.clip(np.rint(np.float32(0) - lo / scale), 0, 255))
    y = np.clip(np.rint(x / scale) + zero, 0, 255).astype(np.uint8)
    return y, scale, np.uint8(zero)


# ---- DynamicQuantizeLinear -----------------------------------------------------------------------------

DQL_CASES = ["ragged", "many_workgroups", "zeros", "empty", "negative", "positive", "exact_halves", "infinities"]


def _dql_input(rng, case):
    if case == "many_workgroups":  # past one workgroup's share of the range pass, not a multiple of 64
        return (rng.standard_normal([70001]) * 5).astype(np.float32)
    x = rng.standard_normal([3, 5, 7]).astype(np.float32)
    if case == "zeros":
        return np.zeros([3, 5, 7], np.float32)
    if case == "empty":
        return np.zeros([0, 3], np.float32)
    if case == "negative":
        return -np.abs(x) - 0.25
    if case == "positive":
        return np.abs(x) + 0.25
    if case == "exact_halves":  # range [-127.5, 127.5]: scale 1, zero point 127.5 rounded to even, values on halves
        return np.concatenate([[-127.5, 127.5], np.arange(-127, 127) + 0.5]).astype(np.float32).reshape(4, 64)
    if case == "infinities":
        x.flat[4], x.flat[9] = np.inf, -np.inf
    return x


@pytest.mark.parametrize("case", DQL_CASES)
def test_dynamic_quantize_linear_matches_cpu_onnxruntime_and_numpy(case):
    rng = np.random.default_rng(11)
    x = _dql_input(rng, case)
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    proto = _proto([node], [_io("x", np.float32, x.shape)],
                   [_io("y", np.uint8, x.shape), _io("s", np.float32, []), _io("z", np.uint8, [])], {})
    got, ref, _ = _run_both(proto, {"x": x})
    want = _ort(proto, {"x": x})
    for name in ("y", "s", "z"):
        np.testing.assert_array_equal(got[name], ref[name], err_msg=name)
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    if case != "infinities":  # numpy's x / inf and rint(nan) differ from the definition's saturation
        y, scale, zero = _dynamic_quantize_numpy(x)
        assert got["s"] == scale and got["z"] == zero, (got["s"], scale, got["z"], zero)
        diff = np.abs(got["y"].astype(np.int32) - y.astype(np.int32))
        assert diff.max(initial=0) <= 1, f"{int((diff > 1).sum())} values more than one step from the definition"


def test_dynamic_quantize_linear_with_only_y_read():
    """A node whose scale and zero point no one reads still quantizes with them."""
    rng = np.random.default_rng(12)
    x = (rng.standard_normal([4, 33]) * 2 - 1).astype(np.float32)
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    proto = _proto([node], [_io("x", np.float32, x.shape)], [_io("y", np.uint8, x.shape)], {})
    got, ref, _ = _run_both(proto, {"x": x})
    np.testing.assert_array_equal(got["y"], ref["y"])
    np.testing.assert_array_equal(got["y"], _ort(proto, {"x": x})["y"])


def test_dynamic_quantize_linear_with_a_batch_dim_replans_per_size():
    """One session, inputs of several sizes: each plan sizes the partial ranges anew."""
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    proto = _proto([node], [_io("x", np.float32, ["n", 3])],
                   [_io("y", np.uint8, None), _io("s", np.float32, []), _io("z", np.uint8, [])], {})
    model = tt.load(proto.SerializeToString())
    sess, cpu = tt.compile(model, device="vulkan", strict=True), tt.compile(model, device="cpu")
    rng = np.random.default_rng(17)
    for rows in (5000, 1, 30000, 7):
        x = (rng.standard_normal([rows, 3]) * 3 - 1).astype(np.float32)
        got, ref = sess.run({"x": x}), cpu.run({"x": x})
        for name in ("y", "s", "z"):
            np.testing.assert_array_equal(got[name], ref[name], err_msg=f"{name} at {rows} rows")


def test_dynamic_quantize_linear_refuses_nan_with_argument_error():
    x = np.ones([2, 40], np.float32)
    x[1, 7] = x[0, 3] = np.nan
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    proto = _proto([node], [_io("x", np.float32, x.shape)],
                   [_io("y", np.uint8, x.shape), _io("s", np.float32, []), _io("z", np.uint8, [])], {})
    sess = tt.compile(tt.load(proto.SerializeToString()), device="vulkan", strict=True)
    with pytest.raises(tt.ArgumentError, match=r"DynamicQuantizeLinear.*NaN.*: 2$"):
        sess.run({"x": x})
    # The session stays usable.
    np.testing.assert_array_equal(sess.run({"x": np.ones([2, 40], np.float32)})["y"], np.full([2, 40], 255, np.uint8))


# ---- products with zero points and scales computed at run time --------------------------------------------


def _dynamic_matmul_nodes(b_name, act):
    """DynamicQuantizeLinear(x) -> MatMulInteger(b) -> Cast -> Mul(x_scale * b_scale) -> Add(bias)
    (-> act), as onnxruntime's quantize_dynamic writes a MatMul: compile fuses all but the first
    into ai.tether MatMulIntegerToFloat."""
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("Mul", ["xs", "bs"], ["scale"]),
             helper.make_node("MatMulInteger", ["xq", b_name, "xz", "bz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["accf", "scale"], ["prod"]),
             helper.make_node("Add", ["prod", "bias"], ["y" if not act else "pre"])]
    if act:
        nodes.append(helper.make_node(act, ["pre"], ["y"]))
    return nodes


@pytest.mark.parametrize("b_type", [np.int8, np.uint8])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("act", ["", "Relu", "Sigmoid"])
def test_dynamic_matmul_fuses_to_matmul_integer_to_float_on_vulkan(product_path, b_type, per_column, act):
    rng = np.random.default_rng(13)
    k, n = 13, 7  # K not a multiple of 4, N not of the 4 columns an invocation takes
    x = (rng.standard_normal([2, 3, k]) * 1.7 + 0.3).astype(np.float32)
    b = _ints(rng, b_type, [k, n])
    bs = rng.uniform(0.005, 0.02, n).astype(np.float32) if per_column else np.array(np.float32(0.011))
    bz = _ints(rng, b_type, [n]) if per_column else np.array(_ints(rng, b_type, [1])[0])
    bias = rng.standard_normal(n).astype(np.float32)
    proto = _proto(_dynamic_matmul_nodes("b", act), [_io("x", np.float32, x.shape)], [_io("y", np.float32, [2, 3, n])],
                   {"b": b, "bs": bs, "bz": bz, "bias": bias})
    got, ref, ops = _run_both(proto, {"x": x})
    assert ops == ["DynamicQuantizeLinear", "Mul", "ai.tether:MatMulIntegerToFloat"], ops
    want = _ort(proto, {"x": x})["y"]
    if act == "Sigmoid":  # the device's exp is neither the CPU engine's nor onnxruntime's
        assert_close(got["y"], ref["y"], rtol=1e-6)
        if _ort_is_exact(np.uint8, b_type):
            assert_close(got["y"], want, rtol=1e-6)
    else:
        np.testing.assert_array_equal(got["y"], ref["y"])
        if _ort_is_exact(np.uint8, b_type):
            np.testing.assert_array_equal(got["y"], want)
    # The ONNX definition in float64, from the quantized x of the numpy definition.
    xq, xs, xz = _dynamic_quantize_numpy(x)
    acc = (xq.astype(np.int64) - int(xz)) @ (b.astype(np.int64) - bz.astype(np.int64))
    v = acc * (np.float64(xs) * bs.astype(np.float64)) + bias
    v = np.maximum(v, 0) if act == "Relu" else 1 / (1 + np.exp(-v)) if act == "Sigmoid" else v
    assert_close(got["y"], v.astype(np.float32), rtol=1e-5)


@pytest.mark.parametrize("k", [66, 64])  # A read byte by byte, and as words of 4
@pytest.mark.parametrize("a_type", [np.int8, np.uint8])
def test_matmul_integer_to_float_with_zero_point_and_scale_as_graph_inputs(product_path, a_type, k):
    """A's zero point and the scale are inputs of the graph (device tensors that compile cannot
    read), no bias."""
    rng = np.random.default_rng(14)
    n = 5
    a = _ints(rng, a_type, [9, k])
    b = _ints(rng, np.int8, [k, n])
    za = np.array(_ints(rng, a_type, [1])[0])
    scale = rng.uniform(1e-4, 1e-3, n).astype(np.float32)
    nodes = [helper.make_node("MatMulInteger", ["a", "b", "za"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["accf", "scale"], ["y"])]
    proto = _proto(nodes, [_io("a", a_type, a.shape), _io("za", a_type, []), _io("scale", np.float32, [n])],
                   [_io("y", np.float32, [9, n])], {"b": b})
    feeds = {"a": a, "za": za, "scale": scale}
    got, ref, ops = _run_both(proto, feeds)
    assert ops == ["ai.tether:MatMulIntegerToFloat"], ops
    np.testing.assert_array_equal(got["y"], ref["y"])
    if _ort_is_exact(a_type, np.int8):
        np.testing.assert_array_equal(got["y"], _ort(proto, feeds)["y"])
    acc = (a.astype(np.int64) - int(za)) @ b.astype(np.int64)
    assert_close(got["y"], (acc * scale.astype(np.float64)).astype(np.float32), rtol=1e-6)


@pytest.mark.parametrize("w_type", [np.int8, np.uint8])
def test_dynamic_conv_integer_matches_cpu_onnxruntime_and_numpy(product_path, w_type):
    """DynamicQuantizeLinear -> ConvInteger with x's zero point from the device -> Cast -> Mul ->
    Add -> Relu, as quantize_dynamic writes a Conv (fused into ConvIntegerToFloat); stride,
    padding, ragged sizes."""
    rng = np.random.default_rng(16)
    x = rng.standard_normal([2, 3, 7, 9]).astype(np.float32)
    w = _ints(rng, w_type, [5, 3, 3, 3])
    wz = np.array(w_type(0 if w_type == np.int8 else 128))
    ws = np.array(np.float32(0.004))
    bias = rng.standard_normal([1, 5, 1, 1]).astype(np.float32)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("Mul", ["xs", "ws"], ["scale"]),
             helper.make_node("ConvInteger", ["xq", "w", "xz", "wz"], ["acc"], pads=[1, 0, 2, 1], strides=[2, 1]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["accf", "scale"], ["prod"]),
             helper.make_node("Add", ["prod", "bias"], ["pre"]),
             helper.make_node("Relu", ["pre"], ["y"])]
    proto = _proto(nodes, [_io("x", np.float32, x.shape)], [_io("y", np.float32, None)],
                   {"w": w, "wz": wz, "ws": ws, "bias": bias})
    got, ref, ops = _run_both(proto, {"x": x})
    assert "ai.tether:ConvIntegerToFloat" in ops and "DynamicQuantizeLinear" in ops, ops
    np.testing.assert_array_equal(got["y"], ref["y"])
    if _ort_is_exact(np.uint8, w_type):
        np.testing.assert_array_equal(got["y"], _ort(proto, {"x": x})["y"])
    xq, xs, xz = _dynamic_quantize_numpy(x)
    xp = np.pad(xq.astype(np.int64) - int(xz), ((0, 0), (0, 0), (1, 2), (0, 1)))
    wk = w.astype(np.int64) - int(wz)
    oh, ow = (xp.shape[2] - 3) // 2 + 1, xp.shape[3] - 2
    acc = np.zeros([2, 5, oh, ow], np.int64)
    for i in range(3):
        for j in range(3):
            acc += np.einsum("nchw,mc->nmhw", xp[:, :, i:i + 2 * (oh - 1) + 1:2, j:j + ow], wk[:, :, i, j])
    want = np.maximum(acc * (np.float64(xs) * np.float64(ws)) + bias, 0)
    assert_close(got["y"], want.astype(np.float32), rtol=1e-5)


# ---- models quantized by onnxruntime's quantize_dynamic ----------------------------------------------------


def _torch_model(name):
    import torch

    torch.manual_seed(0)
    if name == "mlp":
        net = torch.nn.Sequential(torch.nn.Linear(13, 30), torch.nn.ReLU(), torch.nn.Linear(30, 7))
        return net, torch.randn(3, 13)
    if name == "cnn":
        net = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(6, 5, 3, stride=2),
                                  torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(5 * 3 * 3, 4))
        return net, torch.randn(2, 3, 7, 8)

    class Block(torch.nn.Module):
        """One pre-norm transformer block: attention over 2 heads and a GELU feed-forward."""

        def __init__(self, d=20, heads=2):
            super().__init__()
            self.heads = heads
            self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            self.n1, self.n2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.f1, self.f2 = torch.nn.Linear(d, 36), torch.nn.Linear(36, d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.n1(x)).chunk(3, -1)

            def split(z):
                return z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)

            att = torch.softmax(split(q) @ split(k).transpose(-1, -2) / (d // self.heads) ** 0.5, -1) @ split(v)
            x = x + self.out(att.transpose(1, 2).reshape(b, t, d))
            return x + self.f2(torch.nn.functional.gelu(self.f1(self.n2(x))))

    return Block().eval(), torch.randn(2, 5, 20)


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer_block", "transformer_block_every_matmul"])
def test_dynamically_quantized_model_runs_wholly_on_vulkan(tmp_path, name):
    """..._every_matmul: attention's activation-by-activation MatMuls quantized too
    (MatMulConstBOnly off), their B packed on the device each run."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    every_matmul = name.endswith("_every_matmul")
    name = name.removesuffix("_every_matmul")
    net, x = _torch_model(name)
    torch.onnx.export(net, (x,), tmp_path / "f.onnx", input_names=["x"], output_names=["y"], opset_version=17,
                      dynamo=False)
    quantize_dynamic(tmp_path / "f.onnx", tmp_path / "q.onnx", weight_type=QuantType.QInt8,
                     op_types_to_quantize=["MatMul", "Gemm", "Conv"], extra_options={"MatMulConstBOnly": not every_matmul})
    model = tt.load(tmp_path / "q.onnx")
    sess = tt.compile(model, device="vulkan", strict=True)
    ops = [s["op_type"] for s in sess.steps()]
    assert all(s["backend"] == "vulkan" for s in sess.steps()), sess.report
    assert "DynamicQuantizeLinear" in ops and ("ai.tether:ConvIntegerToFloat" in ops if name == "cnn" else True), ops
    assert "ai.tether:MatMulIntegerToFloat" in ops, ops
    if every_matmul:  # the weights' 4 products, the scores and the context
        assert ops.count("ai.tether:MatMulIntegerToFloat") == 6 and "MatMul" not in ops, ops
    feeds = {"x": x.numpy()}
    got, ref = sess.run(feeds)["y"], tt.compile(model, device="cpu").run(feeds)["y"]
    if name == "transformer_block":
        # LayerNormalization, Softmax and the fused GELU are float kernels of the device's own,
        # within an ulp or so of the CPU engine's; DynamicQuantizeLinear after them sees the same
        # range unless a value lies at an exact half of a step, which these inputs do not.
        assert_close(got, ref, rtol=1e-5)
    else:
        np.testing.assert_array_equal(got, ref)


def test_dynamically_quantized_mlp_under_fp16_storage_stays_close(tmp_path):
    """precision="fp16": x, the scales and MatMulIntegerToFloat's output are float16 in memory.
    Rounding x to float16 (2^-11 relative) moves a quantized value by at most one step, so the
    output stays within about one step of the activations times the weights of the CPU engine's
    float32 result: here 2% of its largest magnitude."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    net, x = _torch_model("mlp")
    torch.onnx.export(net, (x,), tmp_path / "f.onnx", input_names=["x"], output_names=["y"], opset_version=17,
                      dynamo=False)
    quantize_dynamic(tmp_path / "f.onnx", tmp_path / "q.onnx", weight_type=QuantType.QUInt8)
    model = tt.load(tmp_path / "q.onnx")
    sess = tt.compile(model, device="vulkan", strict=True, precision="fp16")
    feeds = {"x": x.numpy()}
    assert_close(sess.run(feeds)["y"], tt.compile(model, device="cpu").run(feeds)["y"], rtol=2e-2)


def test_dynamically_quantized_conv_with_sums_past_float16_stays_finite_under_fp16(product_path):
    """precision="fp16" stores float tensors as float16, whose largest value is 65504; the int32
    sums of this convolution (144 products of bytes up to 255 and 127) reach far past it (the
    ONNX reference's ConvInteger output says so). Fused into ConvIntegerToFloat, the sums are
    scaled in registers and never stored as floats: the output stays within 2% of the float32
    reference's largest magnitude, as the MLP above."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(4)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("Mul", ["xs", "ws"], ["s"]),
             helper.make_node("ConvInteger", ["xq", "w", "xz"], ["i"], pads=[1, 1, 1, 1]),
             helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT), helper.make_node("Mul", ["f", "s"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    inits = {"w": rng.integers(40, 128, (12, 16, 3, 3)).astype(np.int8), "ws": np.float32(0.004),
             "b": rng.uniform(-1, 1, (12, 1, 1)).astype(np.float32)}
    model = _proto(nodes, [_io("x", np.float32, [1, 16, 10, 10])], [_io("y", np.float32, None)], inits)
    x = rng.uniform(0, 2, (1, 16, 10, 10)).astype(np.float32)
    sums = ReferenceEvaluator(model).run(None, {"x": x}, intermediate=True)["i"]
    assert np.abs(sums).max() > 10 * 65504, np.abs(sums).max()
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    sess = tt.compile(model.SerializeToString(), device="vulkan", strict=True, precision="fp16")
    assert "ai.tether:ConvIntegerToFloat" in [st["op_type"] for st in sess.steps()], sess.report
    got = sess.run({"x": x})["y"]
    assert np.isfinite(got).all()
    assert_close(got, want, rtol=2e-2)
    exact = tt.compile(model.SerializeToString(), device="vulkan", strict=True).run({"x": x})["y"]
    np.testing.assert_array_equal(exact, tt.compile(model.SerializeToString(), device="cpu").run({"x": x})["y"])
