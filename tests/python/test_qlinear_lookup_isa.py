"""ai.tether QLinearLookup (passes/qdq_lookup.cc) under TETHER_ISA=generic, avx2 and the native
ISA: the table is computed in the same process by the same kernels that would run the unfused
DequantizeLinear -> op -> QuantizeLinear, and the lookup (8 bytes a word, or 64 at once with
AVX-512 VBMI, tails masked) gives their values bit for bit: every byte, at lengths that leave
every tail, int8 and uint8.

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

OPS = [("Sigmoid", {}), ("HardSwish", {}), ("Tanh", {}), ("Gelu", {"approximate": "tanh"})]
TYPES = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}


def _model(op: str, x_type: type, attrs: dict) -> bytes:
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]), helper.make_node(op, ["xf"], ["f"], **attrs),
             helper.make_node("QuantizeLinear", ["f", "ys", "yz"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0.06, np.float32), "xs"), numpy_helper.from_array(np.array(9, x_type), "xz"),
             numpy_helper.from_array(np.array(0.013, np.float32), "ys"), numpy_helper.from_array(np.array(-2, np.int8), "yz")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TYPES[x_type], ["n"])],
                          [helper.make_tensor_value_info("y", TensorProto.INT8, ["n"])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=9).SerializeToString()


def _check_all() -> dict:
    import tether as tt

    bad: dict[str, str] = {}
    for op, attrs in OPS:
        for x_type in TYPES:
            model = tt.load(_model(op, x_type, attrs))
            fused = tt.compile(model, threads=1)
            if [s["op_type"] for s in fused.steps()] != ["ai.tether:QLinearLookup"]:
                bad[f"{op}-{x_type.__name__}"] = "not fused"
                continue
            plain = tt.compile(model, threads=1, optimize=False)
            info = np.iinfo(x_type)
            every = np.arange(info.min, info.max + 1).astype(x_type)
            for n in (0, 1, 7, 63, 64, 65, 200, 256):
                x = np.resize(every, n) if n <= 256 else every
                if not np.array_equal(fused.run({"x": x})["y"], plain.run({"x": x})["y"]):
                    bad[f"{op}-{x_type.__name__}-{n}"] = "differs from the unfused nodes"
            x = np.random.default_rng(1).integers(info.min, info.max + 1, 10_007).astype(x_type)
            if not np.array_equal(fused.run({"x": x})["y"], plain.run({"x": x})["y"]):
                bad[f"{op}-{x_type.__name__}-10007"] = "differs from the unfused nodes"
    return {"isa": tt.cpu_info()["isa"], "bad": bad}


@pytest.mark.parametrize("isa", ["generic", "avx2", None])
def test_lookup_equals_the_unfused_nodes_under_each_isa(isa: str | None) -> None:
    assert run_under_isa(Path(__file__).resolve(), isa)["bad"] == {}


if __name__ == "__main__":
    print(json.dumps(_check_all()))
