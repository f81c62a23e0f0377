"""LiteRTRunner: a .tflite model run by the LiteRT (TensorFlow Lite) interpreter behind the Runner protocol."""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np

from tether._native import core as _core
from tether._regular_file import open_regular
from tether.parity._types import InputSpec

_SIGNATURE_PREFIX = re.compile(r"^serving_default_")
_TENSOR_SUFFIX = re.compile(r":\d+$")


def _clean(tensor_name: str) -> str:
    """``serving_default_image:0`` -> ``image``: the prefix and suffix the TFLite converter adds."""
    return _TENSOR_SUFFIX.sub("", _SIGNATURE_PREFIX.sub("", tensor_name))


def _interpreter_class() -> Any:
    try:
        from ai_edge_litert.interpreter import Interpreter  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        try:
            import tensorflow as tf  # type: ignore[import-not-found,import-untyped,unused-ignore]
        except ImportError as e:
            raise _core.ArgumentError("LiteRTRunner needs the LiteRT interpreter: pip install ai-edge-litert "
                                      "(or tensorflow)") from e
        return tf.lite.Interpreter
    return Interpreter


class LiteRTRunner:
    """A ``.tflite`` model (a path or its bytes) run by the LiteRT interpreter.

    The interpreter is ``ai_edge_litert.interpreter.Interpreter`` when ``ai-edge-litert`` is
    installed, else ``tf.lite.Interpreter``.

    **Names.** The TFLite converter names a SavedModel's tensors ``serving_default_<input>:0``
    and ``StatefulPartitionedCall:0``. The runner names inputs and outputs by the model's
    signature when it has exactly one (the Keras input names, and ``output_0``, ``output_1``...
    for outputs), and otherwise by the tensor names with the ``serving_default_`` prefix and the
    ``:N`` suffix stripped. ``tensor_names`` maps each name the runner uses to the TFLite tensor
    name. An ONNX model exported from the same Keras model names its outputs differently
    (``Identity:0``): declare the pairing with ``output_map`` in :func:`tether.parity.compare`.

    **Batch.** ``run`` resizes an input whose shape differs from the current one (a dim that is
    -1 in the model's shape signature may change; others are refused with the expected shape).

    **Quantized inputs and outputs.** A float feed to an integer-quantized input is quantized
    with the tensor's scale and zero point, and a quantized integer output is dequantized to
    float32, so the runner compares directly with a float reference. A model converted with
    float input and output (``tether.export.tflite`` does so) needs neither.

    **Layouts.** Keras and TFLite models are NHWC, and so is the ONNX model tf2onnx exports from
    a Keras model, so these compare without a layout. Against an NCHW model (a torch port),
    the inputs must be given in each one's layout by the caller (a runner takes the same feeds),
    and ``layouts={"features": "NHWC->NCHW"}`` declares the transpose of an NHWC output.

    Example:
        >>> r = LiteRTRunner("model.tflite", threads=1)        # doctest: +SKIP
        >>> [s.name for s in r.input_specs()], r.output_names() # doctest: +SKIP
        (['image'], ['output_0'])
        >>> r.tensor_names["image"]                             # doctest: +SKIP
        'serving_default_image:0'
        >>> r.run({"image": x})["output_0"].shape               # doctest: +SKIP
        (8, 10)
    """

    def __init__(self, path_or_bytes: str | os.PathLike[str] | bytes, name: str = "litert",
                 threads: int | None = None) -> None:
        self.name = name
        source: dict[str, Any]
        if isinstance(path_or_bytes, bytes | bytearray):
            source = {"model_content": bytes(path_or_bytes)}
            self.path: str | None = None
        else:
            self.path = os.fspath(path_or_bytes)
            # The interpreter reads the path itself: a FIFO or device there would block it.
            open_regular(self.path, what="TFLite model").close()
            source = {"model_path": self.path}
        self.interpreter = _interpreter_class()(**source, num_threads=threads)
        self.interpreter.allocate_tensors()
        full = getattr(self.interpreter, "_get_full_signature_list", None)
        self._signatures: dict[str, Any] = dict(full()) if callable(full) else {}
        self._inputs = {self._name(d, "inputs"): d for d in self.interpreter.get_input_details()}
        self._outputs = {self._name(d, "outputs"): d for d in self.interpreter.get_output_details()}
        self.tensor_names: dict[str, str] = {k: d["name"] for k, d in {**self._inputs, **self._outputs}.items()}

    def _name(self, detail: dict[str, Any], side: str) -> str:
        if len(self._signatures) == 1:
            by_index = {index: name for name, index in next(iter(self._signatures.values()))[side].items()}
            if detail["index"] in by_index:
                return str(by_index[detail["index"]])
        return _clean(str(detail["name"]))

    def input_specs(self) -> list[InputSpec]:
        """The model's inputs; a dim that is -1 in the shape signature is ``"batch"`` when it is
        the first, else None."""
        specs = []
        for name, d in self._inputs.items():
            sig = d.get("shape_signature", d["shape"])
            shape = tuple(("batch" if i == 0 else None) if int(v) < 0 else int(v) for i, v in enumerate(sig))
            specs.append(InputSpec(name, np.dtype(self._float_side(d)), shape))
        return specs

    def output_names(self) -> list[str]:
        """The model's outputs, in order."""
        return list(self._outputs)

    @staticmethod
    def _float_side(detail: dict[str, Any]) -> Any:
        """The dtype a caller gives or gets: float32 for a quantized integer tensor."""
        scale, _ = detail.get("quantization", (0.0, 0))
        return np.float32 if scale and np.dtype(detail["dtype"]).kind in "iu" else detail["dtype"]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Sets every input (resizing it when its shape changed), invokes, returns the outputs."""
        missing = [n for n in self._inputs if n not in feeds]
        if missing:
            raise _core.ArgumentError(f"runner '{self.name}': input {missing[0]!r} is missing; it takes "
                                      f"{list(self._inputs)}")
        resized = False
        for name, d in self._inputs.items():
            shape = tuple(np.shape(feeds[name]))
            if shape != tuple(self.interpreter.get_input_details()[self._position(d)]["shape"]):
                self._check_shape(name, d, shape)
                self.interpreter.resize_tensor_input(d["index"], list(shape), strict=False)
                resized = True
        if resized:
            self.interpreter.allocate_tensors()
        for name, d in self._inputs.items():
            self.interpreter.set_tensor(d["index"], self._quantize(d, np.asarray(feeds[name])))
        self.interpreter.invoke()
        return {name: self._dequantize(d, self.interpreter.get_tensor(d["index"])) for name, d in self._outputs.items()}

    def _position(self, detail: dict[str, Any]) -> int:
        return [d["index"] for d in self.interpreter.get_input_details()].index(detail["index"])

    def _check_shape(self, name: str, detail: dict[str, Any], shape: tuple[int, ...]) -> None:
        sig = [int(v) for v in detail.get("shape_signature", detail["shape"])]
        if len(sig) != len(shape) or any(s >= 0 and s != g for s, g in zip(sig, shape, strict=True)):
            want = ["?" if s < 0 else s for s in sig]
            raise _core.ArgumentError(f"runner '{self.name}': input '{name}' has shape {list(shape)}, the model "
                                      f"takes {want}")

    @staticmethod
    def _quantize(detail: dict[str, Any], value: np.ndarray) -> np.ndarray:
        dtype = np.dtype(detail["dtype"])
        scale, zero = detail.get("quantization", (0.0, 0))
        if scale and dtype.kind in "iu" and value.dtype.kind == "f":
            info = np.iinfo(dtype)
            return np.clip(np.round(value / scale) + zero, info.min, info.max).astype(dtype)
        return np.ascontiguousarray(value, dtype=dtype)

    @staticmethod
    def _dequantize(detail: dict[str, Any], value: np.ndarray) -> np.ndarray:
        scale, zero = detail.get("quantization", (0.0, 0))
        if scale and value.dtype.kind in "iu":
            return ((value.astype(np.float32) - zero) * scale).astype(np.float32)
        return np.array(value)
