"""Inputs for a comparison: the user's data in any common form, or generated from input specs."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from tether._native import core as _core
from tether._regular_file import open_regular
from tether.parity._types import InputSpec

Feeds = dict[str, np.ndarray]


def native_byte_order(array: Any) -> np.ndarray:
    """``array`` as a numpy array in the machine's byte order: itself when it already is, else a
    converted copy (same values and dtype kind), so that every runner reads the values a
    byte-swapped array such as ``'>f4'`` holds.

    Example:
        >>> native_byte_order(np.array([1.5], ">f4")).dtype == np.float32
        True
    """
    a = np.asarray(array)
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def generate_inputs(specs: Sequence[InputSpec], *, seed: int = 0, batches: int = 1,
                    ranges: Mapping[str, tuple[float, float]] | None = None,
                    dims: Mapping[str, int] | None = None, model: Any = None) -> list[Feeds]:
    """``batches`` feeds drawn from the input specs with ``seed``.

    Floats are uniform in ``ranges[name]`` (default ``(-1, 1)``), integers uniform in
    ``[low, high)`` (default ``(0, 10)``, or with ``model`` (a :class:`tether.Model`) the rows
    of the data an integer input indexes, see :func:`index_ranges`), bools fair coins. A
    symbolic dim takes its size from ``dims[symbol]`` (default 1); an unknown dim or rank
    raises ArgumentError naming the input.

    Example:
        >>> spec = InputSpec("x", np.dtype("float32"), ("batch", 3))
        >>> generate_inputs([spec], dims={"batch": 2}, seed=1)[0]["x"].shape
        (2, 3)
    """
    rng = np.random.default_rng(seed)
    found = index_ranges(model) if model is not None else {}
    named = {s.name for s in specs}
    ranges = {**{k: (lo, hi) for k, (lo, hi, _) in found.items() if k in named}, **dict(ranges or {})}
    dims = dict(dims or {})
    unknown = set(ranges) - {s.name for s in specs}
    if unknown:
        raise _core.ArgumentError(f"ranges name unknown inputs {sorted(unknown)}; the inputs are "
                                  f"{[s.name for s in specs]}")
    check_dims(dims, specs)
    out = []
    for _ in range(batches):
        feeds: Feeds = {}
        for s in specs:
            shape = _concrete_shape(s, dims)
            lo, hi = ranges.get(s.name, (0, 10) if s.dtype.kind in "iu" else (-1.0, 1.0))
            if s.dtype.kind == "f" or s.dtype.name == "bfloat16":
                feeds[s.name] = rng.uniform(lo, hi, size=shape).astype(s.dtype)
            elif s.dtype.kind in "iu":
                feeds[s.name] = rng.integers(int(lo), int(hi), size=shape).astype(s.dtype)
            elif s.dtype.kind == "b":
                feeds[s.name] = rng.integers(0, 2, size=shape).astype(bool)
            else:
                raise _core.ArgumentError(f"input '{s.name}' is {s.dtype}; give its values instead of generating them")
        out.append(feeds)
    return out


def int_ranges_option(items: Sequence[str], specs: Sequence[InputSpec], option: str = "--int-range"
                      ) -> dict[str, tuple[int, int]]:
    """Command-line ranges for generated integers as ``ranges`` for :func:`generate_inputs`:
    ``LO:HI`` applies to every integer input, ``NAME=LO:HI`` to one (it wins over ``LO:HI``);
    values are drawn from ``[LO, HI)``. ArgumentError for a malformed item, an empty range, or a
    name that is not an integer input.

    Example:
        >>> ids = InputSpec("ids", np.dtype("int64"), ("batch", 6))
        >>> int_ranges_option(["0:5"], [ids])
        {'ids': (0, 5)}
    """
    integer = [s.name for s in specs if s.dtype.kind in "iu"]
    every: tuple[int, int] | None = None
    named: dict[str, tuple[int, int]] = {}
    for item in items:
        name, sep, bounds = item.rpartition("=")
        lo, colon, hi = bounds.partition(":")
        if not colon or not lo.strip().lstrip("-").isdigit() or not hi.strip().lstrip("-").isdigit() \
                or (sep and not name):
            raise _core.ArgumentError(f"{option} {item!r}: expected LO:HI or NAME=LO:HI (integers, HI excluded)")
        pair = (int(lo), int(hi))
        if pair[0] >= pair[1]:
            raise _core.ArgumentError(f"{option} {item!r}: the range [{pair[0]}, {pair[1]}) is empty; HI is excluded, "
                                      "so it must be above LO")
        if not sep:
            every = pair
        elif name not in integer:
            listed = ", ".join(integer) if integer else "none"
            raise _core.ArgumentError(f"{option} {item!r}: '{name}' is not an integer input of the model; its integer "
                                      f"inputs: {listed}")
        else:
            named[name] = pair
    if every is not None and not integer:
        raise _core.ArgumentError(f"{option}: the model has no integer input")
    out = {**({n: every for n in integer} if every is not None else {}), **named}
    for s in specs:
        if s.name in out:
            info, (low, high) = np.iinfo(s.dtype), out[s.name]
            if low < info.min or high - 1 > info.max:  # values past the dtype would wrap silently
                raise _core.ArgumentError(f"{option}: [{low}, {high}) does not fit input '{s.name}' of dtype "
                                          f"{s.dtype} ([{info.min}, {info.max}])")
    return out


# Ops that hand an integer tensor on with its values unchanged (only its shape or type).
_VALUE_PRESERVING = {"Cast", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose"}


def index_ranges(model: Any) -> dict[str, tuple[int, int, str]]:
    """For each integer graph input that indexes data through ``Gather`` (an embedding's ids),
    the range ``(0, rows, why)`` of valid indices: ``rows`` is the size of the gathered axis of
    the data (the smallest when it feeds several). Found through ops that keep values (Cast,
    Reshape, Squeeze, ...); an input whose data size is not known is left out.

    Example:
        >>> index_ranges(tt.load("embedding.onnx"))                 # doctest: +SKIP
        {'ids': (0, 5, "the 5 rows of 'e.weight' that Gather 'node_embedding' indexes")}
    """
    consumers: dict[str, list[Any]] = {}
    for node in model.nodes:
        for i in node.inputs:
            consumers.setdefault(i, []).append(node)
    types = None
    out: dict[str, tuple[int, int, str]] = {}
    for value in model.inputs:
        if not any(value.dtype.startswith(t) for t in ("int", "uint")):
            continue
        frontier, seen = [value.name], set()
        while frontier:
            name = frontier.pop()
            seen.add(name)
            for node in consumers.get(name, []):
                if node.op_type in _VALUE_PRESERVING and node.domain in ("", "ai.onnx"):
                    frontier.extend(o for o in node.outputs[:1] if o and o not in seen)
                elif node.op_type == "Gather" and len(node.inputs) > 1 and node.inputs[1] == name:
                    if types is None:
                        types = _value_shapes(model)
                    rows = _axis_size(types.get(node.inputs[0]), int(node.attributes.get("axis", 0)))
                    if rows and (value.name not in out or rows < out[value.name][1]):
                        out[value.name] = (0, rows, f"the {rows} rows of '{node.inputs[0]}' that Gather "
                                                    f"'{node.name or node.outputs[0]}' indexes")
    return out


def _value_shapes(model: Any) -> dict[str, tuple[Any, ...] | None]:
    shapes: dict[str, tuple[Any, ...] | None] = {n: v.shape for n, v in model.value_types().items()}
    for name in model.initializer_names:
        try:
            shapes[name] = tuple(model.initializer(name).shape)
        except _core.Error:  # a dtype numpy lacks: its declared shape stays
            continue
    return shapes


def _axis_size(shape: tuple[Any, ...] | None, axis: int) -> int:
    if not shape or not -len(shape) <= axis < len(shape):
        return 0
    d = shape[axis]
    return d if isinstance(d, int) and d > 0 else 0


def symbolic_dims(specs: Sequence[InputSpec]) -> list[str]:
    """The names of the symbolic dims of ``specs``, in order of first use.

    Example:
        >>> symbolic_dims([InputSpec("x", np.dtype("float32"), ("batch", 3)),
        ...                InputSpec("m", np.dtype("bool"), ("batch", "seq"))])
        ['batch', 'seq']
    """
    found: list[str] = []
    for s in specs:
        for d in s.shape or ():
            if isinstance(d, str) and d not in found:
                found.append(d)
    return found


def check_dims(dims: Mapping[str, int], specs: Sequence[InputSpec]) -> None:
    """Raises ArgumentError when ``dims`` names a dim that no input of ``specs`` has (a typo
    would otherwise leave the real dim at its default) or gives a size below 1.

    Example:
        >>> check_dims({"bacth": 7}, [InputSpec("x", np.dtype("float32"), ("batch", 3))])
        Traceback (most recent call last):
        ...
        tether.ArgumentError: dim 'bacth' is not a symbolic dim of the inputs; the model's dims are: batch
    """
    known = symbolic_dims(specs)
    for name, size in dims.items():
        if name not in known:
            listed = ", ".join(known) if known else "none (every input has a fixed shape)"
            raise _core.ArgumentError(f"dim '{name}' is not a symbolic dim of the inputs; the model's dims are: "
                                      f"{listed}")
        if int(size) < 1:
            raise _core.ArgumentError(f"dim '{name}' = {size}: a size must be at least 1")


def check_feeds(feeds: Mapping[str, np.ndarray], specs: Sequence[InputSpec], where: str = "") -> None:
    """Raises ArgumentError when ``feeds`` do not fit ``specs``: a missing or unknown input, a
    dtype other than the declared one, another rank, or a size that contradicts a fixed dim or
    another input's size for the same symbolic dim. ``where`` (a file name, say) starts the
    message. Empty ``specs`` accept anything.

    Example:
        >>> spec = InputSpec("x", np.dtype("float32"), ("batch", 3))
        >>> check_feeds({"x": np.zeros((2, 4), np.float32)}, [spec], "x.npz")
        Traceback (most recent call last):
        ...
        tether.ArgumentError: x.npz: input 'x' has shape [2, 4], the model expects ['batch', 3] (dim 1 is 4, expected 3)
    """
    if not specs:
        return
    prefix = f"{where}: " if where else ""
    names = [s.name for s in specs]
    unknown = [n for n in feeds if n not in names]
    if unknown:
        raise _core.ArgumentError(f"{prefix}unknown input '{unknown[0]}'; the model's inputs are: {', '.join(names)}")
    missing = [n for n in names if n not in feeds]
    if missing:
        raise _core.ArgumentError(f"{prefix}input '{missing[0]}' is missing; the model's inputs are: "
                                  f"{', '.join(names)}")
    bound: dict[str, tuple[int, str]] = {}
    for s in specs:
        a = np.asarray(feeds[s.name])
        if a.dtype != s.dtype and not (s.dtype == object and a.dtype.kind in "OU"):
            raise _core.ArgumentError(f"{prefix}input '{s.name}' is {a.dtype}, the model expects {s.dtype}")
        if s.shape is None:
            continue
        expected = [d if d is not None else "?" for d in s.shape]
        if a.ndim != len(s.shape):
            raise _core.ArgumentError(f"{prefix}input '{s.name}' has shape {list(a.shape)} (rank {a.ndim}), the model "
                                      f"expects {expected} (rank {len(s.shape)})")
        for k, (d, n) in enumerate(zip(s.shape, a.shape, strict=True)):
            if isinstance(d, int) and d >= 0 and d != n:
                raise _core.ArgumentError(f"{prefix}input '{s.name}' has shape {list(a.shape)}, the model expects "
                                          f"{expected} (dim {k} is {n}, expected {d})")
            if isinstance(d, str):
                if d in bound and bound[d][0] != n:
                    raise _core.ArgumentError(
                        f"{prefix}input '{s.name}' has {d}={n} (dim {k}), but input '{bound[d][1]}' has {d}="
                        f"{bound[d][0]}")
                bound.setdefault(d, (int(n), s.name))


def _concrete_shape(spec: InputSpec, dims: Mapping[str, int]) -> tuple[int, ...]:
    if spec.shape is None:
        raise _core.ArgumentError(f"input '{spec.name}' has an unknown rank; give its values")
    shape = []
    for k, d in enumerate(spec.shape):
        if isinstance(d, int):
            shape.append(d)
        elif isinstance(d, str):
            shape.append(int(dims.get(d, 1)))
        else:
            raise _core.ArgumentError(f"input '{spec.name}' dim {k} is unknown; give its values or a named dim")
    return tuple(shape)


def iter_feeds(data: Any, specs: Sequence[InputSpec] | None = None) -> Iterator[Feeds]:
    """The user's inputs as a stream of feeds dicts.

    ``data`` may be one array (a single-input model), a dict of arrays, a path to a ``.npz``
    file (one batch, keyed by input name), a list of arrays matched to the inputs in order, or
    any iterable of those (each item one batch). Arrays are not copied, except byte-swapped
    ones (``'>f4'`` on a little-endian machine), which are converted to native byte order.

    Example:
        >>> spec = InputSpec("x", np.dtype("float32"), (2,))
        >>> [list(f) for f in iter_feeds([{"x": np.zeros(2)}, {"x": np.ones(2)}], [spec])]
        [['x'], ['x']]
    """
    names = [s.name for s in specs or []]
    if isinstance(data, str | os.PathLike):
        path = os.fspath(data)
        yield {k: native_byte_order(v) for k, v in load_npz(path).items()}
        return
    if isinstance(data, np.ndarray):
        yield _one(data, names)
        return
    if isinstance(data, Mapping):
        yield {str(k): native_byte_order(v) for k, v in data.items()}
        return
    if isinstance(data, tuple) and all(isinstance(a, np.ndarray) for a in data):
        yield _positional(list(data), names)
        return
    if not isinstance(data, Iterable):
        raise _core.ArgumentError(f"inputs of type {type(data).__name__} are not understood: give an array, a dict of "
                                  "arrays, a .npz path or an iterable of batches")
    items = iter(data)
    if isinstance(data, list) and data and all(isinstance(a, np.ndarray) for a in data) and len(names) > 1 \
            and len(data) == len(names):
        yield _positional(data, names)
        return
    for item in items:
        if isinstance(item, np.ndarray):
            yield _one(item, names)
        elif isinstance(item, Mapping):
            yield {str(k): native_byte_order(v) for k, v in item.items()}
        elif isinstance(item, tuple | list):
            yield _positional(list(item), names)
        else:
            raise _core.ArgumentError(f"a batch of type {type(item).__name__} is not understood: give an array, a "
                                      "dict of arrays or a tuple of arrays")


def load_npz(path: str | os.PathLike[str]) -> Feeds:
    """The arrays of an ``.npz`` file by key, read in full; ArgumentError naming the file when it
    does not exist, is not a regular file (a folder, a FIFO, a device: refused before any read),
    is not an npz archive or holds something other than plain arrays.

    Example:
        >>> load_npz("/etc/hostname")                          # doctest: +SKIP
        Traceback (most recent call last):
        tether.ArgumentError: input file '/etc/hostname' is not an .npz archive of arrays (...)
    """
    path = os.fspath(path)
    with open_regular(path, what="input file") as f:
        if not zipfile.is_zipfile(f):
            raise _core.ArgumentError(f"input file '{path}' is not an .npz archive of arrays (np.savez writes one)")
        f.seek(0)
        try:
            with np.load(f, allow_pickle=False) as npz:
                return {k: npz[k] for k in npz.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise _core.ArgumentError(f"input file '{path}' is not a readable .npz of plain arrays: {e}") from None


def _one(array: np.ndarray, names: list[str]) -> Feeds:
    if len(names) != 1:
        raise _core.ArgumentError(f"one array was given, but the model takes {len(names)} inputs {names}: "
                                  "give a dict of arrays by input name")
    return {names[0]: native_byte_order(array)}


def _positional(arrays: list[np.ndarray], names: list[str]) -> Feeds:
    if len(arrays) != len(names):
        raise _core.ArgumentError(f"{len(arrays)} arrays were given, but the model takes {len(names)} inputs {names}")
    return {n: native_byte_order(a) for n, a in zip(names, arrays, strict=True)}
