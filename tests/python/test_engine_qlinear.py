"""The CPU kernels for MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv: single-node
models run by tether against a numpy oracle written from the ONNX spec (int64 sums; the
requantization in float32 as onnxruntime defines it) and against onnxruntime, bit for bit, on
awkward shapes, both 8-bit types on each side, zero points at the ends of the range, per-column
and per-channel parameters, groups, strides, dilations and padding; bad parameters raise typed
errors naming the node."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tether as tt
from conftest import ORT_U8S8_EXACT
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

I8, U8 = np.int8, np.uint8


# ---- models ---------------------------------------------------------------------------------------


def node_model(op: str, inputs: dict[str, np.ndarray | None], *, const: tuple[str, ...] = (),
               out_type: type = np.int32, name: str = "n", opset: int = 21, **attrs) -> bytes:
    """One `op` node; inputs in order (None: omitted); those named in `const` are initializers."""
    names = [k if v is not None else "" for k, v in inputs.items()]
    while names[-1] == "":
        names.pop()
    graph_inputs, inits = [], []
    for k, v in inputs.items():
        if v is None:
            continue
        if k in const:
            inits.append(numpy_helper.from_array(v, k))
        else:
            graph_inputs.append(helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape))
    node = helper.make_node(op, names, ["y"], name=name, **attrs)
    out = helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(out_type)), None)
    graph = helper.make_graph([node], "g", graph_inputs, [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10).SerializeToString()


def feeds(inputs: dict[str, np.ndarray | None], const: tuple[str, ...]) -> dict[str, np.ndarray]:
    return {k: v for k, v in inputs.items() if v is not None and k not in const}


def run_tether(model: bytes, inputs: dict[str, np.ndarray], threads: int = 1) -> np.ndarray:
    return tt.compile(tt.load(model), threads=threads).run(inputs)["y"]


def run_ort(model: bytes, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """onnxruntime's result; where its uint8 x int8 products saturate on this CPU (no VNNI), the
    ONNX reference implementation's, for the standard ops it implements."""
    if not ORT_U8S8_EXACT:
        try:
            return np.asarray(ReferenceEvaluator(onnx.load_from_string(model)).run(["y"], inputs)[0])
        except Exception:  # noqa: BLE001 - an op the reference lacks (com.microsoft): onnxruntime decides
            pass
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(["y"], inputs)[0]


def rand_q(rng: np.random.Generator, dtype: type, shape: tuple[int, ...]) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape, dtype=np.int64).astype(dtype)


def zp_of(dtype: type, where: str, rng: np.random.Generator, count: int = 1) -> np.ndarray:
    """A zero point at the low or high end of the type's range, or random (per column when count > 1)."""
    info = np.iinfo(dtype)
    if where == "low":
        return np.full(count, info.min, dtype) if count > 1 else np.array(info.min, dtype)
    if where == "high":
        return np.full(count, info.max, dtype) if count > 1 else np.array(info.max, dtype)
    return rand_q(rng, dtype, (count,)) if count > 1 else np.array(rng.integers(info.min, info.max + 1), dtype)


# ---- oracles ----------------------------------------------------------------------------------------


def requantize(s: np.ndarray, scale: np.ndarray, y_zp: np.ndarray) -> np.ndarray:
    """float32(s) * scale, clamped to the output range less the zero point, rounded half to
    even, plus the zero point (the scale broadcast along the last axis of s)."""
    info = np.iinfo(y_zp.dtype)
    z = np.float32(int(y_zp))
    v = s.astype(np.float32) * scale.astype(np.float32)
    v = np.clip(v, np.float32(info.min) - z, np.float32(info.max) - z)
    return (np.rint(v) + z).astype(y_zp.dtype)


def out_scale(a_scale: np.ndarray, b_scale: np.ndarray, y_scale: np.ndarray) -> np.ndarray:
    """a_scale * b_scale / y_scale in float32, in that order."""
    return ((np.float32(a_scale) * b_scale.astype(np.float32)) / np.float32(y_scale)).astype(np.float32)


def conv_sums(x: np.ndarray, w: np.ndarray, strides, pads, dilations, group: int) -> np.ndarray:
    """int64 sums of a 2-D convolution of x (zero-point free, int64) by w (int64), zero padding."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (x.shape[2] - ((kh - 1) * dilations[0] + 1)) // strides[0] + 1
    ow = (x.shape[3] - ((kw - 1) * dilations[1] + 1)) // strides[1] + 1
    out = np.zeros((n, m, oh, ow), np.int64)
    mg = m // group
    for g in range(group):
        xs = x[:, g * cg:(g + 1) * cg]
        ws = w[g * mg:(g + 1) * mg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dilations[0]: i * dilations[0] + strides[0] * (oh - 1) + 1: strides[0],
                           j * dilations[1]: j * dilations[1] + strides[1] * (ow - 1) + 1: strides[1]]
                out[:, g * mg:(g + 1) * mg] += np.einsum("nchw,mc->nmhw", patch, ws[:, :, i, j])
    return out


# ---- MatMulInteger and QLinearMatMul ------------------------------------------------------------------

MATMUL_SHAPES = [((1, 1), (1, 1)), ((3, 5), (5, 7)), ((13, 33), (33, 17)), ((2, 4, 31), (31, 65)),
                 ((2, 3, 5, 9), (3, 9, 4)), ((7,), (7, 3)), ((4, 300), (300, 2))]


@pytest.mark.parametrize("a_type, b_type", [(U8, I8), (U8, U8), (I8, I8), (I8, U8)])
@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("const_b", [True, False])
def test_matmul_integer_equals_numpy(a_type, b_type, shapes, const_b):
    rng = np.random.default_rng(abs(hash((a_type, b_type, shapes, const_b))) % 2**32)
    a, b = rand_q(rng, a_type, shapes[0]), rand_q(rng, b_type, shapes[1])
    n = shapes[1][-1]
    per_column = len(shapes[1]) == 2
    for a_where, b_where in [("low", "high"), ("high", "low"), ("random", "random")]:
        a_zp = zp_of(a_type, a_where, rng)
        b_zp = zp_of(b_type, b_where, rng, n if per_column and b_where == "random" else 1)
        inputs = {"a": a, "b": b, "a_zero_point": a_zp, "b_zero_point": b_zp}
        const = ("b", "b_zero_point") if const_b else ()
        model = node_model("MatMulInteger", inputs, const=const)
        want = np.matmul(a.astype(np.int64) - int(a_zp), b.astype(np.int64) - b_zp.astype(np.int64))
        for threads in (1, 2):
            got = run_tether(model, feeds(inputs, const), threads)
            assert got.dtype == np.int32
            np.testing.assert_array_equal(got, want.astype(np.int32))


def test_matmul_integer_per_row_a_zero_point_and_no_zero_points():
    rng = np.random.default_rng(1)
    a, b = rand_q(rng, U8, (6, 19)), rand_q(rng, I8, (19, 5))
    a_zp = rand_q(rng, U8, (6,))
    got = run_tether(node_model("MatMulInteger", {"a": a, "b": b, "a_zero_point": a_zp}, const=("b",)), {"a": a, "a_zero_point": a_zp})
    np.testing.assert_array_equal(got, (a.astype(np.int64) - a_zp[:, None].astype(np.int64)) @ b.astype(np.int64))
    got = run_tether(node_model("MatMulInteger", {"a": a, "b": b}), {"a": a, "b": b})
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))


def test_matmul_integer_saturating_extremes_are_exact():
    """255 x -128 summed over 2048 products: any 16-bit saturating step would show."""
    a = np.full((3, 2048), 255, U8)
    b = np.full((2048, 20), -128, I8)
    b[:, 1] = 127
    got = run_tether(node_model("MatMulInteger", {"a": a, "b": b}, const=("b",)), {"a": a})
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))


@pytest.mark.parametrize("a_type, b_type", [(U8, I8), (U8, U8), (I8, I8)])
def test_matmul_integer_equals_onnxruntime(a_type, b_type):
    rng = np.random.default_rng(2)
    a, b = rand_q(rng, a_type, (2, 37, 70)), rand_q(rng, b_type, (70, 45))
    inputs = {"a": a, "b": b, "a_zero_point": zp_of(a_type, "random", rng), "b_zero_point": zp_of(b_type, "random", rng, 45)}
    model = node_model("MatMulInteger", inputs, const=("b", "b_zero_point"))
    np.testing.assert_array_equal(run_tether(model, feeds(inputs, ("b", "b_zero_point")), 2),
                                  run_ort(model, feeds(inputs, ("b", "b_zero_point"))))


@pytest.mark.parametrize("a_type, b_type", [(U8, I8), (U8, U8), (I8, I8)])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("y_type", [U8, I8])
@pytest.mark.parametrize("shapes", [((1, 64), (64, 1)), ((13, 33), (33, 17)), ((2, 5, 96), (96, 40))],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_qlinear_matmul_equals_numpy_and_onnxruntime(a_type, b_type, per_column, y_type, shapes):
    rng = np.random.default_rng(3)
    a, b = rand_q(rng, a_type, shapes[0]), rand_q(rng, b_type, shapes[1])
    n = shapes[1][-1]
    a_scale = np.array(0.02, np.float32)
    b_scale = rng.uniform(0.001, 0.01, n if per_column else ()).astype(np.float32)
    a_zp, b_zp = zp_of(a_type, "random", rng), zp_of(b_type, "random", rng, n if per_column else 1)
    sums = np.matmul(a.astype(np.int64) - int(a_zp), b.astype(np.int64) - b_zp.astype(np.int64))
    # y's range: about the sums' spread, so that most outputs fall inside it (some saturate).
    y_scale = np.array(max(1.0, float(np.std(sums))) * 0.02 * float(np.mean(b_scale)) / 40, np.float32)
    inputs = {"a": a, "a_scale": a_scale, "a_zero_point": a_zp, "b": b, "b_scale": b_scale, "b_zero_point": b_zp,
              "y_scale": y_scale, "y_zero_point": zp_of(y_type, "random", rng)}
    const = ("b", "b_scale", "b_zero_point", "a_scale", "a_zero_point", "y_scale", "y_zero_point")
    model = node_model("QLinearMatMul", inputs, const=const, out_type=y_type)
    want = requantize(sums, out_scale(a_scale, b_scale, y_scale), inputs["y_zero_point"])
    if want.size >= 16:
        assert 0.2 < np.mean((want != np.iinfo(y_type).min) & (want != np.iinfo(y_type).max)), "mostly not saturated"
    got = run_tether(model, {"a": a}, 2)
    assert got.dtype == y_type
    np.testing.assert_array_equal(got, want)
    if y_type == a_type:  # onnxruntime's kernels write y in a's type
        np.testing.assert_array_equal(got, run_ort(model, {"a": a}))


# ---- ConvInteger and QLinearConv -------------------------------------------------------------------

CONV_CASES = [
    # (x shape, w shape, attributes)
    ((1, 3, 7, 7), (4, 3, 3, 3), {}),
    ((2, 5, 9, 11), (7, 5, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 4, 13, 13), (6, 2, 3, 3), {"group": 2, "strides": [2, 2], "pads": [1, 0, 1, 2]}),
    ((1, 6, 10, 10), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),
    ((2, 5, 13, 11), (5, 1, 3, 5), {"group": 5, "pads": [2, 0, 1, 3], "strides": [2, 3], "dilations": [2, 1]}),
    ((1, 8, 7, 7), (8, 1, 5, 5), {"group": 8, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 3, 12, 9), (5, 3, 3, 2), {"dilations": [2, 1], "strides": [1, 2]}),
    ((1, 16, 5, 5), (33, 16, 1, 1), {}),
    ((1, 3, 8, 8), (4, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
]


def conv_attrs_resolved(x_shape, w_shape, attrs):
    """strides, pads (begin h, begin w, end h, end w), dilations and group, auto_pad resolved."""
    strides = attrs.get("strides", [1, 1])
    dil = attrs.get("dilations", [1, 1])
    pads = attrs.get("pads", [0, 0, 0, 0])
    if attrs.get("auto_pad") == "SAME_UPPER":
        totals = [max(0, (-(-x_shape[2 + i] // strides[i]) - 1) * strides[i] + (w_shape[2 + i] - 1) * dil[i] + 1
                      - x_shape[2 + i]) for i in range(2)]
        pads = [totals[0] // 2, totals[1] // 2, totals[0] - totals[0] // 2, totals[1] - totals[1] // 2]
    return strides, pads, dil, attrs.get("group", 1)


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[0]}-{c[1]}-{sorted(c[2])}")
@pytest.mark.parametrize("x_type, w_type", [(U8, I8), (U8, U8), (I8, I8)])
def test_conv_integer_equals_numpy(case, x_type, w_type):
    x_shape, w_shape, attrs = case
    rng = np.random.default_rng(4)
    x, w = rand_q(rng, x_type, x_shape), rand_q(rng, w_type, w_shape)
    x_zp, w_zp = zp_of(x_type, "random", rng), zp_of(w_type, "random", rng)
    inputs = {"x": x, "w": w, "x_zero_point": x_zp, "w_zero_point": w_zp}
    strides, pads, dil, group = conv_attrs_resolved(x_shape, w_shape, attrs)
    want = conv_sums(x.astype(np.int64) - int(x_zp), w.astype(np.int64) - int(w_zp), strides, pads, dil, group)
    for const in [("w", "w_zero_point"), ()]:
        model = node_model("ConvInteger", inputs, const=const, opset=10, **attrs)
        for threads in (1, 2):
            np.testing.assert_array_equal(run_tether(model, feeds(inputs, const), threads), want.astype(np.int32))
    if x_type == U8:
        model = node_model("ConvInteger", inputs, const=("w", "w_zero_point"), opset=10, **attrs)
        np.testing.assert_array_equal(run_tether(model, feeds(inputs, ("w", "w_zero_point"))), run_ort(model, feeds(inputs, ("w", "w_zero_point"))))


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[0]}-{c[1]}-{sorted(c[2])}")
@pytest.mark.parametrize("x_type, w_type, y_type", [(U8, I8, U8), (I8, I8, I8), (U8, U8, U8)])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv_equals_numpy_and_onnxruntime(case, x_type, w_type, y_type, per_channel):
    x_shape, w_shape, attrs = case
    rng = np.random.default_rng(5)
    m = w_shape[0]
    x, w = rand_q(rng, x_type, x_shape), rand_q(rng, w_type, w_shape)
    x_scale = np.array(0.05, np.float32)
    w_scale = rng.uniform(0.002, 0.02, m if per_channel else ()).astype(np.float32)
    # Symmetric int8 weights, as onnxruntime requires of int8 w; uint8 w gets a zero point.
    w_zp = np.zeros(m if per_channel else (), w_type) if w_type == I8 else zp_of(w_type, "random", rng, m if per_channel else 1)
    k = w_shape[1] * w_shape[2] * w_shape[3]
    y_scale = np.array(0.05 * 0.01 * np.sqrt(k) * 40, np.float32)
    bias = rng.integers(-5000, 5000, m).astype(np.int32)
    inputs = {"x": x, "x_scale": x_scale, "x_zero_point": zp_of(x_type, "random", rng), "w": w, "w_scale": w_scale,
              "w_zero_point": w_zp, "y_scale": y_scale, "y_zero_point": zp_of(y_type, "random", rng), "B": bias}
    const = tuple(k for k in inputs if k != "x")
    model = node_model("QLinearConv", inputs, const=const, out_type=y_type, opset=10, **attrs)
    strides, pads, dil, group = conv_attrs_resolved(x_shape, w_shape, attrs)
    sums = conv_sums(x.astype(np.int64) - int(inputs["x_zero_point"]), w.astype(np.int64) - w_zp.reshape(-1, 1, 1, 1).astype(np.int64) if per_channel else w.astype(np.int64) - int(w_zp),
                     strides, pads, dil, group) + bias.reshape(1, -1, 1, 1)
    scale = out_scale(x_scale, np.broadcast_to(w_scale, (m,)), y_scale)
    want = requantize(np.moveaxis(sums, 1, -1), scale, inputs["y_zero_point"])
    want = np.moveaxis(want, -1, 1)
    got = run_tether(model, {"x": x}, 2)
    assert got.dtype == y_type
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, run_ort(model, {"x": x}))


def _dequantized_conv_model(inputs: dict[str, np.ndarray], attrs: dict) -> bytes:
    """QLinearConv (every parameter constant) whose output a DequantizeLinear reads: the conv's
    output is no graph output, so tether's passes may run it channels last."""
    const = tuple(k for k in inputs if k != "x")
    conv = helper.make_node("QLinearConv", list(inputs), ["q"], name="conv", **attrs)
    dq = helper.make_node("DequantizeLinear", ["q", "y_scale", "y_zero_point"], ["y"], name="dq")
    inits = [numpy_helper.from_array(inputs[k], k) for k in const]
    graph = helper.make_graph([conv, dq], "g", [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(inputs["x"].dtype), inputs["x"].shape)],
                              [helper.make_tensor_value_info("y", helper.TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10).SerializeToString()


CHANNELS_LAST_CASES = CONV_CASES + [
    ((1, 35, 9, 9), (35, 1, 3, 3), {"group": 35, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((2, 40, 6, 7), (40, 1, 3, 3), {"group": 40, "pads": [0, 1, 2, 1], "dilations": [2, 1]}),
    # Depthwise 3 x 3 at every row-kernel path: stride 2 with TF-style padding, windows
    # wholly outside a one-pixel-wide input, stride 3, stride and dilation 2.
    ((1, 33, 8, 8), (33, 1, 3, 3), {"group": 33, "pads": [0, 0, 1, 1], "strides": [2, 2]}),
    ((2, 20, 5, 1), (20, 1, 3, 3), {"group": 20, "pads": [2, 2, 2, 2]}),
    ((1, 24, 7, 10), (24, 1, 3, 3), {"group": 24, "pads": [1, 1, 1, 1], "strides": [3, 3]}),
    ((1, 16, 9, 9), (16, 1, 3, 3), {"group": 16, "pads": [2, 2, 2, 2], "strides": [2, 2], "dilations": [2, 2]}),
    ((1, 17, 6, 6), (48, 17, 1, 1), {"strides": [2, 2]}),
    ((1, 3, 15, 15), (8, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),
]


@pytest.mark.parametrize("case", CHANNELS_LAST_CASES, ids=lambda c: f"{c[0]}-{c[1]}-{sorted(c[2])}")
@pytest.mark.parametrize("x_type, w_type, zero", [(U8, I8, "low"), (U8, I8, "high"), (I8, I8, "random"), (U8, U8, "random")])
def test_qlinear_conv_channels_last_equals_numpy_and_onnxruntime(case, x_type, w_type, zero):
    """A QLinearConv read by another node runs channels last (group 1 and depthwise): the same
    integers as the oracle and onnxruntime, zero points at the ends of the range."""
    x_shape, w_shape, attrs = case
    rng = np.random.default_rng(6)
    m = w_shape[0]
    x, w = rand_q(rng, x_type, x_shape), rand_q(rng, w_type, w_shape)
    x_scale = np.array(0.05, np.float32)
    w_scale = rng.uniform(0.002, 0.02, m).astype(np.float32)
    w_zp = np.zeros(m, w_type) if w_type == I8 else zp_of(w_type, "random", rng, m)
    k = w_shape[1] * w_shape[2] * w_shape[3]
    y_scale = np.array(0.05 * 0.01 * np.sqrt(k) * 40, np.float32)
    bias = rng.integers(-5000, 5000, m).astype(np.int32)
    inputs = {"x": x, "x_scale": x_scale, "x_zero_point": zp_of(x_type, zero, rng), "w": w, "w_scale": w_scale,
              "w_zero_point": w_zp, "y_scale": y_scale, "y_zero_point": zp_of(x_type, zero, rng), "B": bias}
    model = _dequantized_conv_model(inputs, attrs)
    strides, pads, dil, group = conv_attrs_resolved(x_shape, w_shape, attrs)
    sums = conv_sums(x.astype(np.int64) - int(inputs["x_zero_point"]), w.astype(np.int64) - w_zp.reshape(-1, 1, 1, 1).astype(np.int64),
                     strides, pads, dil, group) + bias.reshape(1, -1, 1, 1)
    q = np.moveaxis(requantize(np.moveaxis(sums, 1, -1), out_scale(x_scale, w_scale, y_scale), inputs["y_zero_point"]), -1, 1)
    want = ((q.astype(np.int32) - int(inputs["y_zero_point"])).astype(np.float32) * y_scale).astype(np.float32)
    conv = next(n for n in tt.optimize(tt.load(model)).nodes if n.op_type == "QLinearConv")
    runs_last = group == 1 or (group == m and w_shape[1] == 1)
    assert (conv.domain, dict(conv.attributes).get("channels_last", 0)) == (("ai.tether", 1) if runs_last else ("", 0))
    for threads in (1, 2):
        np.testing.assert_array_equal(run_tether(model, {"x": x}, threads), want)
    np.testing.assert_array_equal(run_tether(model, {"x": x}), run_ort(model, {"x": x}))


def test_qlinear_conv_1d_and_runtime_weights():
    rng = np.random.default_rng(6)
    x, w = rand_q(rng, U8, (2, 3, 17)), rand_q(rng, I8, (4, 3, 5))
    inputs = {"x": x, "x_scale": np.array(0.1, np.float32), "x_zero_point": np.array(128, U8), "w": w,
              "w_scale": np.array(0.01, np.float32), "w_zero_point": np.array(0, I8),
              "y_scale": np.array(0.5, np.float32), "y_zero_point": np.array(100, U8)}
    model = node_model("QLinearConv", inputs, out_type=U8, opset=10, pads=[2, 1], strides=[2])
    got = run_tether(model, inputs)
    sums = conv_sums((x.astype(np.int64) - 128)[:, :, None], w.astype(np.int64)[:, :, None], [1, 2], [0, 2, 0, 1], [1, 1], 1)[:, :, 0]
    want = requantize(np.moveaxis(sums, 1, -1), out_scale(np.float32(0.1), np.full(4, 0.01, np.float32), np.float32(0.5)), np.array(100, U8))
    np.testing.assert_array_equal(got, np.moveaxis(want, -1, 1))
    np.testing.assert_array_equal(got, run_ort(model, inputs))


# ---- bad parameters ------------------------------------------------------------------------------


def _qmatmul_inputs(**over):
    rng = np.random.default_rng(7)
    inputs = {"a": rand_q(rng, U8, (4, 8)), "a_scale": np.array(0.1, np.float32), "a_zero_point": np.array(3, U8),
              "b": rand_q(rng, I8, (8, 5)), "b_scale": np.array(0.1, np.float32), "b_zero_point": np.array(0, I8),
              "y_scale": np.array(1.0, np.float32), "y_zero_point": np.array(0, U8)}
    inputs.update(over)
    return inputs


@pytest.mark.parametrize("over, message", [
    ({"b_scale": np.array(0.0, np.float32)}, r"b_scale is 0; scales must be positive and finite"),
    ({"a_scale": np.array(-0.5, np.float32)}, r"a_scale is -0.5; scales must be positive and finite"),
    ({"y_scale": np.array(np.inf, np.float32)}, r"y_scale is inf"),
    ({"b_scale": np.full(3, 0.1, np.float32)}, r"b_scale has 3 elements, expected 1 or 5 \(one per column of b\)"),
    ({"b_zero_point": np.zeros(4, I8)}, r"b_zero_point has 4 elements, expected 1 or 5"),
])
@pytest.mark.parametrize("const", [True, False])
def test_bad_parameters_are_typed_errors_naming_the_node(over, message, const):
    inputs = _qmatmul_inputs(**over)
    c = tuple(k for k in inputs if k != "a") if const else ("b",)
    model = node_model("QLinearMatMul", inputs, const=c, out_type=U8, name="qmm")
    with pytest.raises(tt.Error, match=message) as e:
        run_tether(model, feeds(inputs, c))
    assert "qmm" in str(e.value)
    assert isinstance(e.value, tt.ModelError if const else tt.ArgumentError)


def test_unsupported_types_are_refused_at_compile_time():
    inputs = _qmatmul_inputs(b_zero_point=np.array(0, U8))
    model = node_model("QLinearMatMul", inputs, const=("b",), out_type=U8, name="qmm")
    with pytest.raises(tt.Error, match=r"qmm.*input 3 \('b'\) is int8 but input 5 \('b_zero_point'\) is uint8; "
                                       r"QLinearMatMul takes one element type for these inputs"):
        tt.compile(tt.load(model))
    a16 = np.zeros((2, 3), np.int16)
    model = node_model("MatMulInteger", {"a": a16, "b": np.zeros((3, 2), I8)}, const=("b",), name="mmi")
    # ONNX types MatMulInteger's operands as 8-bit: int16 is refused by shape inference.
    with pytest.raises(tt.ShapeError, match=r"mmi.*input 0 \('a'\) is int16; MatMulInteger takes uint8 or int8 there"):
        tt.compile(tt.load(model))


def _to_float_model(scale: np.ndarray, bias: np.ndarray | None) -> bytes:
    """ai.tether MatMulIntegerToFloat(a, b, scale, a_zero_point, b_zero_point[, bias]) with b [6, 4]."""
    names = ["a", "b", "scale", "a_zero_point", "b_zero_point"] + (["bias"] if bias is not None else [])
    inits = [numpy_helper.from_array(np.ones((6, 4), I8), "b"), numpy_helper.from_array(scale, "scale"),
             numpy_helper.from_array(np.array(0, U8), "a_zero_point"), numpy_helper.from_array(np.array(0, I8), "b_zero_point")]
    if bias is not None:
        inits.append(numpy_helper.from_array(bias, "bias"))
    node = helper.make_node("MatMulIntegerToFloat", names, ["y"], name="mm", domain="ai.tether")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", helper.TensorProto.UINT8, [3, 6])],
                              [helper.make_tensor_value_info("y", helper.TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.tether", 1)],
                             ir_version=10).SerializeToString()


def test_matmul_integer_to_float_equals_numpy_and_refuses_bad_parameters():
    a = np.arange(18, dtype=U8).reshape(3, 6)
    scale, bias = np.array([0.5, 0.25, 2.0, 1.0], np.float32), np.array([1, -1, 0, 3], np.float32)
    got = run_tether(_to_float_model(scale, bias), {"a": a})
    want = (a.astype(np.int32) @ np.ones((6, 4), np.int32)).astype(np.float32) * scale + bias
    np.testing.assert_array_equal(got, want)
    with pytest.raises(tt.Error, match=r"mm.*scale has shape \[3\], expected one value or \[4\]"):
        run_tether(_to_float_model(scale[:3], bias), {"a": a})
    with pytest.raises(tt.Error, match=r"mm.*bias has shape \[2\], expected \[4\]"):
        run_tether(_to_float_model(scale, bias[:2]), {"a": a})
    with pytest.raises(tt.Error, match=r"mm.*scale is float16; it must be float32"):
        run_tether(_to_float_model(scale.astype(np.float16), None), {"a": a})


def _conv_to_float_model(scale_shape: list[int], bias: np.ndarray | None, scale_type=helper.TensorProto.FLOAT) -> bytes:
    """ai.tether ConvIntegerToFloat(x, w, scale, x_zero_point, w_zero_point[, bias]), w [4, 2, 3, 3]
    in 2 groups, the scale a graph input."""
    names = ["x", "w", "scale", "x_zero_point", "w_zero_point"] + (["bias"] if bias is not None else [])
    w = (np.arange(72) % 7 - 3).astype(I8).reshape(4, 2, 3, 3)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(5, U8), "x_zero_point"),
             numpy_helper.from_array(np.array(1, I8), "w_zero_point")]
    if bias is not None:
        inits.append(numpy_helper.from_array(bias, "bias"))
    node = helper.make_node("ConvIntegerToFloat", names, ["y"], name="conv", domain="ai.tether", group=2, pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", helper.TensorProto.UINT8, [2, 4, 5, 6]),
                                            helper.make_tensor_value_info("scale", scale_type, scale_shape)],
                              [helper.make_tensor_value_info("y", helper.TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.tether", 1)],
                             ir_version=10).SerializeToString()


def test_conv_integer_to_float_equals_the_onnx_reference_and_refuses_bad_parameters():
    """The fused node against the ONNX reference running ConvInteger -> Cast -> Mul -> Add, a
    scale per output channel across two groups; wrong scale and bias sizes raise naming the node."""
    x = (np.arange(240) * 37 % 256).astype(U8).reshape(2, 4, 5, 6)
    scale, bias = np.array([0.5, 0.25, 2.0, 1.0], np.float32), np.array([1, -1, 0, 3], np.float32)
    got = tt.compile(tt.load(_conv_to_float_model([4], bias)), threads=2).run({"x": x, "scale": scale})["y"]
    w = (np.arange(72) % 7 - 3).astype(I8).reshape(4, 2, 3, 3)
    ref_nodes = [helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["i"], group=2, pads=[1, 1, 1, 1]),
                 helper.make_node("Cast", ["i"], ["f"], to=helper.TensorProto.FLOAT),
                 helper.make_node("Mul", ["f", "s"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
    ref = helper.make_model(helper.make_graph(
        ref_nodes, "r", [helper.make_tensor_value_info("x", helper.TensorProto.UINT8, [2, 4, 5, 6])],
        [helper.make_tensor_value_info("y", helper.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(5, U8), "xz"),
         numpy_helper.from_array(np.array(1, I8), "wz"), numpy_helper.from_array(scale.reshape(4, 1, 1), "s"),
         numpy_helper.from_array(bias.reshape(4, 1, 1), "b")]), opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    np.testing.assert_array_equal(got, ReferenceEvaluator(ref).run(None, {"x": x})[0])
    with pytest.raises(tt.Error, match=r"conv.*scale has shape \[3\], expected one value or \[4\] \(one per output channel\)"):
        tt.compile(tt.load(_conv_to_float_model([3], bias))).run({"x": x, "scale": scale[:3]})
    with pytest.raises(tt.Error, match=r"conv.*bias has shape \[2\], expected \[4\]"):
        tt.compile(tt.load(_conv_to_float_model([4], bias[:2]))).run({"x": x, "scale": scale})
    with pytest.raises(tt.Error, match=r"conv.*scale is float16; it must be float32"):
        tt.compile(tt.load(_conv_to_float_model([4], None, helper.TensorProto.FLOAT16)))


@pytest.mark.parametrize("x_type", [U8, I8])
@pytest.mark.parametrize("attrs", [{"pads": [1, 1, 1, 1]}, {"strides": [2, 1], "dilations": [1, 2], "pads": [0, 2, 1, 0]}])
def test_depthwise_conv_integer_with_a_run_time_zero_point_equals_the_onnx_reference(x_type, attrs):
    """Dynamic quantization's depthwise convolution: x's zero point a graph input (as
    DynamicQuantizeLinear makes it), constant filters. The depthwise kernel runs it (filters
    prepared at compile), int32 sums exact against the ONNX reference; fused with Cast, Mul
    by a per-channel scale, Add and Relu into ConvIntegerToFloat, equal to the reference's
    unfused float operations bit for bit, at 1 and 2 threads."""
    rng = np.random.default_rng(11)
    info = np.iinfo(x_type)
    x = rng.integers(info.min, info.max + 1, (2, 6, 9, 8)).astype(x_type)
    w = rng.integers(-128, 128, (6, 1, 3, 3)).astype(I8)
    xz = np.array(info.min + 77, x_type)
    conv = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["i"], group=6, **attrs)
    float_nodes = [helper.make_node("Cast", ["i"], ["f"], to=helper.TensorProto.FLOAT),
                   helper.make_node("Mul", ["f", "s"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
                   helper.make_node("Relu", ["a"], ["y"])]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(3, I8), "wz"),
             numpy_helper.from_array(rng.uniform(1e-4, 1e-3, (1, 6, 1, 1)).astype(np.float32), "s"),
             numpy_helper.from_array(rng.standard_normal((6, 1, 1)).astype(np.float32), "b")]
    t = helper.np_dtype_to_tensor_dtype(np.dtype(x_type))
    inputs = [helper.make_tensor_value_info("x", t, list(x.shape)), helper.make_tensor_value_info("xz", t, [])]

    def model(nodes, out, out_type):
        graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(out, out_type, None)], inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)

    feeds = {"x": x, "xz": xz}
    sums, chain = model([conv], "i", helper.TensorProto.INT32), model([conv, *float_nodes], "y", helper.TensorProto.FLOAT)
    for threads in (1, 2):
        got = tt.compile(tt.load(sums.SerializeToString()), threads=threads).run(feeds)["i"]
        np.testing.assert_array_equal(got, ReferenceEvaluator(sums).run(None, feeds)[0])
        sess = tt.compile(tt.load(chain.SerializeToString()), threads=threads)
        assert [st["op_type"] for st in sess.steps()] == ["ai.tether:ConvIntegerToFloat"]
        np.testing.assert_array_equal(sess.run(feeds)["y"], ReferenceEvaluator(chain).run(None, feeds)[0])


# ---- onnxruntime's QOperator contrib ops (com.microsoft) ----------------------------------------------


def ms_model(op: str, inputs: dict[str, np.ndarray | None], const: tuple[str, ...], out_type: type, **attrs) -> bytes:
    names = [k if v is not None else "" for k, v in inputs.items()]
    graph_inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                    for k, v in inputs.items() if v is not None and k not in const]
    inits = [numpy_helper.from_array(v, k) for k, v in inputs.items() if v is not None and k in const]
    node = helper.make_node(op, names, ["y"], name="n", domain="com.microsoft", **attrs)
    out = helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(out_type)), None)
    graph = helper.make_graph([node], "g", graph_inputs, [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=10).SerializeToString()


def _quantize(v: np.ndarray, scale: np.float32, zp: np.ndarray) -> np.ndarray:
    info = np.iinfo(zp.dtype)
    return np.clip(np.rint(v / scale) + int(zp), info.min, info.max).astype(zp.dtype)


@pytest.mark.parametrize("dtype", [U8, I8])
@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (1, 3, 1)), ((5, 1), (1, 7)), ((4, 6), ())],
                         ids=str)
@pytest.mark.parametrize("zero_points", [True, False])
def test_ms_qlinear_add_broadcasts_like_the_unfused_nodes(dtype, shapes, zero_points):
    """com.microsoft QLinearAdd: (A - a_zp) * a_scale + (B - b_zp) * b_scale quantized with
    C's parameters in float32, as DequantizeLinear -> Add -> QuantizeLinear compute it, with
    broadcasting and omitted zero points; within one step of onnxruntime's fixed-point kernel."""
    rng = np.random.default_rng(10)
    a, b = rand_q(rng, dtype, shapes[0]), rand_q(rng, dtype, shapes[1])
    za, zb, zc = (zp_of(dtype, "random", rng) for _ in range(3)) if zero_points else (np.array(0, dtype),) * 3
    sa, sb, sc = np.float32(0.03), np.float32(0.05), np.float32(0.07)
    inputs = {"a": a, "a_scale": np.array(sa), "a_zero_point": za if zero_points else None, "b": b,
              "b_scale": np.array(sb), "b_zero_point": zb if zero_points else None, "c_scale": np.array(sc),
              "c_zero_point": zc if zero_points else None}
    if not zero_points:
        del inputs["c_zero_point"]
    model = ms_model("QLinearAdd", inputs, ("a_scale", "a_zero_point", "b_scale", "b_zero_point", "c_scale", "c_zero_point"),
                     dtype)
    fa = ((a.astype(np.int32) - int(za)).astype(np.float32) * sa).astype(np.float32)
    fb = ((b.astype(np.int32) - int(zb)).astype(np.float32) * sb).astype(np.float32)
    want = _quantize((fa + fb).astype(np.float32), sc, zc)
    got = run_tether(model, {"a": a, "b": b}, 2)
    np.testing.assert_array_equal(got, want)
    if zero_points:  # onnxruntime's type inference refuses the node without them
        theirs = run_ort(model, {"a": a, "b": b})
        assert np.abs(got.astype(np.int32) - theirs.astype(np.int32)).max() <= 1


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("output", ["uint8", "float"])
@pytest.mark.parametrize("bias", ["column", "scalar", None])
def test_ms_qgemm_equals_numpy_and_onnxruntime(trans_b, per_column, output, bias):
    """com.microsoft QGemm: (A - a_zp)(B - b_zp) + C with the output scale a_scale * b_scale[j]
    (/ y_scale, requantized when y_scale is given), transB and per-column B parameters."""
    rng = np.random.default_rng(11)
    m, k, n = 13, 37, 21
    a, w = rand_q(rng, U8, (m, k)), rand_q(rng, I8, (k, n))
    a_scale, w_scale = np.array(0.02, np.float32), rng.uniform(0.001, 0.01, n if per_column else ()).astype(np.float32)
    w_zp = np.zeros(n if per_column else (), I8)
    c = {"column": rng.integers(-3000, 3000, n).astype(np.int32), "scalar": np.array(123, np.int32), None: None}[bias]
    inputs = {"a": a, "a_scale": a_scale, "a_zero_point": np.array(7, U8), "b": np.ascontiguousarray(w.T) if trans_b else w,
              "b_scale": w_scale, "b_zero_point": w_zp, "C": c}
    if output == "uint8":
        inputs.update({"y_scale": np.array(0.4, np.float32), "y_zero_point": np.array(120, U8)})
    model = ms_model("QGemm", inputs, tuple(x for x in inputs if x != "a"), U8 if output == "uint8" else np.float32,
                     transB=trans_b)
    sums = (a.astype(np.int64) - 7) @ w.astype(np.int64) + (c.astype(np.int64) if c is not None else 0)
    scale = (a_scale * np.broadcast_to(w_scale, (n,))).astype(np.float32)
    if output == "uint8":
        want = requantize(sums, (scale / np.float32(0.4)).astype(np.float32), inputs["y_zero_point"])
    else:
        want = (sums.astype(np.float32) * scale).astype(np.float32)
    got = run_tether(model, {"a": a}, 2)
    np.testing.assert_array_equal(got, want)
    if ORT_U8S8_EXACT:  # else onnxruntime's uint8 x int8 kernel saturates; numpy above is the oracle
        np.testing.assert_array_equal(got, run_ort(model, {"a": a}))


@pytest.mark.parametrize("dtype", [U8, I8])
@pytest.mark.parametrize("channels_last", [0, 1])
def test_ms_qlinear_global_average_pool_equals_numpy_and_onnxruntime(dtype, channels_last):
    """com.microsoft QLinearGlobalAveragePool: (sum - count * x_zp) * x_scale / (y_scale * count),
    requantized; NCHW and channels last, against a numpy oracle and within one step of
    onnxruntime."""
    rng = np.random.default_rng(13)
    shape = (2, 5, 7, 33) if channels_last else (2, 33, 5, 7)
    x = rand_q(rng, dtype, shape)
    inputs = {"x": x, "x_scale": np.array(0.05, np.float32), "x_zero_point": zp_of(dtype, "random", rng),
              "y_scale": np.array(0.03, np.float32), "y_zero_point": zp_of(dtype, "random", rng)}
    model = ms_model("QLinearGlobalAveragePool", inputs, ("x_scale", "x_zero_point", "y_scale", "y_zero_point"), dtype,
                     channels_last=channels_last)
    axes = (1, 2) if channels_last else (2, 3)
    count = shape[axes[0]] * shape[axes[1]]
    s = x.astype(np.int64).sum(axis=axes, keepdims=True) - count * int(inputs["x_zero_point"])
    scale = np.float32(0.05) / (np.float32(0.03) * np.float32(count))
    info = np.iinfo(dtype)
    z = int(inputs["y_zero_point"])
    v = np.clip(s.astype(np.float32) * scale, np.float32(info.min - z), np.float32(info.max - z))
    want = (np.rint(v) + z).astype(dtype)
    got = run_tether(model, {"x": x}, 2)
    np.testing.assert_array_equal(got, want)
    assert np.abs(got.astype(np.int32) - run_ort(model, {"x": x}).astype(np.int32)).max() <= 1


@pytest.mark.parametrize("attrs, drop, message", [
    ({"transA": 1}, (), "transA = 1 is not supported"),
    ({"alpha": 0.5}, (), "alpha other than 1 is not supported"),
    ({}, ("y_zero_point",), "y_scale and y_zero_point must be given together"),
])
def test_ms_qgemm_refuses_what_it_does_not_run(attrs, drop, message):
    rng = np.random.default_rng(12)
    inputs = {"a": rand_q(rng, U8, (6, 4) if attrs.get("transA") else (4, 6)), "a_scale": np.array(0.1, np.float32), "a_zero_point": np.array(0, U8),
              "b": rand_q(rng, I8, (6, 4)), "b_scale": np.array(0.1, np.float32), "b_zero_point": np.array(0, I8),
              "C": None, "y_scale": np.array(0.2, np.float32), "y_zero_point": np.array(0, U8)}
    for d in drop:
        inputs[d] = None
    model = ms_model("QGemm", inputs, tuple(x for x in inputs if x != "a"), np.float32 if drop else U8, **attrs)
    with pytest.raises(tt.Error, match=rf"n.*{message}"):
        tt.compile(tt.load(model))


# ---- every instruction set ------------------------------------------------------------------------


@pytest.mark.parametrize("isa", ["generic", "avx2", "avx512"])
def test_every_case_above_under_each_isa(isa):
    """The cases above again with the integer kernels capped at `isa` (the native ones, AMX
    where the CPU has it, run above)."""
    import os
    import subprocess
    import sys

    if isa == "avx2" and not tt.cpu_info()["avx2"]:
        pytest.skip("this CPU has no AVX2, so the AVX2 kernels cannot run here")
    if isa == "avx512" and not tt.cpu_info()["amx_int8"]:
        pytest.skip("this CPU has no AMX: the AVX-512 kernels are the native ones, run above")
    env = {**os.environ, "TETHER_ISA": isa}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", __file__, "-k",
                        "not under_each_isa"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:]
    probe = subprocess.run([sys.executable, "-c", "import tether; print(tether.cpu_info()['int8_gemm_kernel'])"], env=env,
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip().endswith({"avx512": "__avx512vnni"}.get(isa, f"__{isa}")), probe.stdout
    assert " passed" in r.stdout.splitlines()[-1] and "failed" not in r.stdout.splitlines()[-1]
