"""Checks a reduced deployment build (docs/building.md, `make test-reduced`).

    python tests/deploy/check_reduced.py models DIR
        writes DIR/cnn.onnx (Conv, Relu, GlobalAveragePool, Flatten, Gemm), DIR/lstm.onnx (an
        op the CNN does not use) and DIR/ops.txt, the CNN's list from `tether ops-config`
        (rewritten only when it changes, so that the build configured with it stays as it is);
    python tests/deploy/check_reduced.py check DIR REDUCED_BUILD FULL_BUILD
        builds examples/cpp/main.c and tests/deploy/compile_status.c against each build's
        libtether.so and checks that the reduced library runs the CNN as onnxruntime does, that
        it refuses the LSTM model with TETHER_ERROR_UNSUPPORTED naming LSTM (which the full
        library compiles), that the recurrent kernel's code is gone from it (its type name, kept
        by the full library, is not in the file) and that it is smaller than the full one.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "cpp"))
from check import parse, pattern  # noqa: E402  (examples/cpp/check.py: main.c's inputs and output format)


def _tensor(rng: np.random.Generator, name: str, shape: tuple[int, ...], scale: float) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def write_cnn(path: str) -> None:
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    weights = [_tensor(rng, "w1", (8, 3, 3, 3), 0.3), _tensor(rng, "b1", (8,), 0.1),
               _tensor(rng, "w2", (16, 8, 3, 3), 0.2), _tensor(rng, "b2", (16,), 0.1),
               _tensor(rng, "wf", (10, 16), 0.3), _tensor(rng, "bf", (10,), 0.1)]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def write_lstm(path: str) -> None:
    rng = np.random.default_rng(4)
    hidden = 5
    node = helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=hidden)
    graph = helper.make_graph([node], "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 1, 1, hidden])],
                              [_tensor(rng, "w", (1, 4 * hidden, 3), 0.3), _tensor(rng, "r", (1, 4 * hidden, hidden), 0.3)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def write_models(folder: str) -> None:
    from tether._ops_config import format_ops_config, ops_config

    os.makedirs(folder, exist_ok=True)
    cnn = os.path.join(folder, "cnn.onnx")
    write_cnn(cnn)
    write_lstm(os.path.join(folder, "lstm.onnx"))
    text = format_ops_config(ops_config([cnn]), ["cnn.onnx"])
    ops = os.path.join(folder, "ops.txt")
    old = open(ops, encoding="utf-8").read() if os.path.exists(ops) else None
    if text != old:
        with open(ops, "w", encoding="utf-8") as f:
            f.write(text)


def _program(source: str, build: str, out: str) -> str:
    lib = os.path.abspath(os.path.join(build, "cpp"))
    subprocess.run(["cc", "-std=c99", "-O1", "-I", os.path.join(ROOT, "cpp", "include"), source, "-o", out,
                    f"-L{lib}", "-ltether", f"-Wl,-rpath,{lib}"], check=True)
    return out


def check(folder: str, reduced: str, full: str) -> int:
    failures = []
    cnn, lstm = os.path.join(folder, "cnn.onnx"), os.path.join(folder, "lstm.onnx")
    run_model = _program(os.path.join(ROOT, "examples", "cpp", "main.c"), reduced, os.path.join(folder, "run_model_c"))
    status = {name: _program(os.path.join(ROOT, "tests", "deploy", "compile_status.c"), build,
                             os.path.join(folder, f"compile_status_{name}"))
              for name, build in (("reduced", reduced), ("full", full))}

    run = subprocess.run([run_model, cnn], capture_output=True, text=True, timeout=60)
    if run.returncode != 0:
        failures.append(f"the reduced library did not run the CNN ({run.returncode}): {run.stdout}{run.stderr}")
    else:
        got = parse(run.stdout)
        x = pattern((1, 3, 16, 16))
        (want,) = ort.InferenceSession(cnn, providers=["CPUExecutionProvider"]).run(None, {"x": x})
        np.testing.assert_allclose(got[("output", "y")], want, rtol=1e-4, atol=1e-5, err_msg="CNN output y")
        print("reduced library: the CNN's output matches onnxruntime")

    refused = subprocess.run([status["reduced"], lstm], capture_output=True, text=True, timeout=60).stdout.strip()
    if not (refused.startswith("TETHER_ERROR_UNSUPPORTED") and "LSTM" in refused):
        failures.append(f"the reduced library compiling an LSTM: expected TETHER_ERROR_UNSUPPORTED naming LSTM, got "
                        f"{refused!r}")
    accepted = subprocess.run([status["full"], lstm], capture_output=True, text=True, timeout=60).stdout.strip()
    if accepted != "ok":
        failures.append(f"the full deployment library compiling the LSTM model: {accepted!r}")
    print(f"reduced library on an LSTM: {refused}")

    libs = {name: os.path.join(build, "cpp", "libtether.so") for name, build in (("reduced", reduced), ("full", full))}
    data = {name: open(path, "rb").read() for name, path in libs.items()}
    for name in ("RecurrentKernel", "ConvKernel"):
        print(f"type name {name}: in the full library {name.encode() in data['full']}, "
              f"in the reduced one {name.encode() in data['reduced']}")
    if b"RecurrentKernel" not in data["full"] or b"RecurrentKernel" in data["reduced"]:
        failures.append("the recurrent kernel's type name is not in the full library alone")
    if b"ConvKernel" not in data["reduced"]:
        failures.append("the CNN's convolution kernel is missing from the reduced library")
    sizes = {name: len(d) for name, d in data.items()}
    print(f"libtether.so: reduced {sizes['reduced']:,} bytes, full deployment {sizes['full']:,} bytes")
    if sizes["reduced"] >= sizes["full"]:
        failures.append("the reduced library is not smaller than the full deployment library")
    for f in failures:
        print(f"FAIL: {f}")
    return 1 if failures else 0


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "models":
        write_models(sys.argv[2])
        return 0
    if len(sys.argv) == 5 and sys.argv[1] == "check":
        return check(*sys.argv[2:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
