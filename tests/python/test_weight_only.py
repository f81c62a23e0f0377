"""tt.quantize.weight_only: the codes, scales and zero points it writes equal a blockwise
round-to-nearest written here from its definition; the MatMulNBits models it writes run in
onnxruntime and tether with the same outputs, close to the float model's; its per-layer report
matches the independent dequantization; bad arguments raise typed errors and a model with
nothing to quantize comes back unchanged with a note."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tether as tt
from onnx import TensorProto, helper, numpy_helper

# ---- the oracle: blockwise RTN from the definition, one block at a time ------------------------


def rtn_reference(w: np.ndarray, bits: int, block: int, symmetric: bool):
    """codes [N, k_blocks, block] (past K: the zero point), scales and zero points [N, k_blocks]."""
    k, n = w.shape
    kb = -(-k // block)
    codes = np.zeros((n, kb, block), np.int64)
    scales = np.zeros((n, kb), np.float32)
    zeros = np.zeros((n, kb), np.int64)
    for j in range(n):
        for b in range(kb):
            vals = w[b * block:min(k, (b + 1) * block), j].astype(np.float64)
            if symmetric:
                qmax = 2 ** (bits - 1) - 1
                s = np.float32(np.abs(vals).max() / qmax)
                s = s if s > 0 else np.float32(1)
                z = 2 ** (bits - 1)
                q = np.clip(np.rint(vals / np.float64(s)), -qmax, qmax) + z
            else:
                qmax = 2**bits - 1
                lo, hi = min(vals.min(), 0.0), max(vals.max(), 0.0)
                s = np.float32((hi - lo) / qmax)
                s = s if s > 0 else np.float32(1)
                z = int(np.clip(np.rint(-lo / np.float64(s)), 0, qmax))
                q = np.clip(np.rint(vals / np.float64(s)) + z, 0, qmax)
            codes[j, b, :] = z
            codes[j, b, :len(vals)] = q
            scales[j, b], zeros[j, b] = s, z
    return codes, scales, zeros


def dequantized(codes, scales, zeros, k: int) -> np.ndarray:
    n = codes.shape[0]
    w = (codes - zeros[:, :, None]) * scales.astype(np.float64)[:, :, None]
    return w.reshape(n, -1)[:, :k].T


def unpack(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Codes along the last axis from bytes, low bits first (MatMulNBits' layout)."""
    if bits == 8:
        return packed[..., :count].astype(np.int64)
    both = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)
    return both[..., :count].astype(np.int64)


# ---- models ------------------------------------------------------------------------------------


def matmul_model(w: np.ndarray, a_shape=("m", None)) -> bytes:
    k = w.shape[0]
    a_shape = [d if d is not None else k for d in a_shape]
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, a_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()


def mlp_model(rng: np.random.Generator, d: int = 64, hidden: int = 160) -> bytes:
    """A transformer-like chain on [batch, seq, d]: up projection + bias, Relu, down projection,
    residual Add; then a Gemm (transB, bias) on the first position's features."""
    init = {
        "w_up": (rng.standard_normal((d, hidden)) / np.sqrt(d)).astype(np.float32),
        "b_up": (0.1 * rng.standard_normal(hidden)).astype(np.float32),
        "w_down": (rng.standard_normal((hidden, d)) / np.sqrt(hidden)).astype(np.float32),
        "w_head": (rng.standard_normal((24, d)) / np.sqrt(d)).astype(np.float32),
        "b_head": (0.1 * rng.standard_normal(24)).astype(np.float32),
        "first": np.array([0], np.int64),
        "axis1": np.array([1], np.int64),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w_up"], ["u"], name="up"),
        helper.make_node("Add", ["u", "b_up"], ["ub"], name="up_bias"),
        helper.make_node("Relu", ["ub"], ["h"], name="act"),
        helper.make_node("MatMul", ["h", "w_down"], ["dn"], name="down"),
        helper.make_node("Add", ["dn", "x"], ["r"], name="residual"),
        helper.make_node("Gather", ["r", "first"], ["f3"], name="take", axis=1),
        helper.make_node("Squeeze", ["f3", "axis1"], ["f"], name="squeeze"),
        helper.make_node("Gemm", ["f", "w_head", "b_head"], ["logits"], name="head", transB=1),
    ]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", d])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("r", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in init.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()


def nbits_tensors(res, node_name: str) -> tuple[onnx.NodeProto, dict[str, np.ndarray]]:
    proto = onnx.load_from_string(res.model.to_bytes())
    node = next(n for n in proto.graph.node if n.name == node_name)
    assert (node.op_type, node.domain) == ("MatMulNBits", "com.microsoft")
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    return node, inits


def attr(node: onnx.NodeProto, name: str) -> int:
    return next(a.i for a in node.attribute if a.name == name)


def snr_db(want: np.ndarray, got: np.ndarray) -> float:
    want, got = want.astype(np.float64), got.astype(np.float64)
    return float(10 * np.log10(np.sum(want**2) / np.sum((want - got) ** 2)))


# ---- tests -------------------------------------------------------------------------------------


@pytest.mark.parametrize("bits,block,symmetric,k", [(4, 32, False, 100), (4, 16, True, 64), (8, 32, False, 70),
                                                    (8, 128, True, 300)])
def test_codes_scales_and_zero_points_match_blockwise_rtn_from_its_definition(bits, block, symmetric, k):
    rng = np.random.default_rng(bits * 1000 + block + k)
    w = rng.standard_normal((k, 19)).astype(np.float32)
    w[:, 3] = 0.0  # a column of zeros: scale 1
    w[:, 4] = np.abs(w[:, 4])  # all positive: the range widens to hold 0
    res = tt.quantize.weight_only(matmul_model(w), bits=bits, block_size=block, symmetric=symmetric, min_size=0)
    node, inits = nbits_tensors(res, "fc")
    assert (attr(node, "K"), attr(node, "N"), attr(node, "bits"), attr(node, "block_size")) == (k, 19, bits, block)
    codes, scales, zeros = rtn_reference(w, bits, block, symmetric)
    b, s = inits[node.input[1]], inits[node.input[2]]
    kb = -(-k // block)
    assert b.shape == (19, kb, block * bits // 8) and s.shape == (19, kb)
    np.testing.assert_array_equal(unpack(b, bits, block), codes)
    np.testing.assert_array_equal(s, scales)
    if symmetric:
        assert len(node.input) == 3  # the default zero point 2^(bits-1)
        assert np.all(zeros == 2 ** (bits - 1))
    else:
        np.testing.assert_array_equal(unpack(inits[node.input[3]], bits, kb), zeros)
    # The report's error is the independent dequantization's.
    want = dequantized(codes, scales, zeros, k)
    layer = res.layers[0]
    assert (layer.node, layer.weight, layer.shape) == ("fc", "w", (k, 19))
    assert layer.sqnr_db == pytest.approx(snr_db(w, want), rel=1e-9)
    w64 = w.astype(np.float64)
    rel = np.linalg.norm(w64 - want) / np.linalg.norm(w64)
    assert layer.rel_error == pytest.approx(rel, rel=1e-9)


@pytest.mark.parametrize("bits,symmetric,min_snr", [(4, False, 14.0), (4, True, 12.0), (8, False, 38.0)])
def test_quantized_mlp_runs_alike_in_onnxruntime_and_tether_and_stays_close_to_float(bits, symmetric, min_snr):
    rng = np.random.default_rng(7)
    float_model = mlp_model(rng)
    res = tt.quantize.weight_only(float_model, bits=bits, block_size=32, symmetric=symmetric, min_size=0)
    assert [x.node for x in res.layers] == ["up", "down", "head"]
    x = rng.standard_normal((2, 5, 64)).astype(np.float32)
    blob = res.model.to_bytes()
    ours = tt.compile(tt.load(blob)).run({"x": x})
    theirs = dict(zip(["logits", "r"], ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
                      .run(["logits", "r"], {"x": x}), strict=True))
    want = ort.InferenceSession(float_model, providers=["CPUExecutionProvider"]).run(["logits", "r"], {"x": x})
    for name, ref in zip(["logits", "r"], want, strict=True):
        scale = float(np.abs(theirs[name]).max())
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-4, atol=1e-5 * scale)
        assert snr_db(ref, ours[name]) > min_snr, name
    # The float weights are gone; only packed ones remain.
    names = {t.name for t in onnx.load_from_string(blob).graph.initializer}
    assert not {"w_up", "w_down", "w_head"} & names


def test_exclude_nodes_and_min_size_keep_nodes_float_and_say_why():
    rng = np.random.default_rng(8)
    res = tt.quantize.weight_only(mlp_model(rng), exclude_nodes=["down"], min_size=24 * 64 + 1)
    assert [x.node for x in res.layers] == ["up"]
    assert res.skipped == {"down": "in exclude_nodes",
                           "head": "its weight has fewer than min_size = 1537 elements"}
    ops = {n.name: n.op_type for n in res.model.nodes}
    assert (ops["up"], ops["down"], ops["head"]) == ("MatMulNBits", "MatMul", "Gemm")
    assert "down" in res.table() and "up" in res.table()


def test_a_weight_shared_with_a_float_node_is_kept():
    w = np.random.default_rng(9).standard_normal((32, 32)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc"), helper.make_node("Add", ["y", "w"], ["z"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 32])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()
    res = tt.quantize.weight_only(blob, min_size=0)
    assert "w" in res.model.initializer_names
    x = np.eye(32, dtype=np.float32)
    out = tt.compile(res.model).run({"x": x})["z"]
    ref = ort.InferenceSession(res.model.to_bytes(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_nothing_to_quantize_is_a_note_and_the_model_is_unchanged():
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()
    res = tt.quantize.weight_only(blob)
    assert res.layers == [] and "no MatMul or Gemm" in res.skipped[""]
    assert [n.op_type for n in res.model.nodes] == ["Relu"]


@pytest.mark.parametrize("kwargs,message", [
    ({"bits": 3}, "bits must be 4 or 8, got 3"),
    ({"bits": 2}, "bits must be 4 or 8, got 2"),
    ({"block_size": 24}, "block_size must be a power of two >= 16, got 24"),
    ({"block_size": 8}, "block_size must be a power of two >= 16, got 8"),
    ({"method": "gptq"}, "method 'gptq' is not available"),
    ({"format": "gguf"}, "format 'gguf' is not available"),
    ({"min_size": -1}, "min_size must be"),
    ({"exclude_nodes": ["nope"]}, r"exclude_nodes names no node of the model: \['nope'\]"),
])
def test_bad_arguments_raise_argument_error(kwargs, message):
    w = np.ones((32, 4), np.float32)
    with pytest.raises(tt.ArgumentError, match=message):
        tt.quantize.weight_only(matmul_model(w), **kwargs)


# ---- a head tied to the embedding: MatMul(x, Transpose(emb)) -----------------------------------


def tied_model(emb: np.ndarray, *, gemm: bool = False, second_head: bool = False) -> bytes:
    """ids -> Gather(emb) -> Relu -> head reading Transpose(emb) (perm [1, 0]), as an exported
    GPT-2 does; ``gemm`` makes the head a Gemm with transB = 1 over Transpose(emb.T-shaped
    initializer) plus a bias; ``second_head`` adds a MatMul 'head2' reading the same Transpose."""
    v, d = emb.shape
    init = [numpy_helper.from_array(emb, "emb")]
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"], name="embed", axis=0),
             helper.make_node("Relu", ["e"], ["h"], name="act")]
    if gemm:
        # Transpose(emb_t) is emb again, [V, D] = [N, K]; transB = 1 reads it as W = emb.T.
        init = [numpy_helper.from_array(np.ascontiguousarray(emb.T), "emb_t"),
                numpy_helper.from_array(np.linspace(-1, 1, v, dtype=np.float32), "bias")]
        nodes = [helper.make_node("Transpose", ["emb_t"], ["emb_again"], name="flip"),
                 helper.make_node("Gather", ["emb_again", "ids"], ["e"], name="embed", axis=0),
                 helper.make_node("Relu", ["e"], ["h2d"], name="act"),
                 helper.make_node("Gemm", ["h2d", "emb_again", "bias"], ["logits"], name="head", transB=1)]
        ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])
    else:
        nodes += [helper.make_node("Transpose", ["emb"], ["emb_T"], name="tie", perm=[1, 0]),
                  helper.make_node("MatMul", ["h", "emb_T"], ["logits"], name="head")]
        if second_head:
            nodes.append(helper.make_node("MatMul", ["h", "emb_T"], ["logits2"], name="head2"))
        ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", "s"])
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
               for n in (["logits", "logits2"] if second_head else ["logits"])]
    graph = helper.make_graph(nodes, "tied", [ids], outputs, init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()


def run_both(blob: bytes, feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    ours = tt.compile(tt.load(blob)).run(feeds)
    sess = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return ours, dict(zip(names, sess.run(names, feeds), strict=True))


@pytest.mark.parametrize("symmetric", [False, True])
def test_head_tied_through_transpose_becomes_matmulnbits_of_the_transposed_embedding(symmetric):
    rng = np.random.default_rng(29)
    emb = (rng.standard_normal((50, 64)) / 8).astype(np.float32)
    float_model = tied_model(emb)
    res = tt.quantize.weight_only(float_model, min_size=0, symmetric=symmetric)
    node, inits = nbits_tensors(res, "head")
    assert (attr(node, "K"), attr(node, "N")) == (64, 50)
    codes, scales, zeros = rtn_reference(emb.T, 4, 32, symmetric)
    np.testing.assert_array_equal(unpack(inits[node.input[1]], 4, 32), codes)
    np.testing.assert_array_equal(inits[node.input[2]], scales)
    if not symmetric:
        np.testing.assert_array_equal(unpack(inits[node.input[3]], 4, 2), zeros)
    layer = res.layers[0]
    assert (layer.node, layer.weight, layer.shape, layer.transposed) == ("head", "emb", (64, 50), True)
    assert layer.sqnr_db == pytest.approx(snr_db(emb.T, dequantized(codes, scales, zeros, 64)), rel=1e-9)
    assert "Transpose of emb" in res.table()
    # The Gather still reads the float embedding; the Transpose has no reader left and is gone.
    assert "emb" in inits
    assert [(n.op_type, n.name) for n in res.model.nodes] == [("Gather", "embed"), ("Relu", "act"),
                                                             ("MatMulNBits", "head")]
    ids = rng.integers(0, 50, (2, 7)).astype(np.int64)
    ours, theirs = run_both(res.model.to_bytes(), {"ids": ids})
    scale = float(np.abs(theirs["logits"]).max())
    np.testing.assert_allclose(ours["logits"], theirs["logits"], rtol=1e-4, atol=1e-5 * scale)
    h = np.maximum(emb[ids], 0).astype(np.float64)
    np.testing.assert_allclose(ours["logits"], h @ dequantized(codes, scales, zeros, 64), rtol=1e-4,
                               atol=1e-5 * scale)
    assert snr_db(h @ emb.T.astype(np.float64), ours["logits"]) > 14.0


def test_tied_false_keeps_the_head_and_its_transpose_float_and_says_why():
    emb = np.random.default_rng(30).standard_normal((50, 64)).astype(np.float32)
    res = tt.quantize.weight_only(tied_model(emb), min_size=0, tied=False)
    assert res.layers == []
    assert res.skipped["head"] == "its weight is a Transpose of initializer 'emb' and tied=False"
    assert [n.op_type for n in res.model.nodes] == ["Gather", "Relu", "Transpose", "MatMul"]


def test_a_transpose_with_a_float_reader_left_stays():
    emb = np.random.default_rng(31).standard_normal((50, 64)).astype(np.float32)
    res = tt.quantize.weight_only(tied_model(emb, second_head=True), min_size=0, exclude_nodes=["head2"])
    assert [x.node for x in res.layers] == ["head"]
    ops = {n.name: n.op_type for n in res.model.nodes}
    assert (ops["tie"], ops["head"], ops["head2"]) == ("Transpose", "MatMulNBits", "MatMul")
    ids = np.arange(50, dtype=np.int64).reshape(5, 10)
    ours, theirs = run_both(res.model.to_bytes(), {"ids": ids})
    np.testing.assert_allclose(ours["logits2"], np.maximum(emb[ids], 0) @ emb.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ours["logits"], theirs["logits"], rtol=1e-4, atol=1e-4)


def test_gemm_with_trans_b_over_a_transpose_quantizes_the_weight_it_computes_with():
    emb = np.random.default_rng(32).standard_normal((40, 64)).astype(np.float32)
    float_model = tied_model(emb, gemm=True)
    res = tt.quantize.weight_only(float_model, min_size=0)
    node, inits = nbits_tensors(res, "head")
    # Gemm(h, Transpose(emb_t), transB=1) multiplies by emb.T: K = 64, N = 40.
    codes, scales, zeros = rtn_reference(emb.T, 4, 32, False)
    np.testing.assert_array_equal(unpack(inits[node.input[1]], 4, 32), codes)
    assert res.layers[0].weight == "emb_t" and res.layers[0].transposed
    assert "flip" in {n.name for n in res.model.nodes}  # the Gather still reads it
    ids = np.arange(40, dtype=np.int64)
    ours, theirs = run_both(res.model.to_bytes(), {"ids": ids})
    want = np.maximum(emb[ids], 0).astype(np.float64) @ dequantized(codes, scales, zeros, 64)
    want += np.linspace(-1, 1, 40, dtype=np.float32)
    np.testing.assert_allclose(ours["logits"], theirs["logits"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ours["logits"], want, rtol=1e-4, atol=1e-4)


def test_an_initializer_read_only_through_the_quantized_transpose_is_dropped():
    w = np.random.default_rng(33).standard_normal((24, 48)).astype(np.float32)  # [N, K]
    nodes = [helper.make_node("Transpose", ["w"], ["w_T"], name="tie"),  # no perm: reverses the axes
             helper.make_node("MatMul", ["x", "w_T"], ["y"], name="fc")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 48])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()
    res = tt.quantize.weight_only(blob, min_size=0)
    assert [n.op_type for n in res.model.nodes] == ["MatMulNBits"]
    assert "w" not in res.model.initializer_names
    x = np.random.default_rng(34).standard_normal((3, 48)).astype(np.float32)
    ours, _ = run_both(res.model.to_bytes(), {"x": x})
    codes, scales, zeros = rtn_reference(w.T, 4, 32, False)
    np.testing.assert_allclose(ours["y"], x.astype(np.float64) @ dequantized(codes, scales, zeros, 48),
                               rtol=1e-4, atol=1e-4)
