"""Where a net's time goes on tether's Vulkan engine: each kernel's time on the device (GPU
timestamps, `profile=True`), summed by op type, against the run's wall time, so that kernel
time and everything around it (uploads, submission, waits, CPU nodes) are told apart; and the
slowest kernels with their share.

The nets are ONNX files: by default those bench/vulkan_latency.py exported to
bench/.cache/vulkan/ (ResNet-50, MobileNetV2, BERT-base), or any given on the command line.

Usage:
    python bench/vulkan_profile.py [--models resnet50,bert_base_seq128] [--batch 1] [--runs 20]
                                   [--device vulkan] [--top 8] [--markdown out.md] [FILE.onnx ...]
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import tether as tt

CACHE = Path(os.environ.get("TETHER_BENCH_CACHE", Path(__file__).parent / ".cache")) / "vulkan"


def feeds_for(sess: tt.Session, batch: int) -> dict[str, np.ndarray]:
    """Random inputs of the session's input types, symbolic dims taken as `batch`."""
    rng = np.random.default_rng(0)
    out = {}
    for i in sess.inputs:
        dims = [d if isinstance(d, int) and d > 0 else batch for d in i.shape]
        if np.dtype(i.dtype).kind in "iu":
            out[i.name] = rng.integers(0, 100, dims).astype(i.dtype)
        else:
            out[i.name] = rng.standard_normal(dims).astype(i.dtype)
    return out


def profile(path: Path, device: str, batch: int, runs: int, top: int) -> list[str]:
    plain = tt.compile(tt.load(str(path)), device=device)
    feeds = feeds_for(plain, batch)
    plain.run(feeds)
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        plain.run(feeds)
        walls.append(time.perf_counter() - t0)
    sess = tt.compile(tt.load(str(path)), device=device, profile=True)
    for _ in range(runs + 1):
        sess.run(feeds)
    entries = sess.profile()
    kernels: list[dict] = []
    by_type: dict[str, float] = defaultdict(float)
    segments = cpu = 0.0
    left = 0  # kernels of the current segment still to come
    for e in entries:
        per_run = e["seconds"] / max(e["runs"], 1)
        if e["op_type"] == "vulkan:segment":
            segments += per_run
            left = int(e["name"].split()[1])
        elif left > 0:
            left -= 1
            kernels.append({**e, "per_run": per_run})
            by_type[e["op_type"]] += per_run
        else:
            cpu += per_run
    device_s = sum(by_type.values())
    wall = float(np.median(walls))
    lines = [f"### {path.stem}, batch {batch}", "",
             f"wall {1e3 * wall:.3f} ms (median of {runs}); kernels on the device {1e3 * device_s:.3f} ms "
             f"({len(kernels)} kernels); Vulkan stretches {1e3 * segments:.3f} ms; CPU nodes {1e3 * cpu:.3f} ms", "",
             "| op type | kernels | device ms | share of device time |", "|---|---:|---:|---:|"]
    counts: dict[str, int] = defaultdict(int)
    for k in kernels:
        counts[k["op_type"]] += 1
    for op, s in sorted(by_type.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {op} | {counts[op]} | {1e3 * s:.3f} | {s / max(device_s, 1e-30):.1%} |")
    lines += ["", "| slowest kernels | op type | device ms |", "|---|---|---:|"]
    for k in sorted(kernels, key=lambda k: -k["per_run"])[:top]:
        lines.append(f"| {k['name'] or '(unnamed)'} | {k['op_type']} | {1e3 * k['per_run']:.3f} |")
    return lines + [""]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="*", type=Path)
    p.add_argument("--models", default="resnet50,mobilenetv2,bert_base_seq128")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--device", default="vulkan")
    p.add_argument("--top", type=int, default=8)
    p.add_argument("--markdown")
    args = p.parse_args()
    paths = args.files or [CACHE / f"{m}.onnx" for m in args.models.split(",")]
    dev = next((d for d in tt.devices() if d["backend"] == "vulkan"), None)
    lines = [f"Vulkan device: {dev['name'] if dev else 'none'}; "
             f"TETHER_VULKAN_KERNELS={os.environ.get('TETHER_VULKAN_KERNELS', '(by device type)')}", ""]
    print("\n".join(lines), flush=True)
    for path in paths:
        if not path.exists():
            out = [f"{path}: missing (bench/vulkan_latency.py exports it)", ""]
        else:
            try:
                out = profile(path, args.device, args.batch, args.runs, args.top)
            except tt.Error as e:
                out = [f"{path.stem}: {type(e).__name__}: {e}", ""]
        print("\n".join(out), flush=True)
        lines += out
    if args.markdown:
        Path(args.markdown).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
