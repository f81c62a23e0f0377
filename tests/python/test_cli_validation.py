"""The command line refuses bad numbers and unwritable report paths before any work, with one
line and exit status 2, and stops quietly when the reader of its output goes away early."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import tether as tt
from _mounts import tmpfs
from onnx import helper, numpy_helper


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether.cli", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def _one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tether: error: "), r.stderr
    assert r.stdout == "", r.stdout  # nothing was computed and printed first
    return lines[0]


def _linear(path: Path, layers: int = 1) -> Path:
    """``layers`` MatMul + Relu pairs on x float32 [batch, 4]."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        inits.append(numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"], name=f"fc{i}"),
                  helper.make_node("Relu", [f"h{i}"], [f"y{i}"], name=f"relu{i}")]
        prev = f"y{i}"
    g = helper.make_graph(nodes, "linear", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4])],
                          [helper.make_tensor_value_info(prev, onnx.TensorProto.FLOAT, ["batch", 4])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("cli_validation")
    _linear(d / "m.onnx")
    _linear(d / "long.onnx", layers=1500)  # --shapes lists ~3000 values: more than a pipe holds
    x = np.random.default_rng(1).standard_normal((32, 4)).astype(np.float32)
    np.savez(d / "calib.npz", x=x, labels=np.argmax(x, axis=1))
    return d


_BAD_NUMBERS = [
    (["run", "m.onnx"], "--repeat", "-1", ">= 0"),
    (["run", "m.onnx"], "--seed", "-2", ">= 0"),
    (["run", "m.onnx"], "--threads", "-1", ">= 0"),
    (["compare", "m.onnx"], "--atol", "nan", "finite"),
    (["compare", "m.onnx"], "--rtol", "inf", "finite"),
    (["compare", "m.onnx"], "--seed", "-1", ">= 0"),
    (["quantize", "m.onnx", "--data", "calib.npz", "-o", "q.onnx"], "--max-accuracy-drop", "-0.5", "from 0 to 1"),
    (["quantize", "m.onnx", "--data", "calib.npz", "-o", "q.onnx"], "--max-accuracy-drop", "1.5", "from 0 to 1"),
    (["quantize", "m.onnx", "--data", "calib.npz", "-o", "q.onnx"], "--min-sqnr", "nan", "finite"),
    (["quantize", "m.onnx", "--data", "calib.npz", "-o", "q.onnx"], "--min-sqnr", "-inf", "finite"),
    (["quantize", "m.onnx", "--data", "calib.npz", "-o", "q.onnx"], "--eval-samples", "-5", ">= 0"),
    (["quantize", "m.onnx", "--data", "calib.npz", "-o", "q.onnx"], "--percentile", "nan", "(0, 100]"),
    (["quantize", "m.onnx", "--data", "calib.npz", "-o", "q.onnx"], "--batch-size", "0", ">= 1"),
    (["quantize", "m.onnx", "--data", "calib.npz", "-o", "q.onnx"], "--threads", "-3", ">= 0"),
]


@pytest.mark.parametrize(("command", "option", "value", "allowed"), _BAD_NUMBERS,
                         ids=[f"{c[0]} {o} {v}" for c, o, v, _ in _BAD_NUMBERS])
def test_bad_number_is_a_one_line_usage_error_naming_option_value_and_range(files, command, option, value, allowed):
    r = _cli(*command, f"{option}={value}", cwd=files)
    line = _one_line_error(r)
    assert f"{option} {value}: expected" in line and allowed in line, line
    assert not (files / "q.onnx").exists()


def test_numbers_are_checked_before_the_model_is_read(tmp_path):
    # The model does not exist: the number is refused first, so nothing was loaded.
    line = _one_line_error(_cli("quantize", "absent.onnx", "--data", "absent.npz", "-o", "q.onnx",
                                "--eval-samples", "-5", cwd=tmp_path))
    assert "--eval-samples -5" in line


def test_good_boundary_numbers_are_accepted(files):
    r = _cli("run", "m.onnx", "--repeat", "0", "--threads", "0", "--seed", "0", cwd=files)
    assert r.returncode == 0, r.stderr
    r = _cli("quantize", "m.onnx", "--data", "calib.npz", "-o", "ok.onnx", "--max-accuracy-drop", "1",
             "--eval-samples", "8", cwd=files)
    assert r.returncode == 0, r.stderr
    assert (files / "ok.onnx").is_file()


_PATHS = [
    (["compare", "m.onnx"], "--html"),
    (["compare", "m.onnx"], "--json"),
    (["run", "m.onnx"], "--save"),
    (["quantize", "m.onnx", "--data", "calib.npz", "-o", "q.onnx"], "--html"),
    (["quantize", "m.onnx", "--data", "calib.npz", "-o", "q.onnx"], "--trt-cache"),
    (["quantize", "m.onnx", "--data", "calib.npz", "-o", "q.onnx"], "--ncnn-table"),
    (["quantize", "m.onnx", "--data", "calib.npz"], "-o"),
]


@pytest.mark.parametrize(("command", "option"), _PATHS, ids=[f"{c[0]} {o}" for c, o in _PATHS])
def test_file_in_a_missing_folder_is_refused_before_the_work(files, command, option):
    r = _cli(*command, option, "no_such_dir/out.file", cwd=files)
    line = _one_line_error(r)
    assert f"{option} 'no_such_dir/out.file': folder 'no_such_dir': No such file or directory" in line, line
    assert not (files / "q.onnx").exists()  # quantize wrote no model before failing


def test_report_path_that_is_a_folder_is_refused(files):
    line = _one_line_error(_cli("compare", "m.onnx", "--json", str(files), cwd=files))
    assert "is a folder" in line


def test_file_in_a_read_only_folder_is_refused(files, tmp_path):
    """A folder the user may not write (chmod), and, as root, who may write through any
    permission, a read-only file system: refused before the work, the reason named."""
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        try:
            line = _one_line_error(_cli("compare", "m.onnx", "--html", str(locked / "r.html"), cwd=files))
            assert "Permission denied" in line
        finally:
            locked.chmod(0o700)
        return
    with tmpfs(tmp_path / "ro", "1m") as folder:
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        line = _one_line_error(_cli("compare", "m.onnx", "--html", str(folder / "r.html"), cwd=files))
        assert f"--html '{folder / 'r.html'}'" in line and "Read-only file system" in line
        assert list(folder.iterdir()) == []


def _closed_reader(*args: str, cwd: Path) -> tuple[int, str]:
    """Runs the command with its standard output a pipe whose reader is gone before the first
    write, as ``tether ... | head -0`` would leave it: every write meets a closed pipe."""
    proc = subprocess.Popen([sys.executable, "-m", "tether.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    return proc.wait(timeout=300), err


@pytest.mark.parametrize("command", [["inspect", "long.onnx", "--shapes"], ["inspect", "m.onnx", "--json"],
                                     ["run", "m.onnx", "--repeat", "2"], ["compare", "m.onnx"]],
                         ids=lambda c: " ".join(c))
def test_reader_closing_early_ends_quietly_with_the_usual_status(files, command):
    rc, err = _closed_reader(*command, cwd=files)
    assert rc == 0 and err == "", (rc, err)


def test_reader_closing_after_one_line_of_a_long_listing(files):
    proc = subprocess.Popen([sys.executable, "-m", "tether.cli", "inspect", "long.onnx", "--shapes"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=files)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    assert first.strip()
    assert (proc.wait(timeout=300), proc.stderr.read()) == (0, "")


def test_files_asked_for_are_written_even_when_the_reader_closes_early(files):
    rc, err = _closed_reader("compare", "m.onnx", "--html", "closed.html", cwd=files)
    assert (rc, err) == (0, "")
    assert "<html" in (files / "closed.html").read_text().lower()
    rc, err = _closed_reader("quantize", "m.onnx", "--data", "calib.npz", "-o", "closed.int8.onnx",
                             "--trt-cache", "closed.cache", "--eval-samples", "8", cwd=files)
    assert (rc, err) == (0, "")
    assert "QuantizeLinear" in {n.op_type for n in tt.load(files / "closed.int8.onnx").nodes}
    assert tt.quantize.read_tensorrt_cache(files / "closed.cache")
