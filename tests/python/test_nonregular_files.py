"""Files that are not regular files: a FIFO, a device, a socket or a folder given where tether
reads a file (a model, its external data, an input archive, a golden bundle, ONNX test data, the
Vulkan pipeline cache) is refused with a typed error naming the path and what it is, before
anything is read, so nothing blocks. And saving never destroys data: an external data location
that is the model file itself, or that leads outside the model's folder through a symbolic
link, is refused before anything is written."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
import tether as tt
from _vulkan import requires_vulkan
from onnx import TensorProto, helper, numpy_helper
from tether.parity import GoldenError, load_golden, load_npz, model_sha256, read_onnx_test_dir, save_golden

N = 2048
W = np.arange(N, dtype=np.float32) * 0.5
X = np.linspace(-1.0, 1.0, N, dtype=np.float32)


def add_model(external: str | None = None) -> onnx.ModelProto:
    """y = x + w, with w's 8 KB inside the model or in the external file `external`."""
    w = numpy_helper.from_array(W, "w")
    if external is not None:
        w.ClearField("raw_data")
        w.data_location = TensorProto.EXTERNAL
        for key, value in (("location", external), ("offset", "0"), ("length", str(W.nbytes))):
            entry = w.external_data.add()
            entry.key, entry.value = key, value
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def write_model(path: Path, external: str | None = None) -> Path:
    path.write_bytes(add_model(external).SerializeToString())
    return path


@contextlib.contextmanager
def fifo(path: Path) -> Iterator[Path]:
    """A FIFO with no writer at `path`. Should a read block on it after all, a writer opens and
    closes it after 20 s, so the reader sees an empty file and the test fails instead of hanging."""
    os.mkfifo(path)
    done = threading.Event()

    def unblock() -> None:
        if done.wait(20):
            return
        while not done.is_set():
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError as e:  # ENXIO: no reader is waiting yet
                if e.errno not in (errno.ENXIO, errno.ENOENT):
                    return
            time.sleep(0.1)

    thread = threading.Thread(target=unblock, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        done.set()
        thread.join(5)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A folder with a short path: a Unix socket's path must fit in 108 bytes."""
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        yield Path(d)


# -------------------------------------------------------------------------- the model file

@pytest.mark.timeout(60)
def test_a_fifo_as_the_model_path_is_refused_by_load_and_compile_without_blocking(tmp_path):
    with fifo(tmp_path / "m.onnx") as p:
        with pytest.raises(tt.ModelError, match=rf"'{p}' is a FIFO, not a regular file"):
            tt.load(p)
        with pytest.raises(tt.ModelError, match=rf"'{p}' is a FIFO, not a regular file"):
            tt.compile(str(p), threads=1)


def test_a_directory_as_the_model_path_is_refused(tmp_path):
    (tmp_path / "m.onnx").mkdir()
    with pytest.raises(tt.ModelError, match=r"m\.onnx' is a directory, not a regular file"):
        tt.load(tmp_path / "m.onnx")


def test_a_device_behind_a_symlink_as_the_model_path_is_refused(tmp_path):
    (tmp_path / "m.onnx").symlink_to("/dev/zero")
    with pytest.raises(tt.ModelError, match=r"m\.onnx' is a character device, not a regular file"):
        tt.load(tmp_path / "m.onnx")


def test_a_socket_as_the_model_path_is_refused(short_tmp):
    path = short_tmp / "m.onnx"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        with pytest.raises(tt.ModelError, match=r"m\.onnx' is a socket, not a regular file"):
            tt.load(path)


def test_a_symlink_to_a_regular_model_file_still_loads(tmp_path):
    real = write_model(tmp_path / "real.onnx")
    (tmp_path / "link.onnx").symlink_to(real)
    y = tt.compile(tt.load(tmp_path / "link.onnx"), threads=1).run({"x": X})["y"]
    np.testing.assert_array_equal(y, X + W)


# -------------------------------------------------------------------------- external data

@pytest.mark.timeout(60)
def test_a_fifo_as_external_data_is_refused_naming_the_file(tmp_path):
    p = write_model(tmp_path / "m.onnx", external="w.bin")
    with fifo(tmp_path / "w.bin"):
        with pytest.raises(tt.ExternalDataError, match=r"initializer 'w'.*w\.bin' is a FIFO, not a regular file"):
            tt.load(p)


def test_a_directory_as_external_data_is_refused(tmp_path):
    p = write_model(tmp_path / "m.onnx", external="w.bin")
    (tmp_path / "w.bin").mkdir()
    with pytest.raises(tt.ExternalDataError, match=r"w\.bin' is a directory, not a regular file"):
        tt.load(p)


def test_external_data_through_a_symlink_to_a_regular_file_inside_still_loads(tmp_path):
    p = write_model(tmp_path / "m.onnx", external="w.bin")
    W.tofile(tmp_path / "weights.raw")
    (tmp_path / "w.bin").symlink_to("weights.raw")
    y = tt.compile(tt.load(p), threads=1).run({"x": X})["y"]
    np.testing.assert_array_equal(y, X + W)


# -------------------------------------------------------------------------- saving

def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("location", ["m.onnx", "./m.onnx", "m2.onnx"])
def test_an_external_data_location_that_is_the_model_file_is_refused_before_writing(tmp_path, location):
    src = write_model(tmp_path / "m.onnx")
    model = tt.load(src)
    out = tmp_path / ("m2.onnx" if location == "m2.onnx" else "m.onnx")
    before = _snapshot(tmp_path)
    with pytest.raises(tt.ArgumentError, match=rf"external data location '{location}' is the model file itself"):
        model.save(out, external_data=True, location=location)
    assert _snapshot(tmp_path) == before
    np.testing.assert_array_equal(tt.compile(tt.load(src), threads=1).run({"x": X})["y"], X + W)


def test_an_external_data_location_through_a_symlink_out_of_the_folder_is_refused(tmp_path):
    model = tt.load(write_model(tmp_path / "m.onnx"))
    (tmp_path / "d").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "d" / "link").symlink_to(tmp_path / "outside")
    with pytest.raises(tt.ArgumentError, match=r"location 'link/w\.bin' leads through a symbolic link to .*outside"):
        model.save(tmp_path / "d" / "m.onnx", external_data=True, location="link/w.bin")
    assert os.listdir(tmp_path / "outside") == []
    assert sorted(os.listdir(tmp_path / "d")) == ["link"]


def test_an_external_data_location_naming_a_folder_is_refused(tmp_path):
    model = tt.load(write_model(tmp_path / "m.onnx"))
    with pytest.raises(tt.ArgumentError, match=r"location 'sub/' names a folder, not a file"):
        model.save(tmp_path / "out.onnx", external_data=True, location="sub/")
    assert not (tmp_path / "out.onnx").exists() and not (tmp_path / "sub").exists()


def test_external_data_in_a_subfolder_and_through_a_symlink_inside_still_round_trips(tmp_path):
    model = tt.load(write_model(tmp_path / "m.onnx"))
    (tmp_path / "d" / "real").mkdir(parents=True)
    (tmp_path / "d" / "link").symlink_to("real")
    for location in ("sub/w.bin", "link/w.bin"):
        model.save(tmp_path / "d" / "m.onnx", external_data=True, location=location)
        y = tt.compile(tt.load(tmp_path / "d" / "m.onnx"), threads=1).run({"x": X})["y"]
        np.testing.assert_array_equal(y, X + W)
    assert (tmp_path / "d" / "real" / "w.bin").stat().st_size == W.nbytes


# -------------------------------------------------------------------------- files the Python layer reads

@pytest.mark.timeout(60)
def test_load_npz_refuses_a_fifo_a_folder_and_a_device(tmp_path):
    with fifo(tmp_path / "x.npz") as p:
        with pytest.raises(tt.ArgumentError, match=rf"input file '{p}' is a FIFO, not a regular file"):
            load_npz(p)
    (tmp_path / "d.npz").mkdir()
    with pytest.raises(tt.ArgumentError, match=r"d\.npz' is a directory, not a regular file"):
        load_npz(tmp_path / "d.npz")
    with pytest.raises(tt.ArgumentError, match=r"input file '/dev/zero' is a character device, not a regular file"):
        load_npz("/dev/zero")


def test_load_npz_still_reads_an_archive_behind_a_symlink(tmp_path):
    np.savez(tmp_path / "real.npz", x=X)
    (tmp_path / "x.npz").symlink_to("real.npz")
    np.testing.assert_array_equal(load_npz(tmp_path / "x.npz")["x"], X)


@pytest.mark.timeout(60)
def test_calibration_data_given_as_a_fifo_path_is_refused(tmp_path):
    model = tt.load(write_model(tmp_path / "m.onnx"))
    with fifo(tmp_path / "calib.npz") as p:
        with pytest.raises(tt.ArgumentError, match=rf"input file '{p}' is a FIFO, not a regular file"):
            tt.quantize.static(model, str(p))


@pytest.mark.timeout(60)
def test_the_quantize_cli_refuses_a_fifo_as_data(tmp_path, capsys):
    from tether.cli import main

    model = write_model(tmp_path / "m.onnx")
    with fifo(tmp_path / "calib.npz") as p:
        assert main(["quantize", str(model), "--data", str(p), "-o", str(tmp_path / "q.onnx")]) == 2
    assert f"--data '{p}' is a FIFO, not a regular file" in capsys.readouterr().err
    assert not (tmp_path / "q.onnx").exists()


@pytest.mark.timeout(60)
def test_a_golden_bundle_whose_sample_or_index_is_a_fifo_is_refused(tmp_path):
    bundle = save_golden(tmp_path / "golden", [({"x": X}, {"y": X + W})])
    sample = bundle / "sample_0.npz"
    np.testing.assert_array_equal(load_golden(bundle).samples[0][1]["y"], X + W)
    sample.unlink()
    with fifo(sample):
        with pytest.raises(GoldenError, match=r"golden sample file '.*sample_0\.npz' is a FIFO, not a regular file"):
            load_golden(bundle)
    sample.unlink()
    index = bundle / "golden.json"
    doc = json.loads(index.read_text())
    index.unlink()
    with fifo(index):
        with pytest.raises(GoldenError, match=r"golden bundle index '.*golden\.json' is a FIFO, not a regular file"):
            load_golden(bundle)
    assert doc["format"] == "tether.golden"


@pytest.mark.timeout(60)
def test_onnx_test_data_that_is_a_fifo_is_refused(tmp_path):
    data_set = tmp_path / "test_data_set_0"
    data_set.mkdir()
    (data_set / "output_0.pb").write_bytes(numpy_helper.from_array(X, "y").SerializeToString())
    with fifo(data_set / "input_0.pb"):
        with pytest.raises(GoldenError, match=r"ONNX test data file '.*input_0\.pb' is a FIFO, not a regular file"):
            read_onnx_test_dir(tmp_path)


@pytest.mark.timeout(60)
def test_model_sha256_refuses_a_fifo(tmp_path):
    with fifo(tmp_path / "m.onnx") as p:
        with pytest.raises(tt.ModelError, match=rf"model file '{p}' is a FIFO, not a regular file"):
            model_sha256(p)


# -------------------------------------------------------------------------- the Vulkan pipeline cache

PROBE = """
import json, sys, numpy as np, tether as tt
m = tt.load(sys.argv[1])
x = np.linspace(-1, 1, int(sys.argv[2]), dtype=np.float32)
sess = tt.compile(m, device="vulkan")
y = sess.run({"x": x})["y"]
line = [ln for ln in sess.report.splitlines() if "pipeline cache:" in ln]
# VmHWM: this program's own peak (ru_maxrss would carry over the parent's from before exec).
hwm = [ln for ln in open("/proc/self/status") if ln.startswith("VmHWM:")][0]
print(json.dumps({"line": line[0] if line else "", "y": y.tolist(), "peak_mb": int(hwm.split()[1]) // 1024}))
"""


def _vulkan_compile(model: Path, cache_dir: Path) -> dict:
    env = {**os.environ, "TETHER_CACHE_DIR": str(cache_dir)}
    done = subprocess.run([sys.executable, "-c", PROBE, str(model), str(N)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(np.asarray(out["y"], np.float32), X + W, rtol=1e-6)
    return out


@pytest.fixture(scope="module")
def cache_name(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The pipeline cache file's name on this device, as a first compile writes it."""
    root = tmp_path_factory.mktemp("vk")
    _vulkan_compile(write_model(root / "m.onnx"), root / "cache")
    (name,) = [p.name for p in (root / "cache" / "vulkan").glob("pipelines-*.bin")]
    return name


def _not_regular(kind: str, folder: Path) -> Path:
    if kind == "directory":
        target = folder / "a_dir"
        target.mkdir()
        (target / "keep").write_text("kept")
    elif kind == "FIFO":
        target = folder / "a_fifo"
        os.mkfifo(target)
    else:
        target = Path("/dev/zero")
    return target


@requires_vulkan
@pytest.mark.parametrize("kind, what, linked", [
    ("directory", "a directory", False), ("directory", "a directory", True), ("FIFO", "a FIFO", False),
    ("FIFO", "a FIFO", True), ("device", "a character device", True)])  # a device is reached through a link
def test_a_pipeline_cache_path_that_is_not_a_regular_file_is_skipped_and_left_in_place(tmp_path, cache_name, kind,
                                                                                        what, linked):
    model = write_model(tmp_path / "m.onnx")
    path = tmp_path / "cache" / "vulkan" / cache_name
    path.parent.mkdir(parents=True)
    target = _not_regular(kind, tmp_path)
    if linked:
        path.symlink_to(target)
    else:
        target.rename(path)
        target = path
    for _ in range(2):  # nothing is written, so the next process finds the same thing
        out = _vulkan_compile(model, tmp_path / "cache")
        assert f"'{path}' is {what}, not a regular file; ignored and left in place" in out["line"], out["line"]
    assert path.is_symlink() == linked
    if kind == "directory":
        assert (target / "keep").read_text() == "kept"
    assert os.listdir(path.parent) == [cache_name]  # no temporary file left behind


@requires_vulkan
def test_an_oversized_pipeline_cache_file_is_not_read_and_is_replaced(tmp_path, cache_name):
    model = write_model(tmp_path / "m.onnx")
    path = tmp_path / "cache" / "vulkan" / cache_name
    path.parent.mkdir(parents=True)
    sparse = tmp_path / "sparse.bin"
    with open(sparse, "wb") as f:
        f.truncate(512 << 20)
    path.symlink_to(sparse)
    out = _vulkan_compile(model, tmp_path / "cache")
    assert f"{path} ignored: it holds 512.0 MB, over the 64.0 MB a pipeline cache may take" in out["line"], out["line"]
    # Generous: a compile of this model takes well under 200 MB; reading the file would add 512.
    assert out["peak_mb"] < 400, out
    assert sparse.stat().st_size == 512 << 20  # the link was replaced, not the file it led to
    assert not path.is_symlink() and path.read_bytes()[:8] == b"tetherPC"
    assert "read " in _vulkan_compile(model, tmp_path / "cache")["line"]
