"""Scales and zero points bit for bit equal to onnxruntime's (compute_scale_zp, quantize_data),
called directly as the oracle, over ordinary, inverted-sign, zero, tiny and huge ranges."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import tether as tt
from onnx import TensorProto
from onnxruntime.quantization.quant_utils import compute_scale_zp, get_qmin_qmax_for_qType, quantize_data
from tether import _core

QTYPES = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8}
GRIDS = list(itertools.product(("int8", "uint8"), (False, True), (False, True)))


def _ort(rmin: float, rmax: float, dtype: str, symmetric: bool, reduce_range: bool) -> tuple[np.float32, int]:
    qmin, qmax = get_qmin_qmax_for_qType(QTYPES[dtype], reduce_range=reduce_range, symmetric=symmetric)
    zp, scale = compute_scale_zp(np.float32(rmin), np.float32(rmax), qmin, qmax, symmetric)
    return np.float32(scale), int(zp)


def _ranges() -> list[tuple[float, float]]:
    rng = np.random.default_rng(11)
    out = [(0.0, 0.0), (-1.0, 1.0), (0.0, 1.0), (-1.0, 0.0), (0.5, 2.0), (-3.0, -0.25), (2.0, 2.0), (-7.0, -7.0)]
    out += [(-1e-40, 1e-40), (0.0, 1e-40), (-3e-38, 2e-38), (1e-30, 1e-29)]  # tiny: scale 1, zero point 0
    out += [(-3e38, 3e38), (-3.4e38, 1.0), (0.0, 3.4028235e38), (-1e30, 2e30)]  # huge
    out += [(-1.0, 126.0 / 128.0), (-127.5 / 255.0, 127.5 / 255.0)]  # zero points at exact halves
    for _ in range(300):
        a, b = np.sort(rng.standard_normal(2) * 10.0 ** rng.uniform(-6, 6)).astype(np.float32)
        out.append((float(a), float(b)))
    for _ in range(100):
        a = np.float32(rng.uniform(0, 5))
        out.append((float(a), float(a + np.float32(rng.uniform(0, 5)))))  # rmin > 0
        out.append((float(-a - np.float32(rng.uniform(0, 5))), float(-a)))  # rmax < 0
    return [(float(np.float32(a)), float(np.float32(b))) for a, b in out]


@pytest.mark.parametrize(("dtype", "symmetric", "reduce_range"), GRIDS)
def test_qparams_for_range_equal_onnxruntime_bit_for_bit(dtype: str, symmetric: bool, reduce_range: bool) -> None:
    for rmin, rmax in _ranges():
        scale, zp = _core.quant_qparams_for_range(rmin, rmax, dtype, symmetric, reduce_range)
        want_scale, want_zp = _ort(rmin, rmax, dtype, symmetric, reduce_range)
        assert np.float32(scale).view(np.uint32) == want_scale.view(np.uint32), (rmin, rmax)
        assert zp == want_zp, (rmin, rmax)


def test_half_way_zero_points_round_to_even() -> None:
    # [-1, 1] on int8: zero point round(-128 + 127.5) = round(-0.5) = 0; on uint8 round(127.5) = 128.
    assert _core.quant_qparams_for_range(-1.0, 1.0, "int8") == (np.float32(2 / 255), 0)
    assert _core.quant_qparams_for_range(-1.0, 1.0, "uint8") == (np.float32(2 / 255), 128)
    assert _core.quant_qparams_for_range(-1.0, 1.0, "uint8", symmetric=True, reduce_range=True)[1] == 64


@pytest.mark.parametrize(("dtype", "symmetric", "reduce_range"), GRIDS)
def test_weight_qparams_equal_onnxruntime_quantize_data_per_channel(
    dtype: str, symmetric: bool, reduce_range: bool
) -> None:
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((6, 3, 3, 3)) * rng.uniform(0.01, 3, (6, 1, 1, 1))).astype(np.float32)
    w[2] = 0.0  # a dead channel
    w[3] = np.abs(w[3])  # a channel without negatives
    w[4] = -np.abs(w[4]) - 0.5
    for axis in (0, 1, 3):
        scales, zps = _core.quant_weight_qparams(w, axis, dtype, symmetric, reduce_range)
        assert scales.dtype == np.float32 and zps.dtype == np.int64 and scales.shape == (w.shape[axis],)
        for c in range(w.shape[axis]):
            zp, scale, _ = quantize_data(w.take(c, axis).flatten(), QTYPES[dtype], symmetric, reduce_range)
            assert scales[c].view(np.uint32) == np.float32(scale).view(np.uint32), (axis, c)
            assert zps[c] == int(zp), (axis, c)
    scales, zps = _core.quant_weight_qparams(w, -1, dtype, symmetric, reduce_range)
    zp, scale, _ = quantize_data(w.flatten(), QTYPES[dtype], symmetric, reduce_range)
    assert scales.tolist() == [np.float32(scale)] and zps.tolist() == [int(zp)]


def test_bad_ranges_and_weights_are_argument_errors() -> None:
    with pytest.raises(tt.ArgumentError, match=r"range \[2, 1\] is not a range"):
        _core.quant_qparams_for_range(2.0, 1.0)
    with pytest.raises(tt.ArgumentError, match=r"range \[nan, 1\]"):
        _core.quant_qparams_for_range(float("nan"), 1.0)
    with pytest.raises(tt.ArgumentError, match=r"range \[-inf, 1\]"):
        _core.quant_qparams_for_range(float("-inf"), 1.0)
    with pytest.raises(tt.ArgumentError, match="quantization grids are int8 or uint8, got int16"):
        _core.quant_qparams_for_range(0.0, 1.0, "int16")
    w = np.ones((4, 2), np.float32)
    w[2, 1] = np.nan
    with pytest.raises(tt.ArgumentError, match="weight 'conv.w' holds nan in channel 2 along axis 0"):
        _core.quant_weight_qparams(w, 0, name="conv.w")
    w[2, 1] = np.inf
    with pytest.raises(tt.ArgumentError, match="weight 'fc' holds inf in channel 1 along axis 1"):
        _core.quant_weight_qparams(w, 1, name="fc")
    with pytest.raises(tt.ArgumentError, match="weight 'fc' has rank 2, no channel axis 2"):
        _core.quant_weight_qparams(np.ones((4, 2), np.float32), 2, name="fc")
    with pytest.raises(tt.ArgumentError, match="weight 'fc' is float64, weight_qparams takes float32"):
        _core.quant_weight_qparams(np.ones((4, 2)), 0, name="fc")
