"""Cross-layer equalization (Nagel et al., "Data-Free Quantization Through Weight Equalization
and Bias Correction", 2019): per-channel rescaling of consecutive convolutions so that each
channel's weights span the same range in both, which per-tensor INT8 weights need.

For convolutions ``F -> (Relu | LeakyRelu | nothing) -> G`` where channel ``i`` of F's output is
channel ``i`` of G's input, ``F(x) / s`` followed by ``G`` with input channel ``i`` multiplied by
``s_i`` computes the same function for every ``s_i > 0``, because those activations are
positively homogeneous (``relu(x / s) = relu(x) / s``). Clip (Relu6) is not, so pairs with a Clip
between them are left as they are (rewriting it as a Relu, as some tools do, would change the
function).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tether._model import Model, Node, load
from tether._native import core as _core

#: The names ``tt.quantize.static(..., algorithms=[...])`` takes.
ALGORITHMS = ("cross_layer_equalization", "smooth_quant", "bias_correction")

#: Activations that commute with a positive per-channel scale.
_HOMOGENEOUS = ("Relu", "LeakyRelu")


@dataclass(frozen=True)
class EqualizedSet:
    """One equalized chain: ``nodes`` (two or three Conv node names, in graph order) and, per
    link between consecutive nodes, the per-channel scales ``s`` (float64): the first node's
    output channels were divided by ``s``, the next node's input channels multiplied by it."""

    nodes: tuple[str, ...]
    scales: tuple[np.ndarray, ...]


@dataclass
class _Conv:
    node: Node
    weight: np.ndarray  # float64 working copy, [C_out, C_in / group, ...]
    bias: np.ndarray | None
    depthwise: bool


class _Graph:
    """The prepared model's main graph as the equalizer reads it: who reads each value, which
    initializers are safe to rewrite (read by exactly one input of one node, not in a subgraph)."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.nodes = model.nodes
        self.outputs = {o.name for o in model.outputs}
        self.inits = set(model.initializer_names)
        self.readers: dict[str, list[Node]] = {}
        uses: dict[str, int] = {}
        for n in self.nodes:
            for name in n.inputs:
                uses[name] = uses.get(name, 0) + 1
                self.readers.setdefault(name, []).append(n)
            for value in n.attributes.values():
                for name in _strings(value) if isinstance(value, dict | list) else ():
                    uses[name] = uses.get(name, 0) + 2  # read inside a subgraph: never rewritten
        overridable = {i.name for i in model.inputs}  # an initializer that is also an input can be fed
        self.single_use = {name for name, k in uses.items() if k == 1 and name in self.inits - overridable}
        self.convs: dict[str, _Conv] = {}

    def conv(self, n: Node) -> _Conv | None:
        """The node as a rewritable convolution (group 1, or depthwise with one filter per
        channel; float32 weight and bias held by this node alone), else None."""
        if n.name in self.convs:
            return self.convs[n.name]
        if n.op_type != "Conv" or n.domain not in ("", "ai.onnx") or len(n.inputs) < 2:
            return None
        params = [p for p in n.inputs[1:3] if p]
        if any(p not in self.single_use for p in params):
            return None
        w = self.model.initializer(n.inputs[1])
        b = self.model.initializer(n.inputs[2]) if len(n.inputs) > 2 and n.inputs[2] else None
        if w.dtype != np.float32 or w.ndim < 3 or w.size == 0:
            return None
        if b is not None and (b.dtype != np.float32 or b.shape != w.shape[:1]):
            return None
        group = int(n.attributes.get("group", 1))
        depthwise = group > 1 and w.shape[1] == 1 and w.shape[0] == group
        if group != 1 and not depthwise:
            return None
        c = _Conv(n, w.astype(np.float64), None if b is None else b.astype(np.float64), depthwise)
        self.convs[n.name] = c
        return c

    def sole_reader(self, value: str) -> Node | None:
        readers = self.readers.get(value, [])
        if value in self.outputs or len(readers) != 1:
            return None
        return readers[0]

    def next_conv(self, f: _Conv, notes: list[str]) -> _Conv | None:
        """The convolution that alone reads ``f``'s output, directly or through one positively
        homogeneous activation, on its data input and with matching channels; else None."""
        value = f.node.outputs[0]
        n = self.sole_reader(value)
        if n is not None and n.op_type in _HOMOGENEOUS and n.domain in ("", "ai.onnx"):
            value = n.outputs[0]
            n = self.sole_reader(value)
        elif n is not None and n.op_type == "Clip":
            after = self.sole_reader(n.outputs[0])
            if after is not None and self.conv(after) is not None:
                notes.append(f"cross-layer equalization: '{f.node.name}' -> '{after.name}' left as is: the Clip "
                             f"'{n.name}' between them is not positively homogeneous")
            return None
        g = None if n is None or n.inputs[0] != value else self.conv(n)
        if g is None:
            return None
        channels = g.weight.shape[0] if g.depthwise else g.weight.shape[1]
        return g if channels == f.weight.shape[0] else None


def _strings(value: Any) -> list[str]:
    """Every string inside a subgraph attribute: a superset of the names it reads."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []


def _out_range(c: _Conv) -> np.ndarray:
    """Per output channel, the largest weight magnitude."""
    return np.abs(c.weight).reshape(c.weight.shape[0], -1).max(axis=1)


def _in_range(c: _Conv) -> np.ndarray:
    """Per input channel, the largest weight magnitude (a depthwise filter is its channel's)."""
    if c.depthwise:
        return _out_range(c)
    return np.abs(np.moveaxis(c.weight, 1, 0)).reshape(c.weight.shape[1], -1).max(axis=1)


def _usable(*ranges: np.ndarray) -> np.ndarray:
    """Channels every range of which is finite and positive: the others keep scale 1 (a dead
    channel carries nothing to balance)."""
    ok = np.ones(ranges[0].shape, bool)
    for r in ranges:
        ok &= np.isfinite(r) & (r > 0)
    return ok


def _apply(f: _Conv, g: _Conv, s: np.ndarray) -> None:
    """Divides ``f``'s output channels by ``s`` and multiplies ``g``'s input channels by it."""
    shape = (-1,) + (1,) * (f.weight.ndim - 1)
    f.weight = f.weight / s.reshape(shape)
    if f.bias is not None:
        f.bias = f.bias / s
    if g.depthwise:
        g.weight = g.weight * s.reshape(shape)
    else:
        g.weight = g.weight * s.reshape((1, -1) + (1,) * (g.weight.ndim - 2))


def _equalize_pair(f: _Conv, g: _Conv) -> np.ndarray:
    r1, r2 = _out_range(f), _in_range(g)
    ok = _usable(r1, r2)
    s = np.ones_like(r1)
    s[ok] = np.sqrt(r1[ok] * r2[ok]) / r2[ok]
    _apply(f, g, s)
    return s


def _equalize_triple(a: _Conv, b: _Conv, c: _Conv) -> tuple[np.ndarray, np.ndarray]:
    """Conv -> depthwise Conv -> Conv: every channel's three ranges become the cube root of their
    product, ``s12 = r1 / cbrt(r1 r2 r3)`` and ``s23 = cbrt(r1 r2 r3) / r3``."""
    r1, r2, r3 = _out_range(a), _out_range(b), _in_range(c)
    ok = _usable(r1, r2, r3)
    s12, s23 = np.ones_like(r1), np.ones_like(r1)
    root = np.cbrt(r1[ok] * r2[ok] * r3[ok])
    s12[ok] = r1[ok] / root
    s23[ok] = root / r3[ok]
    _apply(a, b, s12)
    _apply(b, c, s23)
    return s12, s23


def cross_layer_equalization(prepared: Model) -> tuple[Model, list[EqualizedSet], list[str]]:
    """The equalized copy of a prepared model (see :func:`tether.quantize.prepare`), the chains
    it equalized and notes on the chains it left as they were.

    Chains are taken in graph order, once: a Conv followed by a depthwise Conv followed by a
    Conv forms a triple, any other two linked convolutions a pair; a link already equalized as
    part of a triple is not visited again. The result depends only on the weights.

    Example:
        >>> eq, sets, notes = cross_layer_equalization(tt.quantize.prepare(model))   # doctest: +SKIP
        >>> sets[0].nodes                                                           # doctest: +SKIP
        ('conv1', 'dw1', 'pw1')
    """
    graph = _Graph(prepared)
    sets: list[EqualizedSet] = []
    notes: list[str] = []
    done: set[str] = set()  # first nodes of the links already equalized
    for n in graph.nodes:
        f = graph.conv(n) if n.name not in done else None
        g = graph.next_conv(f, notes) if f is not None else None
        if f is None or g is None:
            continue
        h = graph.next_conv(g, notes) if g.depthwise else None
        if h is not None:
            sets.append(EqualizedSet((f.node.name, g.node.name, h.node.name), _equalize_triple(f, g, h)))
            done.update((f.node.name, g.node.name))
        else:
            sets.append(EqualizedSet((f.node.name, g.node.name), (_equalize_pair(f, g),)))
            done.add(f.node.name)
    changed: dict[str, np.ndarray] = {}
    for name in dict.fromkeys(name for s in sets for name in s.nodes):
        c = graph.convs[name]
        changed[c.node.inputs[1]] = c.weight.astype(np.float32)
        if c.bias is not None:
            changed[c.node.inputs[2]] = c.bias.astype(np.float32)
    return (with_initializers(prepared, changed) if changed else prepared), sets, list(dict.fromkeys(notes))


def equalize(model: Model | str | os.PathLike[str] | bytes) -> Model:
    """Cross-layer equalization of a float model: a copy, prepared (BatchNormalization folded,
    nodes named; see :func:`tether.quantize.prepare`), in which each chain of convolutions
    ``Conv -> (Relu | LeakyRelu | nothing) -> Conv`` has its per-channel weight ranges balanced.

    For a pair, channel ``i`` gets ``s_i = sqrt(r1_i * r2_i) / r2_i``, ``r1`` being the largest
    weight magnitude of the first conv's output channel and ``r2`` that of the second conv's
    input channel; the first conv's weights and bias are divided by ``s``, the second conv's
    input channels multiplied by it, so both ranges become ``sqrt(r1 * r2)``. A Conv ->
    depthwise Conv -> Conv triple balances all three ranges to ``cbrt(r1 * r2 * r3)``. The
    function is the same (up to float32 rounding); chains with a Clip (Relu6) between the
    convolutions, weights shared with another node, grouped (not depthwise) convolutions or a
    value read elsewhere are left as they are. Deterministic: only the weights decide.

    Example:
        >>> eq = tt.quantize.equalize("mobilenet.onnx")       # doctest: +SKIP
        >>> res = tt.quantize.static(eq, x_calib, per_channel=False)   # doctest: +SKIP
    """
    from tether.quantize._plan import prepare

    source = model if isinstance(model, Model) else load(model)
    return cross_layer_equalization(prepare(source))[0]


def check_algorithms(algorithms: Sequence[str] | str) -> list[str]:
    """``algorithms`` as a list of known names (a single name may be given as a string)."""
    names = [algorithms] if isinstance(algorithms, str) else list(algorithms)
    for name in names:
        if not isinstance(name, str) or name not in ALGORITHMS:
            raise _core.ArgumentError(f"unknown quantization algorithm {name!r}; known: {list(ALGORITHMS)}")
    return list(dict.fromkeys(names))


# ONNX protobuf fields (onnx.proto): ModelProto.graph = 7, GraphProto.initializer = 5,
# TensorProto dims = 1, data_type = 2, name = 8, raw_data = 9; FLOAT is data type 1.
_GRAPH, _INITIALIZER, _DIMS, _DATA_TYPE, _NAME, _RAW = 7, 5, 1, 2, 8, 9


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        byte = v & 0x7F
        v >>= 7
        if v:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        byte = data[i]
        i += 1
        v |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return v, i


def _fields(data: bytes) -> list[tuple[int, int, bytes]]:
    """The top-level fields of a protobuf message: (number, wire type, the field's bytes whole)."""
    out, i = [], 0
    while i < len(data):
        start = i
        key, i = _read_varint(data, i)
        wire = key & 7
        if wire == 0:
            _, i = _read_varint(data, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            size, i = _read_varint(data, i)
            i += size
        else:
            raise _core.InternalError(f"unexpected protobuf wire type {wire} in a model tether wrote")
        out.append((key >> 3, wire, data[start:i]))
    return out


def _payload(field: bytes) -> bytes:
    """The bytes of a length-delimited field without its key and length."""
    _, i = _read_varint(field, 0)
    _, i = _read_varint(field, i)
    return field[i:]


def _delimited(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _float_tensor(name: str, array: np.ndarray) -> bytes:
    dims = b"".join(_varint(_DIMS << 3) + _varint(int(d)) for d in array.shape)
    return (dims + _varint(_DATA_TYPE << 3) + _varint(1) + _delimited(_NAME, name.encode()) +
            _delimited(_RAW, np.ascontiguousarray(array, "<f4").tobytes()))


def _tensor_name(tensor: bytes) -> str | None:
    for number, wire, field in _fields(tensor):
        if number == _NAME and wire == 2:
            return _payload(field).decode()
    return None


def with_initializers(model: Model, arrays: dict[str, np.ndarray]) -> Model:
    """A copy of ``model`` with the float32 initializers named in ``arrays`` replaced (same
    names; everything else byte for byte as the model writes it)."""
    fields = []
    for number, wire, field in _fields(model.to_bytes()):
        if number == _GRAPH and wire == 2:
            parts = []
            for n2, w2, f2 in _fields(_payload(field)):
                name = _tensor_name(_payload(f2)) if n2 == _INITIALIZER and w2 == 2 else None
                parts.append(_delimited(_INITIALIZER, _float_tensor(name, arrays[name])) if name in arrays else f2)
            field = _delimited(_GRAPH, b"".join(parts))
        fields.append(field)
    return load(b"".join(fields))
