"""tt.quantize.static(..., algorithms=[...]): cross-layer equalization against a numpy version of
its definition (Nagel et al. 2019), the same function in onnxruntime, and the INT8 error it saves."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import tether as tt
from tether.quantize._equalize import cross_layer_equalization


def _conv(b: tt.GraphBuilder, x: str, name: str, w: np.ndarray, bias: np.ndarray | None, group: int = 1) -> str:
    ins = [x, b.initializer(f"{name}.w", w.astype(np.float32))]
    if bias is not None:
        ins.append(b.initializer(f"{name}.b", bias.astype(np.float32)))
    return b.node("Conv", ins, name=name, pads=[1, 1, 1, 1], group=group)


def _uneven(rng: np.random.Generator, shape: tuple[int, ...], spread: float = 2.0) -> np.ndarray:
    """Weights whose output channels span ranges up to exp(2 * spread) apart."""
    return rng.standard_normal(shape) * np.exp(rng.uniform(-spread, spread, (shape[0],) + (1,) * (len(shape) - 1)))


def _chain_model() -> tt.Model:
    """conv1 -> BatchNormalization (folded before equalizing) -> Relu -> dw (depthwise) -> Relu -> pw
    -> conv4 -> LeakyRelu -> conv5."""
    rng = np.random.default_rng(4)
    b = tt.GraphBuilder("chain")
    h = b.input("x", "float32", ("batch", 3, 8, 8))
    h = _conv(b, h, "conv1", _uneven(rng, (8, 3, 3, 3)), rng.standard_normal(8))
    bn = [b.initializer(f"bn.{k}", v.astype(np.float32)) for k, v in (
        ("scale", rng.uniform(0.2, 3, 8)), ("bias", rng.standard_normal(8)), ("mean", rng.standard_normal(8) * 0.1),
        ("var", rng.uniform(0.5, 2, 8)))]
    h = b.node("Relu", [b.node("BatchNormalization", [h, *bn], name="bn")], name="r1")
    h = b.node("Relu", [_conv(b, h, "dw", _uneven(rng, (8, 1, 3, 3)), rng.standard_normal(8), group=8)], name="r2")
    h = _conv(b, h, "pw", _uneven(rng, (16, 8, 3, 3)), None)
    h = b.node("LeakyRelu", [_conv(b, h, "conv4", _uneven(rng, (6, 16, 3, 3)), rng.standard_normal(6))], alpha=0.1)
    b.output(_conv(b, h, "conv5", _uneven(rng, (5, 6, 3, 3)), rng.standard_normal(5)))
    return b.build()


# The definition, in numpy: r = largest |w| per channel; a pair gets s = sqrt(r1 r2) / r2, a
# Conv -> depthwise -> Conv triple s12 = r1 / cbrt(r1 r2 r3), s23 = cbrt(r1 r2 r3) / r3; the first
# conv's output channels (weights and bias) are divided by s, the next conv's input channels
# multiplied by it.
def _r_out(w: np.ndarray) -> np.ndarray:
    return np.array([np.abs(w[i]).max() for i in range(w.shape[0])])


def _r_in(w: np.ndarray, depthwise: bool) -> np.ndarray:
    return _r_out(w) if depthwise else np.array([np.abs(w[:, i]).max() for i in range(w.shape[1])])


def _scale(p: dict[str, list[np.ndarray]], first: str, second: str, s: np.ndarray, depthwise: bool) -> None:
    for i in range(s.size):
        for t in p[first]:  # weight, and bias if any
            t[i] /= s[i]
        if depthwise:
            p[second][0][i] *= s[i]
        else:
            p[second][0][:, i] *= s[i]


def _reference(model: tt.Model) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    """New weights by initializer name, and the scales of each link, in graph order: the
    Conv+BatchNormalization node (named 'bn' once folded) -> dw -> pw triple, then pw -> conv4
    and conv4 -> conv5."""
    p = {n.name: [model.initializer(i).astype(np.float64) for i in n.inputs[1:3] if i]
         for n in model.nodes if n.op_type == "Conv"}
    r1, r2, r3 = _r_out(p["bn"][0]), _r_out(p["dw"][0]), _r_in(p["pw"][0], False)
    c = (r1 * r2 * r3) ** (1 / 3)
    s12, s23 = r1 / c, c / r3
    _scale(p, "bn", "dw", s12, True)
    _scale(p, "dw", "pw", s23, False)
    scales = [s12, s23]
    for first, second in (("pw", "conv4"), ("conv4", "conv5")):
        r1, r2 = _r_out(p[first][0]), _r_in(p[second][0], False)
        s = np.sqrt(r1 * r2) / r2
        _scale(p, first, second, s, False)
        scales.append(s)
    names = {n.name: [i for i in n.inputs[1:3] if i] for n in model.nodes if n.op_type == "Conv"}
    return {name: t for node, ts in p.items() for name, t in zip(names[node], ts, strict=True)}, scales


def _run(model: tt.Model, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.to_bytes(), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def test_equalized_weights_and_scales_match_a_numpy_version_of_the_definition():
    prepared = tt.quantize.prepare(_chain_model())
    eq, sets, _ = cross_layer_equalization(prepared)
    expected, scales = _reference(prepared)
    assert [s.nodes for s in sets] == [("bn", "dw", "pw"), ("pw", "conv4"), ("conv4", "conv5")]
    got = [s for st in sets for s in st.scales]
    for g, e in zip(got, scales, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-12)
    for name, e in expected.items():
        np.testing.assert_allclose(eq.initializer(name), e.astype(np.float32), rtol=1e-6, err_msg=name)
    # Each equalized channel now spans the same range in both convolutions of a pair.
    np.testing.assert_allclose(_r_out(eq.initializer("conv4.w")), _r_in(eq.initializer("conv5.w"), False), rtol=1e-5)


def test_equalized_model_computes_what_the_original_computes_in_onnxruntime():
    original = _chain_model()
    eq = tt.quantize.equalize(original)
    x = np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)
    want, got = _run(original, x), _run(eq, x)
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
    assert "BatchNormalization" not in [n.op_type for n in eq.nodes]
    assert eq.initializer("dw.w").tobytes() != tt.quantize.prepare(original).initializer("dw.w").tobytes()


def test_relu6_shared_weights_and_graph_outputs_in_between_are_left_alone():
    rng = np.random.default_rng(1)
    w = _uneven(rng, (4, 4, 3, 3)).astype(np.float32)
    b = tt.GraphBuilder("shared")
    x = b.input("x", "float32", ("batch", 4, 6, 6))
    shared = b.initializer("w", w)
    h = b.node("Conv", [x, shared], name="a", pads=[1, 1, 1, 1])
    h = b.node("Conv", [h, shared], name="b", pads=[1, 1, 1, 1])  # one weight read by both
    h = _conv(b, h, "c", w, None)
    b.output(h)  # c's output is read by d and is a graph output: scaling it would change that output
    h = _conv(b, h, "d", w, None)
    lo, hi = b.initializer("lo", np.float32(0)), b.initializer("hi", np.float32(6))
    b.output(_conv(b, b.node("Clip", [h, lo, hi], name="relu6"), "e", w, None))
    eq, sets, notes = cross_layer_equalization(tt.quantize.prepare(b.build()))
    assert sets == []
    for name in ("w", "c.w", "d.w", "e.w"):
        assert eq.initializer(name).tobytes() == w.tobytes()
    # Relu6 is not positively homogeneous: d -> e is left as it was, and said so.
    assert any("'d' -> 'e'" in n and "Clip 'relu6'" in n for n in notes)


def _mobilenet_digits() -> tuple[tt.Model, np.ndarray]:
    """A depthwise-separable network on scikit-learn's 8x8 digits whose depthwise filters have
    per-channel ranges far apart, as BatchNormalization folding leaves them in trained networks:
    balanced random weights, then channel i of each depthwise conv scaled by k_i and the next
    pointwise conv's input channel i by 1 / k_i (the same function)."""
    from sklearn.datasets import load_digits

    rng = np.random.default_rng(7)
    x = (load_digits().images[:, None] / 16.0).astype(np.float32)
    b = tt.GraphBuilder("dwnet")
    h = b.input("x", "float32", ("batch", 1, 8, 8))
    cin = 1
    for i, c in enumerate((16, 24)):
        w1 = rng.standard_normal((c, cin, 3, 3)) / np.sqrt(9 * cin)
        h = b.node("Relu", [_conv(b, h, f"stem{i}", w1, rng.standard_normal(c) * 0.1)])
        k = np.exp(rng.uniform(-3, 3, c))
        wd = rng.standard_normal((c, 1, 3, 3)) / 3 * k[:, None, None, None]
        h = b.node("Relu", [_conv(b, h, f"dw{i}", wd, rng.standard_normal(c) * 0.1 * k, group=c)])
        wp = rng.standard_normal((c, c, 1, 1)) / np.sqrt(c) / k[None, :, None, None]
        h = b.node("Conv", [h, b.initializer(f"pw{i}.w", wp.astype(np.float32))], name=f"pw{i}")
        cin = c
    h = b.node("Flatten", [b.node("GlobalAveragePool", [h])])
    fc = b.initializer("fc", (rng.standard_normal((10, cin)) / np.sqrt(cin)).astype(np.float32))
    b.output(b.node("Gemm", [h, fc], transB=1, outputs=["logits"]))
    return b.build(), x


def _sqnr_db(ref: np.ndarray, got: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / np.sum((ref - got).astype(np.float64) ** 2)))


def test_equalization_raises_the_sqnr_of_a_per_tensor_int8_depthwise_network():
    model, x = _mobilenet_digits()
    calib, test = x[:256], x[1000:1256]
    want = _run(model, test)
    sqnr = {}
    for algorithms in ((), ("cross_layer_equalization",)):
        res = tt.quantize.static(model, calib, per_channel=False, algorithms=algorithms, eval_samples=0)
        sqnr[algorithms] = _sqnr_db(want, _run(res.model, test))
    plain, cle = sqnr[()], sqnr[("cross_layer_equalization",)]
    assert cle >= plain + 10.0, (plain, cle)


def test_equalized_quantization_is_the_same_whatever_the_batching():
    model, x = _mobilenet_digits()
    a = tt.quantize.static(model, x[:96], batch_size=96, per_channel=False, algorithms=["cross_layer_equalization"],
                           eval_samples=0)
    b = tt.quantize.static(model, (x[i:i + 7] for i in range(0, 96, 7)), per_channel=False,
                           algorithms="cross_layer_equalization", eval_samples=0)
    assert a.model.to_bytes() == b.model.to_bytes()
    assert any(n.startswith("cross-layer equalization: 3 chains") for n in a.summary.notes)


@pytest.mark.parametrize("algorithms", [["smoothquant_typo"], ["cross_layer_equalization", 3]])
def test_an_unknown_algorithm_is_an_argument_error_naming_it(algorithms):
    model, x = _mobilenet_digits()
    with pytest.raises(tt.ArgumentError, match=r"unknown quantization algorithm .*known: \['cross_layer_equalization', "):
        tt.quantize.static(model, x[:8], algorithms=algorithms, eval_samples=0)
