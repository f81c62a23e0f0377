"""Latency of tether's QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear kernels against
onnxruntime's, in the same run, on the same threads: one-node models on activation- and
weight-sized tensors, the median of many runs each, and the tether/onnxruntime ratio (below 1:
tether is faster). Outputs are checked to be bitwise equal before timing.

Usage:
    python bench/quantize_latency.py [--threads 1,2] [--min-time 1.0]
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
from onnx import helper, numpy_helper  # noqa: E402


def model(op: str, x: np.ndarray, params: dict[str, np.ndarray], outputs: int = 1, opset: int = 21, **attrs) -> bytes:
    inputs = [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)]
    outs = [f"y{i}" for i in range(outputs)]
    g = helper.make_graph([helper.make_node(op, ["x", *params], outs, **attrs)], "g", inputs,
                          [onnx.ValueInfoProto(name=o) for o in outs],
                          [numpy_helper.from_array(v, k) for k, v in params.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10).SerializeToString()


def cases(rng: np.random.Generator):
    act = rng.standard_normal((8, 64, 56, 56)).astype(np.float32)  # 1.6M floats: a ResNet stage at batch 8
    small = act[:1, :, :28, :28].copy()  # 50k floats: a small activation
    q = (act * 40 + 128).clip(0, 255).astype(np.uint8)
    w = rng.integers(-128, 128, (512, 256, 3, 3)).astype(np.int8)  # 1.2M int8 weights
    ch = (0.01 * 10 ** rng.uniform(-1, 1, 64)).astype(np.float32)
    out_ch = (0.01 * 10 ** rng.uniform(-1, 1, 512)).astype(np.float32)
    s = np.array(0.02, np.float32)
    yield "Q f32->u8 per-tensor 1.6M", model("QuantizeLinear", act, {"s": s, "z": np.array(128, np.uint8)}), act
    yield "Q f32->i8 per-tensor 50k", model("QuantizeLinear", small, {"s": s, "z": np.array(0, np.int8)}), small
    yield ("Q f32->u8 per-axis(1) 1.6M",
           model("QuantizeLinear", act, {"s": ch, "z": np.full(64, 3, np.uint8)}, axis=1), act)
    yield "DQ u8->f32 per-tensor 1.6M", model("DequantizeLinear", q, {"s": s, "z": np.array(128, np.uint8)}), q
    yield ("DQ i8->f32 per-axis(0) weights 1.2M",
           model("DequantizeLinear", w, {"s": out_ch, "z": np.zeros(512, np.int8)}, axis=0), w)
    yield "DynamicQuantizeLinear 1.6M", model("DynamicQuantizeLinear", act, {}, outputs=3, opset=11), act


def median_time(fn, min_time: float) -> float:
    fn()
    times, start = [], time.perf_counter()
    while time.perf_counter() - start < min_time or len(times) < 10:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--min-time", type=float, default=1.0)
    args = parser.parse_args()
    info = tt.cpu_info()
    print(f"{info['brand']}, {info['isa']}, onnxruntime {ort.__version__}, {platform.python_version()}")
    print(f"{'case':40s} {'threads':>7s} {'tether us':>10s} {'ort us':>10s} {'ratio':>6s}")
    rng = np.random.default_rng(0)
    for threads in [int(t) for t in args.threads.split(",")]:
        for name, blob, x in cases(rng):
            feeds = {"x": x}
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            ref = ort.InferenceSession(blob, opts, providers=["CPUExecutionProvider"])
            sess = tt.compile(tt.load(blob), threads=threads)
            for a, b in zip(sess.run(feeds).values(), ref.run(None, feeds), strict=True):
                assert a.tobytes() == b.tobytes(), name
            t_ours = median_time(lambda: sess.run(feeds), args.min_time)  # noqa: B023
            t_ref = median_time(lambda: ref.run(None, feeds), args.min_time)  # noqa: B023
            print(f"{name:40s} {threads:7d} {t_ours * 1e6:10.1f} {t_ref * 1e6:10.1f} {t_ours / t_ref:6.2f}")


if __name__ == "__main__":
    main()
