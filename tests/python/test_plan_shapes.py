"""Plans for new input shapes: a session infers every shape again for each set of input shapes it
runs (control-flow bodies included) beside the compiled model, without changing it, so plans for
other shapes, made before, after or at the same time, stay right. Checked against onnxruntime
and numpy."""

from __future__ import annotations

import threading

import numpy as np
import onnxruntime as ort
import tether as tt
from onnx import TensorProto as P
from onnx import helper as h
from onnx import numpy_helper


def _control_flow_model() -> bytes:
    """x [n, 4] and a flag: If (Relu(x) or -x, bodies reading x from outside with undeclared
    shapes), then a Loop of 3 trips adding x each trip and stacking twice the running value."""
    then_g = h.make_graph([h.make_node("Relu", ["x"], ["t"])], "then", [], [h.make_tensor_value_info("t", P.FLOAT, None)])
    else_g = h.make_graph([h.make_node("Neg", ["x"], ["e"])], "else", [], [h.make_tensor_value_info("e", P.FLOAT, None)])
    body = h.make_graph(
        [
            h.make_node("Identity", ["c"], ["go"]),
            h.make_node("Add", ["v", "x"], ["v_out"]),
            h.make_node("Mul", ["v_out", "two"], ["scan"]),
        ],
        "body",
        [h.make_tensor_value_info("i", P.INT64, []), h.make_tensor_value_info("c", P.BOOL, []),
         h.make_tensor_value_info("v", P.FLOAT, None)],
        [h.make_tensor_value_info("go", P.BOOL, []), h.make_tensor_value_info("v_out", P.FLOAT, None),
         h.make_tensor_value_info("scan", P.FLOAT, None)],
    )
    g = h.make_graph(
        [
            h.make_node("If", ["flag"], ["chosen"], then_branch=then_g, else_branch=else_g),
            h.make_node("Loop", ["trips", "", "chosen"], ["final", "scans"], body=body),
        ],
        "g",
        [h.make_tensor_value_info("x", P.FLOAT, ["n", 4]), h.make_tensor_value_info("flag", P.BOOL, [])],
        [h.make_tensor_value_info("final", P.FLOAT, None), h.make_tensor_value_info("scans", P.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.array(3, np.int64), "trips"),
                     numpy_helper.from_array(np.array(2.0, np.float32), "two")],
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


def _feeds(n: int, flag: bool, seed: int) -> dict[str, np.ndarray]:
    x = np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)
    return {"x": x, "flag": np.array(flag)}


def test_control_flow_bodies_are_planned_again_for_each_input_shape() -> None:
    model = _control_flow_model()
    sess = tt.compile(tt.load(model), threads=1)
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    # A shape seen before comes back after others: its plan and the compiled model are unchanged.
    for k, (n, flag) in enumerate([(2, True), (5, False), (1, True), (2, True), (7, False), (5, True)]):
        feeds = _feeds(n, flag, k)
        got = sess.run(feeds)
        for o, want in zip(ref.get_outputs(), ref.run(None, feeds), strict=True):
            assert got[o.name].shape == want.shape, (o.name, n)
            np.testing.assert_allclose(got[o.name], want, rtol=1e-6, atol=1e-6, err_msg=f"{o.name} n={n}")


def _numpy_chain(x: np.ndarray, flag: bool) -> tuple[np.ndarray, np.ndarray]:
    v = np.maximum(x, 0) if flag else -x
    scans = []
    for _ in range(3):
        v = v + x
        scans.append(v * 2)
    return v, np.stack(scans)


def test_plans_made_while_other_runs_read_the_session_are_right() -> None:
    # Each thread runs its own sizes, so plans for new shapes are made while other threads run.
    sess = tt.compile(tt.load(_control_flow_model()), threads=1)
    errors: list[str] = []

    def work(sizes: list[int]) -> None:
        for k, n in enumerate(sizes):
            flag = (n + k) % 2 == 0
            feeds = _feeds(n, flag, 100 * n + k)
            got = sess.run(feeds)
            final, scans = _numpy_chain(feeds["x"], flag)
            if got["final"].shape != final.shape or not np.allclose(got["final"], final, rtol=1e-6, atol=1e-6):
                errors.append(f"final of n={n} flag={flag}")
            if got["scans"].shape != scans.shape or not np.allclose(got["scans"], scans, rtol=1e-6, atol=1e-6):
                errors.append(f"scans of n={n} flag={flag}")

    threads = [threading.Thread(target=work, args=([1 + (t + 3 * k) % 9 for k in range(12)],)) for t in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
