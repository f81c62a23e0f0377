"""The CPU's register tiles at every edge, under TETHER_ISA=generic, avx2 and the native ISA:
MatMuls whose left side is computed at run time (rows read in place, B's panels taken in chunks
that stay in L2, K in blocks) with row counts that leave 1 to MR - 1 rows, column counts that
leave a partial vector or panel, several K blocks and thread splits, with bias, Relu and residual
epilogues; and channels-last convolutions (regular and depthwise) whose channel counts leave a
partial 8-lane vector or none.

MatMuls are checked against float64 numpy with the worst-case bound of float32 summation in any
order (|error| <= K * 2^-23 * (|A| @ |B|) per element), convolutions against onnxruntime. Each
ISA runs in a subprocess of its own (the cap is read once per process): this file, run as a
script, checks every case and prints one JSON line with the ISA and each failure.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _isa import run_under_isa
from onnx import TensorProto, helper, numpy_helper

# Rows: a GEMV, one short of a 6-row tile, tiles plus one row, a prefill-sized block; columns:
# a partial vector, one panel, panels across a 128 KB chunk of B (8 panels at K >= 256 for
# 16-column panels, 4 for 32-column ones) plus a partial one; K: short, one block, several.
ROWS = [1, 5, 13, 32]
COLS = [13, 16, 200, 530]
DEPTHS = [9, 256, 700]


def _model(nodes, inputs: dict[str, list[int]], inits: dict[str, np.ndarray]) -> bytes:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()


def _matmul_cases() -> list[tuple[str, bytes, dict[str, np.ndarray], np.ndarray, np.ndarray]]:
    """(name, model, feeds, float64 reference, its error bound) per shape and epilogue."""
    rng = np.random.default_rng(3)
    cases = []
    for m in ROWS:
        for n in COLS:
            for k in DEPTHS:
                x = rng.standard_normal((m, k)).astype(np.float32)
                w = rng.standard_normal((k, n)).astype(np.float32)
                bias = rng.standard_normal(n).astype(np.float32)
                res = rng.standard_normal((m, n)).astype(np.float32)
                prod = x.astype(np.float64) @ w.astype(np.float64)
                bound = k * 2.0**-23 * (np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64)) + 1e-30
                name = f"{m}x{k}x{n}"
                cases.append((f"MatMul-{name}", _model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": [m, k]},
                                                       {"w": w}), {"x": x}, prod, bound))
                nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", ["p", "b"], ["q"]),
                         helper.make_node("Relu", ["q"], ["y"])]
                cases.append((f"MatMul-bias-Relu-{name}", _model(nodes, {"x": [m, k]}, {"w": w, "b": bias}), {"x": x},
                              np.maximum(prod + bias, 0.0), bound))
                nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", ["p", "r"], ["y"])]
                cases.append((f"MatMul-residual-{name}", _model(nodes, {"x": [m, k], "r": [m, n]}, {"w": w}),
                              {"x": x, "r": res}, prod + res, bound))
    return cases


def _conv_cases() -> list[tuple[str, bytes, dict[str, np.ndarray]]]:
    """A 3x3 convolution into c channels, Relu, a depthwise 3x3 over them, a 1x1 back to 24:
    channels last between the Transposes, on a 9 x 11 image (rows that leave tails)."""
    rng = np.random.default_rng(4)
    cases = []
    for c in [5, 8, 13, 16, 24, 37]:
        def w(*shape: int) -> np.ndarray:
            return (rng.standard_normal(shape) * 0.3).astype(np.float32)

        inits = {"w1": w(c, 5, 3, 3), "b1": w(c), "w2": w(c, 1, 3, 3), "b2": w(c), "w3": w(24, c, 1, 1), "b3": w(24)}
        nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1] * 4),
                 helper.make_node("Relu", ["a"], ["ar"]),
                 helper.make_node("Conv", ["ar", "w2", "b2"], ["d"], pads=[1] * 4, group=c),
                 helper.make_node("Conv", ["d", "w3", "b3"], ["y"])]
        x = rng.standard_normal((1, 5, 9, 11)).astype(np.float32)
        cases.append((f"Conv-depthwise-{c}", _model(nodes, {"x": [1, 5, 9, 11]}, inits), {"x": x}))
    return cases


def _check_all() -> dict:
    import onnxruntime as ort
    import tether as tt

    bad: dict[str, str] = {}
    for name, blob, feeds, want, bound in _matmul_cases():
        for threads in (1, 2):
            got = tt.compile(tt.load(blob), threads=threads).run(feeds)["y"].astype(np.float64)
            over = np.abs(got - want) > bound
            if got.shape != want.shape or over.any():
                bad[f"{name}-t{threads}"] = f"shape {got.shape}, {int(over.sum())} elements past the bound"
    for name, blob, feeds in _conv_cases():
        sess = tt.compile(tt.load(blob), threads=1)
        steps = [s["op_type"] for s in sess._core.steps()]
        want = ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        try:
            assert steps.count("ai.tether:FusedConv") >= 2, f"not channels last: {steps}"
            np.testing.assert_allclose(sess.run(feeds)["y"], want, rtol=1e-4, atol=1e-4)
        except AssertionError as e:
            bad[name] = str(e)[:400]
    return {"isa": tt.cpu_info()["isa"], "bad": bad}


@pytest.mark.parametrize("isa", ["generic", "avx2", None])
def test_tiles_at_every_edge_match_the_references_under_each_isa(isa: str | None) -> None:
    assert run_under_isa(Path(__file__).resolve(), isa)["bad"] == {}


if __name__ == "__main__":
    print(json.dumps(_check_all()))
