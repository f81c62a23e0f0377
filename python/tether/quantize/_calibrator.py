"""Calibrator: observe the tensors a plan quantizes, batch by batch, on tether's CPU engine."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from tether._model import Model, load
from tether._native import core as _core
from tether.parity._inputs import Feeds, iter_feeds
from tether.parity._types import InputSpec


def _specs(model: Model) -> list[InputSpec]:
    return [InputSpec(i.name, np.dtype(i.dtype), i.shape) for i in model.inputs]


def _default_batch(model: Model) -> int:
    """The model's fixed batch size when its first input fixes dim 0, else 32."""
    shape = model.inputs[0].shape if model.inputs else None
    return shape[0] if shape and isinstance(shape[0], int) and shape[0] > 0 else 32


def _channel_axis(name: str, axis: Any, shape: tuple[Any, ...] | None) -> int:
    """``axis`` of tensor ``name`` as the core takes it: in ``[0, rank)``, or -1 for None (no
    channels tracked). An axis outside the tensor's rank would leave its channels untracked
    without a word, so it is refused."""
    if axis is None:
        return -1
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer):
        raise _core.ArgumentError(f"tensor '{name}': channel axis {axis!r} is not an int (or None for no channels)")
    axis = int(axis)
    if shape is None:
        if axis < 0 or axis > np.iinfo(np.int32).max:
            raise _core.ArgumentError(f"tensor '{name}' has an unknown rank, so channel axis {axis} cannot be "
                                      "checked or counted from the end; give an axis from 0 up")
        return axis
    rank = len(shape)
    if not -rank <= axis < rank:
        valid = f"axes {-rank} to {rank - 1}" if rank else "no axes"
        raise _core.ArgumentError(f"tensor '{name}' has rank {rank}, so it has no channel axis {axis} ({valid})")
    return axis % rank


def _observed(model: Model, tensors: Sequence[Any]) -> list[tuple[str, int]]:
    """``tensors`` (names, or ``(name, channel_axis)`` pairs) as the core's (name, axis) pairs."""
    types = model.value_types()
    out = []
    for t in tensors:
        if isinstance(t, str):
            out.append((t, -1))
            continue
        if not isinstance(t, tuple | list) or len(t) != 2 or not isinstance(t[0], str):
            raise _core.ArgumentError(f"tensors: {t!r} is neither a name nor a (name, channel_axis) pair")
        info = types.get(t[0])
        # A name the model lacks is left to the core, whose error says so.
        out.append((t[0], -1 if info is None else _channel_axis(t[0], t[1], info.shape)))
    return out


def iter_batches(data: Any, model: Model, batch_size: int | None = None) -> Iterator[Feeds]:
    """Calibration data as a stream of feeds, each a batch along axis 0 of every input.

    ``data`` is an iterable of batches (dicts by input name, arrays for a single-input model,
    tuples of arrays in input order), a ``.npz`` path, or the whole set at once (one array or
    one dict of arrays), which is cut into batches of ``batch_size`` rows (default: the batch
    size the model fixes, else 32). A generator is read once, lazily: nothing is materialised.

    Example:
        >>> sum(1 for _ in iter_batches(np.zeros((70, 4), np.float32), model))   # doctest: +SKIP
        3
    """
    batch_size = _default_batch(model) if batch_size is None else batch_size
    if batch_size < 1:
        raise _core.ArgumentError(f"batch_size must be >= 1, got {batch_size}")
    specs = _specs(model)
    whole = isinstance(data, np.ndarray | Mapping | str | os.PathLike) or (
        isinstance(data, tuple) and all(isinstance(a, np.ndarray) for a in data))
    if not whole:
        yield from iter_feeds(data, specs)
        return
    for feeds in iter_feeds(data, specs):
        rows = {np.shape(a)[0] if np.ndim(a) else 1 for a in feeds.values()}
        if len(rows) != 1:
            raise _core.ArgumentError(f"the inputs differ in their number of samples along axis 0: "
                                      f"{ {k: np.shape(v) for k, v in feeds.items()} }")
        n = rows.pop()
        for start in range(0, n, batch_size):
            yield {k: (v[start:start + batch_size] if np.ndim(v) else v) for k, v in feeds.items()}


def _progress(stream: Iterable[Feeds], progress: bool | None, desc: str) -> Iterable[Feeds]:
    """The stream with a tqdm bar when asked, or by default when stderr is a terminal."""
    show = sys.stderr.isatty() if progress is None else progress
    if not show:
        return stream
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return stream
    return tqdm(stream, desc=desc, unit="batch")


class Calibrator:
    """Observes float tensors of a model as tether's CPU engine computes them and keeps, per
    tensor, exact extremes and a histogram of 2 x ``bins`` bins: memory is bounded by tensors x
    bins, whatever the number of samples, and the state is the same whatever the batch size or
    order. States of calibrators of the same model and tensors merge exactly, also across
    processes (:meth:`state` is bytes).

    ``model``: a prepared float model (see :func:`tether.quantize.prepare`) or anything
    :func:`tether.load` takes. ``tensors``: value names, or ``(name, channel_axis)`` pairs
    (channels along that axis are tracked to report dead ones; a negative axis counts from the
    end, ``None`` tracks none; an axis the tensor does not have raises ArgumentError); by default
    every tensor the ``profile``'s plan quantizes.

    Example:
        >>> cal = tt.quantize.Calibrator("model.onnx")          # doctest: +SKIP
        >>> for batch in batches: cal.observe(batch)            # doctest: +SKIP
        >>> ranges = cal.compute("entropy")                     # doctest: +SKIP
        >>> blob = cal.state(); other.merge([blob])             # doctest: +SKIP
    """

    def __init__(self, model: Model | str | os.PathLike[str] | bytes, tensors: Sequence[Any] | None = None, *,
                 profile: str = "onnxruntime", options: Mapping[str, Any] | None = None, bins: int = 2048,
                 threads: int | None = None, skip_nonfinite: bool = False) -> None:
        from tether.quantize._plan import make_options, plan, prepare

        source = model if isinstance(model, Model) else load(model)
        self.model = prepare(source)
        self.options = make_options(profile, options)
        self.plan = plan(self.model, self.options)
        observed = self.plan.observed() if tensors is None else _observed(self.model, tensors)
        self._core = _core.Calibrator(self.model._core, observed, bins, 0 if threads is None else int(threads),
                                      skip_nonfinite)
        self.bins = bins

    def observe(self, batch: Any) -> None:
        """Runs one batch (a dict by input name, or an array for a single-input model) and adds
        what every observed tensor held. NaN or infinity raises :class:`tether.CalibrationError`
        naming the tensor and the sample index (unless built with ``skip_nonfinite``).

        Example:
            >>> cal.observe({"x": x_batch})                       # doctest: +SKIP
        """
        for feeds in iter_feeds(batch, _specs(self.model)):
            self._core.observe(dict(feeds))

    def observe_all(self, batches: Any, *, batch_size: int | None = None, progress: bool | None = None) -> int:
        """Observes every batch of ``batches`` (see :func:`iter_batches`); returns the number of
        batches. Raises ArgumentError when there were none.

        Example:
            >>> cal.observe_all(x_calib, batch_size=64)          # doctest: +SKIP
            16
        """
        before = self._core.batches
        for feeds in _progress(iter_batches(batches, self.model, batch_size), progress, "calibrating"):
            self._core.observe(dict(feeds))
        count = self._core.batches - before
        if count == 0:
            raise _core.ArgumentError("no calibration data: the iterable of batches was empty")
        return count

    @property
    def samples(self) -> int:
        """Samples observed (skipped ones included)."""
        return int(self._core.samples)

    @property
    def batches(self) -> int:
        return int(self._core.batches)

    @property
    def skipped(self) -> list[int]:
        """Indices of the samples left out for NaN or infinity (with ``skip_nonfinite``)."""
        return list(self._core.skipped)

    def stats(self) -> dict[str, _core.TensorStats]:
        """Per tensor: its :class:`TensorStats` (count, min, max, histograms, channel extremes)."""
        return dict(self._core.stats())

    def state(self) -> bytes:
        """The whole state as bytes, for :meth:`merge` in another process.

        Example:
            >>> blob = cal.state()                                  # doctest: +SKIP
        """
        return bytes(self._core.state())

    def reset(self) -> None:
        """Forgets what was observed, keeping the compiled model: the next :meth:`state` holds
        only what is observed from then on (one state per batch, for a worker of a larger job).

        Example:
            >>> cal.observe(batch); blob = cal.state(); cal.reset()   # doctest: +SKIP
        """
        self._core.reset()

    def merge(self, states: Iterable[bytes] | bytes) -> None:
        """Adds states of other calibrators of the same model, tensors and bins. The result is
        bit for bit the one a single calibrator observing all their samples would have.

        Example:
            >>> cal.merge([shard_a.state(), shard_b.state()])     # doctest: +SKIP
        """
        for s in [states] if isinstance(states, bytes | bytearray) else states:
            self._core.merge(bytes(s))

    def compute(self, method: str = "minmax", *, percentile: float = 99.999, entropy_levels: int = 128
                ) -> dict[str, tuple[float, float, str]]:
        """Ranges of every planned tensor by ``method`` (``"minmax"``, ``"percentile"``,
        ``"entropy"``, ``"mse"`` or ``"sqnr"``): name -> (min, max, method used). Tensors that
        share parameters (a group) get the range of their merged statistics.

        Example:
            >>> cal.compute("percentile", percentile=99.99)["conv1_out"]   # doctest: +SKIP
            (0.0, 5.91, 'percentile')
        """
        return {str(k): (float(v[0]), float(v[1]), str(v[2])) for k, v in _core.quant_compute_ranges(
            self.plan, self._core.stats(), method, percentile, entropy_levels, self.options).items()}
