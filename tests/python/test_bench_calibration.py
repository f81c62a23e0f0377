"""bench/calibration.py --quick: the calibration benchmark's machinery runs end to end (children,
caps, tables) on a tiny CNN. A smoke test of the script, never a claim about its numbers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "calibration.py"


@pytest.mark.timeout(180)
def test_calibration_bench_quick_runs_every_child_and_prints_the_tables(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime.quantization")
    env = {**os.environ, "TETHER_BENCH_CACHE": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--markdown", str(tmp_path / "table.md")],
                          capture_output=True, text=True, env=env, timeout=170)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert "| model | method | tether s | onnxruntime s |" in out
    rows = [line for line in out.splitlines() if line.startswith("| tiny_cnn |")]
    # One row per method in the main table, the breakdown row, one quality row per method.
    assert sum(" | minmax | " in r or " | entropy | " in r or " | percentile | " in r for r in rows) == 6, out
    assert "error" not in out and "out of memory" not in out and "exit " not in out, out
    assert (tmp_path / "table.md").read_text().count("| tiny_cnn |") == 7
    # The quality guard compared two QDQ models per method with the float model.
    quality = [r for r in rows if r.count("%") == 2]
    assert len(quality) == 3, out
