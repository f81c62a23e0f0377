"""tt.quantize.static(..., ranges=...): external activation ranges replace calibrated ones,
written as QuantizeLinear defines them; calibration files round-trip; bad ranges are typed errors."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import tether as tt
from _builder_models import residual_cnn
from tether.cli import main


@pytest.fixture(scope="module")
def cnn() -> tt.Model:
    return tt.quantize.prepare(residual_cnn(12))


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    rng = np.random.default_rng(11)
    return (rng.standard_normal((24, 3, 12, 12)) * rng.uniform(0.5, 2.0, (24, 1, 1, 1))).astype(np.float32)


def _inits(model: tt.Model) -> dict[str, np.ndarray]:
    return {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load_from_string(model.to_bytes()).graph.initializer}


def _expected_qparams(lo: float, hi: float, symmetric: bool) -> tuple[np.float32, int, int, int]:
    """Scale and zero point of an int8 grid for [lo, hi], from the range widened to hold zero
    (QuantizeLinear must represent 0 exactly): symmetric grids [-127, 127] with zero point 0,
    asymmetric [-128, 127] with the zero point rounded half to even."""
    rmin, rmax = min(np.float32(lo), 0.0), max(np.float32(hi), 0.0)
    if symmetric:
        a = max(abs(rmin), abs(rmax))
        rmin, rmax, qmin, qmax = -a, a, -127, 127
    else:
        qmin, qmax = -128, 127
    scale = (float(rmax) - float(rmin)) / (qmax - qmin)
    zp = 0 if symmetric else int(np.clip(np.round(qmin - float(rmin) / scale), qmin, qmax))
    return np.float32(scale), zp, qmin, qmax


def _quantize_linear(x: float, scale: np.float32, zp: int, qmin: int, qmax: int) -> int:
    """ONNX QuantizeLinear: saturate(round_half_even(x / scale) + zero_point)."""
    return int(np.clip(np.round(np.float32(x) / scale) + zp, qmin, qmax))


@pytest.mark.parametrize("profile,symmetric", [("onnxruntime", False), ("tensorrt", True)])
def test_given_ranges_set_the_written_scales_and_zero_points_by_quantizelinears_definition(cnn, data, profile,
                                                                                            symmetric):
    given = {"relu1_output_0": (0.0, 3.25), "conv2_output_0": (-1.5, 4.75)}
    res = tt.quantize.static(cnn, data, profile=profile, method="minmax", ranges=given, eval_samples=0)
    inits = _inits(res.model)
    for name, (lo, hi) in given.items():
        scale, zp, qmin, qmax = _expected_qparams(lo, hi, symmetric)
        assert inits[f"{name}_scale"].tobytes() == scale.tobytes(), name
        assert int(inits[f"{name}_zero_point"]) == zp, name
        assert res.ranges[name] == (lo, hi, "given")
        # The given bounds land on the grid's ends (the widened range when it holds zero).
        assert _quantize_linear(max(abs(lo), abs(hi)) if symmetric else hi, scale, zp, qmin, qmax) == qmax
    # Calibration still ran for the rest: x's minmax range is its exact extremes.
    assert res.ranges["x"][:2] == (float(data.min()), float(data.max()))


def test_a_tensorrt_cache_read_back_gives_a_model_with_byte_identical_scales(cnn, data, tmp_path):
    first = tt.quantize.static(cnn, data, profile="tensorrt", method="entropy", eval_samples=0)
    first.write_tensorrt_cache(tmp_path / "m.cache")
    cache = tt.quantize.read_tensorrt_cache(tmp_path / "m.cache")
    # Every planned tensor is given: no calibration batches are needed.
    again = tt.quantize.static(cnn, None, profile="tensorrt", ranges=cache, eval_samples=0)
    a, b = _inits(first.model), _inits(again.model)
    scales = [k for k in a if k.endswith("_scale")]
    assert len(scales) >= 5 and a.keys() == b.keys()
    assert all(a[k].tobytes() == b[k].tobytes() for k in a)
    # The cache's own scales, read independently from its hex text, are the model's.
    lines = (tmp_path / "m.cache").read_text().splitlines()[1:]
    for line in lines:
        name, hexed = line.split(": ")
        assert np.frombuffer(bytes.fromhex(hexed)[::-1], np.float32)[0] == b[f"{name}_scale"]
    assert again.summary.method == "given" and again.summary.batches == 0


def test_a_range_given_for_one_tensor_of_a_group_sets_the_whole_group(cnn, data):
    # With the onnxruntime profile, Flatten's output shares GlobalAveragePool's parameters.
    res = tt.quantize.static(cnn, data, ranges={"flat_output_0": (0.0, 2.0)}, eval_samples=0)
    inits = _inits(res.model)
    scale, zp, _, _ = _expected_qparams(0.0, 2.0, symmetric=False)
    for name in ("gap_output_0", "flat_output_0"):
        assert inits[f"{name}_scale"] == scale and int(inits[f"{name}_zero_point"]) == zp


def test_names_the_plan_does_not_quantize_are_noted_not_used(cnn, data):
    # The tensorrt profile quantizes Conv inputs, not Conv outputs before the Relu.
    res = tt.quantize.static(cnn, data, profile="tensorrt", ranges={"conv1_output_0": (-1.0, 1.0)}, eval_samples=0)
    assert any("conv1_output_0" in n and "not used" in n for n in res.summary.notes)
    assert "conv1_output_0_scale" not in _inits(res.model)


@pytest.mark.parametrize("ranges,words", [
    ({"nope": (0.0, 1.0), "also_missing": (0.0, 1.0)}, ["'also_missing' (no such value)", "'nope'"]),
    ({"w1": (0.0, 1.0)}, ["'w1' (a weight"]),
    ({"x": (2.0, 1.0)}, ["ranges['x']", "lo is greater than hi"]),
    ({"x": (float("nan"), 1.0)}, ["ranges['x']", "lo nan", "finite"]),
    ({"x": (0.0, float("inf"))}, ["ranges['x']", "hi inf"]),
    ({"x": (0.0, 1e39)}, ["ranges['x']", "float32"]),
    ({"x": (1.0,)}, ["ranges['x']", "expected (lo, hi)"]),
    ({"x": (0.0, 1.0, "m", 4)}, ["ranges['x']", "expected (lo, hi)"]),
    ({"x": 1.0}, ["ranges['x']", "expected (lo, hi)"]),
    ({"x": ("0", 1.0)}, ["ranges['x']", "'0' is not a number"]),
    ({"x": (True, 1.0)}, ["ranges['x']", "not a number"]),
    ({"x": (0.0, 1.0, 3)}, ["ranges['x']", "not a method name"]),
    ([("x", (0.0, 1.0))], ["must map tensor names"]),
])
def test_bad_ranges_are_argument_errors_naming_the_tensor(cnn, data, ranges, words):
    with pytest.raises(tt.ArgumentError) as e:
        tt.quantize.static(cnn, data, ranges=ranges, eval_samples=0)
    for w in words:
        assert w in str(e.value)


def test_no_batches_needs_a_range_for_every_planned_tensor(cnn):
    with pytest.raises(tt.ArgumentError, match=r"does not cover 6 of the 7 tensors.*relu1_output_0"):
        tt.quantize.static(cnn, None, ranges={"x": (-1.0, 1.0)}, eval_samples=0)


def test_cli_takes_a_tensorrt_cache_a_json_file_and_an_ncnn_table(cnn, data, tmp_path, capsys):
    model, npz = tmp_path / "m.onnx", tmp_path / "d.npz"
    cnn.save(model)
    np.savez(npz, x=data)
    first = tt.quantize.static(cnn, data, profile="tensorrt", method="entropy", eval_samples=0)
    first.write_tensorrt_cache(tmp_path / "m.cache")
    first.write_ncnn_table(tmp_path / "m.table")
    (tmp_path / "r.json").write_text(json.dumps({"relu1_output_0": [0.0, 3.25]}))
    base = ["quantize", str(model), "--data", str(npz), "--profile", "tensorrt", "--eval-samples", "0"]
    assert main([*base, "-o", str(tmp_path / "a.onnx"), "--ranges", str(tmp_path / "m.cache")]) == 0
    assert _inits(tt.load(tmp_path / "a.onnx"))["x_scale"] == _inits(first.model)["x_scale"]
    assert main([*base, "-o", str(tmp_path / "b.onnx"), "--ranges", str(tmp_path / "r.json")]) == 0
    assert _inits(tt.load(tmp_path / "b.onnx"))["relu1_output_0_scale"] == _expected_qparams(0.0, 3.25, True)[0]
    # ncnn tables give each layer's input as 127 / scale: conv1's input x, conv2's relu1_output_0.
    assert main([*base, "-o", str(tmp_path / "c.onnx"), "--ranges", str(tmp_path / "m.table")]) == 0
    _, inputs = tt.quantize.read_ncnn_table(tmp_path / "m.table")
    c = _inits(tt.load(tmp_path / "c.onnx"))
    assert c["x_scale"] == _expected_qparams(-127 / inputs["conv1"], 127 / inputs["conv1"], True)[0]
    assert c["relu1_output_0_scale"] == _expected_qparams(0.0, 127 / inputs["conv2"], True)[0]


@pytest.mark.parametrize("text,words", [
    ('{"x": [2, 1]}', ["lo is greater than hi"]),
    ("[1, 2]", ["expected a JSON object"]),
    ("{", ["is not JSON"]),
    ('{"ghost": [0, 1]}', ["'ghost' (no such value)"]),
])
def test_cli_refuses_bad_range_files_with_exit_2(cnn, data, tmp_path, capsys, text, words):
    model, npz = tmp_path / "m.onnx", tmp_path / "d.npz"
    cnn.save(model)
    np.savez(npz, x=data)
    (tmp_path / "r.json").write_text(text)
    args = ["quantize", str(model), "--data", str(npz), "-o", str(tmp_path / "o.onnx"), "--eval-samples", "0",
            "--ranges", str(tmp_path / "r.json")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert not (tmp_path / "o.onnx").exists()


def test_cli_refuses_an_ncnn_table_naming_layers_the_model_lacks_and_an_unknown_format(cnn, data, tmp_path, capsys):
    model, npz = tmp_path / "m.onnx", tmp_path / "d.npz"
    cnn.save(model)
    np.savez(npz, x=data)
    (tmp_path / "m.table").write_text("ghost 12.5\n")
    args = ["quantize", str(model), "--data", str(npz), "-o", str(tmp_path / "o.onnx"), "--ranges",
            str(tmp_path / "m.table")]
    assert main(args) == 2
    assert "'ghost'" in capsys.readouterr().err
    (tmp_path / "m.table").write_bytes(b"\x00\xff not a calibration file\n")
    assert main(args) == 2
    assert "not a TensorRT cache" in capsys.readouterr().err
    assert not (tmp_path / "o.onnx").exists()
