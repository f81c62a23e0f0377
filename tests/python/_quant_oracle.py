"""Independent numpy versions of the range methods of tether/quant.h, written from their
definitions (MethodOptions' doc) on histograms built from the data, never from tether's state.

Scales and zero points come from onnxruntime's compute_scale_zp, itself an oracle of
qparams_for_range, so nothing here calls tether.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.stats
from onnx import TensorProto
from onnxruntime.quantization.quant_utils import compute_scale_zp, get_qmin_qmax_for_qType

CANDIDATES = 2048  # histograms longer than this are searched at every s-th candidate


@dataclass
class Hist:
    """Histograms of |x| per sign over [0, 2^e) in `bins` bins, with the exact extremes."""

    bins: int
    e: int | None
    pos: np.ndarray
    neg: np.ndarray
    vmin: np.float32
    vmax: np.float32

    @property
    def w(self) -> float:
        return 0.0 if self.e is None else 2.0**self.e / self.bins

    @property
    def h(self) -> np.ndarray:
        return self.pos + self.neg

    @property
    def n(self) -> int:
        nz = np.nonzero(self.h)[0]
        return int(nz[-1]) + 1 if nz.size else 0

    @property
    def absmax(self) -> np.float32:
        return max(abs(self.vmin), abs(self.vmax))


def histogram(values: np.ndarray, bins: int) -> Hist:
    """Bins of |x| of width 2^e / bins, e the smallest integer with every |x| < 2^e."""
    v = values[np.isfinite(values)].astype(np.float64)
    vmin, vmax = np.float32(values[np.isfinite(values)].min()), np.float32(values[np.isfinite(values)].max())
    nonzero = np.abs(v[v != 0])
    if nonzero.size == 0:
        pos = np.zeros(bins, np.int64)
        pos[0] = v.size
        return Hist(bins, None, pos, np.zeros(bins, np.int64), vmin, vmax)
    e = int(np.floor(np.log2(nonzero.max()))) + 1
    idx = np.floor(np.abs(v) / (2.0**e / bins)).astype(np.int64)
    pos, neg = np.bincount(idx[v >= 0], minlength=bins), np.bincount(idx[v < 0], minlength=bins)
    return Hist(bins, e, pos, neg, vmin, vmax)


def grid(dtype: str, symmetric: bool, reduce_range: bool) -> tuple[np.ndarray, np.ndarray]:
    qtype = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8}[dtype]
    return get_qmin_qmax_for_qType(qtype, reduce_range=reduce_range, symmetric=symmetric)


def qparams(rmin: float, rmax: float, dtype: str, symmetric: bool, reduce_range: bool) -> tuple[np.float32, int]:
    qmin, qmax = grid(dtype, symmetric, reduce_range)
    zp, scale = compute_scale_zp(np.float32(rmin), np.float32(rmax), qmin, qmax, symmetric)
    return np.float32(scale), int(zp)


def clamp(h: Hist, lo: float, hi: float) -> tuple[np.float32, np.float32]:
    return np.float32(max(lo, float(h.vmin))), np.float32(min(hi, float(h.vmax)))


def threshold_range(h: Hist, t: float, symmetric: bool) -> tuple[np.float32, np.float32]:
    tf = np.float32(min(t, float(h.absmax)))
    if symmetric:
        return -tf, tf
    return np.clip(h.vmin, -tf, tf), np.clip(h.vmax, -tf, tf)


def stride(n: int) -> int:
    return max(1, math.ceil(n / CANDIDATES))


def minmax(h: Hist) -> tuple[np.float32, np.float32]:
    return h.vmin, h.vmax


def percentile(h: Hist, p: float, symmetric: bool) -> tuple[np.float32, np.float32]:
    if h.e is None:
        return minmax(h)
    total = h.h.sum()
    if symmetric:
        k = int(np.argmax(np.cumsum(h.h) >= p / 100.0 * total))
        t = (k + 1) * h.w
        return clamp(h, -t, t)
    signed = np.concatenate([h.neg[::-1], h.pos])  # signed bin m covers [(m - bins) w, (m - bins + 1) w)
    cum = np.cumsum(signed)
    cut = (100.0 - p) / 200.0
    lo = int(np.argmax(cum >= cut * total))
    hi = int(np.argmax(cum >= (1.0 - cut) * total))
    return clamp(h, (lo - h.bins) * h.w, (hi - h.bins + 1) * h.w)


def entropy_choice(h: Hist, levels: int) -> int | None:
    """The bin count i chosen by NVIDIA pytorch-quantization's _compute_amax_entropy, step by
    step as published (np.digitize over a linspace, scipy's entropy), on h[:n] with bin 0 set
    to bin 1; candidates from the top with ties to the largest i, leaving out (as tether does)
    thresholds with more than 1% of the values beyond them. None when n < levels."""
    n = h.n
    if n < levels:
        return None
    bins = h.h[:n].astype(np.int64).copy()
    bins[0] = bins[1]
    best_i, best_kl = None, math.inf
    for i in range(n, levels - 1, -stride(n)):
        space = np.linspace(0, i, num=levels + 1)
        digitized = np.digitize(np.arange(i), space) - 1
        digitized[bins[:i] == 0] = -1
        keep = digitized != -1
        counts = np.bincount(digitized[keep], weights=bins[:i][keep], minlength=levels)
        nonempty = np.bincount(digitized[keep], minlength=levels)
        new_density = np.zeros(i)
        new_density[keep] = counts[digitized[keep]] / nonempty[digitized[keep]]
        if bins[i:].sum() > 0.01 * bins.sum():
            continue  # tether's guard: no threshold clipping more than 1% of the values
        reference = bins[:i].astype(np.float64)
        reference[-1] += bins[i:].sum()
        kl = scipy.stats.entropy(reference, new_density)
        if kl < best_kl:
            best_i, best_kl = i, kl
    return best_i


def entropy(h: Hist, levels: int, symmetric: bool) -> tuple[np.float32, np.float32]:
    i = entropy_choice(h, levels) if h.e is not None else None
    if i is None:
        return minmax(h)
    return threshold_range(h, i * h.w, symmetric)


def noise(h: Hist, rng: tuple[float, float], dtype: str, symmetric: bool, reduce_range: bool) -> float:
    """Sum over bins of count * (x - q(x))^2 with x the bin centres, q quantize-dequantize."""
    qmin, qmax = (int(v) for v in grid(dtype, symmetric, reduce_range))
    scale, zp = qparams(rng[0], rng[1], dtype, symmetric, reduce_range)
    centres = (np.arange(h.bins) + 0.5) * h.w
    x = np.concatenate([centres, -centres])
    c = np.concatenate([h.pos, h.neg]).astype(np.float64)
    q = np.clip(np.rint(x / np.float64(scale)) + zp, qmin, qmax)
    deq = (q - zp) * np.float64(scale)
    return float(np.sum(c * (x - deq) ** 2))


def sqnr_db(h: Hist, rng: tuple[float, float], dtype: str, symmetric: bool, reduce_range: bool) -> float:
    centres = (np.arange(h.bins) + 0.5) * h.w
    signal = float(np.sum((h.pos + h.neg) * centres**2))
    err = noise(h, rng, dtype, symmetric, reduce_range)
    return math.inf if err == 0 else 10 * math.log10(signal / err)


def mse(h: Hist, dtype: str, symmetric: bool, reduce_range: bool) -> tuple[np.float32, np.float32]:
    if h.e is None:
        return minmax(h)
    best, best_range = math.inf, minmax(h)
    for k in range(h.n - 1, -1, -stride(h.n)):
        rng = threshold_range(h, (k + 1) * h.w, symmetric)
        err = noise(h, rng, dtype, symmetric, reduce_range)
        if err < best:
            best, best_range = err, rng
    return best_range


def clipped_fraction(h: Hist, rng: tuple[float, float]) -> float:
    """Share outside rng of each bin's values spread uniformly over the bin within [min, max]."""
    lo, hi = float(rng[0]), float(rng[1])
    vmin, vmax = float(h.vmin), float(h.vmax)
    out = 0.0
    for i in range(h.bins):
        for count, a in ((h.pos[i], i * h.w), (h.neg[i], -(i + 1) * h.w)):
            if count == 0:
                continue
            start, end = max(a, vmin), min(a + h.w, vmax)
            if end > start:
                inside = max(0.0, min(hi, end) - max(lo, start)) / (end - start)
            else:
                inside = 0.0 if (start < lo or start > hi) else 1.0
            out += count * (1.0 - inside)
    return out / float(h.h.sum())
