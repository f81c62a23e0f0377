"""Empirical bias correction (Nagel et al., "Data-Free Quantization Through Weight Equalization
and Bias Correction", 2019; NNCF's bias correction): quantizing a layer's weights shifts the mean
of its output by ``E[W_q x] - E[W x] = (W_q - W) E[x]`` per output channel (for a convolution,
``E[x]`` is the mean of each input channel at each kernel tap). Subtracting that shift from the
bias, with ``E[x]`` measured on the calibration batches through the float model, removes the
systematic part of the weight quantization error.

The means are accumulated sample by sample in float64, in stream order, from per-sample sums that
depend on that sample alone: the result is the same bytes whatever the batching, and the memory
held is one sum per (input channel, kernel tap) per layer.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tether._model import Model
from tether._native import core as _core
from tether.quantize._equalize import _Graph, with_initializers


@dataclass
class _Layer:
    node: str
    op_type: str
    data: str  # the activation input
    weight: str
    bias: str  # the initializer the correction is subtracted from
    attrs: dict[str, Any]
    sum: np.ndarray | None = None  # float64 per-sample sums, added in stream order
    count: int = 0  # how many (sample, position) terms the sums hold


def _conv_pads(x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict[str, Any]) -> list[tuple[int, int]]:
    """Per spatial axis, the (begin, end) zero padding the Conv applies."""
    spatial = len(w_shape) - 2
    strides = list(attrs.get("strides", [1] * spatial))
    dil = list(attrs.get("dilations", [1] * spatial))
    auto = attrs.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for i in range(spatial):
            size, k = x_shape[2 + i], w_shape[2 + i]
            total = max((math.ceil(size / strides[i]) - 1) * strides[i] + (k - 1) * dil[i] + 1 - size, 0)
            small, big = total // 2, total - total // 2
            out.append((small, big) if auto == "SAME_UPPER" else (big, small))
        return out
    if auto == "VALID":
        return [(0, 0)] * spatial
    pads = list(attrs.get("pads", [0] * 2 * spatial))
    return [(int(pads[i]), int(pads[i + spatial])) for i in range(spatial)]


def _conv_tap_sums(x: np.ndarray, w_shape: tuple[int, ...], attrs: dict[str, Any]) -> tuple[np.ndarray, int]:
    """Per sample, the sum over output positions of the input each kernel tap reads, shape
    ``[N, C, *kernel]`` (float64), and the number of output positions."""
    spatial = len(w_shape) - 2
    strides = list(attrs.get("strides", [1] * spatial))
    dil = list(attrs.get("dilations", [1] * spatial))
    pads = _conv_pads(x.shape, w_shape, attrs)
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), *pads])
    kernel = w_shape[2:]
    outs = [(xp.shape[2 + i] - dil[i] * (kernel[i] - 1) - 1) // strides[i] + 1 for i in range(spatial)]
    sums: np.ndarray[Any, Any] = np.empty(x.shape[:2] + tuple(kernel))
    for tap in itertools.product(*(range(k) for k in kernel)):
        index = tuple(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in zip(tap, dil, outs, strides,
                                                                                     strict=True))
        window = np.ascontiguousarray(xp[(slice(None), slice(None), *index)])
        at: tuple[Any, ...] = (slice(None), slice(None), *tap)
        sums[at] = window.reshape(x.shape[0], x.shape[1], -1).sum(axis=2)
    return sums, int(np.prod(outs))


def add_zero_biases(model: Model) -> tuple[Model, list[str]]:
    """A copy of a prepared model in which every Conv and Gemm with a float32 constant weight
    and no bias gets a zero bias of its own (the same function), so that bias correction has a
    bias to correct; and the names of those nodes."""
    from onnx import numpy_helper

    from tether.edit._proto import from_proto, to_proto

    graph = _Graph(model)
    feeds = {i.name for i in model.inputs}
    used = {v for n in model.nodes for v in (*n.inputs, *n.outputs)} | set(model.initializer_names)
    proto = None
    added = []
    for i, n in enumerate(model.nodes):
        if (n.op_type not in ("Conv", "Gemm") or n.domain not in ("", "ai.onnx") or len(n.inputs) != 2
                or n.inputs[1] not in graph.inits or n.inputs[1] in feeds):
            continue
        w = model.initializer(n.inputs[1])
        if w.dtype != np.float32 or w.ndim < 2 or (n.op_type == "Gemm" and float(n.attributes.get("beta", 1.0)) == 0.0):
            continue
        channels = w.shape[0] if n.op_type == "Conv" or n.attributes.get("transB", 0) else w.shape[1]
        name = f"{n.name}.bias"
        while name in used:
            name += "_"
        used.add(name)
        proto = proto or to_proto(model)
        proto.graph.initializer.append(numpy_helper.from_array(np.zeros(channels, np.float32), name))
        proto.graph.node[i].input.append(name)
        added.append(n.name)
    return (model if proto is None else from_proto(proto)), added


class LayerInputs:
    """The float model's values at the given layer inputs for one batch, by a session compiled on
    first use that keeps them (graph inputs come from the feeds)."""

    def __init__(self, model: Model, names: set[str], threads: int | None) -> None:
        self.model = model
        self.captured = sorted(names - {i.name for i in model.inputs})
        self.threads = threads
        self._session: Any = None

    def values(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._session is None:
            from tether._session import compile as compile_model

            self._session = compile_model(self.model, threads=self.threads, keep=self.captured)
        _, values = self._session._core.run_capture(dict(feeds), self.captured)
        return {**dict(values), **feeds}


class BiasCorrector:
    """Finds the layers of a prepared model whose bias can absorb the correction, accumulates the
    means of their float inputs batch by batch, and writes the corrected model.

    Example:
        >>> bc = BiasCorrector(cal.model, cal.plan)                     # doctest: +SKIP
        >>> for feeds in batches: bc.observe(feeds)                     # doctest: +SKIP
        >>> corrected, originals, notes = bc.correct(folded_qdq_model)  # doctest: +SKIP
    """

    def __init__(self, model: Model, plan: Any, threads: int | None = None) -> None:
        self.model = model
        self.notes: list[str] = []
        graph = _Graph(model)
        nodes = {n.name: n for n in model.nodes}
        self.layers: list[_Layer] = []
        for p in plan.nodes:
            n = nodes.get(p.node)
            if n is None or p.op_type not in ("Conv", "Gemm", "MatMul") or len(n.inputs) < 2 or p.weight != n.inputs[1]:
                continue
            if model.initializer(p.weight).dtype != np.float32:
                continue
            bias = self._bias(n, graph)
            if bias is None:
                self.notes.append(f"bias correction: '{n.name}' ({n.op_type}) has no float32 bias of its own to "
                                  "correct; left as it is")
                continue
            self.layers.append(_Layer(n.name, n.op_type, n.inputs[0], p.weight, bias, dict(n.attributes)))
        self._inputs = LayerInputs(model, {la.data for la in self.layers}, threads)

    def _bias(self, n: Any, graph: _Graph) -> str | None:
        """The single-use float32 initializer that is ``n``'s bias: Conv's third input, Gemm's C,
        or for a MatMul the constant of the Add that alone reads its output."""
        w = self.model.initializer(n.inputs[1])
        if n.op_type in ("Conv", "Gemm"):
            name = n.inputs[2] if len(n.inputs) > 2 else ""
            channels = w.shape[0] if n.op_type == "Conv" or n.attributes.get("transB", 0) else w.shape[-1]
            if n.op_type == "Gemm" and float(n.attributes.get("beta", 1.0)) == 0.0:
                return None
        else:
            add = graph.sole_reader(n.outputs[0])
            if w.ndim != 2 or add is None or add.op_type != "Add" or len(add.inputs) != 2:
                return None
            name = add.inputs[1] if add.inputs[0] == n.outputs[0] else add.inputs[0]
            channels = w.shape[1]
        if not name or name not in graph.single_use:
            return None
        b = self.model.initializer(name)
        if b.dtype != np.float32 or b.size != channels or (b.ndim > 0 and b.shape[-1] != channels):
            return None
        return name

    def observe(self, feeds: dict[str, np.ndarray]) -> None:
        """Adds one batch's float layer inputs to the per-layer sums."""
        if not self.layers:
            return
        got = self._inputs.values(feeds)
        for la in self.layers:
            x = got.get(la.data)
            if x is None:
                raise _core.InternalError(f"bias correction: the input '{la.data}' of '{la.node}' was not captured")
            self._add(la, np.asarray(x))

    def _add(self, la: _Layer, x: np.ndarray) -> None:
        w_shape = self.model.initializer(la.weight).shape
        if la.op_type == "Conv":
            per_sample, positions = _conv_tap_sums(x, w_shape, la.attrs)
        elif la.op_type == "Gemm":
            a = x.T if la.attrs.get("transA", 0) else x
            per_sample, positions = a.astype(np.float64), 1
        else:
            rows = x.reshape(x.shape[0], -1, x.shape[-1]) if x.ndim > 1 else x.reshape(1, 1, -1)
            per_sample = np.ascontiguousarray(np.swapaxes(rows.astype(np.float64), 1, 2)).sum(axis=2)
            positions = rows.shape[1]
        if la.sum is None:
            la.sum = np.zeros(per_sample.shape[1:])
        for row in per_sample:  # one sample at a time, in order: the sums ignore the batching
            la.sum += row
        la.count += per_sample.shape[0] * positions

    def shifts(self, quantized: Model) -> dict[str, np.ndarray]:
        """Per layer (by node name), ``E[W_q x] - E[W x]`` per output channel (float64), with
        ``W_q`` read from ``quantized``: the QDQ model with its weights dequantized (see
        ``_core.quant_fold_dequantized_constants``). Layers whose weight it left in float are absent."""
        qnodes = {n.name: n for n in quantized.nodes}
        out: dict[str, np.ndarray] = {}
        for la in self.layers:
            qn = qnodes.get(la.node)
            if qn is None or la.sum is None or la.count == 0 or len(qn.inputs) < 2 or qn.inputs[1] == la.weight:
                continue
            w = self.model.initializer(la.weight).astype(np.float64)
            dw = quantized.initializer(qn.inputs[1]).astype(np.float64) - w
            mean = la.sum / la.count
            if la.op_type == "Conv":
                groups = int(la.attrs.get("group", 1))
                d = dw.reshape(groups, dw.shape[0] // groups, -1)
                out[la.node] = np.einsum("gok,gk->go", d, mean.reshape(groups, -1)).reshape(-1)
            elif la.op_type == "Gemm":
                dw_nk = dw if la.attrs.get("transB", 0) else dw.T
                alpha, beta = float(la.attrs.get("alpha", 1.0)), float(la.attrs.get("beta", 1.0))
                out[la.node] = alpha * (dw_nk @ mean) / beta
            else:
                out[la.node] = mean @ dw
        return out

    def correct(self, quantized: Model) -> tuple[Model, dict[str, tuple[str, np.ndarray]], list[str]]:
        """The model with each corrected bias replaced by ``b - shift`` (float32), the original
        biases by node (so that a node kept in float can have its own back), and notes."""
        shifts = self.shifts(quantized)
        changed, originals = {}, {}
        for la in self.layers:
            if la.node in shifts:
                b = self.model.initializer(la.bias)
                changed[la.bias] = (b.astype(np.float64) - shifts[la.node].reshape(b.shape)).astype(np.float32)
                originals[la.node] = (la.bias, b)
        listed = ", ".join(list(originals)[:10]) + (", ..." if len(originals) > 10 else "")
        notes = [*self.notes, f"bias correction: {len(changed)} biases corrected" + (f" ({listed})" if listed else "")]
        return (with_initializers(self.model, changed) if changed else self.model), originals, notes
