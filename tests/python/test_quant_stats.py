"""TensorStats: exact extremes and magnitude histograms that merge exactly, checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest
import tether as tt
from tether import _core


def _numpy_histograms(values: np.ndarray, bins: int) -> tuple[int | None, np.ndarray, np.ndarray]:
    """The definition, computed independently: bins of |x| of width 2^e / bins, with e the
    smallest integer such that every |x| < 2^e; x >= 0 and x < 0 counted apart."""
    v = values[np.isfinite(values)].astype(np.float64)
    nonzero = np.abs(v[v != 0])
    if nonzero.size == 0:
        pos = np.zeros(bins, np.int64)
        pos[0] = v.size
        return None, pos, np.zeros(bins, np.int64)
    e = int(np.floor(np.log2(nonzero.max()))) + 1
    width = 2.0**e / bins
    idx = np.floor(np.abs(v) / width).astype(np.int64)
    assert idx.max() < bins
    pos = np.bincount(idx[v >= 0], minlength=bins)
    neg = np.bincount(idx[v < 0], minlength=bins)
    return e, pos, neg


DISTRIBUTIONS = {
    "gaussian": lambda r: r.standard_normal(20_000).astype(np.float32),
    "laplace": lambda r: r.laplace(0, 0.3, 20_000).astype(np.float32),
    "heavy_tail": lambda r: r.standard_t(2, 20_000).astype(np.float32),
    "relu": lambda r: np.maximum(r.standard_normal(20_000), 0).astype(np.float32),
    "one_outlier": lambda r: np.concatenate([r.standard_normal(9_999), [1e4]]).astype(np.float32),
    "tiny_subnormal": lambda r: (r.standard_normal(5_000) * 1e-41).astype(np.float32),
    "huge": lambda r: (r.standard_normal(5_000) * 1e37).astype(np.float32),
}


@pytest.mark.parametrize("bins", [16, 2048])
@pytest.mark.parametrize("dist", sorted(DISTRIBUTIONS))
def test_histograms_match_the_numpy_definition(dist: str, bins: int) -> None:
    x = DISTRIBUTIONS[dist](np.random.default_rng(1))
    s = _core.TensorStats(bins)
    s.observe(x)
    e, pos, neg = _numpy_histograms(x, bins)
    assert s.exponent == e
    np.testing.assert_array_equal(np.array(s.positive), pos)
    np.testing.assert_array_equal(np.array(s.negative), neg)
    assert s.count == x.size and s.nonfinite == 0
    assert s.min == x.min() and s.max == x.max()
    assert s.zeros == int(np.count_nonzero(x == 0))


def test_state_is_bit_identical_whatever_the_batching_and_order() -> None:
    rng = np.random.default_rng(7)
    # Magnitudes growing over the stream, so the exponent grows while observing.
    x = np.concatenate([rng.standard_normal(3000) * 10.0**k for k in range(-3, 4)]).astype(np.float32)
    whole = _core.TensorStats(256)
    whole.observe(x)
    for split in (1, 7, 97, 1000):
        order = rng.permutation(x.size)
        parts = np.array_split(x[order], split)
        for reverse in (False, True):
            s = _core.TensorStats(256)
            for p in parts[::-1] if reverse else parts:
                s.observe(np.ascontiguousarray(p))
            assert s.exponent == whole.exponent
            assert s.positive == whole.positive and s.negative == whole.negative
            assert (s.min, s.max, s.count, s.zeros) == (whole.min, whole.max, whole.count, whole.zeros)


def test_merge_equals_one_pass() -> None:
    rng = np.random.default_rng(3)
    a = (rng.standard_normal(1000) * 0.01).astype(np.float32)
    b = (rng.standard_normal(1000) * 50).astype(np.float32)
    one = _core.TensorStats(512)
    one.observe(np.concatenate([a, b]))
    for first, second in ((a, b), (b, a)):
        s1, s2 = _core.TensorStats(512), _core.TensorStats(512)
        s1.observe(first)
        s2.observe(second)
        s1.merge(s2)
        assert s1.positive == one.positive and s1.negative == one.negative and s1.exponent == one.exponent
        assert (s1.min, s1.max, s1.count) == (one.min, one.max, one.count)


def test_signed_zeros_do_not_change_the_extremes() -> None:
    s = _core.TensorStats(16)
    s.observe(np.array([-0.0, 0.0], np.float32))
    t = _core.TensorStats(16)
    t.observe(np.array([0.0, -0.0], np.float32))
    for st in (s, t):
        assert np.signbit(st.min) == np.signbit(st.max) == False  # noqa: E712
        assert st.zeros == 2 and st.exponent is None and st.positive[0] == 2


def test_nonfinite_values_are_counted_and_left_out() -> None:
    x = np.array([1.0, np.nan, -2.0, np.inf, -np.inf, 0.5], np.float32)
    s = _core.TensorStats(16)
    s.observe(x)
    assert s.nonfinite == 3 and s.count == 3
    assert (s.min, s.max) == (-2.0, 1.0)
    e, pos, neg = _numpy_histograms(x, 16)
    assert s.exponent == e and s.positive == list(pos) and s.negative == list(neg)


def test_all_zero_and_constant_tensors() -> None:
    z = _core.TensorStats(32)
    z.observe(np.zeros((4, 5), np.float32))
    assert z.exponent is None and z.absmax == 0 and z.bin_width == 0 and z.positive[0] == 20
    c = _core.TensorStats(32)
    c.observe(np.full(10, 3.0, np.float32))
    assert (c.min, c.max, c.exponent) == (3.0, 3.0, 2)
    assert c.positive[int(3.0 / (4.0 / 32))] == 10


def test_channel_extremes_follow_the_axis() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5, 4, 4)).astype(np.float32)
    x[:, 2] = 0  # a dead channel
    s = _core.TensorStats(64, 1)
    s.observe(x[:2].copy())
    s.observe(x[2:].copy())
    np.testing.assert_array_equal(np.array(s.channel_absmax, np.float32), np.abs(x).max(axis=(0, 2, 3)))
    assert s.channel_absmax[2] == 0
    with pytest.raises(tt.ArgumentError, match="6 channels along axis 1, earlier observations had 5"):
        s.observe(np.zeros((1, 6, 2, 2), np.float32))


@pytest.mark.parametrize("shape", [(1, 1), (3, 13), (2, 5, 127), (4, 128, 768)])
def test_channel_extremes_on_the_last_axis_match_numpy_with_dead_and_nonfinite_values(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(np.float32)
    x[..., 0] = 0  # a dead channel
    if shape[-1] > 2:
        x.reshape(-1, shape[-1])[0, 1] = np.inf  # non-finite values count for no channel
        x.reshape(-1, shape[-1])[-1, 2] = np.nan
    s = _core.TensorStats(64, len(shape) - 1)
    s.observe(x[:1].copy())
    s.observe(x[1:].copy())
    want = np.where(np.isfinite(x), np.abs(x), 0).max(axis=tuple(range(len(shape) - 1)))
    np.testing.assert_array_equal(np.array(s.channel_absmax, np.float32), want)
    assert s.channel_absmax[0] == 0


@pytest.mark.parametrize("bins", [0, 15, 100, 1 << 17])
def test_bins_must_be_a_power_of_two_in_range(bins: int) -> None:
    with pytest.raises(tt.ArgumentError, match=f"power of two from 16 to 65536, got {bins}"):
        _core.TensorStats(bins)


def test_merging_different_bin_counts_is_refused() -> None:
    a, b = _core.TensorStats(16), _core.TensorStats(32)
    b.observe(np.ones(3, np.float32))
    with pytest.raises(tt.ArgumentError, match="32 bins into 16 bins"):
        a.merge(b)
