"""fix_inputs, rename, convert_opset and extract: edits that keep what the model computes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tether._model import Model
from tether._native import core as _core
from tether.edit._proto import (
    ModelSource,
    all_names,
    as_model,
    default_opset,
    from_proto,
    rename_values,
    to_proto,
)

Dims = Sequence[int | str]


def _real_inputs(proto: Any) -> list[str]:
    weights = {i.name for i in proto.graph.initializer}
    return [i.name for i in proto.graph.input if i.name not in weights]


def _declared(value: Any) -> list[int | str | None] | None:
    t = value.type.tensor_type
    if not value.type.HasField("tensor_type") or not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else d.dim_param or None for d in t.shape.dim]


def _check_dims(name: str, dims: Dims, declared: list[int | str | None] | None,
                bound: dict[str, int]) -> None:
    """Refuses a shape that contradicts the input's declaration; records symbol sizes in ``bound``."""
    for i, d in enumerate(dims):
        if isinstance(d, bool) or not isinstance(d, int | str) or (isinstance(d, int) and d < 1) \
                or (isinstance(d, str) and not d.strip()):
            raise _core.ArgumentError(f"input '{name}' dim {i} = {d!r}: expected a size >= 1 or a symbol name")
    if declared is None:
        return
    if len(dims) != len(declared):
        raise _core.ArgumentError(f"input '{name}' has rank {len(declared)} {_text(declared)}; the new shape "
                                  f"{_text(list(dims))} has rank {len(dims)}")
    for i, (new, old) in enumerate(zip(dims, declared, strict=True)):
        if isinstance(old, int) and new != old:
            raise _core.ArgumentError(f"input '{name}' dim {i} is fixed at {old} in the model; cannot make it "
                                      f"{new!r}")
        if isinstance(old, str) and isinstance(new, int):
            if bound.setdefault(old, new) != new:
                raise _core.ArgumentError(f"dim '{old}' is given two sizes, {bound[old]} and {new} (input '{name}' "
                                          f"dim {i})")


def _text(dims: Sequence[Any]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _bind(value: Any, bound: Mapping[str, int]) -> None:
    if not value.type.HasField("tensor_type") or not value.type.tensor_type.HasField("shape"):
        return
    for d in value.type.tensor_type.shape.dim:
        if d.HasField("dim_param") and d.dim_param in bound:
            d.dim_value = bound[d.dim_param]


def fix_inputs(model: ModelSource, shapes: Mapping[str, Dims]) -> Model:
    """Returns a copy of ``model`` whose inputs have the given shapes.

    A dim is a size or a symbol name. A symbolic dim given a size takes it in every input,
    output and declared value that uses the symbol, so inputs that share ``batch`` stay
    consistent; shapes are then inferred again through the graph. What the model computes
    does not change: run on inputs of the new shapes, both give the same outputs
    (:func:`check` runs both to show it).

    Raises:
        ArgumentError: a name that is not an input (weights with defaults included), a rank
            other than the declared one, a size for a dim the model fixes at another size, a
            symbol given two sizes, or a size below 1.
        ShapeError: the new shapes contradict the graph (a Reshape to a fixed size, say).

    Example:
        >>> fixed = tt.edit.fix_inputs(tt.load("m.onnx"), {"x": [1, 3, 224, 224]})  # doctest: +SKIP
        >>> fixed.inputs[0].shape                                                    # doctest: +SKIP
        (1, 3, 224, 224)
    """
    proto = to_proto(as_model(model))
    g = proto.graph
    inputs = {v.name: v for v in g.input if v.name in _real_inputs(proto)}
    bound: dict[str, int] = {}
    for name, dims in shapes.items():
        if name not in inputs:
            raise _core.ArgumentError(f"'{name}' is not an input of the model; its inputs are {list(inputs)}")
        if isinstance(dims, str | bytes) or not hasattr(dims, "__iter__"):
            raise _core.ArgumentError(f"input '{name}': expected a list of dims, got {dims!r}")
        _check_dims(name, list(dims), _declared(inputs[name]), bound)
    for name, dims in shapes.items():
        shape = inputs[name].type.tensor_type.shape
        shape.ClearField("dim")
        for d in dims:
            if isinstance(d, int):
                shape.dim.add(dim_value=d)
            else:
                shape.dim.add(dim_param=d)
    for v in (*g.input, *g.output, *g.value_info):
        _bind(v, bound)
    out = from_proto(proto)
    out.infer_shapes()
    return out


def rename(model: ModelSource, names: Mapping[str, str]) -> Model:
    """Returns a copy of ``model`` with graph inputs and outputs renamed, ``{old: new}``.

    Every reader of a renamed value follows, in subgraphs too. Names may be swapped
    (``{"a": "b", "b": "a"}``).

    Raises:
        ArgumentError: an old name that is not a graph input or output, a new name that the
            model already uses for another value, or two values given one new name.

    Example:
        >>> out = tt.edit.rename(model, {"input.1": "image", "191": "logits"})  # doctest: +SKIP
        >>> [v.name for v in out.inputs]                                        # doctest: +SKIP
        ['image']
    """
    proto = to_proto(as_model(model))
    g = proto.graph
    ends = [v.name for v in g.input] + [v.name for v in g.output if v.name not in {i.name for i in g.input}]
    taken = all_names(g) - set(names)
    seen: dict[str, str] = {}
    for old, new in names.items():
        if old not in ends:
            raise _core.ArgumentError(f"rename '{old}': not an input or output of the model; they are {ends}")
        if not isinstance(new, str) or not new:
            raise _core.ArgumentError(f"rename '{old}': the new name must be a non-empty string, got {new!r}")
        if new in taken:
            raise _core.ArgumentError(f"rename '{old}' to '{new}': the model already has a value named '{new}'")
        if new in seen:
            raise _core.ArgumentError(f"rename: '{seen[new]}' and '{old}' are both renamed to '{new}'")
        seen[new] = old
    rename_values(g, dict(names))
    return from_proto(proto)


def convert_opset(model: ModelSource, opset: int) -> Model:
    """Returns a copy of ``model`` converted to version ``opset`` of the default ONNX operator
    set, by ``onnx.version_converter`` (the ``onnx`` package's converter, which rewrites each
    node whose op changed between the versions). Other domains are left as they are. Check the
    result with :func:`check`: the converter's adapters are not proved equivalent.

    Raises:
        ArgumentError: an opset outside 1 .. the newest the installed ``onnx`` knows, or one
            the converter cannot reach from the model's (an op with no adapter; its reason
            is in the message).

    Example:
        >>> m17 = tt.edit.convert_opset(tt.load("m.onnx"), 17)   # doctest: +SKIP
        >>> m17.opset["ai.onnx"]                                 # doctest: +SKIP
        17
    """
    import onnx
    from onnx import version_converter

    newest = onnx.defs.onnx_opset_version()
    if isinstance(opset, bool) or not isinstance(opset, int) or not 1 <= opset <= newest:
        raise _core.ArgumentError(f"opset {opset!r}: expected an integer from 1 to {newest} (the newest the "
                                  f"installed onnx {onnx.__version__} knows)")
    proto = to_proto(as_model(model))
    current = default_opset(proto)
    if current == opset:
        return from_proto(proto)
    try:
        converted = version_converter.convert_version(proto, opset)
    except Exception as e:  # the converter raises bare RuntimeError / IndexError / ValueError
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        reason = text.split("failed: ", 1)[-1]  # the C++ assertion's location says nothing to a user
        raise _core.ArgumentError(f"opset {opset}: onnx's version converter cannot convert the model from "
                                  f"opset {current}: {reason}") from None
    return from_proto(converted)
