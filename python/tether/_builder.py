"""tether.GraphBuilder: an ONNX model written node by node from numpy weights, checked as it grows."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tether._model import Dim, ExternalData, Model
from tether._native import core as _core

AttributeValue = int | float | str | bytes | np.ndarray | Sequence[int] | Sequence[float] | Sequence[str]
"""What a node attribute may be: a number, a string, a list of one of those, or a numpy array
(a tensor attribute, as Constant's ``value``)."""


class GraphBuilder:
    """Builds an ONNX model from inputs, numpy weights and nodes, validating every step.

    Each call checks what it is given at once, with the op's own shape and type inference
    on the types known so far: an input that names no value, a duplicate name, an op ONNX
    does not have, an attribute of the wrong kind, or shapes and dtypes the op cannot take
    raise a :class:`tether.Error` subclass naming the node and the input, and the builder
    stays as it was. ``build()`` gives a :class:`tether.Model` ready for ``tt.compile`` or
    ``save``.

    Example:
        >>> import numpy as np, tether as tt
        >>> b = tt.GraphBuilder("mlp")
        >>> x = b.input("x", "float32", ("batch", 4))
        >>> w = b.initializer("w", np.ones((4, 3), np.float32))
        >>> y = b.node("MatMul", [x, w], name="fc")
        >>> b.shape(y)
        ('batch', 3)
        >>> b.output(b.node("Relu", [y], outputs=["y"]))
        >>> model = b.build()
        >>> [str(v) for v in model.outputs]
        ['y: float32[batch, 3]']
    """

    def __init__(self, name: str = "main", opsets: Mapping[str, int] | None = None) -> None:
        """A builder for a graph called ``name``.

        ``opsets`` maps domain to version (``"ai.onnx"`` or ``""`` for ONNX, default 17);
        custom domains used by nodes are imported at version 1 unless given here.

        Example:
            >>> b = tt.GraphBuilder("net", opsets={"ai.onnx": 18})     # doctest: +SKIP
        """
        self._core = _core.GraphBuilder(name, dict(opsets or {}))

    def input(self, name: str, dtype: str | np.dtype[Any] | type, shape: Sequence[Dim]) -> str:
        """Adds a graph input and returns its name.

        ``dtype`` is a name (``"float32"``) or anything ``numpy.dtype`` takes; ``shape`` holds
        ints, strings for symbolic dims (``"batch"``) and ``None`` for unknown dims.

        Example:
            >>> b.input("image", np.float32, ("batch", 3, 32, 32))    # doctest: +SKIP
            'image'
        """
        return str(self._core.input(name, _dtype_name(dtype), list(shape)))

    def initializer(self, name: str, array: np.ndarray | Any) -> str:
        """Adds a constant tensor (a weight) copied from ``array`` and returns its name.

        The copy is taken now: changing ``array`` later does not change the model.

        Example:
            >>> b.initializer("fc.weight", np.zeros((10, 64), np.float32))   # doctest: +SKIP
            'fc.weight'
        """
        return str(self._core.initializer(name, np.asarray(array)))

    def node(
        self,
        op_type: str,
        inputs: Sequence[str],
        *,
        name: str = "",
        domain: str = "",
        outputs: int | Sequence[str] = 1,
        **attributes: AttributeValue,
    ) -> str | tuple[str, ...]:
        """Adds a node and returns its output name (a tuple of names for several outputs).

        ``inputs`` are value names (``""`` omits an optional input). ``outputs`` is a count
        (names become ``"<node name>_output_<i>"``) or a list of names. Keyword arguments
        are the ONNX attributes. Raises, leaving the builder unchanged, ``GraphError`` for an
        input naming no value or a name already taken, ``ArgumentError`` for an unknown ONNX
        op (give a ``domain`` for custom ops) or an attribute of the wrong kind, and
        ``ShapeError`` for shapes or dtypes the op cannot take.

        Example:
            >>> h = b.node("Gemm", ["x", "w1", "b1"], name="fc1", transB=1)   # doctest: +SKIP
            >>> h = b.node("Relu", [h])                                      # doctest: +SKIP
            >>> y, mask = b.node("Dropout", [h], outputs=["y", "mask"])      # doctest: +SKIP
        """
        if isinstance(outputs, int):
            names = self._core.node(op_type, list(inputs), attributes, name, domain, outputs, [])
        else:
            if isinstance(outputs, str):
                outputs = [outputs]
            names = self._core.node(op_type, list(inputs), attributes, name, domain, len(outputs), list(outputs))
        return names[0] if len(names) == 1 else tuple(names)

    def output(self, *names: str) -> None:
        """Marks values as graph outputs, in order; their types are the inferred ones.

        Raises ``GraphError`` when a name names no value.

        Example:
            >>> b.output("logits", "probs")                  # doctest: +SKIP
        """
        for n in names:
            self._core.output(n)

    def shape(self, name: str) -> tuple[Dim, ...] | None:
        """The inferred shape of a value: ints, symbol strings, ``None`` for unknown dims;
        ``None`` when even the rank is unknown.

        Example:
            >>> b.shape("fc1_output_0")                      # doctest: +SKIP
            ('batch', 100)
        """
        return self._core.type(name)[2]

    def dtype(self, name: str) -> str:
        """The inferred element type of a value (``"float32"``, ``"undefined"`` if unknown).

        Example:
            >>> b.dtype("x")                                 # doctest: +SKIP
            'float32'
        """
        return str(self._core.type(name)[1])

    def build(self) -> Model:
        """The model built so far: validated, shapes inferred, producer ``"tether"``.

        The builder stays usable; weights are shared with it, not copied. Raises
        ``GraphError`` when no output was marked.

        Example:
            >>> sess = tt.compile(b.build())                 # doctest: +SKIP
        """
        return Model(self._core.build())

    def save(self, path: str | os.PathLike[str], external_data: ExternalData = False) -> list[Path]:
        """Builds the model and writes it as ONNX; returns the files written.

        ``external_data=True`` puts weights of 1 KiB and more into ``<file>.data`` beside the
        model (see :meth:`tether.Model.save` for every option).

        Example:
            >>> b.save("mlp.onnx")                           # doctest: +SKIP
            [PosixPath('mlp.onnx')]
        """
        return self.build().save(path, external_data)


def _dtype_name(dtype: str | np.dtype[Any] | type) -> str:
    if isinstance(dtype, str):
        return dtype
    return str(np.dtype(dtype).name)
