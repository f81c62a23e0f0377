"""Loads the compiled core so that its symbols resolve to its own libraries.

tether's core links the system's protobuf. A process may hold another protobuf already:
TensorFlow loads its own, newer one with global symbol visibility, and the core would then call
into it and crash. Loading the core with RTLD_DEEPBIND (glibc) makes it, and the libraries it
brings, look up symbols in their own dependencies first. The package imports this module before
anything else.
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
