"""Every ONNX-domain node has the inputs its op requires and no more outputs than it allows,
checked by shape inference against cpp/src/ops/arity.inc (generated from ONNX's schemas)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tether as tt
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("opset,ok", [(9, True), (20, False)])
def test_arity_follows_the_op_version_the_opset_selects(opset, ok):
    # Slice took its starts and ends as attributes until opset 10: one input is an old Slice, not
    # a new one missing two (which once reached the kernel, found by the engine fuzzer).
    node = helper.make_node("Slice", ["x"], ["y"], name="n", starts=[1], ends=[3], axes=[0])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_empty_tensor_value_info("y")])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8).SerializeToString()
    x = np.arange(4, dtype=np.float32)
    if ok:
        np.testing.assert_array_equal(tt.compile(blob).run({"x": x})["y"], x[1:3])
    else:
        with pytest.raises(tt.ShapeError, match="Slice 'n': Slice takes at least 3 inputs, got 1"):
            tt.compile(blob)


def test_a_graph_attribute_on_an_op_without_subgraphs_is_a_shape_error():
    # The values a graph attribute reads from outside became extra inputs of its node: on
    # ReduceMean, an optional axes input it read as integers (an internal error, engine fuzzer).
    body = helper.make_graph([helper.make_node("Not", ["x"], ["z"])], "stray", [],
                             [helper.make_tensor_value_info("z", TensorProto.BOOL, None)])
    node = helper.make_node("ReduceMean", ["f"], ["y"], name="n", value=body)
    graph = helper.make_graph([helper.make_node("Cast", ["x"], ["f"], to=TensorProto.FLOAT), node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.BOOL, [3, 4])],
                              [helper.make_empty_tensor_value_info("y")])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8).SerializeToString()
    with pytest.raises(tt.ShapeError, match="ReduceMean 'n': attribute 'value' holds a graph; ReduceMean takes no graph there"):
        tt.compile(blob)


@pytest.mark.parametrize("attrs", [{}, {"starts": [1]}])
def test_an_old_slice_without_its_starts_and_ends_attributes_is_a_shape_error(attrs):
    # At opset 7 Slice takes them as attributes; without them the kernel read inputs the node
    # does not have (a heap overflow, engine fuzzer).
    node = helper.make_node("Slice", ["x"], ["y"], name="n", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_empty_tensor_value_info("y")])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)], ir_version=8).SerializeToString()
    with pytest.raises(tt.ShapeError, match="Slice 'n': needs starts and ends: as attributes before opset 10"):
        tt.compile(blob)


def test_the_arity_table_matches_the_installed_onnx_schemas():
    want = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_op_arity.py")], capture_output=True, text=True,
                          check=True).stdout
    got = (ROOT / "cpp" / "src" / "ops" / "arity.inc").read_text()
    # The header names the onnx version; the table itself must be the same.
    assert got.splitlines()[2:] == want.splitlines()[2:]
    want = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_op_arity.py"), "--index-types"],
                          capture_output=True, text=True, check=True).stdout
    got = (ROOT / "cpp" / "src" / "ops" / "index_types.inc").read_text()
    assert got.splitlines()[2:] == want.splitlines()[2:]
    want = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_op_arity.py"), "--same-types"],
                          capture_output=True, text=True, check=True).stdout
    got = (ROOT / "cpp" / "src" / "ops" / "same_types.inc").read_text()
    assert got.splitlines()[2:] == want.splitlines()[2:]


@pytest.mark.parametrize("opset,ok", [(7, False), (12, True)])
def test_one_type_for_inputs_follows_the_op_version_the_opset_selects(opset, ok):
    # Pow's base and exponent share one type until opset 12, which types them apart (T, T1).
    node = helper.make_node("Pow", ["x", "e"], ["y"], name="n")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                                            helper.make_tensor_value_info("e", TensorProto.INT64, [3])],
                              [helper.make_empty_tensor_value_info("y")])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8).SerializeToString()
    x, e = np.array([2, 3, 4], np.float32), np.array([3, 2, 0], np.int64)
    if ok:
        np.testing.assert_array_equal(tt.compile(blob).run({"x": x, "e": e})["y"], np.power(x, e.astype(np.float32)))
    else:
        with pytest.raises(tt.ShapeError, match=r"Pow 'n': input 0 \('x'\) is float32 but input 1 \('e'\) is int64; "
                                                r"Pow takes one element type for these inputs"):
            tt.compile(blob)


@pytest.mark.parametrize("op,inputs,attrs,message", [
    # A complex64 shape reached Reshape's kernel, which read it as int64 (an internal error, found
    # by the engine fuzzer); onnxruntime refuses each of these at load.
    ("Reshape", {"x": np.ones((2, 3), np.float32), "s": np.zeros(0, np.complex64)}, {},
     r"input 1 \('s'\) is complex64; Reshape takes int64 there"),
    ("Gather", {"x": np.ones((2, 3), np.float32), "i": np.zeros(2, np.float32)}, {},
     r"input 1 \('i'\) is float32; Gather takes int32 or int64 there"),
    ("Where", {"c": np.ones(2, np.float32), "a": np.ones(2, np.float32), "b": np.ones(2, np.float32)}, {},
     r"input 0 \('c'\) is float32; Where takes bool there"),
    ("Expand", {"x": np.ones(2, np.float32), "s": np.ones(1, np.float64)}, {},
     r"input 1 \('s'\) is float64; Expand takes int64 there"),
])
def test_an_index_input_of_a_float_dtype_is_a_shape_error_as_in_onnxruntime(op, inputs, attrs, message):
    import onnxruntime as ort

    node = helper.make_node(op, list(inputs), ["y"], name="n", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), None)
                                            for n, v in inputs.items()], [helper.make_empty_tensor_value_info("y")])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()
    with pytest.raises(Exception, match="Type|type|INVALID_GRAPH|NOT_IMPLEMENTED"):
        ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(None, inputs)
    with pytest.raises(tt.ShapeError, match=f"{op} 'n': {message}"):
        tt.compile(blob)


def _model(op, inputs, outputs, **attrs) -> bytes:
    node = helper.make_node(op, inputs, outputs, name="n", **attrs)
    names = sorted({i for i in inputs if i})
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names],
                              [helper.make_empty_tensor_value_info(o) for o in outputs if o])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()


@pytest.mark.parametrize("op,inputs,outputs,message", [
    # Each once reached a kernel that indexed the missing input or output (found by the
    # libFuzzer engine target under AddressSanitizer).
    ("Add", ["a"], ["y"], "Add takes at least 2 inputs, got 1"),
    ("Mul", ["a", ""], ["y"], r"input 1 is required \(Mul needs its first 2\), but it is empty"),
    ("BatchNormalization", ["a", "b", "c"], ["y"], "BatchNormalization takes at least 5 inputs, got 3"),
    ("Relu", ["a"], ["y", "z"], "2 outputs; Relu has at most 1"),
    ("Shape", ["a"], ["y", "z"], "2 outputs; Shape has at most 1"),
    # A fourth Conv input was taken for FusedConv's summand (an internal error when its shape differed).
    ("Conv", ["a", "a", "", "a"], ["y"], "4 inputs; Conv takes at most 3"),
    ("Relu", ["a", "a"], ["y"], "2 inputs; Relu takes at most 1"),
    # ONNX's "single" outputs must be there: a kernel wrote Max's result through null (found by
    # the engine fuzzer when constant folding ran the node); onnxruntime refuses these too.
    ("Max", ["a", "a"], [""], r"output 0 is required \(Max makes 1\), but it is empty"),
    ("TopK", ["a", "k"], ["y"], r"output 1 is required \(TopK makes 2\), but it is not listed"),
    ("DynamicQuantizeLinear", ["a"], ["y"], r"output 1 is required \(DynamicQuantizeLinear makes 3\), but it is not listed"),
    # A part left unnamed shifted the later parts (a wrong answer; onnxruntime crashes on it).
    ("Split", ["a"], ["y", "", "z"], "output 1 is empty; every part of a Split must be named"),
])
def test_a_node_missing_required_inputs_or_with_extra_outputs_is_a_shape_error(op, inputs, outputs, message):
    feeds = {n: np.ones((2, 3, 6), np.float32) for n in sorted({i for i in inputs if i})}
    attrs = {"num_outputs": 3} if op == "Split" else {}
    with pytest.raises(tt.ShapeError, match=f"{op} 'n': {message}"):
        tt.compile(_model(op, inputs, outputs, **attrs)).run(feeds)
