"""ONNX Attention (opset 23) and ai.tether Attention on Vulkan (shaders/attention.glsl: a
workgroup per query row, the softmax kept online) against a numpy version of the operator's
definition in float64 and against the CPU engine: 4-D and 3-D heads, grouped-query heads, float
masks that broadcast or stop short of the keys, causal, softcap, the default scale, more keys than
a workgroup scores at once, values wider than one pass of columns, rows no key is left to; both
reductions (subgroups, shared memory); float16 storage; what runs on the CPU instead, named under
strict."""

from __future__ import annotations

import numpy as np
import pytest
import tether as tt
from _vulkan import assert_close, requires_vulkan
from onnx import TensorProto, helper, numpy_helper

pytestmark = [requires_vulkan, pytest.mark.usefixtures("vulkan_validation")]


@pytest.fixture(params=["subgroups", "shared"])
def reduction(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The row reductions by subgroups (lavapipe has subgroup arithmetic) and through shared
    memory alone (read when a model is compiled)."""
    if request.param == "shared":
        monkeypatch.setenv("TETHER_VULKAN_NO_SUBGROUPS", "1")
    else:
        monkeypatch.delenv("TETHER_VULKAN_NO_SUBGROUPS", raising=False)
    return request.param


def _model(inputs: dict[str, np.ndarray], consts: dict[str, np.ndarray], names: list[str], domain: str = "",
           outputs: tuple[str, ...] = ("y",), **attrs: object) -> tt.Model:
    node = helper.make_node("Attention", names, list(outputs), name="att", domain=domain, **attrs)
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                               for k, v in inputs.items()],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    opsets = [helper.make_opsetid("", 23)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return tt.load(helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString())


def _heads(x: np.ndarray, heads: int) -> np.ndarray:
    """[B, S, H size] -> [B, H, S, size]."""
    b, s, hs = x.shape
    return x.reshape(b, s, heads, hs // heads).transpose(0, 2, 1, 3)


def _reference(q, k, v, mask=None, causal=False, scale=None, softcap=0.0, nan_when_fully_masked=False):
    """ONNX Attention in float64 on 4-D heads: (q k^T) scale, soft-capped, plus the mask (keys
    past its last dim masked) and the causal mask, softmax over the keys, times v; a row with
    every key masked is zero (NaN for nan_when_fully_masked)."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if softcap:
        s = softcap * np.tanh(s / softcap)
    bias = np.zeros(s.shape)
    if mask is not None:
        full = np.full(mask.shape[:-1] + (s.shape[-1],), -np.inf)
        full[..., :mask.shape[-1]] = mask
        bias = bias + full
    if causal:
        i, j = np.indices(s.shape[-2:])
        bias = bias + np.where(j > i, -np.inf, 0.0)
    s = s + bias
    masked = np.all(np.isneginf(np.broadcast_to(bias, s.shape)), axis=-1, keepdims=True) if (mask is not None or causal) \
        else np.zeros(s.shape[:-1] + (1,), bool)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - np.where(masked, 0.0, s.max(-1, keepdims=True)))
        p = e / e.sum(-1, keepdims=True)
    y = np.where(masked, np.nan if nan_when_fully_masked else 0.0, p @ v)
    return y


def _run(model: tt.Model, feeds: dict[str, np.ndarray], precision: str = "fp32") -> tuple[np.ndarray, np.ndarray]:
    sess = tt.compile(model, device="vulkan", strict=True, precision=precision)
    assert [s["backend"] for s in sess.steps()] == ["vulkan"], sess.report
    return sess.run(feeds)["y"], tt.compile(model).run(feeds)["y"]


_CASES = {
    # name: (B, H, Hkv, S, T, D, Dv, mask shape or None, attributes)
    "plain": (2, 2, 2, 5, 7, 8, 8, None, {}),
    "grouped-float-mask": (2, 4, 2, 5, 7, 8, 8, (5, 7), {"scale": 0.3}),
    "mask-per-batch-and-head": (2, 4, 4, 3, 9, 16, 16, (2, 4, 3, 9), {}),
    "mask-shorter-than-keys": (1, 2, 1, 4, 10, 8, 8, (1, 1, 4, 6), {}),
    "causal": (1, 2, 2, 6, 6, 8, 8, None, {"is_causal": 1}),
    "causal-and-mask-softcap": (2, 2, 1, 6, 6, 8, 8, (1, 6), {"is_causal": 1, "softcap": 2.0}),
    "keys-past-two-blocks": (1, 2, 2, 3, 150, 16, 24, (150,), {}),
    "values-wider-than-a-pass": (1, 1, 1, 2, 70, 8, 300, None, {}),
    "one-query-row": (3, 8, 2, 1, 33, 64, 64, None, {}),
}


@pytest.mark.parametrize("case", list(_CASES.values()), ids=list(_CASES))
def test_attention_matches_numpy_and_the_cpu_engine(case: tuple, reduction: str) -> None:
    b, h, hkv, s, t, d, dv, mask_shape, attrs = case
    rng = np.random.default_rng(b * 100 + t)
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for shape in ((b, h, s, d), (b, hkv, t, d), (b, hkv, t, dv)))
    inputs, names = {"q": q, "k": k, "v": v}, ["q", "k", "v"]
    mask = None
    if mask_shape is not None:
        mask = rng.uniform(-2.0, 1.0, mask_shape).astype(np.float32)
        inputs["m"] = mask
        names.append("m")
    got, cpu = _run(_model(inputs, {}, names, **attrs), inputs)
    want = _reference(q, k, v, mask, causal=bool(attrs.get("is_causal")), scale=attrs.get("scale"),
                      softcap=attrs.get("softcap", 0.0))
    assert_close(got, want.astype(np.float32), 1e-5, f"Attention vs numpy ({reduction})")
    assert_close(got, cpu, 1e-5, f"Attention vs the CPU engine ({reduction})")


def test_attention_of_3d_heads_matches_the_4d_form() -> None:
    """[B, S, H D] with q_num_heads and kv_num_heads is the same attention as [B, H, S, D]."""
    rng = np.random.default_rng(3)
    b, h, hkv, s, t, d = 2, 4, 2, 5, 7, 8
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for shape in ((b, s, h * d), (b, t, hkv * d), (b, t, hkv * d)))
    mask = rng.uniform(-1.0, 1.0, (s, t)).astype(np.float32)
    feeds = {"q": q, "k": k, "v": v, "m": mask}
    got, cpu = _run(_model(feeds, {}, ["q", "k", "v", "m"], q_num_heads=h, kv_num_heads=hkv), feeds)
    want = _reference(_heads(q, h), _heads(k, hkv), _heads(v, hkv), mask)  # [B, H, S, D]
    assert_close(got, want.transpose(0, 2, 1, 3).reshape(b, s, h * d).astype(np.float32), 1e-5, "3-D Attention vs numpy")
    assert_close(got, cpu, 1e-5, "3-D Attention vs the CPU engine")


@pytest.mark.parametrize("domain", ["", "ai.tether"])
def test_a_row_with_every_key_masked_is_zero_or_nan_as_on_the_cpu(domain: str) -> None:
    """ONNX Attention writes zeros for a row none of whose keys is left; ai.tether's form (what
    compile fuses from the Softmax chain) keeps Softmax's NaN (nan_when_fully_masked)."""
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((1, 2, 4, 8)).astype(np.float32) for _ in range(3))
    mask = rng.standard_normal((4, 4)).astype(np.float32)
    mask[2] = -np.inf  # query row 2 sees no key
    feeds = {"q": q, "k": k, "v": v, "m": mask}
    attrs = {"nan_when_fully_masked": 1} if domain else {}
    got, cpu = _run(_model(feeds, {}, ["q", "k", "v", "m"], domain=domain, **attrs), feeds)
    want = _reference(q, k, v, mask, nan_when_fully_masked=bool(domain))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(cpu))
    assert (np.isnan(got[:, :, 2]).all() if domain else (got[:, :, 2] == 0).all())
    ok = ~np.isnan(want)
    assert_close(got[ok], want[ok].astype(np.float32), 1e-5, "the other rows")


def test_attention_in_float16_storage_within_1e_2() -> None:
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal(shape).astype(np.float16).astype(np.float32)
               for shape in ((2, 4, 9, 32), (2, 2, 80, 32), (2, 2, 80, 32)))
    feeds = {"q": q, "k": k, "v": v}
    got, _ = _run(_model(feeds, {}, ["q", "k", "v"], is_causal=1), feeds, precision="fp16")
    assert_close(got, _reference(q, k, v, causal=True).astype(np.float32), 1e-2, "fp16 Attention")


@pytest.mark.parametrize("what, why", [
    ("bool-mask", "attn_mask is not float32"),
    ("past", "a key/value cache"),
    ("window", "sliding windows"),
])
def test_attention_vulkan_does_not_take_runs_on_the_cpu_or_is_refused_under_strict(what: str, why: str) -> None:
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal((1, 2, 3, 8)).astype(np.float32) for _ in range(3))
    feeds, names, attrs, outputs = {"q": q, "k": k, "v": v}, ["q", "k", "v"], {}, ("y",)
    if what == "bool-mask":
        feeds["m"] = rng.random((3, 3)) > 0.3
        names.append("m")
    elif what == "past":
        feeds.update({"pk": rng.standard_normal((1, 2, 2, 8)).astype(np.float32),
                      "pv": rng.standard_normal((1, 2, 2, 8)).astype(np.float32)})
        names += ["", "pk", "pv"]
        outputs = ("y", "present_k", "present_v")
    else:
        attrs["left_window_size"] = 1
    model = _model(feeds, {}, names, outputs=outputs, **attrs)
    with pytest.raises(tt.UnsupportedError, match=rf"Attention 'att'.*{why}"):
        tt.compile(model, device="vulkan", strict=True)
    sess = tt.compile(model, device="vulkan")
    assert [s["backend"] for s in sess.steps()] == ["cpu"]
    np.testing.assert_array_equal(sess.run(feeds)["y"], tt.compile(model).run(feeds)["y"])


def test_a_mask_that_does_not_broadcast_is_an_error_naming_the_node() -> None:
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((1, 2, 3, 8)).astype(np.float32) for _ in range(3))
    feeds = {"q": q, "k": k, "v": v, "m": rng.standard_normal((2, 3)).astype(np.float32)}  # 2 rows for 3 positions
    with pytest.raises(tt.Error, match=r"Attention 'att'.*attn_mask"):
        tt.compile(_model(feeds, {}, ["q", "k", "v", "m"]), device="vulkan", strict=True).run(feeds)
