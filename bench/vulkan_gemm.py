"""Throughput of tether's Vulkan GEMM and convolution kernels, each form on the same device: the
GPU form (shared-memory tiles, implicit-GEMM convolution; TETHER_VULKAN_KERNELS=gpu) and the
CPU-lane form (the vec4 GEMM and direct convolution tuned for lavapipe; =cpu), against PyTorch
on CUDA (FP32, TF32 off) when a CUDA device is there, else onnxruntime's CPU provider: in one
run, interleaved, medians. With --fp16, also the GPU form under precision="fp16" (on tensor
cores where the device has cooperative matrices for float16: its `cooperative_matrix`
property) against PyTorch CUDA in float16.

Each layer is a chain of LAYERS identical ops (MatMul by a square or alternating weight; 3x3
convolutions that keep their channels), so that the one upload of the input and download of
the output are shared by LAYERS kernels; the time per op is the chain's median over LAYERS,
and TFLOP/s counts 2 M N K per product.

Usage:
    python bench/vulkan_gemm.py [--device vulkan] [--layers 16] [--min-time 1] [--shapes all|quick]
                                [--fp16] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable

import numpy as np
import onnx
import tether as tt
from onnx import helper as oh
from onnx import numpy_helper

# (name, kind, dims): MatMul (M, K, N) alternating N x K and K x N weights so the chain
# composes; Conv (batch, channels, size) 3x3 pad 1.
SHAPES = [
    ("bert qkv 128x768x768", "matmul", (128, 768, 768)),
    ("bert ffn 128x768x3072", "matmul", (128, 768, 3072)),
    ("bert b8 1024x768x768", "matmul", (1024, 768, 768)),
    ("square 2048", "matmul", (2048, 2048, 2048)),
    ("resnet 3x3 64ch 56x56", "conv", (1, 64, 56)),
    ("resnet 3x3 128ch 28x28", "conv", (1, 128, 28)),
    ("resnet 3x3 256ch 14x14", "conv", (1, 256, 14)),
    ("resnet 3x3 512ch 7x7", "conv", (1, 512, 7)),
    ("resnet b8 3x3 128ch 28x28", "conv", (8, 128, 28)),
]
QUICK = {"bert qkv 128x768x768", "resnet 3x3 128ch 28x28"}


def chain(kind: str, dims: tuple[int, int, int], layers: int) -> tuple[bytes, np.ndarray, float]:
    """The chain's model, its input and FLOPs per op."""
    rng = np.random.default_rng(0)
    inits, nodes, prev = [], [], "x"
    if kind == "matmul":
        m, k, n = dims
        x = rng.standard_normal((m, k)).astype(np.float32)
        for i in range(layers):
            shape = (k, n) if i % 2 == 0 else (n, k)
            w = (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
            inits.append(numpy_helper.from_array(w, f"w{i}"))
            nodes.append(oh.make_node("MatMul", [prev, f"w{i}"], [f"y{i}"]))
            prev = f"y{i}"
        flops = 2.0 * m * k * n
    else:
        b, c, s = dims
        x = rng.standard_normal((b, c, s, s)).astype(np.float32)
        for i in range(layers):
            w = (rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
            inits.append(numpy_helper.from_array(w, f"w{i}"))
            nodes.append(oh.make_node("Conv", [prev, f"w{i}"], [f"y{i}"], pads=[1, 1, 1, 1]))
            prev = f"y{i}"
        flops = 2.0 * b * c * s * s * c * 9
    graph = oh.make_graph(nodes, "chain", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
                          [oh.make_tensor_value_info(prev, onnx.TensorProto.FLOAT, None)], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]).SerializeToString(), x, flops


def tether_runner(model: bytes, x: np.ndarray, device: str, form: str,
                  precision: str = "fp32") -> Callable[[], np.ndarray]:
    os.environ["TETHER_VULKAN_KERNELS"] = form
    try:
        sess = tt.compile(tt.load(model), device=device, strict=True, precision=precision)
    finally:
        del os.environ["TETHER_VULKAN_KERNELS"]
    out = sess.outputs[0].name
    return lambda: sess.run({"x": x})[out]


def torch_runner(model: bytes, x: np.ndarray, half: bool = False) -> Callable[[], np.ndarray] | None:
    """PyTorch CUDA eager on the chain (FP32 with TF32 off, or float16), or None without CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dtype = torch.float16 if half else torch.float32
    m = onnx.load_from_string(model)
    ws = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy()).cuda().to(dtype) for i in m.graph.initializer}
    xs = torch.from_numpy(x).cuda().to(dtype)

    def run() -> np.ndarray:
        y = xs
        for node in m.graph.node:
            w = ws[node.input[1]]
            y = y @ w if node.op_type == "MatMul" else torch.nn.functional.conv2d(y, w, padding=1)
        torch.cuda.synchronize()
        return y.float().cpu().numpy()

    return run


def peer_runner(model: bytes, x: np.ndarray) -> tuple[str, Callable[[], np.ndarray]]:
    run = torch_runner(model, x)
    if run is not None:
        return "torch-cuda fp32", run
    import onnxruntime as ort

    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return "onnxruntime-cpu", lambda: sess.run(None, {"x": x})[0]


def median_s(fns: list[Callable[[], object]], min_time: float) -> list[float]:
    """Interleaved: each runs once untimed, then in turns until each has min_time of runs."""
    for f in fns:
        f()
    times: list[list[float]] = [[] for _ in fns]
    while min(sum(t) for t in times) < min_time or min(len(t) for t in times) < 5:
        for f, t in zip(fns, times, strict=True):
            t0 = time.perf_counter()
            f()
            t.append(time.perf_counter() - t0)
    return [float(np.median(t)) for t in times]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="vulkan")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--min-time", type=float, default=1.0)
    p.add_argument("--shapes", choices=["all", "quick"], default="all")
    p.add_argument("--fp16", action="store_true", help='add precision="fp16" and PyTorch CUDA float16 columns')
    p.add_argument("--markdown")
    args = p.parse_args()
    dev = next((d for d in tt.devices() if d["backend"] == "vulkan"), None)
    lines = [f"machine: {platform.node()} {platform.processor() or platform.machine()}; Vulkan device: "
             f"{dev['name'] if dev else 'none'}; {args.layers} ops per chain; ms per op (TFLOP/s)", "",
             "| layer | tether gpu form | tether cpu-lane form | peer | peer ms | gpu form / peer | rel err |"
             + (" tether fp16 | torch-cuda fp16 | fp16 / torch fp16 | fp16 rel err |" if args.fp16 else ""),
             "|---|---:|---:|---|---:|---:|---:|" + ("---:|---:|---:|---:|" if args.fp16 else "")]
    print("\n".join(lines), flush=True)
    for name, kind, dims in SHAPES:
        if args.shapes == "quick" and name not in QUICK:
            continue
        model, x, flops = chain(kind, dims, args.layers)
        gpu = tether_runner(model, x, args.device, "gpu")
        lanes = tether_runner(model, x, args.device, "cpu")
        peer_name, peer = peer_runner(model, x)
        ref = peer()
        got = gpu()
        err = float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))
        runners = [gpu, lanes, peer]
        if args.fp16:
            half = tether_runner(model, x, args.device, "gpu", "fp16")
            torch_half = torch_runner(model, x, half=True)
            err16 = float(np.abs(half() - ref).max() / max(np.abs(ref).max(), 1e-30))
            runners += [half] + ([torch_half] if torch_half is not None else [])
        t = [s / args.layers for s in median_s(runners, args.min_time)]

        def cell(s: float, flops: float = flops) -> str:
            return f"{1e3 * s:.3f} ({flops / s / 1e12:.2f})"

        line = f"| {name} | {cell(t[0])} | {cell(t[1])} | {peer_name} | {cell(t[2])} | {t[0] / t[2]:.2f} | {err:.1e} |"
        if args.fp16:
            peer16 = f"{cell(t[4])} | {t[3] / t[4]:.2f}" if len(t) > 4 else "- | -"
            line += f" {cell(t[3])} | {peer16} | {err16:.1e} |"
        lines.append(line)
        print(line, flush=True)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
