"""tether: carry a trained model to deployment and prove parity at every step.

Example:
    >>> import tether as tt
    >>> model = tt.load("model.onnx")              # doctest: +SKIP
    >>> model.inputs[0].shape                       # doctest: +SKIP
    ('batch', 3, 224, 224)
    >>> print(model.summary())                      # doctest: +SKIP
"""

from typing import TYPE_CHECKING

from tether._builder import GraphBuilder
from tether._model import Model, Node, Summary, ValueInfo, load
from tether._native import (
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
from tether._passes import optimize
from tether._session import Session, compile, cpu_info, devices, supported_ops

if TYPE_CHECKING:  # imported on first use (see __getattr__); named here for type checkers
    from tether import convert, distributed, edit, export, llm, parity, quantize, testing  # noqa: F401
    from tether._bench import BenchResult, bench
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


# Subpackages and the names taken from them load on first use: `import tether` stays quick
# (compile and run need none of them), and tt.distributed needs Ray, which nothing else imports.
_SUBPACKAGES = frozenset({"convert", "distributed", "edit", "export", "llm", "parity", "quantize", "testing"})
_FROM_SUBPACKAGES = {"track": "export", "ParityReport": "parity", "compare": "parity", "bench": "_bench",
                     "BenchResult": "_bench"}


def __getattr__(name: str) -> object:
    """Imports a subpackage (``tt.quantize``, ``tt.export``, ...) or a name taken from one
    (``tt.compare``, ``tt.track``, ``tt.bench``) the first time it is used.

    Example:
        >>> import tether as tt
        >>> tt.quantize.static                               # doctest: +SKIP
        >>> tt.distributed.calibrate("cnn.onnx", dataset)   # doctest: +SKIP
    """
    import importlib

    if name in _SUBPACKAGES:
        return importlib.import_module(f"tether.{name}")
    if name in _FROM_SUBPACKAGES:
        value = getattr(importlib.import_module(f"tether.{_FROM_SUBPACKAGES[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tether' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _SUBPACKAGES | set(_FROM_SUBPACKAGES))
