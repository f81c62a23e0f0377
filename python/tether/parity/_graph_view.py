"""The graph view of the HTML parity report: the model's nodes and edges, each node with its
layer-wise parity, its INT8 sensitivity and its torch module, as JSON data that the page's own
script lays out and draws (see ``_graph_script.py``)."""

from __future__ import annotations

import html
import json
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether._model import Model
    from tether.parity._provenance import NodeOrigin
    from tether.parity._report import LayerResult, ParityReport


@dataclass
class _Node:
    name: str
    op: str
    inputs: list[str]
    outputs: list[str]
    group: list[str] = field(default_factory=list)  # enclosing groups, outermost first
    module: str = ""
    source: str = ""


def _number(x: float | None) -> float | str | None:
    """A float for JSON: infinities and NaN as text, which JSON cannot spell as numbers."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else str(x)


def _name_groups(name: str) -> list[str]:
    """The scopes of a torch.onnx (TorchScript) node name: ``/encoder/layer.0/attn/MatMul`` lies
    in ``/encoder``, ``/encoder/layer.0`` and ``/encoder/layer.0/attn``."""
    if not name.startswith("/"):
        return []
    parts = [p for p in name.split("/")[1:-1] if p]
    return ["/" + "/".join(parts[: k + 1]) for k in range(len(parts))]


def _origin_groups(origin: NodeOrigin) -> list[str]:
    """The module paths enclosing a node, from the dynamo exporter's scopes (the root left out)."""
    mods = [m for m in origin.modules if m]
    return mods or ([origin.module] if origin.module else [])


def _origins(model: Model) -> dict[str, NodeOrigin]:
    from tether.parity._provenance import node_origins

    try:
        return node_origins(model)
    except (OSError, ValueError):  # metadata the onnx package cannot read: group by names only
        return {}


def _nodes(model: Model, layers: list[LayerResult]) -> list[_Node]:
    names = {n.name for n in model.nodes}
    # Results of the ONNX graph's own nodes already carry each node's origin: reading them again
    # would parse the whole protobuf a second time. Results of torch modules are named by module.
    origins = {la.node: la.origin for la in layers if la.origin is not None and la.node in names}
    if not any(la.node in names for la in layers):
        origins = _origins(model)
    out = []
    for k, n in enumerate(model.nodes):
        name = n.name or (n.outputs[0] if n.outputs else f"#{k}")
        op = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}:{n.op_type}"
        node = _Node(name, op, [i for i in n.inputs if i], [o for o in n.outputs if o])
        origin = origins.get(name)
        if origin is not None:
            node.group, node.module, node.source = _origin_groups(origin), origin.label, origin.source
        else:
            node.group = _name_groups(name)
        out.append(node)
    return out


def _topological(nodes: list[_Node]) -> list[int]:
    """Node indices in an order where every producer precedes its consumers (stored order
    breaks ties); a graph with a cycle keeps its stored order."""
    producer = {o: k for k, n in enumerate(nodes) for o in n.outputs}
    deps = [{producer[i] for i in n.inputs if i in producer and producer[i] != k} for k, n in enumerate(nodes)]
    users: list[list[int]] = [[] for _ in nodes]
    for k, ds in enumerate(deps):
        for d in ds:
            users[d].append(k)
    waiting = [len(ds) for ds in deps]
    import heapq

    ready = [k for k, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for u in users[k]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    return order if len(order) == len(nodes) else list(range(len(nodes)))


def _value_row(la: LayerResult, node: str) -> dict[str, Any]:
    row: dict[str, Any] = {"value": la.value, "status": la.status}
    if la.node != node:  # a torch module's result
        row["module"] = la.node
    m = la.metrics
    if la.fused_into:
        row["fused_into"] = la.fused_into
    if m is not None:
        row.update(ok=m.ok, max_abs=_number(m.max_abs_error), exact=m.exact)
        if not m.exact:
            row.update(snr=_number(m.snr_db), max_rel=_number(m.max_rel_error), cosine=_number(m.cosine))
        if m.nonfinite:
            row["nonfinite"] = m.nonfinite_text()
        if m.problem:
            row["problem"] = m.problem
    return row


def _parity(values: list[dict[str, Any]]) -> tuple[str, float | str | None, float | str | None]:
    """A node's status over its output values (the worst one) with its largest error and lowest SNR."""
    compared = [v for v in values if "ok" in v]
    if compared:
        status = "ok" if all(v["ok"] for v in compared) else "fail"
        errs = [float(v["max_abs"]) for v in compared if v.get("max_abs") is not None]
        snrs = [float(v["snr"]) for v in compared if v.get("snr") is not None]
        return status, _number(max(errs)) if errs else None, _number(min(snrs)) if snrs else None
    if any(v["status"] == "fused" for v in values):
        return "fused", None, None
    return "none", None, None


def _sensitivity(report: ParityReport) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    q = report.quantization
    if q is None:
        return {}, {}
    sens = {}
    for rank, s in enumerate(getattr(q, "sensitivity", None) or []):
        sens[s.node] = {"sqnr": _number(s.sqnr_db), "rank": rank + 1,
                        "drop": _number(s.accuracy_drop)}
    return sens, dict(getattr(q, "float_nodes", None) or {})


def graph_data(report: ParityReport, model: Model) -> dict[str, Any]:
    """The JSON-able data the page draws: ``nodes`` (in topological order, each with its op,
    values, torch module groups, parity status and, in a quantize report, its sensitivity),
    ``edges`` (producer index, consumer index, value), ``groups`` (path -> label and member
    count), the ``first`` divergent node's index and ``note`` when nodes have no results.

    Example:
        >>> d = graph_data(rep, tt.load("m.onnx"))              # doctest: +SKIP
        >>> len(d["nodes"]) == len(tt.load("m.onnx").nodes)     # doctest: +SKIP
        True
    """
    layers = report.layers or []
    stored = _nodes(model, layers)
    order = _topological(stored)
    nodes = [stored[k] for k in order]
    producer = {o: k for k, n in enumerate(nodes) for o in n.outputs}
    index = {n.name: k for k, n in enumerate(nodes)}
    # A result belongs to the node writing its value: against torch, a result is a module's,
    # named by its path, and its value is what the module's last node writes.
    per_node: dict[int, list[LayerResult]] = {}
    for la in layers:
        k = producer.get(la.value, index.get(la.node))
        if k is not None:
            per_node.setdefault(k, []).append(la)
    sens, floats = _sensitivity(report)
    first = report.first_divergent
    first_index = None if first is None else producer.get(first.value, index.get(first.node))
    edges = sorted({(producer[i], k, i) for k, n in enumerate(nodes) for i in n.inputs
                    if i in producer and producer[i] != k})
    groups: dict[str, dict[str, Any]] = {}
    out_nodes = []
    for k, n in enumerate(nodes):
        values = [_value_row(la, n.name) for la in per_node.get(k, [])]
        status, max_abs, snr = _parity(values)
        d: dict[str, Any] = {"name": n.name, "op": n.op, "inputs": n.inputs, "outputs": n.outputs,
                             "group": n.group, "status": status, "max_abs": max_abs, "snr": snr, "values": values}
        if n.module:
            d["module"] = n.module
        if n.source:
            d["source"] = n.source
        if n.name in sens:
            d["sensitivity"] = sens[n.name]
        if n.name in floats:
            d["float"] = floats[n.name]
        for g in n.group:
            # A scope's own name for a node name's scopes; a module's full path (its attribute path).
            groups.setdefault(g, {"label": g.rsplit("/", 1)[-1] if g.startswith("/") else g, "count": 0})["count"] += 1
        out_nodes.append(d)
    note = ""
    if report.layers is None:
        note = "no layer-wise results in this report: nodes are grey (compare with layerwise=True to colour them)"
    elif not any(n["values"] for n in out_nodes):
        note = "no node of this graph was compared layer by layer: nodes are grey"
    # A module holding a single node is not worth a box of its own.
    kept = {g: v for g, v in groups.items() if v["count"] > 1}
    for item in out_nodes:
        outer = [g for g in item["group"] if g in kept]
        for depth, g in enumerate(outer):
            kept[g]["ancestors"] = outer[:depth]
    return {"nodes": out_nodes, "edges": [list(e) for e in edges], "groups": kept, "first": first_index,
            "sensitivity": bool(sens), "note": note}


def _model_of(report: ParityReport, model: Model | None) -> tuple[Model | None, str]:
    """The graph to draw: the one given, the report's own, else the model file the report names
    (reference first); with a reason when there is none."""
    from tether._model import Model, load
    from tether._native import core as _core

    if model is not None:
        return model, ""
    own = getattr(report, "graph", None)
    if isinstance(own, Model):
        return own, ""
    for role in ("reference", "candidate"):
        f = report.models.get(role, {})
        if f.get("kind") == "model" and os.path.isfile(f.get("path", "")):
            try:
                return load(f["path"]), ""
            except (_core.Error, OSError, ValueError) as e:  # changed since the comparison read it
                return None, f"the graph is not shown: {f['path']} could not be read ({e})"
    return None, "the graph is not shown: the report names no model file (the models were held in memory)"


def _json_script(data: dict[str, Any]) -> str:
    """JSON that stays inert inside a ``<script>`` element whatever the names hold."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def section(report: ParityReport, model: Model | None = None) -> str:
    """The report's ``section#graph``: the drawing area, its tools and legend, and the graph
    data in ``script#tether-graph-data`` (the page's script draws it); a note instead of the
    drawing when no graph is known.

    Example:
        >>> 'id="tether-graph-data"' in section(rep, tt.load("m.onnx"))   # doctest: +SKIP
        True
    """
    from tether.parity._graph_script import MARKUP

    graph, why = _model_of(report, model)
    if graph is None:
        return f'<section id="graph"><h2>Graph</h2><p class="note" id="graph-note">{html.escape(why)}</p></section>'
    data = graph_data(report, graph)
    note = f'<p class="note" id="graph-note">{html.escape(data["note"])}</p>' if data["note"] else ""
    return (f'<section id="graph"><h2>Graph</h2>{note}{MARKUP}'
            f'<script type="application/json" id="tether-graph-data">{_json_script(data)}</script></section>')
