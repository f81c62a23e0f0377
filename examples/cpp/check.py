"""Checks the example programs against onnxruntime.

Writes a small model with two named inputs (one with a symbolic batch dim) and two outputs,
runs each program given on the command line on it, and compares every line it prints with
what onnxruntime computes for the same inputs.

    python examples/cpp/check.py build/examples/model.onnx build/examples/run_model ...
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

BATCH = 2  # what the programs take for a dim known only at run time


def write_model(path: str) -> None:
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Mul", ["r", "scale"], ["y"]),
        helper.make_node("Tanh", ["x"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "example",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4]),
            helper.make_tensor_value_info("scale", TensorProto.FLOAT, [1, 3]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 4]),
        ],
        [w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, path)


def pattern(shape: tuple[int, ...]) -> np.ndarray:
    k = np.arange(int(np.prod(shape)), dtype=np.int64)
    return ((k * 7 % 11 - 5) / 4.0).astype(np.float32).reshape(shape)


def parse(stdout: str) -> dict[tuple[str, str], np.ndarray]:
    """{(kind, name): array} from lines `<kind> <name> <dtype> <dims> <values...>`."""
    out = {}
    for line in stdout.splitlines():
        kind, name, dtype, dims, *values = line.split()
        assert dtype == "float32", line
        shape = tuple(int(d) for d in dims.split("x"))
        out[(kind, name)] = np.array([float(v) for v in values], dtype=np.float32).reshape(shape)
    return out


def main() -> int:
    model_path, programs = sys.argv[1], sys.argv[2:]
    write_model(model_path)
    feeds = {"x": pattern((BATCH, 4)), "scale": pattern((1, 3))}
    sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    expected = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))
    for program in programs:
        run = subprocess.run([program, model_path], capture_output=True, text=True, timeout=60)
        if run.returncode != 0:
            print(f"{program} failed ({run.returncode}):\n{run.stderr}")
            return 1
        got = parse(run.stdout)
        want = {("input", k): v for k, v in feeds.items()} | {("output", k): v for k, v in expected.items()}
        if set(got) != set(want):
            print(f"{program} printed {sorted(got)}, expected {sorted(want)}")
            return 1
        for key, value in want.items():
            np.testing.assert_allclose(got[key], value, rtol=1e-5, atol=1e-6, err_msg=f"{program}: {key}")
        print(f"{program}: {len(expected)} outputs match onnxruntime")
    return 0


if __name__ == "__main__":
    sys.exit(main())
