"""What the distributed calibration and comparison share: models as bytes or paths, the
dataset's columns checked against the model, and Ray Data run in dataset order."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

from tether._model import Model, load
from tether._native import core as _core
from tether.parity._inputs import Feeds, check_feeds
from tether.parity._types import InputSpec

#: Rows per Ray batch unless told otherwise: large enough that a batch's state (a few hundred
#: kilobytes for a calibration) is small beside the work it stands for.
DEFAULT_BATCH_ROWS = 512

ModelSource = Model | str | os.PathLike[str] | bytes

_T = TypeVar("_T")

# In a Ray worker process: the compiled state of the latest job whose batches ran there.
_STATE: dict[str, Any] = {}


def job_token() -> str:
    """A name for one job's compiled worker state, unique across jobs."""
    return uuid.uuid4().hex


def per_process(token: str, build: Callable[[], _T]) -> _T:
    """The state the batches of job ``token`` share in this process, built by the first of them
    to run here: a job compiles its models once per Ray worker process, as an actor would.

    The jobs run as Ray tasks rather than on an actor pool: Ray Data hands an actor pool its
    transform through the object store, and Ray then logs an error-level line for an actor that
    may restart (ray-project/ray#53727); tasks are retried with the same guarantees.
    A process keeps the latest job's state only.

    Example:
        >>> cal = per_process(token, lambda: Calibrator(model))    # doctest: +SKIP
    """
    state = _STATE.get(token)
    if state is None:
        _STATE.clear()
        state = _STATE[token] = build()
    return state


def portable(model: ModelSource) -> str | bytes:
    """The model as workers receive it: a path (read by every worker: it must be visible on
    every node) or the ONNX bytes. Engine objects never travel."""
    if isinstance(model, Model):
        return model.to_bytes()
    if isinstance(model, bytes | bytearray):
        return bytes(model)
    return os.fspath(model)


def loaded(model: ModelSource) -> Model:
    return model if isinstance(model, Model) else load(model)


def specs(model: Model) -> list[InputSpec]:
    return [InputSpec(i.name, np.dtype(i.dtype), i.shape) for i in model.inputs]


def columns(dataset: Any) -> list[str]:
    schema = dataset.schema()
    if schema is None:
        raise _core.ArgumentError("the dataset is empty: it has no rows and no schema")
    return list(schema.names)


def check_columns(dataset: Any, wanted: Sequence[InputSpec], extra: Sequence[str] = (), what: str = "model") -> None:
    """ArgumentError, before any worker starts, when a model input or an ``extra`` column
    (labels) is not a column of the dataset."""
    have = columns(dataset)
    missing = [s.name for s in wanted if s.name not in have] + [c for c in extra if c not in have]
    if missing:
        raise _core.ArgumentError(
            f"the dataset has no column {missing[0]!r}: its columns are {have}, the {what}'s inputs are "
            f"{[s.name for s in wanted]}" + (f" and the labels column is {list(extra)[0]!r}" if extra else "")
            + "; rename columns with dataset.rename_columns({...})")


def head(dataset: Any, rows: int) -> dict[str, np.ndarray]:
    """The first ``rows`` rows of the dataset as numpy columns."""
    return dict(dataset.take_batch(rows, batch_format="numpy"))


def feeds_of(batch: dict[str, Any], wanted: Sequence[InputSpec], where: str = "") -> Feeds:
    """A batch's model inputs, checked against the model (names, dtypes, shapes)."""
    feeds = {s.name: np.ascontiguousarray(batch[s.name]) for s in wanted}
    check_feeds(feeds, list(wanted), where)
    return feeds


def rows_of(batch: dict[str, Any]) -> int:
    return len(next(iter(batch.values()))) if batch else 0


@contextlib.contextmanager
def dataset_order() -> Iterator[None]:
    """Ray Data hands the outputs of map_batches on in the order of the input rows, so that the
    driver knows where each batch lies in the dataset (a NaN's row, the worst element's row)."""
    import ray.data

    ctx = ray.data.DataContext.get_current()
    before = ctx.execution_options.preserve_order
    ctx.execution_options.preserve_order = True
    try:
        yield
    finally:
        ctx.execution_options.preserve_order = before


def fail_once(marker: str | None) -> None:
    """Kills the worker's process the first time it is called (a file marks that it was):
    lets the tests see Ray retry a batch whose process died."""
    if marker and not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write("failed once\n")
        os._exit(1)
