"""com.microsoft MatMulNBits on tether's CPU engine: single-node models built with onnx.helper,
run by tether and by onnxruntime (accuracy_level 0: A stays float32 there too), and checked
against a float64 numpy dequantization written from the contrib op's spec. Covers 4 and 8
bits, block sizes 16 to 128, K off the block size, zero points absent, packed and float, bias,
batch dims, one row (the matrix-vector path) and many (the GEMM path), each ISA; every
malformed model raises a typed error naming the node and the input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tether as tt
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent


# ---- models and the numpy oracle ---------------------------------------------------------------


def make_weights(rng: np.random.Generator, k: int, n: int, bits: int, block: int, zp: str | None):
    """Random packed codes (padding codes included: a kernel must ignore them), scales and zero
    points as the spec lays them out: B [N, k_blocks, block*bits/8], scales [N, k_blocks], packed
    zero points [N, ceil(k_blocks*bits/8)] or float ones [N, k_blocks]."""
    kb = -(-k // block)
    b = rng.integers(0, 256, (n, kb, block * bits // 8), dtype=np.uint8)
    scales = rng.uniform(0.01, 0.1, (n, kb)).astype(np.float32)
    zero = None
    if zp == "packed":
        zero = rng.integers(0, 256, (n, -(-kb * bits // 8)), dtype=np.uint8)
    elif zp == "float":
        zero = rng.uniform(0, 2**bits - 1, (n, kb)).astype(np.float32)
    return b, scales, zero


def dequantize(b, scales, zero, k: int, bits: int, block: int) -> np.ndarray:
    """W [N, K] in float64, from the spec: codes low bits first along K within each block;
    w = (code - zero_point) * scale, the zero point 2^(bits-1) when absent."""
    n, kb, _ = b.shape
    if bits == 4:
        codes = np.stack([b & 0x0F, b >> 4], axis=-1).reshape(n, kb, block)
    else:
        codes = b.reshape(n, kb, block)
    if zero is None:
        z = np.full((n, kb), 2.0 ** (bits - 1))
    elif zero.dtype == np.uint8 and bits == 4:
        z = np.stack([zero & 0x0F, zero >> 4], axis=-1).reshape(n, -1)[:, :kb].astype(np.float64)
    else:
        z = zero.reshape(n, -1)[:, :kb].astype(np.float64)
    w = (codes.astype(np.float64) - z[:, :, None]) * scales.astype(np.float64)[:, :, None]
    return w.reshape(n, kb * block)[:, :k]


def nbits_model(a_shape, k: int, n: int, bits: int, block: int, b, scales, zero=None, bias=None, *,
                g_idx=None, const=("B", "scales", "zero_points", "bias"), a_type=TensorProto.FLOAT, name: str = "proj",
                **attrs) -> bytes:
    tensors = {"B": b, "scales": scales, "zero_points": zero, "g_idx": g_idx, "bias": bias}
    names, inputs, inits = ["A"], [helper.make_tensor_value_info("A", a_type, a_shape)], []
    for key, v in tensors.items():
        names.append(key if v is not None else "")
        if v is None:
            continue
        if key in const or key == "g_idx":
            inits.append(numpy_helper.from_array(v, key))
        else:
            inputs.append(helper.make_tensor_value_info(key, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape))
    while names[-1] == "":
        names.pop()
    attrs = {"K": k, "N": n, "bits": bits, "block_size": block, "accuracy_level": 0, **attrs}
    attrs = {key: v for key, v in attrs.items() if v is not None}
    node = helper.make_node("MatMulNBits", names, ["Y"], name=name, domain="com.microsoft", **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("Y", a_type, None)], inits)
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


def run_both(model: bytes, feeds: dict[str, np.ndarray], threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    ours = tt.compile(tt.load(model), threads=threads).run(feeds)["Y"]
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    return ours, theirs


def assert_close(ours: np.ndarray, want: np.ndarray) -> None:
    assert ours.shape == want.shape and ours.dtype == np.float32
    scale = float(np.abs(want).max()) or 1.0
    np.testing.assert_allclose(ours, want, rtol=1e-4, atol=2e-5 * scale)


# (bits, block, A's shape with K last, N, zero points, bias): one row (matrix-vector), up to 4
# rows, many rows (the GEMM path), batch dims, K off the block size, N off the 4-column groups.
CASES = [
    (4, 32, (1, 64), 48, None, False),
    (4, 16, (5, 40), 33, "packed", True),
    (8, 32, (2, 3, 100), 17, "packed", True),
    (4, 128, (1, 1, 300), 70, "float", False),
    (8, 16, (1, 48), 9, None, True),
    (4, 64, (7, 256), 130, "packed", False),
    (8, 128, (33, 200), 40, "float", True),
    (4, 32, (3, 77), 6, "packed", True),
    (4, 16, (2, 4, 33), 21, None, True),
    (8, 64, (64,), 12, "packed", False),
    (4, 32, (2, 256), 1030, None, True),  # columns split over threads
    (4, 512, (6, 600), 20, "packed", True),  # the GEMM's K blocks end inside a quantization block
]


def check_case(bits, block, a_shape, n, zp, with_bias, threads, seed=0) -> None:
    rng = np.random.default_rng(seed)
    k = a_shape[-1]
    b, scales, zero = make_weights(rng, k, n, bits, block, zp)
    bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
    model = nbits_model(list(a_shape), k, n, bits, block, b, scales, zero, bias)
    a = rng.standard_normal(a_shape).astype(np.float32)
    want = a.astype(np.float64) @ dequantize(b, scales, zero, k, bits, block).T
    if bias is not None:
        want = want + bias
    if bits == 8 and zp == "float":  # onnxruntime's CPU kernel refuses this pair: numpy decides
        ours = tt.compile(tt.load(model), threads=threads).run({"A": a})["Y"]
    else:
        ours, theirs = run_both(model, {"A": a}, threads)
        assert_close(ours, theirs)
    assert_close(ours, want.astype(np.float32))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"b{c[0]}-bs{c[1]}-a{'x'.join(map(str, c[2]))}-n{c[3]}-{c[4]}")
def test_matmul_nbits_matches_onnxruntime_and_numpy(case, threads):
    check_case(*case, threads=threads)


def test_matmul_nbits_flat_scales_and_zero_points_match_onnxruntime():
    rng = np.random.default_rng(1)
    b, scales, zero = make_weights(rng, 50, 7, 4, 16, "packed")
    model = nbits_model([2, 50], 50, 7, 4, 16, b, scales.reshape(-1), zero.reshape(-1))
    a = rng.standard_normal((2, 50)).astype(np.float32)
    assert_close(*run_both(model, {"A": a}))


def test_matmul_nbits_runtime_bias_and_dynamic_rows_match_onnxruntime():
    rng = np.random.default_rng(2)
    b, scales, zero = make_weights(rng, 96, 20, 8, 32, None)
    bias = rng.standard_normal(20).astype(np.float32)
    model = nbits_model(["batch", "seq", 96], 96, 20, 8, 32, b, scales, zero, bias, const=("B", "scales"))
    sess = tt.compile(tt.load(model))
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for rows in (1, 9, 2):  # the matrix-vector path, the GEMM path, back again
        feeds = {"A": rng.standard_normal((1, rows, 96)).astype(np.float32), "bias": bias}
        assert_close(sess.run(feeds)["Y"], ref.run(None, feeds)[0])


def test_matmul_nbits_empty_b_gives_the_bias_as_onnxruntime_does():
    rng = np.random.default_rng(3)
    bias = rng.standard_normal(5).astype(np.float32)
    b = np.zeros((0, 2, 16), np.uint8)
    model = nbits_model([3, 64], 64, 5, 4, 32, b, np.zeros((0, 2), np.float32), None, bias)
    a = rng.standard_normal((3, 64)).astype(np.float32)
    ours, theirs = run_both(model, {"A": a})
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(ours, np.broadcast_to(bias, (3, 5)))


GENERIC_SCRIPT = """
import test_matmul_nbits as t, tether as tt
assert tt.cpu_info()["isa"] == "generic", tt.cpu_info()
for case in t.CASES[:6]:
    t.check_case(*case, threads=2)
print("ok")
"""


def test_matmul_nbits_generic_kernels_match_onnxruntime():
    env = {**os.environ, "TETHER_ISA": "generic"}
    out = subprocess.run([sys.executable, "-c", GENERIC_SCRIPT], env=env, cwd=HERE, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")


# ---- malformed and unsupported models ---------------------------------------------------------


def base(k=40, n=6, bits=4, block=16, zp="packed", seed=4):
    return make_weights(np.random.default_rng(seed), k, n, bits, block, zp)


def compile_and_run(model: bytes, a: np.ndarray) -> None:
    tt.compile(tt.load(model)).run({"A": a})


A40 = np.zeros((2, 40), np.float32)


def malformed_models():
    b, s, z = base()
    fz = np.zeros((6, 3), np.float32)
    yield "B k_blocks", nbits_model([2, 40], 40, 6, 4, 16, b[:, :2].copy(), s, z), r"B \(input 1\).*\[6, 3, 8\]"
    yield "B blob", nbits_model([2, 40], 40, 6, 4, 16, b[:, :, :4].copy(), s, z), r"B \(input 1\).*\[6, 3, 8\]"
    yield "B N", nbits_model([2, 40], 40, 6, 4, 16, b[:5].copy(), s, z), r"B \(input 1\)"
    yield "B 2-D", nbits_model([2, 40], 40, 6, 4, 16, b.reshape(6, 24), s, z), r"B \(input 1\)"
    yield "B int8", nbits_model([2, 40], 40, 6, 4, 16, b.view(np.int8), s, z), r"B \(input 1\) is int8"
    yield "scales", nbits_model([2, 40], 40, 6, 4, 16, b, s[:, :2].copy(), z), r"scales \(input 2\).*\[6, 3\]"
    yield "scales type", nbits_model([2, 40], 40, 6, 4, 16, b, s.astype(np.float16), z), r"scales \(input 2\) is float16"
    yield "zero points", nbits_model([2, 40], 40, 6, 4, 16, b, s, z[:, :1].copy()), r"zero_points \(input 3\).*\[6, 2\]"
    yield "float zero points", nbits_model([2, 40], 40, 6, 4, 16, b, s, fz[:, :2].copy()), r"zero_points \(input 3\)"
    yield "zero point type", nbits_model([2, 40], 40, 6, 4, 16, b, s, fz.astype(np.float16)), r"zero_points \(input 3\)"
    yield "bias", nbits_model([2, 40], 40, 6, 4, 16, b, s, z, np.zeros(5, np.float32)), r"bias \(input 5\).*\[6\]"
    yield "A's K", nbits_model([2, 41], 40, 6, 4, 16, b, s, z), r"A \(input 0\).*K = 40"
    yield "bits 3", nbits_model([2, 40], 40, 6, 3, 16, b, s, z), r"'bits' must be 2, 4 or 8, got 3"
    yield "block 24", nbits_model([2, 40], 40, 6, 4, 24, b, s, z), r"'block_size' must be a power of two >= 16, got 24"
    yield "block 8", nbits_model([2, 40], 40, 6, 4, 8, b, s, z), r"'block_size' must be a power of two >= 16, got 8"
    yield "no K", nbits_model([2, 40], None, 6, 4, 16, b, s, z), r"attribute 'K' is required"
    yield "K 0", nbits_model([2, 40], 0, 6, 4, 16, b, s, z), r"'K' must be positive"


@pytest.mark.parametrize("what,model,message", list(malformed_models()), ids=lambda v: v if isinstance(v, str) else "")
def test_malformed_matmul_nbits_raises_shape_error_naming_node_and_input(what, model, message):
    with pytest.raises(tt.ShapeError, match=message) as info:
        compile_and_run(model, A40)
    assert "proj" in str(info.value) and "MatMulNBits" in str(info.value)


def test_matmul_nbits_wrong_k_at_run_time_raises_shape_error():
    b, s, z = base()
    sess = tt.compile(tt.load(nbits_model(["m", "k"], 40, 6, 4, 16, b, s, z)))
    with pytest.raises(tt.ShapeError, match="K = 40"):
        sess.run({"A": np.zeros((2, 41), np.float32)})


def test_matmul_nbits_wrong_bias_size_at_run_time_raises_shape_error():
    b, s, z = base()
    model = onnx.load_from_string(nbits_model([2, 40], 40, 6, 4, 16, b, s, z, np.zeros(6, np.float32),
                                                  const=("B", "scales", "zero_points")))
    model.graph.input[1].type.tensor_type.shape.dim[0].dim_param = "n"  # bias, a runtime input of unknown length
    sess = tt.compile(tt.load(model.SerializeToString()))
    with pytest.raises(tt.ShapeError, match=r"bias"):
        sess.run({"A": A40, "bias": np.zeros(5, np.float32)})


def unsupported_models():
    b, s, z = base()
    yield "bits 2", nbits_model([2, 40], 40, 6, 2, 16, b[:, :, :4].copy(), s, z[:, :1].copy()), "bits = 2"
    g = np.arange(40, dtype=np.int32) // 16
    yield "g_idx", nbits_model([2, 40], 40, 6, 4, 16, b, s, z, g_idx=g), r"g_idx \(input 4\)"
    yield "float16 A", nbits_model([2, 40], 40, 6, 4, 16, b, s.astype(np.float16), None, a_type=TensorProto.FLOAT16), \
        r"A \(input 0\) is float16"
    yield "B an input", nbits_model([2, 40], 40, 6, 4, 16, b, s, z, const=("scales", "zero_points")), \
        r"B \(input 1\) is not a constant"
    yield "prepacked", nbits_model([2, 40], 40, 6, 4, 16, b, s, z, weight_prepacked=1), "weight_prepacked = 1"


@pytest.mark.parametrize("what,model,message", list(unsupported_models()), ids=lambda v: v if isinstance(v, str) else "")
def test_unsupported_matmul_nbits_raises_unsupported_error_naming_node(what, model, message):
    with pytest.raises(tt.UnsupportedError, match=message) as info:
        tt.compile(tt.load(model), strict=True)
    assert "proj" in str(info.value)
