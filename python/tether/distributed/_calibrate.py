"""tether.distributed.calibrate: INT8 calibration over a ray.data.Dataset."""

from __future__ import annotations

import re
import time
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import ray.data

from tether._native import core as _core
from tether.distributed._common import (
    DEFAULT_BATCH_ROWS,
    ModelSource,
    check_columns,
    dataset_order,
    fail_once,
    feeds_of,
    head,
    job_token,
    loaded,
    per_process,
    portable,
    rows_of,
    specs,
)
from tether.parity._metrics import Tolerance
from tether.quantize._calibrator import Calibrator, _default_batch
from tether.quantize._evaluate import Budget
from tether.quantize._result import QuantizeResult
from tether.quantize._static import DEFAULT_METHODS, _finish, _overrides

_SAMPLE = re.compile(r"^calibration sample (\d+) \(batch \d+, row (\d+)\): (.*)$", re.DOTALL)


class _CalibrateWorker:
    """A Ray worker process's share of a calibration: compiles the model once, then turns each
    batch into the calibration state of that batch alone (compressed bytes), or the
    CalibrationError it raised."""

    def __init__(self, model: str | bytes, profile: str, options: dict[str, Any], bins: int, threads: int,
                 skip_nonfinite: bool) -> None:
        self.cal = Calibrator(model, profile=profile, options=options, bins=bins, threads=threads,
                              skip_nonfinite=skip_nonfinite)
        self.specs = specs(self.cal.model)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = rows_of(batch)
        error = ""
        blob = b""
        try:
            self.cal._core.observe(dict(feeds_of(batch, self.specs)))
            blob = zlib.compress(self.cal.state(), 1)
        except _core.CalibrationError as e:
            error = str(e)
        finally:
            self.cal.reset()
        return {"state": np.array([blob], dtype=object), "rows": np.array([rows], dtype=np.int64),
                "error": np.array([error], dtype=object)}


def _calibrate_batch(batch: dict[str, np.ndarray], *, token: str, fail_marker: str | None,
                     **worker: Any) -> dict[str, np.ndarray]:
    """One Ray task: a batch through this process's worker for job ``token``."""
    fail_once(fail_marker)
    return per_process(token, lambda: _CalibrateWorker(**worker))(batch)


def _located(message: str, first_row: int, rows: int) -> str:
    """A worker's CalibrationError, its sample named by its row in the whole dataset."""
    m = _SAMPLE.match(message)
    if m is None:
        return f"dataset rows {first_row} to {first_row + rows - 1}: {message}"
    row = int(m.group(2))
    return (f"calibration sample {first_row + row} (dataset row {first_row + row}; row {row} of a Ray batch of "
            f"{rows}): {m.group(3)}")


def _merge_in_order(cal: Calibrator, results: Any, timings: dict[str, float]) -> None:
    """Merges the batches' states as Ray hands them on (in dataset order, so skipped samples
    and a NaN's row are numbered in the whole dataset); raises the first batch's error."""
    first_row = 0
    merging = 0.0
    for out in results.iter_rows():
        rows = int(out["rows"])
        if out["error"]:
            raise _core.CalibrationError(_located(str(out["error"]), first_row, rows))
        start = time.perf_counter()
        cal.merge(zlib.decompress(out["state"]))
        merging += time.perf_counter() - start
        first_row += rows
    timings["merge_seconds"] = merging
    timings["rows"] = first_row


def calibrate(model: ModelSource, dataset: Any, *, method: str | None = None, percentile: float = 99.999,
              profile: str = "onnxruntime", per_channel: bool | None = None, activation_type: str | None = None,
              weight_type: str | None = None, symmetric_activations: bool | None = None,
              symmetric_weights: bool | None = None, reduce_range: bool | None = None,
              op_types: Sequence[str] | None = None, exclude_nodes: Sequence[str] = (), bins: int = 2048,
              skip_nonfinite: bool = False, batch_size: int = DEFAULT_BATCH_ROWS, concurrency: int = 2,
              threads_per_worker: int = 1, labels_column: str | None = None,
              label_output: str | None = None, eval_samples: int = 128, eval_data: Any = None,
              labels: Sequence[Any] | np.ndarray | None = None, max_accuracy_drop: float | None = None,
              min_sqnr_db: float | None = None, tolerance: Tolerance | str | None = None, runner: str = "tether",
              sensitivity_analysis: bool | None = None, threads: int | None = None,
              _timings: dict[str, float] | None = None, _fail_once: str | None = None) -> QuantizeResult:
    """Calibrates ``model`` on every row of a ``ray.data.Dataset`` and quantizes it, as
    :func:`tether.quantize.static` does on one process, with the same result.

    ``dataset`` holds one column per model input (numpy rows: ``ray.data.from_numpy``,
    ``from_items``, Parquet, ...), and may hold a ``labels_column``. Ray Data's ``map_batches``
    runs up to ``concurrency`` tasks at once (``threads_per_worker`` engine threads each), and
    each Ray worker process compiles the model once: the model travels as its path (which every
    node must be able to read) or as ONNX bytes. Each batch of ``batch_size`` rows becomes the
    calibration state of that batch, and the driver merges the states in dataset order: the
    statistics, ranges, scales and written model are bit for bit those of one process over all
    rows. Ray retries a batch whose process dies (Ray Data's default for its tasks); a batch's
    state is emitted once, by the attempt that succeeded. Progress shows
    as Ray Data's progress bars.

    The evaluation, the budget and the report are :func:`tether.quantize.static`'s, run on
    the driver with the first ``eval_samples`` rows (their labels from ``labels_column``), or
    on ``eval_data`` with ``labels``. Every other keyword is :func:`static`'s.

    Errors, before any worker starts: ArgumentError when a model input or the labels column is
    not a column of the dataset, or the first rows do not match the model's inputs (dtype,
    shape). A NaN or infinity raises :class:`tether.CalibrationError` naming the sample's row
    in the whole dataset (unless ``skip_nonfinite``).

    Example:
        >>> ds = ray.data.from_items([{"x": xi, "label": yi} for xi, yi in zip(x, y)])   # doctest: +SKIP
        >>> res = tt.distributed.calibrate("cnn.onnx", ds, method="entropy", labels_column="label",
        ...                                concurrency=2)                 # doctest: +SKIP
        >>> res.save("cnn.int8.onnx"); print(res.report.table())          # doctest: +SKIP
    """
    if concurrency < 1 or batch_size < 1:
        raise _core.ArgumentError(f"concurrency and batch_size must be >= 1, got {concurrency} and {batch_size}")
    if max_accuracy_drop is not None and labels_column is None and labels is None:
        raise _core.ArgumentError("max_accuracy_drop needs labels: pass labels_column=... (or eval_data with labels)")
    options = _overrides(per_channel, activation_type, weight_type, symmetric_activations, symmetric_weights,
                         reduce_range, op_types, exclude_nodes)
    cal = Calibrator(loaded(model), profile=profile, options=options, bins=bins, threads=threads,
                     skip_nonfinite=skip_nonfinite)
    wanted = specs(cal.model)
    check_columns(dataset, wanted, [labels_column] if labels_column else [])
    take = eval_samples if eval_data is None and eval_samples > 0 else 1
    first = head(dataset, take)
    if not first or rows_of(first) == 0:
        raise _core.ArgumentError("no calibration data: the dataset has no rows")
    first_feeds = feeds_of(first, wanted, f"dataset rows 0 to {rows_of(first) - 1}")

    timings: dict[str, float] = {} if _timings is None else _timings
    start = time.perf_counter()
    with dataset_order():
        results = dataset.map_batches(
            _calibrate_batch, batch_size=batch_size, batch_format="numpy",
            compute=ray.data.TaskPoolStrategy(size=concurrency), num_cpus=threads_per_worker,
            fn_kwargs={"token": job_token(), "fail_marker": _fail_once, "model": portable(model), "profile": profile,
                       "options": options, "bins": bins, "threads": threads_per_worker,
                       "skip_nonfinite": skip_nonfinite})
        _merge_in_order(cal, results, timings)
    timings["calibrate_seconds"] = time.perf_counter() - start
    if cal.batches == 0:
        raise _core.ArgumentError("no calibration data: the dataset has no rows")

    method = method or DEFAULT_METHODS.get(profile, "minmax")
    if eval_data is not None:
        from tether.parity._inputs import iter_feeds

        eval_feeds = list(iter_feeds(eval_data, wanted))
        eval_labels = None if labels is None else np.asarray(labels).ravel()
    else:
        step = _default_batch(cal.model)
        n = min(eval_samples, rows_of(first))
        eval_feeds = [{k: v[i:i + step] for k, v in first_feeds.items()} for i in range(0, n, step)]
        eval_labels = np.asarray(first[labels_column][:n]).ravel() if labels_column else None
    budget = Budget(max_accuracy_drop, min_sqnr_db,
                    Tolerance.profile(tolerance) if isinstance(tolerance, str) else tolerance)
    start = time.perf_counter()
    result = _finish(cal, method, eval_feeds, percentile=percentile, exclude_nodes=exclude_nodes, labels=eval_labels,
                     label_output=label_output, budget=budget, runner=runner, threads=threads,
                     sensitivity_analysis=sensitivity_analysis)
    timings["finish_seconds"] = time.perf_counter() - start
    return result
