"""Files of an export written under temporary names and moved into place only once verified."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

from tether._native import core as _core
from tether.parity import ParityReport

_GOLDEN_INDEX = "golden.json"


def golden_path(path: Path) -> Path:
    """Where the golden bundle of the model at ``path`` goes: ``.onnx`` replaced by ``.golden``."""
    return path.with_suffix(".golden")


class Staging:
    """A hidden folder beside the final ``path`` where an export writes its files (the model,
    its external data, its golden bundle) under their final names. :meth:`commit` moves them
    into place, the model last; :meth:`discard` removes them. A failed export therefore leaves
    nothing at ``path``, and a file there from an earlier export is left as it was.

    Example:
        >>> staging = Staging(Path("out/net.onnx"), golden=True)    # doctest: +SKIP
        >>> model.save(staging.path); staging.commit()              # doctest: +SKIP
    """

    def __init__(self, path: Path, *, golden: bool) -> None:
        self.final = path
        path.parent.mkdir(parents=True, exist_ok=True)
        if golden:
            _check_replaceable(golden_path(path))
        self.dir = Path(tempfile.mkdtemp(prefix=f".{path.name}.export-", dir=path.parent))
        self.path = self.dir / path.name

    def commit(self) -> None:
        """Moves every staged file into place (each replacing a file of the same name), the model
        last, then removes the staging folder."""
        entries = sorted(self.dir.iterdir(), key=lambda p: p.name == self.path.name)
        for entry in entries:
            target = self.final.parent / entry.name
            if entry.is_dir():
                _replace_dir(entry, target)
            else:
                os.replace(entry, target)
        self.discard()

    def name_final(self, *reports: ParityReport | None) -> None:
        """After :meth:`commit`: the model entries of ``reports`` (``report.models``) that name
        the staged file name the final one, where it now is (same bytes, same SHA-256)."""
        staged = os.path.abspath(self.path)
        for report in reports:
            for info in (getattr(report, "models", None) or {}).values():
                if isinstance(info, dict) and os.path.abspath(str(info.get("path", ""))) == staged:
                    info["path"] = os.fspath(self.final)

    def discard(self) -> None:
        """Removes the staging folder and everything in it."""
        shutil.rmtree(self.dir, ignore_errors=True)


def _check_replaceable(bundle: Path) -> None:
    """A golden bundle may replace nothing but an earlier bundle or an empty folder."""
    if bundle.exists() and (not bundle.is_dir() or (any(bundle.iterdir()) and not (bundle / _GOLDEN_INDEX).exists())):
        raise _core.ArgumentError(f"{bundle} exists and is not a golden bundle; tether will not replace it with the "
                                  "export's golden bundle (move it away, or pass golden=False)")


def _replace_dir(new: Path, target: Path) -> None:
    if not target.exists():
        new.rename(target)
        return
    old = target.parent / f".{target.name}.old-{uuid.uuid4().hex}"
    target.rename(old)
    new.rename(target)
    shutil.rmtree(old, ignore_errors=True)
