"""tether.track: export and verify a model around a training loop."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from tether.export._result import ExportError, ExportResult


class Tracker:
    """Exports the model it tracks at each :meth:`checkpoint` and when the ``with`` block ends,
    checking parity every time. Get one with :func:`track`.

    A checkpoint that fails to export or verify does not stop training: it warns and its error
    is kept in ``errors``. The final export at the end of the block raises :class:`ExportError`
    on failure, since it is the deliverable. Nothing is exported when the block raises.

    Example:
        >>> with tt.track(net, x[:8], "net.onnx", dynamic={"x": {0: "batch"}}) as t:   # doctest: +SKIP
        ...     for epoch in range(3):
        ...         train_one_epoch(net)
        ...         t.checkpoint(f"epoch{epoch}")
        >>> t.result.ok, [r.path.name for r in t.results]                              # doctest: +SKIP
        (True, ['net.epoch0.onnx', 'net.epoch1.onnx', 'net.epoch2.onnx', 'net.onnx'])
    """

    def __init__(self, model: Any, sample_batch: Any, path: str | os.PathLike[str], **options: Any) -> None:
        self.model = model
        self.sample_batch = sample_batch
        self.path = Path(path)
        self.options = options
        self.results: list[ExportResult] = []
        self.errors: list[ExportError] = []

    @property
    def result(self) -> ExportResult | None:
        """The latest successful export (the final one after the block)."""
        return self.results[-1] if self.results else None

    def _export(self, path: Path) -> ExportResult:
        if _is_keras(self.model):
            from tether.export._keras import keras

            return keras(self.model, self.sample_batch, path, **self.options)
        import torch

        from tether.export._torch import torch as export_torch

        batch = self.sample_batch
        if isinstance(batch, np.ndarray):
            batch = torch.from_numpy(batch)
        elif isinstance(batch, tuple | list):
            batch = tuple(torch.from_numpy(b) if isinstance(b, np.ndarray) else b for b in batch)
        with warnings.catch_warnings():
            # A tracked module is training by design; the note stays in the result's warnings.
            warnings.filterwarnings("ignore", message="the module was in training mode")
            return export_torch(self.model, batch, path, **self.options)

    def checkpoint(self, tag: str | None = None) -> ExportResult | None:
        """Exports now to ``<stem>.<tag><suffix>`` beside the final path (``tag`` defaults to
        ``checkpoint<N>``) and verifies it; returns the result, or None when it failed (the
        error is in ``errors``, and a warning says what failed).

        Example:
            >>> t.checkpoint("epoch3").report.ok                 # doctest: +SKIP
            True
        """
        tag = tag or f"checkpoint{len(self.results) + len(self.errors) + 1}"
        path = self.path.with_name(f"{self.path.stem}.{tag}{self.path.suffix}")
        try:
            res = self._export(path)
        except ExportError as e:
            self.errors.append(e)
            warnings.warn(f"tether.track: checkpoint '{tag}' failed: {e}", stacklevel=2)
            return None
        self.results.append(res)
        return res

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is None:
            self.results.append(self._export(self.path))


def _is_keras(model: Any) -> bool:
    return any(c.__module__.startswith(("keras", "tf_keras", "tensorflow")) for c in type(model).__mro__)


def track(model: Any, sample_batch: Any, path: str | os.PathLike[str], **options: Any) -> Tracker:
    """A :class:`Tracker` for ``with`` around training: the model is exported to ``path`` when
    the block ends (and at each ``checkpoint()``), with parity checked against the model on
    ``sample_batch`` and a golden bundle written beside it. ``options`` go to
    :func:`tether.export.torch` (or :func:`tether.export.keras` for a Keras model).

    Example:
        >>> with tt.track(net, x[:8], "net.onnx") as t:            # doctest: +SKIP
        ...     train(net)
        >>> print(t.result.report.table())                         # doctest: +SKIP
    """
    return Tracker(model, sample_batch, path, **options)
