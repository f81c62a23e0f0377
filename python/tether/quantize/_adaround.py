"""AdaRound (Nagel et al., "Up or Down? Adaptive Rounding for Post-Training Quantization", 2020):
each weight is rounded up or down, whichever the layer's output needs, instead of to nearest.

For a layer ``y = W x`` with weight scale ``s`` (and zero point ``z``), the rounded weight is
``s (clip(floor(W / s) + h(V) + z, qmin, qmax) - z)`` with the rectified sigmoid
``h(V) = clip(sigmoid(V) (zeta - gamma) + gamma, 0, 1)``, ``zeta = 1.1``, ``gamma = -0.1``.
``V`` minimises the output reconstruction error ``||W x - W~ x||^2`` (mean over output
elements) plus ``reg * sum(1 - |2 h(V) - 1|^beta)``, beta annealed from high to low so that
every ``h`` ends at 0 or 1; the weight's integer is then ``floor(W / s) + [V >= 0] + z``.

The error is quadratic in ``W~``: ``sum over rows of (W~ - W) H (W~ - W)^T`` with ``H = sum x x^T``
over every calibration sample and output position, so ``H`` (float64, one per layer and group)
is all the optimisation reads. It is accumulated sample by sample in stream order, which makes
it, and the learned rounding, the same bytes whatever the batching; the optimisation is
full-batch Adam from a fixed start, with no randomness.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tether._model import Model
from tether._native import core as _core
from tether.quantize._bias_correction import LayerInputs, _conv_pads
from tether.quantize._equalize import (
    _GRAPH,
    _INITIALIZER,
    _delimited,
    _fields,
    _payload,
    _tensor_name,
    _varint,
)
from tether.quantize._equalize import ALGORITHMS as _REWRITES

#: The names ``tt.quantize.static(..., algorithms=[...])`` takes.
ALGORITHMS = (*_REWRITES, "adaround")

#: Layers whose outputs each read more inputs than this keep round-to-nearest: the K x K float64
#: second-moment matrix (128 MiB here) and each step's cost grow with K squared.
MAX_INPUTS = 4096

_ZETA, _GAMMA = 1.1, -0.1
# ONNX TensorProto data types of the weight grids.
_ONNX_DTYPES = {np.dtype(np.int8): 3, np.dtype(np.uint8): 2}


@dataclass(frozen=True)
class AdaRound:
    """Options of AdaRound (``tt.quantize.static(..., algorithms=["adaround"], adaround=...)``).

    ``iterations``: Adam steps per layer; ``lr``: Adam's step size on ``V``; ``reg``: weight of
    the rounding regulariser against the reconstruction error (both normalised: the error by
    round-to-nearest's, the regulariser by the number of weights); ``beta``: (start, end) of the
    regulariser's exponent, annealed linearly after ``warm_start`` (the share of iterations run
    on the reconstruction error alone); ``time_budget_s``: seconds for every layer together (None:
    no limit). When the budget runs out, the layer being optimised is rounded as it stands and
    the remaining layers keep round-to-nearest; the report's notes say which. Only a run that
    finishes within its budget is reproducible byte for byte.

    Example:
        >>> opts = tt.quantize.AdaRound(iterations=500, time_budget_s=60)
        >>> res = tt.quantize.static("cnn.onnx", x_calib, algorithms=["adaround"],
        ...                          adaround=opts)                       # doctest: +SKIP
    """

    iterations: int = 1000
    lr: float = 0.01
    reg: float = 3.0
    beta: tuple[float, float] = (20.0, 2.0)
    warm_start: float = 0.2
    time_budget_s: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.iterations, bool) or not isinstance(self.iterations, int) or self.iterations < 1:
            raise _core.ArgumentError(f"AdaRound: iterations must be an int >= 1, got {self.iterations!r}")
        for name in ("lr", "reg", "warm_start"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise _core.ArgumentError(f"AdaRound: {name} must be a finite number >= 0, got {v!r}")
        if self.lr <= 0 or self.warm_start >= 1:
            raise _core.ArgumentError(f"AdaRound: lr must be > 0 and warm_start < 1, got lr={self.lr!r}, "
                                      f"warm_start={self.warm_start!r}")
        b = self.beta
        if (not isinstance(b, tuple | list) or len(b) != 2
                or not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0
                           for v in b)):
            raise _core.ArgumentError(f"AdaRound: beta must be (start, end), two finite numbers > 0, got {b!r}")
        t = self.time_budget_s
        if t is not None and (isinstance(t, bool) or not isinstance(t, int | float) or not t > 0):
            raise _core.ArgumentError(f"AdaRound: time_budget_s must be a number > 0 or None, got {t!r}")


@dataclass
class _Layer:
    node: str
    op_type: str
    data: str  # the activation input
    weight: str  # the float initializer
    groups: int
    attrs: dict[str, Any]
    hessian: np.ndarray | None = None  # [groups, K, K] float64: sum of x x^T, added in stream order
    count: int = 0  # how many (sample, position) terms it holds
    scale_sq: float = 1.0  # Gemm's alpha squared: it scales the output


@dataclass
class _Rounding:
    """Working state of one layer's weight, in its ONNX layout."""

    floor: np.ndarray  # floor(w / s) as float64
    scale: np.ndarray  # broadcast to the weight's shape
    zero: np.ndarray
    lo: int
    hi: int
    notes: list[str] = field(default_factory=list)

    def dequantized(self, h: np.ndarray) -> np.ndarray:
        return self.scale * (np.clip(self.floor + h + self.zero, self.lo, self.hi) - self.zero)

    def integers(self, up: np.ndarray) -> np.ndarray:
        return np.clip(self.floor + up + self.zero, self.lo, self.hi)


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """Small products run faster on one BLAS thread than on several contending for busy cores,
    and give the same bits whatever the machine's core count."""
    try:
        from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]
    except ImportError:
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def _grid_bounds(options: dict[str, Any]) -> tuple[int, int]:
    """[qmin, qmax] of the weight grid, as tether's quantizer sets them."""
    g = options.get("weights", {})
    rr = bool(g.get("reduce_range", False))
    if g.get("dtype", "int8") == "uint8":
        return 0, 127 if rr else 255
    if rr:
        return -64, 64
    return (-127 if g.get("symmetric", True) else -128), 127


def _inputs_per_output(la: _Layer, w_shape: tuple[int, ...]) -> int:
    """K: how many inputs each output of the layer reads (H is K x K per group)."""
    if la.op_type == "Conv":
        return int(np.prod(w_shape[1:]))
    return int(w_shape[1] if la.op_type == "Gemm" and la.attrs.get("transB", 0) else w_shape[0])


def _rows(la: _Layer, a: np.ndarray) -> np.ndarray:
    """A weight-shaped array as ``[groups, outputs per group, K]``: the rows the output is ``row . x``."""
    if la.op_type == "Conv":
        return a.reshape(la.groups, a.shape[0] // la.groups, -1)
    if la.op_type == "Gemm" and la.attrs.get("transB", 0):
        return a[None]
    return a.T[None]


def _conv_patches(x: np.ndarray, w_shape: tuple[int, ...], attrs: dict[str, Any], groups: int) -> np.ndarray:
    """Per sample and group, the input each output position reads: ``[N, groups, P, K]`` (float64),
    K ordered as the weight's (channel, kernel taps)."""
    spatial = len(w_shape) - 2
    strides = list(attrs.get("strides", [1] * spatial))
    dil = list(attrs.get("dilations", [1] * spatial))
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), *_conv_pads(x.shape, w_shape, attrs)])
    kernel = w_shape[2:]
    outs = [(xp.shape[2 + i] - dil[i] * (kernel[i] - 1) - 1) // strides[i] + 1 for i in range(spatial)]
    taps = []
    for tap in itertools.product(*(range(k) for k in kernel)):
        index = tuple(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in zip(tap, dil, outs, strides,
                                                                                     strict=True))
        taps.append(xp[(slice(None), slice(None), *index)].reshape(x.shape[0], x.shape[1], -1))
    cols = np.stack(taps, axis=2)  # [N, C, taps, P]
    n, c, t, p = cols.shape
    return np.ascontiguousarray(cols.reshape(n, groups, (c // groups) * t, p).transpose(0, 1, 3, 2))


class AdaRounder:
    """Finds the Conv/Gemm/MatMul layers a plan quantizes, accumulates the second moments of their
    float inputs batch by batch, and learns each weight's rounding.

    Example:
        >>> ar = AdaRounder(cal.model, cal.plan, cal.options, tt.quantize.AdaRound())   # doctest: +SKIP
        >>> for feeds in batches: ar.observe(feeds)                                    # doctest: +SKIP
        >>> rounding, notes = ar.learn(qdq_model)                                      # doctest: +SKIP
        >>> rounded = apply_rounding(qdq_model, rounding)                              # doctest: +SKIP
    """

    def __init__(self, model: Model, plan: Any, options: dict[str, Any], config: AdaRound,
                 threads: int | None = None) -> None:
        self.model = model
        self.config = config
        self.bounds = _grid_bounds(options)
        self.notes: list[str] = []
        nodes = {n.name: n for n in model.nodes}
        readers: dict[str, int] = {}
        for node in model.nodes:
            for i in node.inputs:
                readers[i] = readers.get(i, 0) + 1
        self.layers: list[_Layer] = []
        for p in plan.nodes:
            n = nodes.get(p.node)
            if n is None or p.op_type not in ("Conv", "Gemm", "MatMul") or len(n.inputs) < 2 or p.weight != n.inputs[1]:
                continue
            w = model.initializer(p.weight)
            why = None
            if w.dtype != np.float32:
                why = f"its weight is {w.dtype}"
            elif readers.get(p.weight, 0) > 1:
                why = "its weight is read by another node too"
            elif p.op_type == "MatMul" and w.ndim != 2:
                why = f"its weight has rank {w.ndim} (AdaRound takes 2-D MatMul weights)"
            elif p.op_type == "Gemm" and n.attributes.get("transA", 0):
                why = "it transposes its input (transA)"
            elif p.op_type == "Conv" and w.ndim < 3:
                why = f"its weight has rank {w.ndim}"
            elif (k := _inputs_per_output(_Layer(n.name, p.op_type, "", "", 1, dict(n.attributes)), w.shape)) \
                    > MAX_INPUTS:
                why = f"each output reads {k} inputs, more than {MAX_INPUTS} (H alone would take {k * k * 8 >> 20} MiB)"
            if why:
                self.notes.append(f"adaround: '{n.name}' ({n.op_type}) keeps round-to-nearest: {why}")
                continue
            groups = int(n.attributes.get("group", 1)) if p.op_type == "Conv" else 1
            la = _Layer(n.name, p.op_type, n.inputs[0], p.weight, groups, dict(n.attributes))
            if p.op_type == "Gemm":
                la.scale_sq = float(n.attributes.get("alpha", 1.0)) ** 2
            self.layers.append(la)
        self._inputs = LayerInputs(model, {la.data for la in self.layers}, threads)

    def observe(self, feeds: dict[str, np.ndarray]) -> None:
        """Adds one batch's float layer inputs to each layer's ``H``."""
        if not self.layers:
            return
        got = self._inputs.values(feeds)
        with _one_blas_thread():
            for la in self.layers:
                x = got.get(la.data)
                if x is None:
                    raise _core.InternalError(f"adaround: the input '{la.data}' of '{la.node}' was not captured")
                self._add(la, np.asarray(x))

    def _add(self, la: _Layer, x: np.ndarray) -> None:
        w_shape = self.model.initializer(la.weight).shape
        if la.hessian is None:
            la.hessian = np.zeros((la.groups, _inputs_per_output(la, w_shape), _inputs_per_output(la, w_shape)))
        rows = x.reshape(x.shape[0] if x.ndim > 1 else 1, -1, x.shape[-1]) if la.op_type != "Conv" else x
        for i in range(rows.shape[0]):  # one sample at a time, in stream order: H ignores the batching
            if la.op_type == "Conv":  # im2col of one sample only: memory stays one sample's patches
                sample = _conv_patches(x[i:i + 1], w_shape, la.attrs, la.groups)[0]
            else:
                sample = rows[i].astype(np.float64)[None]
            for g in range(la.groups):
                la.hessian[g] += sample[g].T @ sample[g]
            la.count += sample.shape[1]

    def _weight_params(self, qdq: Model) -> dict[str, tuple[str, np.ndarray, np.ndarray, int | None]]:
        """Per quantized layer, the integer initializer, scale, zero point and axis its
        DequantizeLinear holds in ``qdq``."""
        producers = {o: n for n in qdq.nodes for o in n.outputs}
        inits = set(qdq.initializer_names)
        out = {}
        for n in qdq.nodes:
            if n.name not in {la.node for la in self.layers} or len(n.inputs) < 2:
                continue
            dq = producers.get(n.inputs[1])
            if dq is None or dq.op_type != "DequantizeLinear" or not all(i in inits for i in dq.inputs[:2]):
                continue
            zp = (qdq.initializer(dq.inputs[2]) if len(dq.inputs) > 2 and dq.inputs[2]
                  else np.zeros((), np.int64)).astype(np.int64)
            axis = int(dq.attributes["axis"]) if "axis" in dq.attributes else None
            out[n.name] = (dq.inputs[0], qdq.initializer(dq.inputs[1]), zp, axis)
        return out

    def learn(self, qdq: Model) -> tuple[dict[str, np.ndarray], list[str]]:
        """The learned integer weights by initializer name of ``qdq`` (the model with
        round-to-nearest weights, whose scales and zero points stay), and notes."""
        params = self._weight_params(qdq)
        rounding: dict[str, np.ndarray] = {}
        notes = list(self.notes)
        start = time.monotonic()
        budget = self.config.time_budget_s
        deadline = None if budget is None else start + budget
        kept, flipped, stopped = [], 0, None
        for la in self.layers:
            if la.node not in params or la.hessian is None or la.count == 0:
                continue
            name, scale, zp, axis = params[la.node]
            if deadline is not None and time.monotonic() >= deadline:
                kept.append(la.node)
                continue
            with _one_blas_thread():
                q, changed, done = self._learn_layer(la, qdq.initializer(name), scale, zp, axis, deadline)
            if not done and stopped is None:
                stopped = la.node
            rounding[name] = q
            flipped += changed
        listed = ", ".join(la.node for la in self.layers if la.node in params)
        notes.append(f"adaround: {len(rounding)} weights rounded by learning ({listed}); {flipped} integers differ "
                     "from round-to-nearest")
        if stopped is not None or kept:
            notes.append(f"adaround: the time budget of {budget:g} s ran out after {time.monotonic() - start:.1f} s"
                         + (f"; '{stopped}' was rounded as far as it had learned" if stopped else "")
                         + (f"; round-to-nearest kept for {kept}" if kept else ""))
        return rounding, notes

    def _learn_layer(self, la: _Layer, q_rtn: np.ndarray, scale: np.ndarray, zp: np.ndarray, axis: int | None,
                     deadline: float | None) -> tuple[np.ndarray, int, bool]:
        """The layer's integer weights (the dtype of ``q_rtn``), how many differ from it, and whether
        every iteration ran."""
        w = self.model.initializer(la.weight)
        shape = [1] * w.ndim
        if axis is not None:
            shape[axis] = -1
        s32 = np.asarray(scale, np.float32).reshape(shape)
        # w / s in float32, as the quantizer divides, so that floor <= round-to-nearest <= floor + 1.
        ratio = (w / s32).astype(np.float64)
        r = _Rounding(np.floor(ratio), np.broadcast_to(s32.astype(np.float64), w.shape),
                      np.broadcast_to(zp.reshape(shape).astype(np.float64), w.shape), *self.bounds)
        assert la.hessian is not None
        hess = la.hessian * (la.scale_sq / la.count)
        w64 = w.astype(np.float64)

        def error_rows(wq: np.ndarray) -> np.ndarray:
            """Per output row, the mean squared output error over calibration positions."""
            d = _rows(la, wq - w64)
            return np.sum((d @ hess) * d, axis=2)

        rtn = q_rtn.astype(np.float64)
        rtn_up = np.clip(rtn - r.zero - r.floor, 0.0, 1.0)
        v, done = self._optimise(la, r, w64, hess, ratio - r.floor, rtn_up, deadline)
        up = (v >= 0).astype(np.float64)
        # Keep whichever of learned and nearest rounding reconstructs each output row better, so
        # that the calibration error never exceeds round-to-nearest's.
        learned_err, rtn_err = error_rows(r.dequantized(up)), error_rows(r.dequantized(rtn_up))
        worse = learned_err > rtn_err
        if worse.any():
            k = hess.shape[-1]
            mask = self._from_rows(la, np.repeat(worse[:, :, None], k, axis=2), w.shape)
            up = np.where(mask, rtn_up, up)
        q = r.integers(up).astype(q_rtn.dtype)
        return q, int(np.count_nonzero(q != q_rtn)), done

    @staticmethod
    def _from_rows(la: _Layer, rows: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        if la.op_type == "Conv":
            return rows.reshape(shape)
        if la.op_type == "Gemm" and la.attrs.get("transB", 0):
            return rows[0]
        return rows[0].T

    def _optimise(self, la: _Layer, r: _Rounding, w: np.ndarray, hess: np.ndarray, frac: np.ndarray,
                  rtn_up: np.ndarray, deadline: float | None) -> tuple[np.ndarray, bool]:
        """Adam on V from ``h(V) = frac``; returns V and whether every iteration ran."""
        cfg = self.config
        p = np.clip((frac - _GAMMA) / (_ZETA - _GAMMA), 1e-6, 1 - 1e-6)
        v = np.log(p / (1 - p))
        m1, m2 = np.zeros_like(v), np.zeros_like(v)
        d_rtn = _rows(la, r.dequantized(rtn_up) - w)
        norm = float(np.sum((d_rtn @ hess) * d_rtn))
        norm = norm if norm > 0 and math.isfinite(norm) else 1.0
        free = (r.floor + r.zero >= r.lo) & (r.floor + 1 + r.zero <= r.hi)  # clipping leaves no choice elsewhere
        warm = int(cfg.warm_start * cfg.iterations)
        b0, b1 = float(cfg.beta[0]), float(cfg.beta[1])
        reg = cfg.reg / max(v.size, 1)
        for it in range(cfg.iterations):
            if deadline is not None and it % 25 == 0 and time.monotonic() >= deadline:
                return v, False
            sig = 1.0 / (1.0 + np.exp(-v))
            raw = sig * (_ZETA - _GAMMA) + _GAMMA
            h = np.clip(raw, 0.0, 1.0)
            d = _rows(la, r.dequantized(h) - w)
            grad_w = self._from_rows(la, 2.0 * (d @ hess), w.shape) / norm
            grad_h = grad_w * r.scale * free
            if it >= warm:
                t = (it - warm) / max(cfg.iterations - warm, 1)
                beta = b1 + (b0 - b1) * (1.0 - t)
                c = 2.0 * h - 1.0
                grad_h = grad_h - reg * beta * np.abs(c) ** (beta - 1.0) * np.sign(c) * 2.0
            g = grad_h * ((raw > 0) & (raw < 1)) * (_ZETA - _GAMMA) * sig * (1.0 - sig)
            m1 = 0.9 * m1 + 0.1 * g
            m2 = 0.999 * m2 + 0.001 * g * g
            step = (m1 / (1 - 0.9 ** (it + 1))) / (np.sqrt(m2 / (1 - 0.999 ** (it + 1))) + 1e-8)
            v = v - cfg.lr * step
        return v, True


def apply_rounding(model: Model, rounding: dict[str, np.ndarray]) -> Model:
    """A copy of ``model`` whose integer initializers named in ``rounding`` hold those values
    (initializers it lacks, or of another shape or dtype, are left alone: a node kept in float
    has no integer weight). Everything else is the bytes the model writes."""
    present = {}
    names = set(model.initializer_names)
    for key, ints in rounding.items():
        if key in names:
            old = model.initializer(key)
            if old.shape == ints.shape and old.dtype == ints.dtype:
                present[key] = ints
    if not present:
        return model
    from tether._model import load

    fields = []
    for number, wire, data in _fields(model.to_bytes()):
        if number == _GRAPH and wire == 2:
            parts = []
            for n2, w2, f2 in _fields(_payload(data)):
                name = _tensor_name(_payload(f2)) if n2 == _INITIALIZER and w2 == 2 else None
                parts.append(f2 if name is None or name not in present
                             else _delimited(_INITIALIZER, _int_tensor(name, present[name])))
            data = _delimited(_GRAPH, b"".join(parts))
        fields.append(data)
    return load(b"".join(fields))


def _int_tensor(name: str, array: np.ndarray) -> bytes:
    # TensorProto fields: dims = 1, data_type = 2, name = 8, raw_data = 9.
    dims = b"".join(_varint(1 << 3) + _varint(int(d)) for d in array.shape)
    return (dims + _varint(2 << 3) + _varint(_ONNX_DTYPES[array.dtype]) + _delimited(8, name.encode())
            + _delimited(9, np.ascontiguousarray(array).tobytes()))


def split_algorithms(algorithms: Any, options: AdaRound | None) -> tuple[list[str], AdaRound | None]:
    """``algorithms`` (names, or :class:`AdaRound` instances standing for ``"adaround"`` with those
    options) as the rewrite names for :func:`check_algorithms` and AdaRound's options (None when
    it is not asked for). ``options`` alone does not ask for it."""
    items = [algorithms] if isinstance(algorithms, str | AdaRound) else list(algorithms)
    names: list[Any] = []
    chosen: AdaRound | None = None
    for item in items:
        if isinstance(item, AdaRound):
            chosen = item
        elif item == "adaround":
            chosen = chosen or options or AdaRound()
        elif isinstance(item, str) and item in ALGORITHMS:
            names.append(item)
        else:
            raise _core.ArgumentError(f"unknown quantization algorithm {item!r}; known: {list(ALGORITHMS)}")
    if options is not None and not isinstance(options, AdaRound):
        raise _core.ArgumentError(f"adaround= takes tt.quantize.AdaRound(...), got {type(options).__name__}")
    return names, chosen
