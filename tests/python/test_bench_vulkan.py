"""bench/vulkan_latency.py --quick: the Vulkan benchmark's machinery runs end to end on a tiny
CNN (export to ONNX, TorchScript through pnnx to ncnn, the three engines, interleaved timing,
the table), and both Vulkan engines agree with tether's CPU engine. A smoke test of the script,
never a claim about its numbers."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _vulkan import requires_vulkan

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "vulkan_latency.py"
HEADER = ("| model | batch | tether-vulkan ms | ncnn-vulkan ms | tether-cpu ms | tether-vulkan/ncnn-vulkan "
          "| rel err tether-vulkan | rel err ncnn-vulkan | note |")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


@requires_vulkan
@pytest.mark.timeout(300)
def test_vulkan_bench_quick_runs_tether_and_ncnn_on_the_device_and_both_agree_with_the_cpu(tmp_path: Path) -> None:
    env = {**os.environ, "TETHER_BENCH_CACHE": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--markdown", str(tmp_path / "table.md")],
                          capture_output=True, text=True, env=env, timeout=290)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert out.startswith("machine: ") and "\nVulkan device: vulkan:" in out, out
    assert "\nncnn 1." in out and ", FP32, pnnx " in out, out
    assert HEADER in out, out
    rows = [_cells(line) for line in out.splitlines() if line.startswith("| tiny_cnn |")]
    assert [r[1] for r in rows] == ["1", "2"], out
    columns = _cells(HEADER)
    for cells in rows:
        row = dict(zip(columns, cells, strict=True))
        for engine in ("tether-vulkan", "ncnn-vulkan", "tether-cpu"):
            assert math.isfinite(float(row[f"{engine} ms"])) and float(row[f"{engine} ms"]) > 0, row
        assert float(row["tether-vulkan/ncnn-vulkan"]) > 0, row
        for engine in ("tether-vulkan", "ncnn-vulkan"):
            assert float(row[f"rel err {engine}"]) <= 1e-4, row
        assert row["note"] == "", row
    assert "FAILED" not in out and "errors:" not in out, out
    md = (tmp_path / "table.md").read_text()
    assert md.startswith("machine: ") and HEADER in md and md.count("| tiny_cnn |") == 2, md
    assert (tmp_path / "vulkan" / "tiny_cnn.ncnn.param").exists() and (tmp_path / "vulkan" / "tiny_cnn.onnx").exists()


@requires_vulkan
@pytest.mark.timeout(300)
def test_vulkan_bench_torch_column_runs_the_same_weights_as_the_exported_net(tmp_path: Path) -> None:
    """--torch DEVICE adds PyTorch eager (FP32, TF32 off) beside the engines; on the CPU here (a
    GPU's CUDA where there is one): the same torch instance's weights as the ONNX file, so its
    output agrees with tether's CPU engine."""
    env = {**os.environ, "TETHER_BENCH_CACHE": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--torch", "cpu"], capture_output=True, text=True,
                          env=env, timeout=290)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    header = HEADER + " torch-cpu ms | tether-vulkan/torch | rel err torch |"
    assert header in proc.stdout and "eager on cpu, FP32, TF32 off" in proc.stdout, proc.stdout
    rows = [_cells(line) for line in proc.stdout.splitlines() if line.startswith("| tiny_cnn |")]
    assert len(rows) == 2, proc.stdout
    for cells in rows:
        row = dict(zip(_cells(header), cells, strict=True))
        assert float(row["torch-cpu ms"]) > 0 and float(row["tether-vulkan/torch"]) > 0, row
        assert float(row["rel err torch"]) <= 1e-5, row
