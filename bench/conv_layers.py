"""Every distinct convolution of a model, one at a time: tether against onnxruntime in one run.

For each (input shape, weight shape, attributes) of the model's 2-D Conv nodes, a one-node
model: in onnxruntime the ONNX Conv (+ Relu) on [N, C, H, W], in tether the ai.tether FusedConv
with channels_last = 1 on [N, H, W, C] (what the channels-last pass makes of it inside a
model). Both run on random inputs with random weights, timed interleaved (medians); the table
gives milliseconds, GFLOP/s, the ratio (below 1: tether is faster) and the largest difference,
sorted by the time tether loses, and the sums over the model's convolutions (each distinct
convolution counted as often as the model has it).

What it tells apart: a convolution's own speed (this table) from what a layer costs inside a
model (bench/zoo.py, and `tt.compile(..., profile=True)`).

Usage:
    python bench/conv_layers.py bench/.cache/zoo/mobilenetv3_large_100.onnx [--threads 1] [--top 20]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import tether as tt  # noqa: E402
from onnx import TensorProto, helper, numpy_helper, shape_inference  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zoo import interleaved_medians, machine  # noqa: E402


def distinct_convs(path: str) -> collections.Counter:
    """(input dims, weight dims, attributes) of every 2-D Conv, with how often it occurs."""
    model = shape_inference.infer_shapes(onnx.load(path))
    dims = {v.name: tuple(d.dim_value or 1 for d in v.type.tensor_type.shape.dim)
            for v in list(model.graph.value_info) + list(model.graph.input)}
    weights = {i.name: tuple(i.dims) for i in model.graph.initializer}
    found: collections.Counter = collections.Counter()
    for n in model.graph.node:
        if n.op_type != "Conv" or n.input[1] not in weights or len(dims.get(n.input[0], ())) != 4:
            continue
        attrs = tuple(sorted((a.name, tuple(helper.get_attribute_value(a)) if a.type == onnx.AttributeProto.INTS
                              else helper.get_attribute_value(a)) for a in n.attribute))
        found[(dims[n.input[0]], weights[n.input[1]], attrs)] += 1
    return found


def models(x: tuple, w: tuple, attrs: tuple, rng: np.random.Generator) -> tuple[bytes, bytes]:
    """(onnxruntime's NCHW Conv + Relu, tether's channels-last FusedConv with Relu)."""
    inits = [numpy_helper.from_array((rng.standard_normal(w) * 0.1).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(w[0]).astype(np.float32), "b")]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    ref = helper.make_graph([helper.make_node("Conv", ["x", "w", "b"], ["c"], **dict(attrs)),
                             helper.make_node("Relu", ["c"], ["y"])], "ref",
                            [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x))], out, inits)
    fused = helper.make_node("FusedConv", ["x", "w", "b"], ["y"], domain="ai.tether", channels_last=1,
                             activation="Relu", **dict(attrs))
    x_last = helper.make_tensor_value_info("x", TensorProto.FLOAT, [x[0], x[2], x[3], x[1]])
    last = helper.make_graph([fused], "tether", [x_last], out, inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.tether", 1)]
    return (helper.make_model(ref, opset_imports=opsets[:1]).SerializeToString(),
            helper.make_model(last, opset_imports=opsets).SerializeToString())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--min-time", type=float, default=0.3)
    p.add_argument("--top", type=int, default=0, help="rows to print (0: all)")
    args = p.parse_args()
    print(machine())
    print(f"model: {args.model}; threads {args.threads}\n")
    rng = np.random.default_rng(0)
    rows, total_t, total_o = [], 0.0, 0.0
    for (x, w, attrs), count in distinct_convs(args.model).items():
        ref, last = models(x, w, attrs, rng)
        feed = rng.standard_normal(x).astype(np.float32)
        feed_last = np.ascontiguousarray(feed.transpose(0, 2, 3, 1))
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = args.threads, 1
        o = ort.InferenceSession(ref, so, providers=["CPUExecutionProvider"])
        s = tt.compile(tt.load(last), threads=args.threads)
        want = o.run(None, {"x": feed})[0]
        err = float(np.abs(s(feed_last).transpose(0, 3, 1, 2) - want).max())
        runs = {"tether": lambda s=s, f=feed_last: s(f), "ort": lambda o=o, f=feed: o.run(None, {"x": f})}
        med = interleaved_medians(runs, args.min_time)
        flops = 2.0 * want.size * np.prod(w[1:])
        a = dict(attrs)
        what = (f"{count:2d}x x{list(x)} w{list(w)} k{list(a.get('kernel_shape', w[2:]))} "
                f"s{list(a.get('strides', (1, 1)))} d{list(a.get('dilations', (1, 1)))} g{a.get('group', 1)}")
        rows.append((count * (med["tether"] - med["ort"]),
                     f"| {what} | {med['tether'] * 1e3:.3f} | {flops / med['tether'] / 1e9:.0f} | "
                     f"{med['ort'] * 1e3:.3f} | {flops / med['ort'] / 1e9:.0f} | {med['tether'] / med['ort']:.2f} | "
                     f"{err:.1e} |"))
        total_t += count * med["tether"]
        total_o += count * med["ort"]
    print("| convolution | tether ms | tether GFLOP/s | onnxruntime ms | onnxruntime GFLOP/s | tether/ort "
          "| max abs err |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for _, row in sorted(rows, reverse=True)[: args.top or None]:
        print(row)
    print(f"\nsum over the model's convolutions: tether {total_t * 1e3:.2f} ms, onnxruntime {total_o * 1e3:.2f} "
          f"ms, ratio {total_t / total_o:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
