"""Shape inference on the real-model set, checked against the shapes onnxruntime produces
for every intermediate value at two batch sizes."""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tether as tt

_TERM = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


def evaluate(dim, symbols: dict[str, int]) -> int | None:
    """The size a tether dim stands for ("batch", "7*batch", 3) once symbols are bound."""
    if dim is None:
        return None
    if isinstance(dim, int):
        return dim
    value = 1
    for term in dim.split("*"):
        term = term.strip()
        if term.isdigit():
            value *= int(term)
        elif _TERM.match(term) and term in symbols:
            value *= symbols[term]
        else:
            return None
    return value


def actual_shapes(path, feeds) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """Every value's dtype and shape as onnxruntime computes them (all values made outputs)."""
    model = onnx.load(str(path))
    produced = [o for n in model.graph.node for o in n.output if o]
    existing = {o.name for o in model.graph.output}
    for name in produced:
        if name not in existing:
            model.graph.output.append(onnx.ValueInfoProto(name=name))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return {n: (v.dtype, v.shape) for n, v in zip(names, sess.run(None, feeds), strict=True)}


def test_inferred_shapes_match_onnxruntime_at_two_batch_sizes(exported):
    model = tt.load(exported.path)
    report = model.infer_shapes()
    assert report["ops_without_inference"] == []
    types = model.value_types()
    batch_symbol = model.inputs[0].shape[0]
    assert isinstance(batch_symbol, str)
    checked = 0
    for batch in (1, 3):
        for name, (dtype, shape) in actual_shapes(exported.path, exported.inputs(batch)).items():
            info = types[name]
            assert info.dtype == str(dtype), name
            assert info.shape is not None and len(info.shape) == len(shape), (name, info.shape, shape)
            got = tuple(evaluate(d, {batch_symbol: batch}) for d in info.shape)
            assert got == tuple(shape), f"{name}: tether says {info.shape}, onnxruntime made {shape} at batch {batch}"
            checked += 1
    assert checked > 2 * len(model.nodes) // 2


def test_inference_keeps_the_symbolic_batch_through_the_network(exported):
    # Forget every declared intermediate type, so that the result is inference's alone.
    stripped = onnx.load(str(exported.path))
    del stripped.graph.value_info[:]
    for o in stripped.graph.output:
        o.type.tensor_type.ClearField("shape")
    model = tt.load(stripped.SerializeToString())
    model.infer_shapes()
    out = model.value_types()[model.outputs[0].name]
    assert out.shape is not None and out.shape[0] == model.inputs[0].shape[0]
    unknown = [v for v in model.value_types().values() if v.shape is None or None in v.shape]
    assert unknown == []


def test_inferred_types_are_saved_as_value_info_that_onnx_accepts(exported, tmp_path):
    stripped = onnx.load(str(exported.path))
    del stripped.graph.value_info[:]
    model = tt.load(stripped.SerializeToString())
    model.infer_shapes()
    out = tmp_path / "inferred.onnx"
    model.save(out)
    saved = onnx.load(str(out))
    assert len(saved.graph.value_info) > 0
    # Strict mode fails when onnx's own inference contradicts a declared type.
    onnx.checker.check_model(saved, full_check=True)
    onnx.shape_inference.infer_shapes(saved, check_type=True, strict_mode=True, data_prop=True)


@pytest.mark.parametrize("bad", ["rank", "dim"])
def test_declared_type_contradicting_inference_raises_shape_error(bad):
    from onnx import TensorProto, helper

    declared = [2, 3, 4] if bad == "rank" else [2, 5]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"], name="mm")], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, declared)],
    )
    model = tt.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString())
    with pytest.raises(tt.ShapeError, match=r"MatMul 'mm': output 'c' is declared float32\[.*\] but inference gives float32\[2, 4\]"):
        model.infer_shapes()
