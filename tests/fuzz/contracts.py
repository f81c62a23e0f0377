"""Shape contracts: cases that break, one at a time, a relation the ONNX spec states between
an op's input shapes (or between an input and an attribute), checked against onnxruntime.

Fuzzers mutate values and attributes but seldom the *relation* between two inputs: indices
as wide as data everywhere but one dim, a bias of one value beside a per-channel scale, a
pads list of the wrong length. ``RELATIONS`` states those relations op by op, as data (from
``onnx.defs.get_schema(op).doc`` and the operator spec). For each relation of each op a
backend runs, a valid base case (the first fitting model of the ONNX backend node tests
shipped in the ``onnx`` package, ``onnx/backend/test/data/node``) is broken in each way of
``VARIANTS``: one larger, one smaller, 65536 wide, zero, rank + 1, rank - 1, an empty tensor,
a length-1 tensor. Each broken case is built twice: ``static`` (every input but the first an
initializer, the first a graph input of fixed shape) and ``dynamic`` (every input a graph
input with symbolic dims, fed at run time).

The oracle: tether must raise a typed error (a ``tt.Error`` other than ``InternalError``) or
give onnxruntime's result. Where onnxruntime refuses, tether must refuse too, unless the
ONNX reference evaluator accepts the case and tether matches it (noted, not a finding). Cases
run in child processes, many per child; a child that dies is reported as a finding for the
case it was running, and the rest of its batch goes on in a new child.

    .venv/bin/python tests/fuzz/contracts.py                  # the full set on cpu and vulkan
    .venv/bin/python tests/fuzz/contracts.py --op Conv --show # one op, every case and verdict
    .venv/bin/python tests/fuzz/contracts.py --corpus tests/fuzz/corpus/contracts
    .venv/bin/python tests/fuzz/contracts.py --emit-cpp tests/fuzz/contract_relations.inc

Needs tether, onnx, onnxruntime and numpy.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

WIDE = 65536
MAX_ELEMENTS = 1 << 22  # a broken input past this many values is left out (the 64k variant of a big tensor)
MAX_BASE_VALUES = 1 << 14  # node-test cases with bigger inputs are not used as bases
RTOL = 1e-4
RTOL_BY_OP = {"LSTM": 1e-3, "GRU": 1e-3, "RNN": 1e-3, "Attention": 1e-3, "Einsum": 1e-3, "ConvTranspose": 1e-3,
              "LpPool": 1e-3, "DeformConv": 1e-3, "GridSample": 1e-3, "RoiAlign": 1e-3, "Resize": 1e-3,
              "AffineGrid": 1e-3, "LRN": 1e-3, "GroupNormalization": 1e-3, "LayerNormalization": 1e-3,
              "InstanceNormalization": 1e-3, "RMSNormalization": 1e-3}

# ---- the relation table ---------------------------------------------------------------------------
# op -> "kind target; kind target; ...". A kind names the relation (KINDS); a target is what
# a violation changes:
#   iN[:D]   the shape of input N at dim D (an int, "last", "off": the first dim other than the
#            op's axis, "axis"); "iA+iB:D" changes inputs A and B alike (tied shapes)
#   sN       input N, a scalar (or one value) by the spec
#   vN       the values of input N, a 1-D tensor whose length the spec ties to a rank or to another input
#   @name    the length of an ints attribute (default: from the spatial rank)
#   #name    the value of an int attribute that a shape bounds
KINDS = {
    "same": "two inputs of the same shape",
    "off": "indices no larger than data on every dim but the axis",
    "bcast": "shapes that broadcast (multidirectional, or one way onto the first input)",
    "chan": "one value per channel (or per group, per feature, per normalized element)",
    "scalar": "a scalar or one value",
    "inner": "matching inner (contraction) dims",
    "group": "input channels against weight channels times group",
    "spatial": "pads, strides, dilations, kernel lengths against the spatial rank",
    "lastdim": "indices' last dim against data's rank",
    "shape": "the length of a shape, axes or repeats tensor against a rank or another length",
    "rnn": "RNN weights, biases, sequence lengths and initial states against hidden_size, directions, batch",
    "heads": "head dims and sequence lengths of attention and rotary embeddings",
    "axis": "per-axis scales and zero points against the quantized axis",
    "bound": "an attribute bounded by a dim (axis, blocksize, groups, batch_dims)",
    "rank": "an input of the rank the spec requires",
}

_BINARY = "bcast i1"
RELATIONS: dict[str, str] = {
    **{op: _BINARY for op in ["Add", "Sub", "Mul", "Div", "Pow", "Mod", "And", "Or", "Xor", "Equal", "Greater", "Less",
                              "GreaterOrEqual", "LessOrEqual", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
                              "Max", "Min", "Mean", "Sum", "PRelu"]},
    "Where": "bcast i0; bcast i2",
    "Expand": "shape v1; bcast i0",
    "Clip": "scalar s1; scalar s2",
    "Pad": "shape v1; scalar s2; shape v3",
    "Range": "scalar s0; scalar s1; scalar s2",
    "OneHot": "scalar s1; shape v2",
    "MatMul": "inner i1:-2; bcast i0:0",
    "MatMulInteger": "inner i1:-2; chan i2:0; chan i3:0",
    "Gemm": "inner i1:0; bcast i2",
    "Einsum": "inner i1:0; inner i1:last; rank i0",
    "Conv": "group i1:1; chan i2:0; spatial @strides; spatial @pads; spatial @dilations; spatial @kernel_shape; rank i0:0",
    "ConvTranspose": "group i1:0; chan i2:0; spatial @strides; spatial @pads; spatial @output_padding; "
                     "spatial @kernel_shape; spatial @dilations",
    "ConvInteger": "group i1:1; scalar s2; chan i3:0; spatial @pads",
    "DeformConv": "group i1:1; chan i2:1; chan i3:0; chan i4:1; spatial @pads",
    "QLinearConv": "scalar s1; scalar s2; group i3:1; chan i4:0; chan i5:0; scalar s6; scalar s7; chan i8:0",
    "QLinearMatMul": "scalar s1; scalar s2; inner i3:0; chan i4; chan i5; scalar s6; scalar s7",
    "QuantizeLinear": "axis i1:0; same i2:0",
    "DequantizeLinear": "axis i1:0; same i2:0",
    "MaxPool": "spatial @kernel_shape; spatial @strides; spatial @pads; spatial @dilations; rank i0:0",
    "AveragePool": "spatial @kernel_shape; spatial @strides; spatial @pads; rank i0:0",
    "LpPool": "spatial @kernel_shape; spatial @strides; spatial @pads",
    "MaxUnpool": "same i1:last; shape v2; spatial @kernel_shape",
    "BatchNormalization": "chan i1:0; chan i2:0; chan i3:0; chan i4:0",
    "InstanceNormalization": "chan i1:0; chan i2:0",
    "GroupNormalization": "chan i1:0; chan i2:0; bound #num_groups",
    "LayerNormalization": "chan i1:last; chan i2:last; bound #axis",
    "RMSNormalization": "chan i1:last; bound #axis",
    "LRN": "bound #size; rank i0:0",
    "MeanVarianceNormalization": "spatial @axes",
    "LpNormalization": "bound #axis",
    "Reshape": "shape v1",
    "Tile": "shape v1",
    "Slice": "shape v1; shape v2; shape v3; shape v4",
    "Squeeze": "shape v1",
    "Unsqueeze": "shape v1",
    "Split": "shape v1; bound #axis",
    "Concat": "same i1:off; rank i1:0",
    "Transpose": "shape @perm",
    "Gather": "bound #axis",
    "GatherElements": "off i1:off; rank i1:0",
    "GatherND": "lastdim i1:last; bound #batch_dims",
    "Scatter": "same i2:last; off i1+i2:off; rank i1+i2:0",
    "ScatterElements": "same i2:last; off i1+i2:off; rank i1+i2:0",
    "ScatterND": "lastdim i1:last; same i2:last; same i2:0",
    "TensorScatter": "same i1:last; chan i2:0",
    "Compress": "chan i1:0; bound #axis",
    "CumSum": "scalar s1",
    "CumProd": "scalar s1",
    "TopK": "scalar v1; bound #axis",
    "Trilu": "scalar s1; rank i0:0",
    "ReverseSequence": "chan i1:0",
    "NonMaxSuppression": "same i1:last; lastdim i0:last; scalar s2; scalar s3; scalar s4",
    "RoiAlign": "lastdim i1:last; same i2:0",
    "MaxRoiPool": "lastdim i1:last",
    "Resize": "shape v1; shape v2; shape v3",
    "Upsample": "shape v1",
    "GridSample": "same i1:0; lastdim i1:last",
    "AffineGrid": "shape v1; heads i0:1",
    "CenterCropPad": "shape v1",
    "DepthToSpace": "bound #blocksize; rank i0:0",
    "SpaceToDepth": "bound #blocksize; rank i0:0",
    "ConstantOfShape": "shape v0",
    "EyeLike": "rank i0:0",
    "Flatten": "bound #axis",
    "Softmax": "bound #axis",
    "LogSoftmax": "bound #axis",
    "Hardmax": "bound #axis",
    "ArgMax": "bound #axis",
    "ArgMin": "bound #axis",
    **{op: "shape v1" for op in ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                                 "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]},
    "Dropout": "scalar s1; scalar s2",
    "Det": "same i0:last",
    "Unique": "bound #axis",
    "LSTM": "rnn i1:last; rnn i1:1; rnn i2:last; rnn i3:1; rnn i4:0; rnn i5:last; rnn i6:1; rnn i7:1; rnn i1:0",
    "GRU": "rnn i1:last; rnn i1:1; rnn i2:last; rnn i3:1; rnn i4:0; rnn i5:last; rnn i1:0",
    "RNN": "rnn i1:last; rnn i1:1; rnn i2:last; rnn i3:1; rnn i4:0; rnn i5:last; rnn i1:0",
    "Attention": "heads i1:last; heads i2:-2; heads i3:last; heads i4:-2; heads i5:last; bound #q_num_heads",
    "RotaryEmbedding": "heads i1:last; heads i2:last; heads i3:last; rank i0:0",
    "NegativeLogLikelihoodLoss": "chan i1:0; chan i2:0",
    "SoftmaxCrossEntropyLoss": "chan i1:0; chan i2:0",
    "BlackmanWindow": "scalar s0",
    "HannWindow": "scalar s0",
    "HammingWindow": "scalar s0",
    "DFT": "scalar s1; scalar s2",
    "STFT": "scalar s1; shape v2; scalar s3",
    "MelWeightMatrix": "scalar s0; scalar s1; scalar s2",
    "SwiGLU": "bound #axis",
    "Col2Im": "shape v1; shape v2",
}

VARIANTS = ["larger", "smaller", "wide", "zero", "rank+1", "rank-1", "empty", "one"]
MODES = ["static", "dynamic"]

# Defaults of ints attributes the base case may leave out, as functions of the node's inputs.
_FILL = {"pads": 0, "output_padding": 0}


def _spatial(inputs: Sequence[np.ndarray | None]) -> int:
    return max(int(np.ndim(inputs[0])) - 2, 0) if inputs and inputs[0] is not None else 0


def _default_ints(op: str, name: str, inputs: Sequence[np.ndarray | None]) -> list[int] | None:
    n = _spatial(inputs)
    if name == "pads":
        return [0] * (2 * n)
    if name in ("strides", "dilations"):
        return [1] * n
    if name == "output_padding":
        return [0] * n
    if name == "kernel_shape" and len(inputs) > 1 and inputs[1] is not None and op.startswith(("Conv", "ConvT")):
        return [int(d) for d in np.shape(inputs[1])[2:]]
    if name == "perm" and inputs and inputs[0] is not None:
        return list(range(np.ndim(inputs[0])))[::-1]
    if name == "axes" and op == "MeanVarianceNormalization":
        return [0, 2, 3]
    return None


_INT_DEFAULTS = {"axis": 0, "batch_dims": 0}
_AXIS_DEFAULT = {"Softmax": -1, "LogSoftmax": -1, "Hardmax": -1, "LayerNormalization": -1, "RMSNormalization": -1,
                 "LpNormalization": -1, "Flatten": 1, "TopK": -1, "SwiGLU": -1}


@dataclass(frozen=True)
class Relation:
    """One relation of one op: its kind and the target a violation changes."""

    op: str
    kind: str
    target: str

    @property
    def name(self) -> str:
        return f"{self.op}:{self.kind}:{self.target}"


def relations(ops: Iterable[str] | None = None) -> list[Relation]:
    """The relation table as Relation rows, for `ops` (every op of the table when None).

    Example:
        >>> [r.name for r in relations(["Clip"])]
        ['Clip:scalar:s1', 'Clip:scalar:s2']
    """
    wanted = set(RELATIONS) if ops is None else set(ops) & set(RELATIONS)
    out = []
    for op in sorted(wanted):
        for part in RELATIONS[op].split(";"):
            kind, target = part.split()
            assert kind in KINDS, (op, kind)
            out.append(Relation(op, kind, target))
    return out


# ---- base cases from the ONNX backend node tests --------------------------------------------------
@dataclass
class Base:
    """A valid one-node model and its inputs (None for an absent optional input)."""

    name: str
    node: onnx.NodeProto
    inputs: list[np.ndarray | None]
    opset: int
    ir_version: int


def _node_tests() -> list[tuple[str, onnx.ModelProto, list[object]]]:
    """(name, model, first data set's inputs) of every ONNX backend node test, cached per onnx
    version in the user's cache folder (collecting them takes seconds; a pickle, so never in a
    folder other users write to)."""
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tether"
    folder.mkdir(parents=True, exist_ok=True)
    cache = folder / f"contract-node-tests-{onnx.__version__}-numpy-{np.__version__}.pkl"
    if cache.exists():
        try:
            with open(cache, "rb") as f:
                return pickle.load(f)
        except Exception:  # noqa: BLE001 - a cache of another numpy or a torn write: collect again
            pass
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = [(c.name, c.model.SerializeToString(), list(c.data_sets[0][0]) if c.data_sets else [])
                 for c in collect_testcases(None) if "_expanded" not in c.name]
    tmp = cache.with_suffix(f".{os.getpid()}")
    with open(tmp, "wb") as f:
        pickle.dump(found, f)
    os.replace(tmp, cache)
    return found


def load_bases(ops: set[str]) -> dict[str, list[Base]]:
    """Every usable node test of `ops`: one node of the ONNX domain, tensor inputs only, each
    under MAX_BASE_VALUES values, sorted by test name.

    Example:
        >>> load_bases({"Clip"})["Clip"][0].node.op_type
        'Clip'
    """
    found: dict[str, list[Base]] = {}
    for name, data, feeds in sorted(_node_tests(), key=lambda t: t[0]):
        model = onnx.load_from_string(data)
        nodes = model.graph.node
        if len(nodes) != 1 or nodes[0].op_type not in ops or nodes[0].domain not in ("", "ai.onnx"):
            continue
        node = nodes[0]
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            continue
        feeds = [np.asarray(a) if isinstance(a, np.generic) else a for a in feeds]
        if len(feeds) != len(model.graph.input) or not all(
                isinstance(a, np.ndarray) and a.dtype in _DTYPES and a.size <= MAX_BASE_VALUES for a in feeds):
            continue
        by_name: dict[str, np.ndarray] = {vi.name: a for vi, a in zip(model.graph.input, feeds, strict=True)}
        for init in model.graph.initializer:
            by_name[init.name] = numpy_helper.to_array(init)
        if any(n and n not in by_name for n in node.input):
            continue
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        inputs = [by_name[n] if n else None for n in node.input]
        found.setdefault(node.op_type, []).append(Base(name, node, inputs, opset, model.ir_version))
    for base in _extra_bases():
        if base.node.op_type in ops:
            found.setdefault(base.node.op_type, []).append(base)
    return found


def _extra_bases() -> list[Base]:
    """Bases for targets no node test holds: optional inputs (biases, sequence lengths,
    initial states) that the node tests leave out."""
    rng = np.random.default_rng(7)

    def f32(*shape: int) -> np.ndarray:
        return rng.uniform(-1, 1, shape).astype(np.float32)

    def base(name: str, op: str, inputs: list[np.ndarray | None], opset: int = 18, **attrs: object) -> Base:
        names = [f"in{k}" if a is not None else "" for k, a in enumerate(inputs)]
        node = helper.make_node(op, names, ["y"], name=f"the_{op.lower()}", **attrs)
        return Base(name, node, inputs, opset, 8)

    seq, batch, feat, hidden = 3, 2, 4, 5
    lens = np.array([3, 2], np.int32)
    q = np.array(0.05, np.float32)
    return [
        base("extra_conv_bias", "Conv", [f32(1, 2, 5, 5), f32(3, 2, 3, 3), f32(3)], pads=[1, 1, 1, 1]),
        base("extra_convtranspose_bias", "ConvTranspose", [f32(1, 2, 4, 4), f32(2, 3, 3, 3), f32(3)], strides=[2, 2]),
        base("extra_gru_full", "GRU", [f32(seq, batch, feat), f32(1, 3 * hidden, feat), f32(1, 3 * hidden, hidden),
                                       f32(1, 6 * hidden), lens, f32(1, batch, hidden)], hidden_size=hidden),
        base("extra_rnn_full", "RNN", [f32(seq, batch, feat), f32(1, hidden, feat), f32(1, hidden, hidden),
                                       f32(1, 2 * hidden), lens, f32(1, batch, hidden)], hidden_size=hidden),
        base("extra_qlinearconv_bias", "QLinearConv",
             [rng.integers(0, 255, (1, 2, 5, 5)).astype(np.uint8), q, np.array(128, np.uint8),
              rng.integers(0, 255, (3, 2, 3, 3)).astype(np.uint8), np.full(3, 0.02, np.float32),
              np.full(3, 128, np.uint8), np.array(0.1, np.float32), np.array(128, np.uint8),
              rng.integers(-100, 100, 3).astype(np.int32)]),
    ]


_DTYPES = {np.dtype(t) for t in [np.float32, np.float64, np.float16, np.int64, np.int32, np.int16, np.int8, np.uint8,
                                 np.uint16, np.uint32, np.uint64, np.bool_]}


# ---- targets and violations ---------------------------------------------------------------------
def _axis(op: str, node: onnx.NodeProto, rank: int) -> int:
    for a in node.attribute:
        if a.name == "axis":
            return a.i + rank if a.i < 0 else a.i
    d = _AXIS_DEFAULT.get(op, 0)
    return d + rank if d < 0 else d


def _dim(spec: str, op: str, node: onnx.NodeProto, shape: tuple[int, ...]) -> int | None:
    rank = len(shape)
    if rank == 0:
        return None
    if spec in ("", "last"):
        return rank - 1
    if spec in ("off", "axis"):
        axis = _axis(op, node, rank)
        if spec == "axis":
            return axis if 0 <= axis < rank else None
        return next((d for d in range(rank) if d != axis), None)
    d = int(spec)
    d = d + rank if d < 0 else d
    return d if 0 <= d < rank else None


def _reshaped(shape: tuple[int, ...], dim: int, variant: str) -> tuple[int, ...] | None:
    s = list(shape)
    if variant == "larger":
        s[dim] += 1
    elif variant == "smaller":
        if s[dim] <= 1:
            return None
        s[dim] -= 1
    elif variant == "wide":
        s[dim] = WIDE
    elif variant == "zero":
        s[dim] = 0
    elif variant == "rank+1":
        s.insert(0, 2)
    elif variant == "rank-1":
        s.pop(0)
    elif variant == "empty":
        s = [0]
    elif variant == "one":
        if s[dim] == 1:
            return None if len(s) == 1 else (1,)
        s[dim] = 1
    out = tuple(s)
    return None if out == tuple(shape) or int(np.prod(out, dtype=np.int64)) > MAX_ELEMENTS else out


def _scalar_shape(shape: tuple[int, ...], variant: str) -> tuple[int, ...] | None:
    table = {"larger": (2,), "wide": (WIDE,), "zero": (0,), "empty": (0,), "rank+1": (1, 1), "one": (1,)}
    if variant in ("zero", "smaller", "rank-1"):  # zero is empty for a scalar; nothing is smaller
        return None
    out = table.get(variant)
    return None if out is None or out == tuple(shape) else out


def _resized(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """`a`'s values repeated (np.resize) into `shape`: indices stay in range, variances positive."""
    if a.size == 0:
        return np.zeros(shape, a.dtype)
    return np.resize(a, shape).astype(a.dtype)


def _values(a: np.ndarray, variant: str) -> np.ndarray | None:
    flat = a.reshape(-1)
    one = np.ones(1, a.dtype)
    if variant == "larger":
        return np.concatenate([flat, one])
    if variant == "smaller":
        return flat[:-1] if flat.size > 0 else None
    if variant == "wide":
        if flat.size == 0:
            return None
        out = flat.copy()
        out[0] = WIDE if a.dtype.kind != "b" else out[0]
        return out
    if variant == "zero" or variant == "empty":
        return flat[:0] if variant == "zero" and flat.size > 0 else None
    if variant == "rank+1":
        return flat.reshape(1, -1)
    if variant == "rank-1":
        return flat.reshape(()) if flat.size == 1 and a.ndim == 1 else None
    if variant == "one":
        return flat[:1] if flat.size > 1 else None
    return None


def _ints(base: list[int], variant: str, name: str) -> list[int] | None:
    fill = _FILL.get(name, 1)
    if variant == "larger":
        return [*base, fill]
    if variant == "smaller":
        return base[:-1] if base else None
    if variant == "wide":
        return [WIDE, *base[1:]] if base else None
    if variant == "zero":
        return [] if base else None
    if variant == "one":
        return base[:1] if len(base) > 1 else None
    return None


def _int_value(base: int, variant: str) -> int | None:
    table = {"larger": base + 1, "smaller": base - 1, "wide": WIDE, "zero": 0, "one": 1, "rank+1": -WIDE}
    v = table.get(variant)
    return None if v is None or v == base else v


@dataclass
class Case:
    """One broken model, its feeds, and what it breaks."""

    id: str
    op: str
    relation: str
    kind: str
    variant: str
    mode: str
    model: bytes
    feeds: dict[str, np.ndarray] = field(repr=False)
    base: str = ""
    shapes: str = ""  # "name:d0,d1;..." of the graph inputs (the fuzz replayer's feed shapes)
    skip_ort: bool = False  # onnxruntime crashed on it: counts as refusing

    @property
    def rtol(self) -> float:
        return RTOL_BY_OP.get(self.op, RTOL)


def _attr(node: onnx.NodeProto, name: str) -> onnx.AttributeProto | None:
    return next((a for a in node.attribute if a.name == name), None)


def _set_attr(node: onnx.NodeProto, name: str, value: int | list[int]) -> None:
    for i, a in enumerate(node.attribute):
        if a.name == name:
            del node.attribute[i]
            break
    if isinstance(value, list):
        node.attribute.append(helper.make_attribute(name, value, attr_type=onnx.AttributeProto.INTS))
    else:
        node.attribute.append(helper.make_attribute(name, value))


def violate(base: Base, rel: Relation, variant: str) -> tuple[onnx.NodeProto, list[np.ndarray | None]] | None:
    """The base's node and inputs with `rel` broken the `variant` way, or None where that
    variant does not apply (a dim of 1 has nothing smaller; the target is absent).

    Example:
        >>> b = load_bases({"Clip"})["Clip"][0]
        >>> violate(b, relations(["Clip"])[0], "larger")[1][1].shape  # min: two values
        (2,)
    """
    node = onnx.NodeProto()
    node.CopyFrom(base.node)
    inputs = list(base.inputs)
    t = rel.target
    if t[0] in "@#":
        name = t[1:]
        a = _attr(node, name)
        if t[0] == "@":
            current = list(a.ints) if a is not None else _default_ints(rel.op, name, inputs)
            if current is None:
                return None
            new = _ints(current, variant, name)
        else:
            current_i = a.i if a is not None else _INT_DEFAULTS.get(name, _AXIS_DEFAULT.get(rel.op))
            if current_i is None:
                return None
            new = _int_value(current_i, variant)
        if new is None:
            return None
        _set_attr(node, name, new)
        return node, inputs
    spec = t[1:].split(":")[1] if ":" in t else ""
    indices = [int(p.lstrip("isv").split(":")[0]) for p in t.split("+")]
    if any(i >= len(inputs) or inputs[i] is None for i in indices):
        return None
    for i in indices:
        a = inputs[i]
        assert a is not None
        if t[0] == "v":
            new_a = _values(a, variant)
        elif t[0] == "s":
            shape = _scalar_shape(a.shape, variant)
            new_a = None if shape is None else _resized(a, shape)
        else:
            dim = _dim(spec, rel.op, node, a.shape)
            shape = None if dim is None else _reshaped(a.shape, dim, variant)
            new_a = None if shape is None else _resized(a, shape)
        if new_a is None:
            return None
        inputs[i] = new_a
    return node, inputs


def build_model(base: Base, node: onnx.NodeProto, inputs: Sequence[np.ndarray | None], mode: str) -> tuple[bytes, dict[str, np.ndarray], str]:
    """The one-node model of `node` over `inputs` (static: the first input a graph input of
    fixed shape, the rest initializers; dynamic: all graph inputs with symbolic dims), its
    feeds, and its feed shapes as "name:d0,d1;..." (what the fuzz replayer reads).

    Example:
        >>> b = load_bases({"Relu"})["Relu"][0]
        >>> build_model(b, b.node, b.inputs, "dynamic")[2].startswith("x:")
        True
    """
    graph_inputs, inits, feeds = [], [], {}
    seen: set[str] = set()
    for k, (name, a) in enumerate(zip(node.input, inputs, strict=True)):
        if not name or a is None or name in seen:
            continue
        seen.add(name)
        elem = helper.np_dtype_to_tensor_dtype(a.dtype)
        if mode == "dynamic":
            dims = [f"{name}_{d}" for d in range(a.ndim)]
            graph_inputs.append(helper.make_tensor_value_info(name, elem, dims))
            feeds[name] = a
        elif k == 0:
            graph_inputs.append(helper.make_tensor_value_info(name, elem, list(a.shape)))
            feeds[name] = a
        else:
            inits.append(numpy_helper.from_array(a, name))
    outputs = [onnx.ValueInfoProto(name=o) for o in node.output if o]
    the_node = onnx.NodeProto()
    the_node.CopyFrom(node)
    the_node.name = the_node.name or f"the_{node.op_type.lower()}"
    g = helper.make_graph([the_node], "contract", graph_inputs, outputs, inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", base.opset)], ir_version=base.ir_version)
    shapes = ";".join(f"{n}:{','.join(str(d) for d in a.shape)}" for n, a in feeds.items())
    return model.SerializeToString(), feeds, shapes


# ---- cases ---------------------------------------------------------------------------------------
def _present(base: Base, rel: Relation) -> int:
    """2: the base has the target; 1: a default stands in for it (an attribute); 0: absent."""
    t = rel.target
    if t[0] in "@#":
        return 2 if _attr(base.node, t[1:]) is not None else 1
    indices = [int(p.lstrip("isv").split(":")[0]) for p in t.split("+")]
    return 2 if all(i < len(base.inputs) and base.inputs[i] is not None for i in indices) else 0


def pick_base(bases: Sequence[Base], rel: Relation) -> Base | None:
    """The first base (by test name) that holds the relation's target and that some variant
    breaks (a 1-D input has no dim off the axis), else one where a default stands in for the
    target, else None."""
    ranked = sorted(((-_present(b, rel), k) for k, b in enumerate(bases)))
    for present, k in ranked:
        if present != 0 and any(violate(bases[k], rel, v) is not None for v in VARIANTS):
            return bases[k]
    return None


def generate(ops: Iterable[str], modes: Sequence[str] = MODES) -> tuple[list[Case], list[Relation]]:
    """Every violation case of the relations of `ops`, and the relations that no base case
    could carry (no node test holds the target).

    Example:
        >>> cases, missing = generate(["Clip"])
        >>> sorted({c.variant for c in cases}) == sorted({"larger", "wide", "empty", "rank+1", "one"})
        True
    """
    rels = relations(ops)
    bases = load_bases({r.op for r in rels})
    cases: list[Case] = []
    missing: list[Relation] = []
    for rel in rels:
        base = pick_base(bases.get(rel.op, []), rel)
        if base is None:
            missing.append(rel)
            continue
        for variant in VARIANTS:
            broken = violate(base, rel, variant)
            if broken is None:
                continue
            node, inputs = broken
            for mode in modes:
                model, feeds, shapes = build_model(base, node, inputs, mode)
                cases.append(Case(f"{rel.name}:{variant}:{mode}", rel.op, rel.name, rel.kind, variant, mode, model,
                                  feeds, base.name, shapes))
    return cases, missing


# ---- the oracle and the child processes ---------------------------------------------------------
FINDINGS = {"crash", "timeout", "internal", "untyped", "mismatch", "lenient"}


def _close(got: np.ndarray, ref: np.ndarray, rtol: float) -> str:
    """'' when `got` is `ref` within rtol of ref's largest magnitude (integers exactly), else why not."""
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape:
        return f"shape {got.shape} vs {ref.shape}"
    if got.dtype != ref.dtype:
        return f"dtype {got.dtype} vs {ref.dtype}"
    if ref.dtype.kind != "f":
        return "" if np.array_equal(got, ref) else "values differ"
    g, r = got.astype(np.float64), ref.astype(np.float64)
    if not np.array_equal(np.isnan(g), np.isnan(r)):
        return "NaN in different places"
    inf = np.isinf(r)
    if not np.array_equal(g[inf], r[inf]):
        return "infinities differ"
    fin = np.isfinite(r)
    scale = max(float(np.abs(r[fin]).max(initial=0.0)), 1e-30)
    err = float(np.abs(g[fin] - r[fin]).max(initial=0.0))
    return "" if err <= rtol * scale else f"max error {err:.3g} of largest magnitude {scale:.3g}"


def _ort(model: bytes, feeds: dict[str, np.ndarray]) -> tuple[bool, object]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        return True, dict(zip(names, sess.run(None, feeds), strict=True))
    except Exception as e:  # noqa: BLE001 - any refusal of the oracle's
        return False, f"{type(e).__name__}: {str(e)[:300]}"


def _reference(model: bytes, feeds: dict[str, np.ndarray]) -> tuple[bool, object]:
    from onnx.reference import ReferenceEvaluator

    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            ref = ReferenceEvaluator(onnx.load_from_string(model))
            out = ref.run(None, feeds)
        return True, dict(zip(ref.output_names, [np.asarray(o) for o in out], strict=True))
    except Exception as e:  # noqa: BLE001 - any refusal of the oracle's
        return False, f"{type(e).__name__}: {str(e)[:300]}"


def _tether(model: bytes, feeds: dict[str, np.ndarray], device: str) -> tuple[str, object]:
    import tether as tt

    try:
        sess = tt.compile(model, device, threads=1, max_memory=256 << 20)
        return "ok", sess.run(feeds)
    except tt.InternalError as e:
        return "internal", f"InternalError: {str(e)[:300]}"
    except tt.Error as e:
        return "typed", f"{type(e).__name__}: {str(e)[:300]}"
    except Exception as e:  # noqa: BLE001 - anything else is a finding
        return "untyped", f"{type(e).__name__}: {str(e)[:300]}"


def _compare(outs: dict[str, np.ndarray], ref: dict[str, np.ndarray], rtol: float) -> str:
    for name, r in ref.items():
        if name not in outs:
            return f"output {name} missing"
        why = _close(outs[name], r, rtol)
        if why:
            return f"{name}: {why}"
    return ""


def _lrn(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """LRN as the spec defines it for any rank >= 3 (N x C x D1 ... Dk), in float64:
    onnxruntime and the ONNX reference implement the 4-D case only."""
    node = model.graph.node[0]
    a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    size, alpha, beta, bias = int(a["size"]), a.get("alpha", 1e-4), a.get("beta", 0.75), a.get("bias", 1.0)
    x = feeds[node.input[0]] if node.input[0] in feeds else numpy_helper.to_array(model.graph.initializer[0])
    sq = x.astype(np.float64) ** 2
    y = np.empty(x.shape, np.float64)
    channels = x.shape[1]
    for c in range(channels):
        lo, hi = max(0, c - (size - 1) // 2), min(channels - 1, c + -(-(size - 1) // 2))
        y[:, c] = x[:, c] / (bias + alpha / size * sq[:, lo:hi + 1].sum(axis=1)) ** beta
    return {node.output[0]: y.astype(x.dtype)}


# Ops whose spec covers more than onnxruntime and the reference implement: where both refuse
# a case, tether's result is checked against this oracle of the spec's formula instead.
SPEC_ORACLES = {"LRN": _lrn}


def judge(case: Case, device: str, oracle: tuple[bool, object], emit: callable | None = None) -> tuple[str, str]:
    """Runs `case` on tether's `device` and judges it against onnxruntime's answer `oracle`:
    returns (verdict, detail). Verdicts: match, typed (both refuse), typed-ort-ran (tether
    refuses what onnxruntime runs: allowed), ref-match (onnxruntime refuses or differs, the
    reference runs it and tether matches it), spec-match (both refuse what the spec defines:
    tether matches SPEC_ORACLES), and the findings internal, untyped, mismatch, lenient."""
    status, got = _tether(case.model, case.feeds, device)
    if status in ("internal", "untyped"):
        return status, str(got)
    ort_ok, ort_out = oracle
    if status == "typed":
        return ("typed-ort-ran" if ort_ok else "typed"), str(got)
    assert isinstance(got, dict)
    if ort_ok:
        why = _compare(got, ort_out, case.rtol)  # type: ignore[arg-type]
        if not why:
            return "match", ""
        if emit:
            emit("ref")
        ref_ok, ref_out = _reference(case.model, case.feeds)
        if ref_ok and not _compare(got, ref_out, case.rtol):  # type: ignore[arg-type]
            return "ref-match", f"onnxruntime differs ({why}); tether matches the reference"
        return "mismatch", why
    if emit:
        emit("ref")
    ref_ok, ref_out = _reference(case.model, case.feeds)
    if ref_ok:
        why = _compare(got, ref_out, case.rtol)  # type: ignore[arg-type]
        if not why:
            return "ref-match", f"onnxruntime refuses ({str(ort_out)[:120]}); tether matches the reference"
        return "lenient", f"onnxruntime refuses ({str(ort_out)[:120]}); tether differs from the reference: {why}"
    spec = SPEC_ORACLES.get(case.op)
    if spec is not None:
        why = _compare(got, spec(onnx.load_from_string(case.model), case.feeds), case.rtol)  # type: ignore[arg-type]
        if not why:
            return "spec-match", f"onnxruntime and the reference refuse; tether matches the spec's formula ({case.op})"
        return "lenient", f"onnxruntime and the reference refuse; tether differs from the spec's formula: {why}"
    return "lenient", f"tether runs what onnxruntime and the reference refuse ({str(ort_out)[:160]})"


def _worker(path: str, devices: list[str], vulkan_ops: set[str]) -> None:
    with open(path, "rb") as f:
        cases: list[Case] = pickle.load(f)
    for case in cases:
        def emit(stage: str, cid: str = case.id) -> None:
            print(json.dumps({"begin": cid, "stage": stage}), flush=True)

        emit("ort")
        oracle = (False, "onnxruntime crashed on it") if case.skip_ort else _ort(case.model, case.feeds)
        results = {}
        for device in devices:
            if device != "cpu" and case.op not in vulkan_ops:
                continue
            emit(device)
            results[device] = judge(case, device, oracle, lambda s, d=device: emit(f"{d}+{s}"))
        print(json.dumps({"done": case.id, "results": results}), flush=True)


@dataclass
class Result:
    """What one case gave on each device: {device: (verdict, detail)}."""

    case: Case
    results: dict[str, tuple[str, str]]

    @property
    def findings(self) -> dict[str, tuple[str, str]]:
        return {d: r for d, r in self.results.items() if r[0] in FINDINGS}


def _child(cases: list[Case], devices: list[str], vulkan_ops: set[str]) -> tuple[dict[str, dict], str | None, str]:
    """Runs `cases` in one child; returns the finished results, the id of the case it was
    running when it died (None when it finished) and how it died."""
    with tempfile.NamedTemporaryFile("wb", suffix=".pkl", delete=False) as f:
        pickle.dump(cases, f)
    env = dict(os.environ)
    env.pop("TETHER_VULKAN_VALIDATION", None)
    cmd = [sys.executable, __file__, "--worker", f.name, "--devices", ",".join(devices),
           "--vulkan-ops", ",".join(sorted(vulkan_ops))]
    timeout = 60 + 15 * len(cases)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
        how = f"exit {proc.returncode}" if proc.returncode >= 0 else f"signal {-proc.returncode}"
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        how = f"timeout ({timeout} s for {len(cases)} cases)"
    finally:
        os.unlink(f.name)
    done: dict[str, dict] = {}
    running: str | None = None
    stage = ""
    for line in out.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "begin" in msg:
            running, stage = msg["begin"], msg["stage"]
        elif "done" in msg:
            done[msg["done"]] = msg["results"]
            running = None
    if running is None and len(done) < len(cases) and proc.returncode != 0:
        running = next(c.id for c in cases if c.id not in done)
        stage = "load"
    if running is None:
        return done, None, ""
    tail = " | ".join(err.strip().splitlines()[-3:])[-400:]
    return done, running, f"{how} in {stage}: {tail}"


def run_cases(cases: Sequence[Case], devices: Sequence[str] = ("cpu",), vulkan_ops: set[str] | None = None,
              batch: int = 40, jobs: int = 1, progress: bool = False) -> list[Result]:
    """Runs `cases` in child processes, `batch` per child, `jobs` children at a time; a child
    that dies marks the case it was running as a crash (or timeout) found on the device it
    was running, after a second run of that case alone, and the rest of its batch goes on in
    a new child.

    Example:
        >>> cases, _ = generate(["Clip"])
        >>> {r.results["cpu"][0] for r in run_cases(cases[:2])} <= {"typed", "match", "typed-ort-ran", "ref-match"}
        True
    """
    from concurrent.futures import ThreadPoolExecutor

    vulkan_ops = vulkan_ops or set()
    devices = list(devices)
    by_id = {c.id: c for c in cases}
    results: dict[str, Result] = {}

    def one_batch(todo: list[Case]) -> None:
        while todo:
            done, crashed, how = _child(todo, devices, vulkan_ops)
            for cid, res in done.items():
                results[cid] = Result(by_id[cid], {d: tuple(v) for d, v in res.items()})
            if crashed is None:
                return
            if len(todo) > 1:  # isolate: the culprit alone, in a child of its own
                _, again, how_alone = _child([by_id[crashed]], devices, vulkan_ops)
                how = how_alone if again else f"{how} (not alone: the batch's earlier cases set it up)"
            stage = how.split(" in ", 1)[1].split(":", 1)[0] if " in " in how else "cpu"
            device = stage.split("+")[0] if stage.split("+")[0] in devices else "oracle"
            verdict = "timeout" if how.startswith("timeout") else "crash"
            todo = [c for c in todo if c.id not in done and c.id != crashed]
            if stage == "ort" and not by_id[crashed].skip_ort:  # onnxruntime's crash: tether still runs it
                retry = dataclasses.replace(by_id[crashed], skip_ort=True)
                by_id[crashed] = retry
                todo.insert(0, retry)
                continue
            results[crashed] = Result(by_id[crashed], {device: (verdict, how)})

    batches = [list(cases[k:k + batch]) for k in range(0, len(cases), batch)]
    start = time.time()
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for k, _ in enumerate(pool.map(one_batch, batches)):
            if progress:
                print(f"  batch {k + 1}/{len(batches)} ({time.time() - start:.0f} s)", file=sys.stderr, flush=True)
    return [results[c.id] for c in cases if c.id in results]


# ---- the fuzz corpus and the C++ table ----------------------------------------------------------
FUZZ_SHAPES_KEY = "tether.fuzz.shapes"
_FILL_ABOVE = 64  # integer inputs of more values are fed as zeros by the fuzz replayer; smaller ones stay initializers


def fuzz_model(case: Case) -> bytes:
    """`case`'s model for the engine fuzz replayer: small integer inputs (shapes, axes, pads)
    become initializers holding the case's values; every other graph input keeps its symbolic
    dims, and metadata_props[FUZZ_SHAPES_KEY] gives its run-time shape as "name:d0,d1" (with
    "=0" for integer inputs the replayer fills with zeros: indices that are always in range).

    Example:
        >>> cases, _ = generate(["Clip"], modes=["dynamic"])
        >>> b"tether.fuzz.shapes" in fuzz_model(cases[0])
        True
    """
    model = onnx.load_from_string(case.model)
    keep, specs = [], []
    for vi in model.graph.input:
        a = case.feeds[vi.name]
        if a.dtype.kind in "iub" and a.size <= _FILL_ABOVE:
            model.graph.initializer.append(numpy_helper.from_array(a, vi.name))
            continue
        keep.append(vi)
        fill = "=0" if a.dtype.kind in "iub" else ""
        specs.append(f"{vi.name}:{','.join(str(d) for d in a.shape)}{fill}")
    del model.graph.input[:]
    model.graph.input.extend(keep)
    helper.set_model_props(model, {FUZZ_SHAPES_KEY: ";".join(specs)})
    return model.SerializeToString()


# The order in which a relation's cases join the corpus: the 64k-wide dim first (fed at run
# time, so the file stays small), then the others, alternating the two modes.
_CORPUS_ORDER = [("wide", "dynamic"), ("larger", "static"), ("empty", "dynamic"), ("rank+1", "static"),
                 ("one", "dynamic"), ("zero", "static"), ("smaller", "dynamic"), ("rank-1", "static")]


def corpus_sample(cases: Sequence[Case], max_files: int = 500, max_bytes: int = 2_000_000,
                  max_file: int = 12_000) -> list[tuple[str, bytes]]:
    """A sample of `cases` as (file name, fuzz model bytes): each relation's cases in
    _CORPUS_ORDER (then the rest), round-robin across relations until `max_files` or
    `max_bytes`, so that every op and relation kind comes first. Files over `max_file` bytes
    are left out."""
    by_rel: dict[str, list[Case]] = {}
    for c in cases:
        by_rel.setdefault(c.relation, []).append(c)

    def rank(c: Case) -> int:
        key = (c.variant, c.mode)
        return _CORPUS_ORDER.index(key) if key in _CORPUS_ORDER else len(_CORPUS_ORDER) + VARIANTS.index(c.variant)

    queues = [sorted(v, key=rank) for v in by_rel.values()]
    out: list[tuple[str, bytes]] = []
    total = 0
    while any(queues) and len(out) < max_files:
        for q in queues:
            if not q or len(out) >= max_files:
                continue
            c = q.pop(0)
            data = fuzz_model(c)
            if len(data) > max_file or total + len(data) > max_bytes:
                continue
            total += len(data)
            name = c.id.replace(":", "_").replace("+", "_").replace("@", "a_").replace("#", "n_")
            out.append((f"{name}.onnx", data))
    return out


_DIM_CODES = {"": -1, "last": -1, "off": 1000, "axis": 1001}


def emit_cpp() -> str:
    """RELATIONS as C++ initializer rows for the fuzz mutator (contract_relations.inc).

    Example:
        >>> '{"Clip", "scalar", \\'s\\', 1, -1, -1, ""},' in emit_cpp()
        True
    """
    lines = [
        "// Generated by tests/fuzz/contracts.py --emit-cpp from its RELATIONS table; do not edit.",
        "// Rows: op, kind, target ('i' a dim of an input, 's' an input the spec makes a scalar,",
        "// 'v' the values of a 1-D input, '@' the length of an ints attribute, '#' the value of an",
        "// int attribute), input, tied input (changed alike; -1: none), dim (negative: from the",
        "// end; 1000: the first dim other than the axis; 1001: the axis), attribute name.",
    ]
    for r in relations():
        t = r.target
        if t[0] in "@#":
            lines.append(f'{{"{r.op}", "{r.kind}", \'{t[0]}\', -1, -1, -1, "{t[1:]}"}},')
            continue
        parts = t.split(":")
        dim = parts[1] if len(parts) > 1 else ""
        idx = [int(p.lstrip("isv")) for p in parts[0].split("+")]
        code = _DIM_CODES[dim] if dim in _DIM_CODES else int(dim)
        tied = idx[1] if len(idx) > 1 else -1
        lines.append(f'{{"{r.op}", "{r.kind}", \'{t[0]}\', {idx[0]}, {tied}, {code}, ""}},')
    return "\n".join(lines) + "\n"


# ---- the command line ---------------------------------------------------------------------------
def backend_ops(device: str) -> set[str]:
    """The ONNX-domain ops `device` registers, or the empty set when it has no device here."""
    import tether as tt

    try:
        return {op for dom, op in tt.supported_ops(device) if dom == ""}
    except tt.Error:
        return set()


def summarize(results: Sequence[Result]) -> dict[str, Counter]:
    """Verdict counts per device."""
    out: dict[str, Counter] = {}
    for r in results:
        for device, (verdict, _) in r.results.items():
            out.setdefault(device, Counter())[verdict] += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", action="append", help="only this op (repeatable)")
    p.add_argument("--devices", default="cpu,vulkan", help="comma-separated: cpu, vulkan")
    p.add_argument("--jobs", type=int, default=1, help="children at a time (at most 2 on a shared machine)")
    p.add_argument("--batch", type=int, default=40, help="cases per child")
    p.add_argument("--show", action="store_true", help="print every case's verdict")
    p.add_argument("--json", help="write every result here")
    p.add_argument("--corpus", help="write a sample of the cases that give no finding as fuzz models here")
    p.add_argument("--emit-cpp", help="write the relation table as C++ rows here")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--vulkan-ops", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    devices = [d for d in args.devices.split(",") if d]
    if args.worker:
        _worker(args.worker, devices, set(args.vulkan_ops.split(",")))
        return 0
    if args.emit_cpp:
        Path(args.emit_cpp).write_text(emit_cpp())
        print(f"{len(relations())} relations of {len(RELATIONS)} ops -> {args.emit_cpp}")
        return 0
    cpu_ops = backend_ops("cpu")
    vulkan_ops = backend_ops("vulkan") if "vulkan" in devices else set()
    if not vulkan_ops:
        devices = [d for d in devices if d != "vulkan"]
    ops = set(args.op) if args.op else cpu_ops | vulkan_ops
    cases, missing = generate(sorted(ops & set(RELATIONS)))
    print(f"{len(relations(ops))} relations of {len({r.op for r in relations(ops)})} ops; {len(cases)} cases; "
          f"{len(missing)} relations without a base case: {', '.join(r.name for r in missing) or '-'}")
    uncovered = sorted(o for o in ops if o not in RELATIONS)
    print(f"ops without relations ({len(uncovered)}): {' '.join(uncovered)}")
    results = run_cases(cases, devices, vulkan_ops, batch=args.batch, jobs=args.jobs, progress=True)
    for device, counts in summarize(results).items():
        print(f"{device}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for r in results:
        for device, (verdict, detail) in r.results.items():
            if args.show or verdict in FINDINGS or verdict in ("ref-match", "spec-match"):
                print(f"{verdict:14} {device:6} {r.case.id}  {detail[:300]}")
    if args.json:
        Path(args.json).write_text(json.dumps([{"id": r.case.id, "base": r.case.base, "results": r.results}
                                               for r in results], indent=1))
    if args.corpus:
        clean = [r.case for r in results if not r.findings]
        folder = Path(args.corpus)
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.onnx"):
            old.unlink()
        sample = corpus_sample(clean)
        for name, data in sample:
            (folder / name).write_bytes(data)
        print(f"{len(sample)} files, {sum(len(d) for _, d in sample)} bytes -> {folder}")
    return 1 if any(r.findings for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
