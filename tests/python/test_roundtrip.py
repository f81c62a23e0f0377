"""Load and save real torch-exported models: the files stay valid ONNX and compute bit for bit
what the originals compute."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import tether as tt
from _onnx_oracle import run_ort, structure


@pytest.mark.parametrize("source", ["embedded", "external"])
@pytest.mark.parametrize("target", ["embedded", "external"])
def test_roundtrip_passes_full_check_and_is_bitwise_identical_in_onnxruntime(exported, source, target, tmp_path):
    src = exported.path if source == "embedded" else exported.external_path
    model = tt.load(src)
    out = tmp_path / "resaved.onnx"
    files = model.save(out, external_data=target == "external")

    assert files[0] == out
    if target == "external":
        assert files == [out, tmp_path / "resaved.onnx.data"]
    else:
        assert files == [out] and not (tmp_path / "resaved.onnx.data").exists()
    onnx.checker.check_model(str(out), full_check=True)
    assert structure(out) == structure(src)
    for batch in (1, 3):
        feeds = exported.inputs(batch, seed=batch)
        expected = run_ort(src, feeds)
        got = run_ort(out, feeds)
        for e, g in zip(expected, got, strict=True):
            assert e.dtype == g.dtype and e.shape == g.shape
            assert e.tobytes() == g.tobytes()


def test_to_bytes_and_load_bytes_roundtrip(exported):
    model = tt.load(exported.path)
    data = model.to_bytes()
    assert structure_from_bytes(data) == structure(exported.path)
    again = tt.load(data)
    assert again.to_bytes() == data  # the writer is deterministic


def test_copy_serializes_to_the_same_bytes(exported):
    model = tt.load(exported.external_path)
    model.infer_shapes()
    assert model.copy().to_bytes() == model.to_bytes()


def structure_from_bytes(data: bytes):
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "m.onnx"
        p.write_bytes(data)
        return structure(p)


def test_initializers_match_onnx_numpy_helper(exported):
    model = tt.load(exported.external_path)
    proto = onnx.load(str(exported.external_path))
    assert model.initializer_names == [t.name for t in proto.graph.initializer]
    for t in proto.graph.initializer:
        expected = onnx.numpy_helper.to_array(t)
        got = model.initializer(t.name)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert np.array_equal(got, expected)
        assert not got.flags.writeable


def test_saving_over_the_loaded_files_keeps_the_weights(exported, tmp_path):
    # The model borrows its weights from the mapped files; saving over those files must not
    # pull them out from under it.
    path = tmp_path / "m.onnx"
    tt.load(exported.path).save(path, external_data=True)
    before = structure(path)
    model = tt.load(path)
    model.save(path, external_data=True)
    model.save(path, external_data=True)
    assert structure(path) == before
    assert structure(path)["graph"]["initializers"] == structure(exported.path)["graph"]["initializers"]


def test_external_data_offsets_are_aligned_and_small_tensors_stay_inside(exported, tmp_path):
    path = tmp_path / "m.onnx"
    tt.load(exported.path).save(path, external_data=True, size_threshold=1024, alignment=4096)
    proto = onnx.load(str(path), load_external_data=False)
    for t in proto.graph.initializer:
        nbytes = onnx.numpy_helper.to_array(t).nbytes if t.data_location != onnx.TensorProto.EXTERNAL else None
        if t.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in t.external_data}
            assert info["location"] == "m.onnx.data"
            assert int(info["offset"]) % 4096 == 0
        else:
            assert nbytes is not None and nbytes < 1024


def test_custom_location_in_a_subfolder(exported, tmp_path):
    path = tmp_path / "m.onnx"
    files = tt.load(exported.path).save(path, external_data=True, location="weights/m.bin")
    assert files == [path, tmp_path / "weights" / "m.bin"]
    assert structure(path) == structure(exported.path)


def test_model_built_with_onnx_helper_keeps_subgraphs_functions_and_metadata(tmp_path):
    from onnx import TensorProto, helper

    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then",
                               [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, ["n", 4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else",
                               [], [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["n", 4])])
    fn = helper.make_function("local", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
                              [helper.make_opsetid("", 20)])
    nodes = [
        helper.make_node("If", ["cond"], ["z"], then_branch=then_g, else_branch=else_g, name="branch"),
        helper.make_node("Twice", ["z"], ["y"], domain="local", name="twice"),
    ]
    graph = helper.make_graph(nodes, "g", [cond, x], [y], doc_string="a graph")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("local", 1)],
                              functions=[fn], producer_name="hand", ir_version=10)
    helper.set_model_props(model, {"author": "tests", "task": "roundtrip"})
    src = tmp_path / "src.onnx"
    onnx.save(model, str(src))

    loaded = tt.load(src)
    assert loaded.metadata == {"author": "tests", "task": "roundtrip"}
    assert loaded.opset == {"ai.onnx": 20, "local": 1}
    assert [n.op_type for n in loaded.nodes] == ["If", "Twice"]
    then_nodes = loaded.nodes[0].attributes["then_branch"]["nodes"]
    assert [n[1] for n in then_nodes] == ["Relu"]
    out = tmp_path / "out.onnx"
    loaded.save(out)
    onnx.checker.check_model(str(out), full_check=True)
    assert structure(out) == structure(src)
    for flag in (True, False):
        feeds = {"cond": np.array(flag), "x": np.arange(-4, 4, dtype=np.float32).reshape(2, 4)}
        assert run_ort(out, feeds)[0].tobytes() == run_ort(src, feeds)[0].tobytes()
