"""Latency of tether's CPU engine against onnxruntime, in the same run, on the same threads.

For ResNet-50, MobileNetV2 and BERT-base (sequence 128), defined in torch with random weights
and exported to ONNX with a dynamic batch, it measures the median latency of tether and of
onnxruntime (CPUExecutionProvider, intra-op threads = tether's threads, sequential execution)
at each batch size and thread count, and prints the tether/onnxruntime ratio (below 1: tether
is faster), tether's achieved GFLOP/s and its share of this machine's nominal FP32 peak (at the
clock the OS reports; a CPU that boosts above it can pass 100%).

With --int8 it measures quantized models instead: ResNet-50 and MobileNetV2 quantized static by
onnxruntime's quantize_static (QDQ, uint8 activations, int8 weights per channel, MinMax on 16
random images; their BatchNormalization statistics taken from random inputs first, see
export()), BERT-base quantized dynamic by quantize_dynamic (int8 weights,
DynamicQuantizeLinear + MatMulInteger); with --dynamic every net is quantized by
quantize_dynamic (the CNNs' convolutions as DynamicQuantizeLinear + ConvInteger); with
--qoperator the CNNs are quantized static in onnxruntime's QOperator format (QLinearConv and
com.microsoft QLinearAdd / QLinearSigmoid / QLinearMul / ..., `--models efficientnet_b0` for a
net with SiLU and squeeze-and-excitation gates). tether and
onnxruntime run the same file on the same threads; the table adds tether's FP32 latency on the
float model, the speed-up of INT8 over it, and how close the INT8 outputs stay to FP32
(tether's INT8 against tether's FP32 on --agreement-samples inputs: top-1 agreement for the
CNNs, SQNR for all).

Usage:
    python bench/cpu_latency.py [--models resnet50,mobilenetv2,bert_base_seq128]
                                [--threads 1,2] [--batches 1,8] [--min-time 2.0] [--markdown out.md]
    python bench/cpu_latency.py --int8 [--dynamic | --qoperator] [--agreement-samples 256] [...the options above]
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
from _nets import DEFAULT, NETS  # noqa: E402

CACHE = Path(os.environ.get("TETHER_BENCH_CACHE", Path(__file__).resolve().parent / ".cache"))


def export(name: str, bn_statistics: bool = False) -> Path:
    """The net exported once to ONNX (weights in external data), cached across runs. With
    `bn_statistics`, its BatchNormalization layers first take their running statistics from
    random inputs: with random weights and the default statistics (mean 0, variance 1) the
    CNNs' outputs hardly depend on the input (the logits of two images differ by ~1e-9), which
    makes top-1 agreement meaningless; with real statistics each layer is normalised, as in a
    trained net."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"{name}-b2{'-bnstats' if bn_statistics else ''}.onnx"
    if path.exists():
        return path
    factory, shape, dtype = NETS[name]
    torch.manual_seed(0)
    net = factory().eval()
    if bn_statistics and any(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules()):
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.momentum = None  # a cumulative average over the batches below
        net.train()
        with torch.no_grad():
            for _ in range(8):
                net(torch.randn(4, *shape[1:]))
        net.eval()
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


def quantized(name: str, dynamic: bool = False, qoperator: bool = False) -> Path:
    """The net's INT8 model (static QDQ for the CNNs, dynamic for BERT; ``dynamic``: dynamic
    for every net, its convolutions ConvInteger; ``qoperator``: static in onnxruntime's QOperator
    format, QLinearConv and com.microsoft contrib ops), cached across runs."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    src = export(name, bn_statistics=True)
    path = CACHE / f"{name}-b2-bnstats.{'dynamic.' if dynamic else 'qoperator.' if qoperator else ''}int8.onnx"
    if path.exists():
        return path
    _, shape, dtype = NETS[name]
    if dtype == "int64" or dynamic:
        quantize_dynamic(str(src), str(path), weight_type=QuantType.QInt8)
        return path
    rng = np.random.default_rng(1)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter({"input": rng.standard_normal((2, *shape[1:])).astype(np.float32)} for _ in range(8))

        def get_next(self):
            return next(self.batches, None)

    quantize_static(str(src), str(path), Reader(), quant_format=QuantFormat.QOperator if qoperator else QuantFormat.QDQ,
                    per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return path


def inputs_of(name: str, batch: int, seed: int) -> np.ndarray:
    _, shape, dtype = NETS[name]
    rng = np.random.default_rng(seed)
    if dtype == "int64":
        return rng.integers(0, 1000, size=(batch, *shape[1:]), dtype=np.int64)
    return rng.standard_normal((batch, *shape[1:])).astype(np.float32)


def ort_session(path: Path, threads: int) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def agreement(name: str, fp32: tt.Session, int8: tt.Session, samples: int) -> tuple[float, float]:
    """Top-1 agreement (CNNs; NaN for BERT) and SQNR in dB of INT8 against FP32, over `samples`
    inputs in batches of 8."""
    same = total = 0
    signal = noise = 0.0
    for start in range(0, samples, 8):
        x = inputs_of(name, min(8, samples - start), 1000 + start)
        f = next(iter(fp32.run({"input": x}).values())).astype(np.float64)
        q = next(iter(int8.run({"input": x}).values())).astype(np.float64)
        signal += float(np.sum(f * f))
        noise += float(np.sum((f - q) ** 2))
        if f.ndim == 2:
            same += int(np.sum(f.argmax(1) == q.argmax(1)))
            total += f.shape[0]
    top1 = same / total if total else float("nan")
    return top1, 10 * np.log10(signal / max(noise, 1e-300))


def int8_table(args: argparse.Namespace, machine: str) -> list[str]:
    header = ("| model (INT8) | batch | threads | tether ms | onnxruntime ms | ratio | tether FP32 ms | speed-up over "
              "tether FP32 | top-1 agreement with FP32 | SQNR vs FP32 dB | max error vs onnxruntime INT8 |")
    rows = [header, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    print(header)
    for name in args.models.split(","):
        fp32_path, int8_path = export(name, bn_statistics=True), quantized(name, args.dynamic, args.qoperator)
        fp32_model, int8_model = tt.load(fp32_path), tt.load(int8_path)
        for threads in [int(t) for t in args.threads.split(",")]:
            fp32 = tt.compile(fp32_model, threads=threads)
            int8 = tt.compile(int8_model, threads=threads)
            ref = ort_session(int8_path, threads)
            top1, sqnr = agreement(name, fp32, int8, args.agreement_samples)
            for batch in [int(b) for b in args.batches.split(",")]:
                feeds = {"input": inputs_of(name, batch, 0)}
                clock = time.process_time if args.cpu_time and threads == 1 else time.perf_counter
                ours = median_latency(lambda s=int8, f=feeds: s.run(f), args.min_time, clock=clock)
                theirs = median_latency(lambda r=ref, f=feeds: r.run(None, f), args.min_time, clock=clock)
                base = median_latency(lambda s=fp32, f=feeds: s.run(f), args.min_time, clock=clock)
                got, want = next(iter(int8.run(feeds).values())), ref.run(None, feeds)[0]
                err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
                row = (f"| {name} | {batch} | {threads} | {ours * 1e3:.1f} | {theirs * 1e3:.1f} | "
                       f"{ours / theirs:.2f} | {base * 1e3:.1f} | {base / ours:.2f}x | {top1 * 100:.1f}% | "
                       f"{sqnr:.1f} | {err:.1e} |")
                rows.append(row.replace("| nan% |", "| - |"))
                print(rows[-1], flush=True)
    return rows


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
    p.add_argument("--models", default=",".join(DEFAULT), help=f"of {', '.join(NETS)}")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--min-time", type=float, default=2.0, help="seconds of timed runs per row and runtime")
    p.add_argument("--markdown", help="also write the table as markdown to this file")
    p.add_argument(
        "--cpu-time",
        action="store_true",
        help="time single-thread rows by process CPU time (steadier on a busy machine)",
    )
    p.add_argument("--int8", action="store_true", help="measure the INT8 models instead (see above)")
    p.add_argument("--agreement-samples", type=int, default=256, help="inputs of the INT8 vs FP32 comparison")
    p.add_argument("--qoperator", action="store_true",
                   help="with --int8: the CNNs quantized static in onnxruntime's QOperator format "
                        "(com.microsoft contrib ops)")
    p.add_argument("--dynamic", action="store_true",
                   help="with --int8: every net quantized dynamic (quantize_dynamic: the CNNs' Conv as ConvInteger)")
    args = p.parse_args(argv)
    info = tt.cpu_info()
    machine = (
        f"{info['brand'] or platform.processor()}, {info['physical_cores']} physical cores, "
        f"ISA {info['isa']} (GEMM kernel {info['gemm_kernel']}, integer GEMM kernel {info['int8_gemm_kernel']}), "
        f"~{cpu_ghz():.2f} GHz; "
        f"onnxruntime {ort.__version__}, tether {tt.__version__}"
    )
    print(f"machine: {machine}")
    if args.int8:
        rows = int8_table(args, machine)
        if args.markdown:
            Path(args.markdown).write_text(f"machine: {machine}\n\n" + "\n".join(rows) + "\n")
        return 0
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
