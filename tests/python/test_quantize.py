"""tt.quantize.static: QDQ models onnxruntime checks and runs, onnxruntime's MinMax conventions,
profiles, calibration files, mixed precision, reports."""

from __future__ import annotations

import math
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tether as tt
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.calibrate import create_calibrator
from test_quant_calibrator import _builder_cnn


@pytest.fixture(scope="module")
def cnn() -> tt.Model:
    return tt.quantize.prepare(_builder_cnn())


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    rng = np.random.default_rng(3)
    return (rng.standard_normal((48, 3, 12, 12)) * rng.uniform(0.3, 2.0, (48, 1, 1, 1))).astype(np.float32)


class _Reader(CalibrationDataReader):
    def __init__(self, data: np.ndarray, batch: int) -> None:
        self.batches = iter([{"x": data[i:i + batch]} for i in range(0, len(data), batch)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.batches, None)


def _ort(model: tt.Model | bytes) -> ort.InferenceSession:
    return ort.InferenceSession(model if isinstance(model, bytes) else model.to_bytes(),
                                providers=["CPUExecutionProvider"])


def _initializers(model_bytes: bytes) -> dict[str, np.ndarray]:
    return {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load_from_string(model_bytes).graph.initializer}


def _ops(model: tt.Model) -> list[str]:
    return [n.op_type for n in model.nodes]


def test_qdq_model_passes_the_full_onnx_check_and_runs_in_onnxruntime(cnn, data):
    res = tt.quantize.static(cnn, data, method="minmax", eval_samples=16)
    proto = onnx.load_from_string(res.model.to_bytes())
    onnx.checker.check_model(proto, full_check=True)
    assert _ops(res.model).count("QuantizeLinear") >= 5
    # Weights are stored int8 with a per-channel DequantizeLinear; biases int32.
    inits = _initializers(res.model.to_bytes())
    assert inits["w1_quantized"].dtype == np.int8 and inits["w1_scale"].shape == (8,)
    assert inits["b1_quantized"].dtype == np.int32
    assert "w1" not in inits  # the float weight is gone
    got = _ort(res.model).run(None, {"x": data})[0]
    ref = _ort(cnn).run(None, {"x": data})[0]
    sqnr = 10 * math.log10(np.sum(ref.astype(np.float64) ** 2) / np.sum((got - ref).astype(np.float64) ** 2))
    assert sqnr > 25, sqnr
    # tether runs the same QDQ model and agrees with onnxruntime running it as written.
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    plain = ort.InferenceSession(res.model.to_bytes(), so, providers=["CPUExecutionProvider"]).run(None, {"x": data})[0]
    mine = tt.compile(res.model).run({"x": data})["logits"]
    np.testing.assert_allclose(mine, plain, rtol=1e-4, atol=1e-4)


def test_minmax_ranges_equal_onnxruntimes_calibrator_and_scales_its_formula(tmp_path, cnn, data):
    path = tmp_path / "cnn.onnx"
    cnn.save(path)
    calibrator = create_calibrator(str(path), augmented_model_path=str(tmp_path / "aug.onnx"),
                                   calibrate_method=CalibrationMethod.MinMax)
    calibrator.collect_data(_Reader(data, 8))
    theirs = {k: tuple(float(np.ravel(x)[0]) for x in v.range_value) for k, v in calibrator.compute_data().data.items()}
    cal = tt.quantize.Calibrator(cnn)
    cal.observe_all(data, batch_size=8, progress=False)
    mine = cal.compute("minmax")
    common = sorted(set(mine) & set(theirs))
    assert len(common) == len(mine)  # onnxruntime calibrates every tensor tether quantizes
    for name in common:
        # The graph input is read as is: exactly equal. Intermediates come from two engines'
        # kernels, which round differently in the last bits.
        rtol = 0 if name == "x" else 2e-6
        np.testing.assert_allclose(mine[name][:2], theirs[name], rtol=rtol, atol=1e-6 * (name != "x"), err_msg=name)

    # Given onnxruntime's own ranges, the scales and zero points are onnxruntime's, bit for bit.
    quantize_static(str(path), str(tmp_path / "ort.onnx"), _Reader(data, 8), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=True,
                    calibrate_method=CalibrationMethod.MinMax)
    ort_inits = _initializers((tmp_path / "ort.onnx").read_bytes())
    options = tt.quantize.make_options("onnxruntime")
    qmodel, acts, weights, _ = tt._core.quant_quantize_qdq(
        cnn._core, cal.plan, {k: (*theirs[k], "minmax") for k in mine}, options)
    compared = 0
    for name, (scale, zero_point, _, _) in {**acts, **weights}.items():
        if f"{name}_scale" not in ort_inits or name.startswith("b"):
            continue  # biases: onnxruntime's are derived from its own input scales, compared below
        assert np.asarray(scale, np.float32).tobytes() == ort_inits[f"{name}_scale"].astype(np.float32).ravel().tobytes(), name
        assert list(np.ravel(ort_inits[f"{name}_zero_point"]).astype(np.int64)) == list(zero_point), name
        compared += 1
    assert compared >= 8
    # Bias: int32 values at scale input_scale * weight_scale, as onnxruntime writes them.
    mine_inits = _initializers(tt.Model(qmodel).to_bytes())
    np.testing.assert_array_equal(mine_inits["b1_quantized"], ort_inits["b1_quantized"])


def test_tensorrt_profile_is_symmetric_int8_on_inputs_only(cnn, data):
    res = tt.quantize.static(cnn, data, profile="tensorrt", eval_samples=8)
    assert res.summary.method == "entropy"
    assert all(int(p.zero_point.max(initial=0)) == 0 and int(p.zero_point.min(initial=0)) == 0
               for p in res.scales.values())
    proto = onnx.load_from_string(res.model.to_bytes())
    onnx.checker.check_model(proto, full_check=True)
    quantized_readers = {n.op_type for n in proto.graph.node
                         if any(i.endswith("_dequantized") for i in n.input) and n.op_type != "QuantizeLinear"}
    assert quantized_readers <= {"Conv", "Gemm", "Add", "GlobalAveragePool"}
    # Biases stay float; the network output is not quantized.
    assert not any(i.data_type == onnx.TensorProto.INT32 for i in proto.graph.initializer)
    _ort(res.model).run(None, {"x": data})


def test_ncnn_profile_quantizes_conv_and_gemm_inputs_and_writes_its_table(tmp_path, cnn, data):
    res = tt.quantize.static(cnn, data, profile="ncnn", eval_samples=0)
    assert res.report is None
    assert sorted(p.node for p in res.plan.nodes) == ["conv1", "conv2", "fc"]
    res.write_ncnn_table(tmp_path / "cnn.table")
    weights, inputs = tt._core.quant_read_ncnn_table((tmp_path / "cnn.table").read_text())
    w1 = np.asarray(cnn.initializer("w1"))
    np.testing.assert_allclose(weights["conv1"], 127 / np.abs(w1).reshape(8, -1).max(axis=1), rtol=1e-6)
    lo, hi, _ = res.ranges["x"]
    assert inputs["conv1"] == pytest.approx(127 / max(abs(lo), abs(hi)), rel=1e-6)


def test_tensorrt_cache_round_trips_the_symmetric_scales(tmp_path, cnn, data):
    res = tt.quantize.static(cnn, data, profile="tensorrt", eval_samples=0)
    res.write_tensorrt_cache(tmp_path / "cnn.cache")
    text = (tmp_path / "cnn.cache").read_text()
    assert text.startswith("TRT-") and "EntropyCalibration2" in text.splitlines()[0]
    back = tt._core.quant_read_tensorrt_cache(text)
    for name, (lo, hi, _) in res.ranges.items():
        assert np.float32(back[name]) == np.float32(max(abs(lo), abs(hi)) / 127.0), name


def test_calibration_files_list_only_what_the_returned_model_quantizes(tmp_path, cnn, data):
    """Exact parity with tether's own float outputs: only the all-float model meets it, so every
    node is kept in float; neither file may then ask a runtime for INT8, and with one node in
    float its input stays out of TensorRT's cache."""
    res = tt.quantize.static(cnn, data, profile="tensorrt", tolerance=tt.parity.Tolerance(atol=0.0, rtol=0.0),
                             eval_samples=16)
    assert res.summary.budget_met is True and "QuantizeLinear" not in _ops(res.model)
    assert res.tensorrt_scales() == {}
    res.write_ncnn_table(tmp_path / "float.table")
    assert tt._core.quant_read_ncnn_table((tmp_path / "float.table").read_text()) == ({}, {})
    one = tt.quantize.static(cnn, data, profile="tensorrt", exclude_nodes=["conv1"], eval_samples=0)
    assert "x" not in one.tensorrt_scales() and set(one.tensorrt_scales()) == {t.name for t in one.plan.tensors}


@pytest.mark.parametrize("method", ["minmax", "percentile", "entropy", "mse", "sqnr"])
def test_every_method_gives_a_model_close_to_float(cnn, data, method):
    res = tt.quantize.static(cnn, data, method=method, eval_samples=48)
    assert res.summary.method == method
    assert all(lo <= 0 <= hi or lo < hi for lo, hi, _ in res.ranges.values())
    out = res.report.outputs[0].metrics
    assert out.snr_db > 20, (method, out.snr_db)
    if method == "sqnr":
        assert all(m.startswith("sqnr:") for _, _, m in res.ranges.values())


def test_uint8_activations_and_reduce_range(cnn, data):
    res = tt.quantize.static(cnn, data, activation_type="uint8", reduce_range=True, eval_samples=0)
    acts = [p for n, p in res.scales.items() if n in res.ranges]
    assert acts and all(p.dtype == "uint8" for p in acts)
    assert all(0 <= int(p.zero_point[0]) <= 127 for p in acts)  # 7-bit range
    weights = res.scales["w2"]
    q = np.asarray(tt.load(res.model.to_bytes()).initializer("w2_quantized"))
    assert q.min() >= -64 and q.max() <= 64 and weights.axis == 0


def _fragile_mlp() -> tt.Model:
    """fc1 -> Relu -> fc2 -> fc3. One hidden unit of fc1 is always about 400 while the others
    are about 1, and fc2 barely reads it: quantizing fc2's input per tensor crushes the small
    units into a few levels. fc2 is the fragile layer; fc1 and fc3 are robust."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((16, 32)).astype(np.float32) * 0.3
    b1 = np.zeros(32, np.float32)
    b1[7] = 400.0
    w2 = rng.standard_normal((32, 32)).astype(np.float32) * 0.3
    w2[7] = 1e-4
    w3 = rng.standard_normal((32, 10)).astype(np.float32) * 0.3
    b = tt.GraphBuilder("fragile")
    x = b.input("x", "float32", ("batch", 16))
    for name, value in (("w1", w1), ("b1", b1), ("w2", w2), ("w3", w3)):
        b.initializer(name, value)
    h = b.node("Relu", [b.node("Add", [b.node("MatMul", [x, "w1"], name="fc1"), "b1"], name="fc1_bias")], name="relu")
    h = b.node("MatMul", [h, "w2"], name="fc2")
    b.output(b.node("MatMul", [h, "w3"], name="fc3", outputs=["logits"]))
    return b.build()


def test_mixed_precision_keeps_exactly_the_fragile_layer_in_float():
    model = _fragile_mlp()
    data = np.random.default_rng(1).standard_normal((256, 16)).astype(np.float32)
    plain = tt.quantize.static(model, data, eval_samples=128, runner="onnxruntime", sensitivity_analysis=True)
    assert plain.sensitivity[0].node == "fc2"
    assert plain.report.outputs[0].metrics.snr_db < 30
    res = tt.quantize.static(model, data, min_sqnr_db=30, eval_samples=128, runner="onnxruntime")
    assert res.summary.budget_met is True
    assert list(res.float_nodes) == ["fc2"]
    assert "sensitivity rank 1" in res.float_nodes["fc2"]
    # Checked independently: onnxruntime runs the returned file on fresh data.
    fresh = np.random.default_rng(7).standard_normal((256, 16)).astype(np.float32)
    ref = _ort(tt.quantize.prepare(model)).run(None, {"x": fresh})[0].astype(np.float64)
    got = _ort(res.model).run(None, {"x": fresh})[0].astype(np.float64)
    assert 10 * math.log10(np.sum(ref**2) / np.sum((got - ref) ** 2)) >= 29
    assert "QuantizeLinear" in _ops(res.model)
    html = res.report.to_html()
    assert 'id="quantization"' in html and "fc2" in html and "kept in float" in html


def test_a_budget_no_quantization_can_meet_returns_the_float_model_and_says_so(cnn, data):
    """Bit-exact agreement with tether's float outputs: onnxruntime's convolutions round
    differently, so not even the float model run by onnxruntime meets it."""
    res = tt.quantize.static(cnn, data, tolerance=tt.parity.Tolerance(atol=0.0, rtol=0.0), eval_samples=16,
                             runner="onnxruntime")
    assert res.summary.budget_met is False
    assert "QuantizeLinear" not in _ops(res.model)
    assert res.plan is None and res.scales == {} and res.tensorrt_scales() == {}
    assert all(t.scale is None for t in res.summary.tensors)
    assert any("not met even with every node in float" in n for n in res.summary.notes)
    assert "budget" in res.report.table() and "NOT met" in res.report.table()


def test_max_accuracy_drop_needs_labels(cnn, data):
    with pytest.raises(tt.ArgumentError, match="max_accuracy_drop needs labels"):
        tt.quantize.static(cnn, data, max_accuracy_drop=0.01)
    with pytest.raises(tt.ArgumentError, match="10 labels were given for the 16 evaluation samples"):
        tt.quantize.static(cnn, data, labels=np.zeros(10), eval_samples=16)


def test_report_lists_dead_channels_and_zero_range_tensors(data):
    """conv1's channel 2 has a zero filter and bias, so after Relu it is zero on every sample;
    conv_zero has all-zero weights, so its output is zero everywhere (a zero range)."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    w1[2] = 0
    b = tt.GraphBuilder("dead")
    x = b.input("x", "float32", ("batch", 3, 12, 12))
    b.initializer("w1", w1)
    b.initializer("b1", np.zeros(8, np.float32))
    b.initializer("w2", rng.standard_normal((4, 8, 1, 1)).astype(np.float32))
    b.initializer("wz", np.zeros((4, 8, 1, 1), np.float32))
    h = b.node("Relu", [b.node("Conv", [x, "w1", "b1"], name="conv1", pads=[1, 1, 1, 1], outputs=["c1"])],
               name="relu1", outputs=["h"])
    z = b.node("Conv", [h, "wz"], name="conv_zero", outputs=["z"])
    y = b.node("Conv", [h, "w2"], name="conv2", outputs=["y"])
    b.output(b.node("Add", [y, z], name="add", outputs=["out"]))
    res = tt.quantize.static(b.build(), data, eval_samples=8)
    tensors = {t.name: t for t in res.summary.tensors}
    assert tensors["h"].channels == 8 and tensors["h"].dead_channels == 1
    assert tensors["z"].zero_range and not tensors["y"].zero_range
    problems = "\n".join(res.summary.problems())
    assert "'h': 1 of 8 channels were zero on every sample" in problems
    assert "'z': every calibration value was 0 (zero range)" in problems
    # Scales stay finite and positive everywhere, the all-zero weight and tensor included.
    assert all(np.isfinite(p.scale).all() and (p.scale > 0).all() for p in res.scales.values())
    assert res.scales["z"].scale[0] == 1.0 and res.scales["wz"].scale.tolist() == [1.0] * 4
    assert "channels were zero" in res.report.table()


def test_onnxruntime_report_runs_the_quantized_model_not_the_file_it_was_made_from(tmp_path, cnn, data):
    """A model quantized from a file keeps that file's path; the report's onnxruntime candidate
    must still be the QDQ model, as onnxruntime runs it from its bytes."""
    path = tmp_path / "cnn.onnx"
    cnn.save(path)
    res = tt.quantize.static(path, data, method="minmax", eval_samples=16, runner="onnxruntime")
    ref = tt.compile(res.float_model).run({"x": data[:16]})["logits"].astype(np.float64)
    got = _ort(res.model).run(None, {"x": data[:16]})[0].astype(np.float64)
    assert np.abs(got - ref).max() > 1e-3  # INT8 really differs from float here
    assert res.report.outputs[0].metrics.max_abs_error == pytest.approx(np.abs(got - ref).max(), rel=1e-6)
    # Every model the quantizer returns is new: none claims the source file as its own.
    assert res.model.path == res.float_model.path == ""
    direct = tt.parity.OnnxRuntimeRunner(res.model).run({"x": data[:16]})["logits"]
    np.testing.assert_array_equal(direct, got)


def test_a_bias_whose_scale_would_be_subnormal_stays_float():
    """input_scale * weight_scale below the normal floats cannot be a DequantizeLinear scale."""
    rng = np.random.default_rng(0)
    b = tt.GraphBuilder("tiny")
    x = b.input("x", "float32", ("batch", 4))
    b.initializer("w", (rng.standard_normal((3, 4)) * 1e-15).astype(np.float32))
    b.initializer("bias", np.full(3, 1e-30, np.float32))
    b.output(b.node("Gemm", [x, "w", "bias"], name="fc", transB=1, outputs=["y"]))
    data = (rng.standard_normal((16, 4)) * 1e-20).astype(np.float32)
    res = tt.quantize.static(b.build(), data, eval_samples=0)
    assert "bias" not in res.scales and "bias_quantized" not in tt.load(res.model.to_bytes()).initializer_names
    assert any("bias 'bias' stays float" in n for n in res.summary.notes)
    onnx.checker.check_model(onnx.load_from_string(res.model.to_bytes()), full_check=True)


def _quantized_activations(model: tt.Model) -> set[str]:
    """The activations a QDQ file quantizes, read from the file: the non-constant inputs of its
    QuantizeLinear nodes."""
    proto = onnx.load_from_string(model.to_bytes())
    consts = {i.name for i in proto.graph.initializer}
    return {n.input[0] for n in proto.graph.node if n.op_type == "QuantizeLinear" and n.input[0] not in consts}


def test_a_budget_only_the_float_model_meets_is_reported_as_nothing_quantized(tmp_path, cnn, data):
    res = tt.quantize.static(cnn, data, min_sqnr_db=200, eval_samples=16)
    assert res.summary.budget_met is True and _quantized_activations(res.model) == set() and not res.quantized
    assert "NOTHING QUANTIZED, the float model: the budget SQNR >= 200 dB on every output is met only" in repr(res)
    assert f"0 of {len(res.summary.tensors)} activations quantized" in repr(res)
    table = res.report.table()
    assert "NOTHING QUANTIZED: the returned model is the float model" in table
    assert "met only with every node in float" in table
    with pytest.warns(UserWarning, match="is the float model: nothing is quantized"):
        res.save(tmp_path / "float.onnx")
    assert "QuantizeLinear" not in {n.op_type for n in onnx.load(str(tmp_path / "float.onnx")).graph.node}


def test_repr_counts_the_activations_the_file_quantizes(tmp_path, cnn, data):
    res = tt.quantize.static(cnn, data, method="minmax", eval_samples=0)
    quantized = _quantized_activations(res.model)
    assert quantized and res.quantized
    assert f"{len(quantized)} of {len(res.summary.tensors)} activations quantized" in repr(res)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res.save(tmp_path / "int8.onnx")


def test_an_unbisected_fused_kernel_is_noted_with_advice_that_names_the_node(cnn, data):
    """Evaluation data three times wider than calibration clips: the first divergent value is
    the fused Conv+Relu kernel's, which reads 'x_dequantized', a value the float model lacks."""
    res = tt.quantize.static(cnn, data, method="minmax", eval_data=data * 3, sensitivity_analysis=True)
    first = res.report.first_divergent
    assert first is not None and len(first.fused_from) > 1
    notes = [n for n in res.report.notes if "bisected" in n]
    assert notes and all("optimize=False" not in n for n in notes)
    assert "'x_dequantized' is a value the quantized model adds" in notes[0] and "most sensitive layers" in notes[0]
    # The advice holds: the sensitivity table names a node of that kernel with the error it adds alone.
    by_node = {s.node: s.sqnr_db for s in res.sensitivity or []}
    assert any(math.isfinite(by_node.get(n, math.inf)) for n in first.fused_from)
    assert "most sensitive layers" in res.report.table()
