"""Export rough edges: Keras's exact GELU reaches ONNX (Erfc as 1 - Erf), export.keras and
export.tflite take a tolerance, reports name the final file rather than the staging one, and
output_names of the wrong count are refused as input_names are."""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tether as tt
import torch
from onnx import helper
from tether.export import ExportError
from tether.export._rewrites import erfc_as_erf
from tether.parity import Tolerance, load_golden

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

with contextlib.suppress(RuntimeError):  # refused once TensorFlow's runtime has started
    tf.config.threading.set_intra_op_parallelism_threads(2)
    tf.config.threading.set_inter_op_parallelism_threads(1)


def _ort(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def _dense(activation: Any, name: str) -> Any:
    keras.utils.set_random_seed(0)
    x = keras.Input((8,), name="x")
    return keras.Model(x, keras.layers.Dense(3)(keras.layers.Dense(16, activation=activation)(x)), name=name)


@pytest.mark.parametrize(("dtype", "atol"), [(np.float32, 2e-7), (np.float16, 2e-3)])
def test_erfc_rewritten_as_one_minus_erf_matches_math_erfc(tmp_path: Path, dtype: type, atol: float) -> None:
    # Erfc has no ONNX schema: the node is what tf2onnx leaves; after the rewrite the file runs.
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Erfc", ["n"], ["y"], name="e")],
                              "erfc", [helper.make_tensor_value_info("x", elem, [13])],
                              [helper.make_tensor_value_info("y", elem, [13])])
    path = tmp_path / "erfc.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    assert erfc_as_erf(path) == 1
    assert [n.op_type for n in onnx.load(str(path)).graph.node] == ["Neg", "Erf", "Sub"]
    x = np.linspace(-4, 3, 13).astype(dtype)
    want = np.array([math.erfc(-float(v)) for v in x])
    # onnxruntime has no float16 Erf on the CPU; tether has.
    got = _ort(path, {"x": x})[0] if dtype is np.float32 else tt.compile(str(path)).run({"x": x})["y"]
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=atol)
    assert erfc_as_erf(path) == 0  # nothing left to rewrite


def test_keras_exact_gelu_exports_and_matches_keras(tmp_path: Path) -> None:
    model = _dense("gelu", "exact_gelu")
    x = np.random.default_rng(0).uniform(-4, 4, (16, 8)).astype(np.float32)
    res = tt.export.keras(model, x, tmp_path / "gelu.onnx")
    assert res.ok and "Erfc" in res.exporter
    assert "Erfc" not in {n.op_type for n in onnx.load(str(res.path)).graph.node}
    want = model(x, training=False).numpy()
    np.testing.assert_allclose(_ort(res.path, {"x": x})[0], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tt.compile(str(res.path)).run({"x": x})[res.report.outputs[0].name], want,
                               rtol=1e-5, atol=1e-5)


def test_keras_report_names_the_final_file_not_the_staging_one(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    res = tt.export.keras(_dense("relu", "named"), np.ones((4, 8), np.float32), path)
    assert res.report is not None and res.report.models is not None
    candidate = res.report.models["candidate"]
    assert Path(candidate["path"]) == path and path.is_file()
    assert candidate["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert ".export-" not in str(res) and sorted(p.name for p in tmp_path.iterdir()) == ["m.golden", "m.onnx"]


def test_keras_export_checks_and_records_the_tolerance_given(tmp_path: Path) -> None:
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    res = tt.export.keras(_dense("relu", "tol"), x, tmp_path / "t.onnx", tolerance="fp16")
    assert res.report is not None and res.report.tolerance == Tolerance.profile("fp16")
    assert res.golden_path is not None and load_golden(res.golden_path).metadata["tolerance"] == "fp16"
    with pytest.raises(tt.ArgumentError, match="tolerance must be a profile name"):
        tt.export.keras(_dense("relu", "tol"), x, tmp_path / "u.onnx", tolerance=0.01)
    with pytest.raises(tt.ArgumentError, match="unknown tolerance profile 'int9'"):
        tt.export.tflite(_dense("relu", "tol"), tmp_path / "u.tflite", tolerance="int9")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.golden", "t.onnx"]


def _tflite_outputs(path: Path, x: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():  # TensorFlow's interpreter, deprecated for LiteRT's, is the oracle here
        warnings.simplefilter("ignore")
        interpreter = tf.lite.Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return np.asarray(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]))


def test_int8_tflite_takes_a_tolerance_that_decides_the_check(tmp_path: Path) -> None:
    model = _dense("relu", "int8")
    rng = np.random.default_rng(2)
    calib = [rng.standard_normal((32, 8)).astype(np.float32) for _ in range(4)]
    x = rng.standard_normal((1, 8)).astype(np.float32)
    tight = Tolerance(atol=1e-7, rtol=0.0)
    with pytest.raises(ExportError, match=r"pass tolerance=Tolerance\(atol=") as e:
        tt.export.tflite(model, tmp_path / "q.tflite", representative_data=calib, example_inputs=x, tolerance=tight)
    assert e.value.result.report.tolerance == tight and not (tmp_path / "q.tflite").exists()
    with pytest.warns(UserWarning, match="LiteRT differs from Keras"):
        tt.export.tflite(model, tmp_path / "q.tflite", representative_data=calib, example_inputs=x, tolerance=tight,
                         check=False)
    # The int8 file's error, measured by TensorFlow's own interpreter: a tolerance above it passes.
    error = float(np.abs(_tflite_outputs(tmp_path / "q.tflite", x) - model(x, training=False).numpy()).max())
    assert error > 1e-7
    res = tt.export.tflite(model, tmp_path / "q.tflite", representative_data=calib, example_inputs=x,
                           tolerance=Tolerance(atol=2 * error, rtol=0.0))
    assert res.ok and res.report is not None and res.report.tolerance.atol == 2 * error


class _TwoOutputs(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.a(x)
        return y, torch.softmax(y, -1)


@pytest.mark.parametrize("names", [["only"], ["a", "b", "c"]])
def test_torch_output_names_of_the_wrong_count_raise_as_input_names_do(tmp_path: Path, names: list[str]) -> None:
    torch.manual_seed(0)
    with pytest.raises(tt.ArgumentError, match=rf"output_names holds {len(names)} names?; the module returns 2 "
                                               r"outputs \(the exported graph's outputs: \["):
        tt.export.torch(_TwoOutputs().eval(), (torch.randn(3, 4),), tmp_path / "n.onnx", output_names=names)
    assert sorted(tmp_path.iterdir()) == []  # nothing written, no staging folder left


def test_torch_output_names_empty_or_repeated_raise_before_exporting(tmp_path: Path) -> None:
    for names in (["a", "a"], ["a", ""], []):
        with pytest.raises(tt.ArgumentError, match="output_names must be"):
            tt.export.torch(_TwoOutputs().eval(), (torch.randn(3, 4),), tmp_path / "n.onnx", output_names=names)
    res = tt.export.torch(_TwoOutputs().eval(), (torch.randn(3, 4),), tmp_path / "n.onnx",
                          output_names=["logits", "probs"])
    assert [o.name for o in onnx.load(str(res.path)).graph.output] == ["logits", "probs"]
