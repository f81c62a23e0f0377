"""Range methods of tether/quant.h against numpy versions of their definitions (_quant_oracle),
on histograms rebuilt from the data, plus their properties (percentile 100 is minmax, thresholds
stay within absmax, outliers get clipped, sqnr picks the best estimate)."""

from __future__ import annotations

import math

import _quant_oracle as oracle
import numpy as np
import pytest
import tether as tt
from tether import _core

DISTRIBUTIONS = {
    "gaussian": lambda r: r.standard_normal(20_000).astype(np.float32),
    "laplace": lambda r: r.laplace(0.2, 0.3, 20_000).astype(np.float32),
    "student_t2": lambda r: r.standard_t(2, 20_000).astype(np.float32),
    "relu": lambda r: np.maximum(r.standard_normal(20_000), 0).astype(np.float32),
    # Enough samples that the quantization noise of keeping the outlier exceeds its clipping error.
    "one_outlier": lambda r: np.concatenate([r.standard_normal(199_999), [20.0]]).astype(np.float32),
    # The bulk spans fewer than 128 bins below the outlier: entropy keeps it (see below).
    "far_outlier": lambda r: np.concatenate([r.standard_normal(19_999), [60.0]]).astype(np.float32),
    "skewed": lambda r: (r.gamma(2.0, 1.0, 20_000) - 0.5).astype(np.float32),
    "all_zeros": lambda r: np.zeros(1000, np.float32),
    "constant": lambda r: np.full(1000, -2.5, np.float32),
}
# (dtype, symmetric, reduce_range)
GRIDS = [("int8", False, False), ("int8", True, False), ("uint8", False, False), ("uint8", True, True)]


def _data(dist: str, seed: int = 1) -> np.ndarray:
    return DISTRIBUTIONS[dist](np.random.default_rng(seed))


def _stats(x: np.ndarray, bins: int = 2048) -> _core.TensorStats:
    s = _core.TensorStats(bins)
    for part in np.array_split(x, 3):  # batching must not matter
        s.observe(np.ascontiguousarray(part))
    return s


def _range(s: _core.TensorStats, method: str, g: tuple[str, bool, bool], **kw: float) -> tuple[np.float32, np.float32]:
    dtype, symmetric, reduce_range = g
    lo, hi = _core.quant_compute_range(s, method, dtype=dtype, symmetric=symmetric, reduce_range=reduce_range, **kw)
    return np.float32(lo), np.float32(hi)


def _assert_valid_qparams(rng: tuple[float, float], g: tuple[str, bool, bool]) -> None:
    scale, zp = _core.quant_qparams_for_range(float(rng[0]), float(rng[1]), *g)
    assert math.isfinite(scale) and scale >= np.finfo(np.float32).tiny
    qmin, qmax = oracle.grid(*g)
    assert int(qmin) <= zp <= int(qmax)


@pytest.mark.parametrize("g", GRIDS, ids=str)
@pytest.mark.parametrize("dist", sorted(DISTRIBUTIONS))
def test_minmax_and_percentile_match_their_numpy_definitions(dist: str, g: tuple[str, bool, bool]) -> None:
    x = _data(dist)
    s, h = _stats(x), oracle.histogram(x, 2048)
    assert _range(s, "minmax", g) == (x.min(), x.max())
    for p in (90.0, 99.0, 99.9, 99.999, 100.0):
        assert _range(s, "percentile", g, percentile=p) == oracle.percentile(h, p, g[1]), p


@pytest.mark.parametrize("dist", ["gaussian", "student_t2", "relu"])
def test_symmetric_percentile_brackets_numpys_percentile_of_magnitudes(dist: str) -> None:
    x = _data(dist)
    s, h = _stats(x), oracle.histogram(x, 2048)
    for p in (90.0, 99.0, 99.9):
        lo, hi = _range(s, "percentile", ("int8", True, False), percentile=p)
        t = max(-float(lo), float(hi))
        v = float(np.percentile(np.abs(x).astype(np.float64), p, method="inverted_cdf"))
        assert t - h.w <= v <= t, (p, t, v)


@pytest.mark.parametrize("g", GRIDS, ids=str)
@pytest.mark.parametrize("dist", sorted(DISTRIBUTIONS))
def test_entropy_picks_the_bin_pytorch_quantizations_algorithm_picks(dist: str, g: tuple[str, bool, bool]) -> None:
    x = _data(dist)
    s, h = _stats(x), oracle.histogram(x, 2048)
    assert _range(s, "entropy", g) == oracle.entropy(h, 128, g[1])


@pytest.mark.parametrize("levels", [16, 100, 255])
def test_entropy_with_other_level_counts(levels: int) -> None:
    x = _data("laplace", seed=4)
    s, h = _stats(x, 512), oracle.histogram(x, 512)
    assert _range(s, "entropy", ("int8", True, False), entropy_levels=levels) == oracle.entropy(h, levels, True)


@pytest.mark.parametrize("g", GRIDS, ids=str)
@pytest.mark.parametrize("dist", sorted(DISTRIBUTIONS))
def test_mse_picks_the_threshold_of_least_squared_error(dist: str, g: tuple[str, bool, bool]) -> None:
    x = _data(dist)
    s, h = _stats(x), oracle.histogram(x, 2048)
    assert _range(s, "mse", g) == oracle.mse(h, *g)


@pytest.mark.parametrize("method", ["entropy", "mse"])
def test_large_histograms_search_strided_candidates(method: str) -> None:
    x = _data("gaussian", seed=5)
    s, h = _stats(x, 16384), oracle.histogram(x, 16384)
    assert h.n > oracle.CANDIDATES  # so the stride is > 1
    g = ("int8", True, False)
    want = oracle.entropy(h, 128, True) if method == "entropy" else oracle.mse(h, *g)
    assert _range(s, method, g) == want


@pytest.mark.parametrize("g", GRIDS, ids=str)
@pytest.mark.parametrize("dist", ["gaussian", "student_t2", "relu", "one_outlier", "all_zeros", "constant"])
def test_sqnr_estimate_and_clipped_fraction_match_numpy(dist: str, g: tuple[str, bool, bool]) -> None:
    x = _data(dist)
    s, h = _stats(x), oracle.histogram(x, 2048)
    for method in ("minmax", "percentile", "entropy", "mse"):
        rng = _range(s, method, g, percentile=99.9)
        got, want = _core.quant_estimate_sqnr_db(s, (float(rng[0]), float(rng[1])), *g), oracle.sqnr_db(h, rng, *g)
        assert got == pytest.approx(want, rel=1e-9), method
        frac = _core.quant_clipped_fraction(s, (float(rng[0]), float(rng[1])))
        assert frac == pytest.approx(oracle.clipped_fraction(h, rng), rel=1e-9, abs=1e-15), method


@pytest.mark.parametrize("g", GRIDS, ids=str)
@pytest.mark.parametrize("dist", sorted(DISTRIBUTIONS))
def test_sqnr_picks_the_method_with_the_highest_estimate(dist: str, g: tuple[str, bool, bool]) -> None:
    x = _data(dist)
    s, h = _stats(x), oracle.histogram(x, 2048)
    ranges = [_range(s, m, g, percentile=99.9) for m in ("minmax", "percentile", "entropy", "mse")]
    estimates = [oracle.sqnr_db(h, r, *g) for r in ranges]
    assert _range(s, "sqnr", g, percentile=99.9) == ranges[int(np.argmax(estimates))]


def test_clipped_fraction_is_close_to_the_share_of_values_outside() -> None:
    x = _data("student_t2", seed=3)
    s, h = _stats(x), oracle.histogram(x, 2048)
    for lo, hi in ((-1.0, 1.0), (-3.3, 0.7), (0.25, 5.0), (float(x.min()), float(x.max()))):
        exact = np.mean((x < lo) | (x > hi))
        # Only the two bins the bounds cut are estimated.
        bin_of = np.floor(np.abs(x) / h.w)
        cut = np.mean((bin_of == np.floor(abs(lo) / h.w)) | (bin_of == np.floor(abs(hi) / h.w)))
        assert abs(_core.quant_clipped_fraction(s, (lo, hi)) - exact) <= cut
    assert _core.quant_clipped_fraction(s, (float(x.min()), float(x.max()))) == 0.0


def test_percentile_100_is_minmax_and_thresholds_stay_within_absmax() -> None:
    for dist in sorted(DISTRIBUTIONS):
        x = _data(dist)
        s = _stats(x)
        for g in GRIDS:
            assert _range(s, "percentile", g, percentile=100.0) == (x.min(), x.max()), (dist, g)
            for method in ("entropy", "mse", "percentile", "sqnr"):
                lo, hi = _range(s, method, g)
                assert max(abs(lo), abs(hi)) <= np.abs(x).max(), (dist, g, method)
                _assert_valid_qparams((lo, hi), g)


@pytest.mark.parametrize("g", GRIDS, ids=str)
def test_an_outlier_is_clipped_by_every_method_but_minmax(g: tuple[str, bool, bool]) -> None:
    x = _data("one_outlier")
    s, h = _stats(x), oracle.histogram(x, 2048)
    minmax = _range(s, "minmax", g)
    assert minmax[1] == 20.0
    for method in ("percentile", "entropy", "mse", "sqnr"):
        rng = _range(s, method, g, percentile=99.99)
        assert rng[1] < 20.0, method
        assert _core.quant_clipped_fraction(s, (float(x.min()), float(rng[1]))) >= 1 / x.size
        # Percentile and entropy cut at the bulk; mse (and sqnr, which is at least as good) trade
        # the outlier's clipping error against a finer step, with less squared error than minmax.
        if method in ("percentile", "entropy"):
            assert rng[1] < 6.0, method
        else:
            assert oracle.noise(h, rng, *g) < oracle.noise(h, minmax, *g), method


def test_entropy_keeps_an_outlier_when_the_bulk_spans_fewer_bins_than_levels() -> None:
    # TensorRT's algorithm starts at 128 bins; below the outlier every such candidate has an empty
    # last bin and outliers, an infinite KL, so only the whole histogram remains.
    x = _data("far_outlier")
    h = oracle.histogram(x, 2048)
    assert np.nonzero(h.h[:-1])[0][-2] < 128
    assert _range(_stats(x), "entropy", ("int8", True, False)) == (-60.0, 60.0)


@pytest.mark.parametrize("dist", ["all_zeros", "constant"])
def test_degenerate_tensors_give_finite_ranges_and_parameters(dist: str) -> None:
    x = _data(dist)
    s = _stats(x, 16)
    for g in GRIDS:
        for method in _core.quant_method_names():
            rng = _range(s, method, g)
            assert rng[0] <= rng[1] and all(np.isfinite(rng)), (method, g)
            _assert_valid_qparams(rng, g)
    assert _range(_stats(np.zeros(5, np.float32)), "sqnr", GRIDS[0]) == (0.0, 0.0)
    assert _core.quant_estimate_sqnr_db(_stats(np.zeros(5, np.float32)), (0.0, 0.0)) == math.inf


def test_empty_statistics_give_zero_ranges() -> None:
    s = _core.TensorStats(64)
    for method in _core.quant_method_names():
        assert _core.quant_compute_range(s, method) == (0.0, 0.0)
    assert _core.quant_estimate_sqnr_db(s, (0.0, 0.0)) == math.inf
    assert _core.quant_clipped_fraction(s, (0.0, 0.0)) == 0.0


def test_ranges_are_identical_for_identical_statistics() -> None:
    x = _data("laplace", seed=9)
    a, b = _stats(x), _core.TensorStats(2048)
    b.observe(x[::-1].copy())
    for method in _core.quant_method_names():
        for g in GRIDS:
            assert _range(a, method, g) == _range(b, method, g)


def test_method_names_list_the_four_methods_then_the_chooser() -> None:
    assert _core.quant_method_names() == ["minmax", "percentile", "entropy", "mse", "sqnr"]


def test_bad_options_are_argument_errors() -> None:
    s = _stats(_data("gaussian"))
    with pytest.raises(
        tt.ArgumentError, match="unknown range method 'kl'; known methods: minmax, percentile, entropy,"
    ):
        _core.quant_compute_range(s, "kl")
    for p in (0.0, -1.0, 100.5, math.nan):
        with pytest.raises(tt.ArgumentError, match="percentile must be in \\(0, 100\\]"):
            _core.quant_compute_range(s, "percentile", percentile=p)
    with pytest.raises(tt.ArgumentError, match="entropy_levels must be at least 2, got 1"):
        _core.quant_compute_range(s, "entropy", entropy_levels=1)
    with pytest.raises(tt.ArgumentError, match="quantization grids are int8 or uint8, got float32"):
        _core.quant_compute_range(s, "mse", dtype="float32")
    with pytest.raises(tt.ArgumentError, match="range \\[2, 1\\] is not a range"):
        _core.quant_clipped_fraction(s, (2.0, 1.0))
    with pytest.raises(tt.ArgumentError, match="\\[nan, 1\\] is not a range"):
        _core.quant_estimate_sqnr_db(s, (math.nan, 1.0))
    s.negative = s.negative[:-1]
    with pytest.raises(tt.ArgumentError, match="2048 positive and 2047 negative bins"):
        _core.quant_compute_range(s, "entropy")


def test_entropy_never_collapses_a_distribution_far_from_zero() -> None:
    """A Softmax-like tensor (every value in [0.002, 0.031]): TensorRT's KL criterion alone
    would pick a threshold at its lowest values (every value an outlier: KL about 0); tether
    keeps every candidate that clips at most 1%."""
    rng = np.random.default_rng(0)
    x = rng.uniform(0.002, 0.031, 200_000).astype(np.float32)
    x[0] = 1e-4
    s = _core.TensorStats(2048)
    s.observe(x)
    for dtype, symmetric in (("int8", False), ("int8", True), ("uint8", False)):
        lo, hi = _core.quant_compute_range(s, "entropy", dtype=dtype, symmetric=symmetric)
        assert np.mean(x > hi) <= 0.01, (dtype, symmetric, hi)
