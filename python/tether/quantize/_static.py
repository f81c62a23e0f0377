"""tether.quantize.static: calibrate from numpy batches, write the QDQ model, measure and repair."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tether import _core
from tether._model import Model, load
from tether.parity._compare import compare
from tether.parity._inputs import Feeds, iter_feeds
from tether.parity._metrics import Tolerance
from tether.parity._runners import OnnxRuntimeRunner, TetherRunner
from tether.quantize._calibrator import Calibrator, _progress, _specs, iter_batches
from tether.quantize._evaluate import Budget, Evaluator, LayerSensitivity, Score, sensitivity, smallest_float_set
from tether.quantize._plan import exclusions, plan
from tether.quantize._result import QuantizeResult, QuantParams
from tether.quantize._summary import QuantizationSummary, TensorSummary

#: The method each profile calibrates with unless told otherwise: onnxruntime's quantize_static
#: defaults to MinMax, TensorRT's IInt8EntropyCalibrator2 and ncnn2table to entropy (KL).
DEFAULT_METHODS = {"onnxruntime": "minmax", "tensorrt": "entropy", "ncnn": "entropy"}


def _overrides(per_channel: bool | None, activation_type: str | None, weight_type: str | None,
               symmetric_activations: bool | None, symmetric_weights: bool | None, reduce_range: bool | None,
               op_types: Sequence[str] | None, exclude_nodes: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"exclude_nodes": list(exclude_nodes)}
    acts: dict[str, Any] = {}
    weights: dict[str, Any] = {}
    if activation_type is not None:
        acts["dtype"] = activation_type
    if symmetric_activations is not None:
        acts["symmetric"] = symmetric_activations
    if weight_type is not None:
        weights["dtype"] = weight_type
    if symmetric_weights is not None:
        weights["symmetric"] = symmetric_weights
    if reduce_range is not None:
        acts["reduce_range"] = weights["reduce_range"] = reduce_range
    if acts:
        out["activations"] = acts
    if weights:
        out["weights"] = weights
    if per_channel is not None:
        out["per_channel"] = per_channel
    if op_types is not None:
        out["op_types"] = list(op_types)
    return out


def _take(feeds: Feeds, rows: int) -> Feeds:
    return {k: np.array(v[:rows]) if np.ndim(v) else np.array(v) for k, v in feeds.items()}


def _rows(feeds: Feeds) -> int:
    return max((int(np.shape(v)[0]) for v in feeds.values() if np.ndim(v)), default=1)


def _tensor_summaries(cal: Calibrator, ranges: Mapping[str, tuple[float, float, str]],
                      activations: Mapping[str, QuantParams]) -> list[TensorSummary]:
    stats = cal.stats()
    out = []
    for t in cal.plan.tensors:
        s = stats[t.same_values_as or t.name]
        lo, hi, method = ranges[t.name]
        q = activations.get(t.name)
        channels = [] if t.same_values_as else list(s.channel_absmax)  # the source's channels lie elsewhere
        out.append(TensorSummary(
            t.name, lo, hi, method, None if q is None else float(q.scale[0]),
            None if q is None else int(q.zero_point[0]), float(_core.quant_clipped_fraction(s, (lo, hi))),
            len(channels), sum(1 for c in channels if c == 0), s.count > 0 and s.min == s.max, t.group))
    return out


class _Quantizer:
    """One float model, its calibration and plan; QDQ variants of it with nodes kept in float."""

    def __init__(self, cal: Calibrator, ranges: dict[str, tuple[float, float, str]]) -> None:
        self.cal = cal
        self.ranges = ranges
        self._cache: dict[tuple[str, ...], tuple[Model, dict[str, Any], dict[str, Any], list[str], Any]] = {}

    def build(self, float_nodes: Sequence[str] = ()) -> tuple[Model, dict[str, Any], dict[str, Any], list[str], Any]:
        key = tuple(sorted(float_nodes))
        if key not in self._cache:
            options = exclusions(self.cal.options, key)
            try:
                p = plan(self.cal.model, options) if key else self.cal.plan
            except _core.ModelError:  # every node that could be quantized is kept in float
                self._cache[key] = (self.cal.model, {}, {}, [], None)
                return self._cache[key]
            m, acts, weights, notes = _core.quant_quantize_qdq(self.cal.model._core, p, self.ranges, options)
            self._cache[key] = (Model(m), dict(acts), dict(weights), list(notes), p)
        return self._cache[key]

    def only(self, node: str) -> Model:
        sub = _core.quant_restrict_plan(self.cal.plan, [node])
        m, _, _, _ = _core.quant_quantize_qdq(self.cal.model._core, sub, self.ranges, self.cal.options)
        return Model(m)


def static(model: Model | str | os.PathLike[str] | bytes, batches: Any, *, method: str | None = None,
           percentile: float = 99.999, profile: str = "onnxruntime", per_channel: bool | None = None,
           activation_type: str | None = None, weight_type: str | None = None,
           symmetric_activations: bool | None = None, symmetric_weights: bool | None = None,
           reduce_range: bool | None = None, op_types: Sequence[str] | None = None, exclude_nodes: Sequence[str] = (),
           bins: int = 2048, threads: int | None = None, batch_size: int | None = None, skip_nonfinite: bool = False,
           labels: Sequence[Any] | np.ndarray | None = None, label_output: str | None = None,
           max_accuracy_drop: float | None = None, min_sqnr_db: float | None = None,
           tolerance: Tolerance | str | None = None, eval_data: Any = None, eval_samples: int = 128,
           runner: str = "tether", sensitivity_analysis: bool | None = None,
           progress: bool | None = None) -> QuantizeResult:
    """Quantizes a float model to INT8 QDQ from numpy calibration batches, in one call.

    The model (a :class:`tether.Model` or a path; the file is only read) is prepared
    (BatchNormalization folded, nodes named), planned for ``profile`` (``"onnxruntime"``,
    ``"tensorrt"``, ``"ncnn"``: see :func:`profile_options`; the keyword options override it),
    and calibrated on tether's CPU engine from ``batches``: an iterable of batches (dicts by
    input name, arrays for a single-input model), a generator (read once, never materialised),
    or one array / dict holding every sample, cut into ``batch_size`` rows (default: the batch
    size the model fixes, else 32). ``method``
    (``"minmax"``, ``"percentile"``, ``"entropy"``, ``"mse"``, ``"sqnr"``; by default the
    profile's) chooses every range from the same statistics.

    The quantized model is then compared with the float one on the evaluation samples
    (``eval_data``, else the first ``eval_samples`` of the calibration stream; ``labels`` are
    theirs, one per sample) by ``runner`` (``"tether"`` or ``"onnxruntime"``). With a budget
    (``max_accuracy_drop`` with labels, ``min_sqnr_db`` on every output, or a parity
    ``tolerance``) the most sensitive nodes are kept in float until it holds; when even the
    all-float model misses it, the float model is returned and the report says so.

    Example:
        >>> res = tt.quantize.static("cnn.onnx", x_calib, method="entropy", labels=y_calib,
        ...                          max_accuracy_drop=0.005)        # doctest: +SKIP
        >>> res.save("cnn.int8.onnx"); res.report.to_html("int8.html")   # doctest: +SKIP
    """
    source = model if isinstance(model, Model) else load(model)
    budget = Budget(max_accuracy_drop, min_sqnr_db,
                    Tolerance.profile(tolerance) if isinstance(tolerance, str) else tolerance)
    if max_accuracy_drop is not None and labels is None:
        raise _core.ArgumentError("max_accuracy_drop needs labels: pass labels=... (one per evaluation sample)")
    if budget.given and eval_samples <= 0 and eval_data is None:
        raise _core.ArgumentError("a budget needs evaluation samples: eval_samples must be > 0, or give eval_data")
    cal = Calibrator(source, profile=profile, bins=bins, threads=threads, skip_nonfinite=skip_nonfinite,
                     options=_overrides(per_channel, activation_type, weight_type, symmetric_activations,
                                        symmetric_weights, reduce_range, op_types, exclude_nodes))
    method = method or DEFAULT_METHODS.get(profile, "minmax")

    # Calibrate, keeping the first samples for evaluation when no evaluation set is given.
    kept: list[Feeds] = []
    want = eval_samples if eval_data is None else 0
    for feeds in _progress(iter_batches(batches, cal.model, batch_size), progress, "calibrating"):
        cal._core.observe(dict(feeds))
        have = sum(_rows(f) for f in kept)
        if have < want:
            kept.append(_take(feeds, want - have))
    if cal.batches == 0:
        raise _core.ArgumentError("no calibration data: the iterable of batches was empty")
    eval_feeds = kept if eval_data is None else list(iter_feeds(eval_data, _specs(cal.model)))
    eval_labels = None
    if labels is not None:
        eval_labels = np.asarray(labels).ravel()
        n_eval = sum(_rows(f) for f in eval_feeds)
        if eval_data is None:
            if eval_labels.size < n_eval:
                raise _core.ArgumentError(f"{eval_labels.size} labels were given for the {n_eval} evaluation samples "
                                          "taken from the calibration stream")
            eval_labels = eval_labels[:n_eval]

    return _finish(cal, method, eval_feeds, percentile=percentile, exclude_nodes=exclude_nodes, labels=eval_labels,
                   label_output=label_output, budget=budget, runner=runner, threads=threads,
                   sensitivity_analysis=sensitivity_analysis)


def _finish(cal: Calibrator, method: str, eval_feeds: list[Feeds], *, percentile: float = 99.999,
           exclude_nodes: Sequence[str] = (), labels: np.ndarray | None = None, label_output: str | None = None,
           budget: Budget | None = None, runner: str = "tether", threads: int | None = None,
           sensitivity_analysis: bool | None = None) -> QuantizeResult:
    """The part of :func:`static` after calibration: ranges by ``method`` from the statistics
    of ``cal`` (observed here, or merged from other processes' states), the QDQ model, its
    evaluation on ``eval_feeds`` (with ``labels``, one per evaluation sample), the budget's
    repair and the report. Given the same statistics and evaluation batches it returns what
    :func:`static` returns.

    Example:
        >>> cal = Calibrator("cnn.onnx"); cal.merge(shard_states)          # doctest: +SKIP
        >>> res = _finish(cal, "entropy", [{"x": x[:128]}])                  # doctest: +SKIP
    """
    budget = budget or Budget(None, None, None)
    eval_labels = labels
    ranges = cal.compute(method, percentile=percentile)
    q = _Quantizer(cal, ranges)
    float_nodes: dict[str, str] = {n: "excluded by the caller" for n in exclude_nodes}
    notes = list(cal.plan.notes)
    chosen: tuple[str, ...] = ()
    layers: list[LayerSensitivity] | None = None
    budget_met: bool | None = None
    final_model: Model | None = None
    evaluator = None
    score: Score | None = None
    if eval_feeds:
        evaluator = Evaluator(cal.model, eval_feeds, labels=eval_labels, label_output=label_output, runner=runner,
                              threads=threads, tolerance=budget.tolerance)
        planned = [(p.node, p.op_type) for p in cal.plan.nodes]
        verdicts: dict[tuple[str, ...], bool] = {}

        def meets(nodes: Sequence[str]) -> bool:
            key = tuple(sorted(nodes))
            if key not in verdicts:
                assert evaluator is not None
                verdicts[key] = budget.met(evaluator.score(q.build(nodes)[0]), evaluator.float_accuracy)
            return verdicts[key]

        if sensitivity_analysis or (budget.given and not meets(())):
            layers = sensitivity(evaluator, planned, q.only)
        if budget.given:
            order = [la.node for la in layers] if layers else []
            k = smallest_float_set(order, lambda k: meets(order[:k]))
            if k is None:
                budget_met = False
                final_model = cal.model
                notes.append(f"the budget ({budget.describe()}) is not met even with every node in float: "
                             "the float model is returned")
            else:
                budget_met = True
                chosen = tuple(order[:k])
                rank = {la.node: (i, la) for i, la in enumerate(layers or [])}
                for node in chosen:
                    i, la = rank[node]
                    float_nodes[node] = (f"sensitivity rank {i + 1} of {len(order)} (SQNR {la.sqnr_db:.1f} dB with "
                                         f"only this node quantized); kept in float to meet {budget.describe()}")
    qmodel, acts, weights, qnotes, final_plan = q.build(chosen)
    notes.extend(qnotes)
    if final_model is None:
        final_model = qmodel
    else:  # the float model is returned: nothing is quantized
        final_plan, acts, weights = None, {}, {}
    if evaluator is not None:
        score = evaluator.score(final_model)
    activations = {k: QuantParams._from_core(v) for k, v in acts.items()}
    scales = {**activations, **{k: QuantParams._from_core(v) for k, v in weights.items()}}

    summary = QuantizationSummary(
        str(cal.options.get("profile", "onnxruntime")), method, cal.samples, cal.batches, cal.skipped,
        _tensor_summaries(cal, ranges, activations),
        float_nodes, layers, budget.describe() if budget.given else None, budget_met,
        None if evaluator is None else evaluator.float_accuracy, None if score is None else score.accuracy,
        sum(_rows(f) for f in eval_feeds), runner, notes)
    report = None
    if eval_feeds:
        # tether runs the QDQ model with its weights dequantized once (the same values).
        folded = Model(_core.quant_fold_dequantized_constants(final_model._core))
        cand: Any = (OnnxRuntimeRunner(final_model, "int8 (onnxruntime)", threads=threads) if runner == "onnxruntime"
                     else TetherRunner(folded, "int8 (tether)", threads=threads))
        report = compare(TetherRunner(cal.model, "float (tether)", threads=threads), cand, eval_feeds,
                         tolerance=budget.tolerance or "int8", layerwise=True, labels=eval_labels,
                         label_output=label_output)
        report.quantization = summary
    return QuantizeResult(final_model, cal.model, report, summary, ranges, scales, float_nodes, layers, final_plan)
