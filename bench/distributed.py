"""Calibration and parity over a dataset: one process against Ray Data with N workers, in one run.

The digits CNN (`tether.demo`: scikit-learn's 8x8 digits, trained with torch, seeded) is exported
once; its calibration set is `--samples` images (the 1347 training digits, repeated with a little
seeded noise). The same images are then

- calibrated (entropy, onnxruntime profile, no evaluation) by ``tt.quantize.static`` in this
  process, on 1 and on 2 engine threads, and by ``tt.distributed.calibrate`` on a local Ray
  cluster started here (``ray.init(num_cpus=workers)``) with `--workers` actors of 1 thread;
- compared, float against INT8 with per-digit agreement, by ``tt.compare`` in this process and by
  ``tt.distributed.compare`` on the same cluster.

Each Ray job is run twice: the first run includes starting the actors (each imports tether and
compiles the model), the second shows the steady state of a warm cluster (Ray Data starts a new
actor pool per job, so the difference is mostly the interpreter's import cache). Merge cost is
the driver's time in ``Calibrator.merge`` / ``ParityState.append`` over every batch's state, and
the states' size. Results are checked equal to the single-process ones (ranges, report metrics).

From these figures the script estimates the wall time of a 50,000-image calibration with N
workers: fixed cost (cluster and actors) + samples x (one worker's time per sample) / N + batches x
(merge time per state) + the driver's finish (ranges, QDQ model), the merge being serial on the
driver. It is a model of this machine's figures, not a measurement on a real cluster.

Usage:
    python bench/distributed.py [--samples 10000] [--workers 2] [--batch-size 512] [--markdown out.md]
    python bench/distributed.py --quick      # 600 samples: a smoke run, no timing claims
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402


def machine() -> str:
    import tether as tt

    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical CPUs, ISA {tt.cpu_info()['isa']}, Python {platform.python_version()}"


def digits_model(folder: Path) -> tuple[str, np.ndarray, np.ndarray]:
    import tether as tt
    import torch
    from tether.demo import build_network, load_data, train

    x_train, y_train, x_test, _ = load_data()
    net = train(build_network(), x_train, y_train)
    path = folder / "digits.onnx"
    res = tt.export.torch(net, torch.from_numpy(x_test[:8]), path, dynamic={"image": {0: "batch"}},
                          output_names=["logits"])
    assert res.ok
    return str(path), x_train, y_train


def same(timings: dict[str, float]) -> str:
    return "result equal to one process's" if timings["equal"] else "RESULT DIFFERS from one process's"


def timed(fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.samples = 600

    import ray
    import ray.data
    import tether as tt

    folder = Path(tempfile.mkdtemp())
    path, x_train, y_train = digits_model(folder)
    rng = np.random.default_rng(0)
    reps = -(-args.samples // len(x_train))
    x = np.concatenate([x_train] * reps)[:args.samples]
    x = (x + rng.normal(0, 0.02, x.shape)).astype(np.float32)
    y = np.concatenate([y_train] * reps)[:args.samples]

    rows: list[tuple[str, str, str]] = []
    local1, t_local1 = timed(lambda: tt.quantize.static(path, x, method="entropy", eval_samples=0, threads=1,
                                                        batch_size=args.batch_size))
    _, t_local2 = timed(lambda: tt.quantize.static(path, x, method="entropy", eval_samples=0, threads=2,
                                                   batch_size=args.batch_size))
    # One worker's time per sample: observation alone, on 1 thread.
    cal = tt.quantize.Calibrator(path, threads=1)
    _, t_observe = timed(lambda: cal.observe_all(x, batch_size=args.batch_size))
    qpath = str(folder / "digits.int8.onnx")
    local1.save(qpath)
    batches = [x[i:i + args.batch_size] for i in range(0, len(x), args.batch_size)]
    rep_local, t_cmp_local = timed(lambda: tt.compare(tt.parity.TetherRunner(path, threads=2),
                                                      tt.parity.TetherRunner(qpath, threads=2), batches, labels=y))

    _, t_init = timed(lambda: ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False,
                                       configure_logging=False))
    ray.data.DataContext.get_current().enable_progress_bars = False
    ds = ray.data.from_items([{"image": xi, "label": int(yi)} for xi, yi in zip(x, y, strict=True)],
                             override_num_blocks=4 * args.workers).materialize()
    cal_runs, cmp_runs = [], []
    for _ in range(2):
        timings: dict[str, float] = {}
        res, t = timed(lambda timings=timings: tt.distributed.calibrate(
            path, ds, method="entropy", eval_samples=0, concurrency=args.workers, batch_size=args.batch_size,
            _timings=timings))
        timings["equal"] = float(res.ranges == local1.ranges and res.model.to_bytes() == local1.model.to_bytes())
        cal_runs.append((t, timings))
    for _ in range(2):
        timings = {}
        rep, t = timed(lambda timings=timings: tt.distributed.compare(
            path, qpath, ds, labels_column="label", concurrency=args.workers, batch_size=args.batch_size,
            _timings=timings))
        slices = [[x.to_dict() for x in r.slices or []] for r in (rep, rep_local)]
        timings["equal"] = float(rep.outputs[0].metrics.to_dict() == rep_local.outputs[0].metrics.to_dict()
                                 and slices[0] == slices[1])
        cmp_runs.append((t, timings))
    n_batches = len(batches)
    state_bytes = len(__import__("zlib").compress(cal.state(), 1))
    ray.shutdown()

    merge_per_state = cal_runs[1][1]["merge_seconds"] / n_batches
    rows.append(("calibrate, one process, 1 thread", f"{t_local1:.2f}", ""))
    rows.append(("calibrate, one process, 2 threads", f"{t_local2:.2f}", ""))
    for k, (t, tm) in enumerate(cal_runs):
        rows.append((f"calibrate, Ray, {args.workers} workers x 1 thread ({'first' if k == 0 else 'second'} run)",
                     f"{t:.2f}", f"merge {tm['merge_seconds'] * 1e3:.1f} ms over {n_batches} states; "
                     f"finish {tm['finish_seconds']:.2f} s; {same(tm)}"))
    rows.append(("compare float vs int8, one process, 2 threads", f"{t_cmp_local:.2f}", ""))
    for k, (t, tm) in enumerate(cmp_runs):
        rows.append((f"compare, Ray, {args.workers} workers ({'first' if k == 0 else 'second'} run)", f"{t:.2f}",
                     f"merge {tm['merge_seconds'] * 1e3:.1f} ms over {n_batches} states; {same(tm)}"))

    per_sample = t_observe / len(x)
    finish = cal_runs[1][1]["finish_seconds"]
    fixed = max(cal_runs[1][0] - len(x) * per_sample / args.workers - cal_runs[1][1]["merge_seconds"] - finish, 0.0)
    total = 50_000
    estimate = []
    for n in (1, 2, 4, 8, 16, 32):
        t = fixed + total * per_sample / n + (total / args.batch_size) * merge_per_state + finish
        estimate.append((n, t))

    lines = [f"machine: {machine()}", f"samples: {len(x)} digits (8x8), batches of {args.batch_size} rows, "
             f"Ray {ray.__version__}, ray.init {t_init:.1f} s (not counted below)", "",
             "| job | wall s | notes |", "|---|---:|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    lines += ["", f"calibration state per batch: {state_bytes / 1024:.0f} KiB compressed; merge "
              f"{merge_per_state * 1e3:.2f} ms per state; one worker observes {per_sample * 1e6:.1f} us per sample; "
              f"fixed cost of a Ray job here {fixed:.1f} s; driver finish {finish:.2f} s", "",
              "estimated 50,000-image calibration (fixed + 50000 x per-sample / N + merges + finish):", "",
              "| workers | estimated s |", "|---:|---:|"]
    lines += [f"| {n} | {t:.1f} |" for n, t in estimate]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
