"""Inputs for a comparison: the user's data in any common form, or generated from input specs."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from tether import _core
from tether.parity._types import InputSpec

Feeds = dict[str, np.ndarray]


def generate_inputs(specs: Sequence[InputSpec], *, seed: int = 0, batches: int = 1,
                    ranges: Mapping[str, tuple[float, float]] | None = None,
                    dims: Mapping[str, int] | None = None) -> list[Feeds]:
    """``batches`` feeds drawn from the input specs with ``seed``.

    Floats are uniform in ``ranges[name]`` (default ``(-1, 1)``), integers uniform in
    ``[low, high)`` (default ``(0, 10)``), bools fair coins. A symbolic dim takes its size from
    ``dims[symbol]`` (default 1); an unknown dim or rank raises ArgumentError naming the input.

    Example:
        >>> spec = InputSpec("x", np.dtype("float32"), ("batch", 3))
        >>> generate_inputs([spec], dims={"batch": 2}, seed=1)[0]["x"].shape
        (2, 3)
    """
    rng = np.random.default_rng(seed)
    ranges = dict(ranges or {})
    dims = dict(dims or {})
    unknown = set(ranges) - {s.name for s in specs}
    if unknown:
        raise _core.ArgumentError(f"ranges name unknown inputs {sorted(unknown)}; the inputs are "
                                  f"{[s.name for s in specs]}")
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
    any iterable of those (each item one batch). Arrays are not copied.

    Example:
        >>> spec = InputSpec("x", np.dtype("float32"), (2,))
        >>> [list(f) for f in iter_feeds([{"x": np.zeros(2)}, {"x": np.ones(2)}], [spec])]
        [['x'], ['x']]
    """
    names = [s.name for s in specs or []]
    if isinstance(data, str | os.PathLike):
        path = os.fspath(data)
        if not os.path.exists(path):
            raise _core.ArgumentError(f"input file '{path}' does not exist")
        with np.load(path, allow_pickle=False) as npz:
            yield {k: npz[k] for k in npz.files}
        return
    if isinstance(data, np.ndarray):
        yield _one(data, names)
        return
    if isinstance(data, Mapping):
        yield {str(k): np.asarray(v) for k, v in data.items()}
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
            yield {str(k): np.asarray(v) for k, v in item.items()}
        elif isinstance(item, tuple | list):
            yield _positional([np.asarray(a) for a in item], names)
        else:
            raise _core.ArgumentError(f"a batch of type {type(item).__name__} is not understood: give an array, a "
                                      "dict of arrays or a tuple of arrays")


def _one(array: np.ndarray, names: list[str]) -> Feeds:
    if len(names) != 1:
        raise _core.ArgumentError(f"one array was given, but the model takes {len(names)} inputs {names}: "
                                  "give a dict of arrays by input name")
    return {names[0]: array}


def _positional(arrays: list[np.ndarray], names: list[str]) -> Feeds:
    if len(arrays) != len(names):
        raise _core.ArgumentError(f"{len(arrays)} arrays were given, but the model takes {len(names)} inputs {names}")
    return dict(zip(names, arrays, strict=True))
