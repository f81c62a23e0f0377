"""The graph view of the HTML parity report, drawn by its own script in headless Chromium.

Oracles: the ONNX file itself (nodes, edges, longest-path layers, module prefixes of the names,
computed here from the protobuf), onnxruntime run on both models with every intermediate as an
output (which values leave tolerance, by numpy's allclose) and the PNG of a screenshot."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_parity_html import _chromium, _parse, chromium  # noqa: F401  (chromium: a fixture)
from tether.parity import OnnxRuntimeRunner, Tolerance, compare

RED, GREEN, GREY, PURPLE = "#d7301f", "#1a9850", "#d9d9d9", "#bcbddc"
# Worst first, as the legend orders them.
SEVERITY = [RED, "#fc8d59", "#fee08b", "#a6d96a", GREEN, PURPLE, "#c6dbef", GREY]
HOSTILE = "<img src=x onerror=alert(1)>&\"head"
PERTURBED = "/encoder/layer.1/mlp/MatMul"
WIDTH = 8
X = np.random.default_rng(5).standard_normal((2, WIDTH)).astype(np.float32)


def _mlp(blocks: int, perturb: tuple[int, str] | None = None, head: str = HOSTILE) -> onnx.ModelProto:
    """Residual blocks named as torch.onnx names a module's nodes (``/encoder/layer.0/attn/MatMul``)."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for b in range(blocks):
        for part in ("attn", "mlp"):
            w = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
            if perturb == (b, part):
                w[0, 0] += 0.5
            p = f"/encoder/layer.{b}/{part}"
            inits.append(numpy_helper.from_array(w, f"w{b}{part}"))
            nodes += [helper.make_node("MatMul", [prev, f"w{b}{part}"], [f"{p}/mm"], name=f"{p}/MatMul"),
                      helper.make_node("Tanh", [f"{p}/mm"], [f"{p}/t"], name=f"{p}/Tanh"),
                      helper.make_node("Add", [f"{p}/t", prev], [f"{p}/out"], name=f"{p}/Add")]
            prev = f"{p}/out"
    nodes.append(helper.make_node("Relu", [prev], ["y"], name=head))
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, WIDTH])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, WIDTH])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _wide(blocks: int, branches: int = 4) -> onnx.ModelProto:
    """Blocks of parallel branches joined by a Sum: layers several nodes wide."""
    w = numpy_helper.from_array(np.eye(WIDTH, dtype=np.float32), "w")
    nodes, prev = [], "x"
    for b in range(blocks):
        outs = []
        for k in range(branches):
            p = f"/blocks/{b}/branch{k}"
            nodes += [helper.make_node("MatMul", [prev, "w"], [f"{p}/mm"], name=f"{p}/MatMul"),
                      helper.make_node("Tanh", [f"{p}/mm"], [f"{p}/t"], name=f"{p}/Tanh")]
            outs.append(f"{p}/t")
        nodes.append(helper.make_node("Sum", outs, [f"/blocks/{b}/out"], name=f"/blocks/{b}/Sum"))
        prev = f"/blocks/{b}/out"
    nodes.append(helper.make_node("Relu", [prev], ["y"], name="/head/Relu"))
    g = helper.make_graph(nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, WIDTH])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, WIDTH])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _edges(m: onnx.ModelProto) -> set[tuple[str, str]]:
    producer = {o: n.name for n in m.graph.node for o in n.output}
    return {(producer[i], n.name) for n in m.graph.node for i in n.input if i in producer}


def _layers(m: onnx.ModelProto) -> dict[str, int]:
    """Longest path from the graph inputs, in nodes (the file is in topological order)."""
    layer: dict[str, int] = {}
    preds: dict[str, list[str]] = {}
    for a, b in _edges(m):
        preds.setdefault(b, []).append(a)
    for n in m.graph.node:
        layer[n.name] = max((layer[p] + 1 for p in preds.get(n.name, [])), default=0)
    return layer


def _prefixes(names: list[str]) -> dict[str, int]:
    """Each ``/a/b`` scope of the names with the number of nodes inside it."""
    count: dict[str, int] = {}
    for name in names:
        parts = name.split("/")[1:-1] if name.startswith("/") else []
        for k in range(len(parts)):
            scope = "/" + "/".join(parts[: k + 1])
            count[scope] = count.get(scope, 0) + 1
    return count


def _data(page: str) -> dict:
    start = page.index('<script type="application/json" id="tether-graph-data">')
    start = page.index(">", start) + 1
    return json.loads(page[start:page.index("</script>", start)])


# The page as a user drives it: click the first divergent node, collapse a module by its tab,
# open it again; the findings go to the DOM for --dump-dom.
_PROBE = """<script>
(function () {
  var out = {}, svg = document.getElementById("graph-svg");
  function click(e) { e.dispatchEvent(new MouseEvent("click", {bubbles: true})); }
  function q(sel) { return svg.querySelectorAll(sel); }
  out.nodes = q("g.node").length;
  var first = q("g.node.first-divergent");
  out.first = first.length;
  click(first[0]);
  var box = document.getElementById("graph-details");
  out.detailsTitle = box.querySelector("h3").textContent;
  out.detailsText = box.textContent;
  out.detailsCells = Array.prototype.map.call(box.querySelectorAll("tbody td"), function (td) { return td.textContent; });
  click(svg.querySelector('g.group-tab[data-group="/encoder/layer.1"]'));
  out.collapsedNodes = q("g.node").length;
  out.collapsedBoxes = Array.prototype.map.call(q("g.group-node"), function (g) {
    return [g.getAttribute("data-group"), g.getAttribute("data-members"), g.getAttribute("data-fill"),
            g.classList.contains("first-divergent")];
  });
  click(q("g.group-node")[0]);
  out.reopenedNodes = q("g.node").length;
  var pre = document.createElement("pre"); pre.id = "graph-probe"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("graph")
    ref, cand = folder / "ref.onnx", folder / "cand.onnx"
    onnx.save(_mlp(3), str(ref))
    onnx.save(_mlp(3, perturb=(1, "mlp")), str(cand))
    return ref, cand


@pytest.fixture(scope="module")
def page(files: tuple[Path, Path]) -> Path:
    ref, cand = files
    rep = compare(OnnxRuntimeRunner(str(ref)), OnnxRuntimeRunner(str(cand)), {"x": X}, layerwise=True)
    path = ref.parent / "report.html"
    rep.to_html(path)
    return path


@pytest.fixture(scope="module")
def probed(chromium: str, page: Path) -> tuple[object, dict]:  # noqa: F811
    probed_page = page.parent / "probed.html"
    probed_page.write_text(page.read_text(encoding="utf-8").replace("</body>", _PROBE + "</body>"), encoding="utf-8")
    dom = _parse(_chromium(chromium, probed_page, page.parent / "profile", "--window-size=1400,1000",
                           "--dump-dom").stdout)
    return dom, json.loads(dom.find("pre", id="graph-probe").text())


class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.refs += [v or "" for k, v in attrs if k in ("src", "href", "xlink:href", "action", "data", "poster")]


def test_page_has_no_external_references(page: Path, probed: tuple[object, dict]) -> None:
    text = page.read_text(encoding="utf-8")
    parsed = _Refs()
    parsed.feed(text)
    assert "link" not in parsed.tags and "iframe" not in parsed.tags
    assert not [r for r in parsed.refs if r.lower().startswith(("http:", "https:", "//", "file:"))], parsed.refs
    assert "@import" not in text and "url(http" not in text.replace(" ", "")
    # After the script drew the graph: only in-page references (the arrow marker) remain.
    dom, _ = probed
    drawn = [v for n in dom.iter() for k, v in n.attrs.items() if k in ("src", "href", "xlink:href")]
    assert all(not v.lower().startswith(("http:", "https:", "//")) for v in drawn), drawn
    # The hostile node name stays text: no element was made from it.
    assert not [n for n in dom.iter() if n.tag == "img"]


def test_embedded_data_holds_every_node_and_edge_of_the_model(page: Path, files: tuple[Path, Path]) -> None:
    m = onnx.load(str(files[0]))
    data = _data(page.read_text(encoding="utf-8"))
    assert len(data["nodes"]) == len(m.graph.node)
    names = [n["name"] for n in data["nodes"]]
    assert sorted(names) == sorted(n.name for n in m.graph.node)
    assert {(names[a], names[b]) for a, b, _ in data["edges"]} == _edges(m)


def test_chromium_draws_one_box_per_node_in_longest_path_layers(probed: tuple[object, dict],
                                                                files: tuple[Path, Path]) -> None:
    dom, found = probed
    m = onnx.load(str(files[0]))
    drawn = dom.find_all("g", class_="node")
    assert found["nodes"] == len(drawn) == len(m.graph.node)
    layers = _layers(m)
    assert {g.attrs["data-name"]: int(g.attrs["data-layer"]) for g in drawn} == layers


def _ort_values(path: Path, x: np.ndarray) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    m = onnx.load(str(path))
    outs = [o for n in m.graph.node for o in n.output]
    del m.graph.output[:]
    m.graph.output.extend(helper.make_empty_tensor_value_info(o) for o in outs)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip(outs, sess.run(outs, {"x": x}), strict=True))


def test_perturbed_node_is_the_marked_first_divergent_node_and_colours_follow_the_errors(
        probed: tuple[object, dict], files: tuple[Path, Path]) -> None:
    dom, found = probed
    first = dom.find_all("g", class_="first-divergent")
    assert found["first"] == len(first) == 1 and first[0].attrs["data-name"] == PERTURBED
    # onnxruntime on both files, on the report's input, with float32's default tolerance.
    ref, cand = _ort_values(files[0], X), _ort_values(files[1], X)
    tol = Tolerance.for_dtype(np.float32)
    m = onnx.load(str(files[0]))
    for g in dom.find_all("g", class_="node"):
        node = next(n for n in m.graph.node if n.name == g.attrs["data-name"])
        r, c = ref[node.output[0]], cand[node.output[0]]
        diverges = not np.allclose(c, r, atol=tol.atol, rtol=tol.rtol)
        assert (g.attrs["data-fill"] == RED) == diverges, (node.name, float(np.abs(c - r).max()))
        assert [e.attrs["fill"] for e in g.find_all("rect", class_="box")] == [g.attrs["data-fill"]]
    # Nodes before the perturbed one compute the same function on both sides.
    assert dom.find("g", **{"data-name": "/encoder/layer.1/attn/Add"}).attrs["data-fill"] == GREEN


def test_click_on_a_node_shows_its_op_values_and_error(probed: tuple[object, dict], files: tuple[Path, Path]) -> None:
    _, found = probed
    assert found["detailsTitle"] == PERTURBED
    assert "MatMul" in found["detailsText"] and "w1mlp" in found["detailsText"]  # op and inputs
    cells = found["detailsCells"]
    assert cells[:2] == ["/encoder/layer.1/mlp/mm", "FAIL"]
    r = _ort_values(files[0], X)["/encoder/layer.1/mlp/mm"].astype(np.float64)
    c = _ort_values(files[1], X)["/encoder/layer.1/mlp/mm"].astype(np.float64)
    assert float(cells[2]) == pytest.approx(np.abs(c - r).max(), rel=1e-3)


def test_nodes_group_by_module_prefix_and_a_module_collapses_into_one_box(page: Path,
                                                                          probed: tuple[object, dict]) -> None:
    data = _data(page.read_text(encoding="utf-8"))
    want = {g: k for g, k in _prefixes([n["name"] for n in data["nodes"]]).items() if k > 1}
    assert {g: v["count"] for g, v in data["groups"].items()} == want
    dom, found = probed
    assert {g.attrs["data-group"] for g in dom.find_all("g", class_="group-box")} == set(want)
    # Collapsing /encoder/layer.1 (6 nodes, the perturbed one among them): one red box, marked.
    assert found["collapsedBoxes"] == [["/encoder/layer.1", "6", RED, True]]
    assert found["collapsedNodes"] == found["nodes"] - 6
    assert found["reopenedNodes"] == found["nodes"]


def test_screenshot_of_the_graph_is_not_blank(chromium: str, page: Path, tmp_path: Path) -> None:  # noqa: F811
    from PIL import Image

    shot = tmp_path / "graph.png"
    _chromium(chromium, page, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1400,1800")
    px = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3).astype(np.int64)
    packed = px[:, 0] << 16 | px[:, 1] << 8 | px[:, 2]
    assert np.unique(packed).size > 20
    for hex_colour in (RED, GREEN):
        assert int((packed == int(hex_colour[1:], 16)).sum()) > 500, f"no {hex_colour} node in the screenshot"


def test_report_without_layerwise_results_draws_grey_nodes_with_a_note(chromium: str, files: tuple[Path, Path],  # noqa: F811
                                                                      tmp_path: Path) -> None:
    ref, cand = files
    rep = compare(OnnxRuntimeRunner(str(ref)), OnnxRuntimeRunner(str(cand)))
    path = tmp_path / "plain.html"
    rep.to_html(path)
    dom = _parse(_chromium(chromium, path, tmp_path / "profile", "--dump-dom").stdout)
    drawn = dom.find_all("g", class_="node")
    assert len(drawn) == len(onnx.load(str(ref)).graph.node)
    assert {g.attrs["data-fill"] for g in drawn} == {GREY}
    assert "no layer-wise results" in dom.find("p", id="graph-note").text()
    assert dom.find_all("g", class_="first-divergent") == []


def test_a_report_on_models_in_memory_draws_the_graph_they_ran(files: tuple[Path, Path]) -> None:
    import tether as tt

    ref, cand = files
    rep = compare(OnnxRuntimeRunner(tt.load(ref.read_bytes())), OnnxRuntimeRunner(tt.load(cand.read_bytes())))
    data = _data(rep.to_html())
    assert len(data["nodes"]) == len(onnx.load(str(ref)).graph.node)


def test_dynamo_module_scopes_group_the_nodes() -> None:
    """Node names without scopes: the modules come from the dynamo exporter's metadata."""
    import tether as tt
    from tether.parity._graph_view import graph_data
    from tether.parity._report import ParityReport

    m = _mlp(2, head="node_Relu_0")
    scopes: dict[str, list[str]] = {}
    for k, n in enumerate(m.graph.node):
        if n.name.startswith("/"):
            block, part = n.name.split("/")[2:4]
            path = ["", "encoder", f"encoder.{block}", f"encoder.{block}.{part}"]
            classes = ["M", "Encoder", "Block", "Linear"]
            scopes[n.name] = path[1:]
            n.name = f"node_{n.op_type}_{k}"
            n.metadata_props.add(key="pkg.torch.onnx.name_scopes", value=repr([*path, "aten.op"]))
            n.metadata_props.add(key="pkg.torch.onnx.class_hierarchy", value=repr([*classes, "aten.op"]))
    model = tt.load(m.SerializeToString())
    rep = ParityReport("a", "b", Tolerance(), [], 1)
    data = graph_data(rep, model)
    by_module: dict[str, int] = {}
    for modules in scopes.values():
        for mod in modules:
            by_module[mod] = by_module.get(mod, 0) + 1
    assert {g: v["count"] for g, v in data["groups"].items()} == by_module
    assert all(n["status"] == "none" for n in data["nodes"])


def test_quantize_report_colours_nodes_by_int8_sensitivity(chromium: str, tmp_path: Path) -> None:  # noqa: F811
    import tether as tt
    from tether.parity._html import render

    rng = np.random.default_rng(3)
    nodes, inits, prev = [], [], "x"
    for k in range(3):
        w = rng.standard_normal((16, 16)).astype(np.float32) * (4.0 if k == 1 else 0.3)
        inits.append(numpy_helper.from_array(w, f"w{k}"))
        nodes += [helper.make_node("MatMul", [prev, f"w{k}"], [f"m{k}"], name=f"/fc{k}/MatMul"),
                  helper.make_node("Relu", [f"m{k}"], [f"r{k}"], name=f"/fc{k}/Relu")]
        prev = f"r{k}"
    nodes[-1].output[0] = "y"
    g = helper.make_graph(nodes, "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], inits)
    path = tmp_path / "q.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    data_in = [rng.standard_normal((4, 16)).astype(np.float32) for _ in range(4)]
    res = tt.quantize.static(str(path), data_in, eval_samples=16, runner="onnxruntime", sensitivity_analysis=True)
    assert res.report is not None and res.sensitivity
    assert _data(res.report.to_html())["sensitivity"] is True  # the report keeps the graph it compared
    page = tmp_path / "q.html"
    page.write_text(render(res.report, model=res.float_model), encoding="utf-8")
    data = _data(page.read_text(encoding="utf-8"))
    assert data["sensitivity"] is True
    by_name = {n["name"]: n for n in data["nodes"]}
    assert {s.node for s in res.sensitivity} <= set(by_name)
    probe = page.parent / "q-probe.html"
    switch = ('<script>var s = document.getElementById("graph-mode"); s.value = "sens"; '
              's.dispatchEvent(new Event("change"));</script></body>')
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", switch), encoding="utf-8")
    dom = _parse(_chromium(chromium, probe, tmp_path / "profile", "--dump-dom").stdout)
    fill = {g.attrs["data-name"]: g.attrs["data-fill"] for g in dom.find_all("g", class_="node")}
    assert len(fill) == len(res.float_model.nodes)
    # A lower SQNR never gets a milder colour; nodes outside the analysis are grey.
    ranked = sorted(res.sensitivity, key=lambda s: s.sqnr_db)
    severities = [SEVERITY.index(fill[s.node]) for s in ranked]
    assert severities == sorted(severities)
    analysed = {s.node for s in res.sensitivity} | set(res.float_nodes)
    assert all(fill[n] == GREY for n in fill if n not in analysed)
    assert all(fill[n] == PURPLE for n in res.float_nodes if n in fill)


def test_a_505_node_graph_draws_every_node_without_overlap(chromium: str, tmp_path: Path) -> None:  # noqa: F811
    import re

    import tether as tt
    from tether.parity._html import render
    from tether.parity._report import ParityReport

    m = _wide(56)
    page = tmp_path / "big.html"
    page.write_text(render(ParityReport("a", "b", Tolerance(), [], 1), model=tt.load(m.SerializeToString())),
                    encoding="utf-8")
    dom = _parse(_chromium(chromium, page, tmp_path / "profile", "--dump-dom").stdout)
    drawn = dom.find_all("g", class_="node")
    assert len(drawn) == len(m.graph.node) == 505
    assert {g.attrs["data-name"]: int(g.attrs["data-layer"]) for g in drawn} == _layers(m)
    rows: dict[str, list[float]] = {}
    for g in drawn:
        x, y = map(float, re.fullmatch(r"translate\(([-\d.e]+),([-\d.e]+)\)", g.attrs["transform"]).groups())
        rows.setdefault(g.attrs["data-layer"], []).append(x)
    width = float(drawn[0].find("rect", class_="box").attrs["width"])
    for xs in rows.values():
        xs.sort()
        assert all(b - a >= width for a, b in zip(xs, xs[1:], strict=False))


def test_a_node_shows_its_worst_output_and_fused_values_are_marked() -> None:
    import tether as tt
    from tether.parity import LayerResult, compare_arrays
    from tether.parity._graph_view import graph_data
    from tether.parity._report import ParityReport

    g = helper.make_graph([helper.make_node("Split", ["x"], ["a", "b"], name="split", axis=1),
                           helper.make_node("Relu", ["a"], ["ra"], name="relu_a"),
                           helper.make_node("Relu", ["b"], ["rb"], name="relu_b")], "s",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("ra", TensorProto.FLOAT, [2, 2]),
                           helper.make_tensor_value_info("rb", TensorProto.FLOAT, [2, 2])])
    model = tt.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    r = np.ones((2, 2), np.float32)
    tol = Tolerance(atol=1e-3, rtol=0.0)
    layers = [LayerResult(0, "split", "Split", "a", "compared", compare_arrays(r, r, tol)),
              LayerResult(0, "split", "Split", "b", "compared", compare_arrays(r, r + 0.5, tol)),
              LayerResult(1, "relu_a", "Relu", "ra", "fused", fused_into="kernel (Relu)")]
    rep = ParityReport("a", "b", tol, [], 1, layers=layers)
    data = graph_data(rep, model)
    by_name = {n["name"]: n for n in data["nodes"]}
    assert by_name["split"]["status"] == "fail" and by_name["split"]["max_abs"] == pytest.approx(0.5)
    assert [v["ok"] for v in by_name["split"]["values"]] == [True, False]
    assert by_name["relu_a"]["status"] == "fused" and by_name["relu_b"]["status"] == "none"
    assert data["nodes"][data["first"]]["name"] == "split"


def test_a_model_file_that_no_longer_loads_leaves_a_note_not_an_error(tmp_path: Path) -> None:
    ref, cand = tmp_path / "ref.onnx", tmp_path / "cand.onnx"
    onnx.save(_mlp(1), str(ref))
    onnx.save(_mlp(1, perturb=(0, "mlp")), str(cand))
    rep = compare(OnnxRuntimeRunner(str(ref)), OnnxRuntimeRunner(str(cand)), {"x": X})
    assert _data(rep.to_html())["nodes"]  # drawn from the graph the comparison ran
    rep.graph = None  # as for a report merged from states (tt.distributed): only the files named remain
    for path in (ref, cand):
        path.write_bytes(b"\x08\x07not a model")
    page = rep.to_html()
    assert 'id="tether-graph-data"' not in page
    assert f"{ref} could not be read" in page
