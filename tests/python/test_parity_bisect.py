"""Bisection: inputs in every form compare takes, fused kernels bisected node by node, and the
report naming the node that creates the error (text, JSON and HTML alike). The oracle is numpy:
the edited weight is known, and each node's output is recomputed from the weights."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
import tether as tt
from onnx import helper, numpy_helper
from tether.parity import OnnxRuntimeRunner, TetherRunner, bisect, compare


def _mlp(path: Path, edit: bool = False) -> Path:
    """x @ w1 + b1 -> Gelu -> @ w2; tether fuses the first three nodes into one kernel.
    ``edit`` scales one column of w1, as a bad conversion of that weight would."""
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((16, 32)) * 0.3).astype(np.float32)
    b1 = (rng.standard_normal(32) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((32, 4)) * 0.3).astype(np.float32)
    if edit:
        w1[:, 3] *= 1.5
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1.matmul"),
         helper.make_node("Add", ["h", "b1"], ["hb"], name="fc1.bias"),
         helper.make_node("Gelu", ["hb"], ["g"], name="act"),
         helper.make_node("MatMul", ["g", "w2"], ["y"], name="fc2")],
        "mlp", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"), numpy_helper.from_array(w2, "w2")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]), str(path))
    return path


def _weights(path: Path) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i).astype(np.float64) for i in onnx.load(str(path)).graph.initializer}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("bisect")
    return _mlp(folder / "good.onnx"), _mlp(folder / "edited.onnx", edit=True)


X = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)


def _numpy_matmul_error(good: Path, bad: Path) -> float:
    """max |x @ w1_edited - x @ w1|: the error the edited MatMul creates on its own."""
    x = X.astype(np.float64)
    return float(np.abs(x @ _weights(bad)["w1"] - x @ _weights(good)["w1"]).max())


@pytest.mark.parametrize("form", ["array", "dict", "tuple", "list of batches", "npz path"])
def test_bisect_takes_inputs_in_every_form_compare_takes(form: str, models: tuple[Path, Path], tmp_path: Path) -> None:
    good, bad = models
    np.savez(tmp_path / "x.npz", x=X)
    inputs = {"array": X, "dict": {"x": X}, "tuple": (X,), "list of batches": [{"x": X}, {"x": X[:1]}],
              "npz path": str(tmp_path / "x.npz")}[form]
    res = bisect(OnnxRuntimeRunner(good), OnnxRuntimeRunner(bad), "fc1.matmul", inputs)
    assert res.creates_error and res.origin == "fc1.matmul"
    assert res.local.max_abs_error == pytest.approx(_numpy_matmul_error(good, bad), rel=1e-5)


def test_bisect_refuses_inputs_that_do_not_fit_the_model_naming_the_input(models: tuple[Path, Path]) -> None:
    good, bad = models
    with pytest.raises(tt.ArgumentError, match=r"input 'x' is float64, the model expects float32"):
        bisect(OnnxRuntimeRunner(good), TetherRunner(bad), "fc1.matmul", X.astype(np.float64))
    with pytest.raises(tt.ArgumentError, match=r"input 'x' has shape \[3, 5\], the model expects \['batch', 16\]"):
        bisect(OnnxRuntimeRunner(good), TetherRunner(bad), "fc1.matmul", {"x": X[:, :5]})
    with pytest.raises(tt.ArgumentError, match=r"node 'nope' is not in the model"):
        bisect(OnnxRuntimeRunner(good), TetherRunner(bad), "nope", X)


def test_bisect_of_a_node_inside_a_fused_kernel_names_the_node_whose_weight_was_edited(
        models: tuple[Path, Path]) -> None:
    good, bad = models
    cand = TetherRunner(bad)
    kernels = [st["fused_from"] for st in cand.steps() if len(st["fused_from"]) > 1]
    assert kernels == [["fc1.matmul", "fc1.bias", "act"]]  # the premise: one kernel computes the three nodes
    for asked in ("act", "fc1.bias", "fc1.matmul"):
        res = bisect(OnnxRuntimeRunner(good), cand, asked, X)
        assert res.node == asked and res.fused_from == ["fc1.matmul", "fc1.bias", "act"]
        assert res.origin == "fc1.matmul" and res.creates_error, str(res)
        by_node = {p.node: p for p in res.parts}
        assert by_node["fc1.matmul"].local.max_abs_error == pytest.approx(_numpy_matmul_error(good, bad), rel=1e-5)
        assert by_node["fc1.bias"].local.ok and by_node["act"].local.ok
        assert res.total is not None and not res.total.ok  # the kernel's output 'g' in the whole run
        assert "node 'fc1.matmul' creates the error" in str(res)
    # A node that is not fused and whose weight is intact only inherits the error.
    plain = bisect(OnnxRuntimeRunner(good), cand, "fc2", X)
    assert not plain.creates_error and plain.origin is None and not plain.parts
    assert plain.total is not None and not plain.total.ok


def test_report_names_the_node_that_creates_the_error_in_text_json_and_html(
        models: tuple[Path, Path], tmp_path: Path) -> None:
    good, bad = models
    rep = compare(OnnxRuntimeRunner(good), TetherRunner(bad), X, layerwise=True)
    first = rep.first_divergent
    assert first is not None and first.node == "act" and first.fused_from == ["fc1.matmul", "fc1.bias", "act"]
    b = rep.first_divergent_bisect
    assert b is not None and b.origin == "fc1.matmul"
    text = rep.table()
    answer = "node 'fc1.matmul' (MatMul) creates the error"
    assert answer in text and "the error may start in any of them" in text, text
    data = json.loads(rep.to_json())
    assert data["first_divergent_bisect"]["origin"] == "fc1.matmul"
    assert data["first_divergent_bisect"]["fused_from"] == ["fc1.matmul", "fc1.bias", "act"]
    page = rep.to_html(tmp_path / "r.html")
    caveat = re.search(r'<span id="fused-caveat">(.*?)</span>', page, re.S)
    assert caveat is not None
    plain = re.sub(r"<[^>]+>", " ", caveat.group(1)).replace("&#x27;", "'")
    assert "the error may start in any of them" in plain.lower() and answer in plain, plain
    marked = re.findall(r'<tr class="[^"]*\berror-origin\b[^"]*">(.*?)</tr>', page)
    assert len(marked) == 1 and '<td class="name node">fc1.matmul</td>' in marked[0], marked
    # Without the passes every value exists: the first divergent node is the one bisection named.
    unfused = compare(OnnxRuntimeRunner(good), TetherRunner(bad, optimize=False), X, layerwise=True)
    assert unfused.first_divergent is not None and unfused.first_divergent.node == "fc1.matmul"
    assert unfused.first_divergent_bisect is None  # nothing fused: nothing to bisect


def test_report_of_an_intact_model_has_no_bisection(models: tuple[Path, Path]) -> None:
    good, _ = models
    rep = compare(OnnxRuntimeRunner(good), TetherRunner(good), X, layerwise=True)
    assert rep.ok and rep.first_divergent is None and rep.first_divergent_bisect is None
    x = X.astype(np.float64)
    w = _weights(good)
    hb = x @ w["w1"] + w["b1"]
    gelu = 0.5 * hb * (1 + np.vectorize(math.erf)(hb / math.sqrt(2)))
    y = rep.outputs[0]
    assert y.metrics.ok
    np.testing.assert_allclose(TetherRunner(good).run({"x": X})["y"], gelu @ w["w2"], rtol=1e-4, atol=1e-5)


def test_bisect_of_an_intact_model_says_every_node_is_within_tolerance(models: tuple[Path, Path]) -> None:
    good, _ = models
    fused = bisect(OnnxRuntimeRunner(good), TetherRunner(good), "act", X)
    assert not fused.creates_error and fused.origin is None and all(p.local.ok for p in fused.parts)
    assert "each is within tolerance, alone and in the whole run" in str(fused)
    plain = bisect(OnnxRuntimeRunner(good), TetherRunner(good), "fc2", X)
    assert str(plain).startswith("node 'fc2' is within tolerance alone and in the whole run")
