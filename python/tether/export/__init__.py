"""tether.export: from a training script to a verified ONNX (or TFLite) file in one call.

Example:
    >>> import tether as tt
    >>> res = tt.export.torch(net, (x,), "net.onnx", dynamic={"x": {0: "batch"}})   # doctest: +SKIP
    >>> res.ok, res.golden_path                                                      # doctest: +SKIP
    (True, PosixPath('net.golden'))
"""

from tether.export._keras import keras, tflite
from tether.export._result import ExportError, ExportResult
from tether.export._torch import torch
from tether.export._track import Tracker, track
from tether.export._transformers import TransformersExportResult, transformers

__all__ = ["ExportError", "ExportResult", "Tracker", "TransformersExportResult", "keras", "tflite", "torch", "track",
           "transformers"]
