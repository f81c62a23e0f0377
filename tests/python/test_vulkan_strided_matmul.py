"""A Transpose (with the views, Muls by a constant and one-index Gathers around it) that only
MatMuls read is folded into their strided reads on Vulkan: attention-shaped graphs agree with
the CPU engine and onnxruntime in both kernel forms, at batches 1 and 3, and the profile shows
which Transposes still dispatch; under the validation layer."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tether as tt
from _onnx_oracle import run_ort
from _vulkan import assert_close, requires_vulkan
from onnx import helper as oh
from onnx import numpy_helper

pytestmark = [requires_vulkan, pytest.mark.usefixtures("vulkan_validation")]

S, H, D = 8, 2, 4  # sequence, heads, head size: q, k and v slabs of 64-byte multiples
E = H * D


@pytest.fixture(params=["gpu", "cpu"])
def kernels(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TETHER_VULKAN_KERNELS", request.param)
    return request.param


def _model(nodes: list[onnx.NodeProto], inputs: dict[str, list], outputs: list[str],
           consts: dict[str, np.ndarray]) -> bytes:
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info(k, onnx.TensorProto.FLOAT, v) for k, v in inputs.items()],
                          [oh.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)], ir_version=8).SerializeToString()


def _attention(extra_reader: bool = False) -> bytes:
    """x [B, S, E] -> one qkv projection -> [B, S, 3, H, D] -> Transpose (2, 0, 3, 1, 4) -> Gather
    q, k, v -> q * scale @ Transpose(k, (0, 1, 3, 2)) -> Softmax -> @ v -> Transpose (0, 2, 1, 3).
    With `extra_reader`, k^T is also an output."""
    rng = np.random.default_rng(7)
    consts = {"w": rng.uniform(-1, 1, (E, 3 * E)).astype(np.float32),
              "qkv_shape": np.array([0, S, 3, H, D], np.int64), "out_shape": np.array([0, S, E], np.int64),
              "scale": np.array([0.5], np.float32), "i0": np.array(0, np.int64), "i1": np.array(1, np.int64),
              "i2": np.array(2, np.int64)}
    nodes = [oh.make_node("MatMul", ["x", "w"], ["qkv"]),
             oh.make_node("Reshape", ["qkv", "qkv_shape"], ["qkv5"]),
             oh.make_node("Transpose", ["qkv5"], ["heads"], perm=[2, 0, 3, 1, 4]),
             oh.make_node("Gather", ["heads", "i0"], ["q"], axis=0),
             oh.make_node("Gather", ["heads", "i1"], ["k"], axis=0),
             oh.make_node("Gather", ["heads", "i2"], ["v"], axis=0),
             oh.make_node("Mul", ["q", "scale"], ["qs"]),
             oh.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             oh.make_node("MatMul", ["qs", "kt"], ["scores"]),
             oh.make_node("Softmax", ["scores"], ["probs"], axis=-1),
             oh.make_node("MatMul", ["probs", "v"], ["ctx"]),
             oh.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
             oh.make_node("Reshape", ["ctx_t", "out_shape"], ["y"])]
    return _model(nodes, {"x": ["B", S, E]}, ["y", "kt"] if extra_reader else ["y"], consts)


def _heads(perm_a: list[int], perm_b: list[int], shape_a: list, shape_b: list) -> bytes:
    """MatMul(Transpose(a, perm_a), Transpose(b, perm_b)), rank 3 or 4."""
    nodes = [oh.make_node("Transpose", ["a"], ["at"], perm=perm_a), oh.make_node("Transpose", ["b"], ["bt"], perm=perm_b),
             oh.make_node("MatMul", ["at", "bt"], ["y"])]
    return _model(nodes, {"a": shape_a, "b": shape_b}, ["y"], {})


def _seq_first_projection() -> bytes:
    """A [B, S, E] input made sequence-first by Transpose (1, 0, 2), then a weight matrix."""
    w = np.random.default_rng(3).uniform(-1, 1, (E, 5)).astype(np.float32)
    nodes = [oh.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]), oh.make_node("MatMul", ["xt", "w"], ["y"])]
    return _model(nodes, {"x": ["B", S, E]}, ["y"], {"w": w})


def _sequence_first_attention() -> bytes:
    """The layout torch's nn.MultiheadAttention exports: x [S, B, E] -> qkv [S, B, 3, E] ->
    Unsqueeze, Transpose (3, 1, 2, 0, 4), Squeeze -> Gather q, k, v [S, B, E] -> Reshape
    [S, B * H, D] -> Transpose (1, 0, 2) -> Reshape [B, H, S, D]; at batch 3 that first Reshape
    merges B with the heads, which are not contiguous with one another."""
    rng = np.random.default_rng(11)
    consts = {"w": rng.uniform(-1, 1, (E, 3 * E)).astype(np.float32), "s3": np.array([S, -1, 3, E], np.int64),
              "ax0": np.array([0], np.int64), "ax3": np.array([3], np.int64),
              "heads": np.array([S, -1, D], np.int64), "bhsd": np.array([-1, H, S, D], np.int64),
              "scale": np.array([0.7], np.float32), "i0": np.array(0, np.int64), "i1": np.array(1, np.int64),
              "i2": np.array([-1], np.int64)}  # v by a negative index of rank 1: [1, S, B, E]
    nodes = [oh.make_node("MatMul", ["x", "w"], ["qkv"]), oh.make_node("Reshape", ["qkv", "s3"], ["qkv4"]),
             oh.make_node("Unsqueeze", ["qkv4", "ax0"], ["qkv5"]),
             oh.make_node("Transpose", ["qkv5"], ["t5"], perm=[3, 1, 2, 0, 4]),
             oh.make_node("Squeeze", ["t5", "ax3"], ["sq"])]
    for name, i in (("q", "i0"), ("k", "i1"), ("v", "i2")):
        nodes += [oh.make_node("Gather", ["sq", i], [f"{name}0"], axis=0),
                  oh.make_node("Reshape", [f"{name}0", "heads"], [f"{name}1"]),
                  oh.make_node("Transpose", [f"{name}1"], [f"{name}2"], perm=[1, 0, 2]),
                  oh.make_node("Reshape", [f"{name}2", "bhsd"], [name])]
    nodes += [oh.make_node("Mul", ["q", "scale"], ["qs"]), oh.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
              oh.make_node("MatMul", ["qs", "kt"], ["scores"]), oh.make_node("Softmax", ["scores"], ["probs"], axis=-1),
              oh.make_node("MatMul", ["probs", "v"], ["y"])]
    return _model(nodes, {"x": [S, "B", E]}, ["y"], consts)


def _feeds(model: bytes, batch: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch)
    graph = onnx.load_from_string(model).graph
    return {i.name: rng.uniform(-1, 1, [batch if d.dim_param else d.dim_value for d in i.type.tensor_type.shape.dim])
            .astype(np.float32) for i in graph.input}


def _check(model: bytes, batch: int, what: str) -> dict[str, int]:
    """Runs `model` on Vulkan (all of it) against the CPU engine and onnxruntime; returns how
    many kernels of each op type the run dispatched."""
    feeds = _feeds(model, batch)
    sess = tt.compile(tt.load(model), device="vulkan", threads=1, strict=True, profile=True)
    ours = sess.run(feeds)
    cpu = tt.compile(tt.load(model), threads=1).run(feeds)
    names = [o.name for o in onnx.load_from_string(model).graph.output]
    for name, want in zip(names, run_ort(model, feeds), strict=True):
        assert_close(ours[name], want, 1e-4, f"{what}, output {name} against onnxruntime")
        assert_close(ours[name], cpu[name], 1e-4, f"{what}, output {name} against the cpu engine")
    counts: dict[str, int] = {}
    for e in sess.profile():
        if e["op_type"] != "vulkan:segment" and e["runs"] > 0:
            counts[e["op_type"]] = counts.get(e["op_type"], 0) + 1
    return counts


@pytest.mark.parametrize("batch", [1, 3])
def test_attention_reads_heads_and_k_transposed_in_place(batch: int, kernels: str) -> None:
    counts = _check(_attention(), batch, f"batch {batch}, {kernels} kernels")
    # Left: the projection, the two products, Softmax and the output's Transpose (its reader is
    # a Reshape to the output, not a MatMul). The heads' Transpose, the Gathers, the Mul and
    # K's Transpose run inside the products' reads.
    assert counts == {"MatMul": 3, "Softmax": 1, "Transpose": 1}, counts


def test_a_transpose_with_a_reader_other_than_matmul_is_still_materialised(kernels: str) -> None:
    counts = _check(_attention(extra_reader=True), 3, f"k^T also an output, {kernels} kernels")
    # k^T (an output) is written, so its Transpose runs; the heads' Transpose and the Gathers
    # still fold, as they only feed that Transpose and the products.
    assert counts == {"MatMul": 3, "Softmax": 1, "Transpose": 2}, counts


@pytest.mark.parametrize(("perm_a", "perm_b", "shape_a", "shape_b"), [
    ([0, 2, 1, 3], [0, 2, 3, 1], ["B", S, H, D], ["B", S, H, D]),   # [B,S,H,D] -> [B,H,S,D] @ [B,H,D,S]
    ([0, 1, 3, 2], [0, 2, 1, 3], ["B", H, D, S], ["B", D, H, 5]),   # A^T @ [B,H,D,5]
    ([1, 0, 2], [0, 2, 1], [S, "B", D], ["B", 6, D]),               # 3-D: [B,S,D] @ [B,D,6]
    ([0, 2, 1], [1, 0, 2], ["B", D, S], [D, "B", 3]),
], ids=["0213x0231", "0132x0213", "3d-102x021", "3d-021x102"])
@pytest.mark.parametrize("batch", [1, 3])
def test_matmul_of_transposed_operands_dispatches_no_transpose(perm_a, perm_b, shape_a, shape_b, batch: int,
                                                               kernels: str) -> None:
    counts = _check(_heads(perm_a, perm_b, shape_a, shape_b), batch, f"perms {perm_a} {perm_b}, batch {batch}, {kernels}")
    assert counts == {"MatMul": 1}, counts


@pytest.mark.parametrize("batch", [1, 3])
def test_sequence_first_projection_keeps_its_rows_stacked(batch: int, kernels: str) -> None:
    counts = _check(_seq_first_projection(), batch, f"batch {batch}, {kernels} kernels")
    # Batch 1: the Transpose moves a dim of size 1, a plain view. Batch 3: reading it strided
    # would split the one product over the weight into a thin one per position, so it runs.
    assert counts == ({"MatMul": 1} if batch == 1 else {"MatMul": 1, "Transpose": 1}), counts


@pytest.mark.parametrize("batch", [1, 3])
def test_sequence_first_attention_folds_as_far_as_its_reshapes_allow(batch: int, kernels: str) -> None:
    counts = _check(_sequence_first_attention(), batch, f"batch {batch}, {kernels} kernels")
    # Batch 1: everything between the projection and the products is read in place. Batch 3:
    # the Reshape to [S, B * H, D] cannot re-stride a picked q, k or v, so the Gathers run, each
    # a strided copy through the folded Transpose of the packed heads; past them, the rest folds.
    want = {"MatMul": 3, "Softmax": 1} if batch == 1 else {"MatMul": 3, "Softmax": 1, "Gather": 3}
    assert counts == want, counts


def test_no_fold_dispatches_every_transpose_and_agrees(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_VULKAN_NO_FOLD", "1")
    counts = _check(_attention(), 3, "TETHER_VULKAN_NO_FOLD=1")
    assert counts == {"MatMul": 3, "Softmax": 1, "Transpose": 3, "Gather": 3, "Mul": 1}, counts


def test_fp16_storage_reads_transposed_operands_in_place() -> None:
    model = _attention()
    feeds = {"x": _feeds(model, 3)["x"].astype(np.float16).astype(np.float32)}
    half = tt.compile(tt.load(model), device="vulkan", threads=1, strict=True, precision="fp16").run(feeds)
    assert_close(half["y"], run_ort(model, feeds)[0], 1e-2, "fp16 storage")
