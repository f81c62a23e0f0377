"""tether.quantize.qat_prepare / qat_export: the fake-quantized torch module and tether's INT8 run
of the exported QDQ model give the same integers, before and after training."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
import tether as tt

torch = pytest.importorskip("torch")
datasets = pytest.importorskip("sklearn.datasets")


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    d = datasets.load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)


class _MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = torch.nn.Linear(64, 32), torch.nn.Linear(32, 24), torch.nn.Linear(24, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # functional Relus: no module of their own
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def _cnn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 6, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(6, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(128, 10))


def _quantized(net: torch.nn.Module, x: np.ndarray, tmp_path, name: str, dynamo: bool = False,
               per_channel: bool = True) -> tt.quantize.QuantizeResult:
    """``net`` exported (by tt.export.torch, whose dynamo exporter records each node's module, or
    by the faster TorchScript exporter, where parameter names map the layers) and quantized."""
    net.eval()
    path = tmp_path / f"{name}.onnx"
    if dynamo:
        tt.export.torch(net, (torch.from_numpy(x[:8]),), path, dynamic={"x": {0: "batch"}}, input_names=["x"],
                        golden=False, generated_inputs=0, check=False)
    else:
        torch.onnx.export(net, (torch.from_numpy(x[:8]),), str(path), dynamo=False, input_names=["x"],
                          dynamic_axes={"x": {0: "batch"}}, opset_version=17)
    return tt.quantize.static(path, x[:256], eval_samples=0, per_channel=per_channel)


def _integers(qat: torch.nn.Module, model: tt.Model, x: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per activation a layer quantizes at its output: (the module's integers, tether's), and
    checks that tether ran the layers as integer kernels."""
    layers = {m.tether_output_tensor: m for _, m in qat.named_modules() if hasattr(m, "tether_output_tensor")}
    proto = onnx.load_from_string(model.to_bytes())
    for t in layers:  # QuantizeLinear's output: the integers the next layer reads
        proto.graph.output.append(onnx.helper.make_tensor_value_info(t + "_quantized", onnx.TensorProto.INT8, None))
    sess = tt.compile(tt.load(proto.SerializeToString()), threads=1)
    exact_layers = sum(1 for m in layers.values() if hasattr(m, "tether_input_scale"))
    fused = re.search(r"pass fuse_qdq: (\d+) DequantizeLinear", str(sess.report))
    assert fused is not None and int(fused.group(1)) >= exact_layers > 0
    got = sess.run({"x": x})
    captured: dict[str, torch.Tensor] = {}
    hooks = [m.register_forward_hook(lambda mod, a, o, t=t: captured.__setitem__(t, o.detach()))
             for t, m in layers.items()]
    with torch.no_grad():
        qat(torch.from_numpy(x))
    for h in hooks:
        h.remove()
    out = {}
    for t, m in layers.items():
        s, z = m.tether_output_scale.item(), m.tether_output_zero_point.item()
        # The module's values are dequantized integers: y / s recovers them exactly.
        out[t] = (np.clip(np.rint(captured[t].numpy() / np.float32(s)) + z, -128, 127), got[t + "_quantized"])
    return out


def _train(qat: torch.nn.Module, x: np.ndarray, y: np.ndarray, steps: int = 20) -> None:
    """Plain SGD, written out (torch.optim's first use imports its compiler: seconds)."""
    qat.train()
    rng = np.random.default_rng(0)
    for _ in range(steps):
        idx = rng.choice(len(x), 32, replace=False)
        loss = torch.nn.functional.cross_entropy(qat(torch.from_numpy(x[idx])), torch.from_numpy(y[idx]))
        qat.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in qat.parameters():
                p -= 0.2 * p.grad
    qat.eval()


@pytest.mark.parametrize(("make", "dynamo", "per_channel"), [(_MLP, True, True), (_cnn, False, True), (_MLP, False, False)],
                         ids=["mlp-dynamo", "cnn-torchscript", "mlp-weights-per-tensor"])
def test_module_and_tethers_int8_run_give_the_same_integers_before_and_after_training(make, dynamo, per_channel,
                                                                                        digits, tmp_path):
    x, y = digits
    if make is _cnn:
        x = x.reshape(-1, 1, 8, 8)
    torch.manual_seed(0)
    net = make()
    res = _quantized(net, x, tmp_path, make.__name__, dynamo, per_channel)
    qat = tt.quantize.qat_prepare(net, res)
    held = x[256:]
    # Before training: tether's own model, and the exported one holds the same weights.
    seeded = tt.quantize.qat_export(qat, res)
    assert [i.SerializeToString() for i in onnx.load_from_string(seeded.to_bytes()).graph.initializer] == \
        [i.SerializeToString() for i in onnx.load_from_string(res.model.to_bytes()).graph.initializer]
    for phase in ("seeded", "trained"):
        if phase == "trained":
            _train(qat, x, y)
        model = tt.quantize.qat_export(qat, res, tmp_path / f"{phase}.onnx")
        ints = _integers(qat, tt.load(tmp_path / f"{phase}.onnx"), held)
        assert ints, "no layer quantizes its output"
        for t, (mine, tethers) in ints.items():
            assert mine.shape == tethers.shape
            assert np.array_equal(mine, tethers.astype(np.float64)), (phase, t, int(np.sum(mine != tethers)))
        with torch.no_grad():
            logits = qat(torch.from_numpy(held)).numpy()
        # The last layer's output is float in both (the model quantizes no graph output).
        np.testing.assert_allclose(tt.compile(model).run({"x": held})[res.model.outputs[0].name], logits,
                                   rtol=1e-4, atol=1e-4 * float(np.abs(logits).max()))
    # Training moved the weights: the exported integers are not the seed's.
    trained = {i.name: i for i in onnx.load(tmp_path / "trained.onnx").graph.initializer}
    seed = {i.name: i for i in onnx.load_from_string(res.model.to_bytes()).graph.initializer}
    assert any(trained[n].SerializeToString() != seed[n].SerializeToString() for n in seed if n.endswith("_quantized"))


def test_quantization_rounds_as_onnx_quantizelinear_not_as_torch_fake_quantize():
    from tether.quantize._qat import _fake_quantize

    s = np.float32(0.0371)
    cand = (np.random.default_rng(0).uniform(-100, 100, 2_000_000).astype(np.float32) * s).astype(np.float32)
    # Values where x / s and x * (1 / s) round to different integers, and exact midpoints.
    differ = cand[np.rint(cand / s) != np.rint(cand * (np.float32(1) / s))]
    assert differ.size > 0
    x = np.concatenate([differ, (np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, -127.5], np.float32) * s)])
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"])], "q",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [x.size])],
        [onnx.helper.make_tensor_value_info("q", onnx.TensorProto.INT8, [x.size])],
        [onnx.numpy_helper.from_array(np.array(s), "s"), onnx.numpy_helper.from_array(np.array(0, np.int8), "z")])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)])
    tethers = tt.compile(tt.load(model.SerializeToString())).run({"x": x})["q"]
    expected = np.clip(np.rint(x / s), -128, 127)  # numpy: float32 division, half to even
    assert np.array_equal(tethers, expected)
    mine = _fake_quantize(torch.from_numpy(x), torch.tensor(s), torch.tensor(0.0), -128.0, 127.0).numpy()
    assert np.array_equal(np.rint(mine / s), expected)
    # torch's fake_quantize multiplies by 1 / s: on those values it picks the other integer.
    theirs = torch.fake_quantize_per_tensor_affine(torch.from_numpy(x), float(s), 0, -128, 127).numpy()
    assert not np.array_equal(np.rint(theirs / s), expected)


def test_unmappable_modules_are_refused_naming_what_cannot_be_mapped(digits, tmp_path):
    x, _ = digits

    class Residual(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(64, 64), torch.nn.Linear(64, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc2(torch.relu(self.fc1(x)) + x)  # the Add is quantized, in no module

    class Square(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(64, 16), torch.nn.Linear(16, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.relu(self.fc1(x))
            s = h + h  # quantized, written in no module and read by a Mul, not a layer
            return self.fc2(s * s)

    torch.manual_seed(0)
    net = Residual()
    res = _quantized(net, x, tmp_path, "residual")
    with pytest.raises(tt.ArgumentError, match=r"qat_prepare: graph input 'x' is quantized for \['\S*[Aa]dd"):
        tt.quantize.qat_prepare(net, res)
    net = Square()
    res = _quantized(net, x, tmp_path, "square")
    with pytest.raises(tt.ArgumentError, match=r"qat_prepare: activation '\S+' \(written by node '\S*[Aa]dd\S*', Add, "
                       "in no submodule"):
        tt.quantize.qat_prepare(net, res)

    torch.manual_seed(0)
    mlp = _MLP()
    res = _quantized(mlp, x, tmp_path, "mlp")
    other = _MLP()  # another initialisation: not the weights that were quantized
    with pytest.raises(tt.ArgumentError, match="module 'fc1' holds another weight than the quantized model"):
        tt.quantize.qat_prepare(other, res)
    with pytest.raises(tt.ArgumentError, match="was not made by tether.quantize.qat_prepare"):
        tt.quantize.qat_export(mlp, res)
    qat = tt.quantize.qat_prepare(mlp, res)
    with pytest.raises(tt.export.ExportError, match=r"tt.quantize.qat_export\(module, result, path\)"):
        tt.export.torch(qat, (torch.from_numpy(x[:4]),), tmp_path / "qat.onnx", exporter="torchscript", golden=False)
    mlp.extra = torch.nn.Parameter(torch.zeros(3))  # in no node of the model: its trained value would be lost
    with pytest.raises(tt.ArgumentError, match=r"1 trainable parameters .* \['extra'\]"):
        tt.quantize.qat_prepare(mlp, res)
