"""Reading calibration files back: TensorRT's calibration cache and ncnn's int8 table."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

from tether._native import core as _core
from tether._regular_file import open_regular

#: The method recorded in the ranges read from a TensorRT cache.
TENSORRT_CACHE_METHOD = "tensorrt-cache"

_T = TypeVar("_T")


def _parse(path: str | os.PathLike[str], what: str, parse: Callable[[bytes], _T]) -> _T:
    """``parse`` of the bytes of ``path``, a regular file (a FIFO or a device is refused before a
    byte is read); a ParseError of the text is raised again with the path in front, since the
    core parser only knows the line."""
    name = os.fspath(path)
    with open_regular(name, what=what) as f:
        data = f.read()
    try:
        return parse(data)
    except _core.ParseError as e:
        text = str(e)
        where = text[len(what):] if text.startswith(what) else f": {text}"
        raise _core.ParseError(f"{what} '{name}'{where}") from None


def read_tensorrt_cache(path: str | os.PathLike[str]) -> dict[str, tuple[float, float, str]]:
    """The ranges of a TensorRT calibration cache file: tensor -> ``(-amax, amax, "tensorrt-cache")``.

    TensorRT's cache holds one symmetric scale per tensor, ``amax / 127``; the range returned is
    ``±127 * scale`` (exact in float64), in the form of :attr:`QuantizeResult.ranges` and
    :meth:`Calibrator.compute`, so ``hi / 127`` gives back the scale in the file, bit for bit.
    The file may come from :meth:`QuantizeResult.write_tensorrt_cache` or from TensorRT itself.

    Raises ``ArgumentError`` naming the path when it does not exist, cannot be opened or is not a
    regular file (a FIFO, a device or a folder is refused before reading), and ``ParseError``
    naming the path and the line when the file is not a TensorRT cache.

    Example:
        >>> res.write_tensorrt_cache("cnn.cache")                       # doctest: +SKIP
        >>> ranges = tt.quantize.read_tensorrt_cache("cnn.cache")       # doctest: +SKIP
        >>> lo, hi, method = ranges["input"]; hi / 127                  # doctest: +SKIP
        0.024144930765032768
    """
    scales = _parse(path, "TensorRT calibration cache", _core.quant_read_tensorrt_cache)
    return {name: (-127.0 * s, 127.0 * s, TENSORRT_CACHE_METHOD) for name, s in scales.items()}


def read_ncnn_table(path: str | os.PathLike[str]) -> tuple[dict[str, list[float]], dict[str, float]]:
    """The scales of an ncnn int8 table file: ``(weight_scales, input_scales)``, as
    :meth:`QuantizeResult.ncnn_table` gives them.

    ``weight_scales``: layer -> one scale per output channel (``<layer>_param_0`` lines);
    ``input_scales``: layer -> the scale of its input (``<layer>`` lines). ncnn's scales are
    ``127 / threshold``: the symmetric range of a layer's input is ``±127 / input_scales[layer]``.
    Layers are named as in the table (tether's tables use ONNX node names, ncnn2table's use the
    layer names of the ncnn model). A scale of ``inf`` (ncnn2table's ``127 / 0`` for an all-zero
    channel) is returned as written.

    Raises ``ArgumentError`` naming the path when it does not exist, cannot be opened or is not a
    regular file (refused before reading), and ``ParseError`` naming the path and the line when
    the file is not an ncnn table.

    Example:
        >>> res.write_ncnn_table("cnn.table")                            # doctest: +SKIP
        >>> weights, inputs = tt.quantize.read_ncnn_table("cnn.table")   # doctest: +SKIP
        >>> threshold = 127 / inputs["conv1"]    # conv1's input range is ±threshold  # doctest: +SKIP
    """
    weights, inputs = _parse(path, "ncnn int8 table", _core.quant_read_ncnn_table)
    return {k: list(v) for k, v in weights.items()}, dict(inputs)
