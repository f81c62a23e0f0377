"""Oracles for tether's shape inference: onnxruntime's actual output shapes, concrete and
with a symbolic batch substituted.

A ``Case`` is a small ONNX graph. ``check_static`` runs it in onnxruntime with static input
shapes and compares every output's shape and dtype with what tether infers.
``check_symbolic`` declares chosen input dims as the symbol ``N``, lets tether infer, then
substitutes N = 1 and N = 5 into tether's dims and compares with onnxruntime's shapes at
those batch sizes. Unknown dims are tallied in ``UNKNOWN_DIMS`` so a run can report them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import tether as tt
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
D = TensorProto.DOUBLE
H = TensorProto.FLOAT16
I64 = TensorProto.INT64
I32 = TensorProto.INT32
U8 = TensorProto.UINT8
I8 = TensorProto.INT8
B = TensorProto.BOOL
S = TensorProto.STRING

SYMBOL = "N"
BATCHES = (1, 5)
# A second symbol ("S", a sequence length) takes other values than N, so a rule that mixes
# the two up is caught.
OFFSETS = {"N": 0, "S": 2}

# case id -> output -> number of unknown dims where onnxruntime's dim was static / varied with N.
UNKNOWN_DIMS: dict[str, dict[str, tuple[int, int]]] = {}

_ORT_OPTS = ort.SessionOptions()
_ORT_OPTS.log_severity_level = 3
_ORT_OPTS.intra_op_num_threads = 1
_ORT_OPTS.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL


def node(op: str, inputs: Sequence[str], outputs: Sequence[str], name: str = "",
         **attrs: Any) -> onnx.NodeProto:
    """A NodeProto; its name defaults to the op in lower case."""
    return helper.make_node(op, list(inputs), list(outputs), name=name or op.lower(), **attrs)


def const(value: Any, dtype: Any = np.int64) -> np.ndarray:
    return np.asarray(value, dtype=dtype)


def rand(*shape: int, dtype: Any = np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@dataclass
class Case:
    """One graph under test.

    inputs: name -> (onnx elem type, static shape). inits: constant initializers.
    sym: input name -> axis whose dim becomes the symbol N in the symbolic check, or
    {axis: symbol} for several ("N", "S"); None: the first input's axis 0; {}: no symbolic
    check. feeds: values for some inputs given the
    concrete shapes (indices must be in range, etc.). allow_unknown: outputs whose dims may
    be unknown in the symbolic check, with why (data-dependent sizes).
    """

    id: str
    nodes: list[onnx.NodeProto]
    inputs: dict[str, tuple[int, list[int]]]
    outputs: list[str]
    inits: dict[str, np.ndarray] = field(default_factory=dict)
    opset: int = 20
    sym: dict[str, int | dict[int, str]] | None = None
    feeds: Callable[[dict[str, tuple[int, ...]]], dict[str, np.ndarray]] | None = None
    allow_unknown: dict[str, str] = field(default_factory=dict)
    static_unknown: dict[str, str] = field(default_factory=dict)  # same, for static inputs
    batches: tuple[int, ...] = BATCHES
    oracle: str = "ort"  # "onnx": onnx's strict shape inference, where onnxruntime cannot run it

    def __post_init__(self) -> None:
        # Node names must be unique for onnxruntime; chains reuse ops.
        seen: dict[str, int] = {}
        for n in self.nodes:
            k = seen.get(n.name, 0)
            seen[n.name] = k + 1
            if k:
                n.name = f"{n.name}_{k}"

    def sym_axes(self) -> dict[str, dict[int, str]]:
        sym = self.sym if self.sym is not None else {next(iter(self.inputs)): 0}
        return {n: ({a: SYMBOL} if isinstance(a, int) else a) for n, a in sym.items()}


def build(case: Case, shapes: dict[str, list[Any]],
          declared: dict[str, onnx.ValueInfoProto] | None = None) -> bytes:
    """The case's model with the given input shapes, outputs left untyped (or `declared`)."""
    ins = [helper.make_tensor_value_info(n, t, shapes[n]) for n, (t, _) in case.inputs.items()]
    outs = []
    for name in case.outputs:
        if declared and name in declared:
            outs.append(declared[name])
        else:
            outs.append(helper.make_empty_tensor_value_info(name))
    inits = [numpy_helper.from_array(v, n) for n, v in case.inits.items()]
    graph = helper.make_graph(case.nodes, "g", ins, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
    model.ir_version = 8 if case.opset <= 18 else 10
    return model.SerializeToString()


_NP = {F: np.float32, D: np.float64, H: np.float16, I64: np.int64, I32: np.int32, U8: np.uint8,
       I8: np.int8, B: np.bool_, S: object}


def make_feeds(case: Case, shapes: dict[str, tuple[int, ...]],
               seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    given = case.feeds(shapes) if case.feeds else {}
    out = {}
    for name, (t, _) in case.inputs.items():
        if name in given:
            out[name] = np.asarray(given[name], dtype=_NP[t])
            continue
        shape = shapes[name]
        if t == B:
            out[name] = np.asarray(rng.random(shape) < 0.5)
        elif t == S:
            out[name] = np.full(shape, "ab", dtype=object)
        elif t in (I64, I32, U8, I8):
            out[name] = rng.integers(0, 3, size=shape).astype(_NP[t])
        else:
            out[name] = rng.standard_normal(shape).astype(_NP[t])
    return out


def run_ort(model: bytes, feeds: dict[str, np.ndarray],
            outputs: list[str]) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(model, _ORT_OPTS, providers=["CPUExecutionProvider"])
    return dict(zip(outputs, sess.run(outputs, feeds), strict=True))


def infer(model: bytes) -> dict[str, tt.ValueInfo]:
    m = tt.load(model)
    m.infer_shapes()
    return m.value_types()


def symbol_values(b: int) -> dict[str, int]:
    return {name: b + off for name, off in OFFSETS.items()}


def eval_dim(d: Any, values: dict[str, int]) -> int | None:
    """A tether dim with symbols substituted: "N", "7*N", "N*S", "N*3"; None when the text
    is not such a product (an opaque symbol like "3*(s0 + 1)")."""
    if isinstance(d, int):
        return d
    value = 1
    for term in str(d).split("*"):
        term = term.strip()
        if re.fullmatch(r"\d+", term):
            value *= int(term)
        elif term in values:
            value *= values[term]
        else:
            return None
    return value


def _dtype_name(a: np.ndarray) -> str:
    return {np.dtype(np.bool_): "bool", np.dtype(object): "string"}.get(a.dtype, a.dtype.name)


def onnx_inferred(model: bytes) -> dict[str, tuple[str, tuple[int | str | None, ...]]]:
    """Output dtypes and shapes from onnx's own strict shape inference, with data propagation."""
    m = onnx.shape_inference.infer_shapes(onnx.load_from_string(model), strict_mode=True,
                                          data_prop=True)
    out = {}
    for vi in m.graph.output:
        t = vi.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                     for d in t.shape.dim)
        dtype = _dtype_name(np.empty(0, helper.tensor_dtype_to_np_dtype(t.elem_type)))
        out[vi.name] = (dtype, dims)
    return out


def check_static(case: Case) -> None:
    """Static input shapes: tether's inferred type equals onnxruntime's output, exactly
    (or onnx's strict inference for cases onnxruntime cannot run)."""
    shapes = {n: list(s) for n, (_, s) in case.inputs.items()}
    model = build(case, shapes)
    if case.oracle == "onnx":
        expected = onnx_inferred(model)
    else:
        feeds = make_feeds(case, {n: tuple(s) for n, s in shapes.items()})
        got = run_ort(model, feeds, case.outputs)
        expected = {n: (_dtype_name(a), a.shape) for n, a in got.items()}
    types = infer(model)
    for name, (dtype, shape) in expected.items():
        vi = types[name]
        assert vi.dtype == dtype, f"{case.id} {name}: dtype {vi.dtype}, oracle {dtype}"
        assert vi.shape is not None, f"{case.id} {name}: tether has unknown rank, oracle {shape}"
        assert len(vi.shape) == len(shape), f"{case.id} {name}: tether {vi.shape}, oracle {shape}"
        for k, (d, actual) in enumerate(zip(vi.shape, shape, strict=True)):
            if d is None and name in case.static_unknown:
                continue
            assert isinstance(actual, int), f"{case.id} {name}: the oracle has no static dim {k}"
            assert d == actual, f"{case.id} {name}: dim {k} is {d!r}, oracle {shape}"


def check_symbolic(case: Case) -> None:
    """Batch dims declared as N: tether's dims, with N = 1 and 5 substituted, equal
    onnxruntime's shapes at those batch sizes; unknown dims are tallied, and fail unless the
    output is in allow_unknown."""
    axes = case.sym_axes()
    sym_shapes = {n: list(s) for n, (_, s) in case.inputs.items()}
    for n, at in axes.items():
        for a, symbol in at.items():
            sym_shapes[n][a] = symbol
    model = build(case, sym_shapes)
    types = infer(model)
    actual: dict[int, dict[str, np.ndarray]] = {}
    for b in case.batches:
        values = symbol_values(b)
        shapes = {n: tuple(values.get(d, d) for d in s) for n, s in sym_shapes.items()}
        actual[b] = run_ort(model, make_feeds(case, shapes, seed=b), case.outputs)
    for name in case.outputs:
        vi = types[name]
        ref = {b: actual[b][name] for b in case.batches}
        first = ref[case.batches[0]]
        assert vi.dtype == _dtype_name(first), (
            f"{case.id} {name}: dtype {vi.dtype}, onnxruntime {first.dtype}")
        if vi.shape is None:
            UNKNOWN_DIMS.setdefault(case.id, {})[name] = (0, first.ndim)
            assert name in case.allow_unknown, f"{case.id} {name}: tether has unknown rank"
            continue
        for b in case.batches:
            assert len(vi.shape) == ref[b].ndim, (
                f"{case.id} {name}: tether {vi.shape}, N={b}: {ref[b].shape}")
        static_unknown = varying_unknown = 0
        for k, d in enumerate(vi.shape):
            sizes = {b: ref[b].shape[k] for b in case.batches}
            if d is None:
                if len(set(sizes.values())) == 1:
                    static_unknown += 1
                else:
                    varying_unknown += 1
                continue
            for b, size in sizes.items():
                v = eval_dim(d, symbol_values(b))
                if v is None:
                    continue
                assert v == size, (
                    f"{case.id} {name}: dim {k} is {d!r} = {v} at N={b}, "
                    f"onnxruntime {ref[b].shape}")
        if static_unknown or varying_unknown:
            UNKNOWN_DIMS.setdefault(case.id, {})[name] = (static_unknown, varying_unknown)
            assert name in case.allow_unknown, (
                f"{case.id} {name}: tether {vi.shape} leaves dims unknown, onnxruntime "
                f"{[ref[b].shape for b in case.batches]}"
            )
