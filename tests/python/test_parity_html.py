"""The HTML parity report as a browser sees it: headless Chromium loads the page, and the DOM it
returns holds the verdict, every output's metrics (checked against numpy on the same arrays), an
error histogram per output, the layer table and SNR chart with the first divergent layer marked,
the per-label table, and hostile names as text, never as markup."""

from __future__ import annotations

import shutil
import struct
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from tether.parity import CallableRunner, InputSpec, LayerResult, ParityReport, Tolerance, compare, compare_arrays

TOL = Tolerance(atol=1e-4, rtol=1e-3)
HOSTILE_OUTPUT = "<script>alert('out')</script>&y"
HOSTILE_CANDIDATE = 'noisy "fp32" <script>alert(\'cand\')</script>'
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


# --- a minimal DOM over html.parser ---------------------------------------------------------------

@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    text_parts: list[str | Node] = field(default_factory=list)  # own text and children, in order, for text()

    def iter(self) -> Iterator[Node]:
        yield self
        for c in self.children:
            yield from c.iter()

    def find_all(self, tag: str, **attrs: str) -> list[Node]:
        """Descendants with ``tag`` whose attributes equal ``attrs`` (``class_`` matches one class)."""
        want_class = attrs.pop("class_", None)
        return [n for n in self.iter() if n.tag == tag and all(n.attrs.get(k) == v for k, v in attrs.items())
                and (want_class is None or want_class in n.attrs.get("class", "").split())]

    def find(self, tag: str, **attrs: str) -> Node:
        found = self.find_all(tag, **attrs)
        assert len(found) == 1, f"expected one <{tag} {attrs}>, found {len(found)}"
        return found[0]

    def text(self) -> str:
        return "".join(p if isinstance(p, str) else p.text() for p in self.text_parts).strip()


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        self.stack[-1].text_parts.append(node)
        if tag not in _VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.stack.pop()

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].text_parts.append(data)


def _parse(markup: str) -> Node:
    b = _Builder()
    b.feed(markup)
    b.close()
    return b.root


# --- Chromium --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def chromium() -> str:
    exe = shutil.which("chromium")
    # `make test` installs Debian's chromium: a missing browser is a failure, not a skip.
    assert exe is not None, "headless Chromium is not installed (Debian package 'chromium')"
    return exe


def _chromium(exe: str, page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
           f"--user-data-dir={profile}", *args, page.as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"chromium failed ({done.returncode}): {done.stderr[-2000:]}"
    return done


def _dom(exe: str, page: Path, profile: Path) -> Node:
    return _parse(_chromium(exe, page, profile, "--dump-dom").stdout)


# --- reports with arrays numpy can check -----------------------------------------------------------

_RNG = np.random.default_rng(11)
BATCHES = [_RNG.standard_normal((4, 10)).astype(np.float32) for _ in range(2)]
NOISE = 2e-3 * _RNG.random((4, 10))
LABELS = np.array([0, 1, 2, 0, 1, 2, 0, 1])
SPEC = [InputSpec("x", np.dtype("float32"), (4, 10))]


def _ref(x: np.ndarray) -> dict[str, np.ndarray]:
    return {"y": np.tanh(x), "z": x.sum(1), HOSTILE_OUTPUT: 2 * x}


def _cand(x: np.ndarray) -> dict[str, np.ndarray]:
    return {"y": np.tanh(x) + NOISE, "z": x.sum(1), HOSTILE_OUTPUT: 2 * x + np.float32(5e-5)}


def _within(r: np.ndarray, c: np.ndarray) -> np.ndarray:
    """numpy's own closeness test, with the reference as ``b``."""
    return np.isclose(c.astype(np.float64), r.astype(np.float64), rtol=TOL.rtol, atol=TOL.atol)


def _abs_err(r: np.ndarray, c: np.ndarray) -> np.ndarray:
    return np.abs(c.astype(np.float64) - r.astype(np.float64))


# Hand-made layers: (node, op, status, reference, candidate, fused_into)
_A = _RNG.standard_normal(64).astype(np.float32)
LAYERS: list[tuple[str, str, str, np.ndarray | None, np.ndarray | None, str]] = [
    ("stem/conv", "Conv", "compared", _A, _A.copy(), ""),
    ("stem/relu", "Relu", "fused", None, None, "stem/conv"),
    ("block.0/matmul", "MatMul", "compared", _A, _A + np.float32(1e-6), ""),
    ("block.1/add <b>x</b>", "Add", "compared", _A, _A + np.float32(3e-2), ""),
    ("block.2/mul", "Mul", "compared", _A, _A * np.float32(1.5), ""),
    ("head/softmax", "Softmax", "missing", None, None, ""),
    ("encoder/" + "a_very_long_module_path_" * 10 + "matmul", "MatMul", "compared", _A, _A.copy(), ""),
]


def _numpy_first_divergent() -> str:
    """The first compared layer that numpy's closeness test rejects."""
    for node, _, status, r, c, _ in LAYERS:
        if status == "compared" and r is not None and c is not None and not _within(r, c).all():
            return node
    raise AssertionError("the hand-made layers must diverge somewhere")


def _layers() -> list[LayerResult]:
    return [LayerResult(i, node, op, f"v{i}", status, None if r is None else compare_arrays(r, c, TOL), fused)
            for i, (node, op, status, r, c, fused) in enumerate(LAYERS)]


@pytest.fixture(scope="module")
def failing_report() -> ParityReport:
    ref = CallableRunner(_ref, name="numpy", input_specs=SPEC)
    cand = CallableRunner(_cand, name=HOSTILE_CANDIDATE, input_specs=SPEC)
    rep = compare(ref, cand, [{"x": x} for x in BATCHES], tolerance=TOL, labels=LABELS.tolist(), label_output="y")
    rep.layers = _layers()
    return rep


@pytest.fixture(scope="module")
def passing_report() -> ParityReport:
    def same(x: np.ndarray) -> dict[str, np.ndarray]:
        return {"y": np.tanh(x), "empty": np.zeros((0, 3), np.float32)}

    ref = CallableRunner(same, name="numpy", input_specs=SPEC)
    cand = CallableRunner(same, name="numpy again", input_specs=SPEC)
    return compare(ref, cand, [{"x": BATCHES[0]}], tolerance=TOL)


@pytest.fixture(scope="module")
def failing_page(failing_report: ParityReport, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("html") / "failing.html"
    failing_report.to_html(path)
    return path


@pytest.fixture(scope="module")
def failing_dom(chromium: str, failing_page: Path, tmp_path_factory: pytest.TempPathFactory) -> Node:
    return _dom(chromium, failing_page, tmp_path_factory.mktemp("profile"))


@pytest.fixture(scope="module")
def passing_dom(chromium: str, passing_report: ParityReport, tmp_path_factory: pytest.TempPathFactory) -> Node:
    folder = tmp_path_factory.mktemp("html_pass")
    passing_report.to_html(folder / "passing.html")
    return _dom(chromium, folder / "passing.html", folder / "profile")


# --- tests -----------------------------------------------------------------------------------------

def test_header_shows_fail_verdict_names_tolerance_and_inputs(failing_dom: Node) -> None:
    mismatched = any(not _within(_ref(x)[k], _cand(x)[k]).all() for x in BATCHES for k in _ref(x))
    assert mismatched  # the numpy oracle says the candidate is out of tolerance somewhere
    assert failing_dom.find("p", id="verdict").text() == "FAIL"
    assert failing_dom.find("dd", class_="reference").text() == "numpy"
    assert failing_dom.find("dd", class_="candidate").text() == HOSTILE_CANDIDATE
    tol = failing_dom.find("dd", class_="tolerance").text()
    assert "numpy" in tol and f"atol {TOL.atol:g}" in tol and f"rtol {TOL.rtol:g}" in tol
    assert failing_dom.find("dd", class_="batches").text() == str(len(BATCHES))
    assert failing_dom.find("dd", class_="input_shapes").text() == "x: [4, 10]"


def test_outputs_table_matches_numpy_max_abs_and_mismatch_count(failing_dom: Node) -> None:
    table = failing_dom.find("table", id="outputs")
    names = [tr.attrs["data-output"] for tr in table.find_all("tr") if "data-output" in tr.attrs]
    assert names == ["y", "z", HOSTILE_OUTPUT]
    for name in names:
        pairs = [(_ref(x)[name], _cand(x)[name]) for x in BATCHES]
        max_abs = max(float(_abs_err(r, c).max()) for r, c in pairs)
        bad = sum(int((~_within(r, c)).sum()) for r, c in pairs)
        total = sum(r.size for r, _ in pairs)
        row = table.find("tr", **{"data-output": name})
        cell = row.find("td", class_="max_abs")
        assert float(cell.attrs["data-value"]) == pytest.approx(max_abs, rel=1e-9, abs=1e-12), name
        assert cell.text() == f"{max_abs:.4g}", name
        assert row.find("td", class_="mismatches").text() == f"{bad} of {total}", name
        assert row.find("td", class_="status").text() == ("ok" if bad == 0 else "FAIL"), name
        for cls in ("mean_abs", "max_rel", "cosine", "snr", "mismatch_fraction", "required_atol", "required_rtol",
                    "worst_index", "worst_reference", "worst_candidate", "problem"):
            row.find("td", class_=cls)


def test_each_output_with_error_gets_an_svg_histogram(failing_dom: Node) -> None:
    figures = failing_dom.find_all("figure", class_="histogram")
    assert sorted(f.attrs["data-output"] for f in figures) == sorted(["y", "z", HOSTILE_OUTPUT])
    for fig in figures:
        name = fig.attrs["data-output"]
        differs = any(_abs_err(_ref(x)[name], _cand(x)[name]).max() > 0 for x in BATCHES)
        if differs:
            assert fig.find_all("svg") or fig.find_all("img"), name
        else:
            assert not fig.find_all("svg") and "identical" in fig.text(), name


def test_layer_table_highlights_numpy_first_divergent_layer(failing_dom: Node) -> None:
    first = _numpy_first_divergent()
    rows = failing_dom.find("table", id="layers").find_all("tr")[1:]
    assert [tr.find("td", class_="node").text() for tr in rows] == [layer[0] for layer in LAYERS]
    marked = [tr for tr in rows if "first-divergent" in tr.attrs.get("class", "").split()]
    assert len(marked) == 1 and marked[0].attrs.get("id") == "first-divergent"
    assert marked[0].find("td", class_="node").text() == first
    assert failing_dom.find("a", href="#first-divergent").text() == first
    for tr, (node, _, status, r, c, fused) in zip(rows, LAYERS, strict=True):
        cell = tr.find("td", class_="max_abs")
        if r is None or c is None:
            assert cell.text() == ""
            assert tr.find("td", class_="status").text() == (f"fused into {fused}" if fused else status)
        else:
            assert float(cell.attrs["data-value"]) == pytest.approx(float(_abs_err(r, c).max()), abs=1e-12), node


def test_snr_chart_is_drawn_and_names_the_first_divergent_layer(failing_dom: Node) -> None:
    fig = failing_dom.find("figure", class_="snr")
    svg = fig.find("svg")
    first = _numpy_first_divergent()
    assert f"first divergent: {first}" in svg.text()


def test_slices_table_matches_numpy_top1_agreement(failing_dom: Node) -> None:
    ref_top = np.concatenate([np.argmax(_ref(x)["y"], -1) for x in BATCHES])
    cand_top = np.concatenate([np.argmax(_cand(x)["y"], -1) for x in BATCHES])
    rows = failing_dom.find("table", id="slices").find_all("tr")[1:]
    assert [tr.find("td", class_="name").text() for tr in rows] == [str(v) for v in np.unique(LABELS)]
    for tr, label in zip(rows, np.unique(LABELS), strict=True):
        sel = LABELS == label
        assert float(tr.find("td", class_="top1").attrs["data-value"]) == pytest.approx(
            float(np.mean(ref_top[sel] == cand_top[sel])))


def test_hostile_names_stay_text_and_inject_no_script(failing_dom: Node, failing_page: Path) -> None:
    scripts = failing_dom.find_all("script")  # only the page's own table tools, inline
    assert [(sc.attrs.get("id"), sc.attrs.get("src")) for sc in scripts] == [("tether-tables", None)]
    nodes = failing_dom.find_all("td", class_="node")
    assert all(not n.children for n in nodes)  # the <b> in a node name is text, not an element
    assert any(n.text() == "block.1/add <b>x</b>" for n in nodes)
    assert failing_dom.find("tr", **{"data-output": HOSTILE_OUTPUT}).find("td", class_="name").text() == HOSTILE_OUTPUT
    assert "<script>" not in failing_page.read_text(encoding="utf-8")


def test_page_loads_nothing_from_the_network(failing_dom: Node) -> None:
    for node in failing_dom.iter():
        for attr in ("src", "href"):
            value = node.attrs.get(attr, "")
            assert not value.startswith(("http:", "https:", "//")), (node.tag, value)
    assert failing_dom.find_all("link") == []


def test_passing_report_shows_pass_and_omits_layer_and_slice_sections(passing_dom: Node) -> None:
    assert passing_dom.find("p", id="verdict").text() == "PASS"
    assert passing_dom.find_all("table", id="layers") == [] and passing_dom.find_all("figure", class_="snr") == []
    assert passing_dom.find_all("table", id="slices") == []
    figures = {f.attrs["data-output"]: f for f in passing_dom.find_all("figure", class_="histogram")}
    assert set(figures) == {"y", "empty"}
    assert "identical" in figures["y"].text() and not figures["y"].find_all("svg")
    assert "no error sample" in figures["empty"].text()
    assert passing_dom.find("tr", **{"data-output": "y"}).find("td", class_="max_abs").text() == "0"


def test_screenshot_is_a_png_of_the_requested_size(chromium: str, failing_page: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    _chromium(chromium, failing_page, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1200,2000")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    assert struct.unpack(">II", data[16:24]) == (1200, 2000)
    assert len(data) > 10_000  # a blank page compresses to far less


# --- layout and table tools, measured and driven in the browser -----------------------------------

_PROBE = """<script>
(function () {
  var out = {}, t = document.getElementById("layers");
  out.tableRight = t.getBoundingClientRect().right;
  out.scrollWidth = document.documentElement.scrollWidth;
  out.innerWidth = window.innerWidth;
  function rows(onlyShown) {
    return Array.prototype.filter.call(t.tBodies[0].rows, function (r) { return !onlyShown || r.style.display !== "none"; })
      .map(function (r) { return r.cells[1].textContent; });
  }
  var heads = t.tHead.rows[0].cells;
  var col = Array.prototype.findIndex.call(heads, function (h) { return h.textContent === "max abs"; });
  heads[col].click(); out.ascending = rows(false);
  heads[col].click(); out.descending = rows(false);
  var f = document.getElementById("layer-filter");
  f.value = "BLOCK"; f.dispatchEvent(new Event("input")); out.filtered = rows(true);
  f.value = ""; f.dispatchEvent(new Event("input"));
  var c = document.getElementById("layer-failing");
  c.checked = true; c.dispatchEvent(new Event("change")); out.failing = rows(true);
  out.count = document.getElementById("layer-count").textContent;
  out.boxes = Array.prototype.map.call(document.querySelectorAll("figure.snr svg text"), function (e) {
    var b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom, e.textContent];
  });
  var pre = document.createElement("pre"); pre.id = "probe"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


@pytest.fixture(scope="module")
def probe(chromium: str, failing_page: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The failing page at 1400 px, with a script that measures the layout and drives the table
    tools as a user would (clicks, typing, a checkbox), its findings returned in the DOM."""
    import json

    folder = tmp_path_factory.mktemp("probe")
    page = folder / "probed.html"
    page.write_text(failing_page.read_text(encoding="utf-8").replace("</body>", _PROBE + "</body>"), encoding="utf-8")
    dom = _parse(_chromium(chromium, page, folder / "profile", "--window-size=1400,2000", "--dump-dom").stdout)
    return json.loads(dom.find("pre", id="probe").text())


def test_layer_table_fits_a_1400_pixel_page(probe: dict) -> None:
    assert probe["innerWidth"] == 1400
    assert probe["tableRight"] <= 1400 and probe["scrollWidth"] <= 1400, probe


def test_layer_table_sorts_by_a_clicked_column_with_empty_cells_last(probe: dict) -> None:
    compared = [(float(_abs_err(r, c).max()), node) for node, _, status, r, c, _ in LAYERS
                if status == "compared" and r is not None and c is not None]
    empty = [node for node, _, status, *_ in LAYERS if status != "compared"]
    ascending = [n for _, n in sorted(compared, key=lambda t: t[0])]
    descending = [n for _, n in sorted(compared, key=lambda t: -t[0])]
    # Equal values keep their order (a stable sort), as Python's sorted does.
    assert probe["ascending"] == ascending + empty
    assert probe["descending"] == descending + empty


def test_layer_table_filters_by_text_and_by_failure(probe: dict) -> None:
    # The rows stay in the order the last sort left them: compare as sets of rows.
    assert sorted(probe["filtered"]) == sorted(node for node, *_ in LAYERS if "block" in node.lower())
    failing = [node for node, _, status, r, c, _ in LAYERS
               if status == "compared" and r is not None and c is not None and not _within(r, c).all()]
    assert sorted(probe["failing"]) == sorted(failing)
    assert probe["count"] == f"{len(failing)} of {len(LAYERS)} rows"


def test_snr_chart_labels_do_not_overlap(probe: dict) -> None:
    boxes = [b for b in probe["boxes"] if b[4].strip()]
    assert any(b[4].startswith("first divergent:") for b in boxes)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            overlap_x = min(a[2], b[2]) - max(a[0], b[0])
            overlap_y = min(a[3], b[3]) - max(a[1], b[1])
            assert overlap_x <= 0.5 or overlap_y <= 0.5, (a, b)


def test_dataset_mode_names_the_batch_of_the_worst_element(failing_dom: Node) -> None:
    table = failing_dom.find("table", id="outputs")
    for name in ("y", HOSTILE_OUTPUT):
        errors = [float(_abs_err(_ref(x)[name], _cand(x)[name]).max()) for x in BATCHES]
        cell = table.find("tr", **{"data-output": name}).find("td", class_="worst_batch")
        assert cell.text() == str(int(np.argmax(errors))), name


def test_header_names_each_model_file_and_its_sha256(chromium: str, tmp_path: Path) -> None:
    import hashlib

    import onnx
    from onnx import helper, numpy_helper
    from tether.parity import OnnxRuntimeRunner, TetherRunner

    def model(path: Path, k: float) -> Path:
        g = helper.make_graph([helper.make_node("Mul", ["x", "k"], ["y"], name="scale")], "m",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
                              [numpy_helper.from_array(np.array(k, np.float32), "k")])
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
        return path

    a, b = model(tmp_path / "a.onnx", 2.0), model(tmp_path / "b.onnx", 2.5)
    rep = compare(OnnxRuntimeRunner(a), TetherRunner(b), np.ones(2, np.float32))
    rep.to_html(tmp_path / "r.html")
    dom = _dom(chromium, tmp_path / "r.html", tmp_path / "profile")
    for role, path in (("reference", a), ("candidate", b)):
        dd = dom.find("dd", class_=f"{role}_file")
        assert dd.find("span", class_="path").text() == str(path)
        assert dd.find("code", class_="sha256").text() == hashlib.sha256(path.read_bytes()).hexdigest()
