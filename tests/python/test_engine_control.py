"""Control flow on the CPU engine: If, Loop and Scan bodies compiled and run by the same engine,
checked against onnxruntime (and torch where the model comes from torch)."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest
import tether as tt
import torch
from onnx import TensorProto as P
from onnx import helper as h
from onnx import numpy_helper


def _check(model: bytes | str, feeds: dict[str, np.ndarray], threads: int = 2, tol: float = 1e-5) -> dict[str, np.ndarray]:
    sess = tt.compile(tt.load(model), threads=threads)
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    got = sess.run(feeds)
    for o, want in zip(ref.get_outputs(), ref.run(None, feeds), strict=True):
        assert got[o.name].shape == want.shape, o.name
        np.testing.assert_allclose(got[o.name], want, rtol=tol, atol=tol, err_msg=o.name)
    return got


class _Gate(torch.nn.Module):
    """Two different heads chosen by the sign of the input's sum (torch.cond -> ONNX If)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda x: self.a(x).relu()[:, :3].contiguous(), lambda x: self.b(x) * 2, (x,))


def test_if_from_torch_cond_matches_torch_on_both_branches(tmp_path) -> None:
    torch.manual_seed(0)
    m = _Gate().eval()
    path = tmp_path / "gate.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (torch.randn(2, 8),), str(path), dynamo=True, verbose=False)
    sess = tt.compile(tt.load(path))
    name = sess.inputs[0].name
    for sign in (1.0, -1.0):
        x = (np.abs(np.random.default_rng(1).standard_normal((2, 8))) * sign).astype(np.float32)
        with torch.no_grad():
            want = m(torch.from_numpy(x)).numpy()
        got = list(sess.run({name: x}).values())[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        _check(str(path), {name: x})


class _Accumulate(torch.nn.Module):
    """A scripted loop over the first axis (a data-sized trip count -> ONNX Loop)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        acc = torch.zeros_like(x[0])
        for i in range(x.size(0)):
            acc = torch.tanh(acc * 0.5 + x[i] * float(i))
        return acc


def test_loop_from_a_scripted_torch_loop_matches_torch(tmp_path) -> None:
    path = tmp_path / "loop.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.jit.script(_Accumulate()), (torch.randn(5, 3),), str(path), dynamo=False,
                          input_names=["x"], dynamic_axes={"x": {0: "n"}})
    model = tt.load(path)
    assert "Loop" in {n.op_type for n in model.nodes}
    sess = tt.compile(model)
    rng = np.random.default_rng(2)
    for n in (5, 1, 9, 0):
        x = rng.standard_normal((n, 3)).astype(np.float32)
        got = list(sess.run({"x": x}).values())[0]
        with torch.no_grad():
            want = _Accumulate()(torch.from_numpy(x)).numpy() if n > 0 else np.zeros(3, np.float32)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _loop_model() -> bytes:
    # Loop with a trip count and a condition, one carried value, one scan output, a value read
    # from the enclosing graph (w), and an If nested in the body that reads it too.
    then_g = h.make_graph([h.make_node("Mul", ["y", "w"], ["t"])], "then", [], [h.make_tensor_value_info("t", P.FLOAT, None)])
    else_g = h.make_graph([h.make_node("Sub", ["y", "w"], ["e"])], "else", [], [h.make_tensor_value_info("e", P.FLOAT, None)])
    body = h.make_graph(
        [
            h.make_node("Add", ["v", "w"], ["y"]),
            h.make_node("ReduceSum", ["y"], ["s"], keepdims=0),
            h.make_node("Less", ["s", "limit"], ["go"]),
            h.make_node("Cast", ["i"], ["fi"], to=P.FLOAT),
            h.make_node("Greater", ["fi", "one"], ["late"]),
            h.make_node("If", ["late"], ["z"], then_branch=then_g, else_branch=else_g),
            h.make_node("Identity", ["z"], ["v_out"]),
            h.make_node("Mul", ["z", "fi"], ["scan"]),
        ],
        "body",
        [h.make_tensor_value_info("i", P.INT64, []), h.make_tensor_value_info("c", P.BOOL, []),
         h.make_tensor_value_info("v", P.FLOAT, None)],
        [h.make_tensor_value_info("go", P.BOOL, []), h.make_tensor_value_info("v_out", P.FLOAT, None),
         h.make_tensor_value_info("scan", P.FLOAT, None)],
    )
    g = h.make_graph(
        [
            h.make_node("Relu", ["x"], ["w"]),
            h.make_node("Loop", ["trips", "", "x"], ["final", "scans"], body=body),
        ],
        "g",
        [h.make_tensor_value_info("x", P.FLOAT, [4]), h.make_tensor_value_info("trips", P.INT64, [])],
        [h.make_tensor_value_info("final", P.FLOAT, None), h.make_tensor_value_info("scans", P.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.array(40.0, np.float32), "limit"),
                     numpy_helper.from_array(np.array(1.0, np.float32), "one")],
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("threads", [1, 2])
def test_loop_with_condition_scan_output_captures_and_nested_if(threads: int) -> None:
    model = _loop_model()
    rng = np.random.default_rng(3)
    for trips in (0, 1, 3, 10):
        x = rng.uniform(0.5, 1.5, 4).astype(np.float32)
        _check(model, {"x": x, "trips": np.array(trips, np.int64)}, threads=threads)


def test_scan_with_reverse_direction_and_axes_matches_onnxruntime() -> None:
    # A running sum (state) and a per-step product, over axis 1 of one input read backwards
    # and axis 0 of another read forwards; one scan output stacked along axis 1, reversed.
    body = h.make_graph(
        [
            h.make_node("Add", ["s", "a"], ["s_out"]),
            h.make_node("Mul", ["s_out", "b"], ["p"]),
        ],
        "body",
        [h.make_tensor_value_info("s", P.FLOAT, [3]), h.make_tensor_value_info("a", P.FLOAT, [3]),
         h.make_tensor_value_info("b", P.FLOAT, [3])],
        [h.make_tensor_value_info("s_out", P.FLOAT, [3]), h.make_tensor_value_info("p", P.FLOAT, [3])],
    )
    g = h.make_graph(
        [h.make_node("Scan", ["init", "xa", "xb"], ["total", "prods"], body=body, num_scan_inputs=2,
                     scan_input_axes=[1, 0], scan_input_directions=[1, 0], scan_output_axes=[1],
                     scan_output_directions=[1])],
        "g",
        [h.make_tensor_value_info("init", P.FLOAT, [3]), h.make_tensor_value_info("xa", P.FLOAT, [3, "t"]),
         h.make_tensor_value_info("xb", P.FLOAT, ["t", 3])],
        [h.make_tensor_value_info("total", P.FLOAT, None), h.make_tensor_value_info("prods", P.FLOAT, None)],
    )
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()
    rng = np.random.default_rng(4)
    for t in (5, 2):
        feeds = {"init": rng.standard_normal(3).astype(np.float32),
                 "xa": rng.standard_normal((3, t)).astype(np.float32),
                 "xb": rng.standard_normal((t, 3)).astype(np.float32)}
        _check(model, feeds)


def test_loop_scan_output_of_changing_shape_is_a_typed_error() -> None:
    body = h.make_graph(
        [h.make_node("Identity", ["c"], ["c_out"]),
         h.make_node("Add", ["i", "one"], ["n"]),
         h.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
         h.make_node("ConstantOfShape", ["n1"], ["grow"])],
        "body",
        [h.make_tensor_value_info("i", P.INT64, []), h.make_tensor_value_info("c", P.BOOL, [])],
        [h.make_tensor_value_info("c_out", P.BOOL, []), h.make_tensor_value_info("grow", P.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.array(1, np.int64), "one"),
                     numpy_helper.from_array(np.array([0], np.int64), "ax")],
    )
    g = h.make_graph([h.make_node("Loop", ["trips", ""], ["out"], body=body, name="grower")], "g",
                     [h.make_tensor_value_info("trips", P.INT64, [])], [h.make_tensor_value_info("out", P.FLOAT, None)])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()
    sess = tt.compile(tt.load(model))
    with pytest.raises(tt.ArgumentError, match=r"grower.*scan output 0 is \[2\] in iteration 1 but \[1\] in iteration 0"):
        sess.run({"trips": np.array(3, np.int64)})


def _scan_model(step_shape: list[int]) -> bytes:
    """A running sum over xs [len, 2] (one state), its per-step values stacked; the body declares
    its scan output as `step_shape`."""
    body = h.make_graph([h.make_node("Add", ["s", "x"], ["s2"]), h.make_node("Identity", ["s2"], ["y"])], "body",
                        [h.make_tensor_value_info("s", P.FLOAT, [2]), h.make_tensor_value_info("x", P.FLOAT, [2])],
                        [h.make_tensor_value_info("s2", P.FLOAT, [2]), h.make_tensor_value_info("y", P.FLOAT, step_shape)])
    g = h.make_graph([h.make_node("Scan", ["s0", "xs"], ["sf", "z"], num_scan_inputs=1, body=body, name="scan")], "g",
                     [h.make_tensor_value_info("s0", P.FLOAT, [2]), h.make_tensor_value_info("xs", P.FLOAT, ["len", 2])],
                     [h.make_tensor_value_info("sf", P.FLOAT, None), h.make_tensor_value_info("z", P.FLOAT, None)])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 11)]).SerializeToString()


@pytest.mark.parametrize("steps", [0, 1, 3])
def test_scan_of_no_steps_gives_the_shape_of_its_declared_body_output(steps: int) -> None:
    # No steps once made a [0] output where the plan had [0, 2]: an internal error (engine fuzzer).
    # onnxruntime fails on a Scan of no steps, so numpy is the oracle.
    xs = np.arange(steps * 2, dtype=np.float32).reshape(steps, 2)
    got = tt.compile(tt.load(_scan_model([2]))).run({"s0": np.ones(2, np.float32), "xs": xs})
    np.testing.assert_allclose(got["z"], 1 + np.cumsum(xs, axis=0).reshape(steps, 2))
    np.testing.assert_allclose(got["sf"], 1 + xs.sum(axis=0))
