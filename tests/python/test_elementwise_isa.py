"""Exp, Erf, Tanh, Sigmoid and both Gelu forms, alone and fused after a MatMul, against
onnxruntime under TETHER_ISA=generic (the portable loops), avx2 (the hand-written AVX2 kernels)
and the native ISA: sizes that leave every tail length of an 8-lane loop, the whole float range,
special values (NaN, infinities, signed zeros, subnormals).

Each ISA runs in a subprocess of its own (the cap is read once per process): this file, run as a
script, checks every case and prints one JSON line with the ISA and each failure.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _isa import run_under_isa
from onnx import TensorProto, helper, numpy_helper

UNARY = [("Exp", {}), ("Erf", {}), ("Tanh", {}), ("Sigmoid", {}), ("Gelu", {}), ("Gelu", {"approximate": "tanh"})]
FUSED = ["Sigmoid", "Tanh", "Gelu", "SiLU"]


def _model(nodes, x_shape, y_shape, inits=()) -> bytes:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=9).SerializeToString()


def _inputs(n: int) -> np.ndarray:
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    # Magnitudes over the whole range, then the special values at positions that fall in tails.
    x[::3] = (rng.choice([-1, 1], x[::3].size) * 10.0 ** rng.uniform(-40, 3, x[::3].size)).astype(np.float32)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-42, -88.5, 88.5, -104.0, 3.9999998, -9.6], np.float32)
    x[-min(n, special.size):] = special[:min(n, special.size)]
    return x


def _activation(name: str) -> list:
    if name == "SiLU":  # x * Sigmoid(x), which tether fuses as SiLU
        return [helper.make_node("Sigmoid", ["m"], ["s"]), helper.make_node("Mul", ["m", "s"], ["y"])]
    return [helper.make_node(name, ["m"], ["y"])]


def _check_all() -> dict:
    import onnxruntime as ort
    import tether as tt

    bad: dict[str, str] = {}

    def compare(case: str, blob: bytes, x: np.ndarray, atol: float, fused: bool = False) -> None:
        sess = tt.compile(tt.load(blob), threads=1)
        got = sess.run({"x": x})["y"]
        want = ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        try:
            if fused:
                assert "ai.tether:FusedMatMul" in [s["op_type"] for s in sess.steps()], "not fused"
            # Both engines approximate: tether within util/fastmath.h's bounds (5e-7 absolute
            # at most; tests/cpp hold them against the C library), onnxruntime within its own.
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=atol, equal_nan=True)
        except AssertionError as e:
            bad[case] = str(e)[:400]

    for n in [1, 7, 13, 127, 8 * 64 + 5]:
        x = _inputs(n)
        for op, attrs in UNARY:
            name = f"{op}{'-' + attrs['approximate'] if attrs else ''}-{n}"
            # GELU's error is erf's (or tanh's) times |x| / 2, several units of 1e-7 near x = -5.
            compare(name, _model([helper.make_node(op, ["x"], ["y"], **attrs)], [n], [n]), x,
                    atol=2e-6 if op == "Gelu" else 1e-6)
    rng = np.random.default_rng(1)
    for cols in [13, 127]:  # GEMM tiles of 16 columns: a tail in every row
        w = (rng.standard_normal((9, cols)) / 3).astype(np.float32)
        x = (rng.standard_normal((13, 9)) * 2).astype(np.float32)
        for act in FUSED:
            nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), *_activation(act)]
            # The products' own rounding differs between the engines' GEMMs.
            compare(f"MatMul-{act}-{cols}", _model(nodes, [13, 9], [13, cols], [numpy_helper.from_array(w, "w")]), x,
                    atol=2e-6, fused=True)
    return {"isa": tt.cpu_info()["isa"], "bad": bad}


@pytest.mark.parametrize("isa", ["generic", "avx2", None])
def test_transcendental_ops_match_onnxruntime_under_each_isa(isa: str | None) -> None:
    assert run_under_isa(Path(__file__).resolve(), isa)["bad"] == {}


if __name__ == "__main__":
    print(json.dumps(_check_all()))
