"""tt.quantize.static(..., validation_fn=fn, max_drop=...): the user's metric decides which nodes
return to float. A classifier trained on scikit-learn's digits gets one fragile layer (its input
holds a channel that is always 3000, read with weight 0: the same function, but a per-tensor INT8
scale that flattens every other channel); the metric is accuracy on held-out digits, checked
again here in onnxruntime."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import tether as tt

_HELD_OUT = slice(1000, 1400)


@functools.lru_cache(maxsize=1)
def _fragile_mlp() -> tuple[tt.Model, np.ndarray, np.ndarray]:
    """64 -> 32 (+1 channel at 3000) -> 24 -> 10 Gemm/Relu classifier, nodes fc0, fc1, fc2."""
    from sklearn.datasets import load_digits
    from sklearn.neural_network import MLPClassifier
    from threadpoolctl import threadpool_limits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    with threadpool_limits(1):  # a few hundred ms on one core; far longer with BLAS threads on busy cores
        clf = MLPClassifier((32, 24), solver="lbfgs", max_iter=200, random_state=0).fit(x[:1000], d.target[:1000])
    ws = [w.astype(np.float32) for w in clf.coefs_]
    bs = [b.astype(np.float32) for b in clf.intercepts_]
    ws[0] = np.concatenate([ws[0], np.zeros((64, 1), np.float32)], axis=1)
    bs[0] = np.concatenate([bs[0], np.float32([3000.0])])
    ws[1] = np.concatenate([ws[1], np.zeros((1, ws[1].shape[1]), np.float32)], axis=0)
    b = tt.GraphBuilder("fragile")
    h = b.input("x", "float32", ("batch", 64))
    for i in range(3):
        h = b.node("Gemm", [h, b.initializer(f"fc{i}.w", ws[i]), b.initializer(f"fc{i}.b", bs[i])], name=f"fc{i}")
        if i < 2:
            h = b.node("Relu", [h], name=f"relu{i}")
    b.output(h)
    return b.build(), x, d.target


def _accuracy_fn(x: np.ndarray, y: np.ndarray) -> Any:
    def held_out_accuracy(runner: Any) -> float:
        logits = next(iter(runner.run({"x": x}).values()))
        return float(np.mean(np.argmax(logits, axis=1) == y))
    return held_out_accuracy


def _ort_accuracy(model: tt.Model, x: np.ndarray, y: np.ndarray) -> float:
    sess = ort.InferenceSession(model.to_bytes(), providers=["CPUExecutionProvider"])
    return float(np.mean(sess.run(None, {"x": x})[0].argmax(axis=1) == y))


def test_the_fragile_layer_returns_to_float_and_the_budget_on_the_metric_holds():
    model, x, y = _fragile_mlp()
    xv, yv = x[_HELD_OUT], y[_HELD_OUT]
    res = tt.quantize.static(model, x[:256], validation_fn=_accuracy_fn(xv, yv), max_drop=0.01, progress=False)
    ac = res.accuracy_control
    assert ac is not None and ac.met and res.quantized
    assert ac.float_nodes == ["fc1"] and list(res.float_nodes) == ["fc1"]
    # onnxruntime, on its own: the fully quantized model loses far more than the budget, the
    # returned one keeps it (one held-out digit of slack for the two engines' rounding).
    float_acc = _ort_accuracy(model, xv, yv)
    assert abs(ac.float_metric - float_acc) < 1e-9
    assert ac.int8_metric is not None and ac.int8_metric < float_acc - 0.1
    assert _ort_accuracy(res.model, xv, yv) >= float_acc - 0.01 - 1 / len(yv)
    assert ac.final_metric is not None and ac.float_metric - ac.final_metric <= 0.01
    # The float model, the all-INT8 model, then fc1 (the most sensitive) in float: found at once.
    assert ac.evaluations == 3 and [k for k, _ in ac.trials] == [0, 1]
    assert any(n.startswith("accuracy control: 3 evaluations of") and "fc1" in n for n in res.summary.notes)


@pytest.mark.parametrize("runner", ["tether", "onnxruntime"])
def test_a_lower_is_better_metric_keeps_the_same_layer_in_float(runner):
    model, x, y = _fragile_mlp()
    accuracy = _accuracy_fn(x[_HELD_OUT], y[_HELD_OUT])

    def error_rate(runner: Any) -> np.float64:
        return np.float64(1.0 - accuracy(runner))

    res = tt.quantize.static(model, x[:256], validation_fn=error_rate, max_drop=0.01, higher_is_better=False,
                             runner=runner, progress=False)
    assert res.accuracy_control is not None and res.accuracy_control.met
    assert res.accuracy_control.float_nodes == ["fc1"]
    assert res.accuracy_control.final_metric - res.accuracy_control.float_metric <= 0.01


def test_a_budget_only_the_float_model_meets_returns_the_float_model_and_says_so():
    model, x, _ = _fragile_mlp()
    xv = x[_HELD_OUT]
    want = _reference_logits(model, xv)

    def closeness(runner: Any) -> float:  # 0 only for the float model's own logits
        return -float(np.abs(next(iter(runner.run({"x": xv}).values())) - want).max())

    res = tt.quantize.static(model, x[:256], validation_fn=closeness, max_drop=0.0, progress=False)
    assert res.accuracy_control is not None and not res.accuracy_control.met
    assert not res.quantized and "NOTHING QUANTIZED" in repr(res)
    assert any("only the float model keeps the budget" in n for n in res.summary.notes)


def _reference_logits(model: tt.Model, x: np.ndarray) -> np.ndarray:
    """The float model in numpy: Gemm, Relu, Gemm, Relu, Gemm."""
    h = x.astype(np.float64)
    for i in range(3):
        h = h @ model.initializer(f"fc{i}.w").astype(np.float64) + model.initializer(f"fc{i}.b")
        h = np.maximum(h, 0) if i < 2 else h
    return h.astype(np.float32)


def test_a_long_search_shows_a_progress_bar_unless_silenced(capsys):
    model, x, y = _fragile_mlp()
    fn = _accuracy_fn(x[_HELD_OUT], y[_HELD_OUT])
    tt.quantize.static(model, x[:256], validation_fn=fn, max_drop=0.01, progress=True)
    assert "accuracy control" in capsys.readouterr().err
    tt.quantize.static(model, x[:256], validation_fn=fn, max_drop=0.01, progress=False)
    assert "accuracy control" not in capsys.readouterr().err


def _raises(runner: Any) -> float:
    raise ZeroDivisionError("no samples")


def _text(runner: Any) -> Any:
    return "0.9"


def _nan(runner: Any) -> float:
    return float("nan")


@pytest.mark.parametrize("kwargs, message", [
    ({"validation_fn": _raises, "max_drop": 0.01},
     "validation_fn '_raises' raised ZeroDivisionError on the float model: no samples"),
    ({"validation_fn": _text, "max_drop": 0.01}, "validation_fn '_text' returned '0.9' \\(str\\) on the float model"),
    ({"validation_fn": _nan, "max_drop": 0.01}, "validation_fn '_nan' returned nan"),
    ({"max_drop": 0.01}, "max_drop needs validation_fn"),
    ({"validation_fn": _nan}, "validation_fn needs max_drop"),
    ({"validation_fn": _nan, "max_drop": -0.1}, "max_drop must be a finite number >= 0"),
    ({"validation_fn": 3, "max_drop": 0.1}, "validation_fn must be callable"),
    ({"validation_fn": _nan, "max_drop": 0.1, "eval_samples": 0}, "a budget needs evaluation samples"),
])
def test_bad_validation_functions_and_budgets_are_argument_errors(kwargs, message):
    model, x, _ = _fragile_mlp()
    with pytest.raises(tt.ArgumentError, match=message):
        tt.quantize.static(model, x[:64], progress=False, **kwargs)


def test_a_validation_fn_failing_on_an_int8_model_is_named_with_that_model():
    model, x, y = _fragile_mlp()
    fn = _accuracy_fn(x[_HELD_OUT], y[_HELD_OUT])
    calls = []

    def flaky(runner: Any) -> float:
        calls.append(runner)
        if len(calls) > 1:
            raise RuntimeError("metric server down")
        return fn(runner)

    with pytest.raises(tt.ArgumentError, match="'flaky' raised RuntimeError on the INT8 model with 0 nodes in float"):
        tt.quantize.static(model, x[:256], validation_fn=flaky, max_drop=0.01, progress=False)
