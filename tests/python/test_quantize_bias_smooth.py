"""tt.quantize.static(..., algorithms=["bias_correction" | "smooth_quant"]): each against a numpy
version of its definition (Nagel et al. 2019; Xiao et al. 2022), the smoothed float model in
onnxruntime, the INT8 error each saves (measured here), determinism and typed errors."""

from __future__ import annotations

import numpy as np
import pytest
import tether as tt
from test_quantize_algorithms import _run, _sqnr_db
from tether import _core
from tether.quantize._bias_correction import BiasCorrector
from tether.quantize._calibrator import Calibrator

# ---------------------------------------------------------------- bias correction

def _conv_gemm() -> tuple[tt.Model, dict[str, np.ndarray]]:
    """x -> Conv (stride 2, pads 1) -> Relu -> Flatten -> Gemm (transB): per-tensor weight
    scales are set by one large weight, so the others round coarsely."""
    rng = np.random.default_rng(3)
    p = {"c.w": rng.standard_normal((6, 3, 3, 3)) * 0.3, "c.b": rng.standard_normal(6) * 0.1,
         "g.w": rng.standard_normal((5, 6 * 4 * 4)) * 0.1, "g.b": rng.standard_normal(5) * 0.1}
    p["c.w"][0, 0, 0, 0] = 6.0
    p["g.w"][0, 0] = 4.0
    p = {k: v.astype(np.float32) for k, v in p.items()}
    b = tt.GraphBuilder("cg")
    h = b.input("x", "float32", ("batch", 3, 8, 8))
    h = b.node("Conv", [h, b.initializer("c.w", p["c.w"]), b.initializer("c.b", p["c.b"])], name="c",
               pads=[1, 1, 1, 1], strides=[2, 2])
    h = b.node("Flatten", [b.node("Relu", [h])])
    b.output(b.node("Gemm", [h, b.initializer("g.w", p["g.w"]), b.initializer("g.b", p["g.b"])], name="g",
                    transB=1, outputs=["y"]))
    return b.build(), p


def _np_conv(x: np.ndarray, w: np.ndarray, stride: int = 2, pad: int = 1) -> np.ndarray:
    """Plain cross-correlation, float64, no bias."""
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    k = w.shape[2]
    out = (xp.shape[2] - k) // stride + 1
    y = np.zeros((x.shape[0], w.shape[0], out, out))
    for i in range(out):
        for j in range(out):
            patch = xp[:, :, i * stride:i * stride + k, j * stride:j * stride + k]
            y[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w.astype(np.float64))
    return y


def _dequantized(model: tt.Model, name: str) -> np.ndarray:
    """DequantizeLinear's float32 result, as the INT8 model computes its weights."""
    q = model.initializer(f"{name}_quantized").astype(np.int64)
    zp = model.initializer(f"{name}_zero_point").astype(np.int64) if f"{name}_zero_point" in \
        model.initializer_names else 0
    return ((q - zp).astype(np.float32) * model.initializer(f"{name}_scale")).astype(np.float64)


def _np_corrected(p: dict[str, np.ndarray], wq: dict[str, np.ndarray], x: np.ndarray) -> dict[str, np.ndarray]:
    """The definition: b - E[W_q x] + E[W x], the mean over samples and positions of each
    layer's float input."""
    shift_c = _np_conv(x, wq["c.w"] - p["c.w"]).mean(axis=(0, 2, 3))
    a = np.maximum(_np_conv(x, p["c.w"]) + p["c.b"][None, :, None, None], 0).reshape(x.shape[0], -1)
    shift_g = (a @ (wq["g.w"] - p["g.w"]).T).mean(axis=0)
    return {"c.b": p["c.b"] - shift_c, "g.b": p["g.b"] - shift_g}


def _calib(n: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((n, 3, 8, 8)) + 0.5).astype(np.float32)


def test_corrected_biases_match_a_numpy_version_of_the_definition():
    model, p = _conv_gemm()
    x = _calib(40, 0)
    res = tt.quantize.static(model, x, batch_size=16, per_channel=False, algorithms=["bias_correction"],
                             eval_samples=0)
    wq = {k: _dequantized(res.model, k) for k in ("c.w", "g.w")}
    want = _np_corrected(p, wq, x)
    # The float corrected biases, from the corrector fed the same batches.
    cal = Calibrator(model, options={"per_channel": False})
    bc = BiasCorrector(cal.model, cal.plan)
    for i in range(0, 40, 16):
        bc.observe({"x": x[i:i + 16]})
    corrected, originals, _ = bc.correct(tt.Model(_core.quant_fold_dequantized_constants(res.model._core)))
    assert sorted(originals) == ["c", "g"]
    for name, w in want.items():
        np.testing.assert_allclose(corrected.initializer(name), w, rtol=1e-6, atol=1e-7, err_msg=name)
        assert np.abs(w - p[name]).max() > 1e-3  # the correction is not negligible here
        # The INT8 model's int32 bias is the corrected bias on the bias scale.
        q = res.model.initializer(f"{name}_quantized")
        np.testing.assert_array_equal(q, np.round(w / res.model.initializer(f"{name}_scale").astype(np.float64)))


def test_bias_correction_shrinks_the_mean_output_error_on_held_out_data():
    model, _ = _conv_gemm()
    calib, test = _calib(256, 1), _calib(256, 2)
    want = _run(model, test).astype(np.float64)
    err = {}
    for algorithms in ((), ("bias_correction",)):
        res = tt.quantize.static(model, calib, per_channel=False, algorithms=algorithms, eval_samples=0)
        err[algorithms] = float(np.abs((_run(res.model, test) - want).mean(axis=0)).mean())
    plain, corrected = err[()], err[("bias_correction",)]
    assert corrected < 0.5 * plain, (plain, corrected)


def test_bias_correction_after_equalization_raises_the_sqnr_of_a_per_tensor_depthwise_network():
    from test_quantize_algorithms import _mobilenet_digits

    model, x = _mobilenet_digits()
    calib, test = x[:256], x[1000:1256]
    want = _run(model, test)
    sqnr = {}
    for algorithms in (("cross_layer_equalization",), ("cross_layer_equalization", "bias_correction")):
        res = tt.quantize.static(model, calib, per_channel=False, algorithms=algorithms, eval_samples=0)
        sqnr[algorithms] = _sqnr_db(want, _run(res.model, test))
    cle, both = sqnr.values()
    assert both >= cle + 3.0, (cle, both)


def test_bias_correction_gives_the_same_bytes_whatever_the_batching():
    model, _ = _conv_gemm()
    x = _calib(96, 4)
    a = tt.quantize.static(model, x, batch_size=96, per_channel=False, algorithms=["bias_correction"], eval_samples=0)
    b = tt.quantize.static(model, (x[i:i + 7] for i in range(0, 96, 7)), per_channel=False,
                           algorithms="bias_correction", eval_samples=0)
    assert a.model.to_bytes() == b.model.to_bytes()
    assert "bias correction: 2 biases corrected (c, g)" in a.summary.notes


def test_bias_correction_reaches_a_matmul_through_its_add_and_notes_a_layer_without_bias():
    rng = np.random.default_rng(5)
    w1, b1 = rng.standard_normal((12, 8)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    w2 = rng.standard_normal((8, 4)).astype(np.float32)
    w1[0, 0] = 8.0
    b = tt.GraphBuilder("mm")
    h = b.input("x", "float32", ("batch", 12))
    h = b.node("Add", [b.node("MatMul", [h, b.initializer("w1", w1)], name="mm1"), b.initializer("b1", b1)])
    b.output(b.node("MatMul", [b.node("Relu", [h]), b.initializer("w2", w2)], name="mm2"))
    x = (rng.standard_normal((64, 12)) + 1).astype(np.float32)
    res = tt.quantize.static(b.build(), x, per_channel=False, algorithms=["bias_correction"], eval_samples=0)
    dw = _dequantized(res.model, "w1") - w1
    want = b1 - (x.astype(np.float64) @ dw).mean(axis=0)
    q = res.model.initializer("b1_quantized") if "b1_quantized" in res.model.initializer_names else None
    got = res.model.initializer("b1") if q is None else _dequantized(res.model, "b1")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert any("'mm2' (MatMul) has no float32 bias" in n for n in res.summary.notes)


def test_a_node_the_budget_keeps_in_float_keeps_its_original_bias():
    model, p = _conv_gemm()
    x = _calib(64, 1)
    res = tt.quantize.static(model, x, per_channel=False, algorithms=["bias_correction"], min_sqnr_db=25,
                             eval_samples=64)
    assert list(res.float_nodes) == ["g"]
    assert res.model.initializer("g.b").tobytes() == p["g.b"].tobytes()
    wq = _dequantized(res.model, "c.w")
    want = p["c.b"] - _np_conv(x, wq - p["c.w"]).mean(axis=(0, 2, 3))
    np.testing.assert_array_equal(res.model.initializer("c.b_quantized"),
                                  np.round(want / res.model.initializer("c.b_scale").astype(np.float64)))


@pytest.mark.parametrize("attrs", [{"group": 2, "dilations": [2, 2], "strides": [2, 2], "pads": [2, 1, 1, 2]},
                                   {"group": 2, "strides": [2, 3], "auto_pad": "SAME_UPPER"}])
def test_grouped_strided_padded_conv_is_corrected_as_onnxruntime_computes_the_shift(attrs):
    rng = np.random.default_rng(8)
    w = (rng.standard_normal((6, 2, 3, 3)) * 0.2).astype(np.float32)
    w[1, 0, 1, 1] = 5.0
    b = tt.GraphBuilder("gconv")
    b.output(b.node("Conv", [b.input("x", "float32", ("batch", 4, 9, 9)), b.initializer("w", w)], name="c",
                    outputs=["y"], **attrs))
    model = b.build()
    x = (rng.standard_normal((20, 4, 9, 9)) + 1).astype(np.float32)
    res = tt.quantize.static(model, x, per_channel=False, algorithms=["bias_correction"], eval_samples=0)
    d = tt.GraphBuilder("dconv")  # onnxruntime computes conv(x, W_q - W): its mean is the shift
    d.output(d.node("Conv", [d.input("x", "float32", ("batch", 4, 9, 9)),
                             d.initializer("w", (_dequantized(res.model, "w") - w).astype(np.float32))], **attrs))
    shift = _run(d.build(), x).astype(np.float64).mean(axis=(0, 2, 3))
    assert np.abs(shift).max() > 1e-3
    np.testing.assert_array_equal(res.model.initializer("c.bias_quantized"),
                                  np.round(-shift / res.model.initializer("c.bias_scale").astype(np.float64)))


def test_a_gemm_without_bias_gets_one_holding_the_correction():
    rng = np.random.default_rng(6)
    w = rng.standard_normal((12, 7)).astype(np.float32)  # transB=0: [K, N]
    w[3, 2] = 9.0
    b = tt.GraphBuilder("gemm")
    b.output(b.node("Gemm", [b.input("x", "float32", ("batch", 12)), b.initializer("w", w)], name="g", alpha=0.5))
    model = b.build()
    x = (rng.standard_normal((50, 12)) + 1).astype(np.float32)
    res = tt.quantize.static(model, x, per_channel=False, algorithms=["bias_correction"], eval_samples=0)
    want = -0.5 * (x.astype(np.float64) @ (_dequantized(res.model, "w") - w)).mean(axis=0)
    # With alpha != 1 the quantizer keeps a Gemm's bias in float: the corrected value itself.
    np.testing.assert_allclose(res.model.initializer("g.bias"), want, rtol=1e-6)
    assert "bias correction: a zero bias added to 1 Conv/Gemm nodes without one" in res.summary.notes
    # The float model the report compares against computes the original function.
    np.testing.assert_allclose(_run(res.float_model, x), _run(model, x), rtol=1e-6)


# ---------------------------------------------------------------- SmoothQuant

def _block(outliers: float = 50.0) -> tt.Model:
    """x -> LayerNormalization (a few channels' gain scaled by ``outliers``) -> MatMul -> Relu ->
    MatMul: a transformer MLP with activation outliers. The second MatMul reads the Relu, which
    no LayerNormalization produces, so it is smoothed through an inserted Mul."""
    rng = np.random.default_rng(11)
    k, hidden, n = 32, 48, 16
    gamma = rng.uniform(0.5, 1.5, k)
    gamma[[3, 17, 25]] *= outliers
    b = tt.GraphBuilder("block")
    h = b.input("x", "float32", ("batch", 6, k))
    h = b.node("LayerNormalization", [h, b.initializer("ln.g", gamma.astype(np.float32)),
                                      b.initializer("ln.b", (rng.standard_normal(k) * 0.1).astype(np.float32))],
               name="ln", axis=-1)
    h = b.node("MatMul", [h, b.initializer("w1", (rng.standard_normal((k, hidden)) / np.sqrt(k)).astype(np.float32))],
               name="fc1")
    h = b.node("Relu", [h], name="act")
    b.output(b.node("MatMul", [h, b.initializer("w2", (rng.standard_normal((hidden, n)) / 7).astype(np.float32))],
                    name="fc2", outputs=["y"]))
    return b.build()


def _tokens(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 6, 32)).astype(np.float32)


def _np_layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b


def test_smoothed_weights_match_a_numpy_version_of_the_definition():
    model = _block()
    x = _tokens(64, 0)
    alpha = 0.6
    res = tt.quantize.static(model, x, batch_size=16, algorithms=["smooth_quant"], smooth_quant_alpha=alpha,
                             eval_samples=0)
    w = {k: model.initializer(k).astype(np.float64) for k in ("ln.g", "ln.b", "w1", "w2")}
    h1 = _np_layer_norm(x, w["ln.g"], w["ln.b"])
    s1 = np.abs(h1).reshape(-1, 32).max(0) ** alpha / np.abs(w["w1"]).max(1) ** (1 - alpha)
    h2 = np.maximum(h1 @ w["w1"], 0)
    s2 = np.abs(h2).reshape(-1, 48).max(0) ** alpha / np.abs(w["w2"]).max(1) ** (1 - alpha)
    fm = res.float_model
    expected = {"ln.g": w["ln.g"] / s1, "ln.b": w["ln.b"] / s1, "w1": w["w1"] * s1[:, None], "w2": w["w2"] * s2[:, None]}
    for name, e in expected.items():
        np.testing.assert_allclose(fm.initializer(name), e, rtol=2e-5, err_msg=name)
    mul = [n for n in fm.nodes if n.op_type == "Mul"]
    assert len(mul) == 1 and [n for n in fm.nodes if n.name == "fc2"][0].inputs[0] == mul[0].outputs[0]
    np.testing.assert_allclose(fm.initializer(mul[0].inputs[1]), 1 / s2, rtol=2e-5)
    # The inserted Mul runs in float: its input is not quantized.
    assert mul[0].name not in {p.node for p in (res.plan.nodes if res.plan is not None else [])}


def test_smoothed_float_model_computes_what_the_original_computes_in_onnxruntime():
    model = _block()
    res = tt.quantize.static(model, _tokens(32, 1), algorithms=["smooth_quant"], eval_samples=0)
    test = _tokens(16, 2)
    want, got = _run(model, test), _run(res.float_model, test)
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_smooth_quant_raises_the_sqnr_of_per_tensor_int8_with_outlier_channels():
    model = _block()
    calib, test = _tokens(128, 3), _tokens(128, 4)
    want = _run(model, test)
    sqnr = {}
    for algorithms in ((), ("smooth_quant",)):
        res = tt.quantize.static(model, calib, per_channel=False, algorithms=algorithms, eval_samples=0)
        sqnr[algorithms] = _sqnr_db(want, _run(res.model, test))
    plain, smoothed = sqnr[()], sqnr[("smooth_quant",)]
    assert smoothed >= plain + 3.0, (plain, smoothed)


def test_alpha_search_picks_the_best_alpha_on_the_calibration_batches_and_is_deterministic():
    model = _block()
    calib = _tokens(48, 5)
    grid = [0.3, 0.5, 0.8]
    res = tt.quantize.static(model, calib, per_channel=False, algorithms=["smooth_quant"], smooth_quant_alpha=grid,
                             eval_samples=0)
    note = next(n for n in res.summary.notes if "chosen by output SQNR" in n)
    chosen = float(note.split("alpha ")[1].split(" ")[0])
    want = _run(model, calib)
    scores = {}
    for a in grid:
        fixed = tt.quantize.static(model, calib, per_channel=False, algorithms=["smooth_quant"], smooth_quant_alpha=a,
                                   eval_samples=0)
        scores[a] = _sqnr_db(want, _run(fixed.model, calib))
        if a == chosen:
            assert fixed.model.to_bytes() == res.model.to_bytes()
    # onnxruntime's INT8 kernels round a little differently from tether's: allow a hair.
    assert scores[chosen] >= max(scores.values()) - 0.2, (chosen, scores)
    again = tt.quantize.static(model, [calib[i:i + 5] for i in range(0, 48, 5)], per_channel=False,
                               algorithms=["smooth_quant"], smooth_quant_alpha=grid, eval_samples=0)
    assert again.model.to_bytes() == res.model.to_bytes()


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"batches": None, "algorithms": ["bias_correction"]}, "need calibration batches"),
    ({"batches": "generator", "algorithms": ["smooth_quant"]}, "more than once"),
    ({"algorithms": ["smooth_quant"], "smooth_quant_alpha": 1.5}, r"1\.5 is not a float in \[0, 1\]"),
    ({"algorithms": ["smooth_quant"], "smooth_quant_alpha": "best"}, "'search'"),
    ({"algorithms": ["smooth_quant"], "smooth_quant_alpha": []}, "empty"),
    ({"algorithms": ["bias_corection"]}, r"unknown quantization algorithm 'bias_corection'.*'bias_correction'"),
])
def test_bad_algorithm_arguments_are_argument_errors_naming_the_problem(kwargs, match):
    x = _tokens(8, 6)
    kwargs = dict(kwargs)
    batches = kwargs.pop("batches", x)
    if isinstance(batches, str):
        batches = (x[i:i + 4] for i in range(0, 8, 4))
    with pytest.raises(tt.ArgumentError, match=match):
        tt.quantize.static(_block(), batches, eval_samples=0, **kwargs)


def test_the_cli_takes_both_algorithms_and_writes_what_the_api_writes(tmp_path):
    from tether.cli import main

    model = _block()
    x = _tokens(40, 7)
    model.save(str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "calib.npz", x=x)
    out = tmp_path / "m.int8.onnx"
    rc = main(["quantize", str(tmp_path / "m.onnx"), "--data", str(tmp_path / "calib.npz"), "-o", str(out),
               "--per-tensor", "--eval-samples", "0", "--algorithm", "smooth_quant", "--algorithm", "bias_correction"])
    assert rc == 0
    api = tt.quantize.static(model, x, per_channel=False, algorithms=["smooth_quant", "bias_correction"],
                             eval_samples=0)
    written = tt.load(str(out))  # saving reorders value_info: compare what computes
    assert written.nodes == api.model.nodes
    assert written.initializer_names == api.model.initializer_names
    for name in api.model.initializer_names:
        assert written.initializer(name).tobytes() == api.model.initializer(name).tobytes(), name
    assert "Mul" in [n.op_type for n in api.model.nodes]


def test_readers_of_one_layer_norm_share_one_scale_over_both_weights():
    """LayerNormalization -> two Gemm (transB) projections, as Q and K: one s from the largest
    weight of each input channel over both, folded into the LayerNormalization."""
    rng = np.random.default_rng(12)
    gamma = rng.uniform(0.5, 1.5, 16)
    gamma[[2, 9]] *= 40
    wq, wk = (rng.standard_normal((2, 8, 16)) * 0.3).astype(np.float32)
    b = tt.GraphBuilder("qk")
    h = b.input("x", "float32", ("batch", 16))
    h = b.node("LayerNormalization", [h, b.initializer("ln.g", gamma.astype(np.float32)),
                                      b.initializer("ln.b", np.zeros(16, np.float32))], name="ln", axis=-1)
    b.output(b.node("Gemm", [h, b.initializer("wq", wq)], name="q", transB=1, outputs=["q_out"]))
    b.output(b.node("Gemm", [h, b.initializer("wk", wk)], name="k", transB=1, outputs=["k_out"]))
    model = b.build()
    x = rng.standard_normal((64, 16)).astype(np.float32)
    res = tt.quantize.static(model, x, algorithms="smooth_quant", eval_samples=0)
    h1 = _np_layer_norm(x, gamma, 0.0)
    s = np.sqrt(np.abs(h1).max(0) / np.maximum(np.abs(wq).max(0), np.abs(wk).max(0)))
    fm = res.float_model
    np.testing.assert_allclose(fm.initializer("ln.g"), gamma / s, rtol=2e-5)
    np.testing.assert_allclose(fm.initializer("wq"), wq * s, rtol=2e-5)
    np.testing.assert_allclose(fm.initializer("wk"), wk * s, rtol=2e-5)
    assert "Mul" not in [n.op_type for n in fm.nodes]
    want = _run(model, x)
    assert np.abs(_run(fm, x) - want).max() <= 1e-4 * np.abs(want).max()
