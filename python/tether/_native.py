"""Loads the compiled core so that its symbols resolve to its own libraries.

tether's core links the system's protobuf. A process may hold another protobuf already:
TensorFlow loads its own, newer one with global symbol visibility, and the core would then call
into it and crash. Loading the core with RTLD_DEEPBIND (glibc) makes it, and the libraries it
brings, look up symbols in their own dependencies first. The package imports this module before
anything else.

It is also the one way in to the core: every module of the package reaches it as
``from tether._native import core as _core``, and the error classes from here, so that how the
core is found and loaded is decided in this file alone (``tests/python/test_layering.py``).

Example:
    >>> from tether._native import core
    >>> issubclass(core.ShapeError, core.Error)
    True
"""

from __future__ import annotations

import os
import sys


def _load() -> None:
    deepbind = getattr(os, "RTLD_DEEPBIND", 0)
    if not deepbind or not hasattr(sys, "getdlopenflags"):
        return
    flags = sys.getdlopenflags()
    sys.setdlopenflags(flags | deepbind)
    try:
        import tether._core  # noqa: F401
    finally:
        sys.setdlopenflags(flags)


_load()

from tether import _core as core  # noqa: E402  (after _load: it loads the core)
from tether._core import (  # noqa: E402
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

__all__ = [
    "ArgumentError",
    "CalibrationError",
    "DeviceError",
    "Error",
    "ExternalDataError",
    "GraphError",
    "InternalError",
    "MemoryLimitError",
    "ModelError",
    "ModelNotFoundError",
    "ParseError",
    "ShapeError",
    "UnsupportedError",
    "WriteError",
    "core",
]
