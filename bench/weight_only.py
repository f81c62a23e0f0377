"""Latency of com.microsoft MatMulNBits (4-bit weights, blocks of 32, zero points) on tether's
CPU engine against onnxruntime's, in the same run, on the same threads: one-node models with
K x N weights, one row of A (decoding a token) and 32 rows (a short prefill), the median of
many interleaved runs, and the tether/onnxruntime ratio (below 1: tether is faster).
onnxruntime runs the model as written (accuracy_level 0: float32 A, as tether) and, for
reference, with accuracy_level 4 (A quantized to int8 per block, a less accurate product).
Outputs are checked against each other before timing.

Usage:
    python bench/weight_only.py [--threads 1,2] [--min-time 1.0] [--bits 4]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import tether as tt  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

SHAPES = [(4096, 4096), (768, 3072), (3072, 768)]  # (K, N)
ROWS = [1, 32]


def model(k: int, n: int, bits: int, block: int, accuracy_level: int, rng: np.random.Generator) -> bytes:
    kb = -(-k // block)
    b = rng.integers(0, 256, (n, kb, block * bits // 8), dtype=np.uint8)
    scales = rng.uniform(0.001, 0.01, (n, kb)).astype(np.float32)
    zp = rng.integers(0, 256, (n, -(-kb * bits // 8)), dtype=np.uint8)
    inits = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scales, "S"), numpy_helper.from_array(zp, "Z")]
    node = helper.make_node("MatMulNBits", ["A", "B", "S", "Z"], ["Y"], domain="com.microsoft", K=k, N=n, bits=bits,
                            block_size=block, accuracy_level=accuracy_level)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["m", k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["m", n])], inits)
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


def interleaved_medians(fns, min_time: float) -> list[float]:
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    start = time.perf_counter()
    while time.perf_counter() - start < min_time or len(times[0]) < 10:
        for fn, ts in zip(fns, times, strict=True):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
    return [statistics.median(ts) for ts in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--min-time", type=float, default=1.0)
    parser.add_argument("--bits", type=int, default=4)
    parser.add_argument("--block", type=int, default=32)
    args = parser.parse_args()
    info = tt.cpu_info()
    print(f"{info['brand']}, {info['isa']}, onnxruntime {ort.__version__}, Python {platform.python_version()}")
    print(f"MatMulNBits bits={args.bits} block_size={args.block}, zero points; times in microseconds")
    print(f"{'K x N':>11s} {'M':>3s} {'threads':>7s} {'tether':>9s} {'ort acc0':>9s} {'ratio':>6s} {'ort acc4':>9s}")
    for threads in [int(t) for t in args.threads.split(",")]:
        for k, n in SHAPES:
            blobs = [model(k, n, args.bits, args.block, level, np.random.default_rng(0)) for level in (0, 4)]
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            refs = [ort.InferenceSession(blob, opts, providers=["CPUExecutionProvider"]) for blob in blobs]
            sess = tt.compile(tt.load(blobs[0]), threads=threads)
            for m in ROWS:
                feeds = {"A": np.random.default_rng(m).standard_normal((m, k)).astype(np.float32)}
                ours, theirs = sess.run(feeds)["Y"], refs[0].run(None, feeds)[0]
                err = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
                assert err < 1e-4, f"{k}x{n} M={m}: relative difference {err:.2e}"
                times = interleaved_medians([lambda: sess.run(feeds),  # noqa: B023
                                             lambda: refs[0].run(None, feeds),  # noqa: B023
                                             lambda: refs[1].run(None, feeds)], args.min_time)  # noqa: B023
                t_ours, t_ref, t_int8 = (t * 1e6 for t in times)
                print(f"{k:5d}x{n:<5d} {m:3d} {threads:7d} {t_ours:9.1f} {t_ref:9.1f} {t_ours / t_ref:6.2f} "
                      f"{t_int8:9.1f}")


if __name__ == "__main__":
    main()
