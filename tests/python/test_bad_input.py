"""Bad input gets a typed exception that names what is wrong and where; never a crash or hang."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
import tether as tt
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper


def tiny_model(initializer: TensorProto | None = None, nodes=None, value_info=None) -> onnx.ModelProto:
    """x -> Add(x, w) -> y, with w given or a float32[4] of ones."""
    w = initializer if initializer is not None else numpy_helper.from_array(np.ones(4, np.float32), "w")
    graph = helper.make_graph(
        nodes if nodes is not None else [helper.make_node("Add", ["x", w.name], ["y"], name="add")],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        initializer=[w],
        value_info=value_info or [],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)


def write(tmp_path: Path, model: onnx.ModelProto, name: str = "m.onnx") -> Path:
    p = tmp_path / name
    p.write_bytes(model.SerializeToString())
    return p


def external_tensor(name: str, location: str, offset: int | None = None, length: int | None = None,
                    dims=(4,)) -> TensorProto:
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(dims))
    t.data_location = TensorProto.EXTERNAL
    entries = {"location": location}
    if offset is not None:
        entries["offset"] = str(offset)
    if length is not None:
        entries["length"] = str(length)
    for k, v in entries.items():
        t.external_data.add(key=k, value=v)
    return t


# ---- files that are not (whole) ONNX models ------------------------------------------------


def test_missing_file_raises_model_not_found(tmp_path):
    with pytest.raises(tt.ModelNotFoundError, match="no such file") as e:
        tt.load(tmp_path / "nope.onnx")
    assert isinstance(e.value, tt.ModelError) and isinstance(e.value, FileNotFoundError)
    assert "nope.onnx" in str(e.value)


def test_folder_instead_of_file_raises_model_error(tmp_path):
    with pytest.raises(tt.ModelError, match="not a regular file"):
        tt.load(tmp_path)


@pytest.mark.parametrize(
    "data",
    [b"", b"hello, world: this is text, not a model\n", b"\x89PNG\r\n\x1a\n" + bytes(range(256)),
     numpy_helper.from_array(np.ones(3, np.float32), "t").SerializeToString()],
    ids=["empty", "text", "png", "tensor-proto"],
)
def test_bytes_that_are_not_onnx_raise_parse_error(data, tmp_path):
    with pytest.raises(tt.ParseError):
        tt.load(data)
    p = tmp_path / "x.onnx"
    p.write_bytes(data)
    with pytest.raises(tt.ParseError, match="x.onnx"):
        tt.load(p)


@pytest.mark.parametrize("fraction", [0.1, 0.3, 0.5, 0.7, 0.9, 0.99])
def test_truncated_file_raises_parse_error_naming_the_byte(fraction, tmp_path):
    data = tiny_model(numpy_helper.from_array(np.arange(1000, dtype=np.float32), "w")).SerializeToString()
    cut = data[: int(len(data) * fraction)]
    p = tmp_path / "cut.onnx"
    p.write_bytes(cut)
    with pytest.raises(tt.ParseError, match=r"cut\.onnx.*(byte \d+|malformed|no graph)"):
        tt.load(p)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_corrupted_bytes_raise_tether_errors_only(data):
    model = tiny_model(numpy_helper.from_array(np.arange(4, dtype=np.float32), "w"))
    blob = bytearray(model.SerializeToString())
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(blob) - 1))
        blob[i] = data.draw(st.integers(0, 255))
    try:
        m = tt.load(bytes(blob))
        # Whatever still parses must be usable: inspect it, infer it, write it back.
        m.summary()
        m.infer_shapes()
        tt.load(m.to_bytes())
    except tt.ModelError:
        pass


def test_protobuf_length_far_beyond_the_file_raises_parse_error():
    # Field 7 (graph), length-delimited, declaring 2 GiB in a 10-byte file.
    data = bytes([0x3A, 0x80, 0x80, 0x80, 0x80, 0x08]) + b"abcd"
    with pytest.raises(tt.ParseError, match="declares 2147483648 bytes but only 4 remain"):
        tt.load(data)


# ---- tensors --------------------------------------------------------------------------------


def test_unknown_tensor_dtype_raises_model_error_naming_the_tensor(tmp_path):
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    w.data_type = 99
    with pytest.raises(tt.ModelError, match=r"initializer 'w'.*unknown data type 99"):
        tt.load(write(tmp_path, tiny_model(w)))


def test_unknown_elem_type_in_a_value_type_raises_model_error(tmp_path):
    vi = helper.make_tensor_value_info("y2", TensorProto.FLOAT, [4])
    vi.type.tensor_type.elem_type = 77
    with pytest.raises(tt.ModelError, match=r"value 'y2'.*unknown data type 77"):
        tt.load(write(tmp_path, tiny_model(value_info=[vi])))


def test_negative_tensor_dim_raises_model_error(tmp_path):
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    w.dims[0] = -4
    with pytest.raises(tt.ModelError, match=r"initializer 'w': dim 0 is -4"):
        tt.load(write(tmp_path, tiny_model(w)))


def test_negative_dim_in_a_value_type_raises_model_error(tmp_path):
    vi = helper.make_tensor_value_info("y2", TensorProto.FLOAT, [4])
    vi.type.tensor_type.shape.dim[0].dim_value = -3
    with pytest.raises(tt.ModelError, match=r"value 'y2': dim 0 is -3"):
        tt.load(write(tmp_path, tiny_model(value_info=[vi])))


def test_overflowing_dims_raise_model_error(tmp_path):
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    del w.dims[:]
    w.dims.extend([2**40, 2**40])
    with pytest.raises(tt.ModelError, match=r"initializer 'w'.*overflow"):
        tt.load(write(tmp_path, tiny_model(w)))


def test_declared_size_far_larger_than_the_data_raises_without_allocating(tmp_path):
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    del w.dims[:]
    w.dims.extend([10**6, 10**6])  # 4 TB of float32 declared, 16 bytes held
    with pytest.raises(tt.ModelError, match=r"initializer 'w': raw_data holds 16 bytes, but float32\[1000000, 1000000\] needs 4000000000000 bytes"):
        tt.load(write(tmp_path, tiny_model(w)))


def test_typed_field_with_the_wrong_count_raises_model_error(tmp_path):
    w = helper.make_tensor("w", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])
    del w.float_data[-1]
    with pytest.raises(tt.ModelError, match=r"initializer 'w'.*needs 4 entries in float_data, found 3"):
        tt.load(write(tmp_path, tiny_model(w)))


def test_typed_field_of_the_wrong_kind_raises_model_error(tmp_path):
    w = helper.make_tensor("w", TensorProto.INT64, [2], [1, 2])
    w.data_type = TensorProto.FLOAT
    with pytest.raises(tt.ModelError, match=r"holds values in int64_data, but float32 tensors use float_data"):
        tt.load(write(tmp_path, tiny_model(w)))


# ---- graph structure ------------------------------------------------------------------------


def test_node_input_naming_no_value_raises_graph_error(tmp_path):
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="add")]
    with pytest.raises(tt.GraphError, match=r"Add 'add' input 1 'ghost' names no value"):
        tt.load(write(tmp_path, tiny_model(nodes=nodes)))


def test_graph_output_naming_no_value_raises_graph_error(tmp_path):
    model = tiny_model()
    model.graph.output[0].name = "nowhere"
    with pytest.raises(tt.GraphError, match=r"output 'nowhere' names no value"):
        tt.load(write(tmp_path, model))


def test_cycle_raises_graph_error_naming_the_nodes(tmp_path):
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
        helper.make_node("Identity", ["a"], ["y"], name="out"),
    ]
    with pytest.raises(tt.GraphError, match=r"cycle: .*'first'.*'second'|cycle: .*'second'.*'first'"):
        tt.load(write(tmp_path, tiny_model(nodes=nodes)))


def test_self_loop_raises_graph_error(tmp_path):
    nodes = [helper.make_node("Add", ["x", "y"], ["y"], name="selfish")]
    with pytest.raises(tt.GraphError, match=r"cycle: Add 'selfish' -> Add 'selfish'"):
        tt.load(write(tmp_path, tiny_model(nodes=nodes)))


def test_value_defined_twice_raises_graph_error(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Neg", ["x"], ["y"], name="b")]
    with pytest.raises(tt.GraphError, match=r"output 'y' is already defined"):
        tt.load(write(tmp_path, tiny_model(nodes=nodes)))


def test_duplicate_initializer_raises_graph_error(tmp_path):
    model = tiny_model()
    model.graph.initializer.append(model.graph.initializer[0])
    with pytest.raises(tt.GraphError, match=r"initializer 'w' is defined twice"):
        tt.load(write(tmp_path, model))


def test_node_without_op_type_raises_model_error(tmp_path):
    nodes = [helper.make_node("", ["x", "w"], ["y"], name="nameless")]
    with pytest.raises(tt.ModelError, match=r"node #0 'nameless' has no op_type"):
        tt.load(write(tmp_path, tiny_model(nodes=nodes)))


def test_unsorted_but_acyclic_graph_loads_and_saves_sorted(tmp_path):
    nodes = [helper.make_node("Relu", ["h"], ["y"], name="second"), helper.make_node("Add", ["x", "w"], ["h"], name="first")]
    model = tt.load(write(tmp_path, tiny_model(nodes=nodes)))
    out = tmp_path / "sorted.onnx"
    model.save(out)
    assert [n.name for n in onnx.load(str(out)).graph.node] == ["first", "second"]
    onnx.checker.check_model(str(out), full_check=True)


# ---- external data --------------------------------------------------------------------------


def test_missing_external_data_file_raises_external_data_error(tmp_path):
    model = tiny_model(external_tensor("w", "weights.bin"))
    with pytest.raises(tt.ExternalDataError, match=r"initializer 'w'.*'weights.bin' not found"):
        tt.load(write(tmp_path, model))


@pytest.mark.parametrize("location", ["/etc/passwd", "../outside.bin", "sub/../../outside.bin"])
def test_external_location_outside_the_model_folder_raises(location, tmp_path):
    inner = tmp_path / "model"
    inner.mkdir()
    (tmp_path / "outside.bin").write_bytes(bytes(16))
    (inner / "sub").mkdir()
    with pytest.raises(tt.ExternalDataError, match=r"initializer 'w'.*(absolute|'\.\.')"):
        tt.load(write(inner, tiny_model(external_tensor("w", location))))


def test_symlink_leading_outside_the_model_folder_raises(tmp_path):
    inner = tmp_path / "model"
    inner.mkdir()
    (tmp_path / "secret.bin").write_bytes(bytes(16))
    os.symlink(tmp_path / "secret.bin", inner / "w.bin")
    with pytest.raises(tt.ExternalDataError, match=r"leads to .*secret.bin.*outside the model's folder"):
        tt.load(write(inner, tiny_model(external_tensor("w", "w.bin"))))


def test_external_offset_beyond_the_end_raises(tmp_path):
    (tmp_path / "w.bin").write_bytes(bytes(16))
    with pytest.raises(tt.ExternalDataError, match=r"offset 64 .*runs past the end of 'w.bin', which holds 16 bytes"):
        tt.load(write(tmp_path, tiny_model(external_tensor("w", "w.bin", offset=64))))


def test_external_length_beyond_the_end_raises(tmp_path):
    (tmp_path / "w.bin").write_bytes(bytes(20))
    big = external_tensor("w", "w.bin", offset=8, dims=(4,))
    with pytest.raises(tt.ExternalDataError, match=r"runs past the end of 'w.bin'"):
        tt.load(write(tmp_path, tiny_model(big)))


def test_external_length_that_disagrees_with_the_dims_raises(tmp_path):
    (tmp_path / "w.bin").write_bytes(bytes(64))
    with pytest.raises(tt.ExternalDataError, match=r"length is 32 bytes, but float32\[4\] needs 16 bytes"):
        tt.load(write(tmp_path, tiny_model(external_tensor("w", "w.bin", length=32))))


def test_external_tensor_claiming_terabytes_raises_without_allocating(tmp_path):
    (tmp_path / "w.bin").write_bytes(bytes(16))
    with pytest.raises(tt.ExternalDataError, match=r"runs past the end"):
        tt.load(write(tmp_path, tiny_model(external_tensor("w", "w.bin", dims=(10**6, 10**6)))))


@pytest.mark.parametrize("key,value", [("offset", "-5"), ("offset", "12abc"), ("length", "")])
def test_external_offset_or_length_that_is_not_a_count_raises(key, value, tmp_path):
    (tmp_path / "w.bin").write_bytes(bytes(16))
    t = external_tensor("w", "w.bin")
    t.external_data.add(key=key, value=value)
    with pytest.raises(tt.ExternalDataError, match=rf"external data {key} '{value}' is not a non-negative integer"):
        tt.load(write(tmp_path, tiny_model(t)))


def test_bytes_with_external_data_need_a_base_dir(tmp_path):
    np.arange(4, dtype=np.float32).tofile(tmp_path / "w.bin")
    data = tiny_model(external_tensor("w", "w.bin")).SerializeToString()
    with pytest.raises(tt.ExternalDataError, match="pass base_dir"):
        tt.load(data)
    model = tt.load(data, base_dir=tmp_path)
    assert np.array_equal(model.initializer("w"), np.arange(4, dtype=np.float32))


# ---- saving ---------------------------------------------------------------------------------


def test_saving_into_a_missing_folder_raises_write_error_and_leaves_nothing(tmp_path):
    model = tt.load(tiny_model().SerializeToString())
    with pytest.raises(tt.WriteError, match="nofolder"):
        model.save(tmp_path / "nofolder" / "m.onnx")
    assert not (tmp_path / "nofolder").exists()


def test_save_rejects_a_location_outside_the_folder(tmp_path):
    model = tt.load(tiny_model().SerializeToString())
    with pytest.raises(tt.ArgumentError, match="'..'"):
        model.save(tmp_path / "m.onnx", external_data=True, location="../w.bin")
    assert list(tmp_path.iterdir()) == []


def test_save_rejects_an_unknown_external_data_mode(tmp_path):
    model = tt.load(tiny_model().SerializeToString())
    with pytest.raises(tt.ArgumentError, match="'auto', 'never' or 'always'"):
        model.save(tmp_path / "m.onnx", external_data="sometimes")


def test_name_that_is_not_utf8_raises_model_error(tmp_path):
    model = tiny_model()
    blob = model.SerializeToString().replace(b"add", b"a\xffd", 1)
    with pytest.raises(tt.ModelError, match=r"node name is not valid UTF-8"):
        tt.load(blob)


@pytest.mark.parametrize("chain", [False, True])
def test_a_convolution_of_an_empty_batch_returns_an_empty_batch(chain):
    # chain: two convs, so the first runs channels last; else one conv channels first.
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    w2 = numpy_helper.from_array(rng.standard_normal((2, 4, 1, 1)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c" if chain else "y"], pads=[1, 1, 1, 1], name="conv")]
    if chain:
        nodes.append(helper.make_node("Conv", ["c", "w2"], ["y"], name="conv2"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, w2])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()
    sess = tt.compile(blob, threads=2)
    x = np.ones((0, 3, 8, 8), np.float32)
    import onnxruntime as ort

    want = ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert sess.run({"x": x})["y"].shape == want.shape == (0, 2 if chain else 4, 8, 8)


@pytest.mark.parametrize("groups,scale,message", [
    (0, 4, "GroupNormalization 'gn': num_groups is 0; it must be >= 1"),
    (3, 4, "num_groups 3 does not divide the 4 channels"),
    (2, 3, "scale has 3 values; it needs one per group (2) or per channel (4)"),
])
def test_group_normalization_with_bad_groups_is_a_shape_error_naming_the_node(groups, scale, message):
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=groups, name="gn")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.ones(scale, np.float32), "s"),
                               numpy_helper.from_array(np.zeros(4, np.float32), "b")])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10).SerializeToString()
    with pytest.raises(tt.ShapeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tt.compile(blob)


def _tile_model() -> bytes:
    """y = Tile(x, repeats): the output's size comes from the values of the input `repeats`."""
    node = helper.make_node("Tile", ["x", "repeats"], ["y"], name="grow")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                                            helper.make_tensor_value_info("repeats", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()


def test_a_size_computed_from_data_past_the_limit_is_a_memory_limit_error_and_the_session_stays_usable():
    sess = tt.compile(_tile_model())
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with pytest.raises(tt.MemoryLimitError, match=r"Tile 'grow': output 'y' of shape \[2000000, 3000000\] \(float32\) "
                                                  r"would take 24000000000000 bytes; a run of this session may take \d+ "
                                                  r"bytes \(compile's max_memory\)"):
        sess.run({"x": x, "repeats": np.array([1_000_000, 1_000_000], np.int64)})
    np.testing.assert_array_equal(sess.run({"x": x, "repeats": np.array([2, 3], np.int64)})["y"], np.tile(x, (2, 3)))
    # It is a MemoryError too, for code that catches those.
    with pytest.raises(MemoryError):
        sess.run({"x": x, "repeats": np.array([1 << 40, 1 << 40], np.int64)})


def test_a_shape_past_int64_elements_is_a_memory_limit_error_naming_the_node():
    # A pad of 6.9e18 made Conv's output [1, 1, 5, 6.9e18], whose element count overflowed in
    # its kernel (engine fuzzer). onnxruntime refuses it too.
    import onnxruntime as ort

    blob = _one_node("Conv", {"x": np.ones((1, 1, 5, 5), _F), "w": np.ones((1, 1, 3, 3), _F)},
                     {"kernel_shape": [3, 3], "pads": [1, 1, 1, 6870774512662422685]})
    feeds = {"x": np.ones((1, 1, 5, 5), _F), "w": np.ones((1, 1, 3, 3), _F)}
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's error types vary by stage
        ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(None, feeds)
    with pytest.raises(tt.MemoryLimitError, match=r"Conv 'n': output 'o0' of shape \[1, 1, 5, 6870774512662422689\] "
                                                  r"would hold more elements than int64 counts"):
        tt.compile(blob).run(feeds)


def test_values_each_near_int64_bytes_are_a_memory_limit_error_before_the_arena_adds_them_up():
    # Expand(x, x) with x = [2**56, 2]: outputs of 2**60 bytes that each fit int64 bytes once
    # overflowed the arena's offsets as it placed them (engine fuzzer).
    nodes = [helper.make_node("Expand", ["s", "s"], ["a"], name="first"), helper.make_node("Neg", ["a"], ["b"], name="second"),
             helper.make_node("Add", ["a", "b"], ["y"], name="third")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()
    sess = tt.compile(blob, optimize=False)
    with pytest.raises(tt.MemoryLimitError, match=r"Expand 'first': output 'a' of shape \[1152921504606846976, 2\] "
                                                  r"\(int64\) would take more bytes than int64 counts"):
        sess.run({"s": np.array([1 << 60, 2], np.int64)})
    with pytest.raises(tt.MemoryLimitError, match=r"Expand 'first': output 'a' of shape \[72057594037927936, 2\] "
                                                  r"\(int64\) would take 1152921504606846976 bytes"):
        sess.run({"s": np.array([1 << 56, 2], np.int64)})
    s = np.array([3, 2], np.int64)
    np.testing.assert_array_equal(sess.run({"s": s})["y"], np.zeros((3, 2), np.int64))


def test_an_empty_tensor_with_vast_other_dims_is_empty():
    # ConstantOfShape of [2**62, 2**63 - 2, 0]: no elements, though the first two dims multiplied
    # overflow int64 (the element count overflowed before it met the 0; engine fuzzer).
    import onnxruntime as ort

    dims = [1 << 62, (1 << 63) - 2, 0]
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["e"], name="fill"), helper.make_node("Shape", ["e"], ["y"])]
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
                              [numpy_helper.from_array(np.array(dims, np.int64), "s")])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()
    want = ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(None, {})[0]
    np.testing.assert_array_equal(want, dims)
    for optimize in (True, False):  # folded at compile, or run
        np.testing.assert_array_equal(tt.compile(blob, optimize=optimize).run({})["y"], dims)


def test_max_memory_bounds_every_value_and_all_of_them_together():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    small = tt.compile(_tile_model(), max_memory=4096)
    np.testing.assert_array_equal(small.run({"x": x, "repeats": np.array([4, 10], np.int64)})["y"], np.tile(x, (4, 10)))
    with pytest.raises(tt.MemoryLimitError, match="would take 4800 bytes; a run of this session may take 4096 bytes"):
        small.run({"x": x, "repeats": np.array([20, 10], np.int64)})
    # Two values each within the limit, together past it.
    nodes = [helper.make_node("Tile", ["x", "r"], ["a"], name="first"), helper.make_node("Neg", ["a"], ["b"], name="second"),
             helper.make_node("Add", ["a", "b"], ["y"], name="third")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([20, 10], np.int64), "r")])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()
    np.testing.assert_array_equal(tt.compile(blob, max_memory=1 << 20).run({"x": x})["y"], np.zeros((40, 30)))
    with pytest.raises(tt.MemoryLimitError, match=r"a run with these input shapes would take \d+ bytes of intermediates, "
                                                  r"scratch and outputs \(the largest, output '\w' of \w+ '\w+', "
                                                  r"\[40, 30\]: 4800 bytes\); a run of this session may take 10000 bytes"):
        tt.compile(blob, max_memory=10000, optimize=False).run({"x": x})


@pytest.mark.parametrize("bad", [0, -1])
def test_max_memory_must_be_a_positive_number_of_bytes(bad):
    with pytest.raises(tt.ArgumentError, match=f"max_memory must be a positive number of bytes, got {bad}"):
        tt.compile(_tile_model(), max_memory=bad)


def _one_node(op: str, feeds: dict, attrs: dict, outputs: int = 1, opset: int | None = None) -> bytes:
    """A model of one node `op` over inputs of unknown shape, as the engine fuzzer builds them."""
    names = [name for name in feeds]
    node = helper.make_node(op, [n if feeds[n] is not None else "" for n in names], [f"o{k}" for k in range(outputs)],
                            name="n", **attrs)
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), None)
                               for n, v in feeds.items() if v is not None],
                              [helper.make_empty_tensor_value_info(f"o{k}") for k in range(outputs)])
    opset = opset or (23 if op == "RotaryEmbedding" else 18)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10).SerializeToString()


_F = np.float32


def _body(inputs: list[str], nodes: list, outputs: list[str]) -> onnx.GraphProto:
    """A Loop or Scan body over float32 values of unknown shape (Loop's counter and condition typed)."""
    types = {"i": TensorProto.INT64, "c": TensorProto.BOOL, "c_out": TensorProto.BOOL}
    return helper.make_graph(nodes, "body", [helper.make_tensor_value_info(n, types.get(n, TensorProto.FLOAT), None)
                                             for n in inputs],
                             [helper.make_tensor_value_info(n, types.get(n, TensorProto.FLOAT), None) for n in outputs])


# Scan: states (a, b), one scan input x; gives the states and one scan output.
_SCAN_BODY = _body(["a", "b", "x"], [helper.make_node("Add", ["a", "x"], ["a2"]), helper.make_node("Mul", ["b", "x"], ["b2"]),
                                     helper.make_node("Identity", ["a2"], ["y"])], ["a2", "b2", "y"])
# Loop: one carried value v; gives the condition, v and one scan output.
_LOOP_BODY = _body(["i", "c", "v"], [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Neg", ["v"], ["v2"]),
                                     helper.make_node("Identity", ["v2"], ["y"])], ["c_out", "v2", "y"])
_FUZZ_FINDINGS = [
    # Inputs ONNX types with one variable, given two types: ScatterND wrote float16 updates as
    # float32 elements past their buffer (a heap overflow).
    ("ScatterND", {"x": np.ones((4, 4), _F), "i": np.zeros((2, 1), np.int64), "u": np.ones((2, 4), np.float16)}, {}, 1,
     r"input 0 \('x'\) is float32 but input 2 \('u'\) is float16; ScatterND takes one element type for these inputs"),
    ("Concat", {"a": np.ones(2, _F), "b": np.ones(2, _F), "c": np.ones(2, np.float64)}, {"axis": 0}, 1,
     r"input 0 \('a'\) is float32 but input 2 \('c'\) is float64; Concat takes one element type"),
    ("Where", {"c": np.ones(2, bool), "a": np.ones(2, np.int32), "b": np.ones(2, np.int64)}, {}, 1,
     r"input 1 \('a'\) is int32 but input 2 \('b'\) is int64; Where takes one element type"),
    # Control flow whose body has more or fewer outputs than the node (a heap overflow in Scan).
    ("Scan", {"a": np.ones(2, _F), "b": np.ones(2, _F), "x": np.ones((3, 2), _F)}, {"body": _SCAN_BODY, "num_scan_inputs": 1},
     4, "the body has 3 inputs and 3 outputs, the node 3 inputs and 4 outputs"),
    ("Scan", {"a": np.ones(2, _F), "b": np.ones(2, _F), "x": np.ones((3, 2), _F)}, {"body": _SCAN_BODY, "num_scan_inputs": 1},
     2, "the body has 3 inputs and 3 outputs, the node 3 inputs and 2 outputs"),
    ("Scan", {"a": np.ones(2, np.int64), "b": np.ones(2, _F), "x": np.ones((0, 2), _F)},
     {"body": _SCAN_BODY, "num_scan_inputs": 1}, 3, "state 0 is int64 but the body's 'a' is float32"),
    ("Scan", {"a": np.ones(2, _F), "x": np.ones((3, 2), _F)}, {"body": _SCAN_BODY, "num_scan_inputs": 1},
     3, "the body has 3 inputs and 3 outputs, the node 2 inputs"),
    ("Loop", {"m": np.array(2, np.int64), "c": np.array(True), "v": np.ones(2, _F)}, {"body": _LOOP_BODY}, 1,
     "the body has 3 inputs and 3 outputs, the node 3 inputs and 1 outputs"),
    ("Loop", {"m": np.array(True), "c": np.array(True), "v": np.ones(2, _F)}, {"body": _LOOP_BODY}, 2,
     r"input 0 \('m'\) is bool; Loop takes int64 there"),
    ("Loop", {"m": np.array(2, np.int64), "c": np.array(1.0, _F), "v": np.ones(2, _F)}, {"body": _LOOP_BODY}, 2,
     r"input 1 \('c'\) is float32; Loop takes bool there"),
    ("ConvTranspose", {"x": np.ones((1, 1, 5, 5), _F), "w": np.ones((1, 1, 3, 2), _F)}, {"kernel_shape": [3, 4]}, 1,
     r"kernel_shape says 4 on spatial axis 1, the weight \[1, 1, 3, 2\] has 2"),
    # A Loop-carried value without its initial value (an empty input name): the kernel copied
    # it from a null pointer.
    ("Loop", {"m": np.array(2, np.int64), "c": np.array(True), "v": None}, {"body": _LOOP_BODY}, 2,
     r"loop-carried value 0 \(input 2\) is empty; each needs an initial value"),
    # A scalar axes input went unchecked by inference and reached the kernel out of range (a
    # wild write); ONNX's axes are 1-D.
    ("ReduceSum", {"x": np.array(3, np.int64), "a": np.array(1, np.int64)}, {}, 1, r"axes must be 1-D, got shape \[\]"),
    # ConvTranspose read a bias of the wrong length past its end, and took more groups than
    # input channels (a heap overflow).
    ("ConvTranspose", {"x": np.ones((2, 2, 6), _F), "w": np.ones((2, 2, 3), _F), "b": np.ones((2, 2, 6), _F)}, {}, 1,
     r"bias \[2, 2, 6\] must be 1-D with one value per output channel \(2\)"),
    ("ConvTranspose", {"x": np.ones((2, 2, 6), _F), "w": np.ones((2, 2, 3), _F), "b": np.ones(5, _F)}, {}, 1,
     r"bias \[5\] must be 1-D with one value per output channel \(2\)"),
    ("ConvTranspose", {"x": np.ones((2, 2, 6), _F), "w": np.ones((2, 2, 3), _F)}, {"group": 255}, 1,
     r"input has 2 channels, which 255 groups do not divide"),
    ("ArgMax", {"x": np.ones((0, 83), np.int16)}, {}, 1,
     r"axis 0 of the input \[0, 83\] is empty; there is no index to return"),
    ("Loop", {"m": np.array(-5, np.int64), "c": np.array(True), "v": np.ones(2, np.int64)}, {"body": _LOOP_BODY}, 2,
     "loop-carried value 0 is int64 but the body's 'v' is float32"),
    ("Loop", {"m": np.array(2, np.int64), "c": np.array(True), "v": np.ones(2, _F)}, {"body": _LOOP_BODY}, 3,
     "the body has 3 inputs and 3 outputs, the node 3 inputs and 3 outputs"),
    # op, inputs (None: omitted), attributes, outputs, the error's message
    ("LayerNormalization", {"x": np.ones((4, 3, 2), _F), "s": np.ones((), _F), "b": np.ones((), _F)}, {"stash_type": 4}, 3,
     "stash_type is uint16; only float"),
    ("LayerNormalization", {"x": np.ones((4, 3), _F), "s": np.ones((2,), _F)}, {}, 1,
     r"scale \(normalising from axis 1\) of shape \[2\] does not broadcast to \[3\]"),
    ("Scatter", {"d": np.ones((4, 4, 2), _F), "i": np.zeros((4, 4, 0), np.int64), "u": np.ones((2, 2, 1), _F)}, {}, 1,
     r"indices \[4, 4, 0\] and updates \[2, 2, 1\] must have the same shape"),
    ("ScatterElements", {"d": np.ones((4, 4), _F), "i": np.zeros((3,), np.int64), "u": np.ones((3,), _F)}, {}, 1,
     r"indices \[3\] must have data's rank 2"),
    ("ScatterND", {"d": np.ones((4,), _F), "i": np.zeros((), np.int64), "u": np.ones((), _F)}, {}, 1,
     "indices must have rank >= 1, got a scalar"),
    ("ScatterND", {"d": np.ones((4, 3), _F), "i": np.zeros((2, 1), np.int64), "u": np.ones((2, 4), _F)}, {}, 1,
     r"updates have shape \[2, 4\], expected \[2, 3\]"),
    ("OneHot", {"i": np.zeros((3,), np.int64), "d": np.array(4, np.int64), "v": np.zeros(3, _F)}, {}, 1,
     r"values must hold two elements \[off, on\], got shape \[3\]"),
    ("PRelu", {"x": np.ones((4, 1, 4), _F), "s": np.ones((1, 3), _F)}, {}, 1,
     r"slope of shape \[1, 3\] does not broadcast to \[4, 1, 4\]"),
    ("GRU", {"x": np.ones((2, 1, 2), _F), "w": np.ones((), _F), "r": np.ones((1, 9, 3), _F)}, {"hidden_size": 3}, 1,
     r"W has shape \[\], expected \[1, 9, 2\]"),
    ("LSTM", {"x": np.ones((2, 1, 4), _F), "w": np.ones((1, 8, 4), _F), "r": np.ones((1, 8, 3), _F)},
     {"hidden_size": 3419541495225858601}, 1, "hidden_size is 3419541495225858601; it must be at most 2"),
    ("LSTM", {"x": np.ones((2, 1, 4), _F), "w": np.ones((1, 8, 4), _F), "r": np.ones((1, 8, 3), _F)}, {"hidden_size": 2}, 1,
     r"R has shape \[1, 8, 3\], expected \[1, 8, 2\]"),
    ("RNN", {"x": np.ones((2, 1, 4), _F), "w": np.ones((1, 5, 4), _F), "r": np.ones((1, 5, 5), _F),
             "b": np.ones((5,), _F)}, {"hidden_size": 5}, 1, r"B has shape \[5\], expected \[1, 10\]"),
    ("Trilu", {"x": np.ones((3, 3), _F), "k": np.zeros((0, 3), np.int64)}, {}, 1, r"k must be a scalar, got shape \[0, 3\]"),
    ("GatherND", {"d": np.ones((2, 4, 1), _F), "i": np.zeros((1, 2), np.int64)}, {"batch_dims": 1}, 1,
     "batch dim 0 is 2 in data and 1 in indices"),
    ("GatherElements", {"d": np.ones((2, 4), _F), "i": np.zeros((3,), np.int64)}, {}, 1,
     "indices have rank 1 and data 2; they must have the same rank"),
    ("BatchNormalization", {"x": np.ones((3,), _F), "s": np.ones(3, _F), "b": np.ones(3, _F), "m": np.ones(3, _F),
                            "v": np.ones(3, _F)}, {}, 1, r"input must have rank >= 2 \(N, C, ...\), got \[3\]"),
    ("BatchNormalization", {"x": np.ones((1, 3, 2), _F), "s": np.ones(2, _F), "b": np.ones(3, _F), "m": np.ones(3, _F),
                            "v": np.ones(3, _F)}, {}, 1, "scale has 2 values for 3 channels"),
    ("InstanceNormalization", {"x": np.ones((2, 3), _F), "s": np.ones(3, _F), "b": np.ones(3, _F)}, {}, 1,
     "input must have rank >= 3"),
    ("LRN", {"x": np.ones((1, 3, 2, 2), _F)}, {"size": 0}, 1, "size is 0; it must be >= 1"),
    ("Softmax", {"x": np.ones((2, 3), _F)}, {"axis": 5}, 1, "axis"),
    ("Softmax", {"x": np.ones((), _F)}, {}, 1, "input must have rank >= 1, got a scalar"),
    ("MeanVarianceNormalization", {"x": np.ones((2, 3), _F)}, {"axes": [0, 7]}, 1, "axes"),
    ("CumSum", {"x": np.ones((2, 3), _F), "a": np.array(4, np.int64)}, {}, 1, "axis"),
    ("CumSum", {"x": np.ones((2, 3), _F), "a": np.zeros((2,), np.int64)}, {}, 1, r"axis must be a scalar, got shape \[2\]"),
    ("Pad", {"x": np.ones((2, 3), _F), "p": np.zeros((2, 2), np.int64)}, {}, 1, r"pads must be 1-D, got shape \[2, 2\]"),
    ("Conv", {"x": np.ones((1, 1, 5, 5), _F), "w": np.ones((1, 1, 3, 4), _F)}, {"kernel_shape": [3, 3]}, 1,
     r"kernel_shape says 3 on spatial axis 1, the weight \[1, 1, 3, 4\] has 4"),
    ("Conv", {"x": np.ones((1, 4, 5, 5), _F), "w": np.ones((3, 2, 3, 3), _F)}, {"group": 2}, 1,
     "the weight's 3 output channels do not split into 2 groups"),
    ("Conv", {"x": np.ones((1, 1, 5, 5), _F), "w": np.ones((2, 1, 3, 3), _F), "b": np.ones(3, _F)}, {}, 1,
     r"bias \[3\] must be 1-D with one value per output channel \(2\)"),
    ("RotaryEmbedding", {"x": np.ones((0, 1, 1, 2), _F), "c": np.ones((1,), _F), "s": np.ones((), _F)}, {}, 1,
     r"cos_cache must be 3-D \[batch, sequence, rot / 2\] without position_ids, got \[1\]"),
    ("RotaryEmbedding", {"x": np.ones((1, 1, 2, 6), _F), "c": np.ones((1, 2, 3), _F), "s": np.ones((1, 2, 3), _F)},
     {"rotary_embedding_dim": 3}, 1, "the rotated size 3 must be even"),
    ("RotaryEmbedding", {"x": np.ones((1, 2, 6), _F), "c": np.ones((1, 2, 3), _F), "s": np.ones((1, 2, 3), _F)}, {}, 1,
     "a 3-D input needs a positive num_heads attribute"),
]


@pytest.mark.parametrize("op,feeds,attrs,outputs,message", _FUZZ_FINDINGS,
                         ids=[f"{c[0]}-{k}" for k, c in enumerate(_FUZZ_FINDINGS)])
def test_engine_fuzzer_findings_are_typed_errors_naming_the_node(op, feeds, attrs, outputs, message):
    # Each was a crash, a heap overwrite or an internal error; onnxruntime refuses them too.
    blob = _one_node(op, feeds, attrs, outputs)
    run_feeds = {n: v for n, v in feeds.items() if v is not None}
    import onnxruntime as ort
    from onnxruntime.capi.onnxruntime_pybind11_state import (
        Fail,
        InvalidArgument,
        InvalidGraph,
        NotImplemented,
        RuntimeException,
    )

    if op != "MeanVarianceNormalization":  # onnxruntime runs it, ignoring an axis past the rank
        with pytest.raises((Fail, InvalidArgument, InvalidGraph, NotImplemented, RuntimeException)):
            ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(None, run_feeds)
    # Attribute checks fire at compile, shape checks once the run gives the shapes.
    # An input's values are only known at run time: those errors are ArgumentErrors.
    with pytest.raises(tt.Error, match=f"{op} 'n': .*{message}") as raised:
        tt.compile(blob).run(run_feeds)
    assert isinstance(raised.value, (tt.ShapeError, tt.ArgumentError)), repr(raised.value)


def test_dynamic_quantize_linear_needs_its_scale_and_zero_point_outputs_as_onnxruntime_does():
    # The kernel once wrote omitted outputs through null pointers. ONNX makes all three outputs
    # required; onnxruntime refuses the node without them, and so does shape inference.
    x = np.linspace(-3, 5, 24, dtype=np.float32).reshape(4, 6)

    def model(outputs):
        node = helper.make_node("DynamicQuantizeLinear", ["x"], outputs, name="dq")
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
                                  [helper.make_tensor_value_info(o, t, None)
                                   for o, t in zip(outputs, (TensorProto.UINT8, TensorProto.FLOAT, TensorProto.UINT8),
                                                   strict=False) if o])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()

    import onnxruntime as ort

    for outputs, found in ((["y"], "not listed"), (["y", "", "z"], "empty")):
        with pytest.raises(Exception, match="DynamicQuantizeLinear|output|Invalid"):
            ort.InferenceSession(model(outputs), providers=["CPUExecutionProvider"]).run(None, {"x": x})
        with pytest.raises(tt.ShapeError, match=f"DynamicQuantizeLinear 'dq': output 1 is required .* but it is {found}"):
            tt.compile(model(outputs))
    want = ort.InferenceSession(model(["y", "s", "z"]), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = tt.compile(model(["y", "s", "z"])).run({"x": x})
    for k, name in enumerate("ysz"):
        np.testing.assert_array_equal(got[name], want[k])
