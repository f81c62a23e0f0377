"""Calibrator: the same samples give bit-identical statistics and scales whatever the batching,
order or process split; NaN samples are named; bad calibration input gets typed errors."""

from __future__ import annotations

import hashlib
import multiprocessing

import numpy as np
import pytest
import tether as tt
from _builder_models import residual_cnn


def _builder_cnn() -> tt.Model:
    return residual_cnn(12)


@pytest.fixture(scope="module")
def cnn() -> tt.Model:
    return _builder_cnn()


@pytest.fixture(scope="module")
def samples() -> np.ndarray:
    rng = np.random.default_rng(1)
    return (rng.standard_normal((40, 3, 12, 12)) * rng.uniform(0.2, 3.0, (40, 1, 1, 1))).astype(np.float32)


def _calibrate(model: tt.Model, batches: list[np.ndarray], bins: int = 512) -> tt.quantize.Calibrator:
    cal = tt.quantize.Calibrator(model, bins=bins, threads=1)
    for b in batches:
        cal.observe(b)
    return cal


def _snapshot(cal: tt.quantize.Calibrator) -> dict[str, tuple]:
    return {n: (s.count, s.zeros, s.min, s.max, s.exponent, tuple(s.positive), tuple(s.negative),
                tuple(s.channel_absmax)) for n, s in cal.stats().items()}


def test_statistics_and_ranges_are_bit_identical_whatever_the_batching_and_order(cnn, samples):
    one = _calibrate(cnn, [samples])
    singles = _calibrate(cnn, [samples[i:i + 1] for i in range(len(samples))])
    order = np.random.default_rng(5).permutation(len(samples))
    shuffled = _calibrate(cnn, [samples[i:i + 1] for i in order])
    sevens = _calibrate(cnn, [samples[order[i:i + 7]] for i in range(0, len(samples), 7)])
    reference = _snapshot(one)
    assert len(reference) >= 6
    for other in (singles, shuffled, sevens):
        assert _snapshot(other) == reference
        for method in tt.quantize.methods():
            assert other.compute(method) == one.compute(method), method


def test_scales_in_the_written_models_are_bit_identical_across_batchings(cnn, samples):
    order = np.random.default_rng(9).permutation(len(samples))
    a = tt.quantize.static(cnn, samples, batch_size=40, method="entropy", eval_samples=0, threads=1)
    b = tt.quantize.static(cnn, (samples[[i]] for i in order), method="entropy", eval_samples=0, threads=2)
    assert a.scales.keys() == b.scales.keys()
    for name in a.scales:
        assert a.scales[name].scale.tobytes() == b.scales[name].scale.tobytes(), name
        assert np.array_equal(a.scales[name].zero_point, b.scales[name].zero_point), name
    assert a.model.to_bytes() == b.model.to_bytes()


def _shard_state(args: tuple[bytes, np.ndarray]) -> bytes:
    model_bytes, shard = args
    cal = tt.quantize.Calibrator(tt.load(model_bytes), bins=512, threads=1)
    cal.observe_all(shard, batch_size=3, progress=False)
    return cal.state()


def test_states_from_separate_processes_merge_into_the_one_pass_result(cnn, samples):
    order = np.random.default_rng(2).permutation(len(samples))
    shards = [samples[order[:5]], samples[order[5:22]], samples[order[22:]]]  # unequal sizes
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        states = pool.map(_shard_state, [(cnn.to_bytes(), s) for s in shards])
    merged = tt.quantize.Calibrator(cnn, bins=512, threads=1)
    merged.merge(states[::-1])
    one = _calibrate(cnn, [samples])
    assert _snapshot(merged) == _snapshot(one)
    assert merged.samples == len(samples) and merged.batches == sum(-(-len(s) // 3) for s in shards)
    for method in tt.quantize.methods():
        assert merged.compute(method) == one.compute(method)


def test_merge_refuses_states_of_another_plan_or_bin_count(cnn, samples):
    cal = _calibrate(cnn, [samples[:4]])
    with pytest.raises(tt.ArgumentError, match="of 2048 bins into one of 512 bins"):
        cal.merge(_calibrate(cnn, [samples[:4]], bins=2048).state())
    other = tt.quantize.Calibrator(cnn, ["x"], bins=512)
    with pytest.raises(tt.ArgumentError, match="different models or plans"):
        cal.merge(other.state())
    with pytest.raises(tt.CalibrationError, match="not a tether calibration state"):
        cal.merge(b"hello")
    state = cal.state()
    before = _snapshot(cal)
    with pytest.raises(tt.CalibrationError, match="truncated or corrupt"):
        cal.merge(state[: len(state) // 2])
    assert _snapshot(cal) == before  # a bad state changes nothing


def _log_model() -> tt.Model:
    """x -> Log -> Conv: the Log output holds NaN for samples with negative values."""
    b = tt.GraphBuilder("log")
    x = b.input("x", "float32", ("batch", 1, 4, 4))
    b.initializer("w", np.ones((2, 1, 1, 1), np.float32))
    b.output(b.node("Conv", [b.node("Log", [x], name="log", outputs=["logged"]), "w"], name="conv"))
    return b.build()


def test_a_nan_sample_is_named_by_tensor_and_index_in_the_stream():
    model = _log_model()
    data = np.random.default_rng(0).uniform(0.5, 2.0, (12, 1, 4, 4)).astype(np.float32)
    data[9, 0, 2, 1] = -1.0  # Log gives NaN for this sample only
    cal = tt.quantize.Calibrator(model, bins=64)
    with pytest.raises(tt.CalibrationError, match=r"calibration sample 9 \(batch 2, row 1\): tensor 'logged' holds NaN"):
        cal.observe_all(data, batch_size=4, progress=False)
    # The two clean batches before it were kept; the faulty batch left no trace.
    assert cal.samples == 8 and cal.batches == 2


def test_skip_nonfinite_leaves_such_samples_out_and_counts_them():
    model = _log_model()
    data = np.random.default_rng(0).uniform(0.5, 2.0, (12, 1, 4, 4)).astype(np.float32)
    data[3, 0, 0, 0] = np.inf
    data[9, 0, 2, 1] = -1.0
    cal = tt.quantize.Calibrator(model, bins=64, skip_nonfinite=True)
    cal.observe_all(data, batch_size=5, progress=False)
    assert cal.skipped == [3, 9] and cal.samples == 12
    clean = tt.quantize.Calibrator(model, bins=64)
    clean.observe_all(np.delete(data, [3, 9], axis=0), batch_size=4, progress=False)
    assert _snapshot(cal) == _snapshot(clean)


def test_calibration_input_errors_name_what_is_wrong(cnn, samples):
    cal = tt.quantize.Calibrator(cnn, bins=64)
    with pytest.raises(tt.ArgumentError, match="no calibration data"):
        cal.observe_all(iter([]), progress=False)
    with pytest.raises(tt.ArgumentError, match="calibration batch 0: unknown input 'image'"):
        cal.observe({"image": samples[:2]})
    with pytest.raises(tt.ArgumentError, match="calibration batch 0: input 'x' is float64, the model expects float32"):
        cal.observe(samples[:2].astype(np.float64))
    with pytest.raises(tt.ArgumentError, match=r"calibration batch 0: input 'x' has shape \[2, 3, 10, 12\], but dim 2 "
                                               "must be 12"):
        cal.observe(samples[:2, :, :10])
    with pytest.raises(tt.ArgumentError, match="calibration batch 0 has no samples"):
        cal.observe(samples[:0])
    assert cal.samples == 0


def test_a_model_without_float_tensors_to_quantize_is_refused():
    b = tt.GraphBuilder("ints")
    x = b.input("x", "int64", ("n",))
    b.output(b.node("Add", [x, x], name="twice"))
    with pytest.raises(tt.ModelError, match="nothing to quantize"):
        tt.quantize.Calibrator(b.build())


def test_unknown_method_and_profile_are_refused(cnn, samples):
    cal = _calibrate(cnn, [samples[:4]])
    with pytest.raises(tt.ArgumentError, match="unknown .*method 'kl'"):
        cal.compute("kl")
    with pytest.raises(tt.ArgumentError, match="unknown quantization profile 'tflite'; profiles: onnxruntime, tensorrt, ncnn"):
        tt.quantize.Calibrator(cnn, profile="tflite")
    with pytest.raises(tt.ArgumentError, match="exclude_nodes names no node of the model: 'nope'"):
        tt.quantize.static(cnn, samples, exclude_nodes=["nope"])


def test_the_input_model_file_is_never_modified(tmp_path, cnn, samples):
    path = tmp_path / "cnn.onnx"
    cnn.save(path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    res = tt.quantize.static(str(path), samples, eval_samples=8)
    res.save(tmp_path / "cnn.int8.onnx")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_a_generator_is_read_lazily_and_the_state_stays_bounded(cnn):
    rng = np.random.default_rng(0)
    cal = tt.quantize.Calibrator(cnn, bins=2048)

    def batches():
        for i in range(60):
            assert cal.batches == i  # every earlier batch was observed before this one is made
            yield rng.standard_normal((8, 3, 12, 12)).astype(np.float32)

    cal.observe_all(batches(), progress=False)
    assert cal.samples == 480
    # Per tensor: counters, extremes, channel extremes and at most 2 x bins (index, count) pairs.
    bound = sum(200 + 4 * len(s.channel_absmax) + 2 * 2048 * 12 for s in cal.stats().values())
    assert len(cal.state()) <= bound


def test_a_model_with_a_fixed_batch_takes_the_whole_set_in_batches_of_that_size():
    b = tt.GraphBuilder("fixed")
    x = b.input("x", "float32", (1, 4))
    b.initializer("w", np.eye(4, dtype=np.float32))
    b.output(b.node("MatMul", [x, "w"], name="mm"))
    data = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    cal = tt.quantize.Calibrator(b.build())
    assert cal.observe_all(data, progress=False) == 10
    assert cal.stats()["x"].max == data.max()


def test_a_nan_in_a_model_of_fixed_batch_names_the_batch_and_its_samples():
    b = tt.GraphBuilder("fixed4")
    x = b.input("x", "float32", (4, 3))
    b.initializer("w", np.ones((3, 2), np.float32))
    b.output(b.node("MatMul", [b.node("Log", [x], name="log", outputs=["logged"]), "w"], name="mm"))
    data = np.ones((8, 3), np.float32)
    data[6, 1] = -1.0
    cal = tt.quantize.Calibrator(b.build())
    with pytest.raises(tt.CalibrationError, match=r"calibration batch 1 \(samples 4 to 7\): tensor 'logged' holds NaN "
                                                  "or infinity; the sample cannot be named because the model does not "
                                                  "run one sample alone"):
        cal.observe_all(data, progress=False)


def test_constants_cannot_be_observed(cnn):
    with pytest.raises(tt.ArgumentError, match="cannot observe 'w1': it is a constant"):
        tt.quantize.Calibrator(cnn, ["x", "w1"])


def test_outputs_of_pure_data_movement_are_not_observed_and_their_stand_in_is_exact():
    """A Reshape or Transpose output holds its input's values: the plan lets the input's
    statistics stand for it, and observing it anyway gives exactly those statistics."""
    rng = np.random.default_rng(0)
    b = tt.GraphBuilder("moves")
    x = b.input("x", "float32", ("batch", 4, 6))
    b.initializer("w", rng.standard_normal((6, 6)).astype(np.float32))
    b.initializer("w2", rng.standard_normal((4, 5)).astype(np.float32))
    b.initializer("shape", np.array([0, 6, 4], np.int64))
    h = b.node("MatMul", [x, "w"], name="mm", outputs=["h"])
    t = b.node("Transpose", [h], name="tr", perm=[0, 2, 1], outputs=["t"])
    r = b.node("Reshape", [t, "shape"], name="rs", outputs=["r"])
    b.output(b.node("MatMul", [r, "w2"], name="mm2", outputs=["y"]))
    model = b.build()
    cal = tt.quantize.Calibrator(model, bins=256)
    aliases = {t.name: t.same_values_as for t in cal.plan.tensors if t.same_values_as}
    assert aliases == {"t": "h", "r": "h"}
    assert {n for n, _ in cal.plan.observed()} == {"x", "h", "y"}
    explicit = tt.quantize.Calibrator(model, ["x", "h", "t", "r"], bins=256)
    data = rng.standard_normal((10, 4, 6)).astype(np.float32)
    explicit.observe(data)
    cal.observe(data)
    snap = {n: (s.count, s.min, s.max, s.exponent, s.positive, s.negative) for n, s in explicit.stats().items()}
    assert snap["t"] == snap["r"] == snap["h"]
    ranges = cal.compute("entropy")
    assert ranges["t"] == ranges["r"] == ranges["h"]
