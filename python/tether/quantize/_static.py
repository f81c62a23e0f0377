"""tether.quantize.static: calibrate from numpy batches, write the QDQ model, measure and repair."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from tether._model import Model, load
from tether._native import core as _core
from tether._session import compile as _compile
from tether.parity._compare import compare
from tether.parity._inputs import Feeds, iter_feeds
from tether.parity._metrics import Tolerance
from tether.parity._runners import OnnxRuntimeRunner, TetherRunner
from tether.quantize._accuracy import AccuracyControl
from tether.quantize._adaround import AdaRound, AdaRounder, apply_rounding, split_algorithms
from tether.quantize._bias_correction import BiasCorrector, add_zero_biases
from tether.quantize._calibrator import Calibrator, _progress, _specs, iter_batches
from tether.quantize._equalize import check_algorithms, cross_layer_equalization, with_initializers
from tether.quantize._evaluate import Budget, Evaluator, LayerSensitivity, Score, sensitivity, smallest_float_set
from tether.quantize._plan import exclusions, plan, prepare
from tether.quantize._result import QuantizeResult, QuantParams
from tether.quantize._smooth_quant import check_alpha, smooth_quant
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


#: The method recorded for a range given without one.
GIVEN_METHOD = "given"
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _bound(name: str, which: str, v: Any) -> float:
    """A range bound as a float: a real number (not a bool) that float32 holds as a finite value."""
    if isinstance(v, bool | np.bool_) or not isinstance(v, int | float | np.integer | np.floating):
        raise _core.ArgumentError(f"ranges['{name}']: {which} {v!r} is not a number")
    f = float(v)
    if not math.isfinite(f) or abs(f) > _FLOAT32_MAX:
        raise _core.ArgumentError(f"ranges['{name}']: {which} {f!r} is not a finite float32 number")
    return f


def _one_range(name: Any, value: Any) -> tuple[float, float, str]:
    if not isinstance(name, str):
        raise _core.ArgumentError(f"ranges: the key {name!r} is not a tensor name (a str)")
    if isinstance(value, np.ndarray):
        value = value.tolist() if value.ndim == 1 else value
    if not isinstance(value, tuple | list) or len(value) not in (2, 3):
        raise _core.ArgumentError(f"ranges['{name}'] is {value!r}: expected (lo, hi) or (lo, hi, method)")
    if len(value) == 3 and not isinstance(value[2], str):
        raise _core.ArgumentError(f"ranges['{name}']: the third item {value[2]!r} is not a method name (a str)")
    lo, hi = _bound(name, "lo", value[0]), _bound(name, "hi", value[1])
    if lo > hi:
        raise _core.ArgumentError(f"ranges['{name}'] = ({lo!r}, {hi!r}): lo is greater than hi")
    return lo, hi, value[2] if len(value) == 3 else GIVEN_METHOD


def _given_ranges(ranges: Mapping[str, Sequence[Any]], cal: Calibrator, source: Model
                  ) -> tuple[dict[str, tuple[float, float, str]], list[str]]:
    """Checked ranges for the planned tensors of ``cal``, each group taking the union of the
    ranges given for its members, and notes on names the plan does not quantize."""
    if not isinstance(ranges, Mapping):
        raise _core.ArgumentError(f"ranges must map tensor names to (lo, hi) pairs, got {type(ranges).__name__}")
    checked = {name: _one_range(name, value) for name, value in ranges.items()}
    planned = {t.name: t.group for t in cal.plan.tensors}
    weights = set(cal.model.initializer_names) | set(source.initializer_names)
    known = set(cal.model.value_types()) | set(source.value_types()) | {v.name for v in source.inputs}
    unknown = sorted(n for n in checked if n not in planned and (n not in known or n in weights))
    if unknown:
        what = [f"'{n}' ({'a weight: weights are quantized from their values' if n in weights else 'no such value'})"
                for n in unknown[:10]]
        more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
        raise _core.ArgumentError(f"ranges: names that are not activations of the model ({len(unknown)}): "
                                  f"{', '.join(what)}{more}")
    notes = []
    ignored = sorted(n for n in checked if n not in planned)
    if ignored:
        notes.append(f"ranges given for {len(ignored)} tensors the plan does not quantize were not used: "
                     f"{ignored[:10]}")
    by_group: dict[int, list[str]] = {}
    for name in checked:
        if name in planned:
            by_group.setdefault(planned[name], []).append(name)
    out: dict[str, tuple[float, float, str]] = {}
    for group, names in by_group.items():
        lo, hi = min(checked[n][0] for n in names), max(checked[n][1] for n in names)
        methods = sorted({checked[n][2] for n in names})
        if len({checked[n][:2] for n in names}) > 1:
            notes.append(f"ranges given for {names}, which share quantization parameters, differ: they share "
                         f"their union [{lo}, {hi}]")
        for t, g in planned.items():
            if g == group:
                out[t] = (lo, hi, methods[0] if len(methods) == 1 else GIVEN_METHOD)
    return out, notes


class _Quantizer:
    """One float model, its calibration and plan; QDQ variants of it with nodes kept in float."""

    def __init__(self, cal: Calibrator, ranges: dict[str, tuple[float, float, str]], model: Model | None = None,
                 originals: Mapping[str, tuple[str, np.ndarray]] | None = None,
                 rounding: Mapping[str, np.ndarray] | None = None) -> None:
        self.cal = cal
        # Integer weights learned by AdaRound, by initializer name; the scales are the plan's.
        self.rounding = dict(rounding or {})
        self.ranges = ranges
        # The model quantized: ``cal.model`` or its bias-corrected copy, whose nodes kept in
        # float get their ``originals`` (bias name, value) back.
        self.model = model or cal.model
        self.originals = dict(originals or {})
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
            m, acts, weights, notes = _core.quant_quantize_qdq(self._source(key)._core, p, self.ranges, options)
            self._cache[key] = (apply_rounding(Model(m), self.rounding), dict(acts), dict(weights), list(notes), p)
        return self._cache[key]

    def _source(self, float_nodes: Sequence[str]) -> Model:
        back = {b: v for n, (b, v) in self.originals.items() if n in float_nodes}
        return with_initializers(self.model, back) if back else self.model

    def only(self, node: str) -> Model:
        sub = _core.quant_restrict_plan(self.cal.plan, [node])
        source = self._source([n for n in self.originals if n != node])
        m, _, _, _ = _core.quant_quantize_qdq(source._core, sub, self.ranges, self.cal.options)
        return apply_rounding(Model(m), self.rounding)


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
           progress: bool | None = None, ranges: Mapping[str, Sequence[Any]] | None = None,
           algorithms: Sequence[str | AdaRound] | str = (),
           smooth_quant_alpha: float | Sequence[float] | str = 0.5, adaround: AdaRound | None = None,
           validation_fn: Callable[[Any], float] | None = None, max_drop: float | None = None,
           higher_is_better: bool = True) -> QuantizeResult:
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

    ``ranges`` (tensor name -> ``(lo, hi)`` or ``(lo, hi, method)``, the form of
    :attr:`QuantizeResult.ranges` and of :func:`read_tensorrt_cache`) sets the ranges of those
    activations instead of calibration; a tensor that shares parameters with others (a group)
    gives the group its range (the union, when several members are given). Names the model has
    but the plan does not quantize are ignored with a note; any other name, a bound that is not a
    finite float32 number, ``lo > hi`` or a tuple of another length raises ArgumentError. When
    ``ranges`` covers every planned tensor, ``batches`` may be None: nothing is calibrated, and
    the report needs ``eval_data``.

    ``algorithms``: accuracy-recovering rewrites applied before calibration, in order:
    ``"cross_layer_equalization"`` (see :func:`equalize`; ``float_model`` is then the equalized
    float model, which computes the same function); ``"smooth_quant"`` (MatMul/Gemm inputs
    divided by ``s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)`` per channel, weights multiplied
    by it; ``smooth_quant_alpha``: one alpha, a list of them or ``"search"`` for 0.3 to 0.8, the
    best output SQNR on the calibration batches deciding; it reads ``batches`` more than once, so
    they must not be a one-shot iterator); ``"bias_correction"`` (after calibration, each
    quantized Conv/Gemm/MatMul bias loses the mean output shift ``(W_q - W) E[x]`` measured on
    the calibration batches; the report still compares against the uncorrected float model);
    ``"adaround"`` (after calibration, before bias correction: each quantized Conv/Gemm/MatMul
    weight rounded up or down as minimises its output error on the float model's layer inputs,
    scales unchanged; options in ``adaround=`` :class:`AdaRound`, or an ``AdaRound(...)`` in the
    list). An unknown name raises ArgumentError.

    ``validation_fn(runner) -> float`` with ``max_drop``: accuracy control on the caller's own
    metric. It is measured on the float model and on INT8 candidates (``runner.run(feeds)``
    returns the outputs by name); when the INT8 model loses more than ``max_drop`` (``float -
    int8``, or ``int8 - float`` with ``higher_is_better=False``), the most sensitive nodes return
    to float, as for the other budgets, until it holds. ``res.accuracy_control`` says which
    nodes, the metric before and after and how many evaluations ran; when only the float model
    keeps the budget it is returned, with ``met`` False. A function that raises or returns no
    finite number raises ArgumentError naming it.

    Example:
        >>> res = tt.quantize.static("cnn.onnx", x_calib, method="entropy", labels=y_calib,
        ...                          max_accuracy_drop=0.005)        # doctest: +SKIP
        >>> res.save("cnn.int8.onnx"); res.report.to_html("int8.html")   # doctest: +SKIP
        >>> trt = tt.quantize.read_tensorrt_cache("cnn.cache")      # doctest: +SKIP
        >>> res = tt.quantize.static("cnn.onnx", None, ranges=trt, profile="tensorrt",
        ...                          eval_data=x_test)               # doctest: +SKIP
        >>> res = tt.quantize.static("mobilenet.onnx", x_calib, per_channel=False,
        ...                          algorithms=["cross_layer_equalization"])   # doctest: +SKIP
        >>> res = tt.quantize.static("bert.onnx", x_calib, algorithms=["smooth_quant", "bias_correction"],
        ...                          smooth_quant_alpha="search")   # doctest: +SKIP
        >>> res = tt.quantize.static("cnn.onnx", x_calib, algorithms=["adaround"],
        ...                          adaround=tt.quantize.AdaRound(time_budget_s=60))   # doctest: +SKIP
        >>> res = tt.quantize.static("det.onnx", x_calib, validation_fn=lambda r: mean_ap(r, val),
        ...                          max_drop=0.01)                  # doctest: +SKIP
        >>> res.accuracy_control.float_nodes                        # doctest: +SKIP
        ['head.conv3']
    """
    source = original = model if isinstance(model, Model) else load(model)
    pre_notes: list[str] = []
    method = method or DEFAULT_METHODS.get(profile, "minmax")
    rewrites, rounding_options = split_algorithms(algorithms, adaround)
    names = check_algorithms(rewrites)
    control = AccuracyControl.make(validation_fn, max_drop, higher_is_better, progress)
    alphas = check_alpha(smooth_quant_alpha)
    kept_float: list[str] = []  # inserted SmoothQuant Muls
    if batches is None and ("smooth_quant" in names or "bias_correction" in names or rounding_options):
        raise _core.ArgumentError("smooth_quant, bias_correction and adaround need calibration batches; batches is "
                                  "None")
    for name in names:
        if name == "bias_correction":  # applied after calibration; here each Conv/Gemm gets a bias
            source, added = add_zero_biases(prepare(source))
            if added:
                pre_notes.append(f"bias correction: a zero bias added to {len(added)} Conv/Gemm nodes without one")
        if name == "smooth_quant":
            if isinstance(batches, Iterator):
                raise _core.ArgumentError("smooth_quant reads the calibration batches more than once (channel "
                                          "maxima, then calibration): pass a list, an array or a dict of arrays, "
                                          "not a one-shot iterator or generator")
            prepared = prepare(source)

            def quantize_with(m: Model, inserted: list[str]) -> Any:
                c = Calibrator(m, profile=profile, bins=bins, threads=threads, skip_nonfinite=skip_nonfinite,
                               options=_overrides(per_channel, activation_type, weight_type, symmetric_activations,
                                                  symmetric_weights, reduce_range, op_types,
                                                  [*exclude_nodes, *inserted]))
                c.observe_all(batches, batch_size=batch_size)
                qm, _, _, _ = _core.quant_quantize_qdq(c.model._core, c.plan, c.compute(method, percentile=percentile),
                                                       c.options)
                sess = _compile(Model(_core.quant_fold_dequantized_constants(qm)), threads=threads)
                return lambda feeds: list(sess.run(feeds).values())

            def calib_stream(p: Model = prepared) -> Iterator[Feeds]:
                return iter_batches(batches, p, batch_size)

            source, inserted, sq_notes = smooth_quant(prepared, calib_stream, alphas, quantize_with, threads)
            kept_float += inserted
            pre_notes += sq_notes
        if name == "cross_layer_equalization":
            source, sets, eq_notes = cross_layer_equalization(prepare(source))
            chains = ", ".join(" -> ".join(s.nodes) for s in sets[:10]) + (", ..." if len(sets) > 10 else "")
            done = f"{len(sets)} chains equalized ({chains})" if sets else "no Conv -> Conv chain to equalize"
            pre_notes += [f"cross-layer equalization: {done}", *eq_notes]
    budget = Budget(max_accuracy_drop, min_sqnr_db,
                    Tolerance.profile(tolerance) if isinstance(tolerance, str) else tolerance)
    if max_accuracy_drop is not None and labels is None:
        raise _core.ArgumentError("max_accuracy_drop needs labels: pass labels=... (one per evaluation sample)")
    if (budget.given or control is not None) and (eval_samples <= 0 or batches is None) and eval_data is None:
        raise _core.ArgumentError("a budget needs evaluation samples (the layers' sensitivity is measured on them): "
                                  "eval_samples must be > 0 with calibration batches, or give eval_data")
    cal = Calibrator(source, profile=profile, bins=bins, threads=threads, skip_nonfinite=skip_nonfinite,
                     options=_overrides(per_channel, activation_type, weight_type, symmetric_activations,
                                        symmetric_weights, reduce_range, op_types, [*exclude_nodes, *kept_float]))
    corrector = BiasCorrector(cal.model, cal.plan, threads) if "bias_correction" in names else None
    rounder = None if rounding_options is None else AdaRounder(cal.model, cal.plan, cal.options, rounding_options,
                                                                threads)
    given, given_notes = ({}, []) if ranges is None else _given_ranges(ranges, cal, original)
    pre_notes += given_notes
    if batches is None:
        missing = [t.name for t in cal.plan.tensors if t.name not in given]
        if missing:
            raise _core.ArgumentError(f"no calibration batches, and ranges= does not cover {len(missing)} of the "
                                      f"{len(cal.plan.tensors)} tensors the plan quantizes (first: {missing[:5]}); "
                                      "give batches, or a range for each")

    # Calibrate, keeping the first samples for evaluation when no evaluation set is given.
    kept: list[Feeds] = []
    want = eval_samples if eval_data is None else 0
    stream = () if batches is None else iter_batches(batches, cal.model, batch_size)
    for feeds in _progress(stream, progress, "calibrating"):
        cal._core.observe(dict(feeds))
        if corrector is not None:
            corrector.observe(dict(feeds))
        if rounder is not None:
            rounder.observe(dict(feeds))
        have = sum(_rows(f) for f in kept)
        if have < want:
            kept.append(_take(feeds, want - have))
    if cal.batches == 0 and batches is not None:
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
                   sensitivity_analysis=sensitivity_analysis, given=given, notes=pre_notes, corrector=corrector,
                   rounder=rounder, control=control)


def _finish(cal: Calibrator, method: str, eval_feeds: list[Feeds], *, percentile: float = 99.999,
           exclude_nodes: Sequence[str] = (), labels: np.ndarray | None = None, label_output: str | None = None,
           budget: Budget | None = None, runner: str = "tether", threads: int | None = None,
           sensitivity_analysis: bool | None = None, given: Mapping[str, tuple[float, float, str]] | None = None,
           notes: Sequence[str] = (), corrector: BiasCorrector | None = None, rounder: AdaRounder | None = None,
           control: AccuracyControl | None = None) -> QuantizeResult:
    """The part of :func:`static` after calibration: ranges by ``method`` from the statistics
    of ``cal`` (observed here, or merged from other processes' states), the QDQ model, its
    evaluation on ``eval_feeds`` (with ``labels``, one per evaluation sample), the budget's
    repair and the report. Given the same statistics and evaluation batches it returns what
    :func:`static` returns. ``given``: checked ranges that replace the computed ones (see
    :func:`_given_ranges`); ``notes``: notes for the report from the steps before calibration;
    ``corrector``: bias correction, its layer inputs observed, applied once the ranges are fixed;
    ``rounder``: AdaRound, its layer inputs observed, learned once the ranges are fixed (before
    bias correction, which then measures the learned rounding); ``control``: the user's metric
    and its budget.

    Example:
        >>> cal = Calibrator("cnn.onnx"); cal.merge(shard_states)          # doctest: +SKIP
        >>> res = _finish(cal, "entropy", [{"x": x[:128]}])                  # doctest: +SKIP
    """
    budget = budget or Budget(None, None, None)
    described = ", ".join([*([budget.describe()] if budget.given else []),
                           *([control.describe()] if control is not None else [])])
    eval_labels = labels
    given = dict(given or {})
    covered = all(t.name in given for t in cal.plan.tensors)
    ranges = {**({} if covered else cal.compute(method, percentile=percentile)), **given}
    q = _Quantizer(cal, ranges)
    notes = [*notes, *cal.plan.notes]
    rounding: dict[str, np.ndarray] = {}
    if rounder is not None:
        rounding, ar_notes = rounder.learn(q.build()[0])
        q = _Quantizer(cal, ranges, rounding=rounding)
        notes += ar_notes
    if corrector is not None:
        folded = Model(_core.quant_fold_dequantized_constants(q.build()[0]._core))
        corrected, originals, bc_notes = corrector.correct(folded)
        q = _Quantizer(cal, ranges, corrected, originals, rounding)
        notes += bc_notes
    float_nodes: dict[str, str] = {n: "excluded by the caller" for n in exclude_nodes}
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

        def run_with(m: Model, name: str) -> Any:
            if runner == "onnxruntime":
                return OnnxRuntimeRunner(m, name, threads=threads)
            return TetherRunner(Model(_core.quant_fold_dequantized_constants(m._core)), name, threads=threads)

        def meets(nodes: Sequence[str]) -> bool:
            key = tuple(sorted(nodes))
            if key not in verdicts:
                assert evaluator is not None
                m = q.build(nodes)[0]
                ok = not budget.given or budget.met(evaluator.score(m), evaluator.float_accuracy)
                if ok and control is not None:  # the user's metric last: it is usually the slowest
                    ok = control.met(run_with(m, f"int8 ({runner})"), len(key))
                verdicts[key] = ok
            return verdicts[key]

        if control is not None:
            control.start(run_with(cal.model, f"float ({runner})"))
        if sensitivity_analysis or ((budget.given or control is not None) and not meets(())):
            layers = sensitivity(evaluator, planned, q.only)
        if budget.given or control is not None:
            order = [la.node for la in layers] if layers else []
            k = smallest_float_set(order, lambda k: meets(order[:k]))
            if k is None:
                budget_met = False
                final_model = cal.model
                notes.append(f"the budget ({described}) is not met even with every node in float: "
                             "the float model is returned")
            else:
                budget_met = True
                chosen = tuple(order[:k])
                rank = {la.node: (i, la) for i, la in enumerate(layers or [])}
                for node in chosen:
                    i, la = rank[node]
                    float_nodes[node] = (f"sensitivity rank {i + 1} of {len(order)} (SQNR {la.sqnr_db:.1f} dB with "
                                         f"only this node quantized); kept in float to meet {described}")
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
    accuracy = None
    if control is not None and control.float_metric is not None:
        quantized = any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in final_model.nodes)
        accuracy = control.result(list(chosen), quantized)
        notes.append(f"accuracy control: {accuracy.evaluations} evaluations of {control.name}: "
                     f"{accuracy.describe()}" + ("" if accuracy.met or not budget_met else
                                                 "; only the float model keeps the budget: nothing is quantized"))

    summary = QuantizationSummary(
        str(cal.options.get("profile", "onnxruntime")), GIVEN_METHOD if covered else method, cal.samples,
        cal.batches, cal.skipped,
        _tensor_summaries(cal, ranges, activations),
        float_nodes, layers, described or None, budget_met,
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
    return QuantizeResult(final_model, cal.model, report, summary, ranges, scales, float_nodes, layers, final_plan,
                          accuracy)
