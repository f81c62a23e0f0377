"""Opening a user's file for reading so that nothing can block: a FIFO, a device, a socket or a
folder given where a file is expected is refused, naming the path and what it is, before any
byte is read. The same rule as the C++ core's (``util/regular_file.h``), for the files the
Python layer reads itself (input archives, golden bundles, ONNX test data)."""

from __future__ import annotations

import io
import os
import stat
from typing import BinaryIO

from tether._native import core as _core

_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket", stat.S_IFLNK: "a symbolic link"}


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a file of a known kind")


def open_regular(path: str | os.PathLike[str], *, what: str = "file",
                 error: type[Exception] = _core.ArgumentError) -> BinaryIO:
    """``path`` opened for binary reading, refused with ``error`` unless it is a regular file.

    The path is checked with ``stat`` first (a FIFO or device is never opened), then opened
    with ``O_NONBLOCK`` (a FIFO swapped in meanwhile cannot block the open) and checked again on
    the descriptor, which is what every read uses. Symbolic links to regular files are followed.
    The message names ``what`` and the path: ``input file 'x.npz' is a FIFO, not a regular file``.

    Example:
        >>> with open_regular("inputs.npz", what="input file") as f:  # doctest: +SKIP
        ...     magic = f.read(4)
    """
    name = os.fspath(path)
    try:
        mode = os.stat(name).st_mode
    except OSError:
        mode = stat.S_IFREG  # missing or unreadable: the open below says which
    if not stat.S_ISREG(mode):
        raise error(f"{what} '{name}' is {_kind(mode)}, not a regular file")
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        raise error(f"{what} '{name}' does not exist") from None
    except OSError as e:
        raise error(f"{what} '{name}' cannot be opened: {e.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(f"{what} '{name}' is {_kind(mode)}, not a regular file")
        os.set_blocking(fd, True)
        raw = io.FileIO(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    raw.name = name  # as open() names it; readers such as onnx.load take the folder from it
    return io.BufferedReader(raw)
