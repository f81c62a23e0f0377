"""The CPU kernels for TopK, CumSum, Trilu, ScatterND, ScatterElements, GatherND, OneHot,
DepthToSpace, SpaceToDepth, Hardmax, LRN, MeanVarianceNormalization, Resize, Upsample, RNN,
GRU, LSTM, Einsum, ReduceSum / ReduceMean over contiguous runs and 2-D MaxPool: single-node models run by tether and by onnxruntime on random inputs
of awkward sizes, then the ONNX backend node tests for these ops as a second oracle."""

from __future__ import annotations

import importlib
import itertools
import math

import numpy as np
import onnx
import pytest
import tether as tt
from _onnx_oracle import run_ort
from onnx import helper, numpy_helper

RTOL = 1e-5  # relative to the reference's largest magnitude; integer outputs compare exactly


def node_model(op, inputs, feeds, consts=None, outputs=1, opset=18, **attrs) -> bytes:
    """A one-node model. `inputs` names the node's inputs in order ("" when omitted); each is
    a graph input (a key of `feeds`) or an initializer (a key of `consts`)."""
    consts = consts or {}
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                    for n, a in feeds.items()]
    names = [f"y{i}" if not isinstance(outputs, list) else outputs[i] for i in range(outputs if isinstance(outputs, int) else len(outputs))]
    node = helper.make_node(op, inputs, names, name=f"the_{op.lower()}", **attrs)
    graph = helper.make_graph([node], "g", graph_inputs, [onnx.ValueInfoProto(name=n) for n in names if n],
                              [numpy_helper.from_array(np.asarray(a), n) for n, a in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return model.SerializeToString()


def run_tether(model: bytes, feeds) -> list[np.ndarray]:
    sess = tt.compile(tt.load(model), threads=2)
    out = sess.run(feeds)
    return [out[o.name] for o in sess.outputs]


def assert_matches(got: np.ndarray, ref: np.ndarray, what="") -> None:
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    assert got.dtype == ref.dtype, (what, got.dtype, ref.dtype)
    if np.issubdtype(ref.dtype, np.floating):
        scale = max(float(np.abs(ref).max(initial=0.0)), 1e-30)
        err = float(np.abs(got.astype(np.float64) - ref).max(initial=0.0))
        assert err <= RTOL * scale, f"{what}: max error {err:.3g} vs largest magnitude {scale:.3g}"
    else:
        assert np.array_equal(got, ref), what


def check_against_ort(model: bytes, feeds, what="") -> list[np.ndarray]:
    ours, ref = run_tether(model, feeds), run_ort(model, feeds)
    assert len(ours) == len(ref)
    for k, (a, b) in enumerate(zip(ours, ref, strict=True)):
        assert_matches(a, b, f"{what} output {k}")
    return ours


def randn(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# ---- TopK ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("shape,axis", [((1,), 0), ((13,), 0), ((3, 13), 1), ((3, 13), 0), ((2, 127), -1), ((4, 3, 5), 1)])
def test_topk_matches_onnxruntime_with_ties_broken_by_lower_index(shape, axis, dtype):
    rng = np.random.default_rng(1)
    x = rng.integers(-3, 4, shape).astype(dtype)  # few distinct values: many ties
    n = shape[axis]
    for k, largest in itertools.product(sorted({1, min(3, n), n}), (1, 0)):
        model = node_model("TopK", ["x", "k"], {"x": x}, {"k": np.array([k], np.int64)}, outputs=2, axis=axis, largest=largest)
        check_against_ort(model, {"x": x}, f"k={k} largest={largest}")


def test_topk_unsorted_selects_the_same_elements_as_onnxruntime():
    # sorted=0 leaves the order open: compare the selected (index, value) pairs as sets.
    x = np.random.default_rng(2).standard_normal((5, 13)).astype(np.float32)
    model = node_model("TopK", ["x", "k"], {"x": x}, {"k": np.array([4], np.int64)}, outputs=2, sorted=0)
    (v, i), (rv, ri) = run_tether(model, {"x": x}), run_ort(model, {"x": x})
    for row in range(5):
        assert sorted(zip(i[row], v[row], strict=True)) == sorted(zip(ri[row], rv[row], strict=True))


def test_topk_opset1_reads_k_from_the_attribute():
    x = np.random.default_rng(3).standard_normal((3, 13)).astype(np.float32)
    check_against_ort(node_model("TopK", ["x"], {"x": x}, outputs=2, opset=9, k=5), {"x": x})


# ---- CumSum -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("shape", [(1,), (13,), (3, 127), (2, 3, 13)])
def test_cumsum_matches_onnxruntime_for_every_axis_and_flag(shape, dtype):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(shape) * 10).astype(dtype)
    for axis, exclusive, reverse in itertools.product(range(-len(shape), len(shape)), (0, 1), (0, 1)):
        for axis_type in (np.int64, np.int32):
            model = node_model("CumSum", ["x", "axis"], {"x": x}, {"axis": np.array(axis, axis_type)},
                               exclusive=exclusive, reverse=reverse)
            check_against_ort(model, {"x": x}, f"axis={axis} exclusive={exclusive} reverse={reverse}")


# ---- Trilu --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("shape", [(1, 1), (3, 13), (13, 3), (2, 13, 3), (127, 5)])
def test_trilu_matches_onnxruntime_for_upper_lower_and_k(shape, dtype):
    x = (np.random.default_rng(5).standard_normal(shape) * 10).astype(dtype)
    for upper in (0, 1):
        check_against_ort(node_model("Trilu", ["x"], {"x": x}, upper=upper), {"x": x}, f"upper={upper}")
        for k in (-20, -2, 0, 1, 5):
            model = node_model("Trilu", ["x", "k"], {"x": x}, {"k": np.array(k, np.int64)}, upper=upper)
            check_against_ort(model, {"x": x}, f"upper={upper} k={k}")


# ---- ScatterND, ScatterElements, GatherND ----------------------------------------------------------

REDUCTIONS = ["none", "add", "mul", "max", "min"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("data_shape,q,n", [((13,), 1, 5), ((3, 13, 5), 2, 7), ((3, 13, 5), 3, 4), ((127, 3), 1, 13), ((3, 5), 1, 1)])
def test_scatternd_matches_onnxruntime(data_shape, q, n, reduction):
    rng = np.random.default_rng(6)
    data = randn(rng, *data_shape)
    # Distinct index tuples: with duplicates the result of reduction none is not defined.
    flat = rng.choice(int(np.prod(data_shape[:q])), size=n, replace=False)
    idx = np.stack(np.unravel_index(flat, data_shape[:q]), axis=-1).astype(np.int64)
    idx[::2] -= np.array(data_shape[:q])  # negative indices count from the end
    upd = randn(rng, n, *data_shape[q:])
    model = node_model("ScatterND", ["data", "idx", "upd"], {"data": data, "upd": upd}, {"idx": idx}, reduction=reduction)
    check_against_ort(model, {"data": data, "upd": upd})


@pytest.mark.parametrize("reduction", REDUCTIONS[1:])
def test_scatternd_reductions_fold_duplicate_indices_like_onnxruntime(reduction):
    rng = np.random.default_rng(7)
    data = randn(rng, 13, 3)
    idx = np.array([[1], [4], [1], [12], [4], [1]], np.int64)
    upd = randn(rng, 6, 3)
    model = node_model("ScatterND", ["data", "idx", "upd"], {"data": data, "upd": upd}, {"idx": idx}, reduction=reduction)
    check_against_ort(model, {"data": data, "upd": upd})


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("data_shape,upd_shape", [((13,), (5,)), ((3, 13), (2, 13)), ((2, 3, 5), (2, 3, 4))])
def test_scatter_elements_matches_onnxruntime_on_every_axis(data_shape, upd_shape, reduction, dtype):
    rng = np.random.default_rng(8)
    data = (rng.standard_normal(data_shape) * 5).astype(dtype)
    for axis in range(-len(data_shape), len(data_shape)):
        a = axis % len(data_shape)
        shape = list(upd_shape)
        shape[a] = min(shape[a], data_shape[a])
        upd = (rng.standard_normal(shape) * 5).astype(dtype)
        # Distinct targets along the axis for each position, some written as negative indices.
        idx = np.argsort(rng.random((*shape[:a], data_shape[a], *shape[a + 1:])), axis=a)
        idx = np.take(idx, range(shape[a]), axis=a).astype(np.int64)
        idx = np.where(rng.random(idx.shape) < 0.3, idx - data_shape[a], idx)
        model = node_model("ScatterElements", ["data", "idx", "upd"], {"data": data, "upd": upd}, {"idx": idx},
                           axis=axis, reduction=reduction)
        check_against_ort(model, {"data": data, "upd": upd}, f"axis={axis}")


def test_scatter_opset9_is_scatter_elements():
    rng = np.random.default_rng(9)
    data = randn(rng, 3, 13)
    idx = np.argsort(rng.random((3, 13)), axis=1)[:, :4].astype(np.int64)
    upd = randn(rng, 3, 4)
    model = node_model("Scatter", ["data", "idx", "upd"], {"data": data, "upd": upd}, {"idx": idx}, opset=9, axis=1)
    check_against_ort(model, {"data": data, "upd": upd})


@pytest.mark.parametrize("data_shape,idx_shape,batch_dims", [
    ((13,), (5, 1), 0), ((3, 13), (7, 2), 0), ((3, 13, 5), (2, 4, 1), 0), ((3, 13, 5), (3, 2, 2), 1),
    ((2, 3, 13, 5), (2, 3, 4, 1), 2), ((2, 3, 13), (2, 3, 1), 2), ((127, 3), (13, 1), 0),
])
def test_gathernd_matches_onnxruntime_with_batch_dims(data_shape, idx_shape, batch_dims):
    rng = np.random.default_rng(10)
    data = randn(rng, *data_shape)
    q = idx_shape[-1]
    dims = np.array(data_shape[batch_dims:batch_dims + q])
    idx = (rng.integers(0, 1 << 30, idx_shape) % dims - rng.integers(0, 2, idx_shape) * dims).astype(np.int64)
    model = node_model("GatherND", ["data", "idx"], {"data": data}, {"idx": idx}, batch_dims=batch_dims)
    check_against_ort(model, {"data": data})


def test_index_out_of_range_is_an_argument_error_naming_the_node():
    data = np.zeros((3, 4), np.float32)
    model = node_model("GatherND", ["data", "idx"], {"data": data}, {"idx": np.array([[3, 0]], np.int64)})
    with pytest.raises(tt.ArgumentError, match=r"GatherND 'the_gathernd': index 3 is out of range for axis 0 of size 3"):
        run_tether(model, {"data": data})


# ---- OneHot -------------------------------------------------------------------------------------

# (indices, values, depth) types: the combinations onnxruntime implements.
ONEHOT_TYPES = [(np.int64, np.float32, np.int64), (np.int64, np.int64, np.int64), (np.float32, np.int64, np.int64),
                (np.int32, np.float32, np.int32), (np.float32, np.float32, np.float32)]


@pytest.mark.parametrize("idx_type,value_type,depth_type", ONEHOT_TYPES)
@pytest.mark.parametrize("shape", [(13,), (3, 5)])
def test_onehot_matches_onnxruntime_for_axes_depths_and_negative_indices(shape, idx_type, value_type, depth_type):
    rng = np.random.default_rng(11)
    values = np.array([-2, 7], value_type)
    for depth in (1, 3, 13):
        idx = rng.integers(-depth - 1, depth + 1, shape).astype(idx_type)  # out of range gives all off
        for axis in range(-len(shape) - 1, len(shape) + 1):
            model = node_model("OneHot", ["idx", "depth", "values"], {"idx": idx},
                               {"depth": np.array(depth, depth_type), "values": values}, axis=axis)
            check_against_ort(model, {"idx": idx}, f"depth={depth} axis={axis}")


# ---- DepthToSpace, SpaceToDepth ---------------------------------------------------------------------

@pytest.mark.parametrize("blocksize", [1, 2, 3])
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_and_back_match_onnxruntime(blocksize, mode):
    rng = np.random.default_rng(12)
    x = randn(rng, 2, 3 * blocksize * blocksize, 5, 3)
    check_against_ort(node_model("DepthToSpace", ["x"], {"x": x}, blocksize=blocksize, mode=mode), {"x": x})
    z = randn(rng, 2, 3, 5 * blocksize, 7 * blocksize)
    check_against_ort(node_model("SpaceToDepth", ["x"], {"x": z}, blocksize=blocksize), {"x": z})


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_to_depth_opset28_mode_inverts_depth_to_space(mode):
    # onnxruntime has no SpaceToDepth-28 yet: numpy's reshape and transpose are the oracle.
    x = randn(np.random.default_rng(17), 2, 3, 10, 6)
    b = 2
    v = x.reshape(2, 3, 5, b, 3, b)
    ref = v.transpose(0, 3, 5, 1, 2, 4) if mode == "DCR" else v.transpose(0, 1, 3, 5, 2, 4)
    got = run_tether(node_model("SpaceToDepth", ["x"], {"x": x}, opset=28, blocksize=b, mode=mode), {"x": x})[0]
    assert np.array_equal(got, ref.reshape(2, 12, 5, 3))


# ---- Hardmax, LRN, MeanVarianceNormalization -------------------------------------------------------

@pytest.mark.parametrize("opset", [11, 13])
def test_hardmax_matches_onnxruntime_on_every_axis_with_ties(opset):
    x = np.random.default_rng(13).integers(0, 3, (3, 4, 13)).astype(np.float32)
    for axis in range(-3, 3):
        check_against_ort(node_model("Hardmax", ["x"], {"x": x}, opset=opset, axis=axis), {"x": x}, f"axis={axis}")
    check_against_ort(node_model("Hardmax", ["x"], {"x": x}, opset=opset), {"x": x}, "default axis")


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn_matches_onnxruntime(size):
    rng = np.random.default_rng(14)
    for shape in [(1, 3, 13, 1), (2, 13, 3, 3)]:
        x = randn(rng, *shape)
        check_against_ort(node_model("LRN", ["x"], {"x": x}, size=size), {"x": x})
        check_against_ort(node_model("LRN", ["x"], {"x": x}, size=size, alpha=0.3, beta=0.5, bias=2.0), {"x": x})


@pytest.mark.parametrize("size", [2, 4])
def test_lrn_with_an_even_window_matches_numpy(size):
    # onnxruntime takes odd sizes only (and onnx.reference's LRN loops over the batch, not the
    # channels), so numpy computes the spec's formula: the window runs from
    # c - floor((size-1)/2) to c + ceil((size-1)/2), clipped to the channels.
    x = randn(np.random.default_rng(16), 2, 13, 3, 3)
    alpha, beta, bias = 0.3, 0.5, 2.0
    before, after = (size - 1) // 2, size // 2
    sq = np.stack([(x[:, max(0, c - before):c + after + 1].astype(np.float64) ** 2).sum(axis=1) for c in range(13)], axis=1)
    ref = (x / (bias + alpha / size * sq) ** beta).astype(np.float32)
    model = node_model("LRN", ["x"], {"x": x}, size=size, alpha=alpha, beta=beta, bias=bias)
    assert_matches(run_tether(model, {"x": x})[0], ref)


def test_lrn_keeps_an_infinity_to_the_channels_whose_window_holds_it():
    # onnxruntime slides a running sum of squares along the channels, so inf - inf makes every
    # channel after an infinite one NaN; the definition sums each window alone (differential
    # fuzzer, seed 205143). Channel 0 is inf at one pixel: with size 3 only channels 0 (inf / inf)
    # and 1 (x / inf) read it.
    x = randn(np.random.default_rng(17), 1, 4, 2, 2)
    x[0, 0, 1, 1] = np.inf
    alpha, beta, bias, size = 1e-4, 0.75, 1.0, 3
    sq = np.stack([(x[:, max(0, c - 1):c + 2].astype(np.float64) ** 2).sum(axis=1) for c in range(4)], axis=1)
    ref = (x / (bias + alpha / size * sq) ** beta).astype(np.float32)
    got = run_tether(node_model("LRN", ["x"], {"x": x}, size=size), {"x": x})[0]
    assert np.isnan(ref[0, 0, 1, 1]) and ref[0, 1, 1, 1] == 0 and np.isfinite(ref[0, 1:]).all()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)  # NaN where ref is NaN, nowhere else


def test_celu_with_alpha_zero_is_a_shape_error_naming_the_node():
    # Celu divides by alpha; onnxruntime and onnx.reference follow the formula into NaN for
    # x >= 0 (differential fuzzer, seed 202854).
    x = randn(np.random.default_rng(18), 2, 5)
    with pytest.raises(tt.ShapeError, match=r"Celu '\w+': alpha is 0.000000; Celu divides by it, so it must be finite "
                                            r"and nonzero"):
        run_tether(node_model("Celu", ["x"], {"x": x}, alpha=0.0), {"x": x})
    check_against_ort(node_model("Celu", ["x"], {"x": x}, alpha=0.5), {"x": x})


@pytest.mark.parametrize("axes", [None, [1], [2, 3], [0, 1, 2, 3], [-1]])
def test_mean_variance_normalization_matches_onnxruntime(axes):
    x = randn(np.random.default_rng(15), 2, 3, 13, 5) * 3 + 1
    attrs = {} if axes is None else {"axes": axes}
    check_against_ort(node_model("MeanVarianceNormalization", ["x"], {"x": x}, opset=13, **attrs), {"x": x})


# ---- Resize, Upsample -----------------------------------------------------------------------------

COORDS = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize"]
RESIZE_SCALES = [[1, 1, 2.0, 3.0], [1, 1, 0.5, 0.6], [1, 1, 1.7, 0.45], [1, 1, 1.0, 2.5]]
RESIZE_SIZES = [[2, 3, 26, 3], [2, 3, 1, 1], [2, 3, 5, 14]]
ROI = np.array([0, 0, 0.1, -0.2, 1, 1, 0.8, 1.3], np.float32)  # partly outside: extrapolated


def resize_model(x, mode, coord, scales=None, sizes=None, opset=19, **attrs) -> bytes:
    consts = {"roi": ROI} if coord == "tf_crop_and_resize" else {}
    if scales is not None:
        consts["scales"] = np.array(scales, np.float32)
    if sizes is not None:
        consts["sizes"] = np.array(sizes, np.int64)
    inputs = ["x", "roi" if "roi" in consts else "", "scales" if scales is not None else "", "sizes" if sizes is not None else ""]
    return node_model("Resize", inputs, {"x": x}, consts, opset=opset, mode=mode, coordinate_transformation_mode=coord, **attrs)


def mode_variants(mode):
    if mode == "nearest":
        return [{"nearest_mode": m} for m in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")]
    if mode == "cubic":
        return [{}, {"cubic_coeff_a": -0.5, "exclude_outside": 1}]
    return [{}]


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_matches_onnxruntime_for_every_mode_and_coordinate_transform(mode, coord):
    x = randn(np.random.default_rng(20), 2, 3, 13, 7)
    for attrs in mode_variants(mode):
        if coord == "tf_crop_and_resize":
            attrs = {**attrs, "extrapolation_value": -7.0}
        for scales in RESIZE_SCALES:
            check_against_ort(resize_model(x, mode, coord, scales=scales, **attrs), {"x": x}, f"{attrs} scales={scales}")
        for sizes in RESIZE_SIZES:
            check_against_ort(resize_model(x, mode, coord, sizes=sizes, **attrs), {"x": x}, f"{attrs} sizes={sizes}")


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_axes_and_keep_aspect_ratio_match_onnxruntime(mode):
    x = randn(np.random.default_rng(21), 2, 3, 13, 7)
    check_against_ort(node_model("Resize", ["x", "", "s"], {"x": x}, {"s": np.array([2.0, 0.5], np.float32)},
                                 mode=mode, axes=[2, 3]), {"x": x}, "scales on axes 2, 3")
    check_against_ort(node_model("Resize", ["x", "", "s"], {"x": x}, {"s": np.array([1.5, 3.0], np.float32)},
                                 mode=mode, axes=[3, -2]), {"x": x}, "scales on axes 3, -2")
    for policy in ("stretch", "not_larger", "not_smaller"):
        model = node_model("Resize", ["x", "", "", "sz"], {"x": x}, {"sz": np.array([20, 20], np.int64)},
                           mode=mode, axes=[2, 3], keep_aspect_ratio_policy=policy)
        check_against_ort(model, {"x": x}, policy)


def test_resize_bilinear_on_nhwc_and_2d_inputs_matches_onnxruntime():
    rng = np.random.default_rng(22)
    for x, scales in [(randn(rng, 2, 13, 7, 3), [1, 2.0, 0.6, 1]), (randn(rng, 13, 7), [0.5, 2.5]), (randn(rng, 1, 1), [3.0, 13.0])]:
        for mode in ("linear", "cubic", "nearest"):
            if mode == "cubic" and x.ndim == 4:
                continue  # onnxruntime has no NHWC bicubic
            check_against_ort(resize_model(x, mode, "half_pixel", scales=scales), {"x": x}, f"{mode} {x.shape}")


def test_resize_output_sizes_take_the_float_product_like_onnxruntime():
    # floor(3 * 1.6666666f) is 5 in float (onnxruntime, onnx's shape inference, torch's
    # 5/3 upsampling) but 4 in double; under not_larger, 51 * (91 / 78) is 59.499996f.
    x = randn(np.random.default_rng(26), 1, 2, 3, 5)
    check_against_ort(resize_model(x, "linear", "half_pixel", scales=[1, 1, 5 / 3, 7 / 5]), {"x": x}, "scales")
    y = randn(np.random.default_rng(27), 1, 1, 78, 51)
    model = node_model("Resize", ["x", "", "", "sz"], {"x": y}, {"sz": np.array([91, 200], np.int64)},
                       mode="nearest", axes=[2, 3], keep_aspect_ratio_policy="not_larger")
    assert check_against_ort(model, {"x": y})[0].shape == (1, 1, 91, 59)


def test_resize_of_an_empty_batch_matches_onnxruntime():
    x = np.zeros((2, 0, 4, 5), np.float32)
    for mode in ("nearest", "linear", "cubic"):
        check_against_ort(resize_model(x, mode, "half_pixel", scales=[1, 1, 2.0, 0.6]), {"x": x}, mode)


def test_resize_nearest_rounds_coordinates_within_1e_6_of_a_half_as_ties_like_onnxruntime():
    # 20 -> 6 with half_pixel puts output 4 at (4 + 0.5) * (20 / 6) - 0.5, which float misses
    # 14.5 by an ulp: still a tie for round_prefer_ceil and round_prefer_floor.
    x = np.linspace(0, 1, 20, dtype=np.float32).reshape(1, 1, 1, 20)
    for nearest_mode in ("round_prefer_ceil", "round_prefer_floor"):
        model = resize_model(x, "nearest", "half_pixel", sizes=[1, 1, 1, 6], nearest_mode=nearest_mode)
        check_against_ort(model, {"x": x}, nearest_mode)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_and_resize10_match_onnxruntime(mode):
    x = randn(np.random.default_rng(23), 2, 3, 13, 7)
    for scales in ([1, 1, 2.0, 3.0], [1, 1, 1.5, 2.5]):
        s = np.array(scales, np.float32)
        check_against_ort(node_model("Upsample", ["x", "s"], {"x": x}, {"s": s}, opset=9, mode=mode), {"x": x}, "Upsample-9")
        check_against_ort(node_model("Upsample", ["x"], {"x": x}, opset=7, mode=mode, scales=scales), {"x": x}, "Upsample-7")
    for scales in ([1, 1, 0.5, 2.5], [1, 1, 0.6, 1.0]):
        model = node_model("Resize", ["x", "s"], {"x": x}, {"s": np.array(scales, np.float32)}, opset=10, mode=mode)
        check_against_ort(model, {"x": x}, f"Resize-10 {scales}")


def test_resize11_tf_half_pixel_for_nn_matches_onnxruntime():
    x = randn(np.random.default_rng(24), 2, 3, 13, 7)
    for scales in RESIZE_SCALES:
        model = node_model("Resize", ["x", "roi", "s"], {"x": x}, {"roi": np.zeros(0, np.float32), "s": np.array(scales, np.float32)},
                           opset=11, mode="nearest", coordinate_transformation_mode="tf_half_pixel_for_nn")
        check_against_ort(model, {"x": x}, str(scales))


@pytest.mark.parametrize("mode,coord,shape,scales", [
    ("linear", "half_pixel", (13,), [2.5]),
    ("linear", "asymmetric", (2, 3, 13, 7), [2.0, 0.5, 1.5, 2.0]),
    ("linear", "pytorch_half_pixel", (3, 2, 5, 13, 7), [1.0, 2.0, 0.6, 1.4, 2.0]),
    ("cubic", "half_pixel", (13,), [1.7]),
    ("cubic", "asymmetric", (2, 13, 7), [1.5, 2.0, 0.5]),
    ("cubic", "half_pixel", (2, 3, 5, 13, 7), [1.0, 1.0, 2.0, 0.6, 1.4]),
])
def test_resize_on_ranks_onnxruntime_refuses_matches_the_onnx_reference(mode, coord, shape, scales):
    # onnxruntime interpolates only 2-D, 3-D (linear), 4-D and 5-D (linear) inputs with the
    # batch and channels kept; the ONNX reference interpolates any rank.
    from onnx.reference import ReferenceEvaluator

    x = randn(np.random.default_rng(25), *shape)
    model = resize_model(x, mode, coord, scales=scales)
    ref = ReferenceEvaluator(onnx.load_from_string(model)).run(None, {"x": x})[0]
    assert_matches(run_tether(model, {"x": x})[0], ref)


# ---- RNN, GRU, LSTM --------------------------------------------------------------------------------

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def recurrent_model(op, rng, seq, batch, size, hidden, direction, layout, *, bias=True, initial=True, lens=None,
                    peepholes=False, outputs=("Y", "Y_h", "Y_c"), **attrs):
    """A recurrent node with random weights, as (model, feeds) in the given layout and as the
    same (model, feeds) in layout 0, which onnxruntime runs (it has no layout 1)."""
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    x = randn(rng, seq, batch, size)
    consts = {"W": randn(rng, dirs, g * hidden, size) * 0.5, "R": randn(rng, dirs, g * hidden, hidden) * 0.5}
    names = ["x", "W", "R", "", "", "", "", ""]
    if bias:
        consts["B"] = randn(rng, dirs, 2 * g * hidden) * 0.5
        names[3] = "B"
    if lens is not None:
        consts["lens"] = np.array(lens, np.int32)
        names[4] = "lens"
    states = ["h0", "c0"] if op == "LSTM" else ["h0"]
    if initial:
        for k, name in enumerate(states):
            consts[name] = randn(rng, dirs, batch, hidden)
            names[5 + k] = name
    if peepholes:
        consts["P"] = randn(rng, dirs, 3 * hidden) * 0.5
        names[7] = "P"
    while names[-1] == "":
        names.pop()
    outs = [o if o in outputs else "" for o in ("Y", "Y_h", "Y_c")[:3 if op == "LSTM" else 2]]
    while outs[-1] == "":
        outs.pop()

    def build(lay):
        c = dict(consts)
        if lay:  # batch first: X [batch, seq, size], states [batch, dirs, hidden]
            c.update({n: consts[n].transpose(1, 0, 2) for n in states if n in consts})
        feeds = {"x": x.transpose(1, 0, 2).copy() if lay else x}
        return node_model(op, names, feeds, c, outputs=outs, opset=14, hidden_size=hidden, direction=direction,
                          layout=lay, **attrs), feeds

    return build(layout), build(0)


def check_recurrent(op, rng, *args, **kwargs):
    (model, feeds), (model0, feeds0) = recurrent_model(op, rng, *args, **kwargs)
    layout = args[-1]
    expected = run_ort(model0, feeds0)
    if layout:  # Y [seq, dirs, batch, h] -> [batch, seq, dirs, h]; states [dirs, batch, h] -> [batch, dirs, h]
        expected = [e.transpose(2, 0, 1, 3) if e.ndim == 4 else e.transpose(1, 0, 2) for e in expected]
    got = run_tether(model, feeds)
    assert len(got) == len(expected)
    for k, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert_matches(a, np.ascontiguousarray(b), f"{op} {args} {kwargs} output {k}")


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_recurrent_ops_match_onnxruntime(op, direction, layout):
    rng = np.random.default_rng(30)
    for seq, batch, size, hidden in [(1, 1, 5, 4), (3, 3, 5, 13), (13, 2, 3, 4)]:
        check_recurrent(op, rng, seq, batch, size, hidden, direction, layout)
    # No bias, no initial state; sequence lengths shorter than the input.
    check_recurrent(op, rng, 13, 3, 5, 4, direction, layout, bias=False, initial=False, lens=[13, 1, 7])
    extra = {"LSTM": {"peepholes": True}, "GRU": {"linear_before_reset": 1}, "RNN": {}}[op]
    check_recurrent(op, rng, 7, 3, 5, 4, direction, layout, lens=[2, 7, 5], clip=0.7, **extra)


@pytest.mark.parametrize("op,activations,alpha,beta", [
    ("RNN", ["Relu"], [], []),
    ("RNN", ["LeakyRelu", "ThresholdedRelu"], [0.3, 0.2], []),
    ("RNN", ["ScaledTanh"], [1.5], [0.7]),
    ("GRU", ["HardSigmoid", "Softsign"], [0.3], [0.6]),
    ("GRU", ["Sigmoid", "Elu", "Affine", "Softplus"], [0.9, 0.5], [0.2]),
    ("LSTM", ["HardSigmoid", "Tanh", "Softsign"], [0.25], [0.45]),
    ("LSTM", ["Sigmoid", "Affine", "Elu", "Sigmoid", "Relu", "ScaledTanh"], [0.8, 1.2, 0.6], [0.1, 0.9]),
])
def test_recurrent_activations_with_alphas_and_betas_match_onnxruntime(op, activations, alpha, beta):
    direction = "bidirectional" if len(activations) == 2 * {"RNN": 1, "GRU": 2, "LSTM": 3}[op] else "forward"
    attrs = {"activations": activations}
    if alpha:
        attrs["activation_alpha"] = alpha
    if beta:
        attrs["activation_beta"] = beta
    check_recurrent(op, np.random.default_rng(31), 5, 3, 4, 6, direction, 0, **attrs)


@pytest.mark.parametrize("outputs", [("Y",), ("Y_h",), ("Y_c",), ("Y", "Y_c")])
def test_lstm_input_forget_and_omitted_outputs_match_onnxruntime(outputs):
    check_recurrent("LSTM", np.random.default_rng(32), 6, 3, 4, 5, "bidirectional", 0, peepholes=True, input_forget=1,
                    outputs=outputs)


# ---- Einsum --------------------------------------------------------------------------------------

EINSUMS = [
    ("ij,jk->ik", [(3, 13), (13, 5)]),
    ("bij,bjk->bik", [(2, 3, 13), (2, 13, 1)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 7, 5), (2, 3, 13, 5)]),
    ("bhqk,bhkd->bhqd", [(2, 3, 7, 13), (2, 3, 13, 5)]),
    ("bid,bjd->bij", [(3, 7, 13), (3, 5, 13)]),
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (1, 3, 5, 6)]),
    ("...ij,...jk->...ik", [(1, 3, 4, 5), (2, 1, 5, 6)]),
    ("...ij,...jk", [(2, 4, 5), (2, 5, 3)]),
    ("a...b,b...c->a...c", [(2, 3, 4, 5), (5, 3, 4, 6)]),
    ("...i,...i->...", [(3, 13), (3, 13)]),
    ("ij->ji", [(3, 13)]),
    ("ba", [(3, 13)]),
    ("ii->i", [(5, 5)]),
    ("ii", [(13, 13)]),
    ("bii->bi", [(2, 5, 5)]),
    ("ij->", [(3, 13)]),
    ("ij->j", [(3, 13)]),
    ("ij,ij->ij", [(3, 13), (3, 13)]),
    ("ij,ij->", [(3, 13), (3, 13)]),
    ("i,j->ij", [(3,), (13,)]),
    ("ij,j->i", [(3, 13), (13,)]),
    ("i,i", [(127,), (127,)]),
    ("ij,jk", [(1, 13), (13, 1)]),
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 6)]),
    ("bn,anm,bm->ba", [(3, 4), (2, 4, 5), (3, 5)]),
    ("i j , j k -> i k", [(3, 4), (4, 5)]),
]


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("equation,shapes", EINSUMS, ids=[e for e, _ in EINSUMS])
def test_einsum_matches_onnxruntime(equation, shapes, dtype):
    rng = np.random.default_rng(40)
    feeds = {f"x{i}": (rng.standard_normal(s) * 4).astype(dtype) for i, s in enumerate(shapes)}
    check_against_ort(node_model("Einsum", list(feeds), feeds, equation=equation), feeds)


@pytest.mark.parametrize("equation,shapes", [
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (3, 5, 6)]),
    ("...ij,...jk", [(2, 4, 5), (5, 3)]),
    ("...i,i->...", [(2, 3, 13), (13,)]),
])
def test_einsum_broadcasts_ellipses_of_different_ranks_like_numpy(equation, shapes):
    # onnxruntime wants every '...' to stand for the same number of dims; numpy right-aligns them.
    rng = np.random.default_rng(41)
    feeds = {f"x{i}": randn(rng, *s) for i, s in enumerate(shapes)}
    got = run_tether(node_model("Einsum", list(feeds), feeds, equation=equation), feeds)[0]
    ref = np.einsum(equation, *[v.astype(np.float64) for v in feeds.values()]).astype(np.float32)
    assert_matches(got, ref)


@pytest.mark.parametrize("shapes", [[(1, 2, 3), (0, 3, 4)], [(0, 2, 3), (1, 3, 4)], [(1, 2, 3), (3, 3, 4)]])
def test_einsum_broadcasts_a_label_of_size_one_against_any_size_like_numpy(shapes):
    # 1 against 0 once kept size 1 and read past an empty operand (heap overflow, found by the
    # engine fuzzer). The shapes reach the kernel unknown to inference, as a fuzzed model's do.
    rng = np.random.default_rng(42)
    feeds = {f"x{i}": randn(rng, *s) for i, s in enumerate(shapes)}
    blob = helper.make_model(helper.make_graph(
        [helper.make_node("Einsum", ["x0", "x1"], ["y"], equation="bij,bjk->bik")], "g",
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in feeds],
        [helper.make_empty_tensor_value_info("y")]), opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()
    got = tt.compile(blob).run(feeds)["y"]
    ref = np.einsum("bij,bjk->bik", *[v.astype(np.float64) for v in feeds.values()]).astype(np.float32)
    assert got.shape == ref.shape
    assert_matches(got, ref)


def test_einsum_label_sizes_that_disagree_are_a_shape_error_naming_the_label():
    model = node_model("Einsum", ["a", "b"], {"a": np.zeros((2, 3), np.float32), "b": np.zeros((4, 5), np.float32)},
                       equation="ij,jk->ik")
    with pytest.raises(tt.ShapeError, match=r"Einsum 'the_einsum': label 'j' sizes differ: 3 vs 4"):
        run_tether(model, {"a": np.zeros((2, 3), np.float32), "b": np.zeros((4, 5), np.float32)})


# ---- unsupported forms are refused at compile time, by name ----------------------------------------

@pytest.mark.parametrize("op,inputs,feeds,consts,attrs,reason", [
    ("Resize", ["x", "", "s"], {"x": np.zeros((1, 1, 8, 8), np.float32)}, {"s": np.array([1, 1, 0.5, 0.5], np.float32)},
     {"mode": "linear", "antialias": 1}, "antialias=1 is not supported"),
    ("Einsum", ["a"], {"a": np.zeros((2, 2), np.uint8)}, {}, {"equation": "ii->i"}, "input 0 is uint8"),
    ("ScatterND", ["d", "i", "u"], {"d": np.zeros(3, bool), "u": np.zeros(1, bool)}, {"i": np.zeros((1, 1), np.int64)},
     {"reduction": "add"}, "reduction 'add' on bool data"),
    ("LSTM", ["x", "w", "r"], {"x": np.zeros((2, 1, 3), np.float32)},
     {"w": np.zeros((1, 8, 3), np.float32), "r": np.zeros((1, 8, 2), np.float32)},
     {"hidden_size": 2, "activations": ["Sigmoid", "Gelu", "Tanh"]}, "activation 'Gelu' is not supported"),
])
def test_unsupported_forms_are_listed_at_compile_time(op, inputs, feeds, consts, attrs, reason):
    model = node_model(op, inputs, feeds, consts, **attrs)
    with pytest.raises(tt.UnsupportedError, match=rf"{op} 'the_{op.lower()}': {reason}"):
        tt.compile(tt.load(model))


# ---- the ONNX backend node tests -------------------------------------------------------------------

# The case modules (onnx.backend.test.case.node.<module>) and the op each tests.
NODE_TEST_MODULES = {
    "topk": "TopK",
    "cumsum": "CumSum",
    "trilu": "Trilu",
    "gathernd": "GatherND",
    "scatternd": "ScatterND",
    "scatterelements": "ScatterElements",
    "scatter": "Scatter",
    "onehot": "OneHot",
    "depthtospace": "DepthToSpace",
    "spacetodepth": "SpaceToDepth",
    "hardmax": "Hardmax",
    "lrn": "LRN",
    "meanvariancenormalization": "MeanVarianceNormalization",
    "resize": "Resize",
    "upsample": "Upsample",
    "rnn": "RNN",
    "gru": "GRU",
    "lstm": "LSTM",
    "einsum": "Einsum",
}
# Node tests of forms the kernels refuse, with the reason the compile error must give.
NODE_TESTS_REFUSED = {
    "test_resize_downsample_scales_linear_antialias": "antialias=1 is not supported",
    "test_resize_downsample_sizes_linear_antialias": "antialias=1 is not supported",
    "test_resize_downsample_scales_cubic_antialias": "antialias=1 is not supported",
    "test_resize_downsample_sizes_cubic_antialias": "antialias=1 is not supported",
}
# Node tests whose expected output disagrees with onnxruntime, the peer tether follows: with
# align_corners and given scales, the ONNX reference divides by (input * scale - 1), the
# unrounded output length, where onnxruntime divides by (output length - 1). Here tether must
# match onnxruntime, and the two oracles must indeed differ.
NODE_TESTS_FOLLOWING_ORT = {
    "test_resize_downsample_scales_cubic_align_corners",
    "test_resize_downsample_scales_linear_align_corners",
}


def _node_test_cases():
    # Importing a case module runs its exports, which register their cases (inputs and
    # reference outputs computed by numpy) in the package's list; collect_testcases() would
    # import every op's module, which takes seconds.
    from onnx.backend.test.case import node

    for m in NODE_TEST_MODULES:
        importlib.import_module(f"onnx.backend.test.case.node.{m}")
    ops = set(NODE_TEST_MODULES.values())
    return sorted((c for c in node._NodeTestCases if len(c.model.graph.node) == 1 and c.model.graph.node[0].op_type in ops),
                  key=lambda c: c.name)


NODE_CASES = _node_test_cases()


def _array(v):
    return numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else np.asarray(v)


# Inputs that set output shapes: the node tests feed them, tether's engine plans every shape
# from the input shapes, so they become initializers holding the test's values.
SHAPE_INPUTS = {
    "TopK": (1,),
    "OneHot": (1, 2),
    "Resize": (1, 2, 3),
    "Upsample": (1,),
}


@pytest.mark.parametrize("case", NODE_CASES, ids=[c.name for c in NODE_CASES])
def test_onnx_backend_node_test(case):
    proto = onnx.ModelProto()
    proto.CopyFrom(case.model)
    (inputs, outputs), = case.data_sets
    init = {t.name for t in proto.graph.initializer}
    names = [i.name for i in proto.graph.input if i.name not in init]
    feeds = {n: _array(v) for n, v in zip(names, inputs, strict=True)}
    node = proto.graph.node[0]
    for i in SHAPE_INPUTS.get(node.op_type, ()):
        if i < len(node.input) and node.input[i] in feeds:
            name = node.input[i]
            proto.graph.initializer.append(numpy_helper.from_array(feeds.pop(name), name))
            kept = [v for v in proto.graph.input if v.name != name]
            del proto.graph.input[:]
            proto.graph.input.extend(kept)
    model = proto.SerializeToString()
    if case.name in NODE_TESTS_REFUSED:
        with pytest.raises(tt.UnsupportedError, match=NODE_TESTS_REFUSED[case.name]):
            tt.compile(tt.load(model))
        return
    expected = [_array(v) for v in outputs]
    if case.name in NODE_TESTS_FOLLOWING_ORT:
        ort_out = run_ort(model, feeds)
        assert any(not np.allclose(a, b) for a, b in zip(ort_out, expected, strict=True))
        expected = ort_out
    model, expected = _bfloat16_outputs_as_float(model, expected)
    got = run_tether(model, feeds)
    for k, (a, ref) in enumerate(zip(got, expected, strict=True)):
        assert_matches(a, ref, f"{case.name} output {k}")


def _bfloat16_outputs_as_float(model: bytes, expected):
    """numpy has no bfloat16: such outputs get a Cast to float32 (exact), as do their expected values."""
    proto = onnx.load_from_string(model)
    for k, out in enumerate(proto.graph.output):
        if out.type.tensor_type.elem_type != onnx.TensorProto.BFLOAT16:
            continue
        inner = out.name + "_bfloat16"
        for n in proto.graph.node:
            n.output[:] = [inner if o == out.name else o for o in n.output]
        proto.graph.node.append(helper.make_node("Cast", [inner], [out.name], to=onnx.TensorProto.FLOAT))
        out.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
        expected[k] = expected[k].astype(np.float32)
    return proto.SerializeToString(), expected


def test_node_tests_cover_every_op():
    assert {c.model.graph.node[0].op_type for c in NODE_CASES} == set(NODE_TEST_MODULES.values())
    assert set(NODE_TESTS_REFUSED) <= {c.name for c in NODE_CASES}


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean"])
@pytest.mark.parametrize("shape,axes,keepdims", [
    ((1, 1280, 7, 7), [2, 3], 1),     # global average pooling: one run of 49 per output
    ((3, 13, 127), [-1], 0),
    ((2, 1, 5, 1, 3), [2, 3, 4], 1),  # a size-1 dim among the reduced ones
    ((2, 5, 1, 3), [1], 1),           # only size-1 dims follow: still one run per output
    ((13,), [0], 0),
    ((3, 5, 7), [0, 1, 2], 0),
    ((3, 5, 7), [1], 1),              # not a trailing run: the general path
    ((4, 3, 1), [0, 2], 0),
])
def test_float_sum_and_mean_match_numpy_in_double(op, shape, axes, keepdims):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(shape) + 3.0).astype(np.float32)  # an offset makes rounding show
    model = node_model(op, ["x", "axes"], {"x": x}, {"axes": np.array(axes, np.int64)}, keepdims=keepdims)
    ref = x.astype(np.float64).sum(axis=tuple(axes), keepdims=bool(keepdims))
    if op == "ReduceMean":
        ref /= np.prod([shape[a] for a in axes])
    got = run_tether(model, {"x": x})[0]
    assert_matches(got, ref.astype(np.float32), op)
    assert float(np.abs(got - ref).max()) <= 1e-6 * max(1.0, float(np.abs(ref).max()))


def max_pool_reference(x, kernel, strides, pads, out_hw):
    """Each window's largest value, NaN ignored (-inf for a window with no number), in numpy."""
    y = np.empty((*x.shape[:2], *out_hw), np.float32)
    for r in range(out_hw[0]):
        h0 = r * strides[0] - pads[0]
        for c in range(out_hw[1]):
            w0 = c * strides[1] - pads[1]
            win = x[:, :, max(h0, 0):max(h0 + kernel[0], 0), max(w0, 0):max(w0 + kernel[1], 0)].reshape(*x.shape[:2], -1)
            win = np.where(np.isnan(win), -np.inf, win)
            y[:, :, r, c] = win.max(axis=-1, initial=-np.inf)
    return y


@pytest.mark.parametrize("spatial,kernel,strides,pads,ceil", [
    ((112, 112), (3, 3), (2, 2), (1, 1, 1, 1), 0),  # ResNet's stem pool
    ((13, 11), (3, 3), (1, 1), (1, 1, 1, 1), 0),
    ((13, 11), (2, 3), (3, 2), (0, 1, 1, 0), 1),
    ((5, 40), (3, 5), (2, 3), (1, 2, 1, 2), 0),
    ((7, 3), (3, 3), (1, 1), (0, 0, 0, 0), 0),     # no window inside a row but the first
    ((1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 0),
])
def test_max_pool_matches_onnxruntime_and_skips_nan(spatial, kernel, strides, pads, ceil):
    """Finite inputs: exactly onnxruntime. With NaN and -inf: each window's largest number, NaN
    never winning and -inf kept (onnxruntime's result there depends on where the NaN sits)."""
    rng = np.random.default_rng(9)
    x = randn(rng, 2, 3, *spatial)
    model = node_model("MaxPool", ["x"], {"x": x}, kernel_shape=list(kernel), strides=list(strides), pads=list(pads),
                       ceil_mode=ceil)
    got, ref = run_tether(model, {"x": x})[0], run_ort(model, {"x": x})[0]
    np.testing.assert_array_equal(got, ref)
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, max(1, flat.size // 50), replace=False)] = np.nan
    flat[rng.choice(flat.size, max(1, flat.size // 50), replace=False)] = -np.inf
    x[1, 2] = np.nan  # a plane that is all NaN
    got = run_tether(model, {"x": x})[0]
    np.testing.assert_array_equal(got, max_pool_reference(x, kernel, strides, pads, ref.shape[2:]))


@pytest.mark.parametrize("shape, perm", [
    ((1, 3, 17, 19), (0, 2, 3, 1)),      # NCHW -> NHWC: one [C, HW] plane
    ((1, 3, 40, 60), (0, 2, 3, 1)),      # three rows, several tiles of columns
    ((2, 70, 33, 40), (0, 2, 3, 1)),     # tiles of rows and of columns, two images
    ((2, 33, 5, 7), (0, 3, 1, 2)),       # NHWC -> NCHW on a batch of two
    ((3, 1, 70, 65), (0, 2, 1, 3)),      # a size-1 axis between: a batched [70, 65] transpose
    ((130, 67), (1, 0)),
    ((4, 5, 6, 7), (0, 1, 3, 2)),
    ((2, 3, 4, 5), (2, 0, 3, 1)),        # no batched 2-D form: the general path
])
@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32, np.int64])
def test_transpose_equals_numpy(shape, perm, dtype):
    """Transpose on the permutations that reduce to [batch, rows, cols] -> [batch, cols, rows]
    (the blocked path) and on one that does not, for each element size, against numpy."""
    x = (np.arange(np.prod(shape)) % 251).astype(dtype).reshape(shape)
    model = node_model("Transpose", ["x"], {"x": x}, perm=list(perm))
    assert_matches(run_tether(model, {"x": x})[0], np.ascontiguousarray(x.transpose(perm)), f"{shape} {perm}")


@pytest.mark.parametrize("x_shape, w_shape, attrs", [
    ((2, 6, 9), (6, 4, 3), {"strides": [2], "pads": [1, 0]}),                                   # 1-D
    ((1, 8, 5, 7), (8, 3, 2, 2), {"strides": [2, 2]}),                                         # UNet-style x2 upsampling
    ((2, 6, 6, 5), (6, 2, 3, 3), {"strides": [2, 3], "pads": [1, 0, 2, 1], "output_padding": [1, 2]}),
    ((1, 4, 5, 5), (4, 3, 3, 3), {"dilations": [2, 1], "pads": [0, 2, 1, 0]}),                 # windows past both edges
    ((1, 6, 4, 6), (6, 2, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1], "group": 3}),
    ((1, 3, 3, 4, 5), (3, 2, 2, 3, 2), {"strides": [2, 1, 2], "pads": [0, 1, 1, 0, 1, 0]}),    # 3-D
])
@pytest.mark.parametrize("weights", ["constant", "input"])
def test_conv_transpose_equals_torch(x_shape, w_shape, attrs, weights):
    """ConvTranspose (the GEMM of the transposed weights and the scatter into the output) against
    torch's conv_transpose, with strides, pads past the edges, output_padding, dilations, groups,
    1-D to 3-D, and weights packed at compile time or read at run time."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    x, w, b = randn(rng, *x_shape), randn(rng, *w_shape), randn(rng, w_shape[1] * attrs.get("group", 1))
    k = len(x_shape) - 2
    pads = attrs.get("pads", [0] * 2 * k)
    feeds, consts = {"x": x}, {"b": b}
    (consts if weights == "constant" else feeds)["w"] = w
    model = node_model("ConvTranspose", ["x", "w", "b"], feeds, consts, **attrs)
    # torch pads both ends alike: run it unpadded and crop the ONNX begin / end pads.
    fn = {1: torch.nn.functional.conv_transpose1d, 2: torch.nn.functional.conv_transpose2d,
          3: torch.nn.functional.conv_transpose3d}[k]
    full = fn(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride=attrs.get("strides", [1] * k),
              output_padding=attrs.get("output_padding", [0] * k), groups=attrs.get("group", 1),
              dilation=attrs.get("dilations", [1] * k)).numpy()
    ref = full[(slice(None), slice(None)) + tuple(slice(pads[d], full.shape[2 + d] - pads[k + d]) for d in range(k))]
    assert_matches(run_tether(model, feeds)[0], np.ascontiguousarray(ref), f"{x_shape} {attrs}")


def test_compress_counts_any_nonzero_bool_byte_as_true_like_numpy():
    # ONNX stores bool as bytes; one of 157 was read as a C++ bool in shape inference (undefined
    # behaviour, engine fuzzer). Any nonzero byte is true.
    from onnx import TensorProto

    cond = TensorProto(name="c", data_type=TensorProto.BOOL, dims=[4], raw_data=bytes([1, 157, 0, 2]))
    graph = helper.make_graph([helper.make_node("Compress", ["x", "c"], ["y"], axis=0)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
                              [helper.make_empty_tensor_value_info("y")], initializer=[cond])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(tt.compile(blob).run({"x": x})["y"], np.compress([1, 1, 0, 1], x, axis=0))


@pytest.mark.parametrize("shape, starts, ends, axes, steps", [
    ((2, 5, 7, 9), [1, 2], [4, 9], [1, 3], [1, 1]),          # windows of rows: runs of 7 along the last axis
    ((2, 5, 7, 9), [0], [3], [0], [1]),                       # leading axis only: whole planes as one run
    ((3, 8, 6), [1, 5], [6, -1], [2, 1], [2, -2]),            # steps on the last axis and backwards
    ((4, 10), [9], [-11], [1], [-1]),                         # reversed rows
    ((2, 3, 4, 5), [0, 0, 0, 0], [2, 3, 4, 5], [0, 1, 2, 3], [1, 1, 1, 1]),  # everything: one run
    ((6, 4, 0, 3), [1], [4], [0], [1]),                       # an empty axis
    # Steps far past the axis (step * stride once overflowed, found by the engine fuzzer).
    ((20, 7, 5), [0, 6], [3, 1], [0, 1], [1, -8935141660703064063]),
    ((20, 7, 5), [2, 0], [30, 7], [0, 1], [2**62, 2**62]),
])
@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.int64])
def test_slice_equals_numpy(shape, starts, ends, axes, steps, dtype):
    """Slice as runs of contiguous elements (or strided loops) against numpy's slicing."""
    x = (np.arange(np.prod(shape)) % 241).astype(dtype).reshape(shape)
    consts = {"s": np.array(starts, np.int64), "e": np.array(ends, np.int64), "a": np.array(axes, np.int64),
              "t": np.array(steps, np.int64)}
    index = [slice(None)] * len(shape)
    for s, e, a, t in zip(starts, ends, axes, steps, strict=True):
        index[a] = slice(s, None if (t < 0 and e < -shape[a]) else e, t)
    model = node_model("Slice", ["x", "s", "e", "a", "t"], {"x": x}, consts)
    assert_matches(run_tether(model, {"x": x})[0], np.ascontiguousarray(x[tuple(index)]), f"{shape} {starts} {ends}")


@pytest.mark.parametrize("shape, pads", [
    ((1, 3, 56, 56, 8), [0, 0, 0, 0, 0, 0, 0, 1, 1, 0]),     # window padding of a windowed-attention model
    ((2, 3, 5, 7), [0, 0, 1, 2, 0, 0, 3, 1]),
    ((2, 3, 5, 7), [0, 1, -1, 2, 0, 0, 1, -3]),               # negative pads crop
    ((4, 6), [2, 0, 0, 0]),
])
@pytest.mark.parametrize("value", [0.0, -1.5])
def test_constant_pad_equals_numpy(shape, pads, value):
    """Constant Pad (a fill and a copy of the input's box when it only grows; cropping pads too)
    against numpy."""
    x = np.random.default_rng(12).standard_normal(shape).astype(np.float32)
    k = len(shape)
    model = node_model("Pad", ["x", "p", "v"], {"x": x}, {"p": np.array(pads, np.int64), "v": np.array(value, np.float32)})
    begin, end = pads[:k], pads[k:]
    grown = np.pad(x, [(max(b, 0), max(e, 0)) for b, e in zip(begin, end, strict=True)], constant_values=value)
    ref = grown[tuple(slice(max(-b, 0), grown.shape[d] - max(-e, 0)) for d, (b, e) in enumerate(zip(begin, end, strict=True)))]
    assert_matches(run_tether(model, {"x": x})[0], np.ascontiguousarray(ref), f"{shape} {pads}")


@pytest.mark.parametrize("op, attrs", [("RNN", {}), ("GRU", {}), ("GRU", {"linear_before_reset": 1}), ("LSTM", {})])
@pytest.mark.parametrize("weights", ["constant", "input"])
def test_recurrent_ops_at_model_sizes_match_onnxruntime(op, attrs, weights):
    """Hidden and input sizes past a vector's width (the input GEMM over all steps, R h by R's
    columns), bidirectional with ragged lengths, and weights packed at compile time or read at
    run time."""
    rng = np.random.default_rng(33)
    (model, feeds), _ = recurrent_model(op, rng, 9, 3, 19, 37, "bidirectional", 0, lens=[9, 4, 6], **attrs)
    if weights == "input":  # W, R and B become graph inputs
        m = onnx.load_from_string(model)
        moved = [i for i in m.graph.initializer if i.name in ("W", "R", "B")]
        for init in moved:
            feeds[init.name] = numpy_helper.to_array(init)
            m.graph.input.append(helper.make_tensor_value_info(init.name, onnx.TensorProto.FLOAT, list(init.dims)))
            m.graph.initializer.remove(init)
        model = m.SerializeToString()
    for k, (a, b) in enumerate(zip(run_tether(model, feeds), run_ort(model, feeds), strict=True)):
        assert_matches(a, b, f"{op} {attrs} {weights} output {k}")


@pytest.mark.parametrize("op, hidden, attrs", [("LSTM", 192, {}), ("GRU", 256, {"linear_before_reset": 1}),
                                                ("GRU", 384, {})])
def test_one_long_sequence_shares_each_step_between_threads_and_matches_onnxruntime(op, hidden, attrs):
    """One sequence (batch 1, forward) with a recurrent product large enough that each step's
    R h is split between the threads."""
    (model, feeds), _ = recurrent_model(op, np.random.default_rng(34), 12, 1, 24, hidden, "forward", 0, **attrs)
    # Twelve steps of sums over hundreds of float terms leave both engines ~1e-5 away from the
    # exact result, each in its own summation order: the oracle is the float64 evaluation of
    # the same model (onnx's reference), and tether must be as close to it as onnxruntime.
    from onnx.reference import ReferenceEvaluator

    m = onnx.load_from_string(model)
    for init in m.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float64), init.name))
    for vi in m.graph.input:
        vi.type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
    exact = ReferenceEvaluator(m).run(None, {k: v.astype(np.float64) for k, v in feeds.items()})
    ours, theirs = run_tether(model, feeds), run_ort(model, feeds)
    for k, (a, b, e) in enumerate(zip(ours, theirs, exact, strict=True)):
        err, ort_err = float(np.abs(a - e).max()), float(np.abs(b - e).max())
        assert err <= 2 * ort_err + 1e-6, f"{op} {hidden} output {k}: {err:.3g} from float64, onnxruntime {ort_err:.3g}"


@pytest.mark.parametrize("exponent", [np.array(2.0, np.float32), np.array([3.0], np.float32), np.array(0.5, np.float32),
                                      np.array(1, np.int64), np.array(2.5, np.float32)])
def test_pow_of_a_scalar_exponent_equals_numpy(exponent):
    """Pow with one exponent for every element (squares in RMSNorm, cubes in the tanh Gelu: a
    multiply per element; other exponents the general path), against C's pow, negative bases,
    infinities and NaN included."""
    x = np.random.default_rng(13).standard_normal((3, 70, 33)).astype(np.float32) * 3
    x[0, 0, :4] = [np.nan, -0.0, np.inf, -np.inf]
    model = node_model("Pow", ["x", "e"], {"x": x}, {"e": exponent})
    e = float(exponent.reshape(-1)[0])
    ref = np.array([math.pow(v, e) if not (math.isfinite(v) and v < 0 and e != int(e)) else math.nan for v in x.astype(np.float64).ravel()],
                   np.float64).astype(np.float32).reshape(x.shape)  # C's pow, as ONNX and onnxruntime
    got = run_tether(model, {"x": x})[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(got[finite], ref[finite], rtol=1e-6)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(ref)], ref[~finite & ~np.isnan(ref)])


@pytest.mark.parametrize("a_shape, b_shape", [
    ((2, 5, 3, 4), (2, 5, 1, 1)),     # squeeze-excite scaling: rows of H * W against one value
    ((2, 5, 3, 4), (1, 1, 3, 4)),     # one plane for every (N, C)
    ((2, 5, 3, 4), (5, 1, 4)),
    ((1, 5, 1, 4), (2, 1, 3, 1)),     # both sides broadcast
    ((3, 1), (1, 6)),
    ((2, 3, 4), (2, 3, 4)),
])
@pytest.mark.parametrize("op, dtype", [("Mul", np.float32), ("Sub", np.float32), ("Add", np.int64), ("Greater", np.float32)])
def test_broadcasting_binary_ops_equal_numpy(a_shape, b_shape, op, dtype):
    """Binary ops whose broadcast dims merge into long rows (or cannot), against numpy."""
    rng = np.random.default_rng(14)
    a, b = (rng.standard_normal(a_shape) * 9).astype(dtype), (rng.standard_normal(b_shape) * 9).astype(dtype)
    model = node_model(op, ["a", "b"], {"a": a, "b": b})
    ref = {"Mul": np.multiply, "Sub": np.subtract, "Add": np.add, "Greater": np.greater}[op](a, b)
    assert_matches(run_tether(model, {"a": a, "b": b})[0], ref, f"{op} {a_shape} {b_shape}")


@pytest.mark.parametrize("act", ["sigmoid", "silu"])
def test_sigmoid_and_silu_epilogues_hold_at_extreme_values(act):
    """A 1x1 convolution followed by Sigmoid (or x * Sigmoid(x)), fused into the convolution's
    epilogue: against numpy in float64 for outputs from -1e4 to 1e4, NaN included."""
    x = np.linspace(-1e4, 1e4, 2 * 4 * 9 * 9, dtype=np.float32).reshape(2, 4, 9, 9)
    x[0, 0, 0, :3] = [np.nan, -90.0, 90.0]
    w = np.eye(4, dtype=np.float32).reshape(4, 4, 1, 1)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Sigmoid", ["c"], ["s"])]
    if act == "silu":
        nodes.append(helper.make_node("Mul", ["c", "s"], ["y"]))
    out = "y" if act == "silu" else "s"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    sess = tt.compile(tt.load(model), threads=2, profile=True)
    got = sess.run({"x": x})[out]
    assert [p["op_type"] for p in sess.profile()] == ["ai.tether:FusedConv"]
    with np.errstate(over="ignore", invalid="ignore"):
        v = np.einsum("oi,nihw->nohw", w[:, :, 0, 0].astype(np.float64), x.astype(np.float64))  # NaN * 0 is NaN
        ref = 1.0 / (1.0 + np.exp(-v))
        ref = v * ref if act == "silu" else ref
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    ok = ~np.isnan(ref)
    np.testing.assert_allclose(got[ok], ref[ok], rtol=2e-6, atol=1e-30)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceSumSquare", "ArgMax"])
@pytest.mark.parametrize("keepdims,noop", [(-1, 0), (2, 0), (0, -2), (1, 2), (1, 1)])
def test_only_1_means_true_for_keepdims_and_noop_with_empty_axes_as_in_onnxruntime(op, keepdims, noop):
    import onnxruntime as ort
    from onnx import TensorProto, helper

    attrs = {"keepdims": keepdims} if op == "ArgMax" else {"keepdims": keepdims, "noop_with_empty_axes": noop}
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 2])],
                              [helper.make_empty_tensor_value_info("y")])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()
    x = np.random.default_rng(0).standard_normal((3, 4, 2)).astype(np.float32)
    want = ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = tt.compile(blob).run({"x": x})["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("c_shape", [(), (1,), (1, 1), (2, 1)])
@pytest.mark.parametrize("optimize", [False, True])
def test_gemm_of_one_column_with_a_bias_of_any_broadcast_shape_matches_onnxruntime(c_shape, optimize):
    # A scalar C with one output column once read the dims of a rank-0 tensor (a crash).
    import onnxruntime as ort
    from onnx import TensorProto, helper

    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "abc"],
                              [helper.make_empty_tensor_value_info("y")])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()
    rng = np.random.default_rng(0)
    feeds = {"a": rng.standard_normal((2, 3)).astype(np.float32), "b": rng.standard_normal((3, 1)).astype(np.float32),
             "c": rng.standard_normal(c_shape).astype(np.float32)}
    want = ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(tt.compile(blob, optimize=optimize).run(feeds)["y"], want, rtol=1e-5, atol=1e-6)


def _single(op, inputs, outputs=("y",), opset=18, **attrs) -> bytes:
    """One `op` node over float/int inputs of unknown shape (name -> dtype)."""
    from onnx import helper

    node = helper.make_node(op, list(inputs), list(outputs), name="n", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, None) for n, t in inputs.items()],
                              [helper.make_empty_tensor_value_info(o) for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10).SerializeToString()


def test_layer_normalization_bias_broadcast_along_a_non_last_dim_matches_onnxruntime():
    # B of shape [4, 1] over the normalised dims [4, 5] was read as if it were [4] repeated.
    import onnxruntime as ort
    from onnx import TensorProto

    blob = _single("LayerNormalization", {"x": TensorProto.FLOAT, "w": TensorProto.FLOAT, "b": TensorProto.FLOAT},
                   axis=-2)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 3, 4, 5)).astype(np.float32), "w": rng.standard_normal((4, 5)).astype(np.float32),
             "b": rng.standard_normal((4, 1)).astype(np.float32)}
    want = ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(tt.compile(blob).run(feeds)["y"], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,reduction", [("ScatterND", "max"), ("ScatterND", "min"), ("ScatterElements", "max")])
def test_scatter_max_and_min_keep_a_nan_update_as_onnxruntime_does(op, reduction):
    # (ONNX's reference keeps NaN for ScatterND, as numpy's maximum does, but drops it for
    # ScatterElements, whose loop uses Python's max; onnxruntime keeps it in both.)
    import onnxruntime as ort
    from onnx import TensorProto

    blob = _single(op, {"d": TensorProto.FLOAT, "i": TensorProto.INT64, "u": TensorProto.FLOAT}, reduction=reduction)
    indices = np.array([[0, 0], [1, 1]], np.int64) if op == "ScatterND" else np.array([[0, 1], [1, 0]], np.int64)
    updates = np.array([np.nan, 7.0], np.float32) if op == "ScatterND" else np.array([[np.nan, 7], [0, np.nan]], np.float32)
    feeds = {"d": np.array([[1, 2], [3, 4]], np.float32), "i": indices, "u": updates}
    want = ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert np.isnan(want).any()
    np.testing.assert_array_equal(tt.compile(blob).run(feeds)["y"], want)


def test_reduce_log_sum_exp_of_infinities_is_infinite_not_nan():
    from onnx import TensorProto

    blob = _single("ReduceLogSumExp", {"x": TensorProto.FLOAT}, axes=[1], keepdims=0, opset=13)
    x = np.array([[1.0, np.inf], [np.inf, np.inf], [-np.inf, -np.inf], [-np.inf, 2.0], [np.nan, 1.0]], np.float32)
    with np.errstate(invalid="ignore"):
        want = np.logaddexp(x[:, 0], x[:, 1])
    np.testing.assert_allclose(tt.compile(blob).run({"x": x})["y"], want, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint16, np.uint32])
def test_integer_arithmetic_wraps_around_like_numpy_and_never_traps(dtype):
    # Signed overflow in Add/Mul was undefined behaviour (found by the engine fuzzer under UBSan),
    # and INT_MIN / -1 or INT_MIN % -1 raise SIGFPE on x86: each wraps now, as numpy's do.
    info = np.iinfo(dtype)
    a = np.array([info.min, info.max, info.max, info.min, 7, -7 if info.min < 0 else 7], dtype)
    b = np.array([-1 if info.min < 0 else 1, info.max, 2, info.min or 1, -1 if info.min < 0 else 1, 3], dtype)
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))

    def wrapped(values):  # Python integers to dtype, modulo 2^bits
        bits = np.iinfo(dtype).bits
        return np.array([(v - info.min) % (1 << bits) + info.min for v in values], dtype)

    def truncated(x, y):  # C's integer division, exact
        q = abs(x) // abs(y)
        return q if (x < 0) == (y < 0) else -q

    with np.errstate(all="ignore"):
        want = {"Add": a + b, "Sub": a - b, "Mul": a * b, "Neg": -a, "Abs": np.abs(a),
                "Div": wrapped([truncated(int(x), int(y)) for x, y in zip(a, b, strict=True)]), "Mod": np.mod(a, b)}
    for op, expected in want.items():
        if op in ("Neg", "Abs") and info.min == 0:
            continue
        inputs = {"a": t} if op in ("Neg", "Abs") else {"a": t, "b": t}
        feeds = {"a": a} if op in ("Neg", "Abs") else {"a": a, "b": b}
        got = tt.compile(_single(op, inputs)).run(feeds)["y"]
        np.testing.assert_array_equal(got, expected, err_msg=op)


@pytest.mark.parametrize("op", ["ReduceLogSumExp", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_reductions_of_nothing_or_past_the_range_saturate_as_onnxruntime_does(op, dtype):
    # The max or log-sum-exp of nothing is -inf and a product may leave the range: casting
    # those to an integer was undefined behaviour (found by the engine fuzzer).
    from onnx import TensorProto

    blob = _single(op, {"x": helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), "a": TensorProto.INT64}, keepdims=0)
    big = np.iinfo(dtype).max // 4
    for x in (np.zeros((0, 2), dtype), np.array([[big, -big], [big, big], [big, big]], dtype)):
        feeds = {"x": x, "a": np.array([0], np.int64)}
        np.testing.assert_array_equal(tt.compile(blob).run(feeds)["y"], run_ort(blob, feeds)[0], err_msg=str(x.shape))


@pytest.mark.parametrize("op,attrs,message", [
    ("Resize", {"axes": [3, 3], "mode": "nearest"}, "axes name axis 3 twice"),
    ("ReduceSum", {"axes": [1, -1], "opset": 13}, "axes name axis 1 twice"),
])
def test_repeated_axes_are_a_shape_error(op, attrs, message):
    from onnx import TensorProto

    opset = attrs.pop("opset", 18)
    if op == "Resize":
        from onnx import helper

        node = helper.make_node(op, ["x", "", "s"], ["y"], name="n", **attrs)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
                                                helper.make_tensor_value_info("s", TensorProto.FLOAT, None)],
                                  [helper.make_empty_tensor_value_info("y")])
        blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10).SerializeToString()
        feeds = {"x": np.ones((1, 1, 2, 2), np.float32), "s": np.array([2, 2], np.float32)}
    else:
        blob = _single(op, {"x": TensorProto.FLOAT}, opset=opset, **attrs)
        feeds = {"x": np.ones((2, 2), np.float32)}
    with pytest.raises(tt.ShapeError, match=f"{op} 'n': {message}"):
        tt.compile(blob).run(feeds)
