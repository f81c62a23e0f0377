"""tether.Model: an ONNX model loaded into tether's IR."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from tether._native import core as _core

Dim = int | str | None
"""One dim of a shape: a size, a symbol such as ``"batch"``, or ``None`` when unknown."""


@dataclass(frozen=True)
class ValueInfo:
    """Name, element type and shape of a graph input, output or intermediate value.

    ``shape`` is a tuple of ints (known sizes), strings (symbolic dims such as ``"batch"``
    or ``"7*batch"``) and ``None`` (unknown), or ``None`` when even the rank is unknown.

    Example:
        >>> v = ValueInfo("x", "float32", ("batch", 3, 224, 224))
        >>> str(v)
        'x: float32[batch, 3, 224, 224]'
    """

    name: str
    dtype: str
    shape: tuple[Dim, ...] | None
    kind: str = "tensor"

    def __str__(self) -> str:
        if self.kind not in ("tensor", "sparse_tensor"):
            return f"{self.name}: {self.kind}"
        if self.shape is None:
            return f"{self.name}: {self.dtype}[...]"
        dims = ", ".join("?" if d is None else str(d) for d in self.shape)
        return f"{self.name}: {self.dtype}[{dims}]"

    @staticmethod
    def _from_core(name: str, t: tuple[str, str, tuple[Dim, ...] | None]) -> ValueInfo:
        kind, dtype, shape = t
        return ValueInfo(name, dtype, shape, kind)


@dataclass(frozen=True)
class Node:
    """One node of a graph: op type, domain, input and output value names, attributes.

    Attribute values are Python numbers, strings, lists, numpy arrays (tensors) or dicts
    (subgraphs, with ``name``, ``inputs``, ``outputs`` and ``nodes``). An omitted optional
    input or output is the empty string, as in ONNX.

    Example:
        >>> n = Node("conv1", "Conv", "", ("x", "w"), ("y",), {"strides": [2, 2]})
        >>> n.attributes["strides"]
        [2, 2]
    """

    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: dict[str, Any] = field(default_factory=dict)


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


@dataclass(frozen=True)
class Summary:
    """What a model holds, counted: ops, parameters, weight bytes, inputs and outputs.

    ``str(summary)`` is the report ``tether inspect`` prints; ``to_dict()`` gives the
    numbers for JSON.

    Example:
        >>> s = tt.load("model.onnx").summary()      # doctest: +SKIP
        >>> s.num_parameters, s.op_counts["Conv"]     # doctest: +SKIP
        (11689512, 20)
    """

    path: str
    producer: str
    ir_version: int
    opset: dict[str, int]
    inputs: tuple[ValueInfo, ...]
    outputs: tuple[ValueInfo, ...]
    op_counts: dict[str, int]
    num_nodes: int
    num_initializers: int
    num_parameters: int
    weight_bytes: int
    num_subgraphs: int

    def to_dict(self) -> dict[str, Any]:
        """The summary as plain data (for ``json.dumps``).

        Example:
            >>> json.dumps(model.summary().to_dict())   # doctest: +SKIP
        """
        d = dict(self.__dict__)
        d["inputs"] = [{"name": v.name, "dtype": v.dtype, "shape": v.shape} for v in self.inputs]
        d["outputs"] = [{"name": v.name, "dtype": v.dtype, "shape": v.shape} for v in self.outputs]
        return d

    def __str__(self) -> str:
        opsets = ", ".join(f"{d} {v}" for d, v in self.opset.items())
        lines = [
            f"model       {self.path or '<in memory>'}",
            f"producer    {self.producer or '?'}   ir_version {self.ir_version}   opset {opsets}",
        ]
        lines += [f"input       {v}" for v in self.inputs]
        lines += [f"output      {v}" for v in self.outputs]
        sub = f" ({self.num_subgraphs} subgraphs)" if self.num_subgraphs else ""
        lines.append(f"nodes       {self.num_nodes}{sub}")
        lines.append(
            f"parameters  {self.num_parameters:,} in {self.num_initializers} initializers, "
            f"{_human_bytes(self.weight_bytes)}"
        )
        if self.op_counts:
            width = max(len(op) for op in self.op_counts)
            lines.append("")
            lines.append(f"{'op':<{width}}  count")
            lines += [f"{op:<{width}}  {n:>5}" for op, n in self.op_counts.items()]
        return "\n".join(lines)


ExternalData = bool | None | Literal["auto", "always", "never"]


def _external_mode(external_data: ExternalData) -> str:
    if external_data is True:
        return "always"
    if external_data is False:
        return "never"
    if external_data is None:
        return "auto"
    return str(external_data)


class Model:
    """An ONNX model in tether's IR. Get one with :func:`tether.load`.

    Example:
        >>> model = tt.load("model.onnx")                 # doctest: +SKIP
        >>> [str(v) for v in model.inputs]                # doctest: +SKIP
        ['x: float32[batch, 3, 32, 32]']
        >>> model.save("copy.onnx", external_data=True)   # doctest: +SKIP
        [PosixPath('copy.onnx'), PosixPath('copy.onnx.data')]
    """

    def __init__(self, core: _core.Model) -> None:
        self._core = core

    @property
    def inputs(self) -> list[ValueInfo]:
        """The graph inputs, initializer-backed ones included (ONNX allows those as defaults)."""
        return [ValueInfo._from_core(n, t) for n, t in self._core.inputs()]

    @property
    def outputs(self) -> list[ValueInfo]:
        """The graph outputs."""
        return [ValueInfo._from_core(n, t) for n, t in self._core.outputs()]

    @property
    def nodes(self) -> list[Node]:
        """The main graph's nodes in stored order (subgraphs appear in their attributes)."""
        return [
            Node(name, op, domain, tuple(ins), tuple(outs), attrs)
            for name, op, domain, ins, outs, attrs in self._core.graph()["nodes"]
        ]

    @property
    def opset(self) -> dict[str, int]:
        """Imported operator sets, domain to version; the default domain is ``"ai.onnx"``."""
        return dict(self._core.opset())

    @property
    def ir_version(self) -> int:
        """The ONNX IR (file format) version."""
        return int(self._core.ir_version)

    @property
    def producer(self) -> str:
        """Producer name and version, e.g. ``"pytorch 2.13.0"``."""
        return f"{self._core.producer_name} {self._core.producer_version}".strip()

    @property
    def metadata(self) -> dict[str, str]:
        """The model's metadata_props."""
        return dict(self._core.metadata())

    @property
    def path(self) -> str:
        """The file the model was loaded from, or ``""``."""
        return str(self._core.source_path)

    @property
    def initializer_names(self) -> list[str]:
        """Names of the main graph's initializers (weights), in stored order."""
        return list(self._core.initializer_names())

    def initializer(self, name: str) -> np.ndarray:
        """A read-only numpy view of initializer ``name`` (no copy).

        Raises ArgumentError when there is no such initializer, or its dtype has no numpy
        equivalent (bfloat16, float8, 4-bit types).

        Example:
            >>> w = model.initializer("fc.weight")     # doctest: +SKIP
            >>> w.shape                                 # doctest: +SKIP
            (10, 64)
        """
        return self._core.initializer(name)  # type: ignore[no-any-return]

    def value_types(self) -> dict[str, ValueInfo]:
        """Every value of the main graph with what is known of its type.

        Example:
            >>> model.infer_shapes()                    # doctest: +SKIP
            >>> model.value_types()["conv1_out"].shape  # doctest: +SKIP
            ('batch', 64, 112, 112)
        """
        return {n: ValueInfo._from_core(n, t) for n, t in self._core.value_types().items()}

    def infer_shapes(self, overwrite: bool = False) -> dict[str, Any]:
        """Infers the type and shape of every value, symbolic dims included.

        Types the model declares are kept and refined; ``overwrite=True`` replaces them.
        Returns a report: ``nodes_inferred``, ``nodes_skipped`` and
        ``ops_without_inference`` (ops with no rule keep unknown shapes). Raises
        ShapeError naming the node when shapes contradict each other.

        Example:
            >>> report = model.infer_shapes()           # doctest: +SKIP
            >>> report["ops_without_inference"]         # doctest: +SKIP
            []
        """
        return dict(self._core.infer_shapes(overwrite))

    def summary(self) -> Summary:
        """Counts of ops, parameters and weight bytes, with inputs and outputs.

        Example:
            >>> print(model.summary())                  # doctest: +SKIP
        """
        s = self._core.summary()
        return Summary(
            path=self.path,
            producer=self.producer,
            ir_version=self.ir_version,
            opset=self.opset,
            inputs=tuple(self.inputs),
            outputs=tuple(self.outputs),
            op_counts=dict(s["op_counts"]),
            num_nodes=s["num_nodes"],
            num_initializers=s["num_initializers"],
            num_parameters=s["num_parameters"],
            weight_bytes=s["weight_bytes"],
            num_subgraphs=s["num_subgraphs"],
        )

    def save(
        self,
        path: str | os.PathLike[str],
        external_data: ExternalData = "auto",
        *,
        location: str | None = None,
        size_threshold: int = 1024,
        alignment: int = 4096,
    ) -> list[Path]:
        """Writes the model as ONNX and returns the files written.

        ``external_data``: ``True`` (or ``"always"``) puts every initializer of at least
        ``size_threshold`` bytes into one data file beside the model (``location``,
        default ``"<file name>.data"``), at offsets that are multiples of ``alignment``;
        ``False`` (``"never"``) keeps them inside, and fails for a file over 2 GiB;
        ``"auto"`` (or ``None``) keeps them inside unless the file would exceed 2 GiB.
        Files are written to temporary names and renamed into place, so saving over the
        model's own files is safe. A ``location`` that is the model file itself, names a
        folder, or leads out of the model's folder through a symlink is refused with
        :class:`tether.ArgumentError` before anything is written.

        Example:
            >>> model.save("m.onnx", external_data=True)    # doctest: +SKIP
            [PosixPath('m.onnx'), PosixPath('m.onnx.data')]
        """
        mode = _external_mode(external_data)
        files, _ = self._core.save(os.fspath(path), mode, location or "", size_threshold, alignment)
        return [Path(f) for f in files]

    def copy(self) -> Model:
        """A deep copy of the model; weights are shared until either side changes them.

        Example:
            >>> twin = model.copy()                          # doctest: +SKIP
            >>> twin.to_bytes() == model.to_bytes()          # doctest: +SKIP
            True
        """
        return Model(self._core.clone())

    def to_bytes(self) -> bytes:
        """The model as ONNX bytes, every weight inside (at most 2 GiB).

        Example:
            >>> onnx.load_from_string(model.to_bytes())      # doctest: +SKIP
        """
        return bytes(self._core.to_bytes())

    def __repr__(self) -> str:
        where = f" from {self.path!r}" if self.path else ""
        return f"<tether.Model{where}: {len(self._core.graph()['nodes'])} nodes>"


def load(source: str | os.PathLike[str] | bytes, *, base_dir: str | os.PathLike[str] | None = None) -> Model:
    """Loads an ONNX model from a file path or from bytes.

    Weights in external data files are mapped, not read, and are resolved relative to the
    model's folder (or ``base_dir``, which bytes with external data need). Bad input raises
    a subclass of :class:`tether.ModelError` whose message names the file and the place:
    ``ModelNotFoundError``, ``ParseError``, ``GraphError``, ``ExternalDataError``.

    Example:
        >>> import tether as tt
        >>> model = tt.load("resnet.onnx")                 # doctest: +SKIP
        >>> model = tt.load(open("resnet.onnx", "rb").read())  # doctest: +SKIP
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        return Model(_core.Model.load_bytes(bytes(source), os.fspath(base_dir) if base_dir else ""))
    if base_dir is not None:
        raise _core.ArgumentError(
            "base_dir applies to models loaded from bytes; a file is resolved against its own folder"
        )
    return Model(_core.Model.load(os.fspath(source)))
