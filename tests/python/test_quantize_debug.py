"""tether.quantize.debug: the INT8 error each node adds and the total it carries, against numpy
and onnxruntime."""

from __future__ import annotations

import json
import math
from html.parser import HTMLParser

import numpy as np
import onnx
import pytest
import tether as tt
from onnx import TensorProto, helper, numpy_helper


def _cnn(outlier: float) -> bytes:
    """conv1 (2 -> 4, 3x3) -> Relu -> conv2 (4 -> 8) -> Relu -> Flatten -> fc (288 -> 10). conv1
    holds one weight ``outlier`` times larger than the others' largest, on the input channel that
    is nearly silent: it adds little to the output, but a per-tensor scale then flattens the rest."""
    rng = np.random.default_rng(3)
    w1 = rng.normal(0, 0.3, (4, 2, 3, 3)).astype(np.float32)
    w1[0, 1, 0, 0] = outlier * np.abs(w1).max()
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("w1", w1), ("b1", rng.normal(0, 0.1, 4).astype(np.float32)),
        ("w2", rng.normal(0, 0.2, (8, 4, 3, 3)).astype(np.float32)), ("b2", rng.normal(0, 0.1, 8).astype(np.float32)),
        ("w3", rng.normal(0, 0.05, (10, 288)).astype(np.float32)), ("b3", rng.normal(0, 0.1, 10).astype(np.float32))]]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], "conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], "relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], "conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"], "relu2"),
             helper.make_node("Flatten", ["r2"], ["f"], "flatten"),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["logits"], "fc", transB=1)]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2, 6, 6])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.fixture(scope="module")
def fragile() -> tuple[tt.quantize.QuantizeResult, np.ndarray]:
    x = np.random.default_rng(0).normal(0, 1, (64, 2, 6, 6)).astype(np.float32)
    x[:, 1] *= 1e-3
    res = tt.quantize.static(tt.load(_cnn(100.0)), x[:48], per_channel=False, eval_samples=0)
    return res, x[48:]


def _qdq(a: np.ndarray, scale: float, zero: int, lo: int, hi: int) -> np.ndarray:
    return (np.clip(np.rint(a / np.float32(scale)) + zero, lo, hi) - zero) * np.float64(scale)


def _conv(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """3x3 convolution, padding 1, stride 1, in float64."""
    n, _, h, wd = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j].astype(np.float64))
    return out + b.astype(np.float64)[None, :, None, None]


def _sqnr(ref: np.ndarray, got: np.ndarray) -> float:
    return 10 * math.log10(float(np.sum(ref ** 2)) / float(np.sum((got - ref) ** 2)))


def test_debug_names_the_fragile_layer_as_the_worst_and_later_layers_only_inherit(fragile):
    res, x = fragile
    rep = res.debug(x)
    by = {n.node: n for n in rep.nodes}
    assert rep.worst(1)[0].node == "conv1"
    assert rep.samples == len(x)
    assert by["conv1"].added_sqnr_db < 20
    for later in ("conv2", "fc"):
        # What reaches them is already damaged: the total is far below what they add themselves.
        assert by[later].added_sqnr_db > by["conv1"].added_sqnr_db + 15
        assert by[later].total_sqnr_db < by[later].added_sqnr_db - 10
    text = str(rep)
    assert "worst by added error: conv1 (Conv)" in text
    assert json.loads(rep.to_json())["worst"][0] == "conv1"
    # Without the outlier conv1 is no longer the layer that breaks INT8.
    clean = tt.quantize.static(tt.load(_cnn(1.0)), x, per_channel=False, eval_samples=0).debug(x)
    assert {n.node: n for n in clean.nodes}["conv1"].added_sqnr_db > by["conv1"].added_sqnr_db + 15


def test_added_error_of_a_conv_matches_numpy_quantizing_its_float_input(fragile):
    res, x = fragile
    rep = tt.quantize.debug(res.float_model, res.model, x)
    conv2 = {n.node: n for n in rep.nodes}["conv2"]
    m = onnx.load_from_string(res.float_model.to_bytes())
    w = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    # The float model's values, computed in numpy: conv1 -> relu, the input conv2 reads.
    r1 = np.maximum(_conv(x, w["w1"], w["b1"]), 0).astype(np.float32)
    ref = _conv(r1, w["w2"], w["b2"])
    sx, zx = float(res.scales["r1"].scale[0]), int(res.scales["r1"].zero_point[0])
    sw = float(res.scales["w2"].scale[0])
    xq = _qdq(r1, sx, zx, -128, 127)
    wq = _qdq(w["w2"], sw, 0, -127, 127)
    bias_scale = np.float32(np.float32(sx) * np.float32(sw))
    bq = np.rint(w["b2"] / bias_scale) * np.float64(bias_scale)
    got = _conv(xq, wq, bq)
    assert conv2.added_sqnr_db == pytest.approx(_sqnr(ref, got), abs=0.02)
    assert conv2.added_max_abs == pytest.approx(float(np.max(np.abs(got - ref))), rel=1e-3, abs=1e-5)
    # The first layer reads the graph input: it inherits nothing, its total is what it adds.
    conv1 = {n.node: n for n in rep.nodes}["conv1"]
    assert conv1.total_sqnr_db == pytest.approx(conv1.added_sqnr_db, abs=1e-6)


def test_total_error_at_the_output_agrees_with_onnxruntimes_int8_run(fragile):
    import onnxruntime as ort

    res, x = fragile
    rep = res.debug(x)
    fc = {n.node: n for n in rep.nodes}["fc"]
    ref = ort.InferenceSession(res.float_model.to_bytes(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    q = ort.InferenceSession(res.model.to_bytes(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    # onnxruntime runs integer kernels (its own requantization rounding): close, not equal.
    assert fc.total_sqnr_db == pytest.approx(_sqnr(ref.astype(np.float64), q.astype(np.float64)), abs=1.5)


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.rows: list[tuple[str, str]] = []
        self.data_script = False
        self.graph = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(str(a["id"]))
        if tag == "tr" and a.get("data-node"):
            self.rows.append((str(a["data-node"]), str(a.get("class"))))
        self.data_script = tag == "script" and a.get("id") == "tether-graph-data"

    def handle_data(self, data: str) -> None:
        if self.data_script:
            self.graph += data


def test_html_has_the_table_the_worst_nodes_and_a_graph_coloured_by_added_error(fragile, tmp_path):
    res, x = fragile
    rep = res.debug(x)
    rep.to_html(tmp_path / "debug.html")
    page = _Page()
    page.feed((tmp_path / "debug.html").read_text(encoding="utf-8"))
    assert {"int8-debug", "worst", "graph", "graph-svg", "tether-graph-data", "tether-graph"} <= page.ids
    assert [r[0] for r in page.rows] == [n.node for n in rep.nodes]
    assert dict(page.rows)["conv1"] == "worst"
    data = json.loads(page.graph)
    ranked = {n["name"]: n["sensitivity"]["rank"] for n in data["nodes"] if "sensitivity" in n}
    assert ranked["conv1"] == 1 and set(ranked) == {n.node for n in rep.nodes}
    assert data["sensitivity"] is True and data["sens_label"]


def test_models_sharing_no_values_are_refused_with_a_typed_error(fragile):
    res, x = fragile
    other = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], "relu")], "other",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2, 6, 6])]),
        opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(tt.ArgumentError, match="no quantized node .* could be measured"):
        tt.quantize.debug(tt.load(other.SerializeToString()), res.model, x)


def test_cli_debug_int8_writes_the_json_and_names_the_worst_node(fragile, tmp_path, capsys):
    from tether.cli import main

    res, x = fragile
    res.float_model.save(tmp_path / "f.onnx")
    res.save(tmp_path / "q.onnx")
    np.savez(tmp_path / "d.npz", x=x)
    assert main(["debug", "int8", str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"), "--data",
                 str(tmp_path / "d.npz"), "--json", str(tmp_path / "r.json")]) == 0
    assert "worst by added error: conv1" in capsys.readouterr().out
    assert json.loads((tmp_path / "r.json").read_text())["worst"][0] == "conv1"
    assert main(["debug", "int8", str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"), "--data",
                 str(tmp_path / "missing.npz")]) == 2


def test_onnxruntimes_qdq_model_with_relus_folded_is_debugged_too(fragile, tmp_path):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    _, x = fragile
    (tmp_path / "f.onnx").write_bytes(_cnn(100.0))
    xc = np.random.default_rng(0).normal(0, 1, (48, 2, 6, 6)).astype(np.float32)
    xc[:, 1] *= 1e-3
    calib = iter([{"x": b} for b in np.split(xc, 3)])

    class Reader(CalibrationDataReader):
        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(calib, None)

    quantize_static(str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=False)
    rep = tt.quantize.debug(tmp_path / "f.onnx", tmp_path / "q.onnx", x)
    by = {n.node: n for n in rep.nodes}
    # onnxruntime drops each Relu into its output's range: the conv writes the Relu's value name,
    # which the comparison clamps at 0 as the float Relu does.
    assert rep.worst(1)[0].node == "conv1" and by["conv1"].added_sqnr_db < 20
    assert by["conv2"].added_sqnr_db > 30 and by["conv2"].total_sqnr_db < 20
