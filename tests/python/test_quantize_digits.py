"""The digits CNN (scikit-learn's real 8x8 digits), trained, exported, quantized from numpy
batches: INT8 keeps its test accuracy within half a point, in onnxruntime and in tether."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import tether as tt
from tether.demo import build_network, load_data, train


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory):
    import torch

    x_train, y_train, x_test, y_test = load_data()
    net = train(build_network(), x_train, y_train)
    path = tmp_path_factory.mktemp("digits") / "digits.onnx"
    res = tt.export.torch(net, torch.from_numpy(x_test[:8]), path, dynamic={"image": {0: "batch"}},
                          output_names=["logits"])
    assert res.ok
    return path, x_train, x_test, y_test


def _accuracy(model_bytes: bytes, x: np.ndarray, y: np.ndarray) -> float:
    sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    return float(np.mean(np.argmax(sess.run(None, {"image": x})[0], axis=1) == y))


@pytest.mark.parametrize("method", ["minmax", "entropy", "percentile", "mse"])
def test_int8_digits_cnn_loses_at_most_half_a_point_in_onnxruntime(digits, method):
    path, x_train, x_test, y_test = digits
    batches = (x_train[i:i + 64] for i in range(0, len(x_train), 64))  # a generator, read once
    res = tt.quantize.static(path, batches, method=method, eval_data=x_test, labels=y_test)
    float_acc = _accuracy(path.read_bytes(), x_test, y_test)
    int8_acc = _accuracy(res.model.to_bytes(), x_test, y_test)
    assert float_acc > 0.9
    assert float_acc - int8_acc <= 0.005, (method, float_acc, int8_acc)
    # The report's per-label table covers every digit, with the float model's accuracy per label.
    assert [s.label for s in res.report.slices] == list(range(10))
    per_label = {s.label: s.reference_accuracy for s in res.report.slices}
    for label in range(10):
        sel = y_test == label
        sess = ort.InferenceSession(path.read_bytes(), providers=["CPUExecutionProvider"])
        expected = float(np.mean(np.argmax(sess.run(None, {"image": x_test[sel]})[0], axis=1) == label))
        assert per_label[label] == pytest.approx(expected, abs=1e-9)
    # tether runs the QDQ model too, and agrees with its own evaluation of the accuracy.
    logits = tt.compile(res.model).run({"image": x_test})["logits"]
    assert float(np.mean(np.argmax(logits, axis=1) == y_test)) == pytest.approx(res.summary.accuracy, abs=1 / len(y_test))
