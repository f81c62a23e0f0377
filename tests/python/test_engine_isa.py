"""Every instruction-set variant of the CPU kernels computes what onnxruntime computes:
Conv, Gemm and MatMul on awkward sizes, run under TETHER_ISA=generic, avx2 and the native ISA."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tether as tt

HERE = Path(__file__).resolve().parent


def run_cases(isa: str | None, threads: int) -> dict:
    env = dict(os.environ)
    env.pop("TETHER_ISA", None)
    if isa is not None:
        env["TETHER_ISA"] = isa
    out = subprocess.run([sys.executable, str(HERE / "_isa_cases.py"), str(threads)], env=env, capture_output=True,
                         text=True, check=True, cwd=HERE)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("isa,threads", [("generic", 1), ("avx2", 2), (None, 1), (None, 2)])
def test_kernels_of_each_isa_match_onnxruntime(isa, threads):
    native = tt.cpu_info()
    if isa == "avx2" and not native["avx2"]:
        pytest.skip("this CPU has no AVX2, so the AVX2 kernels cannot run here")
    result = run_cases(isa, threads)
    expected_isa = isa or native["isa"]
    assert result["isa"] == expected_isa
    assert expected_isa.split("_")[0] in result["kernel"]
    bad = {name: err for name, err in result["worst"].items() if err > 2e-5}
    assert bad == {}
