"""Rewrites of converter output that leaves a framework op with no ONNX schema where a short
chain of standard ops computes the same function."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Erf is defined for these element types (onnx.TensorProto: FLOAT16, FLOAT, DOUBLE, BFLOAT16).
_FLOAT_TYPES = {10, 1, 11, 16}


def _element_types(model: Any) -> dict[str, int]:
    """Every value's element type that ONNX shape inference finds, subgraphs included (an op it
    does not know leaves its own outputs untyped, not its inputs)."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    types: dict[str, int] = {}

    def walk(graph: Any) -> None:
        for t in graph.initializer:
            types[t.name] = t.data_type
        for v in [*graph.input, *graph.value_info, *graph.output]:
            if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type:
                types[v.name] = v.type.tensor_type.elem_type
        for node in graph.node:
            for attr in node.attribute:
                for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    walk(g)

    walk(inferred.graph)
    return types


def _erfc_nodes(graph: Any, types: dict[str, int]) -> int:
    """Replaces, in ``graph`` and its subgraphs, each Erfc node on a float input of known type
    by ``Sub(1, Erf(x))`` writing the same output; returns how many."""
    from onnx import helper

    count = 0
    nodes = []
    for node in graph.node:
        for attr in node.attribute:
            for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                count += _erfc_nodes(g, types)
        dtype = types.get(node.input[0]) if node.op_type == "Erfc" and len(node.input) == 1 else None
        if node.domain not in ("", "ai.onnx") or dtype not in _FLOAT_TYPES or len(node.output) != 1:
            nodes.append(node)
            continue
        base = node.name or node.output[0]
        one, erf = f"{base}/one", f"{base}/erf"
        graph.initializer.append(helper.make_tensor(one, dtype, [], [1.0]))
        nodes.append(helper.make_node("Erf", [node.input[0]], [erf], name=f"{base}/Erf"))
        nodes.append(helper.make_node("Sub", [one, erf], [node.output[0]], name=node.name or f"{base}/Sub"))
        count += 1
    del graph.node[:]
    graph.node.extend(nodes)
    return count


def erfc_as_erf(path: Path) -> int:
    """Rewrites the ONNX file at ``path`` in place so that every ``Erfc`` node (a TensorFlow op
    with no ONNX schema, left by tf2onnx for Keras's exact GELU) computes ``1 - Erf(x)``; returns
    how many nodes it rewrote (the file is untouched when none). The two agree to float32's
    absolute precision; for a large ``x``, where ``erfc(x)`` is tiny, ``1 - erf(x)`` is 0.

    Example:
        >>> erfc_as_erf(Path("gelu.onnx"))                # doctest: +SKIP
        1
    """
    import onnx

    model = onnx.load(str(path), load_external_data=False)

    def has_erfc(graph: Any) -> bool:
        return any(n.op_type == "Erfc" or any(has_erfc(g) for a in n.attribute
                                              for g in ([a.g] if a.HasField("g") else []) + list(a.graphs))
                   for n in graph.node)

    if not has_erfc(model.graph):
        return 0
    count = _erfc_nodes(model.graph, _element_types(model))
    if count:
        onnx.save(model, str(path))
    return count
