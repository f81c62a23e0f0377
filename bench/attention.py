"""The Attention kernel (ONNX opset 23/24) against onnxruntime's, in the same run.

One Attention node over Q, K and V of [1, heads, sequence, 64] (as a decoder or encoder layer
has them after its projections), plain and causal, at each sequence length and thread count:
the median latency of tether and onnxruntime measured interleaved, their ratio (below 1: tether
is faster) and the largest difference between their outputs.

Usage:
    python bench/attention.py [--seqs 128,512] [--heads 12] [--threads 1,2] [--min-time 1.0]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import tether as tt  # noqa: E402
from onnx import TensorProto as P  # noqa: E402
from onnx import helper as h  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zoo import interleaved_medians, machine  # noqa: E402


def attention_model(heads: int, seq: int, head_size: int, causal: bool) -> bytes:
    shape = [1, heads, seq, head_size]
    g = h.make_graph(
        [h.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=int(causal))],
        "attention",
        [h.make_tensor_value_info(n, P.FLOAT, shape) for n in "qkv"],
        [h.make_tensor_value_info("y", P.FLOAT, shape)],
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 24)]).SerializeToString()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seqs", default="128,512")
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--min-time", type=float, default=1.0)
    args = ap.parse_args()
    print(machine())
    print()
    print("| sequence | causal | threads | tether ms | onnxruntime ms | tether/ort | max abs diff |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for seq in (int(s) for s in args.seqs.split(",")):
        feeds = {n: rng.standard_normal((1, args.heads, seq, 64)).astype(np.float32) for n in "qkv"}
        for causal in (False, True):
            model = attention_model(args.heads, seq, 64, causal)
            for threads in (int(t) for t in args.threads.split(",")):
                sess = tt.compile(tt.load(model), threads=threads)
                so = ort.SessionOptions()
                so.intra_op_num_threads = threads
                so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
                ref = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
                diff = float(np.abs(sess.run(feeds)["y"] - ref.run(None, feeds)[0]).max())
                runs = {"tether": lambda s=sess, f=feeds: s.run(f), "ort": lambda r=ref, f=feeds: r.run(None, f)}
                ms = interleaved_medians(runs, args.min_time)
                t, o = ms["tether"] * 1e3, ms["ort"] * 1e3
                mark = "yes" if causal else "no"
                print(f"| {seq} | {mark} | {threads} | {t:.2f} | {o:.2f} | {t / o:.2f} | {diff:.1e} |")


if __name__ == "__main__":
    main()
