"""The transformer ops onnxruntime's tools write, on tether's CPU engine: com.microsoft
SkipLayerNormalization, SkipSimplifiedLayerNormalization, RotaryEmbedding and
GroupQueryAttention, and SimplifiedLayerNormalization (default domain). Single-node models built
with onnx.helper run in tether and in onnxruntime (which runs all of them on its CPU) on random
data; prompts and decoding steps with a past, grouped-query ratios 1, 2 and 4, rotary or not,
packed QKV, a local window and a softcap. Every malformed node raises a typed error naming the
node and what is wrong."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tether as tt
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]


def _model(node, feeds: dict, outputs: list[str], inits: dict | None = None) -> bytes:
    inits = inits or {}
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for k, v in feeds.items()]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(o, F, None) for o in outputs],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=OPSETS)
    model.ir_version = 9
    return model.SerializeToString()


def _both(model: bytes, feeds: dict, outputs: list[str]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(outputs, feeds)
    got = tt.compile(tt.load(model), threads=2).run(feeds)
    return [got[o] for o in outputs], want


def _randn(rng, *shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


# ---- SkipLayerNormalization, SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization ---------


@pytest.mark.parametrize("x_shape,skip_shape", [((2, 3, 13), (2, 3, 13)), ((2, 3, 64), (1, 3, 64)),
                                                ((2, 5, 24), (5, 24)), ((7, 40), (7, 40))])
@pytest.mark.parametrize("beta,bias", [(True, True), (False, False), (False, True)])
def test_skip_layer_norm_matches_onnxruntime_on_every_output(x_shape, skip_shape, beta, bias):
    rng = np.random.default_rng(1)
    h = x_shape[-1]
    feeds = {"x": _randn(rng, *x_shape), "skip": _randn(rng, *skip_shape), "gamma": _randn(rng, h)}
    names = ["x", "skip", "gamma", "beta" if beta else "", "bias" if bias else ""]
    if beta:
        feeds["beta"] = _randn(rng, h)
    if bias:
        feeds["bias"] = _randn(rng, h)
    while names[-1] == "":
        names.pop()
    outs = ["y", "mean", "inv_std", "sum"]
    node = helper.make_node("SkipLayerNormalization", names, outs, name="ln", domain="com.microsoft", epsilon=1e-5)
    got, want = _both(_model(node, feeds, outs), feeds, outs)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bias", [True, False])
def test_skip_simplified_layer_norm_matches_onnxruntime(bias):
    rng = np.random.default_rng(2)
    feeds = {"x": _randn(rng, 2, 3, 37), "skip": _randn(rng, 2, 3, 37), "gamma": _randn(rng, 37)}
    names = ["x", "skip", "gamma"]
    if bias:
        feeds["bias"] = _randn(rng, 37)
        names.append("bias")
    outs = ["y", "mean", "inv_std", "sum"]
    node = helper.make_node("SkipSimplifiedLayerNormalization", names, outs, name="rms", domain="com.microsoft",
                            epsilon=1e-6)
    got, want = _both(_model(node, feeds, outs), feeds, outs)
    for k in (0, 2, 3):  # the mean of an RMSNorm is not defined; onnxruntime writes zeros
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(got[1], np.zeros((2, 3, 1), np.float32))


@pytest.mark.parametrize("axis", [-1, -2])
def test_simplified_layer_norm_matches_onnxruntime(axis):
    rng = np.random.default_rng(3)
    feeds = {"x": _randn(rng, 2, 3, 4, 21), "scale": _randn(rng, *((21,) if axis == -1 else (4, 21)))}
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y", "inv"], name="rms", axis=axis,
                            epsilon=1e-5)
    got, want = _both(_model(node, feeds, ["y", "inv"]), feeds, ["y", "inv"])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_simplified_layer_norm_broadcasts_a_smaller_scale_as_numpy():
    rng = np.random.default_rng(4)
    x, scale = _randn(rng, 3, 4, 9), _randn(rng, 9)
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y"], axis=-2)
    got = tt.compile(tt.load(_model(node, {"x": x, "scale": scale}, ["y"]))).run({"x": x, "scale": scale})["y"]
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64**2).mean(axis=(-1, -2), keepdims=True) + 1e-5) * scale
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ---- RotaryEmbedding (com.microsoft) --------------------------------------------------------------


@pytest.mark.parametrize("layout,interleaved,pos_kind,rot", [
    ("bsd", 0, "ids", 0), ("bsd", 1, "ids", 0), ("bsd", 0, "offset", 0), ("bnsh", 1, "ids", 0),
    ("bnsh", 0, "offset", 0), ("bsd", 0, "ids", 8), ("bsd", 1, "offset", 4)])
def test_ms_rotary_embedding_matches_onnxruntime(layout, interleaved, pos_kind, rot):
    rng = np.random.default_rng(5)
    b, s, n, h, positions = 2, 5, 3, 16, 12
    x = _randn(rng, b, s, n * h) if layout == "bsd" else _randn(rng, b, n, s, h)
    half = (rot or h) // 2
    angles = rng.uniform(0, 6, (positions, half))
    pos = np.array([4], np.int64) if pos_kind == "offset" else rng.integers(0, positions, (b, s), dtype=np.int64)
    feeds = {"x": x, "pos": pos, "cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32)}
    attrs = {"interleaved": interleaved}
    if rot:
        attrs.update(rotary_embedding_dim=rot, num_heads=n)
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], name="rope", domain="com.microsoft",
                            **attrs)
    got, want = _both(_model(node, feeds, ["y"]), feeds, ["y"])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


def _rope_model(x_shape, cos_shape, pos_shape=(2, 5), pos_type=TensorProto.INT64, **attrs) -> bytes:
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], name="rope", domain="com.microsoft",
                            **attrs)
    inputs = [helper.make_tensor_value_info("x", F, x_shape), helper.make_tensor_value_info("pos", pos_type, pos_shape),
              helper.make_tensor_value_info("cos", F, cos_shape), helper.make_tensor_value_info("sin", F, cos_shape)]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", F, None)])
    return helper.make_model(graph, opset_imports=OPSETS).SerializeToString()


@pytest.mark.parametrize("model,message", [
    (_rope_model([2, 5, 48], [12, 8], num_heads=3, rotary_embedding_dim=8), r"rotary_embedding_dim / 2 = 4"),
    (_rope_model([2, 5, 50], [12, 8], num_heads=3), r"hidden size 50 is not a multiple of num_heads 3"),
    (_rope_model([2, 5, 48], [12, 4], rotary_embedding_dim=8), r"rotary_embedding_dim needs the num_heads"),
    (_rope_model([2, 3, 5, 16], [12, 10]), r"rotary size 20 exceeds the head size 16"),
    (_rope_model([2, 5, 48], [12, 8], pos_shape=(3, 5)), r"position_ids.*batch"),
    (_rope_model([2, 5, 48], [12, 8], pos_type=TensorProto.INT32), r"position_ids \(input 1\) is int32"),
    (_rope_model([2, 5], [12, 8]), r"input \(input 0\) must be 3-D or 4-D"),
])
def test_malformed_ms_rotary_embedding_raises_shape_error_naming_node(model, message):
    with pytest.raises(tt.ShapeError, match=message) as info:
        tt.compile(tt.load(model))
    assert "rope" in str(info.value)


def test_ms_rotary_position_past_the_cache_raises_argument_error():
    sess = tt.compile(tt.load(_rope_model([2, 5, 48], [12, 8])))
    cache = np.zeros((12, 8), np.float32)
    pos = np.arange(10, dtype=np.int64).reshape(2, 5) + 3
    with pytest.raises(tt.ArgumentError, match=r"rope.*position 12 \(batch 1, token 4\).*12 positions"):
        sess.run({"x": np.zeros((2, 5, 48), np.float32), "pos": pos, "cos": cache, "sin": cache})


# ---- GroupQueryAttention ---------------------------------------------------------------------------


def _gqa_case(rng, *, b=2, s=5, n=4, nkv=2, h=16, past=0, lens=None, total=None, rotary=False, interleaved=0,
              packed=False, window=-1, softcap=0.0, total_const=False, cache_rows=None):
    """A GroupQueryAttention model and its feeds. lens: seqlens_k + 1 per entry."""
    lens = lens or [past + s] * b
    total = total if total is not None else max(lens)
    q, k, v = _randn(rng, b, s, n * h), _randn(rng, b, s, nkv * h), _randn(rng, b, s, nkv * h)
    feeds = {"q": np.concatenate([q, k, v], -1) if packed else q}
    names = ["q", "", "", "", ""]
    if not packed:
        feeds.update(k=k, v=v)
        names[1:3] = ["k", "v"]
    if past:
        feeds.update(past_k=_randn(rng, b, nkv, past, h), past_v=_randn(rng, b, nkv, past, h))
        names[3:5] = ["past_k", "past_v"]
    feeds["seqlens"] = np.array(lens, np.int32) - 1
    names.append("seqlens")
    inits = {}
    (inits if total_const else feeds)["total"] = np.array(total, np.int32)
    names.append("total")
    attrs = {"num_heads": n, "kv_num_heads": nkv}
    if rotary:
        angles = rng.uniform(0, 6, (cache_rows or total + 2, h // 2))
        feeds.update(cos=np.cos(angles).astype(np.float32), sin=np.sin(angles).astype(np.float32))
        names += ["cos", "sin"]
        attrs.update(do_rotary=1, rotary_interleaved=interleaved)
    if window > 0:
        attrs["local_window_size"] = window
    if softcap:
        attrs["softcap"] = softcap
    outs = ["y", "present_k", "present_v"]
    node = helper.make_node("GroupQueryAttention", names, outs, name="attn", domain="com.microsoft", **attrs)
    return _model(node, feeds, outs, inits), feeds, outs


def _check_gqa(model, feeds, outs, s):
    got, want = _both(model, feeds, outs)
    assert [g.shape for g in got] == [w.shape for w in want]
    total = int(feeds.get("total", s))
    first_prompt = s == total
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=2e-5)
    # present rows past an entry's keys are not specified by the operator: compare the rows it fills
    for b, t in enumerate(feeds["seqlens"] + 1):
        rows = s if first_prompt else int(t)
        for k in (1, 2):
            np.testing.assert_allclose(got[k][b, :, :rows], want[k][b, :, :rows], rtol=1e-5, atol=1e-6)


GQA_CASES = {
    "prompt ratio 1": dict(n=2, nkv=2),
    "prompt ratio 2": dict(n=4, nkv=2),
    "prompt ratio 4 rotary": dict(n=4, nkv=1, rotary=True),
    "prompt rotary interleaved packed": dict(n=4, nkv=2, rotary=True, interleaved=1, packed=True),
    "prompt window softcap": dict(s=9, window=3, softcap=2.5),
    "prompt right-padded": dict(lens=[5, 3]),
    "prompt long, 3 threads' worth of rows": dict(b=1, s=67, n=2, nkv=1, h=32, rotary=True),
    "decode ratio 2": dict(s=1, past=6),
    "decode ratio 4 rotary ragged": dict(s=1, n=8, nkv=2, past=6, lens=[7, 4], rotary=True),
    "decode packed interleaved": dict(s=1, past=5, packed=True, rotary=True, interleaved=1),
    "decode window": dict(s=1, past=8, window=3),
    "decode softcap ratio 1": dict(s=1, n=2, nkv=2, past=4, softcap=1.5),
    "decode shared buffer": dict(s=1, past=10, lens=[6, 9], total=9, rotary=True),
    "chunk after a past": dict(b=1, s=3, past=6, lens=[9], rotary=True),
    "total a constant (planned present)": dict(s=1, past=6, total_const=True, rotary=True),
}


@pytest.mark.parametrize("case", list(GQA_CASES), ids=list(GQA_CASES))
def test_group_query_attention_matches_onnxruntime(case):
    rng = np.random.default_rng(list(GQA_CASES).index(case))
    args = GQA_CASES[case]
    model, feeds, outs = _gqa_case(rng, **args)
    if args.get("total_const"):
        feeds_ort = dict(feeds)
        got, want = _both(model, feeds_ort, outs)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=2e-5)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
        return
    _check_gqa(model, feeds, outs, args.get("s", 5))


def test_group_query_attention_decodes_step_by_step_like_onnxruntime():
    rng = np.random.default_rng(7)
    b, n, nkv, h, steps = 2, 4, 2, 16, 4
    model, feeds, outs = _gqa_case(rng, b=b, s=1, n=n, nkv=nkv, h=h, past=3, rotary=True, cache_rows=16)
    proto = onnx.load_from_string(model)
    for vi in proto.graph.input:
        if vi.name in ("past_k", "past_v"):
            vi.type.tensor_type.shape.dim[2].dim_param = "past"
    model = proto.SerializeToString()
    sess = tt.compile(tt.load(model))
    ort_sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for step in range(steps):
        got = sess.run(feeds)
        want = ort_sess.run(outs, feeds)
        np.testing.assert_allclose(got["y"], want[0], rtol=1e-4, atol=2e-5)
        feeds = {**feeds, "q": _randn(rng, b, 1, n * h), "k": _randn(rng, b, 1, nkv * h), "v": _randn(rng, b, 1, nkv * h),
                 "past_k": want[1], "past_v": want[2], "seqlens": feeds["seqlens"] + 1, "total": np.array(feeds["total"] + 1, np.int32)}
        assert want[1].shape[2] == 4 + step


def _gqa_shape_model(q, k, v, past=None, seqlens=(2,), n=4, nkv=2, cos=None, **attrs) -> bytes:
    names = ["q", "k" if k else "", "v" if v else "", "pk" if past else "", "pv" if past else "", "sl", "tl"]
    shapes = {"q": q, "k": k, "v": v, "pk": past, "pv": past}
    inputs = [helper.make_tensor_value_info(nm, F, sh) for nm, sh in shapes.items() if sh]
    inputs += [helper.make_tensor_value_info("sl", TensorProto.INT32, list(seqlens)),
               helper.make_tensor_value_info("tl", TensorProto.INT32, [])]
    if cos:
        names += ["cos", "sin"]
        inputs += [helper.make_tensor_value_info("cos", F, cos), helper.make_tensor_value_info("sin", F, cos)]
    node = helper.make_node("GroupQueryAttention", names, ["y", "pko", "pvo"], name="attn", domain="com.microsoft",
                            num_heads=n, kv_num_heads=nkv, **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", F, None)])
    return helper.make_model(graph, opset_imports=OPSETS).SerializeToString()


@pytest.mark.parametrize("model,message", [
    (_gqa_shape_model([2, 5, 48], [2, 5, 32], [2, 5, 32], n=3, nkv=2), r"num_heads 3 is not a multiple of kv_num_heads 2"),
    (_gqa_shape_model([2, 5, 50], [2, 5, 32], [2, 5, 32]), r"query \(input 0\).*not a multiple of num_heads = 4"),
    (_gqa_shape_model([2, 5, 64], [2, 5, 24], [2, 5, 32]), r"key \(input 1\).*kv_num_heads \* head size"),
    (_gqa_shape_model([2, 5, 64], [2, 4, 32], [2, 4, 32]), r"key \(input 1\).*sequence length"),
    (_gqa_shape_model([2, 5, 64], [2, 5, 32], None), r"key \(input 1\) and value \(input 2\) must be given together"),
    (_gqa_shape_model([2, 1, 64], [2, 1, 32], [2, 1, 32], past=[2, 3, 6, 16]), r"past_key \(input 3\).*kv_num_heads"),
    (_gqa_shape_model([2, 1, 64], [2, 1, 32], [2, 1, 32], past=[2, 2, 6, 8]), r"past_key \(input 3\).*head size"),
    (_gqa_shape_model([2, 5, 64], [2, 5, 32], [2, 5, 32], seqlens=(3,)), r"seqlens_k \(input 5\).*per batch entry"),
    (_gqa_shape_model([2, 5, 64], [2, 5, 32], [2, 5, 32], do_rotary=1), r"do_rotary = 1 needs cos_cache"),
    (_gqa_shape_model([2, 5, 64], [2, 5, 32], [2, 5, 32], cos=[16, 12], do_rotary=1), r"rotates 24 values"),
    (_gqa_shape_model([2, 5, 64], [2, 5, 32], [2, 5, 32], local_window_size=0), r"local_window_size is 0"),
    (_gqa_shape_model([2, 5, 48], None, None, n=3, nkv=2), r"num_heads 3 is not a multiple"),
    (_gqa_shape_model([2, 5, 70], None, None), r"num_heads \+ 2 \* kv_num_heads = 8"),
])
def test_malformed_group_query_attention_raises_shape_error_naming_node(model, message):
    with pytest.raises(tt.ShapeError, match=message) as info:
        tt.compile(tt.load(model))
    assert "attn" in str(info.value) and "GroupQueryAttention" in str(info.value)


@pytest.mark.parametrize("lens,total,message", [
    ([7, 9], 8, r"seqlens_k\[1\] = 8 is outside \[0, total_sequence_length - 1 = 7\]"),
    ([7, 0], 8, r"seqlens_k\[1\] = -1 is outside"),
    ([7, 8], 8, r"seqlens_k\[1\] = 7 needs 7 past keys; past_key holds 6"),
])
def test_group_query_attention_lengths_out_of_range_raise_argument_error(lens, total, message):
    rng = np.random.default_rng(8)
    model, feeds, _ = _gqa_case(rng, s=1, past=6)
    feeds.update(seqlens=np.array(lens, np.int32) - 1, total=np.array(total, np.int32))
    with pytest.raises(tt.ArgumentError, match=message):
        tt.compile(tt.load(model)).run(feeds)


def test_group_query_attention_cache_shorter_than_positions_raises_argument_error():
    rng = np.random.default_rng(9)
    model, feeds, _ = _gqa_case(rng, s=1, past=6, rotary=True, cache_rows=5)
    with pytest.raises(tt.ArgumentError, match=r"attn.*cos_cache has 5 positions; the tokens reach position 6"):
        tt.compile(tt.load(model)).run(feeds)


def test_unsupported_group_query_attention_features_raise_unsupported_error():
    model = _gqa_shape_model([2, 5, 64], [2, 5, 32], [2, 5, 32], causal=0)
    with pytest.raises(tt.UnsupportedError, match=r"attn.*causal = 0"):
        tt.compile(tt.load(model), strict=True)
