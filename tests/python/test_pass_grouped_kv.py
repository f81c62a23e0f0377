"""passes::fold_grouped_kv_repeat: key/value heads repeated for grouped-query attention
(Unsqueeze -> Expand -> Reshape, as transformers' exports write repeat_kv) stop being copied: the
two attention products read the unrepeated heads, and the model still computes what onnxruntime
computes on the original graph, over batches, past lengths 0 and more, several query rows and a
head size that is no multiple of the vector width. Repeats of another layout stay as they are."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
import tether as tt
from onnx import TensorProto, helper, numpy_helper
from test_passes import rel_err, run_ort

KV_HEADS, GROUP, HEAD = 2, 3, 13


def _i64(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _repeat(kv: str, tag: str, axis: int) -> list[onnx.NodeProto]:
    """kv [B, Hkv, T, D] repeated to [B, Hkv * G, T, D] as transformers' repeat_kv exports it
    (axis 2: query head h reads kv head h // G), or tiled (axis 1: kv head h % Hkv), the
    target shapes computed from kv's own shape as the exporter does."""
    group_first = axis == 1
    mid = ["k_g", "k_h"] if group_first else ["k_h", "k_g"]
    return [
        helper.make_node("Shape", [kv], [f"{tag}_s0"], start=0, end=1),
        helper.make_node("Shape", [kv], [f"{tag}_s23"], start=2, end=4),
        helper.make_node("Concat", [f"{tag}_s0", *mid, f"{tag}_s23"], [f"{tag}_big"], axis=0),
        helper.make_node("Concat", [f"{tag}_s0", "k_heads", f"{tag}_s23"], [f"{tag}_flat"], axis=0),
        helper.make_node("Unsqueeze", [kv, "ax1" if group_first else "ax2"], [f"{tag}_u"]),
        helper.make_node("Expand", [f"{tag}_u", f"{tag}_big"], [f"{tag}_e"]),
        helper.make_node("Reshape", [f"{tag}_e", f"{tag}_flat"], [f"{tag}_r"]),
    ]


def _attention_model(axis: int = 2, static: tuple[int, int, int] | None = None,
                     name_v_length: bool = True, softmax_axis: int = -1) -> onnx.ModelProto:
    """Decoder attention over a KV cache: present = Concat(past, new), both graph outputs as in
    an export with past (which names their length); scores against the repeated keys, softmax,
    times the repeated values. Dims symbolic unless `static` (batch, past, rows); without
    `name_v_length` the values' cache is no graph output, so its length has no name. A
    softmax over the last axis makes the whole chain one Attention node (test_pass_attention.py);
    over another axis, the products stay and read the unrepeated heads."""
    heads = KV_HEADS * GROUP
    b, p, s = static if static else ("batch", "past", "rows")
    t = p + s if static else "total"
    nodes = [
        helper.make_node("Concat", ["past_k", "k"], ["present_k"], axis=2),
        helper.make_node("Concat", ["past_v", "v"], ["present_v"], axis=2),
        *_repeat("present_k", "rk", axis),
        *_repeat("present_v", "rv", axis),
        helper.make_node("Transpose", ["rk_r"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"], name="scores"),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["probs"], axis=softmax_axis),
        helper.make_node("MatMul", ["probs", "rv_r"], ["y"], name="mix"),
    ]
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("q", f, [b, heads, s, HEAD]),
              helper.make_tensor_value_info("past_k", f, [b, KV_HEADS, p, HEAD]),
              helper.make_tensor_value_info("past_v", f, [b, KV_HEADS, p, HEAD]),
              helper.make_tensor_value_info("k", f, [b, KV_HEADS, s, HEAD]),
              helper.make_tensor_value_info("v", f, [b, KV_HEADS, s, HEAD])]
    outputs = [helper.make_tensor_value_info("y", f, [b, heads, s, HEAD]),
               helper.make_tensor_value_info("present_k", f, [b, KV_HEADS, t, HEAD]),
               helper.make_tensor_value_info("present_v", f, [b, KV_HEADS, t, HEAD])][:3 if name_v_length else 2]
    inits = [_i64("k_g", [GROUP]), _i64("k_h", [KV_HEADS]), _i64("k_heads", [heads]), _i64("ax1", [1]),
             _i64("ax2", [2]), numpy_helper.from_array(np.array(HEAD ** -0.5, np.float32), "scale")]
    graph = helper.make_graph(nodes, "gqa", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _feeds(batch: int, past: int, rows: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def r(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    return {"q": r(batch, KV_HEADS * GROUP, rows, HEAD), "past_k": r(batch, KV_HEADS, past, HEAD),
            "past_v": r(batch, KV_HEADS, past, HEAD), "k": r(batch, KV_HEADS, rows, HEAD),
            "v": r(batch, KV_HEADS, rows, HEAD)}


def _check(proto: onnx.ModelProto, feeds: dict[str, np.ndarray], threads: int = 1) -> None:
    data = proto.SerializeToString()
    want = run_ort(data, feeds)
    got = tt.compile(tt.load(data), threads=threads).run(feeds)
    for name, ref in zip(["y", "present_k", "present_v"], want, strict=False):
        assert rel_err(got[name], ref) <= 1e-5, name


def test_repeated_kv_heads_are_not_expanded_after_optimize():
    opt = tt.optimize(tt.load(_attention_model(softmax_axis=2).SerializeToString()))
    counts = Counter(n.op_type for n in opt.nodes)
    assert counts["Expand"] == 0 and counts["Unsqueeze"] == 0, counts
    assert counts["MatMul"] == 2, counts
    # Softmax over the keys: the chain is attention, and one node.
    opt = tt.optimize(tt.load(_attention_model().SerializeToString()))
    counts = Counter(n.op_type for n in opt.nodes)
    assert counts["Attention"] == 1 and counts["Expand"] == 0 and counts["MatMul"] == 0, counts


@pytest.mark.parametrize(("batch", "past", "rows"), [(1, 7, 1), (2, 0, 4), (3, 9, 3)])
def test_grouped_products_outside_attention_match_onnxruntime(batch, past, rows):
    _check(_attention_model(softmax_axis=2), _feeds(batch, past, rows), threads=2)


@pytest.mark.parametrize(("batch", "past", "rows"), [(1, 0, 1), (1, 7, 1), (2, 0, 4), (2, 5, 1), (3, 9, 3)])
@pytest.mark.parametrize("threads", [1, 2])
def test_grouped_attention_matches_onnxruntime_over_batches_and_past_lengths(batch, past, rows, threads):
    _check(_attention_model(), _feeds(batch, past, rows), threads)


def test_static_shapes_fold_too_and_match_onnxruntime():
    proto = _attention_model(static=(2, 6, 3))
    assert "Expand" not in {n.op_type for n in tt.optimize(tt.load(proto.SerializeToString())).nodes}
    _check(proto, _feeds(2, 6, 3))


def test_tiled_heads_are_left_to_expand_and_still_match_onnxruntime():
    # Query head h reads kv head h % Hkv here: viewing a group's rows together would pair
    # them with the wrong heads, so the repeat must stay.
    proto = _attention_model(axis=1)
    opt = tt.optimize(tt.load(proto.SerializeToString()))
    assert Counter(n.op_type for n in opt.nodes)["Expand"] == 2
    _check(proto, _feeds(2, 5, 2))


def test_a_repeat_of_unknown_length_is_left_to_expand_and_still_matches_onnxruntime():
    # Nothing names the values' cache length, so inference cannot show that the Expand grows
    # the group axis alone: the values' repeat stays, the keys' (length named) goes.
    proto = _attention_model(name_v_length=False)
    opt = tt.optimize(tt.load(proto.SerializeToString()))
    assert Counter(n.op_type for n in opt.nodes)["Expand"] == 1
    _check(proto, _feeds(2, 4, 2))
