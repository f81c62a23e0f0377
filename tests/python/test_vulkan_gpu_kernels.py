"""The Vulkan kernels for GPUs (shared-memory tiled GEMM, implicit-GEMM convolution, a
workgroup per row for Softmax and LayerNormalization) run here on lavapipe by
TETHER_VULKAN_KERNELS=gpu, and those for CPU-lane devices by =cpu, so that both forms are
tested on any machine: every case of the shared op table with such an op against the CPU
engine; products shaped to take each tile size and cross its edges, and rows longer than a
workgroup or more than a grid dimension holds, against numpy and onnxruntime; under the
validation layer."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tether as tt
from _onnx_oracle import run_ort
from _op_cases import OpCase, op_cases
from _vulkan import VULKAN_DEVICES, assert_close, requires_vulkan
from onnx import helper as oh
from onnx import numpy_helper

pytestmark = [requires_vulkan, pytest.mark.usefixtures("vulkan_validation")]

# The ops whose Vulkan kernels have a GPU form and a CPU-lane form.
_FORM_OPS = {"Gemm", "MatMul", "Conv", "FusedGemm", "FusedMatMul", "FusedConv", "Softmax", "LogSoftmax",
             "LayerNormalization"}
CASES = [c for c in op_cases() if {n.op_type for n in onnx.load_from_string(c.model).graph.node} & _FORM_OPS]


@pytest.fixture(params=["gpu", "cpu"])
def kernels(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TETHER_VULKAN_KERNELS", request.param)
    return request.param


def _vulkan(model: bytes, **options: object) -> tt.Session:
    sess = tt.compile(tt.load(model), device="vulkan", threads=1, strict=True, **options)
    assert all(s["backend"] == "vulkan" for s in sess.steps())
    return sess


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op_table_cases_match_the_cpu_engine_in_either_form(case: OpCase, kernels: str) -> None:
    ours = _vulkan(case.model).run(case.feeds)
    ref = tt.compile(tt.load(case.model), threads=1).run(case.feeds)
    for name, want in ref.items():
        assert_close(ours[name], want, case.rtol, f"{case.id} with {kernels} kernels, output {name}")


@pytest.fixture(params=["fp16-half-products", "shared-memory-rows"])
def gpu_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The GPU forms' other paths: float16 products under precision "fp16"
    (TETHER_VULKAN_FP16_ARITHMETIC=1), and the row kernels without subgroups."""
    monkeypatch.setenv("TETHER_VULKAN_KERNELS", "gpu")
    monkeypatch.delenv("TETHER_VULKAN_FP16_ARITHMETIC", raising=False)
    monkeypatch.delenv("TETHER_VULKAN_NO_SUBGROUPS", raising=False)
    monkeypatch.setenv(*(("TETHER_VULKAN_FP16_ARITHMETIC", "1") if request.param.startswith("fp16")
                         else ("TETHER_VULKAN_NO_SUBGROUPS", "1")))
    return request.param


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op_table_cases_match_the_cpu_engine_on_the_other_gpu_paths(case: OpCase, gpu_path: str) -> None:
    """As above, on float16 storage with float16 products (the CPU engine on the same inputs
    rounded to float16, within 1e-2 as the op table's fp16 cases), and with shared-memory rows."""
    half = gpu_path.startswith("fp16")
    feeds = {k: v.astype(np.float16).astype(np.float32) if half and v.dtype == np.float32 else v
             for k, v in case.feeds.items()}
    ours = _vulkan(case.model, precision="fp16" if half else "fp32").run(feeds)
    ref = tt.compile(tt.load(case.model), threads=1).run(feeds)
    for name, want in ref.items():
        assert_close(ours[name], want, max(case.rtol, 1e-2 if half else 1e-4), f"{case.id} ({gpu_path}), output {name}")


def _model(nodes: list[onnx.NodeProto], inputs: dict[str, np.ndarray], consts: dict[str, np.ndarray]) -> bytes:
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info(k, onnx.TensorProto.FLOAT, v.shape) for k, v in inputs.items()],
                          [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)], ir_version=8).SerializeToString()


def _rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.uniform(-1.0, 1.0, shape).astype(np.float32)


# Batched products sized so that each tile size is the one chosen (the largest giving at least
# 256 workgroups: 128 square, 64 and 32), each with ragged edges on M, N and K.
_MATMULS = {
    "tile128-ragged": (256, 130, 20, 131),
    "tile64-ragged": (64, 70, 33, 66),
    "tile32-k-past-steps": (2, 37, 129, 45),
    "one-row": (1, 1, 300, 700),
    "one-column": (3, 300, 17, 1),
    "split-k-ragged": (1, 5, 3000, 7),
    "split-k-batched": (3, 2, 1024, 3),
}


@pytest.mark.parametrize("dims", list(_MATMULS.values()), ids=list(_MATMULS))
def test_batched_matmul_of_every_tile_size_matches_numpy(dims: tuple[int, int, int, int], kernels: str) -> None:
    b, m, k, n = dims
    rng = np.random.default_rng(sum(dims))
    a, w = _rand(rng, b, m, k), _rand(rng, b, k, n)
    model = _model([oh.make_node("MatMul", ["a", "w"], ["y"])], {"a": a, "w": w}, {})
    got = _vulkan(model).run({"a": a, "w": w})["y"]
    assert_close(got, (a.astype(np.float64) @ w).astype(np.float32), 1e-4, f"MatMul {dims}")


@pytest.mark.parametrize("k", [75, 2500], ids=["one-run", "split-k"])
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_with_transposes_bias_alpha_beta_matches_numpy(trans_a: int, trans_b: int, k: int, kernels: str) -> None:
    rng = np.random.default_rng(trans_a * 2 + trans_b)
    m, n = (97, 133) if k < 1000 else (3, 40)
    a = _rand(rng, *((k, m) if trans_a else (m, k)))
    w = _rand(rng, *((n, k) if trans_b else (k, n)))
    c = _rand(rng, m, 1)
    node = oh.make_node("Gemm", ["a", "w", "c"], ["y"], transA=trans_a, transB=trans_b, alpha=0.5, beta=-2.0)
    got = _vulkan(_model([node], {"a": a}, {"w": w, "c": c})).run({"a": a})["y"]
    want = 0.5 * ((a.T if trans_a else a).astype(np.float64) @ (w.T if trans_b else w)) - 2.0 * c
    assert_close(got, want.astype(np.float32), 1e-4, f"Gemm transA={trans_a} transB={trans_b}")


# Convolutions through the implicit GEMM (at least 8 output channels per group): batch, channels,
# size, output channels, kernel, strides, pads, dilations, groups.
_CONVS = {
    "3x3-pad1-tile128": (64, 4, 10, 13, 130, 3, 1, 1, 1, 1),
    "7x7-stride2-pad3": (1, 3, 33, 31, 64, 7, 2, 3, 1, 1),
    "3x3-stride2-dilation2-groups2": (2, 8, 17, 9, 16, 3, 2, 2, 2, 2),
    "5x5-no-pad-groups4": (1, 16, 12, 12, 32, 5, 1, 0, 1, 4),
    "1x1-stride2": (2, 24, 9, 9, 40, 1, 2, 0, 1, 1),
    "3x3-deep-k-split": (1, 200, 6, 6, 48, 3, 1, 1, 1, 1),
    "3x3-groups2-split": (1, 128, 5, 5, 32, 3, 1, 1, 1, 2),
}


@pytest.mark.parametrize("dims", list(_CONVS.values()), ids=list(_CONVS))
def test_implicit_gemm_convolution_matches_onnxruntime(dims: tuple[int, ...], kernels: str) -> None:
    n, c, h, w, m, k, s, p, d, g = dims
    rng = np.random.default_rng(sum(dims))
    x, wt, b = _rand(rng, n, c, h, w), _rand(rng, m, c // g, k, k), _rand(rng, m)
    node = oh.make_node("Conv", ["x", "w", "b"], ["y"], strides=[s, s], pads=[p] * 4, dilations=[d, d], group=g)
    model = _model([node], {"x": x}, {"w": wt, "b": b})
    got = _vulkan(model).run({"x": x})["y"]
    assert_close(got, run_ort(model, {"x": x})[0], 1e-4, f"Conv {dims}")


@pytest.mark.parametrize("c,size", [(16, 14), (128, 4)], ids=["one-run", "split-k"])
def test_fused_convolution_with_residual_and_relu_matches_onnxruntime(c: int, size: int, kernels: str) -> None:
    rng = np.random.default_rng(7)
    x, wt, b = _rand(rng, 2, c, size, size), _rand(rng, 32, c, 3, 3), _rand(rng, 32)
    r = _rand(rng, 2, 32, size, size)
    nodes = [oh.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), oh.make_node("Add", ["c", "r"], ["s"]),
             oh.make_node("Relu", ["s"], ["y"])]
    model = _model(nodes, {"x": x, "r": r}, {"w": wt, "b": b})
    sess = _vulkan(model)
    assert "ai.tether:FusedConv" in [s["op_type"] for s in sess.steps()]
    assert_close(sess.run({"x": x, "r": r})["y"], run_ort(model, {"x": x, "r": r})[0], 1e-4, "FusedConv")


def test_float16_storage_in_the_gpu_form_within_1e_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_VULKAN_KERNELS", "gpu")
    rng = np.random.default_rng(3)
    x, wt = _rand(rng, 1, 32, 15, 15), _rand(rng, 64, 32, 3, 3)
    a, w = _rand(rng, 2, 4, 2048), _rand(rng, 2048, 20)  # split along K
    conv = _model([oh.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], {"x": x}, {"w": wt})
    mm = _model([oh.make_node("MatMul", ["a", "w"], ["y"])], {"a": a}, {"w": w})
    for model, feeds in ((conv, {"x": x}), (mm, {"a": a})):
        half = {k: v.astype(np.float16).astype(np.float32) for k, v in feeds.items()}
        got = _vulkan(model, precision="fp16").run(half)["y"]
        assert_close(got, run_ort(model, half)[0], 1e-2, "fp16 storage, GPU form")


# Where a device has tensor cores for float16 (cooperative matrices), precision "fp16" takes them
# for every tiled product and convolution: float32 sums of exact float16 inputs. Elsewhere the
# CUDA-core tiles: float32 products of the float16 operands, or with
# TETHER_VULKAN_FP16_ARITHMETIC=1 on a device with float16 arithmetic (lavapipe has it) float16
# products, each step's 8 to 32 multiply-adds summed in float16 and the steps in float32. Each
# within 3e-3 of the largest magnitude (float16's half step is 4.9e-4 of a value), tight enough
# that a lost block of 16 along K shows.
TENSOR_CORES = any(d.get("cooperative_matrix") for d in VULKAN_DEVICES)


@pytest.fixture(params=["half", "float"])
def arithmetic(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The GPU tiles under precision "fp16": float16 products where the device has them, then
    float32 products (the variable is read when a model is compiled)."""
    monkeypatch.setenv("TETHER_VULKAN_KERNELS", "gpu")
    if request.param == "half":
        monkeypatch.setenv("TETHER_VULKAN_FP16_ARITHMETIC", "1")
    else:
        monkeypatch.delenv("TETHER_VULKAN_FP16_ARITHMETIC", raising=False)
    return request.param


def _half(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).astype(np.float32)


@pytest.mark.parametrize("dims", list(_MATMULS.values()), ids=list(_MATMULS))
def test_float16_products_of_every_tile_size_within_3e_3(dims: tuple[int, int, int, int], arithmetic: str) -> None:
    b, m, k, n = dims
    rng = np.random.default_rng(sum(dims) + 1)
    a, w = _half(_rand(rng, b, m, k)), _half(_rand(rng, b, k, n))
    model = _model([oh.make_node("MatMul", ["a", "w"], ["y"])], {"a": a, "w": w}, {})
    got = _vulkan(model, precision="fp16").run({"a": a, "w": w})["y"]
    want = (a.astype(np.float64) @ w).astype(np.float32)
    assert_close(got, want, 3e-3, f"fp16 MatMul {dims} ({arithmetic}; tensor cores: {TENSOR_CORES})")


@pytest.mark.parametrize("dims", list(_CONVS.values()), ids=list(_CONVS))
def test_float16_implicit_gemm_convolution_within_3e_3(dims: tuple[int, ...], arithmetic: str) -> None:
    n, c, h, w, m, k, s, p, d, g = dims
    rng = np.random.default_rng(sum(dims) + 1)
    x, wt, b = _half(_rand(rng, n, c, h, w)), _half(_rand(rng, m, c // g, k, k)), _half(_rand(rng, m))
    node = oh.make_node("Conv", ["x", "w", "b"], ["y"], strides=[s, s], pads=[p] * 4, dilations=[d, d], group=g)
    model = _model([node], {"x": x}, {"w": wt, "b": b})
    got = _vulkan(model, precision="fp16").run({"x": x})["y"]
    assert_close(got, run_ort(model, {"x": x})[0], 3e-3, f"fp16 Conv {dims} ({arithmetic}; tensor cores: {TENSOR_CORES})")


@pytest.mark.parametrize("op", ["MatMul", "Conv"])
def test_float16_products_past_float16_range_within_a_step_are_summed_again_in_float32(op: str, arithmetic: str) -> None:
    """Each product (about 240 x 250 = 60,000) is near float16's largest value, so every step's
    float16 sum overflows, while the total, as many products of each sign, is within range: the
    steps are summed again in float32, and the result is numpy's within 3e-3, not infinity or NaN."""
    rng = np.random.default_rng(5)
    k = 64
    sign = np.where(np.arange(k) < k // 2, 1.0, -1.0).astype(np.float32)
    w = _half(250.0 + rng.uniform(-1.0, 1.0, (k, 24)).astype(np.float32))  # K x N
    # M x K: each row a value from 230 to 250, + then -: 8 products of one sign pass 65504, so
    # every step of every tile size (8 to 32 along K) overflows in float16
    a = _half(np.outer(rng.uniform(230.0, 250.0, 8), sign).astype(np.float32))
    if op == "MatMul":
        model = _model([oh.make_node("MatMul", ["a", "w"], ["y"])], {"a": a}, {"w": w})
        feeds, want = {"a": a}, a.astype(np.float64) @ w
    else:  # a 1x1 convolution over K channels: output channels are W's columns, pixels A's rows
        x = np.ascontiguousarray(a.T).reshape(1, k, 2, 4)
        wt = np.ascontiguousarray(w.T).reshape(24, k, 1, 1)
        model = _model([oh.make_node("Conv", ["x", "w"], ["y"])], {"x": x}, {"w": wt})
        feeds, want = {"x": x}, (a.astype(np.float64) @ w).T.reshape(1, 24, 2, 4)
    got = _vulkan(model, precision="fp16").run(feeds)["y"]
    assert np.isfinite(got).all(), f"{op}: {int((~np.isfinite(got)).sum())} values not finite"
    assert_close(got, want.astype(np.float32), 3e-3, f"fp16 {op} past float16's range ({arithmetic})")


def test_devices_say_whether_they_have_tensor_cores_for_float16() -> None:
    for d in VULKAN_DEVICES:
        assert isinstance(d["cooperative_matrix"], bool), d
        if d["cooperative_matrix"]:  # what the tensor-core form needs besides the matrices
            assert d["fp16"] and d["fp16_storage"] and d["subgroup_size"] == 32, d
        if d["driver_name"] == "llvmpipe":  # Mesa's lavapipe has no cooperative matrices
            assert not d["cooperative_matrix"], d


def test_an_unknown_kernel_form_is_an_argument_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_VULKAN_KERNELS", "tensor-cores")
    model = _model([oh.make_node("MatMul", ["a", "w"], ["y"])], {"a": np.zeros((2, 3), np.float32)},
                   {"w": np.zeros((3, 4), np.float32)})
    with pytest.raises(tt.ArgumentError, match='TETHER_VULKAN_KERNELS is "tensor-cores"'):
        tt.compile(tt.load(model), device="vulkan")


# Rows longer than a workgroup (ragged), along a middle axis, and more rows than one grid
# dimension holds (65535 workgroups).
_ROWS = {"long-ragged-rows": ((3, 3001), -1), "middle-axis": ((4, 300, 5), 1), "66000-rows": ((66000, 3), -1)}


@pytest.fixture(params=["gpu-subgroups", "gpu-shared", "cpu"])
def row_form(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The row kernels' forms: a workgroup per row reducing by subgroups (lavapipe has subgroup
    arithmetic) or through shared memory alone (TETHER_VULKAN_NO_SUBGROUPS=1), and an invocation
    per row."""
    monkeypatch.setenv("TETHER_VULKAN_KERNELS", request.param.split("-")[0])
    if request.param == "gpu-shared":
        monkeypatch.setenv("TETHER_VULKAN_NO_SUBGROUPS", "1")
    else:
        monkeypatch.delenv("TETHER_VULKAN_NO_SUBGROUPS", raising=False)
    return request.param


def test_devices_say_whether_they_have_subgroup_arithmetic() -> None:
    for d in VULKAN_DEVICES:
        assert isinstance(d["subgroup_arithmetic"], bool), d
        if d["driver_name"] == "llvmpipe":  # so the subgroup form runs its tests here
            assert d["subgroup_arithmetic"], d


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape,axis", list(_ROWS.values()), ids=list(_ROWS))
def test_softmax_rows_match_numpy(op: str, shape: tuple[int, ...], axis: int, row_form: str) -> None:
    x = _rand(np.random.default_rng(len(shape)), *shape) * 8
    got = _vulkan(_model([oh.make_node(op, ["x"], ["y"], axis=axis)], {"x": x}, {})).run({"x": x})["y"]
    z = x.astype(np.float64) - x.max(axis=axis, keepdims=True)
    log = z - np.log(np.exp(z).sum(axis=axis, keepdims=True))
    assert_close(got, (log if op == "LogSoftmax" else np.exp(log)).astype(np.float32), 1e-5, f"{op} {shape} ({row_form})")


@pytest.mark.parametrize("shape", [(3, 3001), (66000, 3), (2, 5, 768)], ids=["long-ragged", "66000-rows", "bert-rows"])
def test_layer_normalization_rows_match_numpy(shape: tuple[int, ...], row_form: str) -> None:
    rng = np.random.default_rng(shape[-1])
    x, scale, bias = _rand(rng, *shape) + 3.0, _rand(rng, shape[-1]), _rand(rng, shape[-1])
    node = oh.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1, epsilon=1e-5)
    got = _vulkan(_model([node], {"x": x}, {"s": scale, "b": bias})).run({"x": x})["y"]
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * scale + bias
    assert_close(got, want.astype(np.float32), 1e-4, f"LayerNormalization {shape} ({row_form})")
