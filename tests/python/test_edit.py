"""tt.edit and `tether edit`: each edit keeps what the model computes, shown by onnxruntime
running the edited and the original model; bad input is a typed error (exit 2 on the command
line) naming what is wrong; a failed parity check exits 1 and writes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tether as tt
from onnx import TensorProto, helper, numpy_helper
from tether.cli import main

_RNG = np.random.default_rng(0)
_W = _RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
_F = _RNG.standard_normal((4 * 6 * 6, 5)).astype(np.float32)


def _net(opset: int = 13) -> onnx.ModelProto:
    """x[batch, 3, 8, 8] -> Conv -> Relu -> flatten by a Shape chain -> MatMul with a weight
    computed from constants; a Sigmoid nothing reads."""
    c = numpy_helper.from_array
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node("Constant", [], ["i0"], value=c(np.array([0], np.int64))),
        helper.make_node("Gather", ["s", "i0"], ["b"], name="gather"),
        helper.make_node("Constant", [], ["m1"], value=c(np.array([-1], np.int64))),
        helper.make_node("Concat", ["b", "m1"], ["shp"], axis=0, name="concat"),
        helper.make_node("Reshape", ["r", "shp"], ["flat"], name="reshape"),
        helper.make_node("Mul", ["k2", "k3"], ["k6"], name="const_mul"),
        helper.make_node("Add", ["F", "k6"], ["F2"], name="const_add"),
        helper.make_node("MatMul", ["flat", "F2"], ["logits"], name="fc"),
        helper.make_node("Sigmoid", ["c"], ["unused"], name="dead"),
    ]
    g = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 5])],
                          [c(_W, "W"), c(_F, "F"), c(np.float32(2), "k2"), c(np.float32(3), "k3")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _pair() -> onnx.ModelProto:
    """y = x + z, both [batch, 4]: two inputs share the symbol 'batch'."""
    g = helper.make_graph([helper.make_node("Add", ["x", "z"], ["y"], name="add")], "pair",
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 4]) for n in ("x", "z")],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _ort(model: tt.Model | onnx.ModelProto, feeds: dict[str, np.ndarray], extra: list[str] | None = None
         ) -> dict[str, np.ndarray]:
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load_from_string(model.to_bytes())
    for name in extra or []:
        proto.graph.output.append(onnx.ValueInfoProto(name=name))
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def _x(batch: int = 2) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((batch, 3, 8, 8)).astype(np.float32)


@pytest.fixture
def net() -> tt.Model:
    return tt.load(_net().SerializeToString())


# ---------------------------------------------------------------- each edit against onnxruntime


def test_fix_inputs_gives_static_shape_and_the_same_outputs(net: tt.Model) -> None:
    fixed = tt.edit.fix_inputs(net, {"x": [2, 3, 8, 8]})
    assert fixed.inputs[0].shape == (2, 3, 8, 8)
    assert fixed.outputs[0].shape == (2, 5)
    np.testing.assert_array_equal(_ort(fixed, {"x": _x()})["logits"], _ort(_net(), {"x": _x()})["logits"])
    with pytest.raises(Exception, match="[Ii]nvalid|[Gg]ot"):  # onnxruntime now refuses another batch
        _ort(fixed, {"x": _x(3)})
    assert tt.edit.check(net, fixed).ok


def test_fix_inputs_sizes_a_symbol_shared_by_other_inputs() -> None:
    fixed = tt.edit.fix_inputs(_pair().SerializeToString(), {"x": [3, 4]})
    assert {v.name: v.shape for v in fixed.inputs} == {"x": (3, 4), "z": (3, 4)}
    a, b = np.ones((3, 4), np.float32), np.full((3, 4), 2, np.float32)
    np.testing.assert_array_equal(_ort(fixed, {"x": a, "z": b})["y"], a + b)


def test_simplify_folds_constants_and_shape_chain_and_drops_dead_nodes(net: tt.Model) -> None:
    small = tt.edit.simplify(tt.edit.fix_inputs(net, {"x": [2, 3, 8, 8]}))
    # Only the nodes that read x are left: the Shape chain reads a static shape, F2 is constant.
    assert sorted(n.op_type for n in small.nodes) == ["Conv", "MatMul", "Relu", "Reshape"]
    np.testing.assert_allclose(small.initializer("F2"), _F + np.float32(6), rtol=0, atol=0)
    np.testing.assert_allclose(_ort(small, {"x": _x()})["logits"], _ort(_net(), {"x": _x()})["logits"],
                               rtol=1e-6, atol=1e-6)
    assert tt.edit.check(net, small, runner="onnxruntime").ok


def test_simplify_keeps_the_shape_chain_of_a_symbolic_batch(net: tt.Model) -> None:
    small = tt.edit.simplify(net)
    ops = [n.op_type for n in small.nodes]
    assert "Shape" in ops and "Sigmoid" not in ops and "Constant" not in ops and "Mul" not in ops
    for batch in (1, 3):
        np.testing.assert_allclose(_ort(small, {"x": _x(batch)})["logits"],
                                   _ort(_net(), {"x": _x(batch)})["logits"], rtol=1e-6, atol=1e-6)


def test_simplify_leaves_random_ops_and_large_generated_tensors() -> None:
    big = numpy_helper.from_array(np.array([4096, 4096], np.int64), "big_shape")  # 64 MiB of float32
    g = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["big_shape"], ["zeros"], name="zeros"),
         helper.make_node("ReduceSum", ["zeros"], ["total"], keepdims=0, name="sum"),
         helper.make_node("RandomUniform", [], ["noise"], shape=[2], name="noise"),
         helper.make_node("Add", ["x", "total"], ["y0"], name="add"),
         helper.make_node("Mul", ["y0", "noise"], ["y"], name="mul")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [big])
    small = tt.edit.simplify(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    assert [n.op_type for n in small.nodes] == ["ConstantOfShape", "ReduceSum", "RandomUniform", "Add", "Mul"]


def test_extract_computes_the_originals_values_from_its_intermediates(net: tt.Model) -> None:
    head = tt.edit.extract(net, ["r"], ["logits"])
    assert [v.name for v in head.inputs] == ["r"] and [v.name for v in head.outputs] == ["logits"]
    assert "Conv" not in [n.op_type for n in head.nodes] and "Sigmoid" not in [n.op_type for n in head.nodes]
    whole = _ort(_net(), {"x": _x()}, extra=["r"])
    np.testing.assert_array_equal(_ort(head, {"r": whole["r"]})["logits"], whole["logits"])
    assert tt.edit.check(net, head).ok


def test_extract_with_two_outputs(net: tt.Model) -> None:
    part = tt.edit.extract(net, ["x"], ["c", "r"])
    whole = _ort(_net(), {"x": _x()}, extra=["c", "r"])
    got = _ort(part, {"x": _x()})
    np.testing.assert_array_equal(got["c"], whole["c"])
    np.testing.assert_array_equal(got["r"], whole["r"])


def test_rename_inputs_and_outputs(net: tt.Model) -> None:
    renamed = tt.edit.rename(net, {"x": "image", "logits": "scores"})
    assert [v.name for v in renamed.inputs] == ["image"] and [v.name for v in renamed.outputs] == ["scores"]
    np.testing.assert_array_equal(_ort(renamed, {"image": _x()})["scores"], _ort(_net(), {"x": _x()})["logits"])
    assert tt.edit.check(net, renamed, renames={"x": "image", "logits": "scores"}).ok


def test_rename_swaps_two_names() -> None:
    swapped = tt.edit.rename(_pair().SerializeToString(), {"x": "z", "z": "x"})
    a, b = np.ones((1, 4), np.float32), np.full((1, 4), 5, np.float32)
    np.testing.assert_array_equal(_ort(swapped, {"x": a, "z": b})["y"], a + b)


@pytest.mark.parametrize(("source", "target"), [(11, 13), (13, 18)])
def test_convert_opset_keeps_the_outputs(source: int, target: int) -> None:
    base = tt.load(_net(source).SerializeToString())
    converted = tt.edit.convert_opset(base, target)
    assert converted.opset["ai.onnx"] == target
    ref = _ort(_net(source), {"x": _x()})["logits"]
    np.testing.assert_allclose(_ort(converted, {"x": _x()})["logits"], ref, rtol=1e-6, atol=1e-6)
    assert tt.edit.check(base, converted).ok


def _branchy() -> onnx.ModelProto:
    """y = If(cond, h * 2, h + 1) with h = Relu(x): h and the weights are read only inside the branches."""
    then_g = helper.make_graph([helper.make_node("Mul", ["h", "two"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Add", ["h", "one"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["h"], name="relu"),
         helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g, name="branch")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3]),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
        [numpy_helper.from_array(np.float32(2), "two"), numpy_helper.from_array(np.float32(1), "one")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("cond", [True, False])
def test_edits_follow_values_read_inside_subgraphs(cond: bool) -> None:
    model = tt.load(_branchy().SerializeToString())
    x = np.array([[-1, 0.5, 2]], np.float32)
    want = _ort(_branchy(), {"x": x, "cond": np.array(cond)})["y"]
    small = tt.edit.simplify(model)  # h and the weights stay: the branches read them
    assert [n.op_type for n in small.nodes] == ["Relu", "If"]
    np.testing.assert_array_equal(_ort(small, {"x": x, "cond": np.array(cond)})["y"], want)
    renamed = tt.edit.rename(model, {"x": "img"})
    np.testing.assert_array_equal(_ort(renamed, {"img": x, "cond": np.array(cond)})["y"], want)
    part = tt.edit.extract(model, ["h", "cond"], ["y"])
    assert sorted(part.initializer_names) == ["one", "two"]
    np.testing.assert_array_equal(_ort(part, {"h": np.maximum(x, 0), "cond": np.array(cond)})["y"], want)


# ---------------------------------------------------------------- bad input: typed errors


@pytest.mark.parametrize(("shapes", "words"), [
    ({"y": [2, 3, 8, 8]}, "'y' is not an input"),
    ({"x": [2, 4, 8, 8]}, "dim 1 is fixed at 3"),
    ({"x": [2, 3, 8]}, "rank 4"),
    ({"x": [0, 3, 8, 8]}, "size >= 1"),
    ({"W": [4, 3, 3, 3]}, "'W' is not an input"),
    ({"x": 2}, "expected a list of dims"),
])
def test_fix_inputs_refuses(net: tt.Model, shapes: dict, words: str) -> None:
    with pytest.raises(tt.ArgumentError, match=words):
        tt.edit.fix_inputs(net, shapes)


def test_fix_inputs_refuses_two_sizes_for_one_symbol() -> None:
    with pytest.raises(tt.ArgumentError, match="dim 'batch' is given two sizes"):
        tt.edit.fix_inputs(_pair().SerializeToString(), {"x": [2, 4], "z": [3, 4]})


@pytest.mark.parametrize(("inputs", "outputs", "words"), [
    (["r"], ["nope"], "'nope' is not a value"),
    (["r"], ["logits", "c"], "also need 'x' \\(a graph input\\)"),
    (["W"], ["c"], "'W' is a weight"),
    (["r", "r"], ["logits"], "named twice"),
    ([], ["logits"], "at least one input"),
])
def test_extract_refuses(net: tt.Model, inputs: list, outputs: list, words: str) -> None:
    with pytest.raises(tt.ArgumentError, match=words):
        tt.edit.extract(net, inputs, outputs)


@pytest.mark.parametrize(("names", "words"), [
    ({"c": "cc"}, "not an input or output"),
    ({"x": "W"}, "already has a value named 'W'"),
    ({"x": "r"}, "already has a value named 'r'"),
    ({"x": "a", "logits": "a"}, "both renamed to 'a'"),
])
def test_rename_refuses(net: tt.Model, names: dict, words: str) -> None:
    with pytest.raises(tt.ArgumentError, match=words):
        tt.edit.rename(net, names)


@pytest.mark.parametrize(("opset", "words"), [(9, "cannot convert"), (0, "from 1 to"), (10_000, "from 1 to")])
def test_convert_opset_refuses(net: tt.Model, opset: int, words: str) -> None:
    with pytest.raises(tt.ArgumentError, match=words):
        tt.edit.convert_opset(net, opset)


def test_fix_inputs_refuses_shapes_the_graph_contradicts() -> None:
    g = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"], name="to_2x3")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.array([2, 3], np.int64), "s")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(tt.ShapeError, match="12 elements"):
        tt.edit.fix_inputs(m.SerializeToString(), {"x": [2, 6]})


def test_check_refuses_a_name_the_original_lacks(net: tt.Model) -> None:
    renamed = tt.edit.rename(net, {"logits": "scores"})
    with pytest.raises(tt.ArgumentError, match="no value 'scores'"):
        tt.edit.check(net, renamed)


# ---------------------------------------------------------------- the command line


@pytest.fixture
def net_file(tmp_path: Path) -> Path:
    path = tmp_path / "net.onnx"
    onnx.save(_net(), str(path))
    return path


def test_cli_edits_checks_and_writes(net_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = net_file.with_name("out.onnx")
    code = main(["edit", str(net_file), "-o", str(out), "--input", "x:2,3,8,8", "--simplify",
                 "--rename", "x=image", "--rename", "logits=scores"])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "PASS" in text and "written" in text
    edited = onnx.load(str(out))
    assert [n.op_type for n in edited.graph.node] == ["Conv", "Relu", "Reshape", "MatMul"]
    got = _ort(edited, {"image": _x()})["scores"]
    np.testing.assert_allclose(got, _ort(_net(), {"x": _x()})["logits"], rtol=1e-6, atol=1e-6)


def test_cli_extracts_and_converts_opset(net_file: Path) -> None:
    out = net_file.with_name("head.onnx")
    r = subprocess.run([sys.executable, "-m", "tether.cli", "edit", str(net_file), "-o", str(out),
                        "--extract-inputs", "r", "--extract-outputs", "logits", "--opset", "17"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    head = onnx.load(str(out))
    assert head.opset_import[0].version == 17 and [i.name for i in head.graph.input] == ["r"]
    whole = _ort(_net(), {"x": _x()}, extra=["r"])
    np.testing.assert_array_equal(_ort(head, {"r": whole["r"]})["logits"], whole["logits"])


@pytest.mark.parametrize(("args", "words"), [
    (["--input", "y:1,3,8,8"], "'y' is not an input"),
    (["--input", "x:2,4,8,8"], "dim 1 is fixed at 3"),
    (["--input", "x"], "expected NAME:D1,D2"),
    (["--rename", "x=W"], "already has a value named 'W'"),
    (["--rename", "nope=a"], "not an input or output"),
    (["--opset", "9"], "cannot convert"),
    (["--extract-inputs", "r"], "go together"),
    (["--extract-inputs", "r", "--extract-outputs", "zzz"], "'zzz' is not a value"),
    ([], "nothing to edit"),
    (["--simplify", "--dim", "batch=0"], "at least 1"),
])
def test_cli_bad_input_exits_2_with_one_line(net_file: Path, capsys: pytest.CaptureFixture[str], args: list,
                                             words: str) -> None:
    out = net_file.with_name("out.onnx")
    assert main(["edit", str(net_file), "-o", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("tether: error:") and words in err, err
    assert not out.exists()


def test_cli_refuses_output_in_missing_folder_or_over_the_input(net_file: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    before = net_file.read_bytes()
    assert main(["edit", str(net_file), "-o", str(net_file.parent / "no" / "o.onnx"), "--simplify"]) == 2
    assert "No such file or directory" in capsys.readouterr().err
    assert main(["edit", str(net_file), "-o", str(net_file), "--simplify"]) == 2
    assert "is the model being edited" in capsys.readouterr().err
    assert net_file.read_bytes() == before


def test_cli_failed_check_exits_1_and_writes_nothing(net_file: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """An edit that changes the function (a simplify that perturbs a weight) fails the check."""
    from tether.edit import _cli

    def perturbed(model: tt.Model) -> tt.Model:
        proto = onnx.load_from_string(model.to_bytes())
        w = next(i for i in proto.graph.initializer if i.name == "W")
        w.CopyFrom(numpy_helper.from_array(_W * np.float32(1.1), "W"))
        return tt.load(proto.SerializeToString())

    monkeypatch.setattr(_cli, "simplify", perturbed)
    out = net_file.with_name("out.onnx")
    assert main(["edit", str(net_file), "-o", str(out), "--simplify"]) == 1
    assert "FAIL" in capsys.readouterr().out and not out.exists()
    assert main(["edit", str(net_file), "-o", str(out), "--simplify", "--no-check"]) == 0
    assert out.exists()


def test_cli_checks_with_onnxruntime_on_a_sized_symbol(net_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = net_file.with_name("out.onnx")
    assert main(["edit", str(net_file), "-o", str(out), "--simplify", "--runner", "onnxruntime",
                 "--dim", "batch=3"]) == 0
    assert "onnxruntime: edited vs onnxruntime: original" in capsys.readouterr().out
    np.testing.assert_allclose(_ort(onnx.load(str(out)), {"x": _x(3)})["logits"], _ort(_net(), {"x": _x(3)})["logits"],
                               rtol=1e-6, atol=1e-6)


def test_cli_check_on_a_model_tether_cannot_run_exits_2_naming_the_op(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    g = helper.make_graph([helper.make_node("Foo", ["x"], ["y"], domain="my.dom", name="foo")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "custom.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.dom", 1)]),
              str(path))
    out = tmp_path / "out.onnx"
    assert main(["edit", str(path), "-o", str(out), "--rename", "x=a"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "my.dom:Foo" in err and "--no-check" in err, err
    assert main(["edit", str(path), "-o", str(out), "--rename", "x=a", "--no-check"]) == 0
    assert [i.name for i in onnx.load(str(out)).graph.input] == ["a"]
