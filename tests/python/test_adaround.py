"""tt.quantize.static(..., algorithms=["adaround"]): the learned rounding against a numpy
version of AdaRound's objective (Nagel et al. 2020) on single layers, a trained classifier's
held-out SQNR, byte-identical results whatever the batching, the time budget and typed errors."""

from __future__ import annotations

import functools
import time

import numpy as np
import onnxruntime as ort
import pytest
import tether as tt
from tether.quantize._adaround import AdaRounder
from tether.quantize._calibrator import Calibrator

_FAST = tt.quantize.AdaRound(iterations=300, lr=0.03)


def _run(model: tt.Model, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.to_bytes(), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0].astype(np.float64)


def _weight(model: tt.Model, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The integer weight, its scale and zero point as the QDQ model holds them."""
    return (model.initializer(f"{name}_quantized").astype(np.int64), model.initializer(f"{name}_scale"),
            model.initializer(f"{name}_zero_point").astype(np.int64))


def _matmul_model(w: np.ndarray) -> tt.Model:
    b = tt.GraphBuilder("mm")
    x = b.input("x", "float32", ("batch", w.shape[0]))
    b.output(b.node("MatMul", [x, b.initializer("w", w)], name="mm", outputs=["y"]))
    return b.build()


def _np_conv(x: np.ndarray, w: np.ndarray, stride: int, pad: int, groups: int) -> np.ndarray:
    """Plain grouped cross-correlation in float64, no bias."""
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    k, og, cg = w.shape[2], w.shape[0] // groups, w.shape[1]
    out = (xp.shape[2] - k) // stride + 1
    y = np.zeros((x.shape[0], w.shape[0], out, out))
    for g in range(groups):
        wg = w[g * og:(g + 1) * og].astype(np.float64)
        for i in range(out):
            for j in range(out):
                patch = xp[:, g * cg:(g + 1) * cg, i * stride:i * stride + k, j * stride:j * stride + k]
                y[:, g * og:(g + 1) * og, i, j] = np.einsum("nchw,ochw->no", patch, wg)
    return y


def _check_floor_or_ceil(w: np.ndarray, q: np.ndarray, scale: np.ndarray, zp: np.ndarray, lo: int, hi: int) -> None:
    ratio = w.astype(np.float32) / scale.astype(np.float32)
    down = np.clip(np.floor(ratio) + zp, lo, hi)
    up = np.clip(np.ceil(ratio) + zp, lo, hi)
    assert np.all((q == down) | (q == up))


def test_learned_matmul_rounding_reconstructs_better_than_nearest_and_is_floor_or_ceil():
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((48, 12)) * 0.1).astype(np.float32)
    x = (rng.standard_normal((300, 48)) @ (rng.standard_normal((48, 48)) / 7) + 0.3).astype(np.float32)
    err, ints, scales = {}, {}, {}
    for algorithms in ((), ("adaround",)):
        res = tt.quantize.static(_matmul_model(w), x, per_channel=True, eval_samples=0, algorithms=algorithms,
                                 adaround=_FAST)
        q, scale, zp = _weight(res.model, "w")
        # The objective's reconstruction term, in numpy: mean squared error of X W over the calibration data.
        wq = (q - zp[None, :]) * scale.astype(np.float64)[None, :]
        err[algorithms] = float(np.mean((x.astype(np.float64) @ (wq - w)) ** 2))
        _check_floor_or_ceil(w, q, scale[None, :], zp[None, :], -127, 127)
        ints[algorithms], scales[algorithms] = q, scale
    assert err[("adaround",)] <= 0.8 * err[()], err
    # The scale stays; the integers change.
    assert scales[()].tobytes() == scales[("adaround",)].tobytes()
    assert np.count_nonzero(ints[()] != ints[("adaround",)]) > 0


@pytest.mark.parametrize("seed", [0, 1, 4])
def test_learned_rounding_is_among_the_best_of_every_up_down_choice(seed):
    """Ten weights feeding one output: all 1024 up/down choices, scored in numpy."""
    import itertools

    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((10, 1)) * 0.1).astype(np.float32)
    x = (rng.standard_normal((100, 10)) @ (rng.standard_normal((10, 10)) / 3) + 0.3).astype(np.float32)
    res = tt.quantize.static(_matmul_model(w), x, per_channel=False, eval_samples=0, algorithms=["adaround"])
    plain = tt.quantize.static(_matmul_model(w), x, per_channel=False, eval_samples=0)
    q, scale, _ = _weight(res.model, "w")
    s = float(scale)
    floor = np.floor(w / np.float32(s)).astype(np.int64)

    def err(ints: np.ndarray) -> float:
        return float(np.mean((x.astype(np.float64) @ (ints * s - w.astype(np.float64))) ** 2))

    every = [err(np.clip(floor + np.array(c)[:, None], -127, 127)) for c in itertools.product((0, 1), repeat=10)]
    learned, nearest = err(q), err(_weight(plain.model, "w")[0])
    assert learned <= nearest
    assert sum(e < learned for e in every) <= 10, (learned, min(every), nearest)


def test_learned_gemm_rounding_honours_trans_b_and_alpha():
    rng = np.random.default_rng(2)
    w = (rng.standard_normal((10, 40)) * 0.1).astype(np.float32)  # [N, K]: transB
    b = tt.GraphBuilder("gemm")
    h = b.input("x", "float32", ("batch", 40))
    b.output(b.node("Gemm", [h, b.initializer("g.w", w)], name="g", transB=1, alpha=0.5, outputs=["y"]))
    x = (rng.standard_normal((200, 40)) @ (rng.standard_normal((40, 40)) / 6) - 0.2).astype(np.float32)
    err = {}
    for algorithms in ((), ("adaround",)):
        res = tt.quantize.static(b.build(), x, per_channel=True, eval_samples=0, algorithms=algorithms,
                                 adaround=_FAST)
        q, scale, zp = _weight(res.model, "g.w")  # per output channel: axis 0 of [N, K]
        _check_floor_or_ceil(w, q, scale[:, None], zp[:, None], -127, 127)
        wq = (q - zp[:, None]) * scale.astype(np.float64)[:, None]
        err[algorithms] = float(np.mean((0.5 * x.astype(np.float64) @ (wq - w).T) ** 2))
    assert err[("adaround",)] <= 0.8 * err[()], err


def test_learned_grouped_conv_rounding_reconstructs_better_than_nearest():
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((6, 2, 3, 3)) * 0.2).astype(np.float32)
    b = tt.GraphBuilder("conv")
    h = b.input("x", "float32", ("batch", 4, 7, 7))
    b.output(b.node("Conv", [h, b.initializer("c.w", w)], name="c", pads=[1, 1, 1, 1], strides=[2, 2], group=2,
                    outputs=["y"]))
    model = b.build()
    x = (rng.standard_normal((40, 4, 7, 7)) + 0.5).astype(np.float32)
    want = _np_conv(x, w, 2, 1, 2)
    err = {}
    for algorithms in ((), ("adaround",)):
        res = tt.quantize.static(model, x, per_channel=False, eval_samples=0, algorithms=algorithms, adaround=_FAST)
        q, scale, zp = _weight(res.model, "c.w")
        _check_floor_or_ceil(w, q, scale, zp, -127, 127)
        err[algorithms] = float(np.mean((_np_conv(x, (q - zp) * scale.astype(np.float64), 2, 1, 2) - want) ** 2))
    assert err[("adaround",)] <= 0.9 * err[()], err


@functools.lru_cache(maxsize=1)
def _digits_mlp() -> tuple[tt.Model, np.ndarray, np.ndarray]:
    """A 64 -> 48 -> 10 MLP trained on scikit-learn's digits (the first 1000), as Gemm nodes."""
    from sklearn.datasets import load_digits
    from sklearn.neural_network import MLPClassifier
    from threadpoolctl import threadpool_limits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    with threadpool_limits(1):  # a few hundred ms on one core; far longer with BLAS threads on busy cores
        clf = MLPClassifier((48,), solver="lbfgs", max_iter=200, random_state=0).fit(x[:1000], d.target[:1000])
    b = tt.GraphBuilder("mlp")
    h = b.input("x", "float32", ("batch", 64))
    for i, (w, bias) in enumerate(zip(clf.coefs_, clf.intercepts_, strict=True)):
        h = b.node("Gemm", [h, b.initializer(f"fc{i}.w", w.astype(np.float32)),
                            b.initializer(f"fc{i}.b", bias.astype(np.float32))], name=f"fc{i}")
        if i == 0:
            h = b.node("Relu", [h])
    b.output(h)
    return b.build(), x, d.target


def test_adaround_raises_the_held_out_sqnr_of_a_trained_classifier():
    model, x, y = _digits_mlp()
    calib, test = x[:256], x[1000:]
    want = _run(model, test)
    out = {}
    for algorithms in ((), ("adaround",)):
        res = tt.quantize.static(model, calib, per_channel=False, eval_samples=0, algorithms=algorithms)
        got = _run(res.model, test)
        sqnr = 10 * np.log10(np.sum(want ** 2) / np.sum((got - want) ** 2))
        out[algorithms] = (sqnr, float(np.mean(got.argmax(1) == want.argmax(1))))
    (plain_sqnr, plain_agree), (ada_sqnr, ada_agree) = out[()], out[("adaround",)]
    assert ada_sqnr >= plain_sqnr + 0.5, out
    # Top-1 agreement with the float model: at 8 bits a few held-out digits change either way.
    assert ada_agree >= plain_agree, out


def test_adaround_gives_the_same_bytes_whatever_the_batching():
    model, x, _ = _digits_mlp()
    calib = x[:96]
    got = set()
    for batches in (calib, [calib[i:i + 7] for i in range(0, 96, 7)], (calib[i:i + 40] for i in range(0, 96, 40))):
        res = tt.quantize.static(model, batches, per_channel=True, eval_samples=0, algorithms=[_FAST])
        got.add(res.model.to_bytes())
    assert len(got) == 1


def test_adaround_stops_at_its_time_budget_and_says_so():
    model, x, _ = _digits_mlp()
    cal = Calibrator(model)
    rounder = AdaRounder(cal.model, cal.plan, cal.options, tt.quantize.AdaRound(iterations=10**7, time_budget_s=0.3))
    rounder.observe({"x": x[:64]})
    qdq = tt.quantize.static(model, x[:64], eval_samples=0).model
    start = time.monotonic()
    rounding, notes = rounder.learn(qdq)
    assert time.monotonic() - start < 5 * 0.3 + 1.0  # one check every 25 iterations past the budget
    assert any("time budget of 0.3 s ran out" in n and "'fc0'" in n and "round-to-nearest kept for ['fc1']" in n
               for n in notes), notes
    # The layer cut short is still floor or ceil; the one never reached keeps nearest rounding.
    assert "fc1.w_quantized" not in rounding
    q = rounding["fc0.w_quantized"].astype(np.int64)
    scale = qdq.initializer("fc0.w_scale")
    _check_floor_or_ceil(model.initializer("fc0.w"), q, scale[None, :], np.zeros((1, 1), np.int64), -127, 127)


def test_adaround_composes_with_bias_correction_and_a_budget():
    model, x, y = _digits_mlp()
    res = tt.quantize.static(model, x[:128], per_channel=False, algorithms=["adaround", "bias_correction"],
                             adaround=_FAST, eval_data=x[1000:1200], labels=y[1000:1200], max_accuracy_drop=0.02)
    assert res.summary.budget_met
    assert any(n.startswith("adaround: 2 weights rounded") for n in res.summary.notes)
    assert any(n.startswith("bias correction: 2 biases corrected") for n in res.summary.notes)


@pytest.mark.parametrize("kwargs, message", [
    ({"iterations": 0}, "iterations must be an int >= 1"),
    ({"lr": -1.0}, "lr must be a finite number >= 0"),
    ({"beta": (20.0,)}, "beta must be (start, end)"),
    ({"time_budget_s": 0}, "time_budget_s must be a number > 0"),
])
def test_bad_adaround_options_are_argument_errors(kwargs, message):
    with pytest.raises(tt.ArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tt.quantize.AdaRound(**kwargs)


def test_adaround_without_batches_or_with_a_misspelled_name_is_an_argument_error():
    model = _matmul_model(np.ones((4, 2), np.float32))
    with pytest.raises(tt.ArgumentError, match="adaround need calibration batches"):
        tt.quantize.static(model, None, ranges={"x": (0, 1), "y": (0, 1)}, algorithms=["adaround"])
    with pytest.raises(tt.ArgumentError, match="unknown quantization algorithm 'adaroud'.*'adaround'"):
        tt.quantize.static(model, np.ones((4, 4), np.float32), algorithms=["adaroud"])
    with pytest.raises(tt.ArgumentError, match="adaround= takes tt.quantize.AdaRound"):
        tt.quantize.static(model, np.ones((4, 4), np.float32), algorithms=["adaround"], adaround={"iterations": 5})


def test_layers_reading_too_many_inputs_keep_nearest_rounding_with_a_note(monkeypatch):
    import tether.quantize._adaround as adaround

    monkeypatch.setattr(adaround, "MAX_INPUTS", 50)  # fc0 reads 64 inputs, fc1 48
    model, x, _ = _digits_mlp()
    res = tt.quantize.static(model, x[:64], eval_samples=0, algorithms=[_FAST])
    assert any(n.startswith("adaround: 'fc0' (Gemm) keeps round-to-nearest: each output reads 64 inputs, more than 50")
               for n in res.summary.notes), res.summary.notes
    plain = tt.quantize.static(model, x[:64], eval_samples=0)
    assert res.model.initializer("fc0.w_quantized").tobytes() == plain.model.initializer("fc0.w_quantized").tobytes()
    assert res.model.initializer("fc1.w_quantized").tobytes() != plain.model.initializer("fc1.w_quantized").tobytes()


def test_the_command_line_takes_adaround(tmp_path):
    import subprocess
    import sys

    model, x, _ = _digits_mlp()
    model.save(tmp_path / "mlp.onnx")
    np.savez(tmp_path / "calib.npz", x=x[:64])
    out = tmp_path / "mlp.int8.onnx"
    r = subprocess.run([sys.executable, "-m", "tether.cli", "quantize", str(tmp_path / "mlp.onnx"), "--data",
                        str(tmp_path / "calib.npz"), "-o", str(out), "--algorithm", "adaround", "--eval-samples", "0"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    want = tt.quantize.static(model, x[:64], eval_samples=0, algorithms=["adaround"]).model
    assert tt.load(str(out)).initializer("fc0.w_quantized").tobytes() == want.initializer("fc0.w_quantized").tobytes()
