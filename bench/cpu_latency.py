"""Latency of tether's CPU engine against onnxruntime, in the same run, on the same threads.

For ResNet-50, MobileNetV2 and BERT-base (sequence 128), defined in torch with random weights
and exported to ONNX with a dynamic batch, it measures the median latency of tether and of
onnxruntime (CPUExecutionProvider, intra-op threads = tether's threads, sequential execution)
at each batch size and thread count, and prints the tether/onnxruntime ratio (below 1: tether
is faster), tether's achieved GFLOP/s and its share of this machine's nominal FP32 peak (at the
clock the OS reports; a CPU that boosts above it can pass 100%).

Usage:
    python bench/cpu_latency.py [--models resnet50,mobilenetv2,bert_base_seq128]
                                [--threads 1,2] [--batches 1,8] [--min-time 2.0] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

# numpy's BLAS threads would spin beside the runtimes being measured.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import onnxruntime as ort  # noqa: E402
import tether as tt  # noqa: E402
import torch  # noqa: E402
from _nets import NETS  # noqa: E402

CACHE = Path(os.environ.get("TETHER_BENCH_CACHE", Path(__file__).resolve().parent / ".cache"))


def export(name: str) -> Path:
    """The net exported once to ONNX (weights in external data), cached across runs."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"{name}-b2.onnx"
    if path.exists():
        return path
    factory, shape, dtype = NETS[name]
    torch.manual_seed(0)
    net = factory().eval()
    # A batch of 2, not 1: the exporter may bake a batch of 1 into reshapes as a constant.
    example = torch.zeros((2, *shape[1:]), dtype=getattr(torch, dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net,
            (example,),
            str(path),
            input_names=["input"],
            dynamo=True,
            dynamic_shapes=({0: torch.export.Dim("batch")},),
            external_data=True,
            verbose=False,
        )
    # The batch must really be dynamic: compare with torch at a batch the export never saw.
    probe = torch.randint(0, 100, (3, *shape[1:])) if dtype == "int64" else torch.randn(3, *shape[1:])
    with torch.no_grad():
        want = net(probe).numpy()
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input": probe.numpy()})[0]
    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max())):
        path.unlink()
        raise SystemExit(f"{name}: the exported model does not match torch at batch 3; its batch is not dynamic")
    return path


def flops(model: tt.Model, batch: int) -> float:
    """2 x multiply-adds of Conv, Gemm and MatMul nodes at this batch (shapes from tether)."""
    sess_types = _concrete_types(model, {i.name: (batch, *i.shape[1:]) for i in model.inputs})
    total = 0
    for node in model.nodes:
        out = sess_types.get(node.outputs[0]) if node.outputs else None
        if out is None:
            continue
        out_numel = int(np.prod(out))
        if node.op_type == "Conv":
            w = model.initializer(node.inputs[1]).shape
            total += out_numel * int(np.prod(w[1:]))
        elif node.op_type in ("MatMul", "Gemm"):
            a = sess_types.get(node.inputs[0])
            if a is not None:
                k = a[0] if node.op_type == "Gemm" and node.attributes.get("transA", 0) else a[-1]
                total += out_numel * k
    return 2.0 * total


def _concrete_types(model: tt.Model, shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """Every value's concrete shape, from tether's shape inference with the inputs fixed."""
    import onnx

    proto = onnx.load_from_string(model.to_bytes())
    for inp in proto.graph.input:
        if inp.name in shapes:
            dims = inp.type.tensor_type.shape.dim
            for d, v in zip(dims, shapes[inp.name], strict=True):
                d.ClearField("dim_param")
                d.dim_value = v
    fixed = tt.load(proto.SerializeToString())
    fixed.infer_shapes(overwrite=True)
    out = {}
    for name, info in fixed.value_types().items():
        if info.shape is not None and all(isinstance(d, int) for d in info.shape):
            out[name] = tuple(info.shape)  # type: ignore[arg-type]
    return out


def median_latency(run, min_time: float, min_runs: int = 5, clock=time.perf_counter) -> float:
    for _ in range(2):
        run()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < min_time:
        t0 = clock()
        run()
        times.append(clock() - t0)
    return statistics.median(times)


def cpu_ghz() -> float:
    for line in open("/proc/cpuinfo"):
        if line.startswith("cpu MHz"):
            return float(line.split(":")[1]) / 1000.0
    return float("nan")


def peak_gflops(threads: int) -> float:
    """FP32 peak: cores x GHz x FLOPs per cycle (two FMA units of the widest vector width)."""
    isa = tt.cpu_info()["isa"]
    per_cycle = {"avx512": 64, "avx2": 32}.get(isa, 8)
    return threads * cpu_ghz() * per_cycle


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(NETS))
    p.add_argument("--threads", default="1,2")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--min-time", type=float, default=2.0, help="seconds of timed runs per row and runtime")
    p.add_argument("--markdown", help="also write the table as markdown to this file")
    p.add_argument(
        "--cpu-time",
        action="store_true",
        help="time single-thread rows by process CPU time (steadier on a busy machine)",
    )
    args = p.parse_args(argv)
    info = tt.cpu_info()
    machine = (
        f"{info['brand'] or platform.processor()}, {info['physical_cores']} physical cores, "
        f"ISA {info['isa']} (GEMM kernel {info['gemm_kernel']}), ~{cpu_ghz():.2f} GHz; "
        f"onnxruntime {ort.__version__}, tether {tt.__version__}"
    )
    print(f"machine: {machine}")
    header = (
        "| model | batch | threads | tether ms | onnxruntime ms | ratio | tether GFLOP/s | % of nominal FP32 peak "
        "| max error vs onnxruntime |"
    )
    rows = [header, "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    print(header)
    for name in args.models.split(","):
        path = export(name)
        model = tt.load(path)
        _, shape, dtype = NETS[name]
        for batch in [int(b) for b in args.batches.split(",")]:
            work = flops(model, batch)
            rng = np.random.default_rng(0)
            if dtype == "int64":
                x = rng.integers(0, 1000, size=(batch, *shape[1:]), dtype=np.int64)
            else:
                x = rng.standard_normal((batch, *shape[1:])).astype(np.float32)
            for threads in [int(t) for t in args.threads.split(",")]:
                sess = tt.compile(model, threads=threads)
                opts = ort.SessionOptions()
                opts.intra_op_num_threads = threads
                opts.inter_op_num_threads = 1
                opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
                ref = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
                feeds = {"input": x}
                clock = time.process_time if args.cpu_time and threads == 1 else time.perf_counter
                ours = median_latency(lambda s=sess, f=feeds: s.run(f), args.min_time, clock=clock)
                theirs = median_latency(lambda r=ref, f=feeds: r.run(None, f), args.min_time, clock=clock)
                gflops = work / ours / 1e9
                got, want = sess.run(feeds), ref.run(None, feeds)
                err = max(
                    float(np.abs(g - w).max() / max(np.abs(w).max(), 1e-30))
                    for g, w in zip(got.values(), want, strict=True)
                )
                row = (
                    f"| {name} | {batch} | {threads} | {ours * 1e3:.1f} | {theirs * 1e3:.1f} | "
                    f"{ours / theirs:.2f} | {gflops:.1f} | {100 * gflops / peak_gflops(threads):.0f}% | {err:.1e} |"
                )
                rows.append(row)
                print(row, flush=True)
    if args.markdown:
        Path(args.markdown).write_text(f"machine: {machine}\n\n" + "\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
