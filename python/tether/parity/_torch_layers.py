"""Layer-wise comparison between a torch module and its ONNX export: each submodule's output,
captured by a forward hook, is matched to the ONNX value its nodes hand on, through the module
scopes the dynamo exporter records in every node's metadata."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tether._model import Model
from tether._native import core as _core
from tether.parity._metrics import Tolerance, compare_arrays
from tether.parity._provenance import NodeOrigin, node_origins
from tether.parity._report import LayerResult
from tether.parity._runners import TorchRunner
from tether.parity._types import Runner

Feeds = dict[str, np.ndarray]


def _escaping_values(graph: Model, inside: set[int]) -> list[tuple[int, str]]:
    """(producing node, value) for the values that nodes ``inside`` produce and a node outside
    them (or the graph's outputs) reads: what a module hands on, in topological order."""
    outputs = {o.name for o in graph.outputs}
    readers: dict[str, set[int]] = {}
    for k, node in enumerate(graph.nodes):
        for i in node.inputs:
            readers.setdefault(i, set()).add(k)
    out = []
    for k in sorted(inside):
        for v in graph.nodes[k].outputs:
            if v and (v in outputs or readers.get(v, set()) - inside):
                out.append((k, v))
    return out


def _match(tensors: list[np.ndarray], found: list[tuple[int, str, np.ndarray]]) -> list[tuple[int, str, int]]:
    """Pairs (node index, value, tensor index) of a module's outputs with the values it hands on:
    all of them in order when their count and shapes agree, else the last value with the shape
    of a single output."""
    if len(tensors) == len(found) and all(t.shape == a.shape for t, (_, _, a) in zip(tensors, found, strict=True)):
        return [(k, v, j) for j, (k, v, _) in enumerate(found)]
    if len(tensors) == 1:
        same = [(k, v) for k, v, a in found if a.shape == tensors[0].shape]
        if same:
            return [(*same[-1], 0)]
    return []


def torch_layerwise(torch_runner: TorchRunner, other: Runner, graph: Model, feeds: Feeds, *,
                    torch_is_reference: bool, tolerance: Tolerance | None,
                    intermediates: Callable[[Runner, Feeds, list[str]], dict[str, np.ndarray]],
                    fused: dict[str, str]) -> tuple[list[LayerResult], list[str]]:
    """Every submodule of the torch side compared with the ONNX value its nodes hand on, sorted
    by the position of that value in the graph (the innermost module first at one position),
    and notes on the modules that could not be matched. :func:`tether.parity.compare` calls it
    when one side of a layer-wise comparison is a torch module.

    Example:
        >>> rep = compare(module, TetherRunner("m.onnx"), x, layerwise=True)   # doctest: +SKIP
        >>> rep.first_divergent.node                                           # doctest: +SKIP
        'encoder.0'
    """
    origins = node_origins(graph)
    if not origins:
        raise _core.ArgumentError("layer-wise comparison with a torch module needs the module scopes the dynamo "
                                  "exporter records in each node (torch.onnx.export(..., dynamo=True), as "
                                  "tt.export.torch does); this model has none")
    labels = [n.name or (n.outputs[0] if n.outputs else f"#{k}") for k, n in enumerate(graph.nodes)]
    members: dict[str, set[int]] = {}
    for k, label in enumerate(labels):
        origin = origins.get(label)
        for path in origin.modules if origin is not None else ():
            members.setdefault(path, set()).add(k)
    captured = torch_runner.module_outputs(feeds)
    escaping = {path: _escaping_values(graph, members[path]) for path in captured if path in members}
    wanted = sorted({v for values in escaping.values() for _, v in values})
    values = intermediates(other, feeds, wanted)
    notes = []
    hidden = [v for v in wanted if v not in values]
    keeping = getattr(other, "keeping", None)
    if hidden and callable(keeping) and getattr(other, "model", None) is not None:
        # tether's passes fused some module outputs away: compile once more keeping them.
        values = intermediates(keeping(hidden), feeds, wanted)
        notes.append(f"tether compiled the model again keeping {len(hidden)} module outputs its passes fuse away, "
                     "to compare them")
    results: list[tuple[tuple[int, int], LayerResult]] = []
    unmatched: list[str] = []
    for path, calls in captured.items():
        if path not in members:
            continue  # no node comes from it (an identity, a dropout in eval mode)
        if len(calls) != 1:
            unmatched.append(f"{path} (called {len(calls)} times)")
            continue
        found = [(k, v, values[v]) for k, v in escaping[path] if v in values]
        pairs = _match(calls[0], found)
        if not pairs:
            inside_fused = [labels[k] for k, v in escaping[path] if v not in values and labels[k] in fused]
            if inside_fused:
                k = next(k for k, v in escaping[path] if labels[k] == inside_fused[-1])
                origin = origins[labels[k]]
                results.append(((k, -path.count(".")), LayerResult(
                    k, path, _short(_class_of(origin, path)), graph.nodes[k].outputs[0], "fused",
                    fused_into=fused[inside_fused[-1]], origin=_at(origin, path))))
            else:
                unmatched.append(path)
            continue
        for k, v, j in pairs:
            t, a = calls[0][j], values[v]
            ref, cand = (t, a) if torch_is_reference else (a, t)
            origin = origins[labels[k]]
            metrics = compare_arrays(ref, cand, tolerance or Tolerance.for_dtype(ref.dtype))
            results.append(((k, -path.count(".")), LayerResult(k, path, _short(_class_of(origin, path)), v,
                                                               "compared", metrics, origin=_at(origin, path))))
    results.sort(key=lambda r: r[0])
    if unmatched:
        notes.append(f"{len(unmatched)} torch modules could not be matched to a value of the model: "
                     f"{', '.join(unmatched[:8])}{' …' if len(unmatched) > 8 else ''}")
    return [r for _, r in results], notes


def _class_of(origin: NodeOrigin, path: str) -> str:
    return origin.classes[origin.modules.index(path)] if path in origin.modules else ""


def _short(cls: str) -> str:
    return cls.rsplit(".", 1)[-1]


def _at(origin: NodeOrigin, path: str) -> NodeOrigin:
    """The origin of the node, told from the module ``path`` (one of its enclosing modules)."""
    depth = origin.modules.index(path) + 1 if path in origin.modules else len(origin.modules)
    return NodeOrigin(path, _class_of(origin, path), origin.file, origin.line, origin.modules[:depth],
                      origin.classes[:depth])
