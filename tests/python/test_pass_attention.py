"""passes::fuse_attention: attention written out by an exporter (MatMul with the keys
transposed, a constant scale, an additive float mask, Softmax, MatMul with the values; keys and
values per head or repeated for grouped-query attention) becomes one ai.tether Attention node,
and the model still computes what onnxruntime computes on the original graph: over batches,
past lengths, query rows and threads, with masks of every broadcast form. Chains that compute
something else (a mask that broadcasts along the keys, a scale per head, the mask added before
the scale, Softmax over another axis, a scores tensor read elsewhere) stay as they are and
still match onnxruntime. A row the mask hides wholly is NaN, as Softmax makes it."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import onnx
import pytest
import tether as tt
from _onnx_oracle import run_ort
from onnx import TensorProto, helper, numpy_helper
from test_passes import rel_err

KV_HEADS, GROUP, HEAD = 2, 3, 13
HEADS = KV_HEADS * GROUP
F = TensorProto.FLOAT


def _i64(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _repeat(kv: str, tag: str) -> list[onnx.NodeProto]:
    """kv [B, Hkv, T, D] -> [B, Hkv * G, T, D] as transformers' repeat_kv exports it."""
    return [
        helper.make_node("Shape", [kv], [f"{tag}_s0"], start=0, end=1),
        helper.make_node("Shape", [kv], [f"{tag}_s23"], start=2, end=4),
        helper.make_node("Concat", [f"{tag}_s0", "k_h", "k_g", f"{tag}_s23"], [f"{tag}_big"], axis=0),
        helper.make_node("Concat", [f"{tag}_s0", "k_heads", f"{tag}_s23"], [f"{tag}_flat"], axis=0),
        helper.make_node("Unsqueeze", [kv, "ax2"], [f"{tag}_u"]),
        helper.make_node("Expand", [f"{tag}_u", f"{tag}_big"], [f"{tag}_e"]),
        helper.make_node("Reshape", [f"{tag}_e", f"{tag}_flat"], [f"{tag}_r"]),
    ]


def _model(*, grouped: bool = True, scale: str = "mul", mask: str | None = "b1st", order: str = "scale_then_mask",
           softmax_axis: int | None = -1, opset: int = 17, scores_output: bool = False) -> onnx.ModelProto:
    """Decoder attention over a KV cache (present = Concat(past, new), graph outputs), spelled
    out. ``scale``: "mul" or "div" by a scalar, "per_head" (a [H, 1, 1] constant) or None;
    ``mask``: the mask input's shape ("b1st" [B, 1, S, T], "st" [S, T], "t" [T], "b1s1" [B, 1, S, 1])
    or None; ``order``: "mask_then_scale" adds the mask
    before scaling."""
    kv_heads = KV_HEADS if grouped else HEADS
    nodes = [helper.make_node("Concat", ["past_k", "k"], ["present_k"], axis=2),
             helper.make_node("Concat", ["past_v", "v"], ["present_v"], axis=2)]
    keys, values = "present_k", "present_v"
    if grouped:
        nodes += [*_repeat("present_k", "rk"), *_repeat("present_v", "rv")]
        keys, values = "rk_r", "rv_r"
    nodes += [helper.make_node("Transpose", [keys], ["kt"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", ["q", "kt"], ["scores"], name="scores")]
    inits = [_i64("k_g", [GROUP]), _i64("k_h", [KV_HEADS]), _i64("k_heads", [HEADS]), _i64("ax2", [2])]
    if scale == "per_head":
        inits.append(numpy_helper.from_array(np.linspace(0.1, 0.4, HEADS, dtype=np.float32).reshape(HEADS, 1, 1), "c"))
    elif scale is not None:
        c = HEAD ** -0.5 if scale == "mul" else HEAD ** 0.5
        inits.append(numpy_helper.from_array(np.array(c, np.float32), "c"))
    f_scale = (lambda x, y: [helper.make_node("Div" if scale == "div" else "Mul", [x, "c"], [y])]) if scale else None
    f_mask = (lambda x, y: [helper.make_node("Add", ["mask", x], [y])]) if mask else None
    steps = [f_scale, f_mask] if order == "scale_then_mask" else [f_mask, f_scale]
    x = "scores"
    for i, step in enumerate(s for s in steps if s is not None):
        nodes += step(x, f"pre{i}")
        x = f"pre{i}"
    axis = {} if softmax_axis is None else {"axis": softmax_axis}
    nodes += [helper.make_node("Softmax", [x], ["probs"], **axis),
              helper.make_node("MatMul", ["probs", values], ["y"], name="mix")]
    inputs = [helper.make_tensor_value_info("q", F, ["batch", HEADS, "rows", HEAD]),
              helper.make_tensor_value_info("past_k", F, ["batch", kv_heads, "past", HEAD]),
              helper.make_tensor_value_info("past_v", F, ["batch", kv_heads, "past", HEAD]),
              helper.make_tensor_value_info("k", F, ["batch", kv_heads, "rows", HEAD]),
              helper.make_tensor_value_info("v", F, ["batch", kv_heads, "rows", HEAD])]
    if mask is not None:
        dims = {"b1st": ["batch", 1, "rows", "total"], "st": ["rows", "total"], "t": ["total"],
                "b1s1": ["batch", 1, "rows", 1]}[mask]
        inputs.append(helper.make_tensor_value_info("mask", F, dims))
    outputs = [helper.make_tensor_value_info("y", F, ["batch", HEADS, "rows", HEAD]),
               helper.make_tensor_value_info("present_k", F, ["batch", kv_heads, "total", HEAD]),
               helper.make_tensor_value_info("present_v", F, ["batch", kv_heads, "total", HEAD])]
    if scores_output:
        outputs.append(helper.make_tensor_value_info("scores", F, ["batch", HEADS, "rows", "total"]))
    graph = helper.make_graph(nodes, "attention", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _feeds(proto: onnx.ModelProto, batch: int, past: int, rows: int, seed: int = 0,
           causal: bool = True) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    heads = proto.graph.input[1].type.tensor_type.shape.dim[1].dim_value  # key/value heads

    def r(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    feeds = {"q": r(batch, HEADS, rows, HEAD), "past_k": r(batch, heads, past, HEAD),
             "past_v": r(batch, heads, past, HEAD), "k": r(batch, heads, rows, HEAD), "v": r(batch, heads, rows, HEAD)}
    mask_info = [i for i in proto.graph.input if i.name == "mask"]
    if mask_info:
        total = past + rows
        sizes = {"batch": batch, "rows": rows, "total": total}
        shape = [sizes.get(d.dim_param, d.dim_value) for d in mask_info[0].type.tensor_type.shape.dim]
        m = r(*shape)
        if causal and shape[-1] == total and len(shape) >= 2 and shape[-2] == rows:
            hidden = np.arange(total)[None, :] > (past + np.arange(rows))[:, None]
            m = np.where(hidden, np.float32(np.finfo(np.float32).min), m).astype(np.float32)
        feeds["mask"] = m
    return feeds


def _counts(proto: onnx.ModelProto) -> Counter[str]:
    return Counter(n.op_type for n in tt.optimize(tt.load(proto.SerializeToString())).nodes)


def _check(proto: onnx.ModelProto, feeds: dict[str, np.ndarray], threads: int = 1, tol: float = 1e-5) -> None:
    data = proto.SerializeToString()
    want = run_ort(data, feeds)
    got = tt.compile(tt.load(data), threads=threads).run(feeds)
    for out, ref in zip(proto.graph.output, want, strict=True):
        assert np.array_equal(np.isnan(got[out.name]), np.isnan(ref)), out.name
        assert rel_err(np.nan_to_num(got[out.name]), np.nan_to_num(ref)) <= tol, out.name


def test_a_grouped_decoder_attention_becomes_one_node():
    counts = _counts(_model())
    assert counts["Attention"] == 1, counts
    for op in ("Softmax", "MatMul", "Transpose", "Expand", "Unsqueeze", "Mul", "Add"):
        assert counts[op] == 0, (op, counts)
    opt = tt.optimize(tt.load(_model().SerializeToString()))
    fused = next(n for n in opt.nodes if n.op_type == "Attention")
    assert fused.domain == "ai.tether" and fused.name == "mix"


@pytest.mark.parametrize(("batch", "past", "rows"), [(1, 0, 1), (1, 7, 1), (2, 0, 4), (2, 5, 1), (3, 9, 3),
                                                     (1, 40, 17)])
@pytest.mark.parametrize("threads", [1, 2])
def test_fused_attention_matches_onnxruntime_over_batches_and_past_lengths(batch, past, rows, threads):
    proto = _model()
    _check(proto, _feeds(proto, batch, past, rows, seed=batch * 100 + past), threads)


@pytest.mark.parametrize("spec", [
    {"grouped": False}, {"scale": "div"}, {"scale": None}, {"mask": None}, {"mask": "st"}, {"mask": "t"},
    {"mask": None, "scale": None, "grouped": False}, {"softmax_axis": 3}, {"softmax_axis": None},
    {"softmax_axis": 3, "opset": 12, "grouped": False},
])
def test_each_spelling_fuses_and_matches_onnxruntime(spec: dict[str, Any]):
    proto = _model(**spec)
    assert _counts(proto)["Attention"] == 1, spec
    for batch, past, rows in [(1, 6, 1), (2, 3, 4)]:
        _check(proto, _feeds(proto, batch, past, rows), threads=2)


@pytest.mark.parametrize(("spec", "why"), [
    ({"mask": "b1s1"}, "a mask of one key broadcasts along the keys, where Attention pads it as masked"),
    ({"scale": "per_head"}, "a scale per head is no scalar"),
    ({"order": "mask_then_scale"}, "Attention adds the mask after scaling"),
    ({"softmax_axis": 2}, "Softmax over the query rows"),
    ({"softmax_axis": None, "opset": 12, "grouped": False}, "before opset 13 Softmax's default axis 1 flattens heads, rows and keys"),
    ({"scores_output": True}, "the scores are a graph output"),
])
def test_chains_that_compute_something_else_stay_and_match_onnxruntime(spec: dict[str, Any], why: str):
    proto = _model(**spec)
    assert _counts(proto)["Attention"] == 0, why
    _check(proto, _feeds(proto, 2, 4, 3))


def test_a_row_the_mask_hides_wholly_is_nan_as_softmax_makes_it():
    proto = _model(mask="b1st")
    feeds = _feeds(proto, 2, 3, 2, causal=False)
    feeds["mask"][1, 0, 1, :] = -np.inf  # batch 1, query row 1: no key left
    want = run_ort(proto.SerializeToString(), feeds)[0]
    assert np.isnan(want[1, :, 1]).all() and not np.isnan(want[0]).any()
    _check(proto, feeds)


def test_a_decoder_runs_on_vulkan_without_the_cpu_only_node():
    if not any(d["backend"] == "vulkan" for d in tt.devices()):
        pytest.skip("no Vulkan device")
    proto = _model()
    # strict: a node the pass left for the CPU alone would be refused here.
    sess = tt.compile(tt.load(proto.SerializeToString()), device="vulkan", strict=True)
    feeds = _feeds(proto, 1, 6, 1)
    got = sess.run(feeds)
    want = run_ort(proto.SerializeToString(), feeds)
    assert rel_err(got["y"], want[0]) <= 1e-4
