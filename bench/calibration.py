"""INT8 calibration: tether.quantize.static against onnxruntime's quantize_static, in one run.

ResNet-50 (224x224) and BERT-base (sequence 128) from `_nets.py` (random weights), exported once
with a dynamic batch, are calibrated by both tools on the same samples (standard normal images;
uniform random token ids), fed in the same batches, with the same range method (MinMax, Entropy,
Percentile), and written as QDQ models (int8 activations, per-channel int8 weights).

Every (model, tool, method) runs in a fresh process of its own, so that its peak RSS (VmHWM) is
its own; its wall time covers the whole call: calibration and writing the QDQ model (tether:
``tt.quantize.static(...)`` then ``res.save(...)``; onnxruntime: ``quantize_static(...)``). Both
run on 2 threads: onnxruntime's calibrator builds its InferenceSession with default
SessionOptions, so this script replaces ``CalibraterBase.create_inference_session`` by the same
function with ``intra_op_num_threads`` = 2 (its graph optimisations stay off, as onnxruntime has
them). More processes per model measure tether's FP32 inference of the same batches (load,
compile, run: the reference of the memory target, peak <= 1.2 x FP32 peak + histograms of
tensors x 2 x bins x 8 B) and, in one process, how tether's calibration time splits (setup,
observation, ranges) beside FP32 inference of the same batches. A last one checks that fast is
not wrong: the QDQ models of both tools, run by onnxruntime on held-out inputs, against the float
model (SQNR of the outputs).

Each child is capped: resident memory (the parent stops it, default 18 GiB, less when the machine
has less available), address space (setrlimit, a backstop) and wall time (default 30 min). A run
that passes a cap is reported as such ("out of memory at ~18 GiB after N s"): onnxruntime's
Entropy and Percentile calibrators keep every activation of every sample in memory.

Usage:
    python bench/calibration.py [--models resnet50,bert_base_seq128] [--methods minmax,entropy,percentile]
                                [--samples 256] [--repeat 3] [--markdown out.md]
    python bench/calibration.py --quick     # a smoke run on a tiny CNN, 16 samples: no timing claims
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# numpy's BLAS threads would spin beside the runtimes being measured.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("TETHER_BENCH_CACHE", HERE / ".cache"))
GIB = 1 << 30
MIB = 1 << 20
VOCAB = 30522  # BertBase's default vocabulary (`_nets.py`)
METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}
DEFAULT_BATCH = {"resnet50": 8, "bert_base_seq128": 16, "tiny_cnn": 4}
BINS = 2048
# tether's options that match the onnxruntime call below (its profile is onnxruntime's grid).
TETHER_OPTIONS = {"per_channel": True, "activations": {"dtype": "int8"}, "weights": {"dtype": "int8"}}
HELD_OUT_SEED = 1_000_003  # quality inputs: never among the calibration batches


# ---- models and data ------------------------------------------------------------------------


def tiny_cnn() -> Path:
    """A small CNN written with onnx.helper (dynamic batch) for the --quick smoke run."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / "tiny_cnn.onnx"
    if path.exists():
        return path
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32), name)

    inits = [weight("w1", 8, 3, 3, 3), weight("b1", 8), weight("w2", 16, 8, 3, 3), weight("b2", 16),
             weight("w3", 10, 16), weight("b3", 10)]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "tiny_cnn", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def model_info(name: str) -> tuple[Path, tuple[int, ...], str]:
    """(ONNX path, example shape, input kind) of a bench net (exported once, cached) or the tiny CNN."""
    if name == "tiny_cnn":
        return tiny_cnn(), (1, 3, 16, 16), "float"
    sys.path.insert(0, str(HERE))
    from _nets import NETS
    from cpu_latency import export  # the same export, checked against torch at a batch it never saw

    _, shape, dtype = NETS[name]
    return export(name), tuple(shape), "tokens" if dtype == "int64" else "float"


def batches(kind: str, shape: list[int], samples: int, batch: int, seed: int = 0):
    """The calibration stream: batch k is drawn from its own seed, so every process (and both
    tools) sees the same samples in the same batches, generated lazily (never all in memory)."""
    for k, start in enumerate(range(0, samples, batch)):
        n = min(batch, samples - start)
        rng = np.random.default_rng([seed, k])
        if kind == "tokens":
            yield rng.integers(0, VOCAB, (n, *shape[1:]), dtype=np.int64)
        else:
            yield rng.standard_normal((n, *shape[1:]), dtype=np.float32)


# ---- children: one measurement each, in a fresh process -------------------------------------


def _peak_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _stream(spec: dict[str, Any], seed: int = 0):
    return batches(spec["kind"], spec["shape"], spec["samples"], spec["batch"], seed)


def child_fp32(spec: dict[str, Any]) -> dict[str, Any]:
    """tether's FP32 inference of the calibration batches: load, compile, run every batch."""
    import tether as tt

    t0 = time.perf_counter()
    model = tt.load(spec["path"])
    sess = tt.compile(model, threads=spec["threads"])
    t1 = time.perf_counter()
    for x in _stream(spec):
        sess.run({spec["input"]: x})
    t2 = time.perf_counter()
    return {"wall": t2 - t0, "compile": t1 - t0, "run": t2 - t1}


def child_tether(spec: dict[str, Any]) -> dict[str, Any]:
    import tether as tt

    t0 = time.perf_counter()
    res = tt.quantize.static(spec["path"], _stream(spec), method=spec["method"], eval_samples=0,
                             threads=spec["threads"], bins=BINS, progress=False, per_channel=True,
                             activation_type="int8", weight_type="int8")
    res.save(spec["out"])
    return {"wall": time.perf_counter() - t0}


def child_onnxruntime(spec: dict[str, Any]) -> dict[str, Any]:
    import onnxruntime as ort
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        calibrate,
        quantize_static,
    )

    def create_inference_session(self) -> None:
        # onnxruntime's own function (optimisations off), with the thread count set.
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.intra_op_num_threads = spec["threads"]
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.infer_session = ort.InferenceSession(self.augmented_model_path, sess_options=opts,
                                                  providers=self.execution_providers)

    calibrate.CalibraterBase.create_inference_session = create_inference_session

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.stream = _stream(spec)

        def get_next(self) -> dict[str, np.ndarray] | None:
            x = next(self.stream, None)
            return None if x is None else {spec["input"]: x}

    t0 = time.perf_counter()
    quantize_static(spec["path"], spec["out"], Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    calibrate_method=getattr(CalibrationMethod, METHODS[spec["method"]]))
    return {"wall": time.perf_counter() - t0}


def child_breakdown(spec: dict[str, Any]) -> dict[str, Any]:
    """Where tether's calibration time goes, in one process: FP32 inference of the same batches,
    the same with the observed values kept (``keep``: no pass fuses them away, as in the
    calibrator's session) but not observed, and observation (the batches are made beforehand,
    so that no time includes making them). The three are alternated, twice."""
    import tether as tt

    feeds = [{spec["input"]: x} for x in _stream(spec)]
    t0 = time.perf_counter()
    cal = tt.quantize.Calibrator(spec["path"], threads=spec["threads"], bins=BINS, options=TETHER_OPTIONS)
    setup = time.perf_counter() - t0
    names = list(cal.stats())
    plain = tt.compile(cal.model, threads=spec["threads"])  # the same prepared graph
    kept = tt.compile(cal.model, threads=spec["threads"], keep=names)
    times: dict[str, list[float]] = {"fp32": [], "keep": [], "observe": []}
    for i in range(2):
        for key, sess in (("fp32", plain), ("keep", kept)):
            t = time.perf_counter()
            for f in feeds:
                sess.run(f)
            times[key].append(time.perf_counter() - t)
        into = cal if i == 0 else tt.quantize.Calibrator(cal.model, threads=spec["threads"], bins=BINS,
                                                          options=TETHER_OPTIONS)
        t = time.perf_counter()
        for f in feeds:
            into.observe(f)
        times["observe"].append(time.perf_counter() - t)
    ranges = {}
    for m in spec["methods"]:
        t = time.perf_counter()
        cal.compute(m)
        ranges[m] = time.perf_counter() - t
    elements = sum(int(st.count + st.nonfinite) for st in cal.stats().values())  # every value observed once
    return {"wall": time.perf_counter() - t0, "setup": setup, **times, "ranges": ranges, "observed": len(names),
            "samples": cal.samples,
            "planned": len(cal.plan.tensors), "kernels": [_kernels(plain.report), _kernels(kept.report)],
            "elements": elements}


def _kernels(report: str) -> int:
    m = re.search(r"cpu: (\d+) kernels", report)
    return int(m.group(1)) if m else -1


def _sqnr_db(ref: np.ndarray, got: np.ndarray) -> float:
    ref64, err = ref.astype(np.float64), got.astype(np.float64) - ref.astype(np.float64)
    noise = float((err * err).sum())
    return float("inf") if noise == 0 else 10.0 * float(np.log10(float((ref64 * ref64).sum()) / noise))


def child_quality(spec: dict[str, Any]) -> dict[str, Any]:
    """SQNR of each QDQ model's outputs against the float model's, all run by onnxruntime."""
    import onnxruntime as ort

    def outputs(path: str) -> np.ndarray:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = spec["threads"]
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        return np.concatenate([sess.run(None, {spec["input"]: x})[0]
                               for x in _stream(spec, seed=HELD_OUT_SEED)])

    ref = outputs(spec["path"])
    out = {}
    for label, path in spec["candidates"].items():
        got = outputs(path)
        top1 = float((got.argmax(-1) == ref.argmax(-1)).mean()) if ref.ndim == 2 else None
        out[label] = {"sqnr_db": _sqnr_db(ref, got), "top1": top1}
    return {"wall": 0.0, "quality": out}


CHILDREN = {"fp32": child_fp32, "tether": child_tether, "onnxruntime": child_onnxruntime,
            "breakdown": child_breakdown, "quality": child_quality}


def run_child(spec: dict[str, Any]) -> int:
    # The address-space cap is a backstop: the parent stops a child whose RSS passes its cap.
    cap = int(spec["as_cap"])
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    t0 = time.perf_counter()
    try:
        result = CHILDREN[spec["role"]](spec)
        code = 0
    except Exception as e:  # reported to the parent, which tells a memory failure from a bug
        result = {"error": f"{type(e).__name__}: {str(e)[:400]}", "wall": time.perf_counter() - t0}
        code = 3
    result["peak_mb"] = _peak_mb()
    print("RESULT " + json.dumps(result), flush=True)
    return code


# ---- the parent: supervision ----------------------------------------------------------------


def _meminfo(key: str) -> int:
    for line in open("/proc/meminfo"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _rss(pid: int) -> int:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _cpu_ticks() -> tuple[int, int]:
    """(busy, steal) clock ticks of the whole machine since boot, from /proc/stat."""
    f = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (f + [0] * 8)[:8]
    return user + nice + system + irq + softirq, steal


def other_load(window: float = 5.0) -> float:
    """Cores busy over `window` seconds while this script runs nothing: other processes' load."""
    busy0, _ = _cpu_ticks()
    time.sleep(window)
    busy1, _ = _cpu_ticks()
    return (busy1 - busy0) / os.sysconf("SC_CLK_TCK") / window


def wait_quiet(below: float, patience: float) -> tuple[float, float]:
    """Waits (at most `patience` s) until other processes use fewer than `below` cores;
    returns (seconds waited, their last measured load)."""
    t0 = time.perf_counter()
    load = other_load()
    while load >= below and time.perf_counter() - t0 < patience:
        load = other_load()
    return time.perf_counter() - t0, load


def supervise(spec: dict[str, Any], rss_cap: int, timeout: float) -> dict[str, Any]:
    """Runs one child; returns its result with what the parent saw (status, peak, other CPU use)."""
    spec = {**spec, "as_cap": rss_cap + 6 * GIB}
    hz = os.sysconf("SC_CLK_TCK")
    load1 = os.getloadavg()[0]
    busy0, steal0 = _cpu_ticks()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
                             stdout=out, stderr=err)
        peak, stopped = 0, None
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            elapsed = time.perf_counter() - t0
            rss = _rss(p.pid)
            peak = max(peak, rss)
            if stopped is None:
                if rss > rss_cap:
                    stopped = f"out of memory at ~{rss / GIB:.1f} GiB after {elapsed:.0f} s"
                elif elapsed > timeout:
                    stopped = f"timeout after {elapsed:.0f} s"
                elif _meminfo("MemAvailable") < GIB:
                    stopped = f"stopped at {rss / GIB:.1f} GiB after {elapsed:.0f} s: the machine ran low on memory"
                if stopped:
                    p.kill()
            time.sleep(0.1)
        p.returncode = os.waitstatus_to_exitcode(status)
        elapsed = time.perf_counter() - t0
        busy1, steal1 = _cpu_ticks()
        out.seek(0)
        err.seek(0)
        lines = [line for line in out.read().splitlines() if line.startswith("RESULT ")]
        stderr = err.read()
    result: dict[str, Any] = json.loads(lines[-1][7:]) if lines else {}
    child_cpu = usage.ru_utime + usage.ru_stime
    result.update(elapsed=elapsed, load1=load1, cpu=child_cpu, returncode=p.returncode,
                  peak_mb=result.get("peak_mb", max(peak, usage.ru_maxrss * 1024) / MIB),
                  other_cores=max(0.0, ((busy1 - busy0) / hz - child_cpu) / elapsed),
                  steal_cores=(steal1 - steal0) / hz / elapsed)
    if stopped:
        result["failed"] = stopped
    elif "error" in result:
        memory = any(s in result["error"] for s in ("MemoryError", "bad_alloc", "bad allocation", "allocate"))
        result["failed"] = (f"out of memory (address space capped at ~{spec['as_cap'] / GIB:.0f} GiB) after "
                            f"{result['wall']:.0f} s" if memory else f"error: {result['error']}")
    elif p.returncode != 0 or not lines:
        tail = stderr.strip().splitlines()[-3:]
        result["failed"] = f"exit {p.returncode} after {elapsed:.0f} s: {' / '.join(tail)}"
    return result


# ---- tables ---------------------------------------------------------------------------------


def _spread(values: list[float], fmt: str) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return format(values[0], fmt)
    return f"{format(statistics.median(values), fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def _ok(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in runs if "failed" not in r]


def _cell(runs: list[dict[str, Any]], key: str, fmt: str) -> str:
    good = _ok(runs)
    if good:
        values = [r[key] for r in good]
        if fmt == "s":  # seconds: three significant digits or so
            fmt = ".2f" if statistics.median(values) < 10 else ".1f" if statistics.median(values) < 100 else ".0f"
        return _spread(values, fmt)
    return runs[0]["failed"] if runs else "-"


def main_table(models: list[str], methods: list[str], runs: dict, hist: dict[str, int]) -> list[str]:
    rows = ["| model | method | tether s | onnxruntime s | ratio (tether/ort) | tether FP32 inference s "
            "(load, compile, run) | FP32 / ort (floor of the ratio) | tether peak RSS MB "
            "| onnxruntime peak RSS MB | tether FP32 inference peak MB | RSS target MB (1.2 x FP32 + histograms) "
            "| targets met? (time <= 0.2x, RSS) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for model in models:
        fp32 = _ok(runs.get((model, "fp32", ""), []))
        fp32_peak = statistics.median([r["peak_mb"] for r in fp32]) if fp32 else None
        target = None if fp32_peak is None else 1.2 * fp32_peak + hist.get(model, 0) / MIB
        fp32_s = statistics.median([r["wall"] for r in fp32]) if fp32 else None
        for method in methods:
            ours, theirs = runs.get((model, "tether", method), []), runs.get((model, "onnxruntime", method), [])
            t_ok, o_ok = _ok(ours), _ok(theirs)
            t_s = statistics.median([r["wall"] for r in t_ok]) if t_ok else None
            o_s = statistics.median([r["wall"] for r in o_ok]) if o_ok else None
            if t_s is not None and o_s is not None:
                ratio = f"{t_s / o_s:.2f}"
                time_ok = "yes" if t_s <= 0.2 * o_s else "no"
            elif t_s is not None and theirs and theirs[0]["failed"].startswith(("out of memory", "timeout")):
                # onnxruntime was stopped: it ran at least this long, an upper bound on the ratio.
                ratio = f"< {t_s / theirs[0]['elapsed']:.2f}"
                time_ok = "yes" if t_s <= 0.2 * theirs[0]["elapsed"] else "unknown"
            else:
                ratio, time_ok = "-", "-"
            floor = "-" if fp32_s is None or o_s is None else f"{fp32_s / o_s:.2f}"
            t_peak = statistics.median([r["peak_mb"] for r in t_ok]) if t_ok else None
            rss_ok = "-" if t_peak is None or target is None else ("yes" if t_peak <= target else "no")
            o_peak = _cell(theirs, "peak_mb", ".0f") if o_ok else (
                f"> {max(r['peak_mb'] for r in theirs):.0f} (stopped)" if theirs else "-")
            rows.append(
                f"| {model} | {method} | {_cell(ours, 'wall', 's')} | {_cell(theirs, 'wall', 's')} | {ratio} | "
                f"{_cell(fp32, 'wall', 's')} | {floor} | "
                f"{_cell(ours, 'peak_mb', '.0f')} | {o_peak} | {'-' if fp32_peak is None else f'{fp32_peak:.0f}'} | "
                f"{'-' if target is None else f'{target:.0f}'} | time: {time_ok}; RSS: {rss_ok} |")
    return rows


def breakdown_table(models: list[str], runs: dict) -> list[str]:
    rows = ["| model | FP32: load + compile s | FP32: run all batches s | FP32 with the observed values kept s "
            "| calibrate: observe all batches s | observe / FP32 | observation ns per value (wall) | kernels "
            "(FP32 / kept) | calibrator setup s | ranges s (" + " / ".join(METHODS) + ") | tensors observed "
            "(values per sample) | histograms MB |",
            "|---|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---:|"]
    for model in models:
        fp32 = _ok(runs.get((model, "fp32", ""), []))
        b = _ok(runs.get((model, "breakdown", ""), []))
        if not b:
            continue
        r = b[0]
        fp, kept, obs = (statistics.median(r[k]) for k in ("fp32", "keep", "observe"))
        samples = r["samples"] or 1
        ranges = " / ".join(f"{r['ranges'][m]:.2f}" if m in r["ranges"] else "-" for m in METHODS)
        rows.append(
            f"| {model} | {_spread([x['compile'] for x in fp32], '.2f')} | {_spread(r['fp32'], '.2f')} | "
            f"{_spread(r['keep'], '.2f')} | {_spread(r['observe'], '.2f')} | {obs / fp:.2f} | "
            f"{(obs - kept) / r['elements'] * 1e9:.2f} | {r['kernels'][0]} / {r['kernels'][1]} | {r['setup']:.2f} | "
            f"{ranges} | {r['observed']} ({r['elements'] / samples / 1e6:.1f} M) | "
            f"{r['observed'] * 2 * BINS * 8 / MIB:.1f} |")
    return rows


def quality_table(models: list[str], runs: dict) -> list[str]:
    rows = ["| model | method | SQNR tether QDQ dB | SQNR onnxruntime QDQ dB | top-1 agreement tether | "
            "top-1 agreement onnxruntime |", "|---|---|---:|---:|---:|---:|"]
    for model in models:
        q = _ok(runs.get((model, "quality", ""), []))
        if not q:
            continue
        res = q[0]["quality"]
        for method in sorted({k.split(":")[1] for k in res}, key=list(METHODS).index):
            cells = []
            for key in ("sqnr_db", "top1"):
                for tool in ("tether", "onnxruntime"):
                    v = res.get(f"{tool}:{method}", {}).get(key)
                    cells.append("-" if v is None else (f"{v:.1f}" if key == "sqnr_db" else f"{100 * v:.0f}%"))
            rows.append(f"| {model} | {method} | " + " | ".join(cells) + " |")
    return rows


def machine(threads: int) -> str:
    import onnxruntime as ort
    import tether as tt

    info = tt.cpu_info()
    return (f"{info['brand'] or platform.processor()}, {info['physical_cores']} physical cores, ISA {info['isa']}, "
            f"{_meminfo('MemTotal') / GIB:.0f} GiB RAM; {threads} threads for both tools; "
            f"tether {tt.__version__}, onnxruntime {ort.__version__}; {datetime.date.today().isoformat()}")


# ---- main -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return run_child(json.loads(argv[1]))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="resnet50,bert_base_seq128")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--samples", type=int, default=256)
    p.add_argument("--batch", type=int, help="batch size for every model (default: 8 ResNet-50, 16 BERT)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3, help="runs of each row whose first run took under --slow s")
    p.add_argument("--slow", type=float, default=300.0)
    p.add_argument("--rss-cap-gib", type=float, default=18.0)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per child")
    p.add_argument("--quiet-below", type=float, default=0.3,
                   help="before each run, wait until other processes use fewer cores than this ...")
    p.add_argument("--quiet-wait", type=float, default=300.0, help="... for at most this many seconds")
    p.add_argument("--breakdown-samples", type=int, default=64, help="samples of the time-breakdown process")
    p.add_argument("--markdown", help="also write the tables as markdown to this file")
    p.add_argument("--quick", action="store_true", help="a smoke run on a tiny CNN with 16 samples (no timing claims)")
    args = p.parse_args(argv)
    if args.quick:
        args.models, args.samples, args.repeat, args.timeout, args.quiet_wait = "tiny_cnn", 16, 1, 120.0, 0.0
    models = args.models.split(",")
    methods = args.methods.split(",")
    for m in methods:
        if m not in METHODS:
            p.error(f"unknown method {m!r}; known: {', '.join(METHODS)}")

    header = [f"machine: {machine(args.threads)}",
              f"{args.samples} calibration samples; batches: "
              + ", ".join(f"{m} {args.batch or DEFAULT_BATCH.get(m, 8)}" for m in models)
              + f"; histograms of 2 x {BINS} bins; command: python bench/calibration.py {' '.join(argv)}".rstrip()]
    if args.quick:
        header.append("--quick: a smoke run of the benchmark's machinery; its times and ratios mean nothing")
    print("\n".join(header), flush=True)
    runs: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    hist: dict[str, int] = {}
    outdir = CACHE / "out"
    outdir.mkdir(parents=True, exist_ok=True)

    def measure_once(key: tuple[str, str, str], spec: dict[str, Any]) -> dict[str, Any]:
        waited, before = wait_quiet(args.quiet_below, args.quiet_wait) if args.quiet_wait > 0 else (0.0, 0.0)
        cap = int(min(args.rss_cap_gib * GIB, _meminfo("MemAvailable") - 1.5 * GIB))
        r = supervise(spec, cap, args.timeout)
        r.update(waited=waited, other_before=before)
        runs.setdefault(key, []).append(r)
        what = r.get("failed") or f"{r['wall']:.2f} s, peak {r['peak_mb']:.0f} MB"
        print(f"  {' '.join(k for k in key if k)} run {len(runs[key])}: {what} (other processes "
              f"{r['other_cores']:.2f} cores, steal {r['steal_cores']:.2f}, load {r['load1']:.2f}, "
              f"child CPU {r['cpu']:.0f} s; waited {r['waited']:.0f} s for a quieter machine)", flush=True)
        return r

    def measure(jobs: list[tuple[tuple[str, str, str], dict[str, Any]]], repeat: int) -> None:
        """Runs the jobs in turn, `repeat` rounds; a job stops repeating once a run failed or was slow."""
        active = list(jobs)
        for _ in range(repeat):
            for key, spec in list(active):
                r = measure_once(key, spec)
                if "failed" in r or r["elapsed"] > args.slow:
                    active.remove((key, spec))

    for model in models:
        path, shape, kind = model_info(model)
        base = {"path": str(path), "shape": list(shape), "kind": kind, "samples": args.samples,
                "batch": args.batch or DEFAULT_BATCH.get(model, 8), "threads": args.threads, "input": "input"}
        print(f"{model}: {path.name}", flush=True)
        measure([((model, "fp32", ""), {**base, "role": "fp32"})], args.repeat)
        measure([((model, "breakdown", ""), {**base, "role": "breakdown", "methods": methods,
                                             "samples": min(args.samples, args.breakdown_samples)})], 1)
        b = _ok(runs[(model, "breakdown", "")])
        if b:
            hist[model] = b[0]["observed"] * 2 * BINS * 8
        candidates = {}
        for method in methods:
            jobs = []
            for tool in ("tether", "onnxruntime"):  # alternated, so that both see the same hours of the machine
                out = outdir / f"{model}.{tool}.{method}.onnx"
                for stale in (out, Path(str(out) + ".data")):
                    stale.unlink(missing_ok=True)
                jobs.append(((model, tool, method), {**base, "role": tool, "method": method, "out": str(out)}))
            measure(jobs, args.repeat)
            for (key, spec) in jobs:
                if _ok(runs[key]) and Path(spec["out"]).exists():
                    candidates[f"{key[1]}:{method}"] = spec["out"]
        if candidates:
            measure([((model, "quality", ""), {**base, "role": "quality", "candidates": candidates, "samples": 32})], 1)

    loads = [r["load1"] for rs in runs.values() for r in rs]
    others = [r["other_cores"] for rs in runs.values() for r in rs]
    steal = [r["steal_cores"] for rs in runs.values() for r in rs]
    notes = [f"Cells: median (min-max) of the runs; runs whose first took over {args.slow:.0f} s ran once. "
             f"During the runs other processes used {min(others):.2f}-{max(others):.2f} cores on average per run "
             f"(busy ticks of /proc/stat minus the child's CPU time), steal {max(steal):.2f} cores at most; "
             f"1-minute load average before a run: {min(loads):.2f}-{max(loads):.2f}."]
    if args.quiet_wait > 0:
        waits = [r["waited"] for rs in runs.values() for r in rs]
        busy = sum(r["other_before"] >= args.quiet_below for rs in runs.values() for r in rs)
        notes.append(f"Before each run the script waited (at most {max(waits):.0f} s here, {args.quiet_wait:.0f} s "
                     f"allowed) until other processes used fewer than {args.quiet_below} cores over 5 s; {busy} of "
                     f"{len(waits)} runs started while they still did. Other work can start during a run: see the "
                     "per-run load above.")
    tables = ["\n".join(main_table(models, methods, runs, hist)),
              f"Where tether's time goes (one process per model, {min(args.samples, args.breakdown_samples)} samples "
              "in the same batches; FP32 runs, runs with the observed values kept and observation alternated "
              "twice):\n\n"
              + "\n".join(breakdown_table(models, runs)),
              "Quality (32 held-out inputs, every model run by onnxruntime): SQNR of the QDQ model's outputs "
              "against the float model's; top-1: share of samples whose argmax agrees.\n\n"
              + "\n".join(quality_table(models, runs))]
    text = "\n\n".join(["\n".join(header), *tables, *notes])
    print("\n" + text, flush=True)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
        raw = Path(args.markdown).with_suffix(".json")
        raw.write_text(json.dumps({" ".join(k): v for k, v in runs.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
