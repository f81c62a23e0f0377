"""The ONNX protobuf side of editing: a tether Model as an ``onnx`` ModelProto and back.

tether's IR has no editing calls, so the edits change the ONNX proto (the ``onnx`` package)
and load the result back into tether, which validates it as it would any file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from tether._model import Model, load
from tether._native import core as _core

ModelSource = Model | str | os.PathLike[str] | bytes


def as_model(model: ModelSource) -> Model:
    return model if isinstance(model, Model) else load(model)


def to_proto(model: Model) -> Any:
    """The model as an ``onnx.ModelProto``, every weight inside."""
    import onnx

    return onnx.load_from_string(model.to_bytes())


def from_proto(proto: Any) -> Model:
    """The edited proto loaded into tether (which checks it as it checks any file)."""
    return load(proto.SerializeToString())


def subgraphs(node: Any) -> Iterator[Any]:
    """The graphs held in a node's attributes (If branches, Loop and Scan bodies)."""
    from onnx import AttributeProto

    for a in node.attribute:
        if a.type == AttributeProto.GRAPH:
            yield a.g
        elif a.type == AttributeProto.GRAPHS:
            yield from a.graphs


def all_names(graph: Any) -> set[str]:
    """Every value name a graph and its subgraphs define or read."""
    names = {v.name for v in (*graph.input, *graph.output, *graph.value_info, *graph.initializer)}
    names |= {s.values.name for s in graph.sparse_initializer}
    for n in graph.node:
        names |= {v for v in (*n.input, *n.output) if v}
        for g in subgraphs(n):
            names |= all_names(g)
    return names


def rename_values(graph: Any, mapping: dict[str, str]) -> None:
    """Renames values everywhere in ``graph`` and its subgraphs (ONNX forbids a subgraph to
    define a name of an outer scope again, so every occurrence is the same value)."""

    def sub(name: str) -> str:
        return mapping.get(name, name)

    for v in (*graph.input, *graph.output, *graph.value_info, *graph.initializer):
        v.name = sub(v.name)
    for s in graph.sparse_initializer:
        s.values.name = sub(s.values.name)
    for a in graph.quantization_annotation:
        a.tensor_name = sub(a.tensor_name)
    for n in graph.node:
        n.input[:] = [sub(v) for v in n.input]
        n.output[:] = [sub(v) for v in n.output]
        for g in subgraphs(n):
            rename_values(g, mapping)


def default_opset(proto: Any) -> int:
    for o in proto.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    raise _core.ArgumentError("the model imports no version of the default ONNX operator set")
