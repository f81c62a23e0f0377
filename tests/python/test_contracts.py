"""Shape contracts (tests/fuzz/contracts.py): models that break one relation the ONNX spec states
between an op's inputs must give a typed tether error or onnxruntime's result, on every backend.

`make test` runs a deterministic sample of the generated cases (one per relation) and the
explicit cases below; the slow test runs a tenth of the full set, or all of it (about 2,600
cases per backend, minutes) with TETHER_CONTRACTS_FULL=1.
"""

from __future__ import annotations

import os
import sys
import zlib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tether as tt
from onnx import helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fuzz"))
import contracts  # noqa: E402

FULL = os.environ.get("TETHER_CONTRACTS_FULL") == "1"


@pytest.fixture(scope="module")
def generated() -> list[contracts.Case]:
    cases, missing = contracts.generate(sorted(contracts.backend_ops("cpu") & set(contracts.RELATIONS)))
    assert not missing, [r.name for r in missing]
    return cases


def _vulkan() -> tuple[list[str], set[str]]:
    ops = contracts.backend_ops("vulkan") if any(d["backend"] == "vulkan" for d in tt.devices()) else set()
    return (["cpu", "vulkan"] if ops else ["cpu"]), ops


def _findings(results: list[contracts.Result]) -> list[str]:
    return [f"{r.case.id} on {d}: {v} {detail[:200]}" for r in results for d, (v, detail) in r.findings.items()]


def _stable(case_id: str) -> int:
    return zlib.crc32(case_id.encode())


def test_relation_table_matches_the_fuzz_mutators_copy() -> None:
    # The mutator's C++ rows are generated from the Python table: one source of truth.
    assert (ROOT / "tests" / "fuzz" / "contract_relations.inc").read_text() == contracts.emit_cpp()


def test_every_relation_of_the_cpu_ops_gets_cases_in_both_modes(generated: list[contracts.Case]) -> None:
    rels = contracts.relations(contracts.backend_ops("cpu"))
    covered = {(c.relation, c.mode) for c in generated}
    assert {(r.name, m) for r in rels for m in contracts.MODES} <= covered


def test_a_sample_of_contract_cases_gives_typed_errors_or_onnxruntimes_results(generated: list[contracts.Case]) -> None:
    # One case per relation, its variant and mode chosen by a hash of the relation's name.
    by_rel: dict[str, list[contracts.Case]] = {}
    for c in generated:
        by_rel.setdefault(c.relation, []).append(c)
    sample = [v[_stable(k) % len(v)] for k, v in sorted(by_rel.items())]
    devices, vulkan_ops = _vulkan()
    results = contracts.run_cases(sample, devices, vulkan_ops, batch=60, jobs=2)
    assert len(results) == len(sample)
    assert not _findings(results)


@pytest.mark.slow
def test_the_full_set_of_contract_cases_gives_typed_errors_or_onnxruntimes_results(
        generated: list[contracts.Case]) -> None:
    cases = generated if FULL else [c for c in generated if _stable(c.id) % 10 == 0]
    devices, vulkan_ops = _vulkan()
    results = contracts.run_cases(cases, devices, vulkan_ops, batch=60, jobs=2)
    assert len(results) == len(cases)
    assert not _findings(results)


# ---- explicit cases: bad shapes each refused with a ShapeError naming the input, where
# onnxruntime refuses them too ------------------------------------------------------------------
def _model(op: str, feeds: dict[str, np.ndarray], consts: dict[str, np.ndarray], inputs: list[str],
           outputs: tuple[str, ...] = ("y",), opset: int = 18, **attrs: object) -> bytes:
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in feeds.items()]
    node = helper.make_node(op, inputs, list(outputs), name="n", **{k: v for k, v in attrs.items() if v != []})
    node.attribute.extend(helper.make_attribute(k, [], attr_type=onnx.AttributeProto.INTS)
                          for k, v in attrs.items() if v == [])
    inits = [numpy_helper.from_array(a, n) for n, a in consts.items()]
    g = helper.make_graph([node], "g", vis, [onnx.ValueInfoProto(name=o) for o in outputs], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=9).SerializeToString()


def _f32(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)


_X = _f32(1, 2, 5, 5)
_BAD = {
    "gemm-c-of-rank-3": (
        _model("Gemm", {"a": _f32(3, 4)}, {"b": _f32(4, 5), "c": _f32(2, 3, 5)}, ["a", "b", "c"]),
        {"a": _f32(3, 4)}, r"input 'C' \(Gemm's bias\) of shape \[2, 3, 5\] does not broadcast to \[3, 5\]"),
    "gemm-c-wider-than-n": (
        _model("Gemm", {"a": _f32(3, 4)}, {"b": _f32(4, 1), "c": _f32(3, 5)}, ["a", "b", "c"]),
        {"a": _f32(3, 4)}, r"input 'C' \(Gemm's bias\) of shape \[3, 5\] does not broadcast to \[3, 1\]"),
    "conv-empty-strides": (
        _model("Conv", {"x": _X}, {"w": _f32(3, 2, 3, 3)}, ["x", "w"], strides=[]),
        {"x": _X}, "attribute 'strides' has 0 entries, expected 2"),
    "conv-empty-kernel-shape": (
        _model("Conv", {"x": _X}, {"w": _f32(3, 2, 3, 3)}, ["x", "w"], kernel_shape=[]),
        {"x": _X}, "kernel_shape has 0 entries for 2 spatial axes"),
    "maxpool-empty-dilations": (
        _model("MaxPool", {"x": _X}, {}, ["x"], kernel_shape=[2, 2], dilations=[]),
        {"x": _X}, "attribute 'dilations' has 0 entries, expected 2"),
    "convtranspose-output-padding-past-stride": (
        _model("ConvTranspose", {"x": _X}, {"w": _f32(2, 3, 3, 3)}, ["x", "w"], output_padding=[2, 0], strides=[2, 1]),
        {"x": _X}, "output padding on spatial axis 0 is 2; it must be >= 0 and smaller than the stride"),
    "convtranspose-output-padding-past-stride-beside-output-shape": (
        _model("ConvTranspose", {"x": _X}, {"w": _f32(2, 3, 3, 3)}, ["x", "w"], output_padding=[3, 0], strides=[2, 1],
               output_shape=[12, 7]),
        {"x": _X}, "output padding on spatial axis 0 is 3; it must be >= 0 and smaller than the stride"),
    "matmulinteger-b-zero-point-of-rank-2": (
        _model("MatMulInteger", {"a": np.ones((4, 3), np.uint8)},
               {"b": np.ones((3, 2), np.uint8), "az": np.array([1], np.uint8), "bz": np.ones((2, 1), np.uint8)},
               ["a", "b", "az", "bz"], opset=10),
        {"a": np.ones((4, 3), np.uint8)}, r"input 'b_zero_point' has shape \[2, 1\], expected a scalar, a 1-D tensor or \[1, 2\]"),
    "resize-crop-with-empty-roi": (
        _model("Resize", {"x": _f32(1, 1, 4, 4)}, {"roi": np.zeros(0, np.float32), "sizes": np.array([1, 1, 3, 3], np.int64)},
               ["x", "roi", "", "sizes"], opset=19, mode="linear", coordinate_transformation_mode="tf_crop_and_resize"),
        {"x": _f32(1, 1, 4, 4)}, "input 'roi' has 0 entries; tf_crop_and_resize needs 8"),
    "dropout-ratio-of-two-values": (
        _model("Dropout", {"x": _f32(3, 4)}, {"r": np.array([0.5, 0.5], np.float32)}, ["x", "r"]),
        {"x": _f32(3, 4)}, r"input 'ratio' must hold one value \(a scalar\), got shape \[2\]"),
    "slice-starts-of-rank-2": (
        _model("Slice", {"x": _f32(4, 5)}, {"s": np.array([[0, 1]], np.int64), "e": np.array([3, 4], np.int64)},
               ["x", "s", "e"]),
        {"x": _f32(4, 5)}, r"input 'starts' must be 1-D, got shape \[1, 2\]"),
    "squeeze-scalar-axes": (
        _model("Squeeze", {"x": _f32(1, 5)}, {"a": np.array(0, np.int64)}, ["x", "a"]),
        {"x": _f32(1, 5)}, r"input 'axes' must be 1-D, got shape \[\]"),
    "topk-scalar-k": (
        _model("TopK", {"x": _f32(3, 5)}, {"k": np.array(2, np.int64)}, ["x", "k"], outputs=("v", "i")),
        {"x": _f32(3, 5)}, r"input 'K' must be 1-D, got shape \[\]"),
    "mvn-empty-axes": (
        _model("MeanVarianceNormalization", {"x": _X}, {}, ["x"], axes=[]),
        {"x": _X}, "axes is empty; it must name at least one axis"),
}


@pytest.mark.parametrize("name", sorted(_BAD))
def test_broken_shape_contract_is_a_shape_error_naming_it(name: str) -> None:
    model, feeds, message = _BAD[name]
    with pytest.raises(Exception):  # noqa: B017 - the oracle: onnxruntime refuses the model too
        ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    with pytest.raises(tt.ShapeError, match=message):
        tt.compile(model).run(feeds)


def test_non_max_suppression_refuses_an_empty_max_output_fed_at_run_time() -> None:
    # Read as 0 when fed, as absent when constant: one value is what the spec allows.
    boxes = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1]]], np.float32)
    scores = np.array([[[0.9, 0.8]]], np.float32)
    feeds = {"b": boxes, "s": scores, "m": np.zeros(0, np.int64)}
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                          [f"{n}{k}" for k in range(a.ndim)])
           for n, a in feeds.items()]
    node = helper.make_node("NonMaxSuppression", ["b", "s", "m"], ["y"], name="n")
    g = helper.make_graph([node], "g", vis, [onnx.ValueInfoProto(name="y")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9).SerializeToString()
    with pytest.raises(tt.ShapeError, match=r"input 'max_output_boxes_per_class' must hold one value"):
        tt.compile(model).run(feeds)
