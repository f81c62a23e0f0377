"""QuantizeResult: the quantized model, its parameters, its report, and calibration files."""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from tether._model import Model
from tether._native import core as _core
from tether.parity._report import ParityReport
from tether.quantize._accuracy import AccuracyControlResult
from tether.quantize._debug import DebugReport
from tether.quantize._evaluate import LayerSensitivity
from tether.quantize._summary import QuantizationSummary


def _ncnn_scale(absmax: float) -> float:
    """ncnn's scale 127 / absmax in float32; 1 where that is not a finite positive float (an
    all-zero channel, or one so small that 127 / absmax overflows), as for tether's own scales.

    Example:
        >>> _ncnn_scale(0.5), _ncnn_scale(0.0), _ncnn_scale(1e-45)
        (254.0, 1.0, 1.0)
    """
    with np.errstate(over="ignore", divide="ignore"):
        scale = np.float32(127) / np.float32(absmax) if absmax > 0 else np.float32(1)
    return float(scale) if np.isfinite(scale) and scale > 0 else 1.0


@dataclass
class QuantParams:
    """Scale and zero point of one tensor: scalars per tensor, vectors along ``axis``."""

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None
    dtype: str

    @staticmethod
    def _from_core(t: tuple[list[float], list[int], int, str]) -> QuantParams:
        scale, zero_point, axis, dtype = t
        return QuantParams(np.asarray(scale, np.float32), np.asarray(zero_point, np.int64), None if axis < 0 else axis,
                           dtype)


# What the parity comparison says when it cannot bisect a fused kernel because the reference lacks
# a value: for a float reference against its QDQ copy, that value is one quantization added.
_UNBISECTED = re.compile(r"^the fused kernel writing '(?P<value>[^']+)' could not be bisected node by node: the "
                         r"reference did not produce value '(?P<missing>[^']+)'")


def _write(path: str | os.PathLike[str], text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise _core.WriteError(f"cannot write '{os.fspath(path)}': {e.strerror}") from e


@dataclass
class QuantizeResult:
    """What :func:`tether.quantize.static` made.

    ``model``: the QDQ model (standard ONNX, runs in onnxruntime and tether); ``float_model``:
    the float model it was made from (prepared: BatchNormalization folded, nodes named);
    ``report``: a :class:`tether.ParityReport` of the quantized model against the float one on
    the evaluation samples, with a ``quantization`` section (None when ``eval_samples=0``);
    ``ranges``: tensor -> (min, max, method); ``scales``: tensor -> :class:`QuantParams` for
    activations, weights and biases; ``float_nodes``: node -> why it stayed float;
    ``sensitivity``: per node, the error it adds alone, most sensitive first (when computed);
    ``plan``: what ``model`` quantizes (None when every node stayed float);
    ``accuracy_control``: with ``validation_fn``, the metric before and after, the nodes returned
    to float for it and the evaluations used (:class:`AccuracyControlResult`), else None.

    When nothing is quantized (only the float model meets the budget, or every node was kept
    in float), ``quantized`` is False, ``repr`` and the report say so and :meth:`save` warns:
    the file it writes is the float model.

    The report compares the float model with its quantized copy, whose fused kernels read
    values (``x_dequantized``) the float model never has: a kernel that cannot be bisected for
    that reason is noted with what does name the node adding the error, the sensitivity
    analysis (``sensitivity_analysis=True``: each node's SQNR with only that node quantized).

    Example:
        >>> res = tt.quantize.static(model, batches, method="entropy")   # doctest: +SKIP
        >>> res.save("model.int8.onnx"); print(res.report)                # doctest: +SKIP
    """

    model: Model
    float_model: Model
    report: ParityReport | None
    summary: QuantizationSummary
    ranges: dict[str, tuple[float, float, str]]
    scales: dict[str, QuantParams]
    float_nodes: dict[str, str]
    sensitivity: list[LayerSensitivity] | None
    plan: Any
    accuracy_control: AccuracyControlResult | None = None

    def __post_init__(self) -> None:
        if self.report is not None:
            self.report.notes = [self._bisect_note(n) for n in self.report.notes]

    def _bisect_note(self, note: str) -> str:
        """A note that a fused kernel could not be bisected, with advice for this comparison in
        place of advice about compiling the reference (quantize compiles it, and the missing
        value is one quantization added)."""
        m = _UNBISECTED.match(note)
        if m is None:
            return note
        where = ("the quantization section's 'most sensitive layers' table gives the error each node adds alone"
                 if self.sensitivity else "tt.quantize.static(..., sensitivity_analysis=True) gives the error each "
                 "node adds alone (the output's SQNR with only that node quantized)")
        values = {o for n in self.float_model.nodes for o in n.outputs}
        why = ("the float model computes it inside a fused kernel of its own" if m["missing"] in values
               else "a value the quantized model adds and the float model lacks")
        return (f"the fused kernel writing '{m['value']}' is not bisected node by node: '{m['missing']}' is {why}; "
                f"{where}")

    @property
    def quantized(self) -> bool:
        """Whether ``model`` quantizes anything (holds a QuantizeLinear or DequantizeLinear node).

        Example:
            >>> res.quantized                                       # doctest: +SKIP
            True
        """
        return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in self.model.nodes)

    def save(self, path: str | os.PathLike[str], *, external_data: bool = False) -> None:
        """Writes the quantized model (weights inline, or beside it with ``external_data``).
        Warns when nothing is quantized: the file is then the float model.

        Example:
            >>> res.save("model.int8.onnx")                        # doctest: +SKIP
        """
        self.model.save(path, external_data=external_data)
        if not self.quantized:
            why = self.summary.float_only() or "every node was kept in float"
            warnings.warn(f"'{os.fspath(path)}' is the float model: nothing is quantized; {why}", stacklevel=2)

    def debug(self, batches: Any, *, batch_size: int | None = None, threads: int | None = None) -> DebugReport:
        """Per quantized node, the INT8 error it adds and the total at its output, on ``batches``
        (see :func:`tether.quantize.debug`).

        Example:
            >>> print(res.debug(x_val))                              # doctest: +SKIP
        """
        from tether.quantize._debug import debug

        return debug(self.float_model, self.model, batches, batch_size=batch_size, threads=threads)

    def tensorrt_scales(self) -> dict[str, float]:
        """Per activation ``model`` quantizes, TensorRT's symmetric scale: max(|min|, |max|) / 127.
        Tensors of nodes kept in float are left out: TensorRT runs in INT8 what the cache lists."""
        planned = set() if self.plan is None else {t.name for t in self.plan.tensors}
        return {name: max(abs(lo), abs(hi)) / 127.0 for name, (lo, hi, _) in self.ranges.items() if name in planned}

    def write_tensorrt_cache(self, path: str | os.PathLike[str]) -> None:
        """Writes TensorRT's calibration cache (``TRT-...-EntropyCalibration2`` header, one
        ``tensor: hex scale`` line per activation), for ``IInt8Calibrator.read_calibration_cache``.

        Example:
            >>> res.write_tensorrt_cache("model.cache")             # doctest: +SKIP
        """
        _write(path, _core.quant_write_tensorrt_cache(self.tensorrt_scales(), "TRT-8601-EntropyCalibration2"))

    def ncnn_table(self) -> tuple[dict[str, list[float]], dict[str, float]]:
        """ncnn's scales per quantized Conv/Gemm/MatMul with a weight: per output channel
        127 / max|w|, and for its input 127 / threshold (max(|min|, |max|) of the input range)."""
        weights: dict[str, list[float]] = {}
        inputs: dict[str, float] = {}
        init = {name: None for name in self.float_model.initializer_names}
        for p in [] if self.plan is None else self.plan.nodes:
            if not p.weight or p.weight not in init or not p.inputs or p.inputs[0] not in self.ranges:
                continue
            w = np.asarray(self.float_model.initializer(p.weight), np.float32)
            axis = p.weight_axis if p.weight_axis >= 0 else None
            absmax = (np.abs(w).max(axis=tuple(d for d in range(w.ndim) if d != axis)) if axis is not None
                      else np.abs(w).max(keepdims=True))
            weights[p.node] = [_ncnn_scale(a) for a in np.atleast_1d(absmax)]
            lo, hi, _ = self.ranges[p.inputs[0]]
            inputs[p.node] = _ncnn_scale(max(abs(lo), abs(hi)))
        return weights, inputs

    def write_ncnn_table(self, path: str | os.PathLike[str]) -> None:
        """Writes ncnn's int8 calibration table (as ncnn2table does) for the quantized layers,
        named by their ONNX node names.

        Example:
            >>> res.write_ncnn_table("model.table")                 # doctest: +SKIP
        """
        weights, inputs = self.ncnn_table()
        _write(path, _core.quant_write_ncnn_table(weights, inputs))

    def __repr__(self) -> str:
        counts = (f"{self.summary.quantized_activations} of {len(self.summary.tensors)} activations quantized, "
                  f"{len(self.float_nodes)} nodes in float")
        if not self.quantized:
            why = self.summary.float_only() or "every node was kept in float"
            counts = f"NOTHING QUANTIZED, the float model: {why}; {counts}"
        return f"<QuantizeResult: {counts}, profile {self.summary.profile}, method {self.summary.method}>"
