"""The Vulkan pipeline cache on disk: the first process to compile a model writes what the
driver built to a file under TETHER_CACHE_DIR, named by the device and driver; the next process
reads it back. A corrupt file, one for another device, and a folder that cannot be written never
fail a compile: the compile report says what became of the file, and the outputs still agree
with the CPU engine. Each compile runs in a fresh process (a device's pipelines are kept in
memory for the life of a process), under the validation layer."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from _vulkan import requires_vulkan

pytestmark = requires_vulkan

SCRIPT = """
import json, numpy as np, tether as tt
from tether import _core
from onnx import helper, numpy_helper, TensorProto
rng = np.random.default_rng(0)
w = numpy_helper.from_array(rng.standard_normal((13, 7)).astype(np.float32), "w")
nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Sigmoid", ["h"], ["s"]),
         helper.make_node("Softmax", ["s"], ["y"])]
g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 13])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 7])], [w])
m = tt.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
x = rng.standard_normal((3, 13)).astype(np.float32)
sess = tt.compile(m, device="vulkan")
err = float(np.abs(sess.run({"x": x})["y"] - tt.compile(m).run({"x": x})["y"]).max())
cache = [ln for ln in sess.report.splitlines() if "pipeline cache:" in ln]
print(json.dumps({"line": cache[0] if cache else "", "err": err, "messages": _core._diagnostics()["vulkan"]["messages"]}))
"""


def _compile_in_a_fresh_process(cache_dir: str) -> dict:
    env = {**os.environ, "TETHER_CACHE_DIR": cache_dir, "TETHER_VULKAN_VALIDATION": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["err"] <= 1e-6, out
    assert not out["messages"], out["messages"]
    return out


def _cache_file(root: Path) -> Path:
    files = list((root / "vulkan").glob("pipelines-*.bin"))
    assert len(files) == 1, files
    return files[0]


def _fnv1a(data: bytes) -> int:
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A cache folder after one process compiled the model there."""
    root = tmp_path_factory.mktemp("cache")
    return root, _compile_in_a_fresh_process(str(root))


def test_the_first_compile_writes_the_pipeline_cache_file_for_its_device(written):
    root, first = written
    path = _cache_file(root)
    assert f"none yet at {path}" in first["line"] and f"to {path}" in first["line"], first["line"]
    assert "pipelines built in" in first["line"]
    header = path.read_bytes()[:32]
    magic, size, checksum, _ = struct.unpack("<8sQQQ", header)
    data = path.read_bytes()[32:]
    assert magic == b"tetherPC" and size == len(data) >= 32 and checksum == _fnv1a(data)
    # Vulkan's own header of the data: its length 32 and version 1, this device's vendor and id.
    length, version, vendor, device = struct.unpack("<IIII", data[:16])
    assert (length, version) == (32, 1)
    assert path.name.startswith(f"pipelines-{vendor:04x}-{device:04x}-")
    assert path.name.endswith(data[16:32].hex() + ".bin")  # the pipeline cache UUID


def test_the_next_process_reads_the_pipeline_cache_back(written, tmp_path):
    root, _ = written
    path = _cache_file(root)
    copy = tmp_path / "vulkan" / path.name
    copy.parent.mkdir()
    copy.write_bytes(path.read_bytes())
    second = _compile_in_a_fresh_process(str(tmp_path))
    assert f"read {_size_text(path.stat().st_size - 32)} from {copy}" in second["line"], second["line"]


def _size_text(n: int) -> str:
    return f"{n / 1024:.1f} KB" if 1024 <= n < 1 << 20 else (f"{n} bytes" if n < 1024 else f"{n / (1 << 20):.1f} MB")


@pytest.mark.parametrize("damage", ["flipped-byte", "truncated", "garbage", "other-device"])
def test_a_corrupt_pipeline_cache_file_is_ignored_and_replaced(written, tmp_path, damage):
    root, _ = written
    good = _cache_file(root).read_bytes()
    path = tmp_path / "vulkan" / _cache_file(root).name
    path.parent.mkdir()
    if damage == "flipped-byte":
        bad = bytearray(good)
        bad[len(bad) // 2] ^= 0xFF
        why = "its checksum is wrong"
    elif damage == "truncated":
        bad = bytearray(good[:-10])
        why = "its length is wrong (truncated?)"
    elif damage == "garbage":
        bad = bytearray(os.urandom(3000))
        why = "it is not a tether pipeline cache"
    else:  # a well-formed file whose data names another pipeline cache UUID
        data = bytearray(good[32:])
        data[16:32] = bytes(16)
        bad = bytearray(good[:16] + struct.pack("<Q", _fnv1a(bytes(data))) + good[24:32] + data)
        why = "it is for another device or driver"
    path.write_bytes(bytes(bad))
    out = _compile_in_a_fresh_process(str(tmp_path))
    assert f"{path} ignored: {why}; it will be replaced" in out["line"], out["line"]
    assert path.read_bytes()[:8] == b"tetherPC" and path.read_bytes() != bytes(bad)
    assert "read " in _compile_in_a_fresh_process(str(tmp_path))["line"]


def test_a_cache_folder_that_cannot_be_made_never_fails_a_compile(tmp_path):
    (tmp_path / "a_file").write_text("not a folder")
    out = _compile_in_a_fresh_process(str(tmp_path / "a_file" / "cache"))
    assert "not written: making" in out["line"] and "Not a directory" in out["line"], out["line"]
    assert "pipelines are built anew by each process" in out["line"]


def test_an_empty_tether_cache_dir_turns_the_disk_cache_off(tmp_path):
    out = _compile_in_a_fresh_process("")
    assert "pipeline cache: off" in out["line"], out["line"]
