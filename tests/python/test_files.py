"""Saving never destroys data: over the model's own (mapped) files, into a read-only folder,
onto a full disk, the old files stay intact or the new ones are complete.

The read-only folder and the full disk are real file systems: small tmpfs mounts made by the
test (as root, which `make test` runs as on a Debian machine).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
import tether as tt
from _mounts import tmpfs
from onnx import TensorProto, helper, numpy_helper
from tether.parity import save_golden


def mlp(seed: int, hidden: int = 64) -> onnx.ModelProto:
    """x[N, 32] -> Gemm(hidden) -> Relu -> Gemm(4): weights of 32*hidden + 4*hidden floats."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1)]
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w1", (hidden, 32)), ("b1", (hidden,)), ("w2", (4, hidden)), ("b2", (4,)))]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


X = np.random.default_rng(7).standard_normal((3, 32)).astype(np.float32)


def output(model) -> np.ndarray:
    return tt.compile(model, threads=1).run({"x": X})["y"]


def reference(proto: onnx.ModelProto) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": X})[0]


def leftovers(folder: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


def test_saving_over_the_file_it_was_loaded_from(tmp_path):
    a, b = mlp(1), mlp(2)
    path = tmp_path / "m.onnx"
    onnx.save(a, path)
    model = tt.load(path)
    tt.load(b.SerializeToString()).save(path)
    np.testing.assert_allclose(output(tt.load(path)), reference(b), rtol=1e-5, atol=1e-5)
    # The model loaded before is whole: the new file was renamed over the old one, whose pages
    # any mapping of the model keeps.
    np.testing.assert_allclose(output(model), reference(a), rtol=1e-5, atol=1e-5)
    model.save(path)
    np.testing.assert_allclose(output(tt.load(path)), reference(a), rtol=1e-5, atol=1e-5)
    assert leftovers(tmp_path, {"m.onnx"}) == []


def test_saving_over_its_own_mapped_external_data(tmp_path):
    a, b = mlp(1), mlp(2)
    path = tmp_path / "m.onnx"
    tt.load(a.SerializeToString()).save(path, external_data=True, size_threshold=64)
    model = tt.load(path)  # weights mapped from m.onnx.data
    session = tt.compile(model, threads=1)
    # Saving the mapped model over its own files, then another model over them.
    model.save(path, external_data=True, size_threshold=64)
    np.testing.assert_allclose(output(tt.load(path)), reference(a), rtol=1e-5, atol=1e-5)
    tt.load(b.SerializeToString()).save(path, external_data=True, size_threshold=64)
    np.testing.assert_allclose(output(tt.load(path)), reference(b), rtol=1e-5, atol=1e-5)
    # The model and the session made from the replaced files still see the old weights.
    np.testing.assert_allclose(output(model), reference(a), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(session.run({"x": X})["y"], reference(a), rtol=1e-5, atol=1e-5)
    assert leftovers(tmp_path, {"m.onnx", "m.onnx.data"}) == []


def test_saving_into_a_read_only_folder_raises_write_error_and_changes_nothing(tmp_path):
    with tmpfs(tmp_path / "ro", "1m") as folder:
        onnx.save(mlp(1), folder / "m.onnx")
        before = (folder / "m.onnx").read_bytes()
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        for external in (False, True):
            with pytest.raises(tt.WriteError, match=r"m\.onnx.*: cannot create a file beside it: Read-only file system"):
                tt.load(mlp(2).SerializeToString()).save(folder / "m.onnx", external_data=external, size_threshold=64)
        assert (folder / "m.onnx").read_bytes() == before
        assert leftovers(folder, {"m.onnx"}) == []


@pytest.mark.parametrize("external", [False, True])
def test_saving_onto_a_full_disk_keeps_the_old_files(tmp_path, external):
    small, big = mlp(1, hidden=8), mlp(2, hidden=4096)  # about 1.5 KB and 580 KB of weights
    with tmpfs(tmp_path / "full", "256k") as folder:
        path = folder / "m.onnx"
        kept = tt.load(small.SerializeToString()).save(path, external_data=external, size_threshold=64)
        before = {p.name: p.read_bytes() for p in kept}
        with pytest.raises(tt.WriteError, match=r"m\.onnx.*: (write failed|flushing to disk failed): "
                                                r"No space left on device"):
            tt.load(big.SerializeToString()).save(path, external_data=external, size_threshold=64)
        assert {p.name: p.read_bytes() for p in kept} == before
        assert leftovers(folder, set(before)) == []
        np.testing.assert_allclose(output(tt.load(path)), reference(small), rtol=1e-5, atol=1e-5)


def test_a_golden_bundle_onto_a_full_disk_keeps_the_old_bundle(tmp_path):
    rng = np.random.default_rng(0)
    with tmpfs(tmp_path / "full", "256k") as folder:
        old = [({"x": X}, {"y": reference(mlp(1))})]
        save_golden(folder / "bundle", old)
        listing = sorted((p.name, p.read_bytes()) for p in (folder / "bundle").iterdir())
        huge = [({"x": rng.standard_normal((256, 256)).astype(np.float32)}, {"y": X}) for _ in range(4)]
        with pytest.raises(OSError, match="No space left on device"):
            save_golden(folder / "bundle", huge, overwrite=True)
        assert sorted((p.name, p.read_bytes()) for p in (folder / "bundle").iterdir()) == listing
        assert leftovers(folder, {"bundle"}) == []
