"""com.microsoft GroupQueryAttention decoding one token: the kernel scores a key/value head's
whole group of query heads together (one read of the head per step). Checked against
onnxruntime's GroupQueryAttention over group sizes 2 to 6, batches with ragged lengths, past
lengths 0 and more, head sizes that are no multiple of the 16-float panel, rotary and packed
inputs, on 1 and 2 threads; and against numpy where onnxruntime takes no head size that is not
a multiple of 8. ONNX Attention's blocks of few rows, which read K and V in place too, against
the ONNX reference."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import tether as tt
from onnx.reference import ReferenceEvaluator
from test_engine_attention import _attention_model
from test_ms_transformer_ops import _check_gqa, _gqa_case

CASES = {
    "ratio 3, head 24, batch 3": dict(b=3, s=1, n=6, nkv=2, h=24, past=5),
    "ratio 3, first token (no past)": dict(b=2, s=1, n=6, nkv=2, h=40, past=0),
    "ratio 6, one kv head, ragged": dict(b=2, s=1, n=6, nkv=1, h=24, past=9, lens=[10, 3]),
    "ratio 3 rotary packed, head 32": dict(b=2, s=1, n=6, nkv=2, h=32, past=4, rotary=True, packed=True),
    "ratio 2 window softcap": dict(b=2, s=1, n=4, nkv=2, h=24, past=12, window=5, softcap=3.0),
    "ratio 4 shared buffer": dict(b=2, s=1, n=8, nkv=2, h=16, past=10, lens=[6, 9], total=9, rotary=True),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_grouped_decode_step_matches_onnxruntime(case):
    rng = np.random.default_rng(100 + list(CASES).index(case))
    model, feeds, outs = _gqa_case(rng, **CASES[case])
    _check_gqa(model, feeds, outs, 1)


def test_grouped_decode_on_one_thread_matches_onnxruntime():
    rng = np.random.default_rng(3)
    model, feeds, outs = _gqa_case(rng, b=2, s=1, n=6, nkv=2, h=24, past=7)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(outs, feeds)
    got = tt.compile(tt.load(model), threads=1).run(feeds)
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-4, atol=2e-5)


def _numpy_decode(feeds: dict, n: int, nkv: int, h: int) -> np.ndarray:
    """One token of grouped-query attention in float64: query head j reads key/value head
    j // (n // nkv) over the entry's seqlens_k + 1 keys (its past, then the new key)."""
    b = feeds["q"].shape[0]
    q = feeds["q"].reshape(b, n, h).astype(np.float64)
    k_new = feeds["k"].reshape(b, nkv, 1, h)
    v_new = feeds["v"].reshape(b, nkv, 1, h)
    y = np.zeros((b, n, h))
    for e in range(b):
        t = int(feeds["seqlens"][e]) + 1
        keys = np.concatenate([feeds["past_k"][e, :, :t - 1], k_new[e]], axis=1).astype(np.float64)
        values = np.concatenate([feeds["past_v"][e, :, :t - 1], v_new[e]], axis=1).astype(np.float64)
        for j in range(n):
            s = keys[j // (n // nkv)] @ q[e, j] / np.sqrt(h)
            p = np.exp(s - s.max())
            y[e, j] = (p / p.sum()) @ values[j // (n // nkv)]
    return y.reshape(b, 1, n * h)


@pytest.mark.parametrize("threads", [1, 2])
def test_grouped_decode_with_an_odd_head_size_matches_numpy(threads):
    rng = np.random.default_rng(5)
    n, nkv, h = 6, 2, 13
    model, feeds, _ = _gqa_case(rng, b=3, s=1, n=n, nkv=nkv, h=h, past=6, lens=[7, 2, 5])
    got = tt.compile(tt.load(model), threads=threads).run(feeds)["y"]
    np.testing.assert_allclose(got, _numpy_decode(feeds, n, nkv, h), rtol=1e-4, atol=2e-5)


# ONNX Attention shares the in-place path for blocks of at most 8 query rows (one row per head
# when decoding): odd head sizes, grouped heads, a past, a mask and a softcap against the ONNX
# reference implementation.
SMALL_BLOCKS = [
    ("decode gqa past, head 13", (2, 6, 1, 13), (2, 2, 1, 13), (2, 2, 1, 13), None, {},
     ((2, 2, 9, 13), (2, 2, 9, 13))),
    ("decode value head 7, scale", (1, 4, 1, 24), (1, 4, 1, 24), (1, 4, 1, 7), None, {"scale": 0.2},
     ((1, 4, 5, 24), (1, 4, 5, 7))),
    ("5-row causal prompt, head 19", (2, 3, 5, 19), (2, 3, 5, 19), (2, 3, 5, 19), None, {"is_causal": 1}, None),
    ("mask and softcap, 3 rows", (1, 2, 3, 16), (1, 2, 11, 16), (1, 2, 11, 16), (3, 11), {"softcap": 4.0}, None),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name,qs,ks,vs,ms,attrs,past", SMALL_BLOCKS, ids=[c[0] for c in SMALL_BLOCKS])
def test_attention_small_blocks_match_the_reference(name, qs, ks, vs, ms, attrs, past, threads):
    model = _attention_model(qs, ks, vs, mask_shape=ms, past=past, **attrs)
    rng = np.random.default_rng(len(name))
    shapes = {"q": qs, "k": ks, "v": vs, **({"mask": ms} if ms else {}),
              **({"past_k": past[0], "past_v": past[1]} if past else {})}
    feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    got = tt.compile(tt.load(model), threads=threads).run(feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    for k, out in enumerate(["y", "present_k", "present_v"][: len(want)]):
        np.testing.assert_allclose(got[out], want[k], rtol=2e-5, atol=2e-5, err_msg=out)
