"""bench/zoo.py --quick: the model-zoo benchmark's machinery runs end to end (export, the three
engines, interleaved timing, the peak-RSS child processes, the table) on four small models, and
tether agrees with onnxruntime on each. A smoke test of the script, never a claim about its
numbers."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "zoo.py"
QUICK_MODELS = ["gru_tagger", "yolo_128", "deeplab_64", "bert_tiny"]
HEADER = ("| model | threads | batch | tether ms | onnxruntime ms | openvino ms | tether/ort | tether/openvino "
          "| max abs err vs ort | rel err vs ort | peak RSS MB tether | peak RSS MB ort | peak RSS MB openvino | note |")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


@pytest.mark.timeout(240)
def test_zoo_bench_quick_runs_every_engine_and_agrees_with_onnxruntime(tmp_path: Path) -> None:
    env = {**os.environ, "TETHER_BENCH_CACHE": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--markdown", str(tmp_path / "table.md")],
                          capture_output=True, text=True, env=env, timeout=230)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert out.startswith("machine: "), out
    assert HEADER in out, out
    rows = {(c := _cells(line))[0]: c for line in out.splitlines() if line.startswith("| ") and not line.startswith(
        "| model |")}
    assert sorted(rows) == sorted(QUICK_MODELS), out
    columns = _cells(HEADER)
    for name, cells in rows.items():
        row = dict(zip(columns, cells, strict=True))
        assert row["threads"] == "1" and row["batch"] == "1", row
        for engine in ("tether", "onnxruntime"):
            assert math.isfinite(float(row[f"{engine} ms"])) and float(row[f"{engine} ms"]) > 0, row
        assert float(row["tether/ort"]) > 0, row
        rel = float(row["rel err vs ort"])
        assert math.isfinite(rel) and rel <= 1e-3, (name, row)
        assert math.isfinite(float(row["max abs err vs ort"])), row
    # One row (the first model) measured peak RSS in child processes; the others skipped it.
    first = dict(zip(columns, rows[QUICK_MODELS[0]], strict=True))
    assert float(first["peak RSS MB tether"]) > 0 and float(first["peak RSS MB ort"]) > 0, first
    assert all(dict(zip(columns, rows[n], strict=True))["peak RSS MB tether"] == "-" for n in QUICK_MODELS[1:])
    assert "geometric mean of tether/onnxruntime over 4 rows" in out, out
    assert "FAILED" not in out and "export failed" not in out, out
    md = (tmp_path / "table.md").read_text()
    assert md.startswith("machine: ") and HEADER in md
    assert sum(md.count(f"| {n} | 1 | 1 |") for n in QUICK_MODELS) == 4, md
    assert list(tmp_path.glob("zoo/*.onnx")), "the exports were not cached under $TETHER_BENCH_CACHE/zoo"
