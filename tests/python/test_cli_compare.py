"""`tether compare` and `tether run` as a user types them: bad inputs and usage end in one line
and exit status 2, never a traceback; `--json -` writes to standard output; two ONNX files are
compared with each other. Outputs are checked against numpy forward passes of the same weights."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import tether as tt
from onnx import helper, numpy_helper


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether.cli", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def _two_inputs(path: Path) -> Path:
    """y = a * 2 + b, both inputs float32 [n, 3]."""
    g = helper.make_graph(
        [helper.make_node("Mul", ["a", "two"], ["a2"], name="double"),
         helper.make_node("Add", ["a2", "b"], ["y"], name="sum")],
        "two", [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, ["n", 3]),
                helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n", 3])],
        [numpy_helper.from_array(np.array(2, np.float32), "two")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _linear(path: Path, scale: float = 1.0) -> Path:
    """y = x @ w + c, x float32 [batch, 4]; ``scale`` multiplies one weight column."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 2)).astype(np.float32)
    w[:, 1] *= np.float32(scale)
    c = rng.standard_normal(2).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="fc.matmul"),
         helper.make_node("Add", ["h", "c"], ["y"], name="fc.bias")],
        "linear", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 2])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(c, "c")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _numpy_linear(path: Path, x: np.ndarray) -> np.ndarray:
    w = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in onnx.load(str(path)).graph.initializer}
    return x.astype(np.float64) @ w["w"] + w["c"]


def _one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tether: error: "), r.stderr
    return lines[0]


@pytest.mark.parametrize("case", ["missing input", "wrong dtype", "wrong dims", "wrong rank", "unknown input",
                                  "not an npz", "pickled arrays"])
@pytest.mark.parametrize("command", ["compare", "run"])
def test_bad_inputs_file_is_one_line_naming_file_and_input_with_exit_2(case: str, command: str,
                                                                        tmp_path: Path) -> None:
    model = _two_inputs(tmp_path / "two.onnx")
    f = tmp_path / "bad.npz"
    ones = np.ones((2, 3), np.float32)
    expected = {
        "missing input": "input 'b' is missing; the model's inputs are: a, b",
        "wrong dtype": "input 'a' is float64, the model expects float32",
        "wrong dims": "input 'a' has shape [2, 4], the model expects ['n', 3] (dim 1 is 4, expected 3)",
        "wrong rank": "input 'b' has shape [6] (rank 1), the model expects ['n', 3] (rank 2)",
        "unknown input": "unknown input 'c'; the model's inputs are: a, b",
        "not an npz": "is not an .npz archive of arrays",
        "pickled arrays": "is not a readable .npz of plain arrays",
    }[case]
    if case == "missing input":
        np.savez(f, a=ones)
    elif case == "wrong dtype":
        np.savez(f, a=ones.astype(np.float64), b=ones.astype(np.float64))
    elif case == "wrong dims":
        np.savez(f, a=np.ones((2, 4), np.float32), b=ones)
    elif case == "wrong rank":
        np.savez(f, a=ones, b=np.ones(6, np.float32))
    elif case == "unknown input":
        np.savez(f, a=ones, b=ones, c=ones)
    elif case == "not an npz":
        f.write_text("not an archive\n")
    else:
        np.savez(f, a=np.array([{"x": 1}], dtype=object), b=ones)
    line = _one_line_error(_cli(command, str(model), "--inputs", str(f)))
    assert str(f) in line and expected in line, line


def test_inputs_that_disagree_on_a_shared_dim_are_refused(tmp_path: Path) -> None:
    model = _two_inputs(tmp_path / "two.onnx")
    np.savez(tmp_path / "x.npz", a=np.ones((2, 3), np.float32), b=np.ones((5, 3), np.float32))
    line = _one_line_error(_cli("compare", str(model), "--inputs", str(tmp_path / "x.npz")))
    assert "input 'b' has n=5 (dim 0), but input 'a' has n=2" in line


def test_good_inputs_file_compares_and_matches_numpy(tmp_path: Path) -> None:
    model = _two_inputs(tmp_path / "two.onnx")
    a, b = np.float32([[1, 2, 3]]), np.float32([[0.5, 0, -1]])
    np.savez(tmp_path / "x.npz", a=a, b=b)
    r = _cli("compare", str(model), "--inputs", str(tmp_path / "x.npz"), "--json", "-")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["input_shapes"] == {"a": [1, 3], "b": [1, 3]}
    r = _cli("run", str(model), "--inputs", str(tmp_path / "x.npz"), "--repeat", "0", "--save", str(tmp_path / "o.npz"))
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "o.npz")["y"], a * 2 + b)


@pytest.mark.parametrize("command", ["compare", "run"])
def test_a_dim_the_model_does_not_have_is_an_error_naming_the_known_dims(command: str, tmp_path: Path) -> None:
    model = _linear(tmp_path / "lin.onnx")
    line = _one_line_error(_cli(command, str(model), "--dim", "bacth=7"))
    assert "'bacth'" in line and "the model's dims are: batch" in line
    r = _cli(command, str(model), "--dim", "batch=7", *(["--json", "-"] if command == "compare" else []))
    assert r.returncode == 0, r.stderr
    if command == "compare":
        assert json.loads(r.stdout)["input_shapes"] == {"x": [7, 4]}
    else:
        assert "float32[7, 2]" in r.stdout
    np.savez(tmp_path / "x.npz", x=np.ones((2, 4), np.float32))
    line = _one_line_error(_cli(command, str(model), "--dim", "batch=7", "--inputs", str(tmp_path / "x.npz")))
    assert "--dim sizes the generated inputs" in line


def test_json_dash_writes_the_report_to_standard_output_and_no_file(tmp_path: Path) -> None:
    model = _linear(tmp_path / "lin.onnx")
    r = _cli("compare", str(model), "--json", "-", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)  # nothing else on standard output
    assert data["ok"] is True and [o["name"] for o in data["outputs"]] == ["y"]
    assert "PASS" in r.stderr  # the table moved to standard error
    assert not (tmp_path / "-").exists()
    r = _cli("compare", str(model), "--html", "-", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("<!DOCTYPE html>") and not (tmp_path / "-").exists()
    line = _one_line_error(_cli("compare", str(model), "--html", "-", "--json", "-"))
    assert "both ask for standard output" in line


def test_against_a_path_that_does_not_exist_says_so(tmp_path: Path) -> None:
    model = _linear(tmp_path / "lin.onnx")
    line = _one_line_error(_cli("compare", str(model), "--against", str(tmp_path / "no" / "such" / "path")))
    assert "no such file or directory" in line and "no/such/path" in line
    line = _one_line_error(_cli("compare", str(tmp_path / "missing.onnx")))
    assert "missing.onnx" in line and "no such file" in line


def test_two_onnx_files_edited_copy_fails_and_names_the_edited_node(tmp_path: Path) -> None:
    original = _linear(tmp_path / "original.onnx")
    edited = _linear(tmp_path / "edited.onnx", scale=1.5)
    x = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    want = float(np.abs(_numpy_linear(edited, x) - _numpy_linear(original, x)).max())
    for runner, reference_runner in (("tether", "onnxruntime"), ("onnxruntime", "tether")):
        r = _cli("compare", str(edited), "--against", str(original), "--runner", runner, "--reference-runner",
                 reference_runner, "--inputs", str(tmp_path / "x.npz"), "--layerwise", "--no-optimize",
                 "--json", "-")
        assert r.returncode == 1, r.stderr
        data = json.loads(r.stdout)
        assert data["reference"] == f"{reference_runner}: original.onnx"
        assert data["candidate"] == f"{runner}: edited.onnx"
        assert data["outputs"][0]["metrics"]["max_abs_error"] == pytest.approx(want, rel=1e-5)
        assert data["first_divergent"]["node"] == "fc.matmul"
    same = tmp_path / "same.onnx"
    same.write_bytes(original.read_bytes())
    r = _cli("compare", str(same), "--against", str(original), "--inputs", str(tmp_path / "x.npz"))
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr


def test_golden_bundle_of_another_model_file_is_named_by_both_hashes(tmp_path: Path) -> None:
    original = _linear(tmp_path / "original.onnx")
    edited = _linear(tmp_path / "edited.onnx", scale=1.5)
    x = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)
    recorded = hashlib.sha256(original.read_bytes()).hexdigest()
    tt.parity.save_golden(tmp_path / "golden", [({"x": x}, {"y": _numpy_linear(original, x).astype(np.float32)})],
                          {"model_sha256": recorded})
    r = _cli("compare", str(original), "--against", str(tmp_path / "golden"))
    assert r.returncode == 0 and "different model file" not in r.stdout, r.stdout + r.stderr
    r = _cli("compare", str(edited), "--against", str(tmp_path / "golden"))
    actual = hashlib.sha256(edited.read_bytes()).hexdigest()
    assert r.returncode == 1, r.stdout + r.stderr
    assert recorded[:16] in r.stdout and actual[:16] in r.stdout and "different model file" in r.stdout


def test_a_report_path_that_cannot_be_written_is_one_line_with_exit_2(tmp_path: Path) -> None:
    model = _linear(tmp_path / "lin.onnx")
    target = tmp_path / "no" / "such" / "dir" / "r.json"
    line = _one_line_error(_cli("compare", str(model), "--json", str(target)))
    assert str(target) in line and "No such file or directory" in line
