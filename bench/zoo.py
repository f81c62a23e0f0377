"""A model zoo: tether's CPU engine against onnxruntime and OpenVINO on 17 networks, in one run.

The networks (`_zoo_models.py`) are built offline with random weights (torch.manual_seed(0);
BatchNorm statistics taken from random inputs): timm image classifiers (ResNet-50,
MobileNetV3, EfficientNet-B0, ConvNeXt-T, RegNetY-400MF, DeiT-S, Swin-T) at 224x224,
transformers encoders from their configs at sequence 128 (BERT-base, DistilBERT, GPT-2 without
cache, T5-small's encoder; Whisper-tiny's encoder on 80x3000 features) and hand-written torch.nn
nets (DeepLab-style segmenter, YOLO-style detector, UNet, bidirectional-GRU tagger, LSTM). Each
is exported once with a dynamic batch by `tt.export.torch` (when it fails or does not verify,
by `torch.onnx.export(dynamo=True)`, said in the row's note) and cached in
bench/.cache/zoo/ (or $TETHER_BENCH_CACHE/zoo).

For each model, thread count and batch, the three engines run the same file on the same random
inputs: tether (`tt.compile(model, threads=N)`), onnxruntime (CPUExecutionProvider, intra-op
threads N, inter-op 1, sequential: the settings of cpu_latency.py) and OpenVINO (CPU plugin,
INFERENCE_NUM_THREADS N, INFERENCE_PRECISION_HINT f32, PERFORMANCE_HINT LATENCY; the model
reshaped to the row's static input shape, as OpenVINO is meant to be used). Their timed runs are
interleaved in blocks (5 rounds; each block begins with one untimed run, which absorbs what the
previous engine left spinning) and the median of each engine's runs is reported, with the
ratios tether/onnxruntime and tether/OpenVINO (below 1: tether is faster) and tether's max
error against onnxruntime (absolute, and relative to the largest |onnxruntime output|).

Peak RSS: for every row, each engine loads, compiles and runs the model 3 times in a fresh
process of its own (`zoo.py --rss-child ENGINE MODEL THREADS BATCH`, which imports only that
engine), reporting its peak RSS (VmHWM). It is the whole process's peak: the footer gives each
engine's peak after its import alone.

A model that fails to build or export, or an engine that fails on it, stays in the table with
the error; the run goes on. The full messages follow the table.

Usage:
    python bench/zoo.py [--models resnet50,gpt2,...] [--threads 1,2] [--batches 1,8]
                        [--min-time 1.0] [--no-rss] [--markdown out.md]
    python bench/zoo.py --quick    # a smoke run of the machinery (4 small models, 1 thread):
                                   # exits 1 when tether fails a model or strays from onnxruntime

Batches above 1 apply to the image classifiers only.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

# numpy's BLAS threads would spin beside the runtimes being measured.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("TETHER_BENCH_CACHE", HERE / ".cache")) / "zoo"
ENGINES = ("tether", "onnxruntime", "openvino")
QUICK_MODELS = ["gru_tagger", "yolo_128", "deeplab_64", "bert_tiny"]
QUICK_REL_TOL = 1e-3  # --quick fails when tether's max error / max |onnxruntime output| passes this
ROUNDS = 5
RSS_RUNS = 3

Run = Callable[[dict[str, np.ndarray]], list[np.ndarray]]


# ---- models: export once, cache ----------------------------------------------------------------


def _short(e: BaseException | str, limit: int = 240) -> str:
    """An error in one table cell: type and the first lines of the message, without pipes."""
    text = e if isinstance(e, str) else f"{type(e).__name__}: {e}"
    text = text.replace(f"{CACHE}/", "")  # the cache folder adds nothing to a file's name
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    out = "; ".join(lines[:3])
    out = out if len(out) <= limit else out[: limit - 3] + "..."
    return out.replace("|", "\\|")


def _meta_path(name: str) -> Path:
    return CACHE / f"{name}.json"


def export(name: str) -> dict[str, Any]:
    """The model's ONNX file, exported with a dynamic batch and cached, and its metadata
    (`path`, `inputs`, `exporter`, `note`). Raises when neither exporter can export it."""
    sys.path.insert(0, str(HERE))
    from _zoo_models import SPECS

    spec = SPECS[name]
    inputs = [{"name": i.name, "shape": list(i.shape), "dtype": i.dtype, "high": i.high} for i in spec.inputs]
    path, meta_path = CACHE / f"{name}.onnx", _meta_path(name)
    if path.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("inputs") == inputs:
            return meta
    CACHE.mkdir(parents=True, exist_ok=True)
    meta_path.unlink(missing_ok=True)

    import tether as tt
    import torch
    from _zoo_models import build, example

    torch.set_num_threads(1)  # torch only builds and exports; nothing of it is timed
    net = build(name)
    # A batch of 2: torch specializes sizes 0 and 1, and the batch must stay dynamic.
    args = example(spec, 2, seed=0)
    note = first_error = ""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = tt.export.torch(net, args, path, dynamic={i.name: {0: "batch"} for i in spec.inputs},
                                  golden=False, threads=1)
        if not res.ok:
            raise RuntimeError(f"the export did not verify:\n{res}")
        exporter = "tt.export.torch"
    except Exception as e:  # noqa: BLE001 - any failure leads to the plain exporter
        note = f"tt.export.torch failed ({_short(e, 160)}); torch.onnx.export(dynamo=True) used"
        first_error = "\n".join(f"{type(e).__name__}: {e}".splitlines()[:30])
        print(f"{name}: {note}", file=sys.stderr)
        exporter = "torch.onnx.export(dynamo=True)"
        batch = torch.export.Dim("batch")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(net, args, str(path), input_names=[i.name for i in spec.inputs], dynamo=True,
                              dynamic_shapes=tuple({0: batch} for _ in spec.inputs), external_data=False,
                              verbose=False)
        # The file must compute what the module does: onnxruntime against torch.
        import onnxruntime as ort

        with torch.no_grad():
            want = net(*args)
        want_list = [want] if isinstance(want, torch.Tensor) else list(want)
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        got = sess.run(None, {i.name: a.numpy() for i, a in zip(spec.inputs, args, strict=True)})
        rel = max(_errors(got, [w.numpy() for w in want_list])[1], 0.0)
        if not rel <= QUICK_REL_TOL:
            note += f"; onnxruntime differs from torch by {rel:.1e} (relative)"
    del net
    gc.collect()
    meta = {"name": name, "path": str(path), "inputs": inputs, "exporter": exporter, "note": note,
            "export_error": first_error, "classifier": spec.classifier, "family": spec.family, "about": spec.about}
    meta_path.write_text(json.dumps(meta, indent=1))
    return meta


def feeds_of(meta: dict[str, Any], batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for i in meta["inputs"]:
        shape = (batch, *i["shape"][1:])
        if i["dtype"] == "int64":
            out[i["name"]] = rng.integers(0, i["high"], size=shape, dtype=np.int64)
        else:
            out[i["name"]] = rng.standard_normal(shape).astype(np.float32)
    return out


# ---- engines ------------------------------------------------------------------------------------


def make_run(engine: str, path: str, threads: int, feeds: dict[str, np.ndarray]) -> Run:
    """Loads and compiles the model in `engine`; returns a function running it (outputs in the
    model's order)."""
    if engine == "tether":
        import tether as tt

        sess = tt.compile(tt.load(path), threads=threads)
        return lambda f: list(sess.run(f).values())
    if engine == "onnxruntime":
        import onnxruntime as ort

        opts = ort.SessionOptions()  # as cpu_latency.ort_session
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        ref = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        return lambda f: ref.run(None, f)
    if engine == "openvino":
        import openvino as ov

        core = ov.Core()
        model = core.read_model(path)
        model.reshape({name: ov.PartialShape(list(a.shape)) for name, a in feeds.items()})
        compiled = core.compile_model(model, "CPU", {
            "INFERENCE_NUM_THREADS": threads,
            "INFERENCE_PRECISION_HINT": "f32",  # not bf16, its default where the CPU has AMX
            "PERFORMANCE_HINT": "LATENCY",
        })
        request = compiled.create_infer_request()
        outputs = list(compiled.outputs)

        def run(f: dict[str, np.ndarray]) -> list[np.ndarray]:
            res = request.infer(f)
            return [np.asarray(res[o]) for o in outputs]

        return run
    raise ValueError(engine)


def _errors(got: list[np.ndarray], want: list[np.ndarray]) -> tuple[float, float]:
    """Max absolute error over the outputs, and max over outputs of max |got - want| / max |want|."""
    if len(got) != len(want):
        raise ValueError(f"{len(got)} outputs against {len(want)}")
    abs_err = rel_err = 0.0
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            raise ValueError(f"output shape {g.shape} against {w.shape}")
        if g.size == 0:
            continue
        d = float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64))))
        abs_err = max(abs_err, d)
        rel_err = max(rel_err, d / max(float(np.max(np.abs(w))), 1e-30))
    return abs_err, rel_err


def interleaved_medians(runs: dict[str, Callable[[], Any]], min_time: float, min_runs: int = 5,
                        rounds: int = ROUNDS) -> dict[str, float]:
    """Median latency of each run function. The engines take turns in `rounds` rounds (the
    first engine changes from round to round); in each round an engine runs once untimed, then
    timed until its block reaches min_time / rounds (at least one run), and it runs more rounds
    while it has fewer than min_runs timed runs."""
    times: dict[str, list[float]] = {e: [] for e in runs}
    order = list(runs)
    block = min_time / rounds
    r = 0
    while r < rounds or any(len(t) < min_runs for t in times.values()):
        for e in order[r % len(order):] + order[: r % len(order)]:
            runs[e]()
            start = time.perf_counter()
            while True:
                t0 = time.perf_counter()
                runs[e]()
                t1 = time.perf_counter()
                times[e].append(t1 - t0)
                if t1 - start >= block:
                    break
        r += 1
    return {e: statistics.median(t) for e, t in times.items()}


# ---- peak RSS in child processes ----------------------------------------------------------------


def rss_child(engine: str, model: str, threads: int, batch: int) -> int:
    """`--rss-child`: load, compile and run one model RSS_RUNS times in `engine` alone; print
    the peak RSS (model "-": after importing the engine only)."""
    if engine == "tether":
        import tether  # noqa: F401
    elif engine == "onnxruntime":
        import onnxruntime  # noqa: F401
    else:
        import openvino  # noqa: F401
    if model != "-":
        meta = json.loads(_meta_path(model).read_text())
        feeds = feeds_of(meta, batch)
        run = make_run(engine, meta["path"], threads, feeds)
        for _ in range(RSS_RUNS):
            run(feeds)
    print(json.dumps({"peak_mb": _peak_mb()}))
    return 0


def _peak_mb() -> float:
    """This process's peak RSS. VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over
    exec, so a child would report the peak of the parent it was forked from."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def measure_rss(engine: str, model: str, threads: int, batch: int) -> str:
    """The peak RSS of a child, in MB, or its error."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--rss-child", engine, model, str(threads), str(batch)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return "timeout"
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return "error"
    return f"{json.loads(lines[-1])['peak_mb']:.0f}"


# ---- the table ----------------------------------------------------------------------------------


def machine() -> str:
    import onnxruntime as ort
    import tether as tt

    info = tt.cpu_info()
    flags: set[str] = set()
    model_name = ""
    for line in open("/proc/cpuinfo"):
        if line.startswith("flags") and not flags:
            flags = set(line.split(":", 1)[1].split())
        elif line.startswith("model name") and not model_name:
            model_name = line.split(":", 1)[1].strip()
    wanted = ["avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16", "avx512_fp16",
              "amx_tile", "amx_int8", "amx_bf16"]
    isa = " ".join(f for f in wanted if f in flags) or "none of avx2/avx512/amx"
    versions = [f"tether {tt.__version__}", f"onnxruntime {ort.__version__}"]
    try:
        import openvino as ov

        versions.append(f"openvino {ov.get_version().split('-')[0]}")
    except ImportError:
        versions.append("openvino not installed")
    return (f"{info['brand'] or model_name or platform.processor()}, {info['physical_cores']} physical cores, "
            f"{os.cpu_count()} logical CPUs; ISA flags: {isa}; tether kernels: {info['isa']} "
            f"({info['gemm_kernel']}); {', '.join(versions)}; load average {os.getloadavg()[0]:.2f} at start")


HEADER = ("| model | threads | batch | tether ms | onnxruntime ms | openvino ms | tether/ort | tether/openvino "
          "| max abs err vs ort | rel err vs ort | peak RSS MB tether | peak RSS MB ort | peak RSS MB openvino "
          "| note |")
ALIGN = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"


def _ms(v: float | None, err: str | None) -> str:
    return "error" if err else ("-" if v is None else f"{v * 1e3:.2f}")


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{a / b:.2f}"


def measure_model(name: str, threads_list: list[int], batches: list[int], min_time: float, rss: Callable[..., bool],
                  available: list[str], errors: list[str]) -> list[dict[str, Any]]:
    """Every row of one model: one per thread count and batch, or one row with the export error."""
    try:
        meta = export(name)
    except Exception as e:  # noqa: BLE001 - the row shows it and the run goes on
        errors.append(f"{name}: export failed: {type(e).__name__}: {e}")
        row = {"model": name, "threads": "-", "batch": "-", "export_error": _short(e)}
        print(format_row(row), flush=True)
        return [row]
    if meta.get("export_error"):
        errors.append(f"{name}: tt.export.torch failed, torch.onnx.export(dynamo=True) used instead:\n"
                      f"{meta['export_error']}")
    rows = []
    for batch in [b for b in batches if b == 1 or meta["classifier"]]:
        feeds = feeds_of(meta, batch)
        for threads in threads_list:
            row: dict[str, Any] = {"model": name, "threads": threads, "batch": batch, "ms": {}, "err": {},
                                   "rss": {}, "notes": [meta["note"]] if meta["note"] else []}
            runs: dict[str, Run] = {}
            outs: dict[str, list[np.ndarray]] = {}
            for engine in ENGINES:
                if engine not in available:
                    row["err"][engine] = "not installed"
                    continue
                try:
                    run = make_run(engine, meta["path"], threads, feeds)
                    outs[engine] = run(feeds)
                    runs[engine] = run
                except Exception as e:  # noqa: BLE001
                    row["err"][engine] = _short(e)
                    row["notes"].append(f"{engine}: {_short(e)}")
                    errors.append(f"{name} (threads {threads}, batch {batch}) {engine}: {type(e).__name__}: {e}")
            if "tether" in outs and "onnxruntime" in outs:
                try:
                    row["abs"], row["rel"] = _errors(outs["tether"], outs["onnxruntime"])
                except ValueError as e:
                    row["notes"].append(f"tether vs onnxruntime: {e}")
            if "openvino" in outs and "onnxruntime" in outs:
                try:
                    ov_rel = _errors(outs["openvino"], outs["onnxruntime"])[1]
                    if not ov_rel <= QUICK_REL_TOL:
                        row["notes"].append(f"openvino differs from onnxruntime by {ov_rel:.1e} (relative)")
                except ValueError as e:
                    row["notes"].append(f"openvino vs onnxruntime: {e}")
            if runs:
                try:
                    medians = interleaved_medians({e: (lambda r=r, f=feeds: r(f)) for e, r in runs.items()}, min_time)
                    row["ms"].update(medians)
                except Exception as e:  # noqa: BLE001
                    row["notes"].append(f"timing failed: {_short(e)}")
            del runs, outs
            gc.collect()
            if rss(name, threads, batch):
                for engine in ENGINES:
                    if engine in available:
                        row["rss"][engine] = measure_rss(engine, name, threads, batch)
            rows.append(row)
            print(format_row(row), flush=True)
    return rows


def format_row(row: dict[str, Any]) -> str:
    if "export_error" in row:
        return (f"| {row['model']} | - | - | export failed | - | - | - | - | - | - | - | - | - | "
                f"{row['export_error']} |")
    ms, err, rss = row["ms"], row["err"], row["rss"]
    t, o, v = (ms.get(e) for e in ENGINES)
    abs_e = f"{row['abs']:.1e}" if "abs" in row else "-"
    rel_e = f"{row['rel']:.1e}" if "rel" in row else "-"
    note = "; ".join(row["notes"]).replace("|", "\\|")
    return (f"| {row['model']} | {row['threads']} | {row['batch']} | {_ms(t, err.get('tether'))} | "
            f"{_ms(o, err.get('onnxruntime'))} | {_ms(v, err.get('openvino'))} | {_ratio(t, o)} | {_ratio(t, v)} | "
            f"{abs_e} | {rel_e} | {rss.get('tether', '-')} | {rss.get('onnxruntime', '-')} | "
            f"{rss.get('openvino', '-')} | {note} |")


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", help="comma-separated names (default: the full zoo; see _zoo_models.SPECS)")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--batches", default="1", help="batches above 1 apply to the image classifiers only")
    p.add_argument("--min-time", type=float, default=1.0, help="seconds of timed runs per engine and row")
    p.add_argument("--no-rss", action="store_true", help="skip the peak-RSS child processes")
    p.add_argument("--markdown", help="also write the machine, the table and the errors as markdown to this file")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 4 small models, 1 thread, short timings, RSS for one row; exits 1 when tether "
                        "fails a model or its relative error against onnxruntime passes 1e-3")
    p.add_argument("--rss-child", nargs=4, metavar=("ENGINE", "MODEL", "THREADS", "BATCH"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.rss_child:
        engine, model, threads, batch = args.rss_child
        return rss_child(engine, model, int(threads), int(batch))

    sys.path.insert(0, str(HERE))
    from _zoo_models import FULL, SPECS

    if args.quick:
        models = args.models.split(",") if args.models else QUICK_MODELS
        threads_list, batches, min_time = [1], [1], min(args.min_time, 0.05)
    else:
        models = args.models.split(",") if args.models else FULL
        threads_list = [int(t) for t in args.threads.split(",")]
        batches = [int(b) for b in args.batches.split(",")]
        min_time = args.min_time
    unknown = [m for m in models if m not in SPECS]
    if unknown:
        p.error(f"unknown models {', '.join(unknown)}; known: {', '.join(SPECS)}")
    available = ["tether", "onnxruntime"]
    try:
        import openvino  # noqa: F401

        available.append("openvino")
    except ImportError:
        print("openvino is not installed: its columns stay empty", file=sys.stderr)

    def rss(model: str, threads: int, batch: int) -> bool:
        if args.no_rss:
            return False
        return not args.quick or (model == models[0] and threads == threads_list[0] and batch == batches[0])

    started = time.perf_counter()
    head = [f"machine: {machine()}", "",
            f"settings: threads {','.join(map(str, threads_list))}; batches {','.join(map(str, batches))} "
            f"(above 1: image classifiers only); {min_time:g} s of timed runs per engine and row, interleaved; "
            f"peak RSS {'off' if args.no_rss else 'per engine in a child process'}"
            + ("; --quick: a smoke run of the machinery, its times mean nothing" if args.quick else ""), ""]
    print("\n".join(head))
    print(HEADER)
    print(ALIGN, flush=True)
    errors: list[str] = []
    rows: list[dict[str, Any]] = []
    for name in models:
        rows += measure_model(name, threads_list, batches, min_time, rss, available, errors)

    ran = [r for r in rows if "ms" in r]
    ort_ratios = [r["ms"]["tether"] / r["ms"]["onnxruntime"] for r in ran if {"tether", "onnxruntime"} <= set(r["ms"])]
    ov_ratios = [r["ms"]["tether"] / r["ms"]["openvino"] for r in ran if {"tether", "openvino"} <= set(r["ms"])]
    foot = [f"geometric mean of tether/onnxruntime over {len(ort_ratios)} rows: {geomean(ort_ratios):.2f}; "
            f"of tether/openvino over {len(ov_ratios)} rows: {geomean(ov_ratios):.2f}"]
    if not args.no_rss:
        base = {e: measure_rss(e, "-", 1, 1) for e in available}
        foot.append("peak RSS after importing the engine alone, MB: "
                    + ", ".join(f"{e} {v}" for e, v in base.items()))
    foot.append(f"load average {os.getloadavg()[0]:.2f} at the end; {time.perf_counter() - started:.0f} s in all")
    failed = [r for r in rows if r.get("export_error") or r.get("err", {}).get("tether")
              or r.get("err", {}).get("onnxruntime") or not r.get("rel", math.inf) <= QUICK_REL_TOL]
    if args.quick and failed:
        foot.append(f"--quick FAILED on {', '.join(sorted({r['model'] for r in failed}))}: an export or tether "
                    f"error, or a relative error against onnxruntime above {QUICK_REL_TOL:g}")
    print()
    print("\n".join(foot))
    if errors:
        print("\nerrors:")
        print("\n".join(f"- {e}" for e in errors))
    if args.markdown:
        table = [HEADER, ALIGN] + [format_row(r) for r in rows]
        text = "\n".join(head + table + [""] + foot)
        if errors:
            text += "\n\n## errors\n\n" + "\n\n".join(f"```\n{e}\n```" for e in errors)
        Path(args.markdown).write_text(text + "\n")
    return 1 if args.quick and failed else 0


if __name__ == "__main__":
    sys.exit(main())
