"""tether: carry a trained model to deployment and prove parity at every step.

Example:
    >>> import tether as tt
    >>> model = tt.load("model.onnx")              # doctest: +SKIP
    >>> model.inputs[0].shape                       # doctest: +SKIP
    ('batch', 3, 224, 224)
    >>> print(model.summary())                      # doctest: +SKIP
"""

from tether import _native, convert, edit, export, llm, parity, quantize, testing  # noqa: F401  (_native first: it loads the core)
from tether._bench import BenchResult, bench
from tether._builder import GraphBuilder
from tether._core import (
    ArgumentError,
    CalibrationError,
    DeviceError,
    Error,
    ExternalDataError,
    GraphError,
    InternalError,
    MemoryLimitError,
    ModelError,
    ModelNotFoundError,
    ParseError,
    ShapeError,
    UnsupportedError,
    WriteError,
)
from tether._model import Model, Node, Summary, ValueInfo, load
from tether._passes import optimize
from tether._session import Session, compile, cpu_info, devices, supported_ops
from tether.export import track
from tether.parity import ParityReport, compare

__version__ = "0.1.0"

__all__ = [
    "ArgumentError",
    "BenchResult",
    "CalibrationError",
    "DeviceError",
    "Error",
    "ExternalDataError",
    "GraphBuilder",
    "GraphError",
    "InternalError",
    "MemoryLimitError",
    "Model",
    "ModelError",
    "ModelNotFoundError",
    "Node",
    "ParityReport",
    "Session",
    "ParseError",
    "ShapeError",
    "Summary",
    "UnsupportedError",
    "ValueInfo",
    "WriteError",
    "bench",
    "compare",
    "compile",
    "convert",
    "cpu_info",
    "devices",
    "supported_ops",
    "load",
    "optimize",
    "edit",
    "export",
    "llm",
    "parity",
    "quantize",
    "testing",
    "track",
]


def __getattr__(name: str) -> object:
    """``tt.distributed`` is imported on first use: it needs Ray, which nothing else imports.

    Example:
        >>> tt.distributed.calibrate("cnn.onnx", dataset)   # doctest: +SKIP
    """
    if name == "distributed":
        import importlib

        return importlib.import_module("tether.distributed")
    raise AttributeError(f"module 'tether' has no attribute {name!r}")
