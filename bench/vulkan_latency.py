"""Latency of tether's Vulkan engine against ncnn's Vulkan backend on the same Vulkan device,
with tether's CPU engine for reference, in one run.

The nets are those of `_nets.py` (ResNet-50 and MobileNetV2 at 224x224, a BERT-base encoder at
sequence 128), built with random weights (torch.manual_seed(0); the CNNs' BatchNorm statistics
taken from random inputs, so that every layer is normalised as in a trained net). One instance
of each net is exported twice: to ONNX with a dynamic batch (torch.onnx.export, dynamo) for
tether, and as TorchScript traced at batch 1 converted by pnnx to ncnn's .param/.bin (FP32
weights, fp16=0). Both are cached in bench/.cache/vulkan/ (or $TETHER_BENCH_CACHE/vulkan).

The engines, on the same inputs:
- tether-vulkan: `tt.compile(model, device=DEVICE)` (FP32);
- ncnn-vulkan: ncnn's Python package with use_vulkan_compute on the same device (the one whose
  name matches tether's), FP32 too (use_fp16_packed, use_fp16_storage and use_fp16_arithmetic
  off; --ncnn-fp16 turns them on, ncnn's default where the device has float16). ncnn has no
  batch dimension: a batch of 8 is 8 extractions, one image after the other, as ncnn is used;
- tether-cpu: `tt.compile(model, threads=THREADS)`: the reference every error is measured
  against, and its time for comparison.
- torch-DEVICE (--torch; by default on a GPU torch sees, and no column without one): the same
  torch instance's weights in PyTorch eager, FP32 with TF32 off, the input on the device before
  timing (a forward pass and a synchronize per run; tether's runs also carry their input up and
  their output down), with the ratio tether-vulkan/torch. `--torch cpu` runs the column on the
  CPU, to see the machinery work where there is no GPU.
With --int8, each net with a float input also gets rows "NAME int8": the net quantized by
`tt.quantize.static` (its default profile, calibrated on 8 random inputs; cached as
NAME.int8.onnx) on tether-vulkan and tether-cpu, the error that of tether-vulkan's INT8 against
tether-cpu's INT8 (ncnn's column stays empty: its INT8 needs its own calibration tools).
Their timed runs are interleaved (zoo.interleaved_medians: each engine runs once untimed, then
timed, in turns over --rounds rounds) and the median is reported, with the ratio
tether-vulkan/ncnn-vulkan (below 1: tether is faster) and each Vulkan engine's largest error
relative to the largest |tether-cpu output|.

On Mesa's lavapipe (a Vulkan device on the CPU) both Vulkan engines run their shaders on the
CPU's cores, compiled by LLVM: the ratio compares two engines on one device, not a GPU, and
INT8 times there say nothing of a GPU's integer units.

A net that fails to export or convert, or an engine that fails on it, stays in the table with
its error; the run goes on.

Usage:
    python bench/vulkan_latency.py [--models resnet50,mobilenetv2,bert_base_seq128] [--batches 1,8]
                                   [--device vulkan] [--threads 2] [--min-time 2] [--rounds 3]
                                   [--ncnn-fp16] [--fp16] [--int8] [--torch auto|cuda|cpu|none]
                                   [--markdown out.md]
    python bench/vulkan_latency.py --quick   # a smoke run of the machinery on a tiny CNN:
                                             # exits 1 when tether-vulkan fails or strays from tether-cpu

ncnn and pnnx come from PyPI: pip install ncnn pnnx.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from zoo import _short, interleaved_medians, machine  # noqa: E402

CACHE = Path(os.environ.get("TETHER_BENCH_CACHE", HERE / ".cache")) / "vulkan"
ENGINES = ("tether-vulkan", "ncnn-vulkan", "tether-cpu")
QUICK_REL_TOL = 1e-4
VOCAB = 30522  # BertBase's default vocabulary
INSTALL = "pip install ncnn pnnx"

Run = Callable[[np.ndarray], np.ndarray]


# ---- nets ------------------------------------------------------------------------------------------


def _tiny_cnn() -> Any:
    from torch import nn

    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1, groups=2), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


def specs() -> dict[str, tuple[Callable[[], Any], tuple[int, ...], str]]:
    """name -> (factory, input shape at batch 1, input dtype)."""
    from _nets import NETS

    return {**NETS, "tiny_cnn": (_tiny_cnn, (1, 3, 32, 32), "float32")}


def torch_net(name: str) -> Any:
    """The net as torch builds it, in eval mode: the same weights on every call (seed 0, the
    CNNs' BatchNorm statistics taken from 4 seeded random batches), so the torch column runs what
    the cached ONNX and ncnn files hold."""
    import torch

    factory, shape, _ = specs()[name]
    torch.manual_seed(0)
    net = factory().eval()
    if any(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules()):
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.momentum = None  # a cumulative average over the batches below
        net.train()
        with torch.no_grad():
            for _ in range(4):
                net(torch.randn(4, *shape[1:]))
        net.eval()
    return net


def build(name: str) -> tuple[Path, Path | None, str]:
    """The net's ONNX file (dynamic batch) and ncnn .param (its .bin beside it), exported once
    from one torch instance and cached; the ncnn path is None when pnnx failed, with its error."""
    import torch

    CACHE.mkdir(parents=True, exist_ok=True)
    onnx_path, param, ncnn_error = CACHE / f"{name}.onnx", CACHE / f"{name}.ncnn.param", CACHE / f"{name}.ncnn.error"
    if onnx_path.exists() and (param.exists() or ncnn_error.exists()):
        return onnx_path, param if param.exists() else None, ncnn_error.read_text() if ncnn_error.exists() else ""
    _, shape, dtype = specs()[name]
    net = torch_net(name)
    example = torch.zeros((2, *shape[1:]), dtype=getattr(torch, dtype))  # batch 2: keeps the batch dynamic
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (example,), str(onnx_path), input_names=["input"], dynamo=True,
                          dynamic_shapes=({0: torch.export.Dim("batch")},), external_data=True, verbose=False)
    one = torch.zeros(shape, dtype=getattr(torch, dtype))
    error = ""
    try:
        import pnnx

        pt = CACHE / f"{name}.pt"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.jit.trace(net, (one,), check_trace=False).save(str(pt))
        kind = "i64" if dtype == "int64" else "f32"
        files = {"ncnnparam": param, "ncnnbin": CACHE / f"{name}.ncnn.bin", "pnnxparam": CACHE / f"{name}.pnnx.param",
                 "pnnxbin": CACHE / f"{name}.pnnx.bin", "pnnxpy": CACHE / f"{name}_pnnx.py",
                 "pnnxonnx": CACHE / f"{name}.pnnx.onnx", "ncnnpy": CACHE / f"{name}_ncnn.py"}
        cmd = [pnnx.EXEC_PATH, str(pt), f"inputshape=[{','.join(map(str, shape))}]{kind}", "fp16=0",
               *(f"{k}={v}" for k, v in files.items())]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0 or not param.exists():
            error = f"pnnx failed (exit {done.returncode}): {done.stderr.strip()[-400:]}"
    except ImportError:
        error = f"pnnx is not installed ({INSTALL})"
    except Exception as e:  # noqa: BLE001 - the row shows it
        error = f"tracing or pnnx failed: {type(e).__name__}: {e}"
    if error:
        param.unlink(missing_ok=True)
        ncnn_error.write_text(error)
    return onnx_path, None if error else param, error


def build_int8(name: str) -> Path:
    """The net quantized to INT8 QDQ by tt.quantize.static on 8 random inputs, cached."""
    import tether as tt

    path = CACHE / f"{name}.int8.onnx"
    if not path.exists():
        onnx_path, _, _ = build(name)
        tt.quantize.static(tt.load(str(onnx_path)), feeds(name, 8, seed=1), batch_size=4).model.save(str(path))
    return path


def feeds(name: str, batch: int, seed: int = 0) -> np.ndarray:
    _, shape, dtype = specs()[name]
    rng = np.random.default_rng(seed)
    if dtype == "int64":
        return rng.integers(0, VOCAB, size=(batch, *shape[1:]), dtype=np.int64)
    return rng.standard_normal((batch, *shape[1:])).astype(np.float32)


# ---- engines -----------------------------------------------------------------------------------------


def tether_run(path: Path, device: str, threads: int, precision: str = "fp32") -> Run:
    import tether as tt

    sess = tt.compile(tt.load(str(path)), device=device, threads=threads, precision=precision)
    out = sess.outputs[0].name
    return lambda x: sess.run({"input": x})[out]


def ncnn_gpu_index(device_name: str) -> int:
    """ncnn's index of the Vulkan device named `device_name` (tether's device)."""
    import ncnn

    names = [ncnn.get_gpu_info(i).device_name() for i in range(ncnn.get_gpu_count())]
    if device_name not in names:
        raise RuntimeError(f"ncnn does not see the Vulkan device '{device_name}' (it sees {names})")
    return names.index(device_name)


def ncnn_run(param: Path, gpu: int, threads: int, fp16: bool, int_input: bool) -> Run:
    import ncnn

    net = ncnn.Net()
    net.opt.use_vulkan_compute = True
    net.opt.num_threads = threads
    net.opt.use_fp16_packed = net.opt.use_fp16_storage = net.opt.use_fp16_arithmetic = fp16
    net.set_vulkan_device(gpu)
    if net.load_param(str(param)) != 0 or net.load_model(str(param.with_suffix(".bin"))) != 0:
        raise RuntimeError(f"ncnn could not load {param.name}")

    def one(x: np.ndarray) -> np.ndarray:
        # ncnn's Mat borrows the array's memory: `data` must outlive the extraction. Token ids
        # go in as int32 bits (ncnn's Embed reads its input as integers).
        data = np.ascontiguousarray(x.astype(np.int32).view(np.float32) if int_input else x)
        ex = net.create_extractor()
        ex.input("in0", ncnn.Mat(data))
        ret, out = ex.extract("out0")
        if ret != 0:
            raise RuntimeError(f"ncnn extract returned {ret}")
        return np.array(out)

    # No batch dimension in ncnn: one extraction per item.
    return lambda x: np.stack([one(x[i]) for i in range(x.shape[0])])


def torch_device(choice: str) -> str:
    """The torch column's device: "cuda" for --torch auto when torch sees a GPU, "" for none."""
    if choice == "none":
        return ""
    try:
        import torch
    except ImportError:
        return ""
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else ""
    return choice


def torch_version() -> str:
    import torch

    return torch.__version__


def torch_run(name: str, device: str) -> Run:
    """PyTorch eager on `device`, float32 with TF32 off: the input goes to the device once and
    stays (each timed run is the forward pass and a synchronize; tether's runs also carry their
    input up and output down), the output comes back as numpy."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    net = torch_net(name).to(device)
    held: list[Any] = [None, None]  # the last input and its copy on the device (kept alive: no id reuse)

    def run(x: np.ndarray) -> Any:
        if held[0] is not x:
            held[:] = [x, torch.from_numpy(x).to(device)]
        with torch.no_grad():
            y = net(held[1])
        y = y[0] if isinstance(y, tuple | list) else y
        if device == "cuda":
            torch.cuda.synchronize()
        return y

    return run


def _numpy(y: Any) -> np.ndarray:
    return y.detach().float().cpu().numpy() if hasattr(y, "detach") else np.asarray(y)


def _rel_error(got: np.ndarray, want: np.ndarray) -> float:
    got = np.asarray(got, np.float64).reshape(want.shape)  # ncnn drops unit dims
    return float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-30))


# ---- the table -----------------------------------------------------------------------------------------

HEADER = ("| model | batch | tether-vulkan ms | ncnn-vulkan ms | tether-cpu ms | tether-vulkan/ncnn-vulkan "
          "| rel err tether-vulkan | rel err ncnn-vulkan | note |")
ALIGN = "|---|---:|---:|---:|---:|---:|---:|---:|---|"


def _cell(row: dict[str, Any], engine: str) -> str:
    if engine in row["err"]:
        return "error" if row["err"][engine] != "not installed" else "-"
    v = row["ms"].get(engine)
    if v is None:
        return "-"
    ms = v * 1e3
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"


# With --fp16: tether's Vulkan engine under precision="fp16" as well.
FP16 = "tether-vulkan fp16"
FP16_HEADER = " tether-vulkan fp16 ms | fp16/fp32 | rel err fp16 |"
FP16_ALIGN = "---:|---:|---:|"
# With --torch (a GPU torch sees, by default): PyTorch eager on that device, FP32 with TF32 off.
TORCH = "torch"


def torch_header(device: str) -> tuple[str, str]:
    return f" torch-{device} ms | tether-vulkan/torch | rel err torch |", "---:|---:|---:|"


def format_row(row: dict[str, Any], fp16: bool = False, torch: bool = False) -> str:
    ms = row["ms"]
    ratio = (f"{ms['tether-vulkan'] / ms['ncnn-vulkan']:.2f}" if {"tether-vulkan", "ncnn-vulkan"} <= set(ms) else "-")
    rel = [f"{row['rel'][e]:.1e}" if e in row["rel"] else "-" for e in ("tether-vulkan", "ncnn-vulkan", FP16, TORCH)]
    note = "; ".join(row["notes"]).replace("|", "\\|")
    line = (f"| {row['model']} | {row['batch']} | {_cell(row, 'tether-vulkan')} | {_cell(row, 'ncnn-vulkan')} | "
            f"{_cell(row, 'tether-cpu')} | {ratio} | {rel[0]} | {rel[1]} | {note} |")
    if fp16:
        half = f"{ms[FP16] / ms['tether-vulkan']:.2f}" if {FP16, "tether-vulkan"} <= set(ms) else "-"
        line += f" {_cell(row, FP16)} | {half} | {rel[2]} |"
    if torch:
        versus = f"{ms['tether-vulkan'] / ms[TORCH]:.2f}" if {TORCH, "tether-vulkan"} <= set(ms) else "-"
        line += f" {_cell(row, TORCH)} | {versus} | {rel[3]} |"
    return line


def measure(name: str, batches: list[int], args: argparse.Namespace, gpu: int | None, errors: list[str],
            int8: bool = False) -> list[dict]:
    label = f"{name} int8" if int8 else name
    try:
        onnx_path, param, ncnn_error = (build_int8(name), None, "") if int8 else build(name)
    except Exception as e:  # noqa: BLE001 - the row shows it and the run goes on
        errors.append(f"{label}: export failed: {type(e).__name__}: {e}")
        row = {"model": label, "batch": "-", "ms": {}, "rel": {}, "err": {e_: "export" for e_ in ENGINES},
               "notes": [f"export failed: {_short(e)}"]}
        print(format_row(row, args.fp16, bool(args.torch_device)), flush=True)
        return [row]
    int_input = specs()[name][2] == "int64"
    rows = []
    for batch in batches:
        x = feeds(name, batch)
        row: dict[str, Any] = {"model": label, "batch": batch, "ms": {}, "rel": {}, "err": {}, "notes": []}
        runs: dict[str, Run] = {}
        outs: dict[str, np.ndarray] = {}
        extra = ((FP16,) if args.fp16 and not int8 else ()) + ((TORCH,) if args.torch_device and not int8 else ())
        for engine in ENGINES + extra:
            try:
                if engine == "ncnn-vulkan":
                    if int8:
                        continue
                    if gpu is None or param is None:
                        why = ncnn_error or f"ncnn is not installed ({INSTALL})"
                        row["err"][engine] = "not installed" if "not installed" in why else why
                        row["notes"].append(f"ncnn-vulkan: {_short(why, 200)}")
                        continue
                    run = ncnn_run(param, gpu, args.threads, args.ncnn_fp16, int_input)
                elif engine == "tether-vulkan":
                    run = tether_run(onnx_path, args.device, args.threads)
                elif engine == FP16:
                    run = tether_run(onnx_path, args.device, args.threads, "fp16")
                elif engine == TORCH:
                    run = torch_run(name, args.torch_device)
                else:
                    run = tether_run(onnx_path, "cpu", args.threads)
                outs[engine] = _numpy(run(x))
                runs[engine] = run
            except Exception as e:  # noqa: BLE001
                row["err"][engine] = _short(e)
                row["notes"].append(f"{engine}: {_short(e)}")
                errors.append(f"{label} (batch {batch}) {engine}: {type(e).__name__}: {e}")
        if "tether-cpu" in outs:
            for engine in ("tether-vulkan", "ncnn-vulkan", FP16, TORCH):
                if engine in outs:
                    try:
                        row["rel"][engine] = _rel_error(outs[engine], outs["tether-cpu"])
                    except ValueError as e:
                        row["notes"].append(f"{engine} vs tether-cpu: {e}")
        if runs:
            try:
                medians = interleaved_medians({e: (lambda r=r, x=x: r(x)) for e, r in runs.items()}, args.min_time,
                                              min_runs=args.rounds, rounds=args.rounds)
                row["ms"].update(medians)
            except Exception as e:  # noqa: BLE001
                row["notes"].append(f"timing failed: {_short(e)}")
        del runs, outs
        rows.append(row)
        print(format_row(row, args.fp16, bool(args.torch_device)), flush=True)
    return rows


def device_line(device: str) -> tuple[str, str]:
    """The Vulkan device tether compiles for ("" when there is none), and a line naming it."""
    import tether as tt

    vulkan = [d for d in tt.devices() if d["backend"] == "vulkan"]
    if not vulkan:
        return "", "Vulkan device: none"
    if device == "vulkan":
        ranks = ["discrete_gpu", "integrated_gpu", "virtual_gpu", "cpu", "other"]
        d = min(vulkan, key=lambda v: ranks.index(v["type"]) if v["type"] in ranks else len(ranks))
    else:
        d = vulkan[int(device.split(":")[1])]
    return d["name"], (f"Vulkan device: {d['device']} '{d['name']}' ({d['type']}, {d['driver_name']} "
                       f"{d['driver_version']}, Vulkan {d['api_version']}, fp16 {'yes' if d['fp16'] else 'no'}, "
                       f"subgroup {d['subgroup_size']})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="resnet50,mobilenetv2,bert_base_seq128")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--device", default="vulkan", help="tether's Vulkan device: vulkan or vulkan:N")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="threads of tether-cpu and of ncnn's CPU side (default: every logical CPU)")
    p.add_argument("--min-time", type=float, default=2.0, help="seconds of timed runs per engine and row")
    p.add_argument("--rounds", type=int, default=3, help="rounds of interleaved runs (and the least timed runs)")
    p.add_argument("--ncnn-fp16", action="store_true", help="ncnn with its FP16 storage and arithmetic")
    p.add_argument("--fp16", action="store_true",
                   help='also tether-vulkan under precision="fp16" (tensor cores where the device has them)')
    p.add_argument("--torch", default="auto", metavar="DEVICE",
                   help="a column of PyTorch eager (FP32, TF32 off) on DEVICE: auto (cuda when torch sees a GPU, "
                        "else none), cuda, cpu or none")
    p.add_argument("--int8", action="store_true",
                   help="also rows of each float-input net quantized by tt.quantize.static (tether only)")
    p.add_argument("--markdown", help="also write the machine, the table and the errors as markdown to this file")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: a tiny CNN at batches 1 and 2, short timings; exits 1 when tether-vulkan fails "
                        f"or its relative error against tether-cpu passes {QUICK_REL_TOL:g}")
    args = p.parse_args(argv)
    args.torch_device = torch_device(args.torch)
    if args.quick:
        models, batches = ["tiny_cnn"], [1, 2]
        args.min_time, args.rounds = min(args.min_time, 0.1), 2
    else:
        models = args.models.split(",")
        batches = [int(b) for b in args.batches.split(",")]
    unknown = [m for m in models if m not in specs()]
    if unknown:
        p.error(f"unknown models {', '.join(unknown)}; known: {', '.join(specs())}")

    device_name, device_text = device_line(args.device)
    ncnn_text, gpu = f"ncnn not installed ({INSTALL})", None
    try:
        import ncnn

        ncnn_text = f"ncnn {ncnn.__version__}"
        if device_name:
            gpu = ncnn_gpu_index(device_name)
            ncnn_text += f" on its Vulkan device {gpu}, {'FP16' if args.ncnn_fp16 else 'FP32'}"
    except ImportError:
        print(f"ncnn is not installed: its column stays empty ({INSTALL})", file=sys.stderr)
    except RuntimeError as e:
        ncnn_text += f" ({e})"
    try:
        import pnnx

        ncnn_text += f", pnnx {pnnx.__version__}"
    except (ImportError, AttributeError):
        ncnn_text += f", pnnx not installed ({INSTALL})"

    started = time.perf_counter()
    head = [f"machine: {machine()}", "", device_text, "", ncnn_text, "",
            f"settings: batches {','.join(map(str, batches))}; "
            f"tether-cpu and ncnn's CPU side on {args.threads} threads; "
            f"{args.min_time:g} s of timed runs per engine and row over {args.rounds} interleaved rounds"
            + (f"; torch {torch_version()} eager on {args.torch_device}, FP32, TF32 off" if args.torch_device else "")
            + ("; --quick: a smoke run of the machinery, its times mean nothing" if args.quick else ""), ""]
    print("\n".join(head))
    if not device_name:
        print("no Vulkan device: nothing to measure (apt-get install mesa-vulkan-drivers gives lavapipe)")
        return 1
    header, align = (HEADER + FP16_HEADER, ALIGN + FP16_ALIGN) if args.fp16 else (HEADER, ALIGN)
    if args.torch_device:
        header, align = header + torch_header(args.torch_device)[0], align + torch_header(args.torch_device)[1]
    print(header)
    print(align, flush=True)
    errors: list[str] = []
    rows: list[dict] = []
    for name in models:
        rows += measure(name, batches, args, gpu, errors)
    if args.int8:
        for name in models:
            if specs()[name][2] == "float32":
                rows += measure(name, batches, args, gpu, errors, int8=True)
    foot = [f"load average {os.getloadavg()[0]:.2f} at the end; {time.perf_counter() - started:.0f} s in all"]
    failed = [r for r in rows if not r["model"].endswith(" int8")
              if "tether-vulkan" in r["err"] or not r["rel"].get("tether-vulkan", np.inf) <= QUICK_REL_TOL]
    if args.quick and failed:
        foot.append(f"--quick FAILED: tether-vulkan failed or strayed from tether-cpu by more than {QUICK_REL_TOL:g}")
    print()
    print("\n".join(foot))
    if errors:
        print("\nerrors:")
        print("\n".join(f"- {e}" for e in errors))
    if args.markdown:
        table = [format_row(r, args.fp16, bool(args.torch_device)) for r in rows]
        text = "\n".join(head + [header, align] + table + [""] + foot)
        if errors:
            text += "\n\n## errors\n\n" + "\n\n".join(f"```\n{e}\n```" for e in errors)
        Path(args.markdown).write_text(text + "\n")
    return 1 if args.quick and failed else 0


if __name__ == "__main__":
    sys.exit(main())
