"""Which networks of the model zoo run wholly on Vulkan: each compiled with strict=True.

For every network of `bench/zoo.py` (exported once and cached, as zoo.py does), the file is
compiled with `device="vulkan", strict=True` and run once at batch 1 (a plan is made per input
shape, and a kernel may refuse a plan's shapes). A network that compiles and runs is wholly on
Vulkan; otherwise the row lists the nodes the Vulkan backend refused, grouped by op and reason,
read from a compile without strict (its report lists every node left to the CPU and why).

Usage:
    python bench/vulkan_strict.py [--models gru_tagger,lstm,...] [--markdown out.md]

The markdown table is what docs/vulkan.md shows. Not a benchmark: nothing is timed.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import zoo  # noqa: E402
from _zoo_models import FULL  # noqa: E402

# A report line for a node left to the CPU: "  Op 'name': reason".
_FALLBACK = re.compile(r"^  (\S+) '([^']*)': (.*)$")


def _refused(report: str) -> Counter[str]:
    """The report's CPU-fallback nodes, counted by op and reason."""
    out: Counter[str] = Counter()
    listing = False
    for line in report.splitlines():
        if line.startswith("cpu fallback:"):
            listing = True
            continue
        m = _FALLBACK.match(line) if listing else None
        if m is None:
            listing = listing and line.startswith("  ")
            continue
        out[f"{m.group(1)}: {m.group(3)}"] += 1
    return out


def status(name: str) -> dict[str, object]:
    """The strict-Vulkan status of one zoo network: ok, and the refused nodes when not."""
    import tether as tt

    row: dict[str, object] = {"name": name, "ok": False, "refused": Counter(), "error": ""}
    meta = zoo.export(name)
    feeds = zoo.feeds_of(meta, 1)
    t0 = time.perf_counter()
    try:
        sess = tt.compile(meta["path"], device="vulkan", strict=True)
        sess.run(feeds)
        row["ok"] = True
    except tt.UnsupportedError as e:
        row["error"] = str(e).splitlines()[0]
        relaxed = tt.compile(meta["path"], device="vulkan")
        row["refused"] = _refused(relaxed.report)
        if not row["refused"]:  # refused for a plan's shapes: the strict message says why
            row["refused"] = Counter({str(e).replace("\n", " "): 1})
    except Exception as e:  # noqa: BLE001 - any other failure stays in the table
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    row["seconds"] = time.perf_counter() - t0
    return row


def markdown(rows: list[dict[str, object]]) -> str:
    lines = ["| network | strict Vulkan | nodes left to the CPU (op: reason, count) |", "|---|---|---|"]
    for r in rows:
        refused = r["refused"]
        assert isinstance(refused, Counter)
        detail = "; ".join(f"{k} (x{v})" for k, v in sorted(refused.items())) or str(r["error"])
        lines.append(f"| {r['name']} | {'wholly on Vulkan' if r['ok'] else 'no'} | {'' if r['ok'] else detail} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(FULL),
                    help="comma-separated zoo names (default: the 17 of the full run)")
    ap.add_argument("--markdown", help="also write the table to this file")
    args = ap.parse_args(argv)
    rows = []
    for name in args.models.split(","):
        row = status(name)
        rows.append(row)
        print(f"{name}: {'wholly on Vulkan' if row['ok'] else 'refused'} ({row['seconds']:.1f} s)", flush=True)
        refused = row["refused"]
        assert isinstance(refused, Counter)
        for k, v in sorted(refused.items()):
            print(f"    {v} x {k}", flush=True)
        if row["error"] and not refused:
            print(f"    {row['error']}", flush=True)
    table = markdown(rows)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
