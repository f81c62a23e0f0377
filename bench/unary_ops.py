"""Latency of tether's transcendental element-wise ops (Exp, Erf, Tanh, Sigmoid, Gelu), Softmax over
the last axis and a MatMul with the Erf-form GELU after it (which tether fuses into the product)
against onnxruntime's, in the same run, on the same threads. Each case is timed interleaved (one
tether run, one onnxruntime run, repeated) and reports the medians, nanoseconds per element for
the element-wise ops and the tether/onnxruntime ratio (below 1: tether is faster). Outputs are
checked to agree with onnxruntime before timing.

Usage:
    python bench/unary_ops.py [--threads 1,2] [--min-time 1.0] [--cases Erf,Tanh]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import tether as tt  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

_LARGE = (64, 1024, 64)  # 4M floats: past the caches, so memory traffic counts too
_SMALL = (64, 1024)  # 64K floats: in L2, compute alone


def _model(nodes: list[onnx.NodeProto], shape: tuple[int, ...], out_shape: tuple[int, ...],
           inits: list[onnx.TensorProto] | None = None) -> bytes:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits or [])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=9).SerializeToString()


def _unary(op: str, shape: tuple[int, ...], **attrs) -> bytes:
    return _model([helper.make_node(op, ["x"], ["y"], **attrs)], shape, shape)


def _matmul_gelu(rng: np.random.Generator) -> bytes:
    # 0.5 * x * (1 + Erf(x / sqrt 2)) written out, as exporters before opset 20 do.
    w = (rng.standard_normal((128, 512)) / np.sqrt(128)).astype(np.float32)
    consts = {"w": w, "s2": np.array(np.sqrt(2), np.float32), "one": np.array(1, np.float32),
              "half": np.array(0.5, np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Div", ["m", "s2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]), helper.make_node("Add", ["e", "one"], ["a"]),
             helper.make_node("Mul", ["m", "a"], ["p"]), helper.make_node("Mul", ["p", "half"], ["y"])]
    return _model(nodes, (128, 128), (128, 512), [numpy_helper.from_array(v, k) for k, v in consts.items()])


def cases(rng: np.random.Generator):
    """(name, model bytes, input, elements per run, tolerance against onnxruntime) per case."""
    for shape, label in ((_LARGE, "4M"), (_SMALL, "64K")):
        x = (rng.standard_normal(shape) * 3).astype(np.float32)
        for op in ("Exp", "Erf", "Tanh", "Sigmoid"):
            yield f"{op} {label}", _unary(op, shape), x, x.size, 1e-5
        yield f"Gelu {label}", _unary("Gelu", shape), x, x.size, 1e-5
        yield f"Softmax(-1) {label}", _unary("Softmax", shape, axis=-1), x, x.size, 1e-5
    a = rng.standard_normal((128, 128)).astype(np.float32)
    yield "MatMul 128x128x512 + GELU", _matmul_gelu(rng), a, 128 * 512, 1e-4


def _interleaved(ours, theirs, min_time: float) -> tuple[float, float]:
    ours()
    theirs()
    t_ours, t_theirs, start = [], [], time.perf_counter()
    while time.perf_counter() - start < min_time or len(t_ours) < 10:
        t = time.perf_counter()
        ours()
        t_ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        theirs()
        t_theirs.append(time.perf_counter() - t)
    return statistics.median(t_ours), statistics.median(t_theirs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--min-time", type=float, default=1.0)
    parser.add_argument("--cases", default="", help="comma-separated name prefixes to run (all by default)")
    args = parser.parse_args()
    wanted = [c for c in args.cases.split(",") if c]
    info = tt.cpu_info()
    print(f"{info['brand']}, {info['isa']}, onnxruntime {ort.__version__}, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'case':28s} {'threads':>7s} {'tether us':>10s} {'ort us':>10s} {'tether ns/el':>12s} "
          f"{'ort ns/el':>10s} {'ratio':>6s}")
    for threads in [int(t) for t in args.threads.split(",")]:
        for name, blob, x, elements, tol in cases(np.random.default_rng(0)):
            if wanted and not any(name.startswith(w) for w in wanted):
                continue
            feeds = {"x": x}
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            ref = ort.InferenceSession(blob, opts, providers=["CPUExecutionProvider"])
            sess = tt.compile(tt.load(blob), threads=threads)
            got, want = sess.run(feeds)["y"], ref.run(None, feeds)[0]
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=name)
            t_ours, t_ref = _interleaved(lambda: sess.run(feeds), lambda: ref.run(None, feeds),  # noqa: B023
                                         args.min_time)
            print(f"{name:28s} {threads:7d} {t_ours * 1e6:10.1f} {t_ref * 1e6:10.1f} "
                  f"{t_ours * 1e9 / elements:12.2f} {t_ref * 1e9 / elements:10.2f} {t_ours / t_ref:6.2f}")


if __name__ == "__main__":
    main()
