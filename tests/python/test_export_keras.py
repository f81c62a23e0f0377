"""tether.export.keras and tether.export.tflite: small Keras 3 models (TensorFlow backend) exported
to ONNX and TFLite and checked against Keras itself, an int8 model checked on real digits, the
three forms of one model compared pairwise, and a Keras layer the ONNX converter cannot take."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# tether is imported before TensorFlow on purpose: see test_tether_loads_a_model_after_tensorflow_was_imported.
import tether as tt
from tether.export import ExportError
from tether.export import keras as export_keras
from tether.export import tflite as export_tflite
from tether.parity import (
    CallableRunner,
    LiteRTRunner,
    OnnxRuntimeRunner,
    TetherRunner,
    TorchRunner,
    compare,
    load_golden,
)
from tether.testing import assert_parity

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# `make test` installs TensorFlow and Keras (pyproject's dev extra): a missing one is a failure.
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

assert keras.backend.backend() == "tensorflow", "these exporters need Keras's TensorFlow backend (KERAS_BACKEND)"

with contextlib.suppress(RuntimeError):  # refused once TensorFlow's runtime has started
    tf.config.threading.set_intra_op_parallelism_threads(2)
    tf.config.threading.set_inter_op_parallelism_threads(1)


def _cnn(name: str, *, two_outputs: bool = False) -> Any:
    """Conv2D -> BatchNormalization -> ReLU -> MaxPool -> Dense -> softmax on 8x8 one-channel images."""
    image = keras.Input((8, 8, 1), name="image")
    h = keras.layers.Conv2D(8, 3, padding="same", name="conv")(image)
    h = keras.layers.BatchNormalization(name="bn")(h)
    h = keras.layers.ReLU(name="relu")(h)
    features = keras.layers.MaxPooling2D(name="pool")(h)
    h = keras.layers.Flatten(name="flatten")(features)
    probs = keras.layers.Dense(10, activation="softmax", name="probs")(h)
    return keras.Model(image, [probs, features] if two_outputs else probs, name=name)


def _with_random_batchnorm(model: Any, seed: int) -> Any:
    """Moving statistics and affine terms away from the identity, so BatchNormalization matters."""
    rng = np.random.default_rng(seed)
    bn = model.get_layer("bn")
    gamma, beta, mean, var = (w.shape for w in bn.get_weights())
    bn.set_weights([rng.uniform(0.5, 1.5, gamma).astype(np.float32), rng.normal(0, 0.2, beta).astype(np.float32),
                    rng.normal(0, 0.3, mean).astype(np.float32), rng.uniform(0.5, 2.0, var).astype(np.float32)])
    return model


@pytest.fixture(scope="module")
def cnn() -> Any:
    keras.utils.set_random_seed(1)
    return _with_random_batchnorm(_cnn("cnn"), seed=1)


@pytest.fixture(scope="module")
def mlp() -> Any:
    keras.utils.set_random_seed(2)
    x = keras.Input((20,), name="features")
    h = keras.layers.Dense(32, activation="relu", name="fc1")(x)
    h = keras.layers.Dense(16, activation="tanh", name="fc2")(h)
    return keras.Model(x, keras.layers.Dense(5, name="logits")(h), name="mlp")


@pytest.fixture(scope="module")
def models(cnn: Any, mlp: Any) -> dict[str, tuple[Any, np.ndarray]]:
    """Each model with an example batch of its inputs."""
    rng = np.random.default_rng(0)
    return {"cnn": (cnn, rng.standard_normal((4, 8, 8, 1)).astype(np.float32)),
            "mlp": (mlp, rng.standard_normal((4, 20)).astype(np.float32))}


@pytest.fixture(scope="module")
def digits() -> dict[str, Any]:
    """The CNN trained a few epochs on scikit-learn's digits (8x8 images, 10 classes), with a
    held-out split the model never saw."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = (data.images / 16.0).astype(np.float32)[..., None]
    y = data.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))
    x, y = x[order], y[order]
    keras.utils.set_random_seed(3)
    model = _cnn("digits_cnn")
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
    model.fit(x[:1400], y[:1400], epochs=6, batch_size=32, verbose=0)
    return {"model": model, "x_train": x[:1400], "x_test": x[1400:], "y_test": y[1400:]}


@pytest.fixture(scope="module")
def digits_int8(digits: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    calibration = [digits["x_train"][i:i + 50] for i in range(0, 500, 50)]
    return export_tflite(digits["model"], tmp_path_factory.mktemp("int8") / "digits_int8.tflite",
                         representative_data=calibration, example_inputs=digits["x_test"][:50])


def _keras_runner(model: Any, output_names: list[str], input_name: str) -> CallableRunner:
    """Keras itself, the oracle: ``model(x, training=False)`` with its outputs named as given."""
    def run(**feeds: np.ndarray) -> list[np.ndarray]:
        out = model(feeds[input_name], training=False)
        return [np.asarray(t) for t in (out if isinstance(out, list | tuple) else [out])]

    return CallableRunner(run, output_names, name="keras")


@pytest.mark.parametrize("which", ["cnn", "mlp"])
def test_keras_export_to_onnx_matches_keras_in_tether_and_onnxruntime(
        which: str, models: dict[str, tuple[Any, np.ndarray]], tmp_path: Path) -> None:
    model, x = models[which]
    res = export_keras(model, x, tmp_path / f"{which}.onnx")
    assert res.ok, str(res)
    assert res.report is not None and res.report.candidate == "tether" and res.report.reference == "keras"
    assert res.dynamic_report is not None and res.dynamic_report.input_shapes[model.inputs[0].name][0] == 5
    onnx_model = tt.load(res.path)
    assert [i.name for i in onnx_model.inputs] == [model.inputs[0].name]
    assert isinstance(onnx_model.inputs[0].shape[0], str)  # the batch stays symbolic
    # A batch the exporter never saw, against Keras's own outputs.
    fresh = np.random.default_rng(7).standard_normal((9, *x.shape[1:])).astype(np.float32)
    keras_ref = _keras_runner(model, [onnx_model.outputs[0].name], model.inputs[0].name)
    assert_parity(keras_ref, TetherRunner(res.path), fresh, tolerance="fp32")
    assert_parity(keras_ref, OnnxRuntimeRunner(res.path), fresh, tolerance="fp32")


def test_golden_bundle_holds_keras_outputs_and_the_onnx_files_hash(
        models: dict[str, tuple[Any, np.ndarray]], tmp_path: Path) -> None:
    model, x = models["cnn"]
    res = export_keras(model, x, tmp_path / "cnn.onnx")
    assert res.golden_path == tmp_path / "cnn.golden"
    bundle = load_golden(res.golden_path)
    meta = bundle.metadata
    assert meta["model_sha256"] == hashlib.sha256(res.path.read_bytes()).hexdigest()
    assert meta["producer"] == f"keras {keras.__version__} / tensorflow {tf.__version__}"
    assert meta["tolerance"] == "fp32"
    (inputs, outputs), = bundle.samples
    np.testing.assert_array_equal(inputs["image"], x)
    np.testing.assert_allclose(outputs[meta["outputs"][0]], np.asarray(model(x, training=False)), rtol=1e-6, atol=1e-7)
    assert_parity(tt.parity.GoldenRunner(bundle), TetherRunner(res.path), inputs, tolerance="fp32")


@pytest.mark.parametrize("which", ["cnn", "mlp"])
def test_keras_export_to_float_tflite_matches_keras_in_litert(
        which: str, models: dict[str, tuple[Any, np.ndarray]], tmp_path: Path) -> None:
    model, x = models[which]
    res = export_tflite(model, tmp_path / f"{which}.tflite", example_inputs=x)
    assert res.ok, str(res)
    assert res.report is not None and res.report.tolerance == tt.parity.Tolerance.profile("fp32")
    fresh = np.random.default_rng(8).standard_normal((6, *x.shape[1:])).astype(np.float32)
    assert_parity(_keras_runner(model, ["output_0"], model.inputs[0].name), LiteRTRunner(res.path), fresh,
                  tolerance="fp32")


def test_litert_runner_names_inputs_as_keras_does_and_resizes_the_batch(
        models: dict[str, tuple[Any, np.ndarray]], tmp_path: Path) -> None:
    model, _ = models["cnn"]
    res = export_tflite(model, tmp_path / "cnn.tflite", verify=False)
    runner = LiteRTRunner(res.path.read_bytes(), threads=1)
    (spec,) = runner.input_specs()
    assert (spec.name, spec.dtype, spec.shape) == ("image", np.dtype(np.float32), ("batch", 8, 8, 1))
    assert runner.tensor_names["image"] == "serving_default_image:0"
    assert runner.output_names() == ["output_0"]
    rng = np.random.default_rng(9)
    for batch in (1, 6, 2):
        x = rng.standard_normal((batch, 8, 8, 1)).astype(np.float32)
        np.testing.assert_allclose(runner.run({"image": x})["output_0"], np.asarray(model(x, training=False)),
                                   rtol=1e-4, atol=1e-5)
    with pytest.raises(tt.ArgumentError, match=r"input 'image' has shape \[2, 8, 8, 3\], the model takes \['\?', 8, 8, 1\]"):
        runner.run({"image": np.zeros((2, 8, 8, 3), np.float32)})


def test_int8_tflite_with_representative_data_passes_the_int8_profile_with_float_io(
        digits: dict[str, Any], digits_int8: Any) -> None:
    res = digits_int8
    assert res.ok, str(res)
    assert res.report.tolerance == tt.parity.Tolerance.profile("int8")
    runner = LiteRTRunner(res.path)
    assert [s.dtype for s in runner.input_specs()] == [np.dtype(np.float32)]
    assert runner.interpreter.get_output_details()[0]["dtype"] == np.float32
    # The weights are int8 in the file: the quantization happened.
    assert any(d["dtype"] == np.int8 for d in runner.interpreter.get_tensor_details())
    x = digits["x_test"][50:150]
    keras_ref = _keras_runner(digits["model"], ["output_0"], "image")
    assert_parity(keras_ref, runner, x, tolerance="int8")
    # Within int8's tolerance, but not float32's: the model really computes in int8.
    assert not compare(keras_ref, runner, x, tolerance="fp32").ok


def test_int8_tflite_agrees_with_keras_on_top1_for_held_out_digits(digits: dict[str, Any], digits_int8: Any) -> None:
    x, y = digits["x_test"], digits["y_test"]
    batches = [x[i:i + 64] for i in range(0, len(x), 64)]
    rep = compare(_keras_runner(digits["model"], ["output_0"], "image"), LiteRTRunner(digits_int8.path), batches,
                  labels=y, tolerance="int8")
    assert rep.slices is not None and sum(s.samples for s in rep.slices) == len(y)
    agreement = sum(s.top1_agreement * s.samples for s in rep.slices) / len(y)
    keras_accuracy = sum((s.reference_accuracy or 0.0) * s.samples for s in rep.slices) / len(y)
    int8_accuracy = sum((s.candidate_accuracy or 0.0) * s.samples for s in rep.slices) / len(y)
    assert keras_accuracy >= 0.9, rep.table()  # the labels say the float model learned the task
    assert agreement >= 0.97, [(s.label, s.top1_agreement) for s in rep.slices]
    assert int8_accuracy >= keras_accuracy - 0.03
    assert min(s.top1_agreement for s in rep.slices) >= 0.85


class _TorchStem:
    """The digits CNN's Conv2D -> BatchNormalization -> ReLU -> MaxPool in torch, from the Keras
    weights, in torch's NCHW layout: an independent oracle for the NHWC feature map."""

    @staticmethod
    def build(model: Any) -> Any:
        import torch

        kernel, bias = model.get_layer("conv").get_weights()
        gamma, beta, mean, var = model.get_layer("bn").get_weights()
        eps = float(model.get_layer("bn").epsilon)
        conv = torch.nn.Conv2d(1, 8, 3, padding=1)
        conv.weight.data = torch.from_numpy(np.ascontiguousarray(kernel.transpose(3, 2, 0, 1)))  # HWIO -> OIHW
        conv.bias.data = torch.from_numpy(bias)
        bn = torch.nn.BatchNorm2d(8, eps=eps)
        bn.weight.data, bn.bias.data = torch.from_numpy(gamma), torch.from_numpy(beta)
        bn.running_mean.data, bn.running_var.data = torch.from_numpy(mean), torch.from_numpy(var)

        class Stem(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.conv, self.bn, self.pool = conv, bn, torch.nn.MaxPool2d(2)

            def forward(self, image: Any) -> Any:
                # The same NHWC feeds as the other forms; NCHW from here on, as a torch port is.
                return self.pool(torch.relu(self.bn(self.conv(image.permute(0, 3, 1, 2)))))

        return Stem().eval()


def test_keras_onnx_in_tether_and_tflite_in_litert_agree_pairwise(digits: dict[str, Any], tmp_path: Path) -> None:
    trained = digits["model"]
    model = keras.Model(trained.input, [trained.output, trained.get_layer("pool").output], name="digits_two")
    x = digits["x_test"][:32]
    onnx_res = export_keras(model, x, tmp_path / "digits.onnx", golden=False)
    tfl_res = export_tflite(model, tmp_path / "digits.tflite", example_inputs=x)
    assert onnx_res.ok and tfl_res.ok, f"{onnx_res}\n{tfl_res}"
    keras_form = _keras_runner(model, ["probs", "features"], "image")
    onnx_form, tfl_form = TetherRunner(onnx_res.path), LiteRTRunner(tfl_res.path)
    # Keras's flattened outputs, in order, are Identity:0, Identity_1:0 in ONNX and output_0, output_1 in TFLite.
    to_onnx = {"probs": "Identity:0", "features": "Identity_1:0"}
    to_tflite = {"probs": "output_0", "features": "output_1"}
    assert onnx_form.output_names() == list(to_onnx.values())
    xs = digits["x_test"][32:96]
    assert_parity(keras_form, onnx_form, xs, output_map=to_onnx, tolerance="fp32")
    assert_parity(keras_form, tfl_form, xs, output_map=to_tflite, tolerance="fp32")
    assert_parity(onnx_form, tfl_form, xs, output_map={to_onnx[k]: to_tflite[k] for k in to_onnx}, tolerance="fp32")

    # All three are NHWC; a torch port is NCHW, and the layout is declared, never guessed.
    torch_form = TorchRunner(_TorchStem.build(trained), ["image"], ["features"])
    for form, name in ((onnx_form, "Identity_1:0"), (tfl_form, "output_1"), (keras_form, "features")):
        assert_parity(torch_form, form, {"image": xs}, output_map={"features": name}, layouts={"features": "NHWC->NCHW"},
                      tolerance="fp32")
    undeclared = compare(torch_form, tfl_form, xs, output_map={"features": "output_1"})
    assert not undeclared.ok and "differs from the reference's" in undeclared.outputs[0].metrics.problem


def test_keras_export_of_an_op_the_onnx_converter_lacks_names_the_op_and_the_layer(tmp_path: Path) -> None:
    x = keras.Input((6,), name="x")
    h = keras.layers.Dense(4, name="fc")(x)
    h = keras.layers.Lambda(lambda t: tf.math.lgamma(tf.abs(t) + 1.0), name="log_gamma")(h)
    model = keras.Model(x, h, name="with_lgamma")
    path = tmp_path / "lgamma.onnx"
    with pytest.raises(ExportError) as info:
        export_keras(model, np.ones((2, 6), np.float32), path)
    message = str(info.value)
    assert "'Lgamma'" in message and "layer 'log_gamma'" in message and "with_lgamma" in message
    assert "is not supported" in message  # the converter's own words
    assert "tether.export.tflite" in message and "rewrite that layer" in message
    assert not path.exists() and not path.with_suffix(".golden").exists()
    assert sorted(tmp_path.iterdir()) == []  # no staging folder either


@pytest.fixture(scope="module")
def two_inputs() -> tuple[Any, np.ndarray, np.ndarray]:
    """Two inputs, 'image' then 'series', which LiteRT's signature may list in another order."""
    keras.utils.set_random_seed(4)
    image = keras.Input((8, 8, 3), name="image")
    series = keras.Input((5, 2), name="series")
    h = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3, name="conv")(image))
    s = keras.layers.Flatten()(series)
    model = keras.Model([image, series], keras.layers.Dense(2, name="head")(keras.layers.Concatenate()([h, s])),
                        name="two_inputs")
    rng = np.random.default_rng(5)
    return model, rng.random((2, 8, 8, 3), dtype=np.float32), rng.random((2, 5, 2), dtype=np.float32)


def test_a_tuple_example_follows_the_keras_models_input_order_in_tflite(
        two_inputs: tuple[Any, np.ndarray, np.ndarray], tmp_path: Path) -> None:
    model, image, series = two_inputs
    res = export_tflite(model, tmp_path / "two.tflite", example_inputs=(image, series))
    assert res.ok, str(res)
    assert res.report is not None and res.report.input_shapes == {"image": (2, 8, 8, 3), "series": (2, 5, 2)}
    # The oracle: Keras called with the list in its own order.
    got = LiteRTRunner(res.path).run({"image": image, "series": series})["output_0"]
    np.testing.assert_allclose(got, np.asarray(model([image, series], training=False)), rtol=1e-4, atol=1e-5)


def test_a_tuple_example_follows_the_keras_models_input_order_in_onnx_and_its_golden_bundle(
        two_inputs: tuple[Any, np.ndarray, np.ndarray], tmp_path: Path) -> None:
    model, image, series = two_inputs
    res = export_keras(model, (image, series), tmp_path / "two.onnx")
    assert res.ok, str(res)
    (inputs, outputs), = load_golden(res.golden_path).samples
    np.testing.assert_array_equal(inputs["image"], image)
    np.testing.assert_array_equal(inputs["series"], series)
    np.testing.assert_allclose(next(iter(outputs.values())), np.asarray(model([image, series], training=False)),
                               rtol=1e-6, atol=1e-7)


def test_a_tuple_example_of_the_wrong_length_is_an_argument_error(
        two_inputs: tuple[Any, np.ndarray, np.ndarray], tmp_path: Path) -> None:
    model, image, _ = two_inputs
    with pytest.raises(tt.ArgumentError, match=r"example_inputs holds 1 arrays; model 'two_inputs' takes 2 inputs, in "
                                               r"this order: \['image', 'series'\]"):
        export_tflite(model, tmp_path / "two.tflite", example_inputs=(image,))
    assert sorted(tmp_path.iterdir()) == []


def test_tether_loads_a_model_after_tensorflow_was_imported(
        models: dict[str, tuple[Any, np.ndarray]], tmp_path: Path) -> None:
    model, x = models["mlp"]
    res = export_keras(model, x, tmp_path / "mlp.onnx", verify=False, golden=False)
    script = textwrap.dedent(f"""
        import tensorflow
        import tether
        print(len(tether.load({str(res.path)!r}).nodes))
    """)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) == len(tt.load(res.path).nodes)
