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


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("origins")
    torch.manual_seed(0)
    path = folder / "net.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_Net().eval(), (torch.randn(2, 8),), str(path), input_names=["x"], dynamo=True,
                          verbose=False)
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
    assert o == NodeOrigin("layer1.0.conv1", "torch.nn.Conv2d", "/src/m.py", 9)
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
