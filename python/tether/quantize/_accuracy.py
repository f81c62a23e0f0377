"""Accuracy control on the user's own metric (as NNCF's quantize_with_accuracy_control): the
INT8 model may lose at most ``max_drop`` of what ``validation_fn(runner)`` measures on the float
model; when it loses more, nodes return to float in order of sensitivity until it holds."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tether._native import core as _core


@dataclass
class AccuracyControlResult:
    """What the search on the user's metric found (``res.accuracy_control``).

    ``float_metric``: ``validation_fn`` on the float model; ``int8_metric``: on the model with
    every planned node quantized; ``final_metric``: on the returned model; ``max_drop`` and
    ``higher_is_better`` as given; ``float_nodes``: the nodes returned to float for the metric,
    most sensitive first; ``evaluations``: how many times ``validation_fn`` ran; ``trials``: each
    evaluation as (nodes kept in float, metric), in the order run; ``met``: whether the returned
    model is quantized and loses at most ``max_drop``. When only the float model meets the
    budget, ``met`` is False and the float model is returned (``res.quantized`` is False).

    Example:
        >>> res.accuracy_control.float_nodes, res.accuracy_control.final_metric   # doctest: +SKIP
        (['fc2'], 0.962)
    """

    float_metric: float
    int8_metric: float | None
    final_metric: float | None
    max_drop: float
    higher_is_better: bool
    float_nodes: list[str]
    evaluations: int
    trials: list[tuple[int, float]] = field(default_factory=list)
    met: bool = False

    def drop(self, metric: float | None) -> float | None:
        """How much ``metric`` loses against the float model (positive: worse)."""
        if metric is None:
            return None
        return self.float_metric - metric if self.higher_is_better else metric - self.float_metric

    def describe(self) -> str:
        """One line: the metric on the float, all-INT8 and returned models, and the nodes in float.

        Example:
            >>> res.accuracy_control.describe()                                  # doctest: +SKIP
            'float 0.9625, all INT8 0.5625, returned 0.96 (max drop 0.01), 1 nodes in float: fc1'
        """
        def text(v: float | None) -> str:
            return "not evaluated" if v is None else f"{v:.6g}"

        listed = ", ".join(self.float_nodes[:10]) + (", ..." if len(self.float_nodes) > 10 else "")
        return (f"float {text(self.float_metric)}, all INT8 {text(self.int8_metric)}, returned "
                f"{text(self.final_metric)} (max drop {self.max_drop:g}), {len(self.float_nodes)} nodes in float"
                + (f": {listed}" if listed else ""))

    def __repr__(self) -> str:
        return (f"<AccuracyControlResult: {'met' if self.met else 'NOT MET'}, {self.describe()}, "
                f"{self.evaluations} evaluations>")


def _fn_name(fn: Any) -> str:
    return str(getattr(fn, "__name__", None) or type(fn).__name__)


class AccuracyControl:
    """Evaluates ``validation_fn`` on runners of candidate models and judges the drop.

    Example:
        >>> c = AccuracyControl.make(lambda r: acc(r), 0.01, True, False)        # doctest: +SKIP
        >>> c.start(float_runner); c.met(qdq_runner, 0)                          # doctest: +SKIP
    """

    def __init__(self, fn: Callable[[Any], float], max_drop: float, higher_is_better: bool,
                 progress: bool | None) -> None:
        self.fn = fn
        self.max_drop = max_drop
        self.higher_is_better = higher_is_better
        self.name = _fn_name(fn)
        self.float_metric: float | None = None
        self.trials: list[tuple[int, float]] = []
        self.evaluations = 0
        self._bar: Any = None
        self._progress = sys.stderr.isatty() if progress is None else bool(progress)

    @staticmethod
    def make(fn: Callable[[Any], float] | None, max_drop: float | None, higher_is_better: bool,
             progress: bool | None) -> AccuracyControl | None:
        """The control for :func:`tether.quantize.static`'s arguments, checked (None without
        ``validation_fn``)."""
        if fn is None:
            if max_drop is not None:
                raise _core.ArgumentError("max_drop needs validation_fn: a function (runner) -> float measuring "
                                          "the metric (or use max_accuracy_drop with labels)")
            return None
        if not callable(fn):
            raise _core.ArgumentError(f"validation_fn must be callable (runner) -> float, got {type(fn).__name__}")
        if max_drop is None:
            raise _core.ArgumentError("validation_fn needs max_drop: the largest loss of the metric allowed")
        if isinstance(max_drop, bool) or not isinstance(max_drop, int | float) or not math.isfinite(max_drop) \
                or max_drop < 0:
            raise _core.ArgumentError(f"max_drop must be a finite number >= 0, got {max_drop!r}")
        if not isinstance(higher_is_better, bool):
            raise _core.ArgumentError(f"higher_is_better must be a bool, got {higher_is_better!r}")
        return AccuracyControl(fn, float(max_drop), higher_is_better, progress)

    def describe(self) -> str:
        way = "higher is better" if self.higher_is_better else "lower is better"
        return f"{self.name} drop <= {self.max_drop:g} ({way})"

    def evaluate(self, runner: Any, what: str) -> float:
        """``validation_fn(runner)`` as a float; a raise or a non-number is an ArgumentError
        naming the function and the model it was given."""
        if self._progress and self._bar is None:
            try:
                from tqdm.auto import tqdm

                self._bar = tqdm(desc="accuracy control", unit="eval")
            except ImportError:
                self._progress = False
        try:
            value = self.fn(runner)
        except Exception as e:
            self.close()
            raise _core.ArgumentError(f"validation_fn '{self.name}' raised {type(e).__name__} on {what}: {e}") from e
        self.evaluations += 1
        if self._bar is not None:
            self._bar.update(1)
        if isinstance(value, np.ndarray) and value.size == 1:
            value = value.reshape(()).item()
        if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
            self.close()
            raise _core.ArgumentError(f"validation_fn '{self.name}' returned {value!r} ({type(value).__name__}) on "
                                      f"{what}: expected a number")
        f = float(value)
        if not math.isfinite(f):
            self.close()
            raise _core.ArgumentError(f"validation_fn '{self.name}' returned {f!r} on {what}: expected a finite number")
        return f

    def start(self, float_runner: Any) -> float:
        self.float_metric = self.evaluate(float_runner, "the float model")
        return self.float_metric

    def drop(self, metric: float) -> float:
        assert self.float_metric is not None
        return self.float_metric - metric if self.higher_is_better else metric - self.float_metric

    def met(self, runner: Any, kept_float: int) -> bool:
        """Whether the model ``runner`` runs (with ``kept_float`` nodes in float) keeps the budget."""
        metric = self.evaluate(runner, f"the INT8 model with {kept_float} nodes in float")
        self.trials.append((kept_float, metric))
        if self._bar is not None:
            self._bar.set_postfix(float_nodes=kept_float, metric=f"{metric:.4g}")
        return self.drop(metric) <= self.max_drop + 1e-12

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def result(self, float_nodes: list[str], quantized: bool) -> AccuracyControlResult:
        """The search's outcome: ``float_nodes`` kept in float for the budget, ``quantized``
        whether the returned model holds anything quantized."""
        assert self.float_metric is not None
        self.close()
        by_k = dict(self.trials)
        int8 = by_k.get(0)
        # The float model returned: the metric is the float model's, whichever search step got there.
        final_metric = by_k.get(len(float_nodes)) if quantized else self.float_metric
        met = quantized and final_metric is not None and self.drop(final_metric) <= self.max_drop + 1e-12
        return AccuracyControlResult(self.float_metric, int8, final_metric, self.max_drop, self.higher_is_better,
                                     list(float_nodes), self.evaluations, list(self.trials), met)
