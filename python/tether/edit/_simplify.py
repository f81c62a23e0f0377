"""simplify: constant folding, dead node removal and shape inference, in standard ONNX."""

from __future__ import annotations

from typing import Any

import numpy as np

from tether._model import Model
from tether._native import core as _core
from tether._session import compile
from tether.edit._proto import ModelSource, as_model, from_proto, subgraphs, to_proto
from tether.parity._reduce import _reads

# As tether's fold_constants pass: random ops, Dropout, and the Q/DQ pairs that mark where INT8 runs.
_NEVER_FOLDED = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                 "Bernoulli", "Dropout", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"}
_MAX_FOLDED_BYTES = 1 << 20
# Ops whose output size follows from their input values, not their input sizes.
_GENERATORS = {"ConstantOfShape", "Expand", "Tile", "Range", "Resize", "Upsample", "Pad", "OneHot", "EyeLike"}


def _inferred(model: Model) -> dict[str, Any]:
    """Types that inference derives from the graph inputs alone (declared intermediates are
    not trusted: a Shape folded from a wrong declaration would be silently wrong)."""
    probe = model.copy()
    probe.infer_shapes(overwrite=True)
    return {n: v for n, v in probe.value_types().items() if v.kind == "tensor" and v.shape is not None}


def _static(info: Any) -> tuple[int, ...] | None:
    return tuple(info.shape) if info is not None and all(isinstance(d, int) for d in info.shape) else None


def _too_large(node: Any, types: dict[str, Any], known: dict[str, np.ndarray]) -> bool:
    """Whether folding would store more than 1 MiB that the inputs did not already hold; judged
    on inferred shapes before anything is computed, so a huge ConstantOfShape is never made."""
    total = 0
    for o in (o for o in node.output if o):
        shape = _static(types.get(o))
        if shape is None:
            return node.op_type in _GENERATORS
        try:
            itemsize = np.dtype(types[o].dtype).itemsize
        except TypeError:
            itemsize = 8
        total += int(np.prod(shape, dtype=np.int64)) * itemsize
    inputs = sum(known[v].nbytes for v in _reads(node) if v in known)
    return total > _MAX_FOLDED_BYTES and total > inputs


def _shape_value(node: Any, shape: tuple[int, ...]) -> np.ndarray:
    """Shape / Size of a value whose dims are all known."""
    if node.op_type == "Size":
        return np.array(int(np.prod(shape, dtype=np.int64)), np.int64)
    attrs = {a.name: a.i for a in node.attribute}
    rank = len(shape)
    start, end = attrs.get("start", 0), attrs.get("end", rank)
    return np.array(shape[slice(start, end)], np.int64)


def _foldable(node: Any) -> bool:
    return node.domain in ("", "ai.onnx") and node.op_type not in _NEVER_FOLDED and not any(subgraphs(node))


def _evaluate(proto: Any, nodes: list[Any], known: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The outputs of ``nodes`` (constant inputs only), computed by tether's CPU kernels with no
    graph passes: one session for all, or node by node when one of them cannot run."""
    from onnx import helper, numpy_helper

    def run(chosen: list[Any], have: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        made = {o for n in chosen for o in n.output if o}
        read = dict.fromkeys(v for n in chosen for v in _reads(n) if v not in made)
        g = helper.make_graph(chosen, "fold", [], [helper.ValueInfoProto(name=o) for n in chosen for o in n.output
                                                   if o],
                              [numpy_helper.from_array(have[v], v) for v in read])
        m = helper.make_model(g, opset_imports=list(proto.opset_import), ir_version=proto.ir_version)
        m.functions.extend(proto.functions)
        return compile(from_proto(m), "cpu", threads=1, optimize=False).run({})

    try:
        return run(nodes, known)
    except (_core.Error, ValueError, TypeError):  # a node tether cannot run: fold the others
        have = dict(known)
        for n in nodes:
            if all(v in have for v in _reads(n)):
                try:
                    have.update(run([n], have))
                except (_core.Error, ValueError, TypeError):
                    continue
        return {k: v for k, v in have.items() if k not in known}


def _fold_once(proto: Any, model: Model) -> int:
    """Folds what is constant now; returns the number of nodes folded."""
    from onnx import numpy_helper

    g = proto.graph
    inputs = {i.name for i in g.input}
    known = {i.name: numpy_helper.to_array(i) for i in g.initializer if i.name not in inputs}
    types = _inferred(model)
    shapes: dict[str, np.ndarray] = {}
    candidates: list[Any] = []
    constant = set(known)
    for n in g.node:
        static = _static(types.get(n.input[0])) if n.input else None
        if n.op_type in ("Shape", "Size") and n.domain in ("", "ai.onnx") and static is not None:
            shapes[n.output[0]] = _shape_value(n, static)
            constant.add(n.output[0])
        elif _foldable(n) and all(v in constant for v in _reads(n)) and not _too_large(n, types, known):
            candidates.append(n)
            constant.update(o for o in n.output if o)
    values = dict(shapes)
    if candidates:
        values.update(_evaluate(proto, candidates, {**known, **shapes}))
    folded: set[int] = set()
    ready = dict(known)
    for k, n in enumerate(g.node):
        outs = [o for o in n.output if o]
        if not outs or not all(o in values for o in outs):
            continue
        if n.op_type not in ("Shape", "Size") or n.output[0] not in shapes:
            if not all(v in ready for v in _reads(n)):
                continue  # an input stays computed: a node before it was not folded
            out_bytes = sum(values[o].nbytes for o in outs)
            if out_bytes > _MAX_FOLDED_BYTES and out_bytes > sum(ready[v].nbytes for v in _reads(n)):
                continue  # ConstantOfShape, Expand, Tile: a large tensor stays computed
        folded.add(k)
        ready.update({o: values[o] for o in outs})
    kept = [n for k, n in enumerate(g.node) if k not in folded]
    new = [numpy_helper.from_array(np.asarray(ready[o]), o) for k in sorted(folded) for o in g.node[k].output if o]
    g.ClearField("node")
    g.node.extend(kept)
    g.initializer.extend(new)
    return len(folded)


def _drop_dead(proto: Any) -> int:
    """Removes nodes no graph output depends on and initializers nothing reads; returns the
    number of nodes removed. Graph inputs stay, read or not."""
    g = proto.graph
    needed = {o.name for o in g.output}
    live = []
    for n in reversed(g.node):
        if any(o in needed for o in n.output if o):
            live.append(n)
            needed.update(_reads(n))
    removed = len(g.node) - len(live)
    inputs = {i.name for i in g.input}
    weights = [w for w in g.initializer if w.name in needed or w.name in inputs]
    g.ClearField("node")
    g.node.extend(reversed(live))
    g.ClearField("initializer")
    g.initializer.extend(weights)
    return removed


def simplify(model: ModelSource, *, max_rounds: int = 8) -> Model:
    """Returns a simplified copy of ``model``, still standard ONNX that any runtime loads.

    Repeats, until nothing changes (at most ``max_rounds`` times): shape inference from the
    graph inputs' shapes; folding of every node whose inputs are all constant (initializers or
    Constant outputs) into initializers, computed by tether's CPU kernels, with ``Shape`` and
    ``Size`` of values whose dims are known folded from those dims; removal of nodes no graph
    output depends on and of initializers nothing reads. Last, shapes are inferred once more
    and kept on the values. As tether's own fold_constants pass, it leaves random ops, Dropout,
    QuantizeLinear / DequantizeLinear, nodes with subgraphs and nodes of other domains alone,
    and a node whose outputs would exceed 1 MiB (more than its inputs) stays computed. Unlike
    :func:`tether.optimize` it fuses nothing, so onnxruntime can still run the result. Fix
    symbolic dims first (:func:`fix_inputs`) to let shape chains fold.

    Raises:
        ShapeError: shape inference finds the model inconsistent.

    Example:
        >>> small = tt.edit.simplify(tt.edit.fix_inputs(model, {"x": [1, 3, 32, 32]}))  # doctest: +SKIP
        >>> len(model.nodes), len(small.nodes)                                         # doctest: +SKIP
        (34, 11)
    """
    current = as_model(model)
    proto = to_proto(current)
    for _ in range(max(1, max_rounds)):
        changed = _fold_once(proto, current) + _drop_dead(proto)
        current = from_proto(proto)
        if not changed:
            break
    current.infer_shapes()
    return current
