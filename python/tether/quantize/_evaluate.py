"""Accuracy of a quantized model against its float model: scores, budgets, layer sensitivity."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tether._model import Model
from tether._native import core as _core
from tether._session import compile
from tether.parity._inputs import Feeds
from tether.parity._metrics import Tolerance, compare_arrays

RUNNERS = ("tether", "onnxruntime")


@dataclass
class Score:
    """How a quantized model's outputs compare with the float model's on the evaluation samples."""

    sqnr_db: dict[str, float]          # per output: 10 log10(sum r^2 / sum (c - r)^2) over every sample
    agreement: float | None            # share of samples whose top-1 class agrees (classifier output)
    accuracy: float | None             # top-1 accuracy against the labels, when given
    within_tolerance: bool | None      # every element within the budget's tolerance, when given

    @property
    def min_sqnr_db(self) -> float:
        return min(self.sqnr_db.values()) if self.sqnr_db else math.inf


@dataclass
class Budget:
    """What a quantized model must keep: at most ``max_accuracy_drop`` of top-1 accuracy (with
    labels), at least ``min_sqnr_db`` on every output, every element within ``tolerance``."""

    max_accuracy_drop: float | None = None
    min_sqnr_db: float | None = None
    tolerance: Tolerance | None = None

    @property
    def given(self) -> bool:
        return self.max_accuracy_drop is not None or self.min_sqnr_db is not None or self.tolerance is not None

    def describe(self) -> str:
        parts = []
        if self.max_accuracy_drop is not None:
            parts.append(f"top-1 accuracy drop <= {self.max_accuracy_drop:g}")
        if self.min_sqnr_db is not None:
            parts.append(f"SQNR >= {self.min_sqnr_db:g} dB on every output")
        if self.tolerance is not None:
            parts.append(f"every element within atol={self.tolerance.atol:g} rtol={self.tolerance.rtol:g}")
        return ", ".join(parts)

    def met(self, score: Score, float_accuracy: float | None) -> bool:
        if self.max_accuracy_drop is not None:
            assert score.accuracy is not None and float_accuracy is not None
            if float_accuracy - score.accuracy > self.max_accuracy_drop + 1e-12:
                return False
        if self.min_sqnr_db is not None and score.min_sqnr_db < self.min_sqnr_db:
            return False
        return not (self.tolerance is not None and not score.within_tolerance)


def _ort_session(model: Model, threads: int | None) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads = int(threads)
    return ort.InferenceSession(model.to_bytes(), so, providers=["CPUExecutionProvider"])


class Evaluator:
    """Runs quantized variants of one float model on fixed samples and scores them against the
    float model's outputs (computed once, by tether)."""

    def __init__(self, float_model: Model, feeds: Sequence[Feeds], *, labels: np.ndarray | None = None,
                 label_output: str | None = None, runner: str = "tether", threads: int | None = None,
                 tolerance: Tolerance | None = None) -> None:
        if runner not in RUNNERS:
            raise _core.ArgumentError(f"unknown runner '{runner}'; runners: {list(RUNNERS)}")
        self.feeds = list(feeds)
        self.runner = runner
        self.threads = threads
        self.tolerance = tolerance
        sess = compile(float_model, threads=threads)
        self.reference = [sess.run(f) for f in self.feeds]
        names = list(self.reference[0]) if self.reference else []
        if label_output is not None and label_output not in names:
            raise _core.ArgumentError(f"label_output '{label_output}' is not an output; outputs: {names}")
        self.label_output = label_output or (names[0] if names else None)
        self.labels = None if labels is None else np.asarray(labels).ravel()
        samples = sum(int(np.shape(r[self.label_output])[0]) for r in self.reference) if self.label_output else 0
        if self.labels is not None and self.labels.size != samples:
            raise _core.ArgumentError(f"{self.labels.size} labels were given for {samples} evaluation samples")
        self.float_accuracy = self._accuracy(self.reference)

    def _top1(self, outputs: list[dict[str, np.ndarray]]) -> np.ndarray:
        assert self.label_output is not None
        return np.concatenate([np.argmax(o[self.label_output], axis=-1).ravel() for o in outputs])

    def _accuracy(self, outputs: list[dict[str, np.ndarray]]) -> float | None:
        if self.labels is None or not outputs:
            return None
        return float(np.mean(self._top1(outputs) == self.labels))

    def run(self, qdq: Model) -> list[dict[str, np.ndarray]]:
        """The quantized model's outputs on every evaluation batch."""
        if self.runner == "onnxruntime":
            sess = _ort_session(qdq, self.threads)
            names = [o.name for o in sess.get_outputs()]
            return [dict(zip(names, sess.run(None, f), strict=True)) for f in self.feeds]
        folded = Model(_core.quant_fold_dequantized_constants(qdq._core))
        tsess = compile(folded, threads=self.threads)
        return [tsess.run(f) for f in self.feeds]

    def score(self, qdq: Model) -> Score:
        outputs = self.run(qdq)
        sqnr: dict[str, float] = {}
        for name in self.reference[0] if self.reference else []:
            signal = sum(float(np.sum(np.square(r[name].astype(np.float64)))) for r in self.reference)
            noise = sum(float(np.sum(np.square(c[name].astype(np.float64) - r[name].astype(np.float64))))
                        for r, c in zip(self.reference, outputs, strict=True))
            sqnr[name] = math.inf if noise == 0 else (-math.inf if signal == 0 else 10 * math.log10(signal / noise))
        agreement = None
        if self.label_output is not None and self.reference:
            agreement = float(np.mean(self._top1(self.reference) == self._top1(outputs)))
        within = None
        if self.tolerance is not None:
            within = all(compare_arrays(r[n], c[n], self.tolerance).ok
                         for r, c in zip(self.reference, outputs, strict=True) for n in r)
        return Score(sqnr, agreement, self._accuracy(outputs), within)


@dataclass
class LayerSensitivity:
    """The error one quantized node adds on its own (every other node in float)."""

    node: str
    op_type: str
    sqnr_db: float                 # the lowest output SQNR with only this node quantized
    accuracy_drop: float | None    # float accuracy minus accuracy, with labels
    agreement: float | None        # top-1 agreement with the float model

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "op_type": self.op_type, "sqnr_db": self.sqnr_db,
                "accuracy_drop": self.accuracy_drop, "agreement": self.agreement}


def sensitivity(evaluator: Evaluator, nodes: Sequence[tuple[str, str]],
                quantize_only: Callable[[str], Model]) -> list[LayerSensitivity]:
    """Every node's sensitivity, most sensitive (lowest SQNR, then largest accuracy drop) first."""
    out = []
    for node, op in nodes:
        s = evaluator.score(quantize_only(node))
        drop = None if s.accuracy is None or evaluator.float_accuracy is None else evaluator.float_accuracy - s.accuracy
        out.append(LayerSensitivity(node, op, s.min_sqnr_db, drop, s.agreement))
    out.sort(key=lambda la: (la.sqnr_db, -(la.accuracy_drop or 0.0)))
    return out


def smallest_float_set(order: Sequence[str], meets: Callable[[int], bool]) -> int | None:
    """The smallest k such that keeping the first k nodes of ``order`` in float meets the budget,
    found by doubling then bisecting (k = 0 is tried first); None when even all of them fail."""
    if meets(0):
        return 0
    lo, step = 0, 1  # lo: the largest k known to fail
    while True:
        k = min(step, len(order))
        if meets(k):
            hi = k
            break
        lo = k
        if k == len(order):
            return None
        step *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if meets(mid):
            hi = mid
        else:
            lo = mid
    return hi
