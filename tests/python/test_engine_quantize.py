"""The CPU kernels for QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear: single-node
models run by tether and by onnxruntime (bitwise equal, integer and float outputs alike) and
checked against a numpy oracle written from the ONNX spec, per tensor, per axis and blocked, on
awkward shapes, with zero points at both ends of each type's range, ties on .5, saturation and
NaN; bad scales, zero points and layouts raise typed errors naming the node; a QDQ model written
by onnxruntime's quantize_static runs on tether as onnxruntime runs it."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tether as tt
from _onnx_oracle import run_ort
from onnx import TensorProto, helper, numpy_helper

QTYPES = [np.int8, np.uint8, np.int16, np.uint16]
THREADS = [1, 2]


# ---- models and oracles ------------------------------------------------------------------------


def node_model(op: str, x: np.ndarray, params: dict[str, np.ndarray | None], *, const: bool = True,
               opset: int = 21, outputs: int = 1, name: str = "q", **attrs) -> bytes:
    """One `op` node on input x and the params in order (None: omitted). The params are
    initializers (`const`) or graph inputs fed at run time."""
    names = ["x"] + [k if v is not None else "" for k, v in params.items()]
    while names[-1] == "":
        names.pop()
    present = {k: v for k, v in params.items() if v is not None}
    inputs = [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)]
    inits = []
    for k, v in present.items():
        if const:
            inits.append(numpy_helper.from_array(v, k))
        else:
            inputs.append(helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape))
    outs = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op, names, outs, name=name, **attrs)
    graph = helper.make_graph([node], "g", inputs, [onnx.ValueInfoProto(name=o) for o in outs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10).SerializeToString()


def feeds_of(x: np.ndarray, params: dict[str, np.ndarray | None], const: bool) -> dict[str, np.ndarray]:
    feeds = {"x": x}
    if not const:
        feeds.update({k: v for k, v in params.items() if v is not None})
    return feeds


def run_tether(model: bytes, feeds: dict[str, np.ndarray], threads: int = 1) -> list[np.ndarray]:
    sess = tt.compile(tt.load(model), threads=threads)
    out = sess.run(feeds)
    return [out[o.name] for o in sess.outputs]


def expand(p: np.ndarray, shape: tuple[int, ...], axis: int, block: int) -> np.ndarray:
    """A scale or zero point broadcast to x's shape by the spec's granularity rules."""
    if block == 0 and p.size == 1:
        return p.reshape(())
    a = axis % len(shape)
    if block == 0:
        dims = [1] * len(shape)
        dims[a] = p.size
        return p.reshape(dims)
    return np.repeat(p, block, axis=a).take(range(shape[a]), axis=a)


def np_quantize(x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, dtype, axis: int = 1,
                block: int = 0) -> np.ndarray:
    """saturate(round_half_even(x / scale) + zp): a float32 division, numpy's rint, the sum and
    the clip in float64 (exact); NaN to the lowest value (as onnxruntime), +-inf saturated."""
    s = expand(scale.astype(np.float32), x.shape, axis, block)
    z = np.zeros((), np.float64) if zp is None else expand(zp.astype(np.float64), x.shape, axis, block)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        v = np.rint((x / s).astype(np.float32)).astype(np.float64) + z
    info = np.iinfo(dtype)
    v = np.where(np.isnan(v), info.min, np.clip(v, info.min, info.max))
    return v.astype(dtype)


def np_dequantize(x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, axis: int = 1,
                  block: int = 0) -> np.ndarray:
    """(x - zp) * scale: the difference exact in int64, rounded once to float32 (only int32 x
    can round there), then a float32 product (rounded once to float16 for float16 scales)."""
    z = np.zeros((), np.int64) if zp is None else expand(zp.astype(np.int64), x.shape, axis, block)
    s = expand(scale.astype(np.float32), x.shape, axis, block)
    return ((x.astype(np.int64) - z).astype(np.float32) * s).astype(scale.dtype)


def np_dynamic(x: np.ndarray) -> tuple[np.ndarray, np.float32, np.uint8]:
    """The spec's formula in float32, with onnxruntime's scale 1 for a zero range."""
    lo = np.float32(min(np.float32(x.min(initial=0)), np.float32(0)))
    hi = np.float32(max(np.float32(x.max(initial=0)), np.float32(0)))
    scale = np.float32(1) if hi == lo else np.float32((hi - lo) / np.float32(255))
    zp = np.uint8(np.rint(np.clip(np.float32(0) - lo / scale, 0, 255)))
    return np_quantize(x, np.array(scale), np.array(zp), np.uint8), scale, zp


def assert_bitwise(got: np.ndarray, want: np.ndarray, what: str = "") -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape, want.dtype, want.shape)
    if got.dtype.kind == "f":
        bits = np.dtype(f"u{got.dtype.itemsize}")
        bad = np.flatnonzero(got.view(bits) != want.view(bits))
    else:
        bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{what}: {bad.size} of {got.size} differ, first at {bad[0]}: {got.flat[bad[0]]} vs {want.flat[bad[0]]}"


def hard_values(rng: np.random.Generator, shape: tuple[int, ...], step: float, dtype) -> np.ndarray:
    """x for quantization with scale near `step`: most of the range, ties on .5 steps, values far
    past both ends, and (where there is room) +-inf and NaN."""
    info = np.iinfo(dtype)
    span = float(info.max) - float(info.min)
    x = rng.uniform(-0.6 * span, 0.6 * span, shape) * step
    flat = x.reshape(-1)
    k = rng.integers(-40, 40, flat.size)
    ties = rng.random(flat.size) < 0.3
    flat[ties] = (k[ties] + 0.5) * step
    specials = [np.inf, -np.inf, np.nan, 1e30, -1e30, 3.0 * span * step, -3.0 * span * step]
    for i, v in enumerate(specials[: max(0, flat.size - 2)]):
        flat[(i * 7 + 1) % flat.size] = v
    return x.astype(np.float32)


def zero_points(rng: np.random.Generator, dtype, n: int | None) -> np.ndarray:
    """Zero points at the ends of the range, 0, and in between."""
    info = np.iinfo(dtype)
    pool = np.array([info.min, info.max, 0, info.min + 1, info.max // 3], np.int64)
    if n is None:
        return np.array(pool[rng.integers(0, 2)], dtype)
    return np.resize(np.concatenate([pool, rng.integers(info.min, int(info.max) + 1, n)]), n).astype(dtype)


def scales(rng: np.random.Generator, n: int | None, step: float = 0.05) -> np.ndarray:
    """Per-channel scales spanning five orders of magnitude, every other one a power of two
    (so that x = (k + 0.5) * scale is an exact tie), or one scale."""
    if n is None:
        return np.array(step, np.float32)
    s = step * 10.0 ** rng.uniform(-3, 2, n)
    s[::2] = 2.0 ** np.round(np.log2(s[::2]))
    return s.astype(np.float32)


# ---- QuantizeLinear -------------------------------------------------------------------------------

SHAPES = [(1,), (3,), (13,), (127,), (3, 13), (2, 3, 13), (2, 3, 5, 7)]


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_quantize_per_tensor_matches_onnxruntime_and_numpy(shape, dtype, threads):
    rng = np.random.default_rng([*shape, np.dtype(dtype).num])
    for step, zp in [(0.05, zero_points(rng, dtype, None)), (0.5, np.array(np.iinfo(dtype).max, dtype)),
                     (3e-4, np.array(np.iinfo(dtype).min, dtype)), (7.0, None)]:
        x = hard_values(rng, shape, step, dtype)
        params = {"s": np.array(step, np.float32), "z": zp}
        if zp is None:
            params = {"s": params["s"]}
        attrs = {"output_dtype": helper.np_dtype_to_tensor_dtype(np.dtype(dtype))} if zp is None else {}
        model = node_model("QuantizeLinear", x, params, **attrs)
        got = run_tether(model, {"x": x}, threads)[0]
        assert_bitwise(got, run_ort(model, {"x": x})[0], f"onnxruntime, step {step}")
        assert_bitwise(got, np_quantize(x, params["s"], zp, dtype), f"numpy, step {step}")


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("shape,axis", [((13, 3), 0), ((3, 13), 1), ((2, 13, 5), 1), ((2, 3, 5, 7), -1),
                                         ((127, 2), -2), ((1, 3, 1, 1), 1), ((4, 3, 5, 2), 0)])
def test_quantize_per_axis_matches_onnxruntime_and_numpy(shape, axis, dtype, threads):
    rng = np.random.default_rng(7)
    n = shape[axis]
    s, zp = scales(rng, n), zero_points(rng, dtype, n)
    x = hard_values(rng, shape, 1.0, dtype) * expand(s, shape, axis, 0)
    for const in (True, False):
        params = {"s": s, "z": zp}
        model = node_model("QuantizeLinear", x, params, const=const, axis=axis)
        feeds = feeds_of(x, params, const)
        got = run_tether(model, feeds, threads)[0]
        assert_bitwise(got, run_ort(model, feeds)[0], f"onnxruntime, const {const}")
        assert_bitwise(got, np_quantize(x, s, zp, dtype, axis), f"numpy, const {const}")


BLOCKED = [((3, 13), 1, 2), ((3, 13), 1, 3), ((13, 3), 0, 3), ((2, 7, 5), 1, 2), ((2, 7, 5), -1, 3),
           ((2, 5, 4, 3), 2, 3), ((4, 3), 1, 3), ((5, 1), 0, 2)]


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("shape,axis,block", BLOCKED)
def test_quantize_blocked_with_a_ragged_last_block_matches_onnxruntime_and_numpy(shape, axis, block, dtype, threads):
    rng = np.random.default_rng(8)
    sshape = list(shape)
    sshape[axis] = -(-shape[axis] // block)
    s = scales(rng, int(np.prod(sshape))).reshape(sshape)
    zp = zero_points(rng, dtype, s.size).reshape(sshape)
    x = hard_values(rng, shape, 1.0, dtype) * expand(s, shape, axis, block)
    for const in (True, False):
        params = {"s": s, "z": zp}
        model = node_model("QuantizeLinear", x, params, const=const, axis=axis, block_size=block)
        feeds = feeds_of(x, params, const)
        got = run_tether(model, feeds, threads)[0]
        assert_bitwise(got, run_ort(model, feeds)[0], f"onnxruntime, const {const}")
        assert_bitwise(got, np_quantize(x, s, zp, dtype, axis, block), f"numpy, const {const}")


def test_quantize_rounds_ties_to_even():
    # With a power-of-two scale x / scale is exact, so every value is a tie or an integer.
    x = np.array([0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, -3.5, 0.25, 0.75, 126.5, 127.5, -128.5, -127.5], np.float32)
    want = np.array([0, 2, 2, 4, 0, -2, -2, -4, 0, 1, 126, 127, -128, -128], np.int8)
    model = node_model("QuantizeLinear", x * 0.25, {"s": np.array(0.25, np.float32), "z": np.array(0, np.int8)})
    assert_bitwise(run_tether(model, {"x": x * np.float32(0.25)})[0], want)
    assert_bitwise(run_ort(model, {"x": x * np.float32(0.25)})[0], want)


def test_quantize_divides_by_the_scale_rather_than_multiplying_by_its_reciprocal():
    # Values where x / s and x * (1 / s) round to different integers in float32.
    rng = np.random.default_rng(9)
    s = np.float32(0.1)
    x = (rng.integers(-1270, 1270, 200_000) * 0.05).astype(np.float32)
    q = np.rint(x / s)
    x = x[q != np.rint(x * (np.float32(1) / s))]
    assert x.size > 10
    model = node_model("QuantizeLinear", x, {"s": np.array(s), "z": np.array(0, np.int8)})
    got = run_tether(model, {"x": x})[0]
    assert_bitwise(got, np.clip(np.rint(x / s), -128, 127).astype(np.int8))
    assert_bitwise(got, run_ort(model, {"x": x})[0])


def test_quantize_default_output_is_uint8_and_nan_gives_the_lowest_value():
    x = np.array([np.nan, -np.inf, np.inf, 1e30, -3.0, 0.0, 3.0, 1000.0], np.float32)
    model = node_model("QuantizeLinear", x, {"s": np.array(0.5, np.float32)})
    got = run_tether(model, {"x": x})[0]
    assert_bitwise(got, np.array([0, 0, 255, 255, 0, 0, 6, 255], np.uint8))
    assert_bitwise(got, run_ort(model, {"x": x})[0])
    zp = np.array(100, np.int16)
    model = node_model("QuantizeLinear", x, {"s": np.array(0.5, np.float32), "z": zp})
    assert run_tether(model, {"x": x})[0][0] == -32768 == run_ort(model, {"x": x})[0][0]


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("layout", ["tensor", "axis0", "axis_last"])
def test_quantize_large_tensors_split_across_threads_match_onnxruntime(layout, threads):
    rng = np.random.default_rng(10)
    x = (rng.standard_normal((64, 37, 41)) * 4).astype(np.float32)  # 97,088 elements: several chunks
    axis = {"tensor": 1, "axis0": 0, "axis_last": -1}[layout]
    n = None if layout == "tensor" else x.shape[axis]
    params = {"s": scales(rng, n), "z": zero_points(rng, np.uint8, n)}
    model = node_model("QuantizeLinear", x, params, axis=axis)
    got = run_tether(model, {"x": x}, threads)[0]
    assert_bitwise(got, run_ort(model, {"x": x})[0])
    assert_bitwise(got, np_quantize(x, params["s"], params["z"], np.uint8, axis))


# ---- DequantizeLinear -----------------------------------------------------------------------------


def quantized(rng: np.random.Generator, shape: tuple[int, ...], dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    x = rng.integers(info.min, int(info.max) + 1, shape, dtype=np.int64)
    flat = x.reshape(-1)
    flat[:: 5] = info.min
    flat[1:: 5] = info.max
    return x.astype(dtype)


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_dequantize_per_tensor_matches_onnxruntime_and_numpy_bitwise(shape, dtype, threads):
    rng = np.random.default_rng(11)
    x = quantized(rng, shape, dtype)
    for step, zp in [(0.1, zero_points(rng, dtype, None)), (3.3e-5, np.array(np.iinfo(dtype).max, dtype)),
                     (7.77e3, None), (1 / 3, np.array(np.iinfo(dtype).min, dtype))]:
        params = {"s": np.array(step, np.float32), "z": zp}
        model = node_model("DequantizeLinear", x, params)
        got = run_tether(model, {"x": x}, threads)[0]
        assert_bitwise(got, run_ort(model, {"x": x})[0], f"onnxruntime, step {step}")
        assert_bitwise(got, np_dequantize(x, params["s"], zp), f"numpy, step {step}")


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("dtype", QTYPES + [np.int32])
@pytest.mark.parametrize("shape,axis", [((13, 3), 0), ((3, 13), 1), ((2, 13, 5), 1), ((2, 3, 5, 7), -1),
                                         ((16, 3, 3, 3), 0), ((127, 2), -2)])
def test_dequantize_per_axis_matches_onnxruntime_and_numpy_bitwise(shape, axis, dtype, threads):
    rng = np.random.default_rng(12)
    n = shape[axis]
    x = quantized(rng, shape, dtype)
    s = scales(rng, n)
    zp = None if dtype == np.int32 else zero_points(rng, dtype, n)
    for const in (True, False):
        params = {"s": s, "z": zp}
        model = node_model("DequantizeLinear", x, params, const=const, axis=axis)
        feeds = feeds_of(x, params, const)
        got = run_tether(model, feeds, threads)[0]
        assert_bitwise(got, run_ort(model, feeds)[0], f"onnxruntime, const {const}")
        assert_bitwise(got, np_dequantize(x, s, zp, axis), f"numpy, const {const}")


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("shape,axis,block", BLOCKED)
def test_dequantize_blocked_matches_onnxruntime_and_numpy_bitwise(shape, axis, block, dtype, threads):
    rng = np.random.default_rng(13)
    sshape = list(shape)
    sshape[axis] = -(-shape[axis] // block)
    x = quantized(rng, shape, dtype)
    s = scales(rng, int(np.prod(sshape))).reshape(sshape)
    zp = zero_points(rng, dtype, s.size).reshape(sshape)
    for const in (True, False):
        params = {"s": s, "z": zp}
        model = node_model("DequantizeLinear", x, params, const=const, axis=axis, block_size=block)
        feeds = feeds_of(x, params, const)
        got = run_tether(model, feeds, threads)[0]
        assert_bitwise(got, run_ort(model, feeds)[0], f"onnxruntime, const {const}")
        assert_bitwise(got, np_dequantize(x, s, zp, axis, block), f"numpy, const {const}")


@pytest.mark.parametrize("shape", [(13,), (3, 127)])
def test_dequantize_int32_without_zero_point_rounds_x_to_float_first(shape):
    rng = np.random.default_rng(14)
    x = rng.integers(-2**31, 2**31 - 1, shape).astype(np.int32)  # most need rounding to float32
    for zp in (None, np.array(0, np.int32)):
        params = {"s": np.array(0.1, np.float32), "z": zp}
        model = node_model("DequantizeLinear", x, params)
        got = run_tether(model, {"x": x})[0]
        assert_bitwise(got, run_ort(model, {"x": x})[0])
        assert_bitwise(got, x.astype(np.float32) * np.float32(0.1))


@pytest.mark.parametrize("dtype", [np.uint8, np.int16])
@pytest.mark.parametrize("per_axis", [False, True])
def test_dequantize_float16_scale_gives_float16_like_onnxruntime(dtype, per_axis):
    rng = np.random.default_rng(15)
    x = quantized(rng, (3, 13), dtype)
    s = (scales(rng, 3 if per_axis else None, 0.0123)).astype(np.float16)
    zp = zero_points(rng, dtype, 3 if per_axis else None)
    model = node_model("DequantizeLinear", x, {"s": s, "z": zp}, axis=0)
    got = run_tether(model, {"x": x})[0]
    assert_bitwise(got, run_ort(model, {"x": x})[0])
    assert_bitwise(got, np_dequantize(x, s, zp, 0))


@pytest.mark.parametrize("threads", THREADS)
def test_dequantize_large_per_channel_weights_match_onnxruntime(threads):
    rng = np.random.default_rng(16)
    x = quantized(rng, (256, 64, 3, 3), np.int8)  # 147,456 elements
    s, zp = scales(rng, 256), zero_points(rng, np.int8, 256)
    model = node_model("DequantizeLinear", x, {"s": s, "z": zp}, axis=0)
    got = run_tether(model, {"x": x}, threads)[0]
    assert_bitwise(got, run_ort(model, {"x": x})[0])


def test_quantize_then_dequantize_round_trips_within_half_a_step():
    rng = np.random.default_rng(17)
    x = rng.uniform(-1, 1, (4, 13)).astype(np.float32)
    s, zp = np.array(2 / 255, np.float32), np.array(128, np.uint8)
    q = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q")
    dq = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq")
    g = helper.make_graph([q, dq], "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)],
                          [numpy_helper.from_array(s, "s"), numpy_helper.from_array(zp, "z")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10).SerializeToString()
    got = run_tether(model, {"x": x})[0]
    assert_bitwise(got, run_ort(model, {"x": x})[0])
    assert np.abs(got - x).max() <= s / 2 * (1 + 1e-6)


# ---- DynamicQuantizeLinear -----------------------------------------------------------------------


def dynamic_model(shape: tuple[int, ...]) -> bytes:
    x = np.zeros(shape, np.float32)
    return node_model("DynamicQuantizeLinear", x, {}, opset=11, outputs=3, name="dql")


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("shape", [(1,), (3,), (13,), (127,), (3, 13), (2, 3, 5, 7), (64, 37, 41)])
def test_dynamic_quantize_matches_onnxruntime_and_the_spec_formula(shape, threads):
    rng = np.random.default_rng(18)
    model = dynamic_model(shape)
    for lo, hi in [(-1.0, 1.0), (0.5, 3.0), (-7.0, -0.1), (-1e-3, 4e3), (-1e-30, 1e-30)]:
        x = rng.uniform(lo, hi, shape).astype(np.float32)
        y, s, z = run_tether(model, {"x": x}, threads)
        ry, rs, rz = run_ort(model, {"x": x})
        ny, ns, nz = np_dynamic(x)
        assert_bitwise(s, rs, f"scale [{lo}, {hi}]")
        assert_bitwise(s, np.array(ns), "scale vs numpy")
        assert_bitwise(z, rz, "zero point")
        assert_bitwise(z, np.array(nz), "zero point vs numpy")
        assert_bitwise(y, ry, "y")
        assert_bitwise(y, ny, "y vs numpy")


@pytest.mark.parametrize("values", [[0.0, 0.0, 0.0], [0.0], [np.inf, 1.0, -2.0], [1.0, -np.inf], [3e38, -3e38],
                                    [1e-40, -1e-40]],
                         ids=["zeros", "zero", "inf", "-inf", "overflowing_range", "subnormal"])
def test_dynamic_quantize_edge_ranges_match_onnxruntime(values):
    # All zeros: onnxruntime's scale is 1 (the ONNX reference's 1/255); +-inf make the scale inf.
    x = np.array(values, np.float32)
    model = dynamic_model(x.shape)
    for got, want in zip(run_tether(model, {"x": x}), run_ort(model, {"x": x}), strict=True):
        assert_bitwise(got, want)


def test_dynamic_quantize_of_an_empty_tensor_gives_scale_one():
    x = np.zeros((0, 3), np.float32)
    y, s, z = run_tether(dynamic_model(x.shape), {"x": x})
    assert y.shape == (0, 3) and s == 1.0 and z == 0


# ---- bad input -------------------------------------------------------------------------------------

X = np.arange(12, dtype=np.float32).reshape(3, 4)


@pytest.mark.parametrize("op", ["QuantizeLinear", "DequantizeLinear"])
@pytest.mark.parametrize("bad,text", [(0.0, "is 0"), (-0.5, "is -0.5"), (np.nan, "is nan"), (np.inf, "is inf")])
def test_bad_constant_scale_raises_model_error_naming_the_node(op, bad, text):
    x = X if op == "QuantizeLinear" else X.astype(np.uint8)
    scale_name = "y_scale" if op == "QuantizeLinear" else "x_scale"
    with pytest.raises(tt.ModelError, match=f"{op} 'q': {scale_name} {text}; scales must be positive and finite"):
        tt.compile(tt.load(node_model(op, x, {"s": np.array(bad, np.float32)})))
    s = np.array([1.0, 2.0, bad], np.float32)
    with pytest.raises(tt.ModelError, match=rf"{op} 'q': {scale_name}\[2\] {text}"):
        tt.compile(tt.load(node_model(op, x, {"s": s}, axis=0)))


@pytest.mark.parametrize("op", ["QuantizeLinear", "DequantizeLinear"])
def test_bad_scale_fed_at_run_time_raises_argument_error_naming_the_node(op):
    x = X if op == "QuantizeLinear" else X.astype(np.int8)
    s = np.array([0.5, 0.0, 0.25], np.float32)
    sess = tt.compile(tt.load(node_model(op, x, {"s": s}, const=False, axis=0)))
    with pytest.raises(tt.ArgumentError, match=rf"{op} 'q': .*_scale\[1\] is 0; scales must be positive"):
        sess.run({"x": x, "s": s})
    ok = sess.run({"x": x, "s": np.array([0.5, 1.0, 0.25], np.float32)})  # the session still runs
    assert next(iter(ok.values())).shape == x.shape


def test_zero_point_type_differing_from_output_dtype_raises_shape_error():
    with pytest.raises(tt.ShapeError, match="QuantizeLinear 'q': output_dtype is int8 but y_zero_point is uint8"):
        tt.load(node_model("QuantizeLinear", X, {"s": np.array(1, np.float32), "z": np.array(0, np.uint8)},
                           output_dtype=TensorProto.INT8)).infer_shapes()
    x = X.astype(np.int8)
    with pytest.raises(tt.ShapeError, match=r"DequantizeLinear 'q': input 0 \('x'\) is int8 but input 2 \('z'\) is "
                                            r"uint8; DequantizeLinear takes one element type"):
        tt.compile(tt.load(node_model("DequantizeLinear", x, {"s": np.array(1, np.float32), "z": np.array(0, np.uint8)})))


@pytest.mark.parametrize("op", ["QuantizeLinear", "DequantizeLinear"])
def test_per_axis_scale_of_the_wrong_length_raises_shape_error(op):
    x = X if op == "QuantizeLinear" else X.astype(np.uint8)
    with pytest.raises(tt.ShapeError, match=rf"{op} 'q': ._scale has 4 entries, expected 3 \(dim 0 of x, shape \[3, 4\]\)"):
        tt.compile(tt.load(node_model(op, x, {"s": np.ones(4, np.float32)}, axis=0)))
    with pytest.raises(tt.ShapeError, match=f"{op} 'q': axis 2 is out of range for rank 2"):
        tt.compile(tt.load(node_model(op, x, {"s": np.ones(3, np.float32)}, axis=2)))
    with pytest.raises(tt.ShapeError, match=f"{op} 'q': the zero point has shape \\[3\\] and ._scale \\[4\\]"):
        tt.compile(tt.load(node_model(op, x, {"s": np.ones(4, np.float32), "z": np.zeros(3, x.dtype if op[0] == "D" else np.uint8)})))


def test_blocked_scale_of_the_wrong_shape_raises_shape_error():
    with pytest.raises(tt.ShapeError, match=r"y_scale has shape \[3, 3\], expected 2 in dim 1 \(ceil\(4 / block_size 2\)\)"):
        tt.compile(tt.load(node_model("QuantizeLinear", X, {"s": np.ones((3, 3), np.float32)}, axis=1, block_size=2)))
    with pytest.raises(tt.ShapeError, match=r"x_scale has shape \[2, 2\], expected 3 in dim 0 \(as x"):
        tt.compile(tt.load(node_model("DequantizeLinear", X.astype(np.int8), {"s": np.ones((2, 2), np.float32)},
                                      axis=1, block_size=2)))
    with pytest.raises(tt.ShapeError, match="block_size is -1, expected >= 0"):
        tt.compile(tt.load(node_model("QuantizeLinear", X, {"s": np.ones((3, 2), np.float32)}, block_size=-1)))
    # onnxruntime refuses a scalar scale with a block size too.
    with pytest.raises(tt.ShapeError, match=r"y_scale has shape \[\]; blocked quantization \(block_size 2\)"):
        tt.compile(tt.load(node_model("QuantizeLinear", X, {"s": np.array(1, np.float32)}, block_size=2)))


@pytest.mark.parametrize("op", ["QuantizeLinear", "DequantizeLinear"])
def test_scale_of_unknown_length_is_checked_against_x_at_run_time(op):
    x = X if op == "QuantizeLinear" else X.astype(np.uint8)
    g = helper.make_graph([helper.make_node(op, ["x", "s"], ["y"], name="q", axis=0)], "g",
                          [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), [3, 4]),
                           helper.make_tensor_value_info("s", TensorProto.FLOAT, ["c"])], [onnx.ValueInfoProto(name="y")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10).SerializeToString()
    sess = tt.compile(tt.load(model))
    # Planning for the new input shapes re-runs inference, which finds the contradiction.
    with pytest.raises(tt.ShapeError, match=rf"{op} 'q': ._scale has 4 entries, expected 3 \(dim 0 of x"):
        sess.run({"x": x, "s": np.ones(4, np.float32)})
    s = np.array([0.5, 2.0, 4.0], np.float32)
    got = sess.run({"x": x, "s": s})["y"]
    want = np_quantize(x, s, None, np.uint8, 0) if op == "QuantizeLinear" else np_dequantize(x, s, None, 0)
    assert_bitwise(got, want)


def test_int32_dequantize_with_a_nonzero_zero_point_is_refused():
    x = np.arange(4, dtype=np.int32)
    with pytest.raises(tt.ModelError, match="DequantizeLinear 'q': x_zero_point is 1; int32 x is dequantized without"):
        tt.compile(tt.load(node_model("DequantizeLinear", x, {"s": np.array(2, np.float32), "z": np.array(1, np.int32)})))
    params = {"s": np.array(2, np.float32), "z": np.array(3, np.int32)}
    sess = tt.compile(tt.load(node_model("DequantizeLinear", x, params, const=False)))
    with pytest.raises(tt.ArgumentError, match="DequantizeLinear 'q': x_zero_point is 3"):
        sess.run(feeds_of(x, params, False))


def test_int4_and_float8_are_refused_at_compile_naming_the_node():
    z4 = helper.make_tensor("z", TensorProto.INT4, [3], [1, -2, 3])
    g = helper.make_graph([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], name="to_int4", axis=0)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])], [onnx.ValueInfoProto(name="y")],
                          [numpy_helper.from_array(np.ones(3, np.float32), "s"), z4])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    with pytest.raises(tt.UnsupportedError, match="QuantizeLinear 'to_int4': y_zero_point is int4; the cpu engine quantizes to"):
        tt.compile(tt.load(model.SerializeToString()))
    model = node_model("QuantizeLinear", X, {"s": np.array(1, np.float32)}, name="to_u4", output_dtype=TensorProto.UINT4)
    with pytest.raises(tt.UnsupportedError, match=r"QuantizeLinear 'to_u4': y \(output_dtype\) is uint4"):
        tt.compile(tt.load(model))
    g = helper.make_graph([helper.make_node("DequantizeLinear", ["x", "s"], ["y"], name="from_fp8")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT8E4M3FN, [5])],
                          [onnx.ValueInfoProto(name="y")], [numpy_helper.from_array(np.array(1, np.float32), "s")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    with pytest.raises(tt.UnsupportedError, match="DequantizeLinear 'from_fp8': x is float8e4m3fn; the cpu engine dequantizes"):
        tt.compile(tt.load(model.SerializeToString()))


def test_float16_quantize_is_refused_with_the_reason():
    x = X.astype(np.float16)
    with pytest.raises(tt.UnsupportedError, match="QuantizeLinear 'q': x is float16; the cpu engine quantizes float32"):
        tt.compile(tt.load(node_model("QuantizeLinear", x, {"s": np.array(1, np.float16)})))


@pytest.mark.parametrize("n,nan_at", [(3, [1]), (100, [37]), (100, [0, 99]), (40_000, [16, 39_999, 20_001])])
def test_dynamic_quantize_of_nan_raises_argument_error_naming_the_node(n, nan_at):
    # onnxruntime's answer depends on where the NaN falls in its SIMD lanes; tether refuses.
    x = np.linspace(-2, 1, n, dtype=np.float32)
    x[nan_at] = np.nan
    sess = tt.compile(tt.load(dynamic_model(x.shape)), threads=2)
    k = len(nan_at)
    with pytest.raises(tt.ArgumentError, match=f"DynamicQuantizeLinear 'dql': x holds {k} NaN values? of {n}"):
        sess.run({"x": x})


# ---- a QDQ model from onnxruntime's quantizer -----------------------------------------------------


def conv_net(rng: np.random.Generator) -> onnx.ModelProto:
    """Conv(3->8, 3x3) -> Relu -> Conv(8->16, 3x3, stride 2) -> Relu -> GlobalAveragePool ->
    Flatten -> Gemm(16->10), float32 weights."""
    def init(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], name="fc", transB=1),
    ]
    g = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 13, 13])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                          [init("w1", 8, 3, 3, 3), init("b1", 8, scale=0.1), init("w2", 16, 8, 3, 3, scale=0.15),
                           init("b2", 16, scale=0.1), init("w3", 10, 16), init("b3", 10, scale=0.1)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("per_channel", [False, True])
def test_quantize_static_qdq_model_runs_like_onnxruntime(tmp_path, per_channel):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(19)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([{"x": rng.standard_normal((1, 3, 13, 13)).astype(np.float32)} for _ in range(16)])

        def get_next(self):
            return next(self.batches, None)

    src, dst = tmp_path / "f32.onnx", tmp_path / "qdq.onnx"
    onnx.save(conv_net(rng), str(src))
    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    qdq = onnx.load(str(dst))
    ops = {n.op_type for n in qdq.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= ops
    out_dq = next(n for n in qdq.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "y")
    out_step = float(numpy_helper.to_array(next(t for t in qdq.graph.initializer if t.name == out_dq.input[1])))

    fused = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    as_written = ort.InferenceSession(str(dst), opts, providers=["CPUExecutionProvider"])
    for threads in THREADS:
        sess = tt.compile(str(dst), threads=threads)
        for _ in range(8):
            x = rng.standard_normal((1, 3, 13, 13)).astype(np.float32)
            got = sess.run({"x": x})["y"]
            # onnxruntime's int8 kernels round differently from float between Q/DQ: one step.
            assert np.abs(got - fused.run(None, {"x": x})[0]).max() <= out_step * 1.001
            # As written, the Q/DQ pairs see the same floats up to the convolutions' rounding, so
            # the outputs are the same multiples of the output step.
            assert np.abs(got - as_written.run(None, {"x": x})[0]).max() <= out_step * 1e-5
