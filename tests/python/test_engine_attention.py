"""Attention (opset 23/24) and RotaryEmbedding kernels at sizes past the node tests' (several
row blocks, grouped-query heads, past key/value caches, masks), against onnxruntime and the
ONNX reference implementation."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import tether as tt
from onnx import TensorProto as P
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

OPSET = [h.make_opsetid("", 24)]


def _attention_model(q_shape, kv_shape, v_shape, *, mask_shape=None, mask_type=P.FLOAT, past=None, **attrs) -> bytes:
    inputs = [h.make_tensor_value_info("q", P.FLOAT, q_shape), h.make_tensor_value_info("k", P.FLOAT, kv_shape),
              h.make_tensor_value_info("v", P.FLOAT, v_shape)]
    names = ["q", "k", "v"]
    if mask_shape is not None:
        inputs.append(h.make_tensor_value_info("mask", mask_type, mask_shape))
        names.append("mask")
    elif past is not None:
        names.append("")
    outputs = [h.make_tensor_value_info("y", P.FLOAT, None)]
    out_names = ["y"]
    if past is not None:
        inputs += [h.make_tensor_value_info("past_k", P.FLOAT, past[0]), h.make_tensor_value_info("past_v", P.FLOAT, past[1])]
        names += ["past_k", "past_v"]
        out_names += ["present_k", "present_v"]
        outputs += [h.make_tensor_value_info("present_k", P.FLOAT, None), h.make_tensor_value_info("present_v", P.FLOAT, None)]
    node = h.make_node("Attention", names, out_names, name=attrs.pop("name", ""), **attrs)
    g = h.make_graph([node], "g", inputs, outputs)
    return h.make_model(g, opset_imports=OPSET).SerializeToString()


CASES = [
    # q, k, v shapes, mask shape, attributes, past shapes
    ("4d_long", (2, 4, 100, 32), (2, 4, 100, 32), (2, 4, 100, 32), None, {}, None),
    ("4d_gqa_causal", (1, 8, 70, 16), (1, 2, 70, 16), (1, 2, 70, 24), None, {"is_causal": 1}, None),
    ("3d_heads_mask", (2, 50, 64), (2, 40, 64), (2, 40, 32), (50, 40), {"q_num_heads": 4, "kv_num_heads": 4}, None),
    ("4d_bool_mask_bcast", (1, 2, 33, 8), (1, 2, 33, 8), (1, 2, 33, 8), (1, 1, 33, 33), {"scale": 0.3, "softcap": 5.0}, None),
    ("4d_past_causal", (1, 4, 9, 16), (1, 2, 9, 16), (1, 2, 9, 16), None, {"is_causal": 1},
     ((1, 2, 40, 16), (1, 2, 40, 16))),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name,qs,ks,vs,ms,attrs,past", CASES, ids=[c[0] for c in CASES])
def test_attention_matches_the_reference(name, qs, ks, vs, ms, attrs, past, threads) -> None:
    mask_type = P.BOOL if name.startswith("4d_bool") else P.FLOAT
    model = _attention_model(qs, ks, vs, mask_shape=ms, mask_type=mask_type, past=past, **attrs)
    rng = np.random.default_rng(hash(name) % 2**32)
    feeds = {"q": rng.standard_normal(qs).astype(np.float32), "k": rng.standard_normal(ks).astype(np.float32),
             "v": rng.standard_normal(vs).astype(np.float32)}
    if ms is not None:
        feeds["mask"] = (rng.random(ms) > 0.3) if mask_type == P.BOOL else rng.standard_normal(ms).astype(np.float32)
    if past is not None:
        feeds["past_k"] = rng.standard_normal(past[0]).astype(np.float32)
        feeds["past_v"] = rng.standard_normal(past[1]).astype(np.float32)
    sess = tt.compile(tt.load(model), threads=threads)
    got = sess.run(feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    for k, out in enumerate(["y", "present_k", "present_v"][: len(want)]):
        np.testing.assert_allclose(got[out], want[k], rtol=2e-5, atol=2e-5, err_msg=out)


def test_attention_matches_onnxruntime_on_a_causal_decoder_block() -> None:
    model = _attention_model((1, 12, 128, 64), (1, 12, 128, 64), (1, 12, 128, 64), is_causal=1)
    rng = np.random.default_rng(7)
    feeds = {n: rng.standard_normal((1, 12, 128, 64)).astype(np.float32) for n in ("q", "k", "v")}
    got = tt.compile(tt.load(model), threads=2).run(feeds)["y"]
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_nan_in_the_mask_where_causality_hides_the_key_still_makes_the_row_nan() -> None:
    # The operator's definition adds its masks: NaN + -inf is NaN, as the reference has it.
    # (onnxruntime adds attn_mask to the padding mask of nonpad_kv_seqlen, but sets causal
    # positions to -inf, so it gives a number here.)
    model = _attention_model((1, 2, 4, 8), (1, 2, 6, 8), (1, 2, 6, 8), mask_shape=(1, 1, 4, 6), is_causal=1)
    rng = np.random.default_rng(3)
    feeds = {"q": rng.standard_normal((1, 2, 4, 8)).astype(np.float32),
             "k": rng.standard_normal((1, 2, 6, 8)).astype(np.float32),
             "v": rng.standard_normal((1, 2, 6, 8)).astype(np.float32),
             "mask": rng.standard_normal((1, 1, 4, 6)).astype(np.float32)}
    feeds["mask"][0, 0, 1, 5] = np.nan  # query 1 may not see key 5
    got = tt.compile(tt.load(model), threads=1).run(feeds)["y"]
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    assert np.isnan(want[0, :, 1]).all() and not np.isnan(want[0, :, [0, 2, 3]]).any()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_a_key_that_causality_hides_still_makes_the_row_nan_where_its_score_is_nan_or_inf(bad) -> None:
    # A causal mask is added as -inf: a +inf or NaN score under it is NaN, as the reference has
    # it. The causal fast path skips the hidden keys' scores, so it must know none of them is
    # +inf or NaN (found by the differential fuzzer with an infinite key).
    model = _attention_model((1, 2, 4, 8), (1, 2, 6, 8), (1, 2, 6, 8), is_causal=1)
    rng = np.random.default_rng(4)
    feeds = {"q": rng.standard_normal((1, 2, 4, 8)).astype(np.float32),
             "k": rng.standard_normal((1, 2, 6, 8)).astype(np.float32),
             "v": rng.standard_normal((1, 2, 6, 8)).astype(np.float32)}
    feeds["k"][0, 1, 5, :] = bad  # hidden from every query (4 queries, 6 keys: 2 in the past)
    feeds["q"][0, 1, 0, :] = np.abs(feeds["q"][0, 1, 0, :]) + 1  # q . k is +inf for query 0
    with np.errstate(all="ignore"):
        want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = tt.compile(tt.load(model), threads=1).run(feeds)["y"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if bad in (np.inf, np.nan):
        assert np.isnan(want[0, 1, 0]).all()  # the case is the one it means to be


def test_an_infinite_key_makes_the_masked_rows_of_qk_softmax_nan_as_the_reference() -> None:
    # inf - inf in the softmax: the whole row is NaN, not only the infinite key's weight.
    model = _attention_model((1, 2, 4, 8), (1, 2, 6, 8), (1, 2, 6, 8), mask_shape=(4, 6))
    import onnx

    proto = onnx.load_from_string(model)
    node = proto.graph.node[0]
    node.output.extend(["", "", "qk"])
    node.attribute.append(h.make_attribute("qk_matmul_output_mode", 3))
    proto.graph.output.append(h.make_tensor_value_info("qk", P.FLOAT, None))
    model = proto.SerializeToString()
    rng = np.random.default_rng(5)
    feeds = {"q": np.abs(rng.standard_normal((1, 2, 4, 8))).astype(np.float32),
             "k": np.abs(rng.standard_normal((1, 2, 6, 8))).astype(np.float32),
             "v": rng.standard_normal((1, 2, 6, 8)).astype(np.float32),
             "mask": rng.standard_normal((4, 6)).astype(np.float32)}
    feeds["k"][0, 1, 3, 2] = np.inf
    got = tt.compile(tt.load(model), threads=1).run(feeds)
    with np.errstate(invalid="ignore"):
        want = ReferenceEvaluator(model).run(None, feeds)
    assert np.isnan(want[1][0, 1]).all() and not np.isnan(want[1][0, 0]).any()
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["qk"], want[1], rtol=1e-5, atol=1e-5)


def test_attention_shape_mismatch_is_a_typed_error() -> None:
    model = _attention_model((1, 4, 8, 16), (1, 4, 8, 16), (1, 4, 8, 16), mask_shape=("a", "b", "c"), name="attn")
    sess = tt.compile(tt.load(model))
    feeds = {n: np.zeros((1, 4, 8, 16), np.float32) for n in ("q", "k", "v")}
    feeds["mask"] = np.zeros((3, 8, 8), np.float32)
    with pytest.raises(tt.ArgumentError, match=r"attn.*attn_mask \[3, 8, 8\] does not broadcast to \[1, 4, 8, 8\]"):
        sess.run(feeds)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_with_position_ids_matches_the_reference(interleaved: int) -> None:
    b, s, heads, d, rot, positions = 2, 20, 4, 32, 16, 64
    node = h.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], interleaved=interleaved,
                       rotary_embedding_dim=rot, num_heads=heads)
    g = h.make_graph([node], "g",
                     [h.make_tensor_value_info("x", P.FLOAT, [b, s, heads * d]),
                      h.make_tensor_value_info("cos", P.FLOAT, [positions, rot // 2]),
                      h.make_tensor_value_info("sin", P.FLOAT, [positions, rot // 2]),
                      h.make_tensor_value_info("pos", P.INT64, [b, s])],
                     [h.make_tensor_value_info("y", P.FLOAT, None)])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 23)]).SerializeToString()
    rng = np.random.default_rng(interleaved)
    angles = np.outer(np.arange(positions), 1.0 / 10000 ** (np.arange(rot // 2) / (rot // 2)))
    feeds = {"x": rng.standard_normal((b, s, heads * d)).astype(np.float32),
             "cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32),
             "pos": rng.integers(0, positions, (b, s)).astype(np.int64)}
    got = tt.compile(tt.load(model), threads=2).run(feeds)["y"]
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    feeds["pos"][1, 3] = positions
    with pytest.raises(tt.ArgumentError, match=r"position_ids\[1, 3\] is 64, outside the cache's 64 positions"):
        tt.compile(tt.load(model)).run(feeds)
