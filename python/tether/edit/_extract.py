"""extract: the subgraph between named values, as a model of its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tether._model import Model
from tether._native import core as _core
from tether.edit._proto import ModelSource, as_model, from_proto
from tether.parity._reduce import _Graph, _reads


def _names(what: str, names: Sequence[str] | str) -> list[str]:
    items = [names] if isinstance(names, str) else list(names)
    if not items:
        raise _core.ArgumentError(f"extract: give at least one {what} name")
    dup = next((n for n in items if items.count(n) > 1), None)
    if dup is not None:
        raise _core.ArgumentError(f"extract: {what} '{dup}' is named twice")
    return items


def _typed(name: str, model: Model, declared: dict[str, Any]) -> Any:
    """The value's type: as the model declares it, else as tether infers it."""
    from onnx import helper

    if name in declared and declared[name].type.HasField("tensor_type") \
            and declared[name].type.tensor_type.elem_type:
        return declared[name]
    info = model.value_types().get(name)
    if info is None or info.kind != "tensor" or info.dtype in ("", "undefined", "unknown"):
        raise _core.ArgumentError(f"extract: the type of '{name}' is not known (no declaration, and shape "
                                  "inference could not derive it)")
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(info.dtype))
    return helper.make_tensor_value_info(name, elem, None if info.shape is None else list(info.shape))


def extract(model: ModelSource, inputs: Sequence[str] | str, outputs: Sequence[str] | str) -> Model:
    """Returns the part of ``model`` that computes ``outputs`` from ``inputs``, as a model whose
    graph inputs and outputs are those values.

    The names are values of the main graph: graph inputs or node outputs. The subgraph holds
    the nodes the outputs depend on, back to the inputs; it keeps the weights those nodes read
    (a Constant node becomes an initializer) and the types the model declares or tether infers.
    Fed with the original model's values of ``inputs``, it gives the original's values of
    ``outputs`` (:func:`check` shows it).

    Raises:
        ArgumentError: a name that is no value of the graph, a weight named as an input, an
            output that does not depend on the inputs alone (the message names the value it
            also needs), a name given twice, or a value whose type is unknown.

    Example:
        >>> head = tt.edit.extract(model, ["features"], ["logits"])   # doctest: +SKIP
        >>> [n.op_type for n in head.nodes]                           # doctest: +SKIP
        ['Flatten', 'Gemm']
    """
    source = as_model(model)
    ins, outs = _names("input", inputs), _names("output", outputs)
    graph = _Graph(source)
    g = graph.proto.graph
    values = {i.name for i in g.input} | set(graph.producer)
    for name in ins + outs:
        if name in graph.weights and name not in {i.name for i in g.input}:
            raise _core.ArgumentError(f"extract: '{name}' is a weight (an initializer or Constant), not a value "
                                      "computed from the inputs")
        if name not in values:
            raise _core.ArgumentError(f"extract: '{name}' is not a value of the model's graph; its inputs are "
                                      f"{[i.name for i in g.input]} and its outputs {[o.name for o in g.output]}")
    cut = frozenset(k for k in range(len(graph.nodes)) if not set(graph.nodes[k].output) & set(ins))
    chosen: frozenset[int] = frozenset()
    for name in outs:
        if name not in ins:
            chosen |= graph.cone(name, cut)
    missing = [v for v in graph.entering(chosen) if v not in ins]
    if missing:
        where = "a graph input" if missing[0] in {i.name for i in g.input} else "computed in the model"
        raise _core.ArgumentError(f"extract: the outputs {outs} also need '{missing[0]}' ({where}), which is not "
                                  f"among the inputs {ins}; add it to the inputs")
    typed = source.copy()
    typed.infer_shapes()
    declared = {v.name: v for v in (*g.input, *g.output, *g.value_info)}
    return from_proto(_subgraph(graph, sorted(chosen), ins, outs, typed, declared))


def _subgraph(graph: _Graph, chosen: list[int], ins: list[str], outs: list[str], typed: Model,
              declared: dict[str, Any]) -> Any:
    from onnx import helper

    nodes = [graph.nodes[k] for k in chosen]
    used = dict.fromkeys(v for n in nodes for v in _reads(n) if v in graph.weights and v not in ins)
    made = {o for n in nodes for o in n.output if o}
    g = graph.proto.graph
    sub = helper.make_graph(nodes, g.name or "extracted", [_typed(v, typed, declared) for v in ins],
                            [_typed(v, typed, declared) for v in outs], [graph.weights[v] for v in used],
                            value_info=[graph.value_info[v] for v in made if v in graph.value_info and v not in outs])
    proto = helper.make_model(sub, opset_imports=list(graph.proto.opset_import), ir_version=graph.proto.ir_version)
    proto.functions.extend(graph.proto.functions)
    return proto
