"""tt.parity.reduce and `tether debug reduce`: a model that fails a comparison is cut down to the
smallest subgraph that still fails, and the file written fails again when checked independently
(onnxruntime against the golden bundle written beside it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tether as tt
from onnx import TensorProto, helper, numpy_helper
from tether.cli import main

WIDTH = 16


def _mlp(blocks: int, softmax: bool = True) -> onnx.ModelProto:
    """A stem, then ``blocks`` residual blocks of two branches (MatMul+Add+Relu and
    MatMul+Add+Tanh, merged, scaled, added back), then a head: 3 + 9 * blocks + 1 or 2 nodes."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []

    def w(name: str, shape: tuple[int, ...], scale: float) -> str:
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def node(op: str, ins: list[str], out: str, **kw: object) -> str:
        nodes.append(helper.make_node(op, ins, [out], name=out, **kw))
        return out

    h = node("Relu", [node("Add", [node("MatMul", ["x", w("stem.w", (WIDTH, WIDTH), 0.25)], "stem.mm"),
                                   w("stem.b", (WIDTH,), 0.1)], "stem.add")], "stem.relu")
    for i in range(blocks):
        p = f"b{i}"
        a = node("MatMul", [h, w(f"{p}.wa", (WIDTH, WIDTH), 0.25)], f"{p}.a.mm")
        a = node("Relu", [node("Add", [a, w(f"{p}.ba", (WIDTH,), 0.1)], f"{p}.a.add")], f"{p}.a.relu")
        b = node("MatMul", [h, w(f"{p}.wb", (WIDTH, WIDTH), 0.25)], f"{p}.b.mm")
        b = node("Tanh", [node("Add", [b, w(f"{p}.bb", (WIDTH,), 0.1)], f"{p}.b.add")], f"{p}.b.tanh")
        m = node("Mul", [node("Add", [a, b], f"{p}.merge"), w(f"{p}.gamma", (WIDTH,), 0.2)], f"{p}.scaled")
        h = node("Add", [h, m], f"{p}.residual")
    y = node("MatMul", [h, w("head.w", (WIDTH, 10), 0.25)], "head.mm")
    if softmax:
        y = node("Softmax", [y], "probs", axis=-1)
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, WIDTH])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, [4, 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _scaled(model: onnx.ModelProto, weight: str, factor: float) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    t = next(t for t in out.graph.initializer if t.name == weight)
    t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(factor), weight))
    return out


def _ort_values(path: Path, x: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    """``names`` computed by onnxruntime from ``path``, as extra graph outputs."""
    m = onnx.load(str(path))
    m.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip(names, sess.run(names, {"x": x}), strict=True))


def _still_fails(reduced: str, golden: str, atol: float, rtol: float) -> bool:
    """onnxruntime runs the reduced file on the bundle's inputs; True when an output leaves tolerance."""
    inputs, outputs = tt.parity.load_golden(golden).samples[0]
    sess = ort.InferenceSession(reduced, providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, inputs), strict=True))
    return not all(np.allclose(got[n], r, atol=atol, rtol=rtol) for n, r in outputs.items())


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("reduce")
    good = _mlp(blocks=6)
    assert len(good.graph.node) == 59
    onnx.save(good, str(d / "good.onnx"))
    # b3.wa feeds a MatMul that tether fuses with its Add and Relu into one kernel.
    onnx.save(_scaled(good, "b3.wa", 1.5), str(d / "bad.onnx"))
    np.save(d / "x.npy", np.random.default_rng(1).standard_normal((4, WIDTH)).astype(np.float32))
    return d


def test_perturbed_weight_reduces_to_its_node_which_still_fails_in_onnxruntime(files, tmp_path):
    x = np.load(files / "x.npy")
    kernels = [s["fused_from"] for s in tt.parity.TetherRunner(files / "bad.onnx").steps()]
    assert ["b3.a.mm", "b3.a.add", "b3.a.relu"] in kernels  # the node runs inside a fused kernel
    res = tt.parity.reduce(files / "bad.onnx", x, against=str(files / "good.onnx"), output=tmp_path / "r.onnx")
    assert res.failed and res.nodes_before == 59 and res.nodes_after <= 3
    assert ("b3.a.mm", "MatMul") in res.nodes
    assert res.model_path == str(tmp_path / "r.onnx") and res.golden_path == str(tmp_path / "r.golden")
    assert "from 59 nodes to" in str(res) and "b3.a.mm" in str(res)
    # The bundle holds the good model's values, as onnxruntime computes them from the good file.
    inputs, outputs = tt.parity.load_golden(res.golden_path).samples[0]
    want = _ort_values(files / "good.onnx", x, [*inputs, *outputs])
    for name, a in {**inputs, **outputs}.items():
        np.testing.assert_allclose(a, want[name], rtol=1e-6, atol=1e-6)
    assert _still_fails(res.model_path, res.golden_path, atol=1e-5, rtol=1e-4)


def test_onnxruntime_candidate_reduces_alike_and_a_run_budget_still_writes_a_failing_model(files, tmp_path):
    x = np.load(files / "x.npy")
    res = tt.parity.reduce(files / "bad.onnx", x, against=str(files / "good.onnx"), runner="onnxruntime",
                           output=tmp_path / "o.onnx")
    assert res.nodes == [("b3.a.mm", "MatMul")]
    # Two runs: the search stops early, and what it writes still fails.
    res = tt.parity.reduce(files / "bad.onnx", x, against=str(files / "good.onnx"), output=tmp_path / "m.onnx",
                           max_runs=2)
    assert res.runs == 2 and any("max_runs=2" in n for n in res.notes) and 3 < res.nodes_after < 59
    assert _still_fails(res.model_path, res.golden_path, atol=1e-5, rtol=1e-4)


def test_model_that_passes_is_not_reduced_and_nothing_is_written(files, tmp_path):
    res = tt.parity.reduce(files / "good.onnx", np.load(files / "x.npy"), output=tmp_path / "r.onnx")
    assert not res.failed and res.model_path is None and res.value is None
    assert "does not fail" in str(res)
    assert list(tmp_path.iterdir()) == []


def test_golden_bundle_reference_with_and_without_values_inside_the_graph(files, tmp_path):
    x = np.load(files / "x.npy")
    names = [n.output[0] for n in onnx.load(str(files / "good.onnx")).graph.node]
    values = _ort_values(files / "good.onnx", x, names)
    tt.parity.save_golden(tmp_path / "layers", [({"x": x}, values)])
    res = tt.parity.reduce(files / "bad.onnx", against=tmp_path / "layers", output=tmp_path / "a.onnx")
    assert res.nodes_after <= 3 and ("b3.a.mm", "MatMul") in res.nodes
    assert _still_fails(res.model_path, res.golden_path, atol=1e-5, rtol=1e-4)
    # Outputs alone: onnxruntime on bad.onnx disagrees with them too, so no cut inside is known.
    tt.parity.save_golden(tmp_path / "outputs", [({"x": x}, {"probs": values["probs"]})])
    res = tt.parity.reduce(files / "bad.onnx", against=tmp_path / "outputs", output=tmp_path / "b.onnx")
    assert res.failed and res.nodes_after == 59 and any("holds only outputs" in n for n in res.notes)
    assert _still_fails(res.model_path, res.golden_path, atol=1e-5, rtol=1e-4)


def test_int8_model_against_its_float_model_reduces_to_the_badly_scaled_matmul(tmp_path):
    onnx.save(_mlp(blocks=2, softmax=False), str(tmp_path / "f.onnx"))
    rng = np.random.default_rng(2)
    q = tt.quantize.static(tmp_path / "f.onnx", rng.standard_normal((64, WIDTH)).astype(np.float32), batch_size=4,
                           eval_samples=0)
    q.save(tmp_path / "q.onnx")
    x = rng.standard_normal((4, WIDTH)).astype(np.float32)
    ok = tt.parity.reduce(tmp_path / "q.onnx", x, against=str(tmp_path / "f.onnx"), tolerance="int8")
    assert not ok.failed  # quantization alone stays within the int8 profile here
    # A weight scale three times too large: the weights of b1.b.mm dequantize three times too large.
    onnx.save(_scaled(onnx.load(str(tmp_path / "q.onnx")), "b1.wb_scale", 3.0), str(tmp_path / "bad.onnx"))
    res = tt.parity.reduce(tmp_path / "bad.onnx", x, against=str(tmp_path / "f.onnx"), tolerance="int8")
    assert res.failed and res.nodes_before > 60 and res.nodes_after <= 4
    assert res.value == "b1.b.mm" and ("b1.b.mm", "MatMul") in res.nodes
    assert res.model_path == str(tmp_path / "bad.reduced.onnx")
    want = _ort_values(tmp_path / "f.onnx", x, ["b1.b.mm"])["b1.b.mm"]
    np.testing.assert_allclose(tt.parity.load_golden(res.golden_path).samples[0][1]["b1.b.mm"], want, rtol=1e-6)
    assert _still_fails(res.model_path, res.golden_path, atol=5e-2, rtol=1e-1)


def test_cli_writes_the_reduced_model_and_exits_0_or_1_when_nothing_fails(files, tmp_path):
    r = subprocess.run([sys.executable, "-m", "tether.cli", "debug", "reduce", str(files / "bad.onnx"), "--against",
                        str(files / "good.onnx"), "--input", f"x={files / 'x.npy'}", "-o", str(tmp_path / "r.onnx")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "reduced bad.onnx from 59 nodes" in r.stdout
    assert _still_fails(str(tmp_path / "r.onnx"), str(tmp_path / "r.golden"), atol=1e-5, rtol=1e-4)
    assert main(["debug", "reduce", str(files / "good.onnx"), "-o", str(tmp_path / "g.onnx")]) == 1
    assert not (tmp_path / "g.onnx").exists()


@pytest.mark.parametrize("args, words", [
    (["missing.onnx"], "model 'missing.onnx': no such file"),
    (["{d}/bad.onnx", "--against", "onnxruntim"], "not 'onnxruntime', a model file or a golden bundle"),
    (["{d}/bad.onnx", "--against", "{d}/nope.onnx"], "no such file or directory"),
    (["{d}/bad.onnx", "-o", "{d}/no/such/r.onnx"], "No such file or directory"),
    (["{d}/bad.onnx", "-o", "{d}"], "is a folder"),
    (["{d}/bad.onnx", "--against", "{d}/good.onnx", "-o", "{d}/good.onnx"], "refusing to replace it"),
    (["{d}/bad.onnx", "--golden", "{d}"], "is not a golden bundle; refusing to replace it"),
    (["{d}/bad.onnx", "--input", "x"], "expected NAME=FILE.npy"),
    (["{d}/bad.onnx", "--input", "y={d}/x.npy"], "unknown input 'y'"),
])
def test_cli_bad_input_is_one_line_and_exit_2(files, capsys, args, words):
    before = sorted(p.name for p in files.iterdir())
    assert main(["debug", "reduce", *(a.format(d=files) for a in args)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("tether: error: ") and words in err, err
    assert sorted(p.name for p in files.iterdir()) == before
