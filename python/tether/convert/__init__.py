"""tether.convert: float32 models to float16 or bfloat16, with the nodes that cannot take it kept
in float32 behind Casts, by block list or automatically from calibration batches.

Example:
    >>> import tether as tt
    >>> res = tt.convert.float16("model.onnx")                         # doctest: +SKIP
    >>> res.save("model.fp16.onnx")                                    # doctest: +SKIP
    >>> res = tt.convert.float16("model.onnx", batches=x, max_error=1e-2)   # doctest: +SKIP
    >>> print(res)                                                     # doctest: +SKIP
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import Any

from tether._native import core as _core
from tether.convert._graph import (
    DEFAULT_OP_BLOCK_LIST,
    Plan,
    check_names,
    check_ops,
    float_types,
    plan_nodes,
    rewrite,
    type_name,
)
from tether.convert._result import ConvertResult
from tether.edit._proto import ModelSource, as_model, from_proto, to_proto

_FLOAT16, _BFLOAT16 = 10, 16


def float16(model: ModelSource, *, keep_io_types: bool = True, op_block_list: Iterable[str] | None = None,
            node_block_list: Iterable[str] | None = None, batches: Any = None,
            max_error: float | None = None) -> ConvertResult:
    """A float16 copy of ``model`` (never changed itself): float32 weights, values, Cast targets
    and constants become float16; nodes that stay float32 read and write float32 through Casts.

    Kept in float32: ops in ``op_block_list`` (default :data:`DEFAULT_OP_BLOCK_LIST`; pass
    ``[]`` for none; a name that is no ONNX op and no op of the model is an
    ``ArgumentError``; an op the model lacks is fine), nodes named in ``node_block_list`` (a name no node has is an
    ``ArgumentError``), ops of other domains and ops whose float16 form ONNX does not define.
    Weights beyond +-65504 are clamped to it and named in ``notes``. With ``keep_io_types``
    the inputs and outputs stay float32, else they are float16.

    With ``batches`` (numpy batches as :func:`tether.quantize.static` takes them) and
    ``max_error`` (the largest relative error allowed on each output: max |half - float32| over
    max |float32|), nodes that overflow or add the most error are kept in float32 until the
    budget holds; ``kept`` says which and why.

    Example:
        >>> res = tt.convert.float16(model, node_block_list=["head"])   # doctest: +SKIP
        >>> res.kept                                                   # doctest: +SKIP
        {'head': 'node_block_list'}
        >>> tt.compile(res.model).run({"x": x})["y"].dtype             # doctest: +SKIP
        dtype('float32')
    """
    return _convert(model, _FLOAT16, keep_io_types, op_block_list, node_block_list, batches, max_error)


def bfloat16(model: ModelSource, *, keep_io_types: bool = True, op_block_list: Iterable[str] | None = None,
             node_block_list: Iterable[str] | None = None, batches: Any = None,
             max_error: float | None = None) -> ConvertResult:
    """A bfloat16 copy of ``model``, as :func:`float16` makes one (bfloat16 spans float32's
    range, so nothing is clamped; its 8-bit significand loses more per op). Needs opset 13.

    Example:
        >>> res = tt.convert.bfloat16(model, batches=x, max_error=5e-2)   # doctest: +SKIP
        >>> res.error_after <= 5e-2                                      # doctest: +SKIP
        True
    """
    return _convert(model, _BFLOAT16, keep_io_types, op_block_list, node_block_list, batches, max_error)


def _convert(model: ModelSource, to: int, keep_io_types: bool, op_block_list: Iterable[str] | None,
             node_block_list: Iterable[str] | None, batches: Any, max_error: float | None) -> ConvertResult:
    if (batches is None) != (max_error is None):
        raise _core.ArgumentError("automatic mode needs both batches= and max_error= (got only "
                                  f"{'batches' if max_error is None else 'max_error'})")
    if max_error is not None and (isinstance(max_error, bool) or not isinstance(max_error, numbers.Real)
                                  or not max_error > 0):
        raise _core.ArgumentError(f"max_error must be a positive relative error, got {max_error}")
    if isinstance(op_block_list, str) or isinstance(node_block_list, str):
        raise _core.ArgumentError("op_block_list and node_block_list are lists of names, not one string")
    source = as_model(model)
    proto = to_proto(source)
    blocks = dict(DEFAULT_OP_BLOCK_LIST) if op_block_list is None else dict.fromkeys(op_block_list, "given")
    nodes = list(node_block_list or [])
    check_names(proto, nodes)
    check_ops(proto, blocks)
    base = Plan(to, keep_io_types)
    types = float_types(proto)
    plan_nodes(proto, base, blocks, nodes, types)

    def convert(kept: dict[str, str], notes: list[str] | None = None) -> Any:
        plan = Plan(to, keep_io_types, dict(kept))
        out = from_proto(rewrite(proto, plan, types))
        if notes is not None:
            notes.extend(plan.notes)
        return out

    notes: list[str] = []
    if batches is None:
        return ConvertResult(convert(base.kept, notes), type_name(to), base.kept, notes)
    from tether.convert._auto import search
    from tether.quantize import iter_batches

    feeds = list(iter_batches(batches, source))
    if not feeds:
        raise _core.ArgumentError("batches holds no batch: automatic mode needs at least one")
    kept = dict(base.kept)
    assert max_error is not None  # checked with batches above
    _, before, after, search_notes = search(source, proto, convert, feeds, max_error, to, kept)
    converted = convert(kept, notes)
    return ConvertResult(converted, type_name(to), kept, notes + search_notes, before, after, max_error)


__all__ = ["DEFAULT_OP_BLOCK_LIST", "ConvertResult", "bfloat16", "float16"]
