"""`tether quantize`: the QDQ model, report and calibration files from an .npz; exit 1 for a
missed budget, 2 with a one-line error for bad input."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tether as tt
from test_quant_calibrator import _builder_cnn


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether.cli", "quantize", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("cli")
    _builder_cnn().save(folder / "cnn.onnx")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 3, 12, 12)).astype(np.float32)
    np.savez(folder / "calib.npz", x=x, labels=rng.integers(0, 5, 40))
    return folder


def test_writes_a_qdq_model_the_report_and_the_calibration_files(files):
    out = files / "cnn.int8.onnx"
    r = _cli(str(files / "cnn.onnx"), "--data", str(files / "calib.npz"), "--method", "entropy", "-o", str(out),
             "--html", str(files / "r.html"), "--trt-cache", str(files / "c.cache"), "--ncnn-table", str(files / "t.table"))
    assert r.returncode == 0, r.stderr
    assert "quantization: profile onnxruntime, method entropy, 40 calibration samples" in r.stdout
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": np.zeros((1, 3, 12, 12), np.float32)})
    assert 'id="quantization"' in (files / "r.html").read_text()
    assert set(tt._core.quant_read_tensorrt_cache((files / "c.cache").read_text())) >= {"x"}
    weights, inputs = tt._core.quant_read_ncnn_table((files / "t.table").read_text())
    assert set(weights) == set(inputs) == {"conv1", "conv2", "fc"}


def test_a_missed_budget_exits_1(files):
    r = _cli(str(files / "cnn.onnx"), "--data", str(files / "calib.npz"), "-o", str(files / "m.onnx"),
             "--min-sqnr", "1000", "--runner", "onnxruntime")
    assert r.returncode == 1, r.stderr
    assert "budget: SQNR >= 1000 dB on every output: NOT met" in r.stdout
    written = {n.op_type for n in onnx.load(str(files / "m.onnx")).graph.node}
    if "QuantizeLinear" not in written:  # the float model came back: the command says so, not "quantized"
        assert f"nothing quantized: the float model written to {files / 'm.onnx'}" in r.stdout
        assert "quantized model written" not in r.stdout and "UserWarning" not in r.stderr
    else:
        assert "quantized model written to" in r.stdout


@pytest.mark.parametrize("case, message", [
    ("missing", "--data '.*nope.npz' does not exist"),
    ("not_npz", "is not an .npz file of arrays"),
    ("wrong_name", "calibration batch 0: unknown input 'image'"),
    ("no_labels", "--max-accuracy-drop needs labels"),
    ("html_no_eval", "--html needs evaluation samples"),
])
def test_bad_input_is_one_line_and_exit_2(files, case, message):
    data = {"missing": files / "nope.npz", "not_npz": files / "cnn.onnx", "wrong_name": files / "wrong.npz",
            "no_labels": files / "wrong.npz", "html_no_eval": files / "calib.npz"}[case]
    np.savez(files / "wrong.npz", image=np.zeros((2, 3, 12, 12), np.float32))
    extra = {"no_labels": ["--max-accuracy-drop", "0.01"],
             "html_no_eval": ["--html", str(files / "bad.html"), "--eval-samples", "0"]}.get(case, [])
    r = _cli(str(files / "cnn.onnx"), "--data", str(data), "-o", str(files / "bad.onnx"), *extra)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert re.search(message, r.stderr), r.stderr
    assert not (files / "bad.onnx").exists() and not (files / "bad.html").exists()
