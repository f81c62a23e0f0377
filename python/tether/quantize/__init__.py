"""tether.quantize: INT8 post-training quantization from numpy batches, written as standard QDQ ONNX.

Calibration runs on tether's CPU engine and keeps per tensor only exact extremes and
fixed-size histograms: memory does not grow with the number of samples, and the ranges are
the same whatever the batch size, the order of the batches or the number of processes whose
states are merged. One pass serves every range method.

Example:
    >>> import tether as tt
    >>> res = tt.quantize.static("cnn.onnx", x_calib, method="entropy", profile="onnxruntime",
    ...                          labels=y_calib, max_accuracy_drop=0.005)    # doctest: +SKIP
    >>> res.save("cnn.int8.onnx")                                           # doctest: +SKIP
    >>> print(res.report.table())                                           # doctest: +SKIP
    >>> res.write_tensorrt_cache("cnn.cache")                               # doctest: +SKIP
    >>> ranges = tt.quantize.read_tensorrt_cache("cnn.cache")               # doctest: +SKIP
"""

from tether.quantize._accuracy import AccuracyControlResult
from tether.quantize._adaround import ALGORITHMS, AdaRound
from tether.quantize._calibrator import Calibrator, iter_batches
from tether.quantize._debug import DebugReport, NodeError, debug
from tether.quantize._equalize import equalize
from tether.quantize._evaluate import Budget, LayerSensitivity, Score
from tether.quantize._files import read_ncnn_table, read_tensorrt_cache
from tether.quantize._plan import make_options, prepare, profile_options, profiles
from tether.quantize._qat import qat_export, qat_prepare
from tether.quantize._result import QuantizeResult, QuantParams
from tether.quantize._static import DEFAULT_METHODS, static
from tether.quantize._summary import QuantizationSummary, TensorSummary
from tether.quantize._weight_only import WeightOnlyLayer, WeightOnlyResult, weight_only


def methods() -> list[str]:
    """The range methods: ``minmax``, ``percentile``, ``entropy``, ``mse`` and ``sqnr`` (per
    tensor, whichever of the others gives the highest SQNR).

    Example:
        >>> "entropy" in tt.quantize.methods()
        True
    """
    from tether._native import core as _core

    names = list(_core.quant_method_names())
    return names if "sqnr" in names else [*names, "sqnr"]


__all__ = [
    "ALGORITHMS",
    "DEFAULT_METHODS",
    "AccuracyControlResult",
    "AdaRound",
    "Budget",
    "Calibrator",
    "DebugReport",
    "LayerSensitivity",
    "NodeError",
    "QuantParams",
    "QuantizationSummary",
    "QuantizeResult",
    "Score",
    "TensorSummary",
    "WeightOnlyLayer",
    "WeightOnlyResult",
    "debug",
    "equalize",
    "iter_batches",
    "make_options",
    "methods",
    "prepare",
    "profile_options",
    "profiles",
    "qat_export",
    "qat_prepare",
    "read_ncnn_table",
    "read_tensorrt_cache",
    "static",
    "weight_only",
]
