"""Each node of a model from torch's dynamo exporter is named in the reports by the torch module
that produced it and the line of the module's source that called it. The oracle is the module
itself (its attribute names) and this file's own source lines (inspect)."""

from __future__ import annotations

import inspect
import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from tether.parity import OnnxRuntimeRunner, TetherRunner, compare
from tether.parity._provenance import NodeOrigin, origin_of

torch = pytest.importorskip("torch")


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU())
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder(x)
        return self.head(torch.tanh(h))


def _line_of(text: str) -> int:
    lines, start = inspect.getsourcelines(_Net.forward)
    return start + next(i for i, line in enumerate(lines) if text in line)


_NETS: list[torch.nn.Module] = []


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("origins")
    torch.manual_seed(0)
    path = folder / "net.onnx"
    net = _Net().eval()
    _NETS.append(net)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.randn(2, 8),), str(path), input_names=["x"], dynamo=True, verbose=False)
    model = onnx.load(str(path))
    weight = next(i for i in model.graph.initializer if numpy_helper.to_array(i).shape == (16, 8)
                  or numpy_helper.to_array(i).shape == (8, 16))
    w = numpy_helper.to_array(weight).copy()
    w *= np.float32(1.3)
    weight.CopyFrom(numpy_helper.from_array(w, weight.name))
    edited = folder / "edited.onnx"
    onnx.save(model, str(edited))
    return path, edited


def test_origin_is_read_from_the_exporters_node_metadata() -> None:
    o = origin_of({"pkg.torch.onnx.name_scopes": "['', 'layer1', 'layer1.0', 'layer1.0.conv1', 'conv2d']",
                   "pkg.torch.onnx.class_hierarchy": "['M', 'torch.nn.Sequential', 'B', 'torch.nn.Conv2d', 'aten.c']",
                   "pkg.torch.onnx.stack_trace": 'File "/src/m.py", line 9, in forward\n    y = self.layer1(x)\n'
                                                 '  File "/site-packages/torch/nn/modules/conv.py", line 5, in f\n'})
    assert o == NodeOrigin("layer1.0.conv1", "torch.nn.Conv2d", "/src/m.py", 9, ("", "layer1", "layer1.0",
                                                                               "layer1.0.conv1"),
                           ("M", "torch.nn.Sequential", "B", "torch.nn.Conv2d"))
    assert o.label == "layer1.0.conv1 (Conv2d)" and o.source == "m.py:9"
    assert origin_of({"tether.fused_from": "a,b"}) is None


def test_reports_name_the_torch_module_and_source_line_of_every_node(exported: tuple[Path, Path],
                                                                     tmp_path: Path) -> None:
    path, edited = exported
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    rep = compare(OnnxRuntimeRunner(path), TetherRunner(edited, optimize=False), x, layerwise=True)
    layers = rep.layers or []
    by_module = {la.origin.module for la in layers if la.origin is not None}
    assert {"encoder.0", "encoder.1", "head"} <= by_module, by_module
    this_file = str(Path(__file__).resolve())
    for la in layers:
        assert la.origin is not None, la.node
        assert str(Path(la.origin.file).resolve()) == this_file, la.origin
        if la.origin.module.startswith("encoder"):
            assert la.origin.line == _line_of("self.encoder(x)"), la
        elif la.origin.module == "head":
            assert la.origin.line == _line_of("self.head(")
            assert la.origin.module_class.endswith("Linear")
    first = rep.first_divergent
    assert first is not None and first.origin is not None and first.origin.module == "encoder.0"
    text = rep.table()
    assert f"from torch module encoder.0 (Linear), {Path(__file__).name}:{_line_of('self.encoder(x)')}" in text
    data = json.loads(rep.to_json())
    assert all(la["origin"]["file"] for la in data["layers"])
    page = rep.to_html(tmp_path / "r.html")
    assert '<td class="text module">encoder.0 (Linear)</td>' in page
    assert f'{Path(__file__).name}:{_line_of("self.head(")}</td>' in page


def _encoder_error(x: np.ndarray) -> float:
    """max |1.3 W x - W x| for the first Linear, whose weight the edited file scales by 1.3."""
    w = _NETS[0].encoder[0].weight.detach().numpy().astype(np.float64)
    return float(np.abs(0.3 * (x.astype(np.float64) @ w.T)).max())


@pytest.mark.parametrize("runner", ["onnxruntime", "tether"])
def test_layerwise_against_torch_names_the_module_whose_weight_the_file_changed(
        runner: str, exported: tuple[Path, Path]) -> None:
    from tether.parity import TorchRunner

    path, edited = exported
    net = _NETS[0]
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    make = OnnxRuntimeRunner if runner == "onnxruntime" else TetherRunner
    rep = compare(net, make(path), x, layerwise=True)
    assert rep.ok and rep.first_divergent is None, rep.table()
    compared = {la.node for la in rep.layers or [] if la.status == "compared"}
    assert compared == {"encoder", "encoder.0", "encoder.1", "head"}, rep.table()
    rep = compare(TorchRunner(net), make(edited), x, layerwise=True)
    first = rep.first_divergent
    assert first is not None and first.node == "encoder.0" and first.op_type == "Linear", rep.table()
    assert first.metrics is not None
    assert first.metrics.max_abs_error == pytest.approx(_encoder_error(x), rel=1e-4)
    assert first.origin is not None and first.origin.line == _line_of("self.encoder(x)")
    assert "from torch module encoder.0 (Linear)" in rep.table()


def test_layerwise_against_torch_needs_the_exporters_module_scopes(tmp_path: Path) -> None:
    import tether as tt
    from onnx import helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "plain",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])])
    path = tmp_path / "plain.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(tt.ArgumentError, match="module scopes the dynamo exporter records"):
        compare(torch.nn.ReLU(), OnnxRuntimeRunner(path), np.float32([-1, 1]), layerwise=True)
