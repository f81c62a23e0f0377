"""Every case of the shared op table (_op_cases.py) on every backend: the CPU engine against
onnxruntime, the Vulkan engine against the CPU engine, within 1e-4 of the reference's largest
magnitude; and Vulkan with float16 storage (precision="fp16") within 1e-2. On Vulkan each
case must run on the device alone (compiled strict), under the validation layer."""

from __future__ import annotations

import numpy as np
import pytest
import tether as tt
from _onnx_oracle import run_ort
from _op_cases import OpCase, op_cases
from _vulkan import BACKENDS, assert_close, requires_vulkan

CASES = op_cases()

pytestmark = pytest.mark.usefixtures("vulkan_validation")


def _run(case: OpCase, device: str) -> tuple[list, tt.Session]:
    sess = tt.compile(tt.load(case.model), device=device, threads=1, strict=device != "cpu")
    out = sess.run(case.feeds)
    return [out[o.name] for o in sess.outputs], sess


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op_case_matches_its_oracle_on_every_backend(case: OpCase, backend: str) -> None:
    ours, sess = _run(case, backend)
    if backend == "cpu":
        ref = run_ort(case.model, case.feeds)
    else:
        assert all(s["backend"] == "vulkan" for s in sess.steps())
        ref, _ = _run(case, "cpu")
    if case.fused:
        assert case.fused in [s["op_type"] for s in sess.steps()]
    assert len(ours) == len(ref)
    for k, (got, want) in enumerate(zip(ours, ref, strict=True)):
        assert_close(got, want, case.rtol, f"{case.id} on {backend}, output {k}")


def _rounded_to_float16(feeds: dict) -> dict:
    return {k: v.astype(np.float16).astype(np.float32) if v.dtype == np.float32 else v for k, v in feeds.items()}


@requires_vulkan
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op_case_with_float16_storage_matches_the_cpu_engine_within_1e_2(case: OpCase) -> None:
    """precision="fp16" keeps float tensors and weights as float16 on the device: against the
    CPU engine on the same inputs rounded to float16 (what the device can hold), within 1e-2
    of the largest magnitude."""
    feeds = _rounded_to_float16(case.feeds)
    sess = tt.compile(tt.load(case.model), device="vulkan", threads=1, strict=True, precision="fp16")
    out = sess.run(feeds)
    ref = tt.compile(tt.load(case.model), threads=1).run(feeds)
    for o in sess.outputs:
        assert_close(out[o.name], ref[o.name], max(case.rtol, 1e-2), f"{case.id} in fp16, output {o.name}")
