"""tether ops-config: the op list of a reduced deployment build, made from the models it will run.

The list names every op whose CPU kernel running the models needs, as the engine runs them:
after the graph passes compile() applies (fused forms such as ``ai.tether:FusedConv`` appear,
the ops they replaced do not), with the ops constant folding computes at compile time and the
ops of If / Loop / Scan bodies (which the engine compiles on their own, passes included).
``cmake -DTETHER_DEPLOY=ON -DTETHER_DEPLOY_OPS=ops.txt`` then keeps only those kernels
(docs/building.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import tether
from tether._model import Model

Op = tuple[str, str]
"""(domain, op_type); ``""`` is the ONNX domain."""

# Folding computes these without a kernel (Shape and Size of static shapes read types only).
_FOLDED_WITHOUT_KERNEL = {("", "Constant"), ("", "Shape"), ("", "Size")}
_HALF_TYPES = {10, 16}  # TensorProto FLOAT16 and BFLOAT16


def _domain(d: str) -> str:
    return "" if d == "ai.onnx" else d


def _proto(model: Model) -> Any:
    import onnx

    return onnx.load_from_string(model.to_bytes())


def _subgraphs(node: Any) -> list[Any]:
    out = []
    for a in node.attribute:
        if a.HasField("g"):
            out.append(a.g)
        out.extend(a.graphs)
    return out


class _Scope:
    """What a body's standalone compile knows of the values it reads from enclosing graphs:
    their initializers (copied into the compiled body) and their types."""

    def __init__(self, initializers: dict[str, Any], types: dict[str, Any]) -> None:
        self.initializers = initializers
        self.types = types

    def inner(self, graph: Any) -> _Scope:
        types = dict(self.types)
        for v in list(graph.input) + list(graph.output) + list(graph.value_info):
            if v.type.HasField("tensor_type"):
                types[v.name] = v.type
        return _Scope(self.initializers | {t.name: t for t in graph.initializer}, types)


def _body_ops(body: Any, opsets: Any, optimize: bool, scope: _Scope, add: Callable[[Op], None]) -> None:
    """A subgraph's ops: as written, and as compile_subgraph runs them (optimised on its own,
    with the enclosing graphs' initializers it reads and their other values as inputs). Both
    are kept: a body whose standalone form cannot be optimised here still gets every kernel it
    names."""
    _graph_ops(body, opsets, optimize, scope, add)
    if not optimize:
        return
    try:
        opt = _proto(tether.optimize(tether.load(_standalone(body, opsets, scope).SerializeToString())))
    except tether.Error:
        return
    _graph_ops(opt.graph, opsets, optimize, scope, add)


def _standalone(body: Any, opsets: Any, scope: _Scope) -> Any:
    """The body as a model of its own, as compile_subgraph makes it."""
    import onnx

    defined = {v.name for v in body.input} | {t.name for t in body.initializer}
    for n in body.node:
        defined.update(o for o in n.output if o)
    graph = onnx.GraphProto()
    graph.CopyFrom(body)
    seen: set[str] = set()
    for n in _all_nodes(body):
        for name in n.input:
            if not name or name in defined or name in seen:
                continue
            seen.add(name)
            if name in scope.initializers:
                graph.initializer.append(scope.initializers[name])
            else:
                graph.input.append(onnx.helper.make_value_info(name, scope.types.get(name, onnx.TypeProto())))
    return onnx.helper.make_model(graph, opset_imports=list(opsets))


def _all_nodes(graph: Any) -> list[Any]:
    out = []
    for n in graph.node:
        out.append(n)
        for body in _subgraphs(n):
            out.extend(_all_nodes(body))
    return out


def _graph_ops(graph: Any, opsets: Any, optimize: bool, scope: _Scope, add: Callable[[Op], None]) -> None:
    inner = scope.inner(graph)
    for n in graph.node:
        add((_domain(n.domain), n.op_type))
        for body in _subgraphs(n):
            _body_ops(body, opsets, optimize, inner, add)


def _folded_ops(source: Any, optimized: Any) -> set[Op]:
    """Ops that constant folding computed with their kernels: the nodes whose outputs became
    initializers of the optimised graph, and the nodes before them that fed them."""
    given = {t.name for t in source.initializer} | {v.name for v in source.input}
    folded = {t.name for t in optimized.initializer} - given
    producer = {o: n for n in source.node for o in n.output if o}
    stack = [n for n in source.node if any(o in folded for o in n.output)]
    seen: set[int] = set()
    out: set[Op] = set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        op = (_domain(n.domain), n.op_type)
        if op in _FOLDED_WITHOUT_KERNEL:
            continue
        out.add(op)
        stack.extend(producer[i] for i in n.input if i in producer)
    return out


def _lookup_sources(source: Any, optimized: Any) -> set[Op]:
    """Ops whose kernels computed the tables of the optimised graph's ai.tether QLinearLookup
    nodes at compile time: each replaced DequantizeLinear -> op -> QuantizeLinear (or a
    com.microsoft contrib op that stands for them), found in the source graph from the lookup's
    output, which keeps the QuantizeLinear's name. Without them the table is not made, and the
    three nodes run instead."""
    producer = {o: n for n in source.node for o in n.output if o}
    out: set[Op] = set()
    for n in optimized.node:
        if (_domain(n.domain), n.op_type) != ("ai.tether", "QLinearLookup"):
            continue
        node = producer.get(n.output[0])
        for _ in range(3):  # QuantizeLinear, the op, DequantizeLinear
            if node is None:
                break
            out.add((_domain(node.domain), node.op_type))
            if node.op_type == "DequantizeLinear" or _domain(node.domain) == "com.microsoft" or not node.input:
                break
            node = producer.get(node.input[0])
    return out


def _inferred_types(model: Any) -> dict[str, Any]:
    """Value types by name from ONNX's shape inference, where it succeeds (a model with ops of
    other domains may stop it; the bodies are then optimised with what the model declares)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - any failure only means fewer known types
        return {}
    return {v.name: v.type for g in [inferred.graph] for v in g.value_info if v.type.HasField("tensor_type")}


def _has_half(graph: Any) -> bool:
    values = list(graph.input) + list(graph.output) + list(graph.value_info)
    return any(v.type.tensor_type.elem_type in _HALF_TYPES for v in values) or any(
        t.data_type in _HALF_TYPES for t in graph.initializer)


# onnxruntime's QOperator contrib ops, which every session writes as a standard op between
# DequantizeLinear and QuantizeLinear (passes::expand_qoperator_ops, also with optimize off):
# the kernels each then needs besides those two.
QOPERATOR_EXPANDED: dict[Op, set[Op]] = {
    ("com.microsoft", "QLinearSigmoid"): {("", "Sigmoid")},
    ("com.microsoft", "QLinearLeakyRelu"): {("", "LeakyRelu")},
    ("com.microsoft", "QLinearMul"): {("", "Mul")},
    ("com.microsoft", "QLinearConcat"): {("", "Concat")},
    ("com.microsoft", "QLinearAveragePool"): {("", "AveragePool"), ("", "Transpose")},
    ("com.microsoft", "QLinearSoftmax"): {("", "Softmax"), ("", "Transpose"), ("", "Flatten"), ("", "Shape"),
                                          ("", "Reshape")},
}


def ops_config(models: Sequence[str | os.PathLike[str]], *, optimize: bool = True) -> list[Op]:
    """The ops, as (domain, op_type) with ``""`` for ONNX, whose CPU kernels running ``models``
    needs: what a reduced deployment build (``-DTETHER_DEPLOY_OPS``) must keep.

    ``optimize``: as ``tt.compile(optimize=...)`` in the deployment (True: the ops after the
    graph passes, plus those constant folding computes at compile time). Raises
    UnsupportedError naming the op and model when a model needs an op the CPU engine has no
    kernel for, ArgumentError / ParseError for a file that is no model.

    Example:
        >>> ops_config(["cnn.onnx"])[-2:]                # doctest: +SKIP
        [('ai.tether', 'FusedConv'), ('ai.tether', 'GlobalAveragePool')]
    """
    if not models:
        raise tether.ArgumentError("ops-config needs at least one model")
    supported = {(d, o) for d, o in tether.supported_ops("cpu")}
    ops: set[Op] = set()
    for path in models:
        found: set[Op] = set()
        model = tether.load(path)
        source = _proto(model)
        graph = _proto(tether.optimize(model)).graph if optimize else source.graph
        _graph_ops(graph, source.opset_import, optimize, _Scope({}, _inferred_types(source)), found.add)
        if optimize:
            found |= _folded_ops(source.graph, graph) | _lookup_sources(source.graph, graph)
        if _has_half(graph):
            found.add(("", "Cast"))  # float16 / bfloat16 values computed in float32 between Casts
        for contrib in found & QOPERATOR_EXPANDED.keys():  # (optimize off: not written out yet)
            found |= QOPERATOR_EXPANDED[contrib] | {("", "DequantizeLinear"), ("", "QuantizeLinear")}
            found.discard(contrib)
        missing = sorted(found - supported)
        if missing:
            names = ", ".join(f"{d}:{o}" if d else o for d, o in missing)
            raise tether.UnsupportedError(f"model '{os.fspath(path)}': the CPU engine has no kernel for {names}")
        ops |= found
    ops.discard(("", "Constant"))  # the executor computes Constant nodes itself
    return sorted(ops)


def format_ops_config(ops: Sequence[Op], models: Sequence[str | os.PathLike[str]], optimize: bool = True) -> str:
    """The op list as the file ``-DTETHER_DEPLOY_OPS`` reads: a comment header naming the
    models, then one op a line, ``Conv`` for the ONNX domain and ``ai.tether:FusedConv`` for
    others.

    Example:
        >>> print(format_ops_config([("", "Relu")], ["m.onnx"]), end="")  # doctest: +NORMALIZE_WHITESPACE
        # The ops whose CPU kernels a reduced tether deployment build keeps (docs/building.md):
        #   cmake -S . -B build/deploy -DTETHER_DEPLOY=ON -DTETHER_DEPLOY_OPS=<this file>
        # Written by `tether ops-config` from these models (graph passes on, as tt.compile runs them):
        #   m.onnx
        # One op a line: Op for the ONNX domain, domain:Op for others; '#' starts a comment.
        Relu
    """
    passes = "on, as tt.compile runs them" if optimize else "off, as tt.compile(optimize=False)"
    lines = ["# The ops whose CPU kernels a reduced tether deployment build keeps (docs/building.md):",
             "#   cmake -S . -B build/deploy -DTETHER_DEPLOY=ON -DTETHER_DEPLOY_OPS=<this file>",
             f"# Written by `tether ops-config` from these models (graph passes {passes}):"]
    lines += [f"#   {os.fspath(m)}" for m in models]
    lines.append("# One op a line: Op for the ONNX domain, domain:Op for others; '#' starts a comment.")
    lines += [f"{d}:{o}" if d else o for d, o in ops]
    return "\n".join(lines) + "\n"


def run_ops_config(args: Any) -> int:
    """``tether ops-config``: writes the op list of ``args.models`` to ``args.output``
    (standard output when absent or ``-``)."""
    ops = ops_config(args.models, optimize=not args.no_optimize)
    text = format_ops_config(ops, args.models, optimize=not args.no_optimize)
    if args.output in (None, "-"):
        print(text, end="")
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"{len(ops)} ops written to {args.output}")
    return 0
