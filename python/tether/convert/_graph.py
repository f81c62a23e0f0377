"""The graph surgery of half precision conversion, on the ONNX proto.

Each node is either *half* (its float32 values become float16 or bfloat16) or *kept* (it stays
float32). A value crossing from one kind to the other goes through a Cast; a weight read by
both kinds is stored twice rather than cast at run time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tether._native import core as _core
from tether.edit._proto import all_names, default_opset, subgraphs

FLOAT16_MAX = 65504.0

# Ops kept in float32 unless the caller passes its own op_block_list. Range, and the dtype of
# what Random* and Multinomial write, have no float16 form in ONNX; the rest do, but lose too
# much in half precision: Resize and Upsample compute sampling coordinates from their scales
# (float16 scales move pixel centres), CumSum and the squaring reductions grow past 65504 or
# lose the small terms of long sums, and NonMaxSuppression compares box overlaps near its
# threshold.
DEFAULT_OP_BLOCK_LIST: dict[str, str] = {
    "Resize": "sampling coordinates come from its scales",
    "Upsample": "sampling coordinates come from its scales",
    "Range": "ONNX defines no half precision Range",
    "CumSum": "long running sums overflow or lose small terms",
    "ReduceSumSquare": "squares overflow float16",
    "ReduceL2": "squares overflow float16",
    "ReduceLogSumExp": "exponentials overflow float16",
    "NonMaxSuppression": "overlap tests sit on its threshold",
    "RandomNormal": "writes a dtype of its own",
    "RandomUniform": "writes a dtype of its own",
    "RandomNormalLike": "draws random values",
    "RandomUniformLike": "draws random values",
    "Multinomial": "writes a dtype of its own",
    "EyeLike": "writes a dtype of its own",
    "Bernoulli": "draws random values",
}

_FLOAT = 1  # onnx.TensorProto.FLOAT


@dataclass
class Plan:
    """What to convert: the target elem type and which nodes stay float32 (name -> reason)."""

    to: int
    keep_io_types: bool
    kept: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def type_name(to: int) -> str:
    return "float16" if to == 10 else "bfloat16"


def node_label(node: Any, index: int) -> str:
    """The name a user calls a node by: its name, else its first output."""
    return node.name or (node.output[0] if node.output else f"#{index}")


def float_types(proto: Any) -> dict[str, int]:
    """The elem type of every value ONNX shape inference can type."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    g = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*g.input, *g.output, *g.value_info)
             if v.type.HasField("tensor_type")}
    types.update({t.name: t.data_type for t in g.initializer})
    return types


def _slot_types(schema: Any, params: list[Any], count: int) -> list[str]:
    """The type string of each of ``count`` slots (a variadic last parameter repeats)."""
    out = []
    for i in range(count):
        p = params[min(i, len(params) - 1)] if params else None
        out.append(p.type_str if p is not None and (i < len(params) or _variadic(p)) else "")
    return out


def _variadic(param: Any) -> bool:
    from onnx.defs import OpSchema

    return param.option == OpSchema.FormalParameterOption.Variadic


def slot_kinds(node: Any, opset: int, types: dict[str, int], to: int) -> tuple[list[str], list[str], str | None]:
    """For each input and output: ``"half"`` (a float32 value that becomes half), ``"float"``
    (a float32 value the op requires as float32) or ``""`` (not float32). The third item is why
    the node cannot be half, or None."""
    from onnx import defs

    in_f = [bool(v) and types.get(v) == _FLOAT for v in node.input]
    out_f = [bool(v) and types.get(v) == _FLOAT for v in node.output]
    if node.op_type == "Cast" and any(a.name == "to" and a.i == _FLOAT for a in node.attribute):
        out_f = [True for _ in node.output]
    if not any(in_f) and not any(out_f):
        return ["" for _ in in_f], ["" for _ in out_f], None
    as_float = (["float" if f else "" for f in in_f], ["float" if f else "" for f in out_f])
    if node.domain not in ("", "ai.onnx"):
        return *as_float, f"op of domain '{node.domain}': its half precision form is unknown"
    try:
        schema = defs.get_schema(node.op_type, opset, "")
    except defs.SchemaError:
        return *as_float, f"ONNX defines no {node.op_type} at opset {opset}"
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    want = f"tensor({type_name(to)})"

    def kinds(flags: list[bool], strs: list[str], side: str) -> tuple[list[str], str | None]:
        out: list[str] = []
        for i, (f, s) in enumerate(zip(flags, strs, strict=True)):
            if not f:
                out.append("")
            elif s in allowed and want in allowed[s]:
                out.append("half")
            elif s in allowed or s == "":
                return out, (f"ONNX defines no {type_name(to)} form of {node.op_type} "
                             f"({side} {i} is float32)")
            else:
                out.append("float")
        return out, None

    ins, why = kinds(in_f, _slot_types(schema, list(schema.inputs), len(in_f)), "input")
    if not why:
        outs, why = kinds(out_f, _slot_types(schema, list(schema.outputs), len(out_f)), "output")
    if why:
        return *as_float, why
    if node.op_type == "Cast":
        outs = ["half" if f else "" for f in out_f]
    return ins, outs, why


def to_half_array(a: np.ndarray, to: int) -> tuple[Any, int]:
    """A float32 array as a half precision TensorProto payload (raw little-endian bytes), with
    the count of finite values clamped to float16's range (bfloat16 spans float32's)."""
    a = np.asarray(a, np.float32)
    if to == 10:
        over = np.isfinite(a) & (np.abs(a) > FLOAT16_MAX)
        h = np.clip(a, -FLOAT16_MAX, FLOAT16_MAX) if over.any() else a
        return h.astype("<f2").tobytes(), int(over.sum())
    bits = a.astype("<f4").view("<u4").astype(np.uint64)
    # Round to nearest even on the 16 bits dropped; NaN keeps a quiet NaN pattern.
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    rounded = np.where(np.isnan(a), np.uint16(0x7FC0), rounded).astype("<u2")
    return rounded.tobytes(), 0


def half_tensor(t: Any, to: int, where: str, notes: list[str]) -> Any:
    """A float32 TensorProto converted to ``to``, clamping noted in ``notes``."""
    from onnx import TensorProto, numpy_helper

    a = numpy_helper.to_array(t)
    raw, clamped = to_half_array(a, to)
    out = TensorProto(name=t.name, data_type=to, dims=list(t.dims), raw_data=raw)
    if clamped:
        notes.append(f"{where}: {clamped} value(s) beyond float16's range (max |x| = "
                     f"{float(np.abs(a[np.isfinite(a)]).max()):.6g}) clamped to +-65504")
    return out


def check_names(proto: Any, names: Iterable[str]) -> None:
    """Every name in node_block_list must name a node."""
    known = {node_label(n, i) for i, n in enumerate(proto.graph.node)}
    for name in names:
        if name not in known:
            raise _core.ArgumentError(f"node_block_list names '{name}', which is no node of the model "
                                      f"(it has {len(known)} nodes, e.g. {sorted(known)[:5]})")


def check_ops(proto: Any, ops: Iterable[str]) -> None:
    """Every name in op_block_list must be an ONNX op or an op of the model (a misspelt op
    would otherwise block nothing, silently)."""
    from onnx import defs

    in_model = {n.op_type for n in proto.graph.node}
    for op in ops:
        if op not in in_model and not defs.has(op):
            raise _core.ArgumentError(f"op_block_list names '{op}', which is neither an ONNX op nor an op "
                                      "of the model (op types are case-sensitive, e.g. 'Softmax')")


def plan_nodes(proto: Any, plan: Plan, op_block_list: dict[str, str], node_block_list: Iterable[str],
               types: dict[str, int]) -> None:
    """Fills ``plan.kept`` with the nodes that stay float32 and why."""
    g = proto.graph
    for n in g.node:
        for _ in subgraphs(n):
            raise _core.UnsupportedError(
                f"{n.op_type} '{n.name}' holds a subgraph: half precision conversion of models with "
                "control flow (If, Loop, Scan) is not supported; convert the model without it")
    opset = default_opset(proto)
    blocked = set(node_block_list)
    for i, n in enumerate(g.node):
        label = node_label(n, i)
        ins, outs, why = slot_kinds(n, opset, types, plan.to)
        if label in plan.kept:
            continue
        untyped = [v for v in (*n.input, *n.output) if v and v not in types]
        if label in blocked:
            plan.kept[label] = "node_block_list"
        elif untyped:
            # A value of unknown type may be float32: the node and its readers keep what they had.
            plan.kept[label] = f"value '{untyped[0]}' has no type ONNX shape inference can tell"
        elif n.op_type in op_block_list and (any(ins) or any(outs) or why):
            plan.kept[label] = f"op_block_list: {op_block_list[n.op_type]}"
        elif why:
            plan.kept[label] = why


def rewrite(proto: Any, plan: Plan, types: dict[str, int] | None = None) -> Any:
    """The proto with half and kept nodes as ``plan`` says, Casts at their boundaries
    (``types``: :func:`float_types` of ``proto``, when known)."""
    import onnx
    from onnx import helper

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    g = out.graph
    types, opset = types if types is not None else float_types(proto), default_opset(proto)
    if plan.to == 16 and opset < 13:
        raise _core.ArgumentError(f"bfloat16 needs opset 13 or later (Cast to bfloat16); the model imports "
                                  f"opset {opset}")
    taken = all_names(g) | {n.name for n in g.node}

    def fresh(base: str) -> str:
        name, k = base, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        return name

    kinds = {}
    for i, n in enumerate(g.node):
        ins, outs, _ = slot_kinds(n, opset, types, plan.to)
        kept = node_label(n, i) in plan.kept
        kinds[i] = (["float" if (kept and k) else k for k in ins], ["float" if (kept and k) else k for k in outs])

    # Where each float32 value lives: "half" or "float", and under which name.
    home: dict[str, tuple[str, str]] = {}
    io = "float" if plan.keep_io_types else "half"
    for v in g.input:
        if types.get(v.name) == _FLOAT:
            home[v.name] = (io, v.name)
            if io == "half":
                v.type.tensor_type.elem_type = plan.to
    # An initializer that is also a graph input is a default the caller may override: it
    # follows the input's type, like the value it stands for.
    inputs = {v.name for v in g.input}
    for t in g.initializer:
        if t.name in inputs and t.data_type == _FLOAT and io == "half":
            t.CopyFrom(half_tensor(t, plan.to, f"default of input '{t.name}'", plan.notes))
    inits = {t.name: t for t in g.initializer if t.data_type == _FLOAT and t.name not in inputs}
    readers: dict[str, set[str]] = {}
    for i, n in enumerate(g.node):
        for v, k in zip(n.input, kinds[i][0], strict=False):
            if v in inits and k:
                readers.setdefault(v, set()).add(k)
    for name, t in inits.items():
        wants = readers.get(name, set())
        if "half" in wants:
            first = next(i for i, n in enumerate(g.node) if name in n.input)
            where = f"initializer '{name}' (read by {g.node[first].op_type} '{node_label(g.node[first], first)}')"
            t.CopyFrom(half_tensor(t, plan.to, where, plan.notes))
            home[name] = ("half", name)
            if "float" in wants:
                copy = onnx.TensorProto()
                copy.CopyFrom(proto.graph.initializer[[x.name for x in proto.graph.initializer].index(name)])
                copy.name = fresh(f"{name}_float32")
                g.initializer.append(copy)
                home[name + "\0float"] = ("float", copy.name)
        else:
            home[name] = ("float", name)

    outputs = {o.name for o in g.output}
    casts: dict[tuple[str, str], str] = {}
    nodes: list[Any] = []

    def reach(v: str, kind: str) -> str:
        at, name = home[v]
        if at == kind:
            return name
        if kind == "float" and v + "\0float" in home:
            return home[v + "\0float"][1]
        if (v, kind) not in casts:
            target = _FLOAT if kind == "float" else plan.to
            cast_out = fresh(f"{v}_{'float32' if kind == 'float' else type_name(plan.to)}")
            nodes.append(helper.make_node("Cast", [name], [cast_out], name=fresh(f"{cast_out}_cast"), to=target))
            casts[(v, kind)] = cast_out
        return casts[(v, kind)]

    for i, n in enumerate(g.node):
        ins, outs = kinds[i]
        for j, k in enumerate(ins):
            if k and n.input[j] in home:
                n.input[j] = reach(n.input[j], k)
        half_node = any(k == "half" for k in (*ins, *outs))
        if half_node:
            _convert_attributes(n, plan, node_label(n, i))
        for j, k in enumerate(outs):
            v = n.output[j]
            if not k:
                continue
            if v in outputs and k != io:
                # The graph output keeps its name and type; the node writes a renamed value.
                n.output[j] = fresh(f"{v}_{'float32' if k == 'float' else type_name(plan.to)}")
            home[v] = (k, n.output[j])
        nodes.append(n)
    for o in g.output:
        if o.name in home:
            at, name = home[o.name]
            if name != o.name:
                target = _FLOAT if io == "float" else plan.to
                nodes.append(helper.make_node("Cast", [name], [o.name], name=fresh(f"{o.name}_cast"), to=target))
                at = io
            o.type.tensor_type.elem_type = _FLOAT if at == "float" else plan.to
    del g.node[:]
    g.node.extend(nodes)
    for vi in g.value_info:
        if vi.name in home and vi.type.HasField("tensor_type"):
            vi.type.tensor_type.elem_type = _FLOAT if home[vi.name][0] == "float" else plan.to
    return out


def _convert_attributes(node: Any, plan: Plan, label: str) -> None:
    """A half node's float32 constants and Cast targets become the half type."""
    from onnx import helper

    if node.op_type == "ConstantOfShape" and not any(a.name == "value" for a in node.attribute):
        # Its default value is a float32 zero; a half node must write the half type.
        node.attribute.append(helper.make_attribute("value", helper.make_tensor("value", plan.to, [1], [0.0])))
        return
    for a in node.attribute:
        if a.name == "to" and node.op_type == "Cast" and a.i == _FLOAT:
            a.i = plan.to
        elif a.type == a.TENSOR and a.t.data_type == _FLOAT:
            a.t.CopyFrom(half_tensor(a.t, plan.to, f"{node.op_type} '{label}' attribute '{a.name}'", plan.notes))
