"""tether.quantize.debug: per quantized node, the INT8 error it adds and the error it carries.

Two numbers per node answer "which layer breaks INT8": the error the node *adds* (its
quantized form fed with the float model's values, so nothing upstream counts) and the *total*
at its output (the quantized model's own value, which carries every upstream error too). A
node with a low added SQNR is a cause; a node with a low total but a high added SQNR only
inherits.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from tether._model import Model, load
from tether._native import core as _core
from tether._session import compile as _compile

_QDQ = ("QuantizeLinear", "DequantizeLinear")
# The debug model's copies of the quantized nodes and their Q/DQ carry this suffix, so they never
# clash with the float model's own values.
_SUFFIX = "::int8_debug"


@dataclass
class NodeError:
    """One quantized node's INT8 error on the debug batches (float64 sums over every sample).

    ``added_*``: the node's quantized form (its activation inputs quantized and dequantized
    with the quantized model's parameters, its weights dequantized) fed with the float model's
    values, against the float node's output: the error this node adds. ``total_*``: the
    quantized model's own value of that output against the float one: what it inherits plus
    what it adds. SQNR is ``10 log10(sum r^2 / sum (q - r)^2)`` in dB (``inf`` when equal).
    """

    node: str
    op_type: str
    output: str
    added_sqnr_db: float
    added_max_abs: float
    total_sqnr_db: float
    total_max_abs: float
    module: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {k: (v if not isinstance(v, float) or math.isfinite(v) else str(v)) for k, v in asdict(self).items()}


@dataclass
class _Sums:
    signal: float = 0.0
    added: float = 0.0
    total: float = 0.0
    added_max: float = 0.0
    total_max: float = 0.0

    def add(self, ref: np.ndarray, added: np.ndarray, total: np.ndarray) -> None:
        r = np.asarray(ref, np.float64)
        da = np.abs(np.asarray(added, np.float64) - r)
        dt = np.abs(np.asarray(total, np.float64) - r)
        self.signal += float(np.sum(r * r))
        self.added += float(np.sum(da * da))
        self.total += float(np.sum(dt * dt))
        if da.size:
            self.added_max = max(self.added_max, float(np.max(da)))
            self.total_max = max(self.total_max, float(np.max(dt)))


def _sqnr(signal: float, noise: float) -> float:
    if math.isnan(signal) or math.isnan(noise):
        return math.nan
    if noise == 0:
        return math.inf
    return -math.inf if signal == 0 else 10 * math.log10(signal / noise)


def _fmt(x: float) -> str:
    return f"{x:.1f}" if math.isfinite(x) else str(x)


@dataclass
class DebugReport:
    """What :func:`debug` found: ``nodes`` (one :class:`NodeError` per quantized node, in the
    quantized model's order), ``samples`` (rows of the debug batches) and ``notes`` (nodes that
    could not be measured, and why). ``worst()`` ranks the nodes by the error they add.

    Example:
        >>> rep = tt.quantize.debug(res.float_model, res.model, x_val)    # doctest: +SKIP
        >>> rep.worst(1)[0].node                                          # doctest: +SKIP
        'conv1'
        >>> print(rep); rep.to_html("int8_debug.html")                   # doctest: +SKIP
    """

    nodes: list[NodeError]
    samples: int
    notes: list[str] = field(default_factory=list)
    model: Model | None = field(default=None, repr=False)

    def worst(self, k: int = 5) -> list[NodeError]:
        """The ``k`` nodes that add the most error (lowest added SQNR, then largest added max
        abs error), worst first.

        Example:
            >>> [n.node for n in rep.worst(3)]                  # doctest: +SKIP
            ['conv1', 'fc', 'conv2']
        """
        ranked = sorted(self.nodes, key=lambda n: (-math.inf if math.isnan(n.added_sqnr_db) else n.added_sqnr_db,
                                                   -n.added_max_abs))
        return ranked[:k]

    def table(self) -> str:
        """The nodes as a text table, in the quantized model's order."""
        head = ["node", "op", "output", "added SQNR dB", "added max abs", "total SQNR dB", "total max abs"]
        rows = [[n.node, n.op_type, n.output, _fmt(n.added_sqnr_db), f"{n.added_max_abs:.4g}",
                 _fmt(n.total_sqnr_db), f"{n.total_max_abs:.4g}"] for n in self.nodes]
        widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
        return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in [head, *rows])

    def __str__(self) -> str:
        worst = self.worst(3)
        named = "; ".join(f"{n.node} ({n.op_type}): adds {_fmt(n.added_sqnr_db)} dB SQNR, "
                          f"total {_fmt(n.total_sqnr_db)} dB" for n in worst) or "no node measured"
        lines = [f"INT8 debug: {len(self.nodes)} quantized nodes on {self.samples} samples",
                 f"worst by added error: {named}", self.table()]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"samples": self.samples, "worst": [n.node for n in self.worst()],
                "nodes": [n.to_dict() for n in self.nodes], "notes": list(self.notes)}

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        """The report as JSON (infinite SQNRs as the strings ``"inf"`` / ``"-inf"``); written to
        ``path`` when given.

        Example:
            >>> json.loads(rep.to_json())["worst"][0]           # doctest: +SKIP
            'conv1'
        """
        text = json.dumps(self.to_dict(), indent=1, allow_nan=False)
        if path is not None:
            _write(path, text)
        return text

    def to_html(self, path: str | os.PathLike[str] | None = None) -> str:
        """One self-contained HTML page: the worst nodes, a sortable table
        (``table#int8-debug``, worst rows ``tr.worst``) and the quantized model's graph coloured
        by the error each node adds (or its total SQNR); written to ``path`` when given.

        Example:
            >>> rep.to_html("int8_debug.html")                  # doctest: +SKIP
        """
        from tether.quantize._debug_html import render

        text = render(self)
        if path is not None:
            _write(path, text)
        return text


def _write(path: str | os.PathLike[str], text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise _core.WriteError(f"cannot write '{os.fspath(path)}': {e.strerror}") from e


class _Unresolved(Exception):
    pass


@dataclass
class _Plan:
    """The three models a debug run needs and what each node compares."""

    float_model: Model         # the float model, every value compared or fed as an output
    added_model: Model         # the quantized nodes' copies, fed with float values
    total_model: Model         # the quantized model, every compared value as an output
    compared: list[tuple[str, str, list[str]]]   # (node, op, outputs)
    notes: list[str]
    # Per output: the float model's Relu / Clip that the QDQ model dropped after the node, as
    # (lo, hi) bounds to apply before comparing.
    clamps: dict[str, tuple[float, float]] = field(default_factory=dict)


def _typed_output(name: str, types: Mapping[str, Any]) -> Any:
    from onnx import helper

    info = types.get(name)
    if info is None or info.kind != "tensor" or info.dtype in ("", "undefined", "unknown"):
        return None
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(info.dtype))
    return helper.make_tensor_value_info(name, elem, None if info.shape is None else list(info.shape))


def _with_outputs(proto: Any, names: Sequence[str], types: Mapping[str, Any]) -> Model:
    from tether.edit._proto import from_proto

    have = {o.name for o in proto.graph.output}
    for n in names:
        if n not in have:
            proto.graph.output.append(_typed_output(n, types))
            have.add(n)
    return from_proto(proto)


def _is_float(name: str, types: Mapping[str, Any]) -> bool:
    info = types.get(name)
    return info is not None and info.kind == "tensor" and np.dtype(info.dtype).kind == "f"


def _types(model: Model) -> dict[str, Any]:
    """Every value's type, inferred on a copy where the model does not declare it."""
    copy = load(model.to_bytes())
    try:
        copy.infer_shapes()
    except _core.Error:  # a shape contradiction: what the model declares still serves
        return model.value_types()
    return copy.value_types()


def _dropped_activation(fp: Any, value: str, op: str) -> tuple[float, float] | None:
    """When the float model writes ``value`` by a Relu or Clip and the QDQ model by ``op`` (a
    quantizer that folds the activation into the output's range, as onnxruntime's does), the
    activation's bounds; else None."""
    from onnx import numpy_helper

    node = next((n for n in fp.graph.node if value in n.output), None)
    if node is None or node.op_type == op or node.op_type not in ("Relu", "Clip"):
        return None
    if node.op_type == "Relu":
        return 0.0, math.inf
    consts = {i.name: float(numpy_helper.to_array(i)) for i in fp.graph.initializer if len(i.dims) == 0}
    attrs = {a.name: a.f for a in node.attribute}
    ins = list(node.input) + ["", ""]
    lo = consts.get(ins[1], attrs.get("min", -math.inf))
    hi = consts.get(ins[2], attrs.get("max", math.inf))
    return lo, hi


def _build(float_model: Model, qdq_model: Model) -> _Plan:
    from onnx import helper

    from tether.edit._proto import from_proto, to_proto

    fp, qp = to_proto(float_model), to_proto(qdq_model)
    ftypes, qtypes = _types(float_model), _types(qdq_model)
    float_inits = {i.name for i in fp.graph.initializer}
    float_values = {i.name for i in fp.graph.input if i.name not in float_inits}
    float_values |= {o for n in fp.graph.node for o in n.output if o}
    producer = {o: n for n in qp.graph.node for o in n.output if o}
    inits = {i.name: i for i in qp.graph.initializer}
    added = helper.make_graph([], "int8_debug", [], [])
    cloned: dict[str, str] = {}
    fed: list[str] = []
    notes: list[str] = []

    def resolve(v: str) -> str:
        if not v:
            return v
        if v in cloned:
            return cloned[v]
        if v in inits:
            t = added.initializer.add()
            t.CopyFrom(inits[v])
            t.name = cloned[v] = v + _SUFFIX
            return t.name
        p = producer.get(v)
        if p is not None and p.op_type in _QDQ and p.domain in ("", "ai.onnx"):
            ins = [resolve(i) for i in p.input]
            c = added.node.add()
            c.CopyFrom(p)
            del c.input[:], c.output[:]
            c.input.extend(ins)
            c.output.extend(o + _SUFFIX if o else o for o in p.output)
            c.name = p.name + _SUFFIX
            for o in p.output:
                if o:
                    cloned[o] = o + _SUFFIX
            return cloned[v]
        if v in float_values and _typed_output(v, ftypes) is not None:
            if v not in fed:
                fed.append(v)
            cloned[v] = v
            return v
        raise _Unresolved(v)

    compared: list[tuple[str, str, list[str]]] = []
    clamps: dict[str, tuple[float, float]] = {}
    for k, n in enumerate(qp.graph.node):
        if n.op_type in _QDQ:
            continue
        reads_dq = any(producer.get(i) is not None and producer[i].op_type == "DequantizeLinear" for i in n.input)
        if not reads_dq:
            continue
        name = n.name or f"{n.op_type}_{k}"
        outs = [o for o in n.output if o and o in float_values and _is_float(o, ftypes) and _is_float(o, qtypes)]
        if not outs:
            notes.append(f"{name} ({n.op_type}): the float model has no float value named like its outputs "
                         f"{list(n.output)}; not measured")
            continue
        mark = (len(added.node), len(added.initializer), dict(cloned), list(fed))
        try:
            ins = [resolve(i) for i in n.input]
        except _Unresolved as e:
            del added.node[mark[0]:], added.initializer[mark[1]:]
            cloned.clear()
            cloned.update(mark[2])
            fed[:] = mark[3]
            notes.append(f"{name} ({n.op_type}): input '{e}' is neither quantized from a float value nor a value "
                         "of the float model; not measured")
            continue
        c = added.node.add()
        c.CopyFrom(n)
        del c.input[:], c.output[:]
        c.input.extend(ins)
        c.output.extend(o + _SUFFIX if o else o for o in n.output)
        c.name = name + _SUFFIX
        compared.append((name, n.op_type, outs))
        for o in outs:
            bounds = _dropped_activation(fp, o, n.op_type)
            if bounds is not None:
                clamps[o] = bounds
    if not compared:
        raise _core.ArgumentError("tether.quantize.debug: no quantized node of the quantized model could be "
                                  "measured against the float model (they share no value names; pass the float "
                                  "model it was quantized from, e.g. res.float_model)"
                                  + (f": {notes[0]}" if notes else ""))
    added.input.extend(_typed_output(v, ftypes) for v in fed)
    for _, _, outs in compared:
        for o in outs:
            added.output.append(helper.make_tensor_value_info(o + _SUFFIX, helper.np_dtype_to_tensor_dtype(
                np.dtype(qtypes[o].dtype)), None))
    amodel = helper.make_model(added, opset_imports=list(qp.opset_import), ir_version=qp.ir_version)
    wanted = list(dict.fromkeys([*fed, *(o for _, _, outs in compared for o in outs)]))
    fmodel = _with_outputs(fp, wanted, ftypes)
    tmodel = _with_outputs(qp, [o for _, _, outs in compared for o in outs], qtypes)
    return _Plan(fmodel, from_proto(amodel), tmodel, compared, notes, clamps)


def _modules(qdq_model: Model) -> dict[str, str]:
    from tether.parity._provenance import node_origins

    try:
        return {k: o.label for k, o in node_origins(qdq_model).items()}
    except (OSError, ValueError):
        return {}


def debug(float_model: Model | str | os.PathLike[str], qdq_model: Model | str | os.PathLike[str], batches: Any, *,
          batch_size: int | None = None, threads: int | None = None) -> DebugReport:
    """Measures, per quantized node of ``qdq_model``, the INT8 error the node adds and the total
    error at its output, against ``float_model`` on ``batches``.

    ``qdq_model`` is a QDQ model (QuantizeLinear / DequantizeLinear pairs, as
    :func:`tether.quantize.static` writes) whose values keep the float model's names;
    ``float_model`` is the float model it was quantized from (for a :class:`QuantizeResult`,
    ``res.float_model``, or use ``res.debug(batches)``). ``batches``: as for :func:`static`
    (an array or dict of arrays cut into ``batch_size`` rows, or an iterable of batches).

    A quantized node is one that reads a DequantizeLinear output. Its *added* error: a copy of
    the node whose inputs are the quantized model's Q/DQ chains (activations quantized and
    dequantized with the quantized model's scales and zero points, weights dequantized) fed
    with the float model's values, against the float model's value of the node's output. The
    quantization of a tensor therefore counts at the nodes that read it. Its *total* error: the
    quantized model's own value of that output against the float one. Both run on tether's CPU
    engine, the quantized model with its weights dequantized once (as ``static``'s report runs
    it): the arithmetic is float, the values those of INT8. Sums are float64 over every sample.

    Raises ArgumentError when no quantized node can be matched to the float model's values;
    nodes that cannot be (an input that is neither quantized from a float value nor a value of
    the float model) are listed in ``notes``.

    Example:
        >>> res = tt.quantize.static("cnn.onnx", x_calib)                     # doctest: +SKIP
        >>> rep = tt.quantize.debug(res.float_model, res.model, x_val)          # doctest: +SKIP
        >>> rep.worst(1)[0].node, rep.worst(1)[0].added_sqnr_db                  # doctest: +SKIP
        ('conv1', 11.7)
        >>> rep.to_html("int8_debug.html")                                      # doctest: +SKIP
    """
    from tether.quantize._calibrator import iter_batches

    fm = float_model if isinstance(float_model, Model) else load(float_model)
    qm = qdq_model if isinstance(qdq_model, Model) else load(qdq_model)
    plan = _build(fm, qm)
    fsess = _compile(plan.float_model, threads=threads)
    asess = _compile(Model(_core.quant_fold_dequantized_constants(plan.added_model._core)), threads=threads)
    tsess = _compile(Model(_core.quant_fold_dequantized_constants(plan.total_model._core)), threads=threads)
    added_inputs = [i.name for i in plan.added_model.inputs]
    sums = {(node, o): _Sums() for node, _, outs in plan.compared for o in outs}
    samples = 0
    for feeds in iter_batches(batches, fm, batch_size):
        ref = fsess.run(dict(feeds))
        got = asess.run({k: ref[k] for k in added_inputs})
        total = tsess.run(dict(feeds))
        for node, _, outs in plan.compared:
            for o in outs:
                lo, hi = plan.clamps.get(o, (-math.inf, math.inf))
                sums[(node, o)].add(ref[o], np.clip(got[o + _SUFFIX], lo, hi), np.clip(total[o], lo, hi))
        samples += max((int(np.shape(v)[0]) for v in feeds.values() if np.ndim(v)), default=1)
    if samples == 0:
        raise _core.ArgumentError("tether.quantize.debug: no batches: the iterable was empty")
    modules = _modules(qm)
    nodes = []
    for node, op, outs in plan.compared:
        rows = [NodeError(node, op, o, _sqnr(s.signal, s.added), s.added_max, _sqnr(s.signal, s.total), s.total_max,
                          modules.get(node, "")) for o in outs for s in [sums[(node, o)]]]
        nodes.append(min(rows, key=lambda r: r.added_sqnr_db))
    return DebugReport(nodes, samples, plan.notes, qm)


def graph_data(report: DebugReport) -> dict[str, Any] | None:
    """The graph view's data for ``report.model``: each measured node carries its added SQNR
    (the ``sens`` colouring, ranked worst first) and its total SQNR (the ``snr`` colouring)."""
    from tether.parity._graph_view import _number
    from tether.parity._graph_view import graph_data as parity_graph

    if report.model is None:
        return None
    data = parity_graph(SimpleNamespace(layers=[], first_divergent=None, quantization=None), report.model)  # type: ignore[arg-type]
    rank = {n.node: k + 1 for k, n in enumerate(report.worst(len(report.nodes)))}
    by_name = {n.node: n for n in report.nodes}
    for d in data["nodes"]:
        n = by_name.get(d["name"])
        if n is None:
            continue
        d.update(status="ok", snr=_number(n.total_sqnr_db), max_abs=_number(n.total_max_abs),
                 sensitivity={"sqnr": _number(n.added_sqnr_db), "rank": rank[n.node], "drop": None})
    data.update(sensitivity=True, note="", sens_label="INT8 error added by the node")
    return data
