"""INT8 on Vulkan: QuantizeLinear, DequantizeLinear, QLinearMatMul, MatMulInteger (B constant
or computed at run time, A's zero point per tensor or per row), QLinearConv, ConvInteger,
QLinearAdd, and MaxPool, Concat, Split, Transpose, Expand, Slice and Gather on 8-bit tensors,
compiled strict (so every node runs on the device), agree with the CPU engine's INT8
bit for bit, and with a numpy version of the ONNX definition (computed in float64) within one
quantization step. The integer products run both on the device's integer dot products and on
plain multiply-adds (TETHER_VULKAN_NO_INTEGER_DOT=1). A CNN and an MLP quantized by
tt.quantize.static run wholly on Vulkan and agree with the CPU engine."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tether as tt
from _vulkan import requires_vulkan
from onnx import TensorProto, helper, numpy_helper

pytestmark = [requires_vulkan, pytest.mark.usefixtures("vulkan_validation")]

RANGE = {np.int8: (-128, 127), np.uint8: (0, 255)}
ONNX_TYPE = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8, np.float32: TensorProto.FLOAT,
             np.int32: TensorProto.INT32}


@pytest.fixture(params=["dot", "plain"])
def product_path(request, monkeypatch) -> str:
    """The integer products on the device's dot products where it has them, then on plain
    multiply-adds (the environment variable is read when a kernel is compiled)."""
    if request.param == "plain":
        monkeypatch.setenv("TETHER_VULKAN_NO_INTEGER_DOT", "1")
    else:
        monkeypatch.delenv("TETHER_VULKAN_NO_INTEGER_DOT", raising=False)
    return request.param


def _model(nodes, inputs, outputs, inits, opset=19):
    graph = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return tt.load(model.SerializeToString())


def _io(name, dtype, shape):
    return helper.make_tensor_value_info(name, ONNX_TYPE[dtype], shape)


def _run_both(model, feeds):
    """The model on Vulkan (strict: every node on the device) and on the CPU engine."""
    sess = tt.compile(model, device="vulkan", strict=True)
    assert all(s["backend"] == "vulkan" for s in sess.steps()), sess.report
    return sess.run(feeds), tt.compile(model, device="cpu").run(feeds)


def _ints(rng, dtype, shape):
    lo, hi = RANGE[dtype]
    return rng.integers(lo, hi + 1, size=shape).astype(dtype)


def _requantize(acc, scale, zero, dtype):
    """The ONNX definition in float64: saturate(round_half_even(acc * scale) + zero)."""
    lo, hi = RANGE[dtype]
    return np.clip(np.rint(acc.astype(np.float64) * scale) + zero, lo, hi).astype(dtype)


def _within_one_step(got, oracle):
    diff = np.abs(got.astype(np.int32) - oracle.astype(np.int32))
    assert diff.max(initial=0) <= 1, f"{int((diff > 1).sum())} values more than one step from the oracle"


# ---- QuantizeLinear and DequantizeLinear -------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_and_dequantize_match_cpu_and_numpy(dtype, per_axis):
    rng = np.random.default_rng(1)
    shape = [2, 3, 5, 13]
    if per_axis:
        scale = rng.uniform(0.01, 0.1, 3).astype(np.float32)
        zero = _ints(rng, dtype, [3])
        attrs = {"axis": 1}
        bshape = [1, 3, 1, 1]
    else:
        scale, zero, attrs, bshape = np.float32(0.037), np.array(_ints(rng, dtype, [1])[0]), {}, [1]
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    # Exact halves of the scale and values past the range, where rounding and saturation show.
    x.flat[:8] = (np.array([0.5, 1.5, 2.5, -0.5, -2.5, 400, -400, 0]) * scale.reshape(-1)[0]).astype(np.float32)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], **attrs),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], **attrs)]
    model = _model(nodes, [_io("x", np.float32, shape)], [_io("q", dtype, shape), _io("y", np.float32, shape)],
                   {"s": scale, "z": zero})
    got, ref = _run_both(model, {"x": x})
    np.testing.assert_array_equal(got["q"], ref["q"])
    np.testing.assert_array_equal(got["y"], ref["y"])
    lo, hi = RANGE[dtype]
    s, z = scale.reshape(bshape), zero.reshape(bshape).astype(np.int32)
    q = np.clip(np.rint(x / s) + z, lo, hi).astype(dtype)  # float32 division, as ONNX defines it
    np.testing.assert_array_equal(got["q"], q)
    np.testing.assert_array_equal(got["y"], ((q.astype(np.int32) - z).astype(np.float32) * s).astype(np.float32))


# ---- the integer products ----------------------------------------------------------------------------


@pytest.mark.parametrize("a_type,b_type", [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8)])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("k", [13, 16])  # A read byte by byte, and as words of 4 (K a multiple of 4)
def test_qlinear_matmul_with_batch_dims_matches_cpu_and_numpy(product_path, a_type, b_type, per_column, k):
    rng = np.random.default_rng(2)
    n = 7  # not a multiple of the 4 columns an invocation takes
    a = _ints(rng, a_type, [2, 3, 5, k])
    b = _ints(rng, b_type, [k, n])
    sa, sy = np.float32(0.02), np.float32(0.9)
    sb = rng.uniform(0.005, 0.02, n).astype(np.float32) if per_column else np.float32(0.011)
    za, zy = np.array(_ints(rng, a_type, [1])[0]), np.array(_ints(rng, a_type, [1])[0])
    zb = _ints(rng, b_type, [n]) if per_column else np.array(_ints(rng, b_type, [1])[0])
    node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])
    model = _model([node], [_io("a", a_type, a.shape)], [_io("y", a_type, [2, 3, 5, n])],
                   {"sa": sa, "za": za, "b": b, "sb": sb, "zb": zb, "sy": sy, "zy": zy})
    got, ref = _run_both(model, {"a": a})
    np.testing.assert_array_equal(got["y"], ref["y"])
    acc = (a.astype(np.int64) - int(za)) @ (b.astype(np.int64) - zb.astype(np.int64))
    _within_one_step(got["y"], _requantize(acc, np.float64(sa) * sb.astype(np.float64) / np.float64(sy), int(zy), a_type))


def test_matmul_integer_gives_the_exact_int32_sums(product_path):
    rng = np.random.default_rng(3)
    a = _ints(rng, np.uint8, [4, 3, 30])
    b = _ints(rng, np.int8, [30, 9])
    za, zb = np.array(np.uint8(131)), np.array(np.int8(-3))
    node = helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])
    model = _model([node], [_io("a", np.uint8, a.shape)], [_io("y", np.int32, [4, 3, 9])], {"b": b, "za": za, "zb": zb})
    got, ref = _run_both(model, {"a": a})
    want = ((a.astype(np.int64) - 131) @ (b.astype(np.int64) + 3)).astype(np.int32)
    np.testing.assert_array_equal(got["y"], want)
    np.testing.assert_array_equal(ref["y"], want)



# B computed at run time (so between two activations), with batch dims that broadcast against
# A's either way, a 1-D A, and a 2-D B whose A batches fold into rows.
RUNTIME_B_SHAPES = {
    "same_batch": ([2, 3, 5, 13], [2, 3, 13, 7]),
    "b_broadcasts": ([2, 3, 5, 16], [3, 16, 7]),
    "a_broadcasts": ([5, 13], [2, 3, 13, 7]),
    "both_broadcast": ([2, 1, 5, 13], [1, 3, 13, 9]),
    "a_1d": ([13], [3, 13, 7]),
    "b_2d": ([2, 3, 5, 13], [13, 7]),
}


@pytest.mark.parametrize("shapes", sorted(RUNTIME_B_SHAPES))
@pytest.mark.parametrize("a_type,b_type", [(np.uint8, np.int8), (np.int8, np.uint8)])
@pytest.mark.parametrize("per_column", [False, True])
def test_qlinear_matmul_with_b_at_run_time_matches_cpu_and_numpy(product_path, shapes, a_type, b_type, per_column):
    rng = np.random.default_rng(4)
    a_shape, b_shape = RUNTIME_B_SHAPES[shapes]
    n = b_shape[-1]
    a, b = _ints(rng, a_type, a_shape), _ints(rng, b_type, b_shape)
    sa, sy = np.float32(0.02), np.float32(0.7)
    sb = rng.uniform(0.005, 0.02, n).astype(np.float32) if per_column else np.float32(0.011)
    za, zy = np.array(_ints(rng, a_type, [1])[0]), np.array(_ints(rng, a_type, [1])[0])
    zb = _ints(rng, b_type, [n]) if per_column else np.array(_ints(rng, b_type, [1])[0])
    node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])
    out_shape = list(np.matmul(np.zeros(a_shape, np.int8), np.zeros(b_shape, np.int8)).shape)
    model = _model([node], [_io("a", a_type, a.shape), _io("b", b_type, b.shape)], [_io("y", a_type, out_shape)],
                   {"sa": sa, "za": za, "sb": sb, "zb": zb, "sy": sy, "zy": zy})
    got, ref = _run_both(model, {"a": a, "b": b})
    np.testing.assert_array_equal(got["y"], ref["y"])
    acc = np.matmul(a.astype(np.int64) - int(za), b.astype(np.int64) - zb.astype(np.int64))
    _within_one_step(got["y"], _requantize(acc, np.float64(sa) * sb.astype(np.float64) / np.float64(sy), int(zy), a_type))


@pytest.mark.parametrize("zero_points", ["per_row", "runtime"])
def test_matmul_integer_with_per_row_or_run_time_zero_points_gives_the_exact_int32_sums(product_path, zero_points):
    """MatMulInteger's zero point of A one per row of A (its per-row quantization, here with a
    constant B whose A batches fold into rows), or both zero points graph inputs with B."""
    rng = np.random.default_rng(5)
    a = _ints(rng, np.uint8, [4, 3, 30])
    if zero_points == "per_row":
        b = _ints(rng, np.int8, [30, 9])
        za, zb = _ints(rng, np.uint8, [3]), _ints(rng, np.int8, [9])
        inputs, feeds, inits = [_io("a", np.uint8, a.shape), _io("za", np.uint8, [3])], {"a": a, "za": za}, {"b": b, "zb": zb}
    else:
        b = _ints(rng, np.uint8, [4, 30, 9])
        za, zb = np.array(np.uint8(131)), np.array(np.uint8(7))
        inputs = [_io("a", np.uint8, a.shape), _io("b", np.uint8, b.shape), _io("za", np.uint8, []), _io("zb", np.uint8, [])]
        feeds, inits = {"a": a, "b": b, "za": za, "zb": zb}, {}
    node = helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])
    model = _model([node], inputs, [_io("y", np.int32, [4, 3, 9])], inits)
    got, ref = _run_both(model, feeds)
    want = np.matmul(a.astype(np.int64) - za.astype(np.int64).reshape(-1, 1), b.astype(np.int64) - zb.astype(np.int64))
    np.testing.assert_array_equal(got["y"], want.astype(np.int32))
    np.testing.assert_array_equal(ref["y"], want.astype(np.int32))


def test_matmul_integer_zero_point_of_a_of_unknown_length_is_one_value_or_one_per_row():
    """A zero point of A whose length compile does not know is read on the device: one value
    and one per row both run; another length is refused naming the node."""
    a, b = np.arange(80, dtype=np.uint8).reshape(2, 5, 8), (np.arange(48, dtype=np.uint8) % 7).reshape(2, 8, 3)
    node = helper.make_node("MatMulInteger", ["a", "b", "za"], ["y"], name="mmi")
    model = _model([node], [_io("a", np.uint8, [2, 5, 8]), _io("b", np.uint8, [2, 8, 3]), _io("za", np.uint8, ["r"])],
                   [_io("y", np.int32, [2, 5, 3])], {})
    sess = tt.compile(model, device="vulkan", strict=True)
    for za in (np.array([9], np.uint8), np.arange(5, dtype=np.uint8) * 11):
        want = np.matmul(a.astype(np.int64) - za.astype(np.int64).reshape(-1, 1), b.astype(np.int64))
        np.testing.assert_array_equal(sess.run({"a": a, "b": b, "za": za})["y"], want.astype(np.int32))
    with pytest.raises(tt.ShapeError, match=r"mmi.*a_zero_point' has 4 values, expected 1 or 5"):
        sess.run({"a": a, "b": b, "za": np.zeros(4, np.uint8)})


def test_dynamically_quantized_attention_scores_run_wholly_on_vulkan():
    """Both operands of a MatMul quantized at run time (DynamicQuantizeLinear on each, as
    onnxruntime's quantize_dynamic writes an activation-by-activation MatMul), then Cast and
    Mul by the two scales: compile fuses the chain into MatMulIntegerToFloat with B at run
    time; strict Vulkan equals the CPU engine and the unfused nodes bit for bit, and the float
    product within the two quantization steps."""
    rng = np.random.default_rng(6)
    q = rng.standard_normal([2, 4, 6, 16]).astype(np.float32)
    k = rng.standard_normal([2, 4, 16, 6]).astype(np.float32)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["q"], ["qq", "qs", "qz"]),
             helper.make_node("DynamicQuantizeLinear", ["k"], ["kq", "ks", "kz"]),
             helper.make_node("MatMulInteger", ["qq", "kq", "qz", "kz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["qs", "ks"], ["s"]),
             helper.make_node("Mul", ["accf", "s"], ["y"])]
    model = _model(nodes, [_io("q", np.float32, q.shape), _io("k", np.float32, k.shape)],
                   [_io("y", np.float32, [2, 4, 6, 6])], {})
    got, ref = _run_both(model, {"q": q, "k": k})
    np.testing.assert_array_equal(got["y"], ref["y"])
    ops = [s["op_type"] for s in tt.compile(model, device="vulkan", strict=True).steps()]
    assert "ai.tether:MatMulIntegerToFloat" in ops and "Cast" not in ops, ops
    unfused = tt.compile(model, device="cpu", optimize=False).run({"q": q, "k": k})["y"]
    np.testing.assert_array_equal(got["y"], unfused)
    step = (np.ptp(q) / 255) * np.abs(k).sum(axis=-2).max() + (np.ptp(k) / 255) * np.abs(q).sum(axis=-1).max()
    np.testing.assert_allclose(got["y"], q @ k, atol=step)

def _conv_oracle(x, w, zx, zw, bias, strides, pads, dilations, group):
    """Sums of the ONNX QLinearConv definition: x less its zero point, padded with 0, convolved
    with w less its zero point (per output channel), plus the bias; int64, direct loops."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xs = np.pad(x.astype(np.int64) - zx, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    ws = w.astype(np.int64) - np.asarray(zw, np.int64).reshape(-1, 1, 1, 1)
    oh = (xs.shape[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (xs.shape[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    out = np.zeros((n, m, oh, ow), np.int64)
    mg = m // group
    for o in range(m):
        g = o // mg
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, g * cg:(g + 1) * cg, i * dilations[0]:i * dilations[0] + strides[0] * (oh - 1) + 1:strides[0],
                           j * dilations[1]:j * dilations[1] + strides[1] * (ow - 1) + 1:strides[1]]
                out[:, o] += np.einsum("nchw,c->nhw", patch, ws[o, :, i, j])
    return out + (0 if bias is None else bias.reshape(1, -1, 1, 1))


CONV_CASES = {
    "3x3_pad": dict(c=3, m=8, k=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1), dil=(1, 1), group=1),
    "stride2_asym_pad": dict(c=4, m=5, k=(3, 2), strides=(2, 2), pads=(1, 0, 2, 1), dil=(1, 1), group=1),
    "grouped_dilated": dict(c=6, m=6, k=(3, 3), strides=(1, 1), pads=(2, 2, 2, 2), dil=(2, 2), group=3),
    "depthwise": dict(c=8, m=8, k=(3, 3), strides=(1, 2), pads=(1, 1, 1, 1), dil=(1, 1), group=8),
    "pointwise": dict(c=13, m=3, k=(1, 1), strides=(1, 1), pads=(0, 0, 0, 0), dil=(1, 1), group=1),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
@pytest.mark.parametrize("x_type", [np.uint8, np.int8])
def test_qlinear_conv_matches_cpu_and_numpy(product_path, case, x_type):
    p = CONV_CASES[case]
    rng = np.random.default_rng(4)
    x = _ints(rng, x_type, [2, p["c"], 7, 9])
    w = _ints(rng, np.int8, [p["m"], p["c"] // p["group"], *p["k"]])
    sx, sy = np.float32(0.03), np.float32(0.4)
    sw = rng.uniform(0.002, 0.01, p["m"]).astype(np.float32)  # per output channel
    zx, zy = np.array(x_type(17)), np.array(x_type(9))
    zw = np.array(np.int8(0))
    bias = rng.integers(-500, 500, p["m"]).astype(np.int32)
    attrs = dict(kernel_shape=list(p["k"]), strides=list(p["strides"]), pads=list(p["pads"]), dilations=list(p["dil"]),
                 group=p["group"])
    node = helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "bias"], ["y"], **attrs)
    model = _model([node], [_io("x", x_type, x.shape)], [_io("y", x_type, None)],
                   {"sx": sx, "zx": zx, "w": w, "sw": sw, "zw": zw, "sy": sy, "zy": zy, "bias": bias})
    got, ref = _run_both(model, {"x": x})
    np.testing.assert_array_equal(got["y"], ref["y"])
    acc = _conv_oracle(x, w, int(zx), zw, bias, p["strides"], p["pads"], p["dil"], p["group"])
    _within_one_step(got["y"], _requantize(acc, np.float64(sx) * sw.astype(np.float64).reshape(1, -1, 1, 1) / np.float64(sy),
                                           int(zy), x_type))


def test_conv_integer_with_uint8_weights_gives_the_exact_int32_sums(product_path):
    rng = np.random.default_rng(5)
    x = _ints(rng, np.uint8, [1, 5, 6, 6])
    w = _ints(rng, np.uint8, [4, 5, 3, 3])
    node = helper.make_node("ConvInteger", ["x", "w", "zx", "zw"], ["y"], pads=[1, 1, 1, 1])
    model = _model([node], [_io("x", np.uint8, x.shape)], [_io("y", np.int32, None)],
                   {"w": w, "zx": np.array(np.uint8(100)), "zw": np.array(np.uint8(128))}, opset=17)
    got, ref = _run_both(model, {"x": x})
    want = _conv_oracle(x, w, 100, 128, None, (1, 1), (1, 1, 1, 1), (1, 1), 1).astype(np.int32)
    np.testing.assert_array_equal(got["y"], want)
    np.testing.assert_array_equal(ref["y"], want)


# ---- what the QDQ pass fuses ---------------------------------------------------------------------------


def _qdq_conv_model(rng, act):
    """DQ(x) -> Conv(DQ(w), DQ(bias)) -> act -> Q -> MaxPool on the integers -> DQ, which the QDQ pass
    makes ai.tether QLinearConv (bias, activation folded into the clamp) and MaxPool on int8."""
    w = _ints(rng, np.int8, [6, 3, 3, 3])
    sw = rng.uniform(0.003, 0.01, 6).astype(np.float32)
    sx, sy = np.float32(0.05), np.float32(0.02)
    bias = rng.integers(-300, 300, 6).astype(np.int32)
    inits = {"sx": sx, "zx": np.array(np.int8(3)), "w": w, "sw": sw, "zw": np.zeros(6, np.int8), "b": bias,
             "sb": (sx * sw).astype(np.float32), "sy": sy, "zy": np.array(np.int8(-5))}
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "sb"], ["bd"], axis=0),
             helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1])]
    last = "c"
    if act == "Relu":
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
        last = "r"
    elif act == "Clip":
        inits.update({"lo": np.float32(-0.5), "hi": np.float32(0.7)})
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["r"]))
        last = "r"
    nodes += [helper.make_node("QuantizeLinear", [last, "sy", "zy"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["pd"]),
              helper.make_node("MaxPool", ["pd"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
              helper.make_node("QuantizeLinear", ["p", "sy", "zy"], ["pq"]),
              helper.make_node("DequantizeLinear", ["pq", "sy", "zy"], ["y"])]
    return _model(nodes, [_io("x", np.float32, [2, 3, 8, 10])], [_io("y", np.float32, None)], inits)


@pytest.mark.parametrize("act", ["", "Relu", "Clip"])
def test_fused_qdq_conv_with_activation_and_int8_maxpool_match_cpu(product_path, act):
    rng = np.random.default_rng(6)
    model = _qdq_conv_model(rng, act)
    x = rng.standard_normal([2, 3, 8, 10]).astype(np.float32)
    sess = tt.compile(model, device="vulkan", strict=True)
    ops = {s["op_type"]: s["backend"] for s in sess.steps()}
    assert ops.get("ai.tether:QLinearConv" if act else "QLinearConv") == "vulkan", ops
    assert ops.get("MaxPool") == "vulkan", ops
    got, ref = sess.run({"x": x}), tt.compile(model, device="cpu").run({"x": x})
    np.testing.assert_array_equal(got["y"], ref["y"])


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("types", [(np.int8, np.int8, np.int8), (np.uint8, np.int8, np.uint8)])
def test_qlinear_add_matches_cpu_and_numpy(relu, types):
    ta, tb, ty = types
    rng = np.random.default_rng(7)
    shape = [2, 5, 7, 3]
    sa, sb, sy = np.float32(0.02), np.float32(0.035), np.float32(0.05)
    za, zb, zy = np.array(ta(3)), np.array(tb(-2 if tb == np.int8 else 140)), np.array(ty(1 if ty == np.int8 else 120))
    nodes = [helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["ad"]),
             helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bd"]),
             helper.make_node("Add", ["ad", "bd"], ["s"])]
    last = "s"
    if relu:
        nodes.append(helper.make_node("Relu", ["s"], ["r"]))
        last = "r"
    nodes.append(helper.make_node("QuantizeLinear", [last, "sy", "zy"], ["y"]))
    model = _model(nodes, [_io("a", ta, shape), _io("b", tb, shape)], [_io("y", ty, shape)],
                   {"sa": sa, "za": za, "sb": sb, "zb": zb, "sy": sy, "zy": zy})
    a, b = _ints(rng, ta, shape), _ints(rng, tb, shape)
    sess = tt.compile(model, device="vulkan", strict=True)
    assert [s["op_type"] for s in sess.steps()] == ["ai.tether:QLinearAdd"]
    got, ref = sess.run({"a": a, "b": b}), tt.compile(model, device="cpu").run({"a": a, "b": b})
    np.testing.assert_array_equal(got["y"], ref["y"])
    v = (a.astype(np.float64) - int(za)) * np.float64(sa) + (b.astype(np.float64) - int(zb)) * np.float64(sb)
    if relu:
        v = np.maximum(v, 0)
    _within_one_step(got["y"], _requantize(v, 1 / np.float64(sy), int(zy), ty))


# ---- onnxruntime's QOperator contrib ops ---------------------------------------------------------------


def _ms_model(op, inputs, outputs, inits, runtime=frozenset(), **attrs):
    """One com.microsoft node named 'n'; an absent input is None in `inits`; the graph's inputs
    (`a`, `x` and those in `runtime`) are not initializers."""
    names = [k if v is not None else "" for k, v in inits.items()]
    node = helper.make_node(op, names, ["y"], name="n", domain="com.microsoft", **attrs)
    graph = helper.make_graph([node], "g", inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in inits.items()
                               if v is not None and k not in {"a", "x", *runtime}])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 9
    return tt.load(model.SerializeToString())


@pytest.mark.parametrize("a_type", [np.uint8, np.int8])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("output", ["8-bit", "float"])
@pytest.mark.parametrize("bias", ["column", "one", None])
def test_ms_qgemm_matches_cpu_and_numpy(product_path, a_type, trans_b, output, bias):
    """com.microsoft QGemm (a QOperator model's classifier): (A - za)(B - zb) + C, B [N, K] under
    transB, C one value or one per column, requantized with y_scale or a float output scaled by
    a_scale * b_scale[j]: equal to the CPU engine, within one step of numpy's float64 (8-bit) or
    equal to numpy's float32 product (float)."""
    rng = np.random.default_rng(21)
    m, k, n = 5, 37, 11  # K not a multiple of 4, N not of the 4 columns an invocation takes
    a, w = _ints(rng, a_type, [m, k]), _ints(rng, np.int8, [k, n])
    sa, sb = np.float32(0.02), rng.uniform(0.001, 0.01, n).astype(np.float32)
    za, zb = np.array(_ints(rng, a_type, [1])[0]), _ints(rng, np.int8, [n])
    c = {"column": rng.integers(-3000, 3000, n).astype(np.int32), "one": np.array(-123, np.int32), None: None}[bias]
    inits = {"a": a, "sa": sa, "za": za, "b": np.ascontiguousarray(w.T) if trans_b else w, "sb": sb, "zb": zb, "c": c}
    y_type = a_type if output == "8-bit" else np.float32
    if output == "8-bit":
        inits.update({"sy": np.float32(0.5), "zy": np.array(_ints(rng, a_type, [1])[0])})
    model = _ms_model("QGemm", [_io("a", a_type, [m, k])], [_io("y", y_type, [m, n])], inits, transB=trans_b)
    got, ref = _run_both(model, {"a": a})
    np.testing.assert_array_equal(got["y"], ref["y"])
    sums = (a.astype(np.int64) - int(za)) @ (w.astype(np.int64) - zb.astype(np.int64)) + (0 if c is None else c.astype(np.int64))
    if output == "8-bit":
        _within_one_step(got["y"], _requantize(sums, np.float64(sa) * sb.astype(np.float64) / 0.5, int(inits["zy"]), a_type))
    else:
        np.testing.assert_array_equal(got["y"], sums.astype(np.float32) * (sa * sb))


@pytest.mark.parametrize("attrs, b_at_run_time, why", [({"transA": 1}, False, "transA = 1"), ({"alpha": 0.5}, False, "alpha is not 1"),
                                                      ({}, True, "B is not a constant matrix")])
def test_ms_qgemm_that_vulkan_does_not_take_is_refused_when_strict_naming_why(attrs, b_at_run_time, why):
    rng = np.random.default_rng(22)
    inits = {"a": _ints(rng, np.uint8, [6, 6]), "sa": np.float32(0.1), "za": np.uint8(0), "b": _ints(rng, np.int8, [6, 4]),
             "sb": np.float32(0.1), "zb": np.int8(0), "c": None, "sy": np.float32(0.2), "zy": np.uint8(0)}
    inputs = [_io("a", np.uint8, [6, 6])] + ([_io("b", np.int8, [6, 4])] if b_at_run_time else [])
    model = _ms_model("QGemm", inputs, [_io("y", np.uint8, None)], inits, runtime={"b"} if b_at_run_time else set(), **attrs)
    with pytest.raises(tt.UnsupportedError, match=rf"QGemm 'n': (vulkan: )?{why}"):
        tt.compile(model, device="vulkan", strict=True)
    if b_at_run_time:  # without strict, the node runs on the CPU, which takes it
        sess = tt.compile(model, device="vulkan")
        assert [s["backend"] for s in sess.steps()] == ["cpu"]


def test_ms_qgemm_with_a_bias_per_row_is_refused_not_read_per_column():
    """C of [M, 1] (with M = N, so its count alone looks like one per column) would add per row:
    Vulkan's kernel refuses it under strict, naming C's shape, as the CPU engine does."""
    rng = np.random.default_rng(25)
    inits = {"a": _ints(rng, np.uint8, [5, 6]), "sa": np.float32(0.1), "za": np.uint8(3), "b": _ints(rng, np.int8, [6, 5]),
             "sb": np.float32(0.1), "zb": np.int8(0), "c": rng.integers(-50, 50, (5, 1)).astype(np.int32),
             "sy": np.float32(0.2), "zy": np.uint8(128)}
    model = _ms_model("QGemm", [_io("a", np.uint8, [5, 6])], [_io("y", np.uint8, [5, 5])], inits)
    with pytest.raises(tt.UnsupportedError, match=r"QGemm 'n'.*C of shape \[5, 1\]"):
        tt.compile(model, device="vulkan", strict=True)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("shape,channels_last", [([2, 33, 5, 7], 0), ([2, 5, 7, 33], 1), ([3, 9, 11], 0),
                                                  ([1, 4, 2, 3, 5], 0)], ids=str)
def test_ms_qlinear_global_average_pool_matches_cpu_and_numpy(dtype, shape, channels_last):
    """com.microsoft QLinearGlobalAveragePool: each channel's (sum - count * x_zp) * x_scale /
    (y_scale * count), requantized; equal to the CPU engine, within one step of numpy's float64."""
    rng = np.random.default_rng(23)
    x = _ints(rng, dtype, shape)
    sx, sy = np.float32(0.05), np.float32(0.03)
    zx, zy = np.array(_ints(rng, dtype, [1])[0]), np.array(_ints(rng, dtype, [1])[0])
    out = [shape[0], 1, 1, shape[-1]] if channels_last else shape[:2] + [1] * (len(shape) - 2)
    model = _ms_model("QLinearGlobalAveragePool", [_io("x", dtype, shape)], [_io("y", dtype, out)],
                      {"x": x, "sx": sx, "zx": zx, "sy": sy, "zy": zy}, channels_last=channels_last)
    got, ref = _run_both(model, {"x": x})
    np.testing.assert_array_equal(got["y"], ref["y"])
    axes = tuple(range(1, len(shape) - 1)) if channels_last else tuple(range(2, len(shape)))
    mean = x.astype(np.float64).mean(axis=axes, keepdims=True) - int(zx)
    _within_one_step(got["y"], _requantize(mean, np.float64(sx) / np.float64(sy), int(zy), dtype))


def test_ms_qlinear_global_average_pool_past_int32_sums_is_refused_naming_the_node():
    """More positions per channel than an int32 sum of bytes holds: refused under strict, naming
    the node and the count, never a wrong mean; without strict the node runs on the CPU."""
    count = (1 << 31) // 256 + 1
    x = np.random.default_rng(24).integers(0, 256, [1, 1, count]).astype(np.uint8)
    inits = {"x": x, "sx": np.float32(0.05), "zx": np.uint8(0), "sy": np.float32(0.05), "zy": np.uint8(0)}
    model = _ms_model("QLinearGlobalAveragePool", [_io("x", np.uint8, [1, 1, count])], [_io("y", np.uint8, [1, 1, 1])],
                      inits)
    with pytest.raises(tt.UnsupportedError, match=r"QLinearGlobalAveragePool 'n'.*8388609 positions per channel"):
        tt.compile(model, device="vulkan", strict=True)
    sess = tt.compile(model, device="vulkan")
    assert [s["backend"] for s in sess.steps()] == ["cpu"]
    _within_one_step(sess.run({"x": x})["y"], np.array(np.rint(x.mean()), np.uint8).reshape(1, 1, 1))


# ---- data movement on 8-bit tensors ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_concat_split_transpose_expand_and_slice_on_8bit_tensors_match_numpy_and_cpu(dtype):
    rng = np.random.default_rng(9)
    a, b, c = _ints(rng, dtype, [2, 3, 5, 7]), _ints(rng, dtype, [2, 3, 5, 1]), _ints(rng, dtype, [2, 3, 5, 13])
    # Slice: a start past the end (clamped), steps backwards, an axis counted from the end.
    bounds = {"st": [9, -1, 1], "en": [0, -100, 100], "ax": [2, -1, 1], "sp": [-2, -3, 1]}
    nodes = [helper.make_node("Concat", ["a", "b", "c"], ["cat"], axis=-1),
             helper.make_node("Transpose", ["a"], ["perm"], perm=[0, 3, 1, 2]),
             helper.make_node("Transpose", ["c"], ["rev"]),
             helper.make_node("Slice", ["a", "st", "en", "ax", "sp"], ["sl"]),
             # Split with sizes (one of them empty) along an axis counted from the end; Expand
             # to a higher rank, broadcasting b's last dim and adding a leading one.
             helper.make_node("Split", ["a", "parts"], ["s0", "s1", "s2"], axis=-2),
             helper.make_node("Expand", ["b", "shape"], ["ex"])]
    consts = {k: np.array(v, np.int64) for k, v in bounds.items()}
    consts |= {"parts": np.array([1, 0, 4], np.int64), "shape": np.array([3, 2, 3, 5, 4], np.int64)}
    outs = ("cat", "perm", "rev", "sl", "s0", "s1", "s2", "ex")
    model = _model(nodes, [_io("a", dtype, a.shape), _io("b", dtype, b.shape), _io("c", dtype, c.shape)],
                   [_io(name, dtype, None) for name in outs], consts)
    got, ref = _run_both(model, {"a": a, "b": b, "c": c})
    want = {"cat": np.concatenate([a, b, c], axis=-1), "perm": a.transpose(0, 3, 1, 2), "rev": c.transpose(),
            "sl": a[:, 1:, 4:0:-2, -1::-3], "s0": a[:, :, :1], "s1": a[:, :, 1:1], "s2": a[:, :, 1:],
            "ex": np.broadcast_to(b, (3, 2, 3, 5, 4))}
    for name, w in want.items():
        np.testing.assert_array_equal(got[name], w, err_msg=name)
        np.testing.assert_array_equal(ref[name], w, err_msg=name)



@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_gather_and_slice_with_bounds_at_run_time_on_8bit_tensors_match_numpy_and_cpu(dtype):
    """Gather with indices from the graph (negative ones among them) or constant, and Slice
    whose starts come from the graph, move 8-bit tensors on the device."""
    rng = np.random.default_rng(10)
    table, x = _ints(rng, dtype, [11, 6]), _ints(rng, dtype, [2, 7, 9])
    ids = np.array([[0, 10, -1], [3, -11, 5]], np.int64)
    starts = np.array([1, -4], np.int32)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"]),
             helper.make_node("Gather", ["x", "cols"], ["picked"], axis=-1),
             helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["sl"])]
    consts = {"cols": np.array([8, 0, -2], np.int32), "ends": np.array([7, 0], np.int32),
              "axes": np.array([1, 2], np.int32), "steps": np.array([2, -1], np.int32)}
    model = _model(nodes, [_io("table", dtype, table.shape), _io("x", dtype, x.shape),
                           helper.make_tensor_value_info("ids", TensorProto.INT64, ids.shape),
                           helper.make_tensor_value_info("starts", TensorProto.INT32, [2])],
                   [_io(name, dtype, None) for name in ("emb", "picked", "sl")], consts)
    feeds = {"table": table, "x": x, "ids": ids, "starts": starts}
    got, ref = _run_both(model, feeds)
    want = {"emb": table[ids], "picked": x[:, :, [8, 0, -2]], "sl": x[:, 1:7:2, -4:0:-1]}
    for name, w in want.items():
        np.testing.assert_array_equal(got[name], w, err_msg=name)
        np.testing.assert_array_equal(ref[name], w, err_msg=name)
    bad = dict(feeds, ids=np.array([[0, 11, 0], [0, 0, 0]], np.int64))
    with pytest.raises(tt.ArgumentError, match="index is out of range for axis 0 of size 11; the index.*11"):
        tt.compile(model, device="vulkan", strict=True).run(bad)

def test_transpose_of_8bit_tensor_past_six_unmerged_dims_is_refused_when_strict():
    x = np.arange(2 ** 7, dtype=np.uint8).reshape([2] * 7)
    node = helper.make_node("Transpose", ["x"], ["y"], perm=[6, 5, 4, 3, 2, 1, 0])
    model = _model([node], [_io("x", np.uint8, x.shape)], [_io("y", np.uint8, None)], {})
    with pytest.raises(tt.UnsupportedError, match="Transpose.*6"):
        tt.compile(model, device="vulkan", strict=True)
    np.testing.assert_array_equal(tt.compile(model, device="vulkan").run({"x": x})["y"], x.transpose())


# ---- models from tt.quantize.static ---------------------------------------------------------------------


def _float_cnn(rng):
    def conv(name, x, c, m, k, group=1, pad=1):
        w = (rng.standard_normal([m, c // group, k, k]) * (1.5 / np.sqrt(c // group * k * k))).astype(np.float32)
        inits[f"{name}_w"], inits[f"{name}_b"] = w, (rng.standard_normal(m) * 0.1).astype(np.float32)
        return helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [name], pads=[pad] * 4, group=group)

    inits: dict = {}
    nodes = [conv("c1", "x", 3, 8, 3), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             conv("c2", "p1", 8, 8, 3, group=8), helper.make_node("Relu", ["c2"], ["r2"]),
             conv("c3", "r2", 8, 8, 1, pad=0), helper.make_node("Add", ["c3", "p1"], ["s"]),
             helper.make_node("Relu", ["s"], ["r3"]), helper.make_node("GlobalAveragePool", ["r3"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"])]
    inits["fc_w"] = (rng.standard_normal([8, 10]) * 0.4).astype(np.float32)
    nodes.append(helper.make_node("MatMul", ["f", "fc_w"], ["y"]))
    return _model(nodes, [_io("x", np.float32, ["n", 3, 12, 12])], [_io("y", np.float32, None)], inits, opset=17)


def _float_mlp(rng):
    inits = {"w1": (rng.standard_normal([16, 32]) * 0.3).astype(np.float32), "b1": rng.standard_normal(32).astype(np.float32),
             "w2": (rng.standard_normal([32, 5]) * 0.3).astype(np.float32), "b2": rng.standard_normal(5).astype(np.float32)}
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["y"])]
    return _model(nodes, [_io("x", np.float32, ["n", 16])], [_io("y", np.float32, None)], inits, opset=17)


def _one_step_at_output(model) -> float:
    """How far one quantization step of the activation entering the last (float) layer moves
    the output: that activation's scale times the largest column sum of |weights|."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        model.save(f"{d}/m.onnx")
        proto = onnx.load(f"{d}/m.onnx")
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    producer = {o: n for n in proto.graph.node for o in n.output}
    last = producer[proto.graph.output[0].name]
    if last.op_type == "DequantizeLinear":  # the output quantized: one step is its scale
        return float(inits[last.input[1]].max())
    act, weights = producer[last.input[0]], producer[last.input[1]]
    assert act.op_type == weights.op_type == "DequantizeLinear", (last.op_type, act.op_type, weights.op_type)
    w = (inits[weights.input[0]].astype(np.float64) - inits[weights.input[2]].astype(np.float64)) * inits[weights.input[1]]
    w = w.T if last.op_type == "Gemm" and any(a.name == "transB" and a.i for a in last.attribute) else w
    return float(inits[act.input[1]].max()) * float(np.abs(w).sum(axis=0).max())


@pytest.mark.parametrize("name", ["cnn", "mlp"])
def test_statically_quantized_model_runs_wholly_on_vulkan_within_one_step(product_path, name):
    rng = np.random.default_rng(8)
    float_model = _float_cnn(rng) if name == "cnn" else _float_mlp(rng)
    shape = [3, 12, 12] if name == "cnn" else [16]
    calib = rng.standard_normal([16, *shape]).astype(np.float32)
    q = tt.quantize.static(float_model, calib, batch_size=8).model
    sess = tt.compile(q, device="vulkan", strict=True)
    on_cpu = [s["op_type"] for s in sess.steps() if s["backend"] != "vulkan"]
    assert not on_cpu, sess.report
    cpu = tt.compile(q, device="cpu")
    x = rng.standard_normal([2, *shape]).astype(np.float32)
    got, ref = sess.run({"x": x})["y"], cpu.run({"x": x})["y"]
    step = _one_step_at_output(q)
    assert np.abs(got - ref).max() <= step, (np.abs(got - ref).max(), step)
