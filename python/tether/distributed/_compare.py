"""tether.distributed.compare: a parity sweep of two models over a ray.data.Dataset."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
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
from tether.parity._compare import _map_outputs, _permutation, report_from_state
from tether.parity._golden import model_sha256
from tether.parity._metrics import Tolerance
from tether.parity._report import ParityReport
from tether.parity._runners import OnnxRuntimeRunner, TetherRunner
from tether.parity._state import ParityState

_RUNNERS = ("tether", "onnxruntime")


def _runner(model: Any, kind: str, threads: int | None) -> Any:
    if kind == "onnxruntime":
        return OnnxRuntimeRunner(model, threads=threads)
    return TetherRunner(model, threads=threads)


class _CompareWorker:
    """A Ray worker process's share of a sweep: compiles both models once, then turns each
    batch into the parity state of that batch alone (its rows counted from 0)."""

    def __init__(self, reference: str | bytes, candidate: str | bytes, reference_runner: str, candidate_runner: str,
                 tolerance: dict[str, Any] | None, output_map: dict[str, str], layouts: dict[str, Any],
                 label_output: str | None, labels_column: str | None, threads: int) -> None:
        self.ref = _runner(reference, reference_runner, threads)
        self.cand = _runner(candidate, candidate_runner, threads)
        self.specs = self.ref.input_specs() or self.cand.input_specs()
        self.tolerance = None if tolerance is None else Tolerance(**tolerance)
        self.output_map = output_map
        self.layouts = {k: _permutation(v) for k, v in layouts.items()}
        self.label_output = label_output
        self.labels_column = labels_column

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        feeds = feeds_of(batch, self.specs)
        pairs = _map_outputs(self.ref.run(feeds), self.cand.run(feeds), self.output_map, self.layouts, self.ref,
                             self.cand)
        state = ParityState(self.tolerance, label_output=self.label_output)
        state.add_pairs(pairs, first_row=0, labels=batch[self.labels_column] if self.labels_column else None)
        return {"state": np.array([state.to_bytes()], dtype=object),
                "rows": np.array([rows_of(batch)], dtype=np.int64)}


def _compare_batch(batch: dict[str, np.ndarray], *, token: str, fail_marker: str | None,
                   **worker: Any) -> dict[str, np.ndarray]:
    """One Ray task: a batch through this process's worker for job ``token``."""
    fail_once(fail_marker)
    return per_process(token, lambda: _CompareWorker(**worker))(batch)


def compare(reference: ModelSource, candidate: ModelSource, dataset: Any, *, labels_column: str | None = None,
            label_output: str | None = None, tolerance: Tolerance | str | None = None,
            output_map: Mapping[str, str] | None = None, layouts: Mapping[str, str | Sequence[int]] | None = None,
            reference_runner: str = "tether", candidate_runner: str = "tether", names: tuple[str, str] | None = None,
            batch_size: int = DEFAULT_BATCH_ROWS, concurrency: int = 2, threads_per_worker: int = 1,
            _timings: dict[str, float] | None = None,
            _fail_once: str | None = None) -> ParityReport:
    """Compares two ONNX models on every row of a ``ray.data.Dataset``: the dataset-mode
    :class:`ParityReport` of :func:`tether.compare`, computed by Ray tasks.

    ``reference`` and ``candidate`` are paths (read by every worker, so visible on every
    node), ONNX bytes or :class:`tether.Model` objects (sent as bytes), run by
    ``reference_runner`` and ``candidate_runner`` (``"tether"`` or ``"onnxruntime"``); up to
    ``concurrency`` tasks run at once, and each Ray worker process compiles them once. Each
    batch of ``batch_size`` rows becomes a parity state (exact sums for the mean error, cosine
    and SNR, counts, extremes, the worst element, per-label agreement), and the driver merges
    them in dataset order: every output's metrics, the worst element's row and the per-label
    table equal those of :func:`tether.compare` over the same rows in one process.
    ``labels_column`` names the dataset's column of labels (one per row) for the per-label
    table of ``label_output`` (default: the first output). ``tolerance``, ``output_map`` and
    ``layouts`` are :func:`tether.compare`'s. Ray retries a batch whose process dies (Ray
    Data's default for its tasks); the batch is counted once.

    The report holds no per-batch list (Ray chooses the batches) and ``batches`` counts Ray's.
    Errors before any worker starts: ArgumentError when a model input or the labels column is
    not a column of the dataset, when the first row does not match the model's inputs, or for
    an unknown runner.

    Example:
        >>> rep = tt.distributed.compare("cnn.onnx", "cnn.int8.onnx", ds, labels_column="label",
        ...                              tolerance="int8")               # doctest: +SKIP
        >>> for s in rep.slices: print(s.label, s.top1_agreement)        # doctest: +SKIP
    """
    for kind in (reference_runner, candidate_runner):
        if kind not in _RUNNERS:
            raise _core.ArgumentError(f"unknown runner {kind!r}; use one of {list(_RUNNERS)}")
    if concurrency < 1 or batch_size < 1:
        raise _core.ArgumentError(f"concurrency and batch_size must be >= 1, got {concurrency} and {batch_size}")
    given = Tolerance.profile(tolerance) if isinstance(tolerance, str) else tolerance
    perms = dict(layouts or {})
    for v in perms.values():
        _permutation(v)
    ref_model = loaded(reference)
    wanted = specs(ref_model)
    check_columns(dataset, wanted, [labels_column] if labels_column else [], "reference model")
    first = head(dataset, 1)
    if not first or rows_of(first) == 0:
        raise _core.ArgumentError("no inputs: the dataset has no rows")
    first_feeds = feeds_of(first, wanted, "dataset row 0")
    ref_name, cand_name = names or (reference_runner, candidate_runner)
    if cand_name == ref_name:
        cand_name = f"{cand_name} (candidate)"

    timings: dict[str, float] = {} if _timings is None else _timings
    start = time.perf_counter()
    total = ParityState(given, label_output=label_output)
    merging = 0.0
    with dataset_order():
        results = dataset.map_batches(
            _compare_batch, batch_size=batch_size, batch_format="numpy",
            compute=ray.data.TaskPoolStrategy(size=concurrency), num_cpus=threads_per_worker,
            fn_kwargs={
                "token": job_token(), "reference": portable(reference), "candidate": portable(candidate),
                "reference_runner": reference_runner, "candidate_runner": candidate_runner,
                "tolerance": None if given is None else given.to_dict(), "output_map": dict(output_map or {}),
                "layouts": perms, "label_output": label_output, "labels_column": labels_column,
                "threads": threads_per_worker, "fail_marker": _fail_once})
        for out in results.iter_rows():
            t = time.perf_counter()
            total.append(bytes(out["state"]))
            merging += time.perf_counter() - t
    timings["merge_seconds"] = merging
    timings["compare_seconds"] = time.perf_counter() - start
    shapes = {k: tuple(np.shape(v)) for k, v in first_feeds.items()}  # of the first row
    report = report_from_state(total, ref_name, cand_name, given, shapes)
    report.models = {role: {"kind": "model", "path": loaded(m).path, "sha256": model_sha256(os.fspath(m))}
                     for role, m in (("reference", reference), ("candidate", candidate))
                     if isinstance(m, str | os.PathLike) and os.path.isfile(m)}
    report.notes.append(f"compared on Ray: {total.batches} batches of up to {batch_size} rows, {concurrency} workers")
    return report
