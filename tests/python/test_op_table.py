"""The op table (_op_cases.py) on every backend x precision x ISA, and its coverage.

- The CPU engine against onnxruntime (or the case's numpy oracle), within the case's rtol
  (1e-4 of the reference's largest magnitude unless the case says otherwise).
- Every other backend (Vulkan where there is a device, and any backend tt.devices() lists)
  against the CPU engine, compiled strict so that the whole case runs on it, under Vulkan's
  validation layer; where the device has 16-bit storage also with precision="fp16", within
  1e-2 (Vulkan on lavapipe has it). A backend runs the cases whose ops it lists in
  supported_ops (and that are not limited to others).
- The cases with a kernel compiled per instruction set (_op_cases.ISA_OPS) under
  TETHER_ISA=generic, avx2 and the native ISA: one subprocess per ISA runs them all.
- Coverage: every op a device lists has a case that runs on that device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tether as tt
from _op_cases import REFUSED, WRONG, OpCase, table
from _vulkan import NO_VULKAN, assert_close

HERE = Path(__file__).resolve().parent
CASES = table()

pytestmark = pytest.mark.usefixtures("vulkan_validation")

# backend -> the device string compile takes; the CPU first, then each other backend's first
# device, and the precisions it takes (fp16 where the device has 16-bit storage).
DEVICES = {"cpu": "cpu"}
PRECISIONS = {"cpu": ("fp32",)}
for _d in tt.devices():
    if _d["backend"] not in DEVICES:
        DEVICES[_d["backend"]] = _d["device"]
        PRECISIONS[_d["backend"]] = ("fp32", "fp16") if _d.get("fp16_storage") else ("fp32",)
LISTED = {b: {tuple(op) for op in tt.supported_ops(dev)} for b, dev in DEVICES.items()}

# Ops a device may list without a case of their own: none yet. An op belongs here only when it
# cannot be a case's node (with the reason beside it).
WITHOUT_CASE: set[tuple[str, str]] = set()


def _runs_on(case: OpCase, backend: str) -> bool:
    if case.backends and backend not in case.backends:
        return False
    return case.ops <= LISTED[backend]


def _params() -> list:
    params = []
    for case in CASES:
        for backend in DEVICES:
            if _runs_on(case, backend):
                marks = []
                if case.id in REFUSED.get(backend, {}):
                    marks.append(pytest.mark.xfail(strict=True, raises=tt.UnsupportedError,
                                                   reason=REFUSED[backend][case.id]))
                if case.id in WRONG.get(backend, {}):
                    marks.append(pytest.mark.xfail(strict=True, raises=AssertionError, reason=WRONG[backend][case.id]))
                for precision in PRECISIONS[backend]:
                    params.append(pytest.param(case, backend, precision, id=f"{case.id}-{backend}-{precision}", marks=marks))
    if "vulkan" not in DEVICES:  # say so rather than run nothing silently
        params.append(pytest.param(None, "vulkan", "fp32", id="vulkan", marks=pytest.mark.skip(reason=NO_VULKAN)))
    return params


def _rounded_to_float16(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v.astype(np.float16).astype(np.float32) if v.dtype == np.float32 else v for k, v in feeds.items()}


def _run(case: OpCase, backend: str, feeds: dict[str, np.ndarray], precision: str = "fp32") -> tuple[list, tt.Session]:
    sess = tt.compile(tt.load(case.model), device=DEVICES[backend], threads=1, strict=backend != "cpu",
                      precision=precision)
    out = sess.run(feeds)
    return [out[o.name] for o in sess.outputs], sess


@pytest.mark.parametrize("case,backend,precision", _params())
def test_op_case_matches_its_oracle(case: OpCase, backend: str, precision: str) -> None:
    """CPU: against onnxruntime or the numpy oracle. Other backends: against the CPU engine on
    the same inputs (rounded to float16 for precision="fp16", what the device holds)."""
    feeds = _rounded_to_float16(case.feeds) if precision == "fp16" else case.feeds
    ours, sess = _run(case, backend, feeds, precision)
    if backend == "cpu":
        ref = case.expected()
        rtol = case.rtol
    else:
        assert all(s["backend"] == backend for s in sess.steps())
        ref, _ = _run(case, "cpu", feeds)
        rtol = max(case.rtol, 1e-2 if precision == "fp16" else 1e-4)
    if case.fused:
        assert case.fused in [s["op_type"] for s in sess.steps()]
    assert len(ours) == len(ref)
    for k, (got, want) in enumerate(zip(ours, ref, strict=True)):
        assert_close(got, want, rtol, f"{case.id} on {backend} ({precision}), output {k}")


def _isa_run(isa: str | None, threads: int) -> dict:
    env = dict(os.environ)
    env.pop("TETHER_ISA", None)
    if isa is not None:
        env["TETHER_ISA"] = isa
    out = subprocess.run([sys.executable, str(HERE / "_op_cases.py"), str(threads)], env=env, capture_output=True,
                         text=True, check=True, cwd=HERE)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("isa,threads", [("generic", 1), ("avx2", 2), (None, 1), (None, 2)])
def test_cases_with_per_isa_kernels_match_their_oracle_under_each_isa(isa: str | None, threads: int) -> None:
    native = tt.cpu_info()
    if isa == "avx2" and not native["avx2"]:
        pytest.skip("this CPU has no AVX2, so the AVX2 kernels cannot run here")
    result = _isa_run(isa, threads)
    expected_isa = isa or native["isa"]
    assert result["isa"] == expected_isa
    assert expected_isa.split("_")[0] in result["kernel"]
    assert result["cases"] == sum(c.isa for c in CASES)
    assert result["bad"] == {}


@pytest.mark.parametrize("backend", list(DEVICES))
def test_every_op_a_device_lists_has_a_case_that_runs_on_it(backend: str) -> None:
    covered = set()
    for case in CASES:
        if _runs_on(case, backend) and case.id not in REFUSED.get(backend, {}):
            covered |= case.ops
            if case.fused:
                covered.add(tuple(case.fused.split(":")))
    without = sorted(LISTED[backend] - covered - WITHOUT_CASE)
    assert without == [], f"{backend} lists ops no case of _op_cases.py runs there: {without}"
