"""tt.convert.float16 / bfloat16: converted models run in onnxruntime and in tether within half
precision tolerance of the float32 model (onnxruntime in float32 is the oracle), blocked nodes
stay float32 behind Casts on the written graph, and the automatic mode keeps the one node built
to overflow."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tether as tt
from onnx import TensorProto, helper, numpy_helper

FLOAT, HALF, BF16 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16


def _model(nodes: list, inputs: list, outputs: list, inits: dict, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def _cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Resize", ["p1", "", "scales"], ["u1"], name="up", mode="nearest"),
        helper.make_node("Conv", ["u1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c2"], ["s2"], name="sig"),
        helper.make_node("GlobalAveragePool", ["s2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], name="fc", transB=1),
    ]
    inits = {"w1": w(8, 3, 3, 3), "b1": w(8), "w2": w(6, 8, 3, 3), "b2": w(6), "wf": w(5, 6), "bf": w(5),
             "scales": np.array([1, 1, 2, 2], np.float32)}
    return _model(nodes, [helper.make_tensor_value_info("x", FLOAT, [2, 3, 12, 12])],
                  [helper.make_tensor_value_info("y", FLOAT, [2, 5])], inits)


def _transformer() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    d = 16
    w = lambda *s: (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)  # noqa: E731
    mk = helper.make_node
    nodes = [
        mk("LayerNormalization", ["x", "g1", "be1"], ["h"], name="ln1", axis=-1),
        mk("MatMul", ["h", "wq"], ["q"], name="q"), mk("MatMul", ["h", "wk"], ["k"], name="k"),
        mk("MatMul", ["h", "wv"], ["v"], name="v"),
        mk("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 1]),
        mk("MatMul", ["q", "kt"], ["s0"], name="scores"), mk("Mul", ["s0", "scale"], ["s"], name="scale"),
        mk("Softmax", ["s"], ["a"], name="softmax", axis=-1),
        mk("MatMul", ["a", "v"], ["ctx"], name="ctx"), mk("MatMul", ["ctx", "wo"], ["o"], name="proj"),
        mk("Add", ["x", "o"], ["r1"], name="res1"),
        mk("LayerNormalization", ["r1", "g2", "be2"], ["h2"], name="ln2", axis=-1),
        mk("MatMul", ["h2", "w1"], ["f1"], name="fc1"),
        # GELU written out: 0.5 x (1 + erf(x / sqrt 2))
        mk("Div", ["f1", "sqrt2"], ["gd"], name="gelu_div"), mk("Erf", ["gd"], ["ge"], name="gelu_erf"),
        mk("Add", ["ge", "one"], ["ga"], name="gelu_add"), mk("Mul", ["f1", "ga"], ["gm"], name="gelu_mul"),
        mk("Mul", ["gm", "half"], ["gelu"], name="gelu_half"),
        mk("MatMul", ["gelu", "w2"], ["f2"], name="fc2"), mk("Add", ["r1", "f2"], ["y"], name="res2"),
    ]
    inits = {"g1": np.ones(d, np.float32), "be1": np.zeros(d, np.float32), "wq": w(d, d), "wk": w(d, d),
             "wv": w(d, d), "wo": w(d, d), "scale": np.float32(d ** -0.5), "g2": 1 + w(d) * 0.1,
             "be2": w(d) * 0.1, "w1": w(d, 4 * d), "w2": w(4 * d, d), "sqrt2": np.float32(np.sqrt(2)),
             "one": np.float32(1), "half": np.float32(0.5)}
    return _model(nodes, [helper.make_tensor_value_info("x", FLOAT, ["n", 8, d])],
                  [helper.make_tensor_value_info("y", FLOAT, ["n", 8, d])], inits)


def _ort(model: tt.Model | onnx.ModelProto, feeds: dict) -> dict:
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model.to_bytes()
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))


def _rel(ref: np.ndarray, got: np.ndarray) -> float:
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    return float(np.abs(ref - got).max() / np.abs(ref).max())


def _proto(model: tt.Model) -> onnx.ModelProto:
    return onnx.load_from_string(model.to_bytes())


def _producer(proto: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in proto.graph.node if n.name == name)


def _elem_types(proto: onnx.ModelProto) -> dict[str, int]:
    g = onnx.shape_inference.infer_shapes(proto, strict_mode=True).graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*g.input, *g.output, *g.value_info)}
    types.update({t.name: t.data_type for t in g.initializer})
    return types


@pytest.mark.parametrize(("build", "shape"), [(_cnn, (2, 3, 12, 12)), (_transformer, (2, 8, 16))])
def test_float16_runs_in_onnxruntime_and_tether_within_half_tolerance(build, shape) -> None:
    src = build()
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    ref = _ort(src, {"x": x})["y"]
    res = tt.convert.float16(tt.load(src.SerializeToString()))
    onnx.checker.check_model(_proto(res.model), full_check=True)
    got_ort = _ort(res.model, {"x": x})["y"]
    got_tt = tt.compile(res.model).run({"x": x})["y"]
    assert got_ort.dtype == np.float32 and got_tt.dtype == np.float32
    # float16 keeps 11 significant bits: 2^-11 per op, a few dozen ops deep
    assert _rel(ref, got_ort) < 1e-2
    assert _rel(ref, got_tt) < 1e-2
    # the weights really are float16
    assert {t.data_type for t in _proto(res.model).graph.initializer if t.name.startswith("w")} == {HALF}


def test_default_block_list_keeps_resize_float32_with_casts_around_it() -> None:
    res = tt.convert.float16(tt.load(_cnn().SerializeToString()))
    p = _proto(res.model)
    assert "up" in res.kept and res.kept["up"].startswith("op_block_list")
    types = _elem_types(p)
    up = _producer(p, "up")
    assert types[up.input[0]] == FLOAT and types[up.output[0]] == FLOAT and types[up.input[2]] == FLOAT
    before = next(n for n in p.graph.node if up.input[0] in n.output)
    after = next(n for n in p.graph.node if up.output[0] in n.input)
    assert before.op_type == "Cast" and before.attribute[0].i == FLOAT
    assert after.op_type == "Cast" and after.attribute[0].i == HALF
    assert types[_producer(p, "conv2").output[0]] == HALF


def test_keep_io_types_false_gives_float16_inputs_and_outputs() -> None:
    src = _transformer()
    x = np.random.default_rng(3).standard_normal((2, 8, 16)).astype(np.float32)
    res = tt.convert.float16(tt.load(src.SerializeToString()), keep_io_types=False)
    p = _proto(res.model)
    assert p.graph.input[0].type.tensor_type.elem_type == HALF
    assert p.graph.output[0].type.tensor_type.elem_type == HALF
    got_ort = _ort(res.model, {"x": x.astype(np.float16)})["y"]
    got_tt = tt.compile(res.model).run({"x": x.astype(np.float16)})["y"]
    assert got_ort.dtype == np.float16 and got_tt.dtype == np.float16
    ref = _ort(src, {"x": x})["y"]
    assert _rel(ref, got_ort) < 1e-2 and _rel(ref, got_tt) < 1e-2


def test_op_and_node_block_lists_stay_float32_behind_casts() -> None:
    src = _transformer()
    res = tt.convert.float16(tt.load(src.SerializeToString()), op_block_list=["Softmax"],
                             node_block_list=["fc2"])
    assert set(res.kept) == {"softmax", "fc2"}
    p = _proto(res.model)
    types = _elem_types(p)
    for name in ("softmax", "fc2"):
        node = _producer(p, name)
        assert all(types[v] == FLOAT for v in (*node.input, *node.output))
    # fc2's weight is kept float32, the other weights are float16
    assert types[_producer(p, "fc2").input[1]] == FLOAT and types["w1"] == HALF
    # fc2 reads the float16 GELU through a Cast to float32
    cast = next(n for n in p.graph.node if _producer(p, "fc2").input[0] in n.output)
    assert cast.op_type == "Cast" and types[cast.input[0]] == HALF
    x = np.random.default_rng(4).standard_normal((2, 8, 16)).astype(np.float32)
    assert _rel(_ort(src, {"x": x})["y"], _ort(res.model, {"x": x})["y"]) < 1e-2
    assert _rel(_ort(src, {"x": x})["y"], tt.compile(res.model).run({"x": x})["y"]) < 1e-2


def test_input_model_is_not_changed() -> None:
    model = tt.load(_transformer().SerializeToString())
    before = model.to_bytes()
    tt.convert.float16(model)
    assert model.to_bytes() == before


def test_bfloat16_in_tether_within_bfloat16_tolerance() -> None:
    # onnxruntime's CPU provider has no bfloat16 MatMul, LayerNormalization or Softmax kernels,
    # so the bfloat16 model runs in tether only; the oracle is onnxruntime in float32.
    src = _transformer()
    x = np.random.default_rng(5).standard_normal((2, 8, 16)).astype(np.float32)
    res = tt.convert.bfloat16(tt.load(src.SerializeToString()), keep_io_types=False)
    onnx.checker.check_model(_proto(res.model), full_check=True)
    assert _proto(res.model).graph.input[0].type.tensor_type.elem_type == BF16
    got = tt.compile(res.model).run({"x": x.astype(ml_dtypes.bfloat16)})["y"]
    assert got.dtype == ml_dtypes.bfloat16
    # bfloat16 keeps 8 significant bits: 2^-8 per op
    assert _rel(_ort(src, {"x": x})["y"], got) < 6e-2


def test_weight_beyond_float16_range_is_clamped_and_named() -> None:
    w = np.array([[1e5, 1.0], [-7e4, 2.0]], np.float32)
    src = _model([helper.make_node("Mul", ["x", "w"], ["y"], name="mul")],
                 [helper.make_tensor_value_info("x", FLOAT, [2, 2])],
                 [helper.make_tensor_value_info("y", FLOAT, [2, 2])], {"w": w})
    res = tt.convert.float16(tt.load(src.SerializeToString()))
    stored = numpy_helper.to_array(next(t for t in _proto(res.model).graph.initializer if t.name == "w"))
    np.testing.assert_array_equal(stored, np.clip(w, -65504, 65504).astype(np.float16))
    assert len(res.notes) == 1 and "'w'" in res.notes[0] and "2 value(s)" in res.notes[0]


def _overflowing() -> tuple[onnx.ModelProto, np.ndarray]:
    # x (|x| <= 1) -> fc1 (small) -> Tanh -> big (MatMul whose output reaches ~1e5) -> y
    rng = np.random.default_rng(6)
    w1 = (rng.standard_normal((8, 8)) * 0.3).astype(np.float32)
    w2 = np.full((8, 4), 3e4, np.float32)
    mk = helper.make_node
    src = _model([mk("MatMul", ["x", "w1"], ["f1"], name="fc1"), mk("Tanh", ["f1"], ["t"], name="tanh"),
                  mk("Abs", ["t"], ["a"], name="abs"), mk("MatMul", ["a", "w2"], ["y"], name="big")],
                 [helper.make_tensor_value_info("x", FLOAT, ["n", 8])],
                 [helper.make_tensor_value_info("y", FLOAT, ["n", 4])], {"w1": w1, "w2": w2})
    return src, rng.uniform(-1, 1, (16, 8)).astype(np.float32)


def test_automatic_mode_keeps_exactly_the_overflowing_node() -> None:
    src, x = _overflowing()
    ref = _ort(src, {"x": x})["y"]
    assert np.abs(ref).max() > 65504  # the oracle confirms the model overflows float16
    plain = tt.convert.float16(tt.load(src.SerializeToString()))
    assert np.isinf(tt.compile(plain.model).run({"x": x})["y"]).any()
    res = tt.convert.float16(tt.load(src.SerializeToString()), batches=x, max_error=1e-2)
    assert list(res.kept) == ["big"] and "overflow" in res.kept["big"]
    assert res.error_before == float("inf") and res.error_after <= 1e-2 and res.ok
    for got in (tt.compile(res.model).run({"x": x})["y"], _ort(res.model, {"x": x})["y"]):
        assert _rel(ref, got) <= 1e-2
    assert "big" in str(res)


def test_automatic_mode_keeps_the_reader_of_a_kept_value_beyond_range() -> None:
    # big's output (~1e5) goes on to a Div that brings it back into range: the Cast to float16
    # between them would give inf, so the Div is kept too (found as a new overflow).
    src, x = _overflowing()
    g = src.graph
    g.node[-1].output[0] = "b"
    g.node.append(helper.make_node("Div", ["b", "k"], ["y"], name="shrink"))
    g.initializer.append(numpy_helper.from_array(np.array(100, np.float32), "k"))
    ref = _ort(src, {"x": x})["y"]
    res = tt.convert.float16(tt.load(src.SerializeToString()), batches=x, max_error=1e-2)
    assert set(res.kept) == {"big", "shrink"}
    assert _rel(ref, tt.compile(res.model).run({"x": x})["y"]) <= 1e-2


def test_bad_arguments_are_typed_errors() -> None:
    model = tt.load(_transformer().SerializeToString())
    with pytest.raises(tt.ArgumentError, match="'nope'"):
        tt.convert.float16(model, node_block_list=["nope"])
    with pytest.raises(tt.ArgumentError, match="batches"):
        tt.convert.float16(model, max_error=1e-2)
    with pytest.raises(tt.ArgumentError, match="max_error"):
        tt.convert.float16(model, batches=np.zeros((2, 8, 16), np.float32))
    with pytest.raises(tt.ArgumentError, match="positive"):
        tt.convert.float16(model, batches=np.zeros((2, 8, 16), np.float32), max_error=0)
    with pytest.raises(tt.ArgumentError, match="positive"):
        tt.convert.float16(model, batches=np.zeros((2, 8, 16), np.float32), max_error="1e-2")
    with pytest.raises(tt.ArgumentError, match="list"):
        tt.convert.float16(model, op_block_list="Softmax")
    with pytest.raises(tt.ArgumentError, match="'Sofmax'"):
        tt.convert.float16(model, op_block_list=["Sofmax"])
    tt.convert.float16(model, op_block_list=["Resize"])  # an ONNX op the model lacks blocks nothing
    old = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [helper.make_tensor_value_info("x", FLOAT, [2])],
                 [helper.make_tensor_value_info("y", FLOAT, [2])], {}, opset=12)
    with pytest.raises(tt.ArgumentError, match="opset 13"):
        tt.convert.bfloat16(tt.load(old.SerializeToString()))


def test_automatic_mode_meets_a_tight_budget_on_the_transformer() -> None:
    # Plain float16 misses 3e-4 on this block (its last residual Add alone rounds to 2^-11 of
    # the output's range); the search keeps float32 nodes until the oracle confirms it holds.
    src = _transformer()
    x = np.random.default_rng(7).standard_normal((8, 8, 16)).astype(np.float32)
    ref = _ort(src, {"x": x})["y"]
    model = tt.load(src.SerializeToString())
    assert _rel(ref, tt.compile(tt.convert.float16(model).model).run({"x": x})["y"]) > 3e-4
    res = tt.convert.float16(model, batches=x, max_error=3e-4)
    assert res.ok and res.kept and all(why.startswith("error budget") for why in res.kept.values())
    assert _rel(ref, tt.compile(res.model).run({"x": x})["y"]) <= 3e-4


def test_cast_targets_and_constants_follow_the_node_into_float16() -> None:
    # Cast(int64 -> float), a Constant and a ConstantOfShape (float32 zeros by default) inside the
    # half region become float16; the written graph checks and matches the float32 model.
    mk = helper.make_node
    src = _model([mk("Cast", ["i"], ["ci"], name="cast", to=FLOAT),
                  mk("Constant", [], ["c"], name="const", value=numpy_helper.from_array(np.float32(1.5), "c")),
                  mk("Shape", ["ci"], ["sh"], name="shape"),
                  mk("ConstantOfShape", ["sh"], ["z"], name="zeros"),
                  mk("Add", ["ci", "z"], ["a"], name="add"), mk("Mul", ["a", "c"], ["y"], name="mul")],
                 [helper.make_tensor_value_info("i", TensorProto.INT64, [3])],
                 [helper.make_tensor_value_info("y", FLOAT, [3])], {})
    res = tt.convert.float16(tt.load(src.SerializeToString()))
    p = _proto(res.model)
    onnx.checker.check_model(p, full_check=True)
    types = _elem_types(p)
    assert res.kept == {} and types["ci"] == types["c"] == types["z"] == HALF
    i = np.array([1, -2, 300], np.int64)
    want = _ort(src, {"i": i})["y"]
    np.testing.assert_array_equal(_ort(res.model, {"i": i})["y"], want)
    np.testing.assert_array_equal(tt.compile(res.model).run({"i": i})["y"], want)


def test_nodes_with_untyped_values_stay_float32() -> None:
    # com.microsoft Gelu has no ONNX schema: it, and the readers of its untyped output, keep
    # their float32; the MatMul before it still converts.
    mk = helper.make_node
    graph = helper.make_graph(
        [mk("MatMul", ["x", "w"], ["a"], name="mm"), mk("Gelu", ["a"], ["g"], name="gelu", domain="com.microsoft"),
         mk("Mul", ["g", "s"], ["y"], name="mul")], "g", [helper.make_tensor_value_info("x", FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", FLOAT, [2, 4])],
        [numpy_helper.from_array(np.eye(4, dtype=np.float32), "w"), numpy_helper.from_array(np.float32(2), "s")])
    src = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    src.ir_version = 8
    res = tt.convert.float16(tt.load(src.SerializeToString()))
    assert set(res.kept) == {"gelu", "mul"}
    assert _elem_types(_proto(res.model))["w"] == HALF
    x = np.random.default_rng(8).uniform(-2, 2, (2, 4)).astype(np.float32)
    assert _rel(_ort(src, {"x": x})["y"], _ort(res.model, {"x": x})["y"]) < 2e-3


def test_weight_read_by_half_and_kept_nodes_is_stored_in_both_types() -> None:
    mk = helper.make_node
    w = np.random.default_rng(9).standard_normal((4, 4)).astype(np.float32)
    src = _model([mk("MatMul", ["x", "w"], ["a"], name="half_mm"), mk("MatMul", ["a", "w"], ["y"], name="kept_mm")],
                 [helper.make_tensor_value_info("x", FLOAT, [2, 4])],
                 [helper.make_tensor_value_info("y", FLOAT, [2, 4])], {"w": w})
    res = tt.convert.float16(tt.load(src.SerializeToString()), node_block_list=["kept_mm"])
    p = _proto(res.model)
    inits = {t.name: numpy_helper.to_array(t) for t in p.graph.initializer}
    half_w, kept_w = inits[_producer(p, "half_mm").input[1]], inits[_producer(p, "kept_mm").input[1]]
    assert half_w.dtype == np.float16 and kept_w.dtype == np.float32
    np.testing.assert_array_equal(kept_w, w)
    np.testing.assert_array_equal(half_w, w.astype(np.float16))
    x = np.random.default_rng(10).standard_normal((2, 4)).astype(np.float32)
    assert _rel(_ort(src, {"x": x})["y"], tt.compile(res.model).run({"x": x})["y"]) < 2e-3


def test_initializer_that_is_an_input_follows_the_input_type() -> None:
    # An overridable default (initializer listed as a graph input) keeps the input's type.
    src = _model([helper.make_node("Add", ["x", "b"], ["y"], name="add")],
                 [helper.make_tensor_value_info("x", FLOAT, [2]), helper.make_tensor_value_info("b", FLOAT, [2])],
                 [helper.make_tensor_value_info("y", FLOAT, [2])], {"b": np.array([1.0, 2.0], np.float32)})
    x = np.array([0.5, -3.0], np.float32)
    for keep, dtype in ((True, np.float32), (False, np.float16)):
        res = tt.convert.float16(tt.load(src.SerializeToString()), keep_io_types=keep)
        onnx.checker.check_model(_proto(res.model), full_check=True)
        got = _ort(res.model, {"x": x.astype(dtype)})["y"]
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, _ort(src, {"x": x})["y"].astype(dtype))


def test_control_flow_is_refused_with_a_typed_error() -> None:
    branch = lambda v: helper.make_graph(  # noqa: E731
        [helper.make_node("Constant", [], ["o"], value=numpy_helper.from_array(np.array([v], np.float32)))],
        "b", [], [helper.make_tensor_value_info("o", FLOAT, [1])])
    src = _model([helper.make_node("If", ["c"], ["y"], name="branch", then_branch=branch(1.0),
                                   else_branch=branch(2.0))],
                 [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                 [helper.make_tensor_value_info("y", FLOAT, [1])], {})
    with pytest.raises(tt.UnsupportedError, match="If 'branch'"):
        tt.convert.float16(tt.load(src.SerializeToString()))
