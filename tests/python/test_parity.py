"""The parity toolkit: metrics against numpy, tolerance boundaries, runners, layer-wise
comparison that names the broken node, bisection, assert_parity and the compare CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import tether as tt
from onnx import helper, numpy_helper
from tether.parity import (
    CallableRunner,
    InputSpec,
    OnnxRuntimeRunner,
    TetherRunner,
    Tolerance,
    TorchRunner,
    bisect,
    compare,
    compare_arrays,
    generate_inputs,
    iter_feeds,
)
from tether.testing import ParityError, assert_parity

# ---------------------------------------------------------------------------------------------
# Metrics against numpy


def _numpy_metrics(r: np.ndarray, c: np.ndarray, atol: float, rtol: float, rule: str) -> dict[str, float]:
    """The documented definitions, written independently in numpy float64."""
    r64, c64 = r.astype(np.float64).ravel(), c.astype(np.float64).ravel()
    fin = np.isfinite(r64) & np.isfinite(c64)
    same_nonfinite = ~fin & ((np.isnan(r64) & np.isnan(c64)) | (r64 == c64))
    bad_nonfinite = ~fin & ~same_nonfinite
    d = np.abs(c64[fin] - r64[fin])
    ar = np.abs(r64[fin])
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(d == 0, 0.0, d / ar)
    if rule == "numpy":
        ok = d <= atol + rtol * ar
        need_atol = max(0.0, float(np.max(d - rtol * ar, initial=0.0)))
        over = d > atol
        with np.errstate(divide="ignore", invalid="ignore"):
            need_rtol = float(np.max(np.where(ar[over] == 0, np.inf, (d[over] - atol) / ar[over]), initial=0.0))
    else:
        ok = (d <= atol) | (rel <= rtol)
        need_atol = float(np.max(d[rel > rtol], initial=0.0))
        need_rtol = float(np.max(rel[d > atol], initial=0.0))
    if bad_nonfinite.any():
        need_atol = need_rtol = np.inf
    rr, cc, rc = (r64[fin] ** 2).sum(), (c64[fin] ** 2).sum(), (r64[fin] * c64[fin]).sum()
    return {
        "max_abs_error": float(d.max(initial=0.0)),
        "mean_abs_error": float(d.mean()) if d.size else 0.0,
        "max_rel_error": float(rel.max(initial=0.0)),
        "cosine": 1.0 if rr == 0 and cc == 0 else (0.0 if rr * cc == 0 else float(rc / np.sqrt(rr * cc))),
        "snr_db": np.inf if (d ** 2).sum() == 0 else float(10 * np.log10(rr / (d ** 2).sum())),
        "mismatches": int((~ok).sum() + bad_nonfinite.sum()),
        "nonfinite_mismatches": int(bad_nonfinite.sum()),
        "required_atol": need_atol,
        "required_rtol": need_rtol,
    }


@pytest.mark.parametrize("rule", ["numpy", "either"])
@pytest.mark.parametrize("seed", range(6))
def test_metrics_match_numpy_on_random_data(seed: int, rule: str) -> None:
    rng = np.random.default_rng(seed)
    shape = [(1,), (13,), (3, 127), (2, 3, 5, 7), (4097,), (2, 0, 3)][seed]
    dtype = [np.float32, np.float64, np.float16, np.float32, np.float32, np.float32][seed]
    r = (rng.standard_normal(shape) * 3).astype(dtype)
    c = (r.astype(np.float64) + rng.standard_normal(shape) * 1e-3).astype(dtype)
    if r.size > 10:  # zeros, NaN and infinities in agreeing and disagreeing positions
        r.flat[0] = 0
        c.flat[0] = 1e-6
        r.flat[1] = c.flat[1] = np.nan
        r.flat[2] = np.nan
        r.flat[3] = c.flat[3] = np.inf
        r.flat[4], c.flat[4] = np.inf, -np.inf
    atol, rtol = 1e-3, 1e-3
    m = compare_arrays(r, c, Tolerance(atol, rtol, rule))  # type: ignore[arg-type]
    want = _numpy_metrics(r, c, atol, rtol, rule)
    for key, value in want.items():
        assert getattr(m, key) == pytest.approx(value, rel=1e-12, abs=1e-300), key
    assert m.ok == (want["mismatches"] == 0)
    assert m.mismatch_fraction == pytest.approx(want["mismatches"] / r.size if r.size else 0.0)


def test_worst_element_is_a_nonfinite_disagreement_first_then_the_largest_error_out_of_tolerance() -> None:
    r = np.array([[0.0, 100.0], [1.0, 2.0]], np.float32)
    c = np.array([[0.5, 100.4], [1.0, 2.0]], np.float32)
    m = compare_arrays(r, c, Tolerance(atol=0.0, rtol=0.01))
    # |100.4-100| = 0.4 is within rtol, |0.5-0| = 0.5 is not: the worst is the one out of tolerance.
    assert m.worst_index == (0, 0)
    assert (m.worst_reference, m.worst_candidate) == (0.0, 0.5)
    c[1, 1] = np.nan
    m = compare_arrays(r, c, Tolerance(atol=0.0, rtol=0.01))
    assert m.worst_index == (1, 1) and np.isnan(m.worst_candidate)
    assert m.nonfinite_mismatches == 1 and m.required_atol == np.inf


def test_numpy_rule_boundary_is_inclusive() -> None:
    atol, rtol = 0.25, 0.5  # exact in binary, so the boundary is exact
    r = np.array([2.0, -2.0])
    at = r + np.sign(r) * (atol + rtol * 2.0)
    assert compare_arrays(r, at, Tolerance(atol, rtol, "numpy")).ok
    assert np.allclose(at, r, atol=atol, rtol=rtol)  # numpy agrees
    past = np.nextafter(at, np.sign(at) * np.inf)
    m = compare_arrays(r, past, Tolerance(atol, rtol, "numpy"))
    assert not m.ok and m.mismatches == 2
    assert not np.allclose(past, r, atol=atol, rtol=rtol)


def test_either_rule_passes_when_one_bound_holds_and_fails_when_neither_does() -> None:
    atol, rtol = 0.25, 0.5
    r = np.array([100.0, 0.125, 1.0])
    c = np.array([150.0, 0.375, 1.0])  # rel 0.5 (abs 50): rel passes; abs 0.25 (rel 2): abs passes
    m = compare_arrays(r, c, Tolerance(atol, rtol, "either"))
    assert m.ok
    # The numpy bound atol + rtol*|r| is looser than either bound alone: |c-r| = 0.75 at r = 1
    # passes it, but neither |c-r| <= 0.25 nor |c-r|/|r| <= 0.5 holds.
    assert compare_arrays(np.array([1.0]), np.array([1.75]), Tolerance(atol, rtol, "numpy")).ok
    assert not compare_arrays(np.array([1.0]), np.array([1.75]), Tolerance(atol, rtol, "either")).ok
    c2 = np.nextafter(c, np.inf)
    m2 = compare_arrays(r, c2, Tolerance(atol, rtol, "either"))
    assert m2.mismatches == 2  # just past both bounds on the first two; the third is equal


def test_required_tolerances_are_the_smallest_that_pass() -> None:
    rng = np.random.default_rng(3)
    r = rng.standard_normal(1000)
    c = r + rng.standard_normal(1000) * 1e-2
    for rule in ("numpy", "either"):
        m = compare_arrays(r, c, Tolerance(1e-3, 1e-3, rule))  # type: ignore[arg-type]
        assert compare_arrays(r, c, Tolerance(m.required_atol, 1e-3, rule)).ok  # type: ignore[arg-type]
        assert not compare_arrays(r, c, Tolerance(m.required_atol * 0.999, 1e-3, rule)).ok  # type: ignore[arg-type]
        assert compare_arrays(r, c, Tolerance(1e-3, m.required_rtol * (1 + 1e-12), rule)).ok  # type: ignore[arg-type]
        assert not compare_arrays(r, c, Tolerance(1e-3, m.required_rtol * 0.999, rule)).ok  # type: ignore[arg-type]


def test_integers_and_bools_compare_exactly_whatever_the_tolerance() -> None:
    big = np.array([2**62 + 1, -5, 7], np.int64)
    assert compare_arrays(big, big.copy(), Tolerance(10, 10)).ok
    off = big.copy()
    off[0] = 2**62  # equal as float64, different as integers
    m = compare_arrays(big, off, Tolerance(10, 10))
    assert not m.ok and m.mismatches == 1 and m.exact and m.worst_index == (0,)
    assert compare_arrays(np.array([1, 2], np.int64), np.array([1, 2], np.int32)).ok  # widths differ, values equal
    assert compare_arrays(np.array([1, 2], np.uint64), np.array([1, 2], np.int8)).ok
    assert not compare_arrays(np.array([True, False]), np.array([True, True])).ok
    assert compare_arrays(np.array(["a", "b"]), np.array(["a", "b"], dtype=object)).ok
    assert not compare_arrays(np.array(["a", "b"]), np.array(["a", "c"])).ok


def test_shape_and_kind_differences_are_reported_not_raised() -> None:
    m = compare_arrays(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32))
    assert not m.ok and "shape [3, 2] differs from the reference's [2, 3]" in m.problem
    m = compare_arrays(np.zeros(3, np.float32), np.zeros(3, np.int64))
    assert not m.ok and "dtype int64 cannot be compared with the reference's float32" in m.problem


def test_default_tolerance_follows_each_outputs_dtype() -> None:
    spec = [InputSpec("x", np.dtype("float32"), (64,))]
    # An error of 5e-4 on both outputs: within fp16's tolerance, far outside fp32's.
    ref = CallableRunner(lambda x: {"h": x.astype(np.float16), "f": x}, name="ref", input_specs=spec)
    cand = CallableRunner(lambda x: {"h": (x + 5e-4).astype(np.float16), "f": x + np.float32(5e-4)}, name="cand",
                          input_specs=spec)
    rep = compare(ref, cand, ranges={"x": (0.0, 0.1)})
    by_name = {o.name: o.metrics for o in rep.outputs}
    assert by_name["h"].tolerance == Tolerance.profile("fp16") and by_name["h"].ok
    assert by_name["f"].tolerance == Tolerance.profile("fp32") and not by_name["f"].ok
    assert any("output 'h' is float16" in n for n in rep.notes)
    forced = compare(ref, cand, ranges={"x": (0.0, 0.1)}, tolerance="fp32")
    assert not {o.name: o.metrics for o in forced.outputs}["h"].ok


def test_negative_or_unknown_tolerance_is_an_argument_error() -> None:
    with pytest.raises(tt.ArgumentError, match="tolerance must be >= 0"):
        Tolerance(atol=-1.0)
    with pytest.raises(tt.ArgumentError, match="unknown tolerance rule 'close'"):
        Tolerance(rule="close")  # type: ignore[arg-type]
    with pytest.raises(tt.ArgumentError, match="unknown tolerance profile 'fp8'"):
        Tolerance.profile("fp8")


# ---------------------------------------------------------------------------------------------
# Inputs


def test_generated_inputs_follow_specs_seed_ranges_and_dims() -> None:
    specs = [InputSpec("x", np.dtype("float32"), ("batch", 3)), InputSpec("ids", np.dtype("int64"), (2,)),
             InputSpec("m", np.dtype("bool"), (4,))]
    a = generate_inputs(specs, seed=5, dims={"batch": 7}, ranges={"x": (2.0, 3.0), "ids": (5, 6)}, batches=2)
    b = generate_inputs(specs, seed=5, dims={"batch": 7}, ranges={"x": (2.0, 3.0), "ids": (5, 6)}, batches=2)
    assert len(a) == 2 and a[0]["x"].shape == (7, 3) and a[0]["x"].dtype == np.float32
    assert a[0]["x"].min() >= 2.0 and a[0]["x"].max() <= 3.0
    assert np.array_equal(a[0]["ids"], [5, 5]) and a[0]["m"].dtype == bool
    assert all(np.array_equal(a[k][n], b[k][n]) for k in range(2) for n in a[k])
    assert not np.array_equal(a[0]["x"], a[1]["x"])
    with pytest.raises(tt.ArgumentError, match=r"ranges name unknown inputs \['y'\]"):
        generate_inputs(specs, ranges={"y": (0, 1)})
    with pytest.raises(tt.ArgumentError, match="input 'u' dim 0 is unknown"):
        generate_inputs([InputSpec("u", np.dtype("float32"), (None,))])


def test_user_inputs_in_every_form(tmp_path: Path) -> None:
    specs = [InputSpec("a", np.dtype("float32"), (2,)), InputSpec("b", np.dtype("float32"), (2,))]
    x, y = np.zeros(2, np.float32), np.ones(2, np.float32)
    np.savez(tmp_path / "in.npz", a=x, b=y)
    forms = [{"a": x, "b": y}, (x, y), [x, y], str(tmp_path / "in.npz"), [{"a": x, "b": y}, (x, y)]]
    for form in forms:
        batches = list(iter_feeds(form, specs))
        assert all(sorted(f) == ["a", "b"] and np.array_equal(f["b"], y) for f in batches), form
    assert len(list(iter_feeds(iter([x, x, x]), specs[:1]))) == 3  # a single-input model: each array a batch
    with pytest.raises(tt.ArgumentError, match="one array was given, but the model takes 2 inputs"):
        list(iter_feeds(x, specs))
    with pytest.raises(tt.ArgumentError, match="does not exist"):
        list(iter_feeds(str(tmp_path / "missing.npz"), specs))


# ---------------------------------------------------------------------------------------------
# Runners and compare on small graphs


def _mlp_model(path: Path, w2_scale: float = 1.0) -> Path:
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((8, 16)).astype(np.float32)
    w2 = (rng.standard_normal((16, 4)) * w2_scale).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
         helper.make_node("Relu", ["h"], ["hr"], name="act1"),
         helper.make_node("MatMul", ["hr", "w2"], ["z"], name="fc2"),
         helper.make_node("Softmax", ["z"], ["y"], name="softmax", axis=-1)],
        "mlp", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _numpy_mlp(x: np.ndarray, path: Path) -> np.ndarray:
    m = onnx.load(str(path))
    w = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in m.graph.initializer}
    z = np.maximum(x.astype(np.float64) @ w["w1"], 0) @ w["w2"]
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_tether_and_onnxruntime_runners_agree_with_a_numpy_forward_pass(tmp_path: Path) -> None:
    path = _mlp_model(tmp_path / "mlp.onnx")
    numpy_runner = CallableRunner(lambda x: {"y": _numpy_mlp(x, path)}, name="numpy")
    x = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)
    for runner in (TetherRunner(path), OnnxRuntimeRunner(path)):
        assert [s.name for s in runner.input_specs()] == ["x"]
        assert runner.input_specs()[0].shape == ("batch", 8)
        rep = compare(numpy_runner, runner, x)
        assert rep.ok, rep.table()
        assert rep.outputs[0].metrics.max_abs_error == pytest.approx(
            np.abs(runner.run({"x": x})["y"].astype(np.float64) - _numpy_mlp(x, path)).max())


def test_output_names_and_layouts_are_declared_never_guessed() -> None:
    spec = [InputSpec("x", np.dtype("float32"), (2, 4, 4, 3))]
    nchw = CallableRunner(lambda x: {"feat": np.transpose(x, (0, 3, 1, 2)) * 2}, name="nchw", input_specs=spec)
    nhwc = CallableRunner(lambda x: {"features": x * 2}, name="nhwc", input_specs=spec)
    with pytest.raises(tt.ArgumentError, match=r"output 'feat' of nchw has no counterpart in nhwc.*output_map"):
        compare(nchw, nhwc)
    rep = compare(nchw, nhwc, output_map={"feat": "features"}, layouts={"feat": "NHWC->NCHW"})
    assert rep.ok and rep.outputs[0].candidate_name == "features"
    wrong = compare(nchw, nhwc, output_map={"feat": "features"}, layouts={"feat": (0, 1, 2, 3)})
    assert not wrong.ok and "shape" in wrong.outputs[0].metrics.problem


def test_dataset_mode_aggregates_batches_and_breaks_agreement_down_by_label() -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 3))
    x = rng.standard_normal((30, 6)).astype(np.float32)
    labels = np.argmax(x @ w, axis=1)  # the reference is right on every sample
    spec = [InputSpec("x", np.dtype("float32"), (None, 6))]
    ref = CallableRunner(lambda x: {"logits": x @ w}, name="ref", input_specs=spec)

    def cand_fn(x: np.ndarray) -> dict[str, np.ndarray]:
        z = x @ w
        z[:, 2] -= 100.0  # class 2 is never predicted: only that slice loses agreement
        return {"logits": z}

    cand = CallableRunner(cand_fn, name="cand", input_specs=spec)
    batches = [{"x": x[i:i + 10]} for i in range(0, 30, 10)]
    rep = compare(ref, cand, batches, labels=labels)
    assert rep.batches == 3 and len(rep.outputs[0].batches) == 3
    assert rep.outputs[0].metrics.elements == 90
    want_max = max(np.abs(cand_fn(b["x"])["logits"] - b["x"] @ w).max() for b in batches)
    assert rep.outputs[0].metrics.max_abs_error == pytest.approx(want_max)
    by_label = {int(s.label): s for s in rep.slices or []}
    for label, s in by_label.items():
        assert s.samples == int((labels == label).sum())
        assert s.reference_accuracy == 1.0
        assert s.top1_agreement == (0.0 if label == 2 else 1.0)


# ---------------------------------------------------------------------------------------------
# Layer-wise comparison on real models


def _perturbed_copy(src: Path, dst: Path, node_index_fraction: float = 0.5) -> str:
    """A copy of the model with one weight of a middle Conv/MatMul/Gemm changed; returns that node's name."""
    m = onnx.load(str(src))
    inits = {i.name: i for i in m.graph.initializer}
    nodes = [n for n in m.graph.node if n.op_type in ("Conv", "MatMul", "Gemm") and n.input[1] in inits]
    node = nodes[int(len(nodes) * node_index_fraction)]
    w = inits[node.input[1]]
    arr = numpy_helper.to_array(w).copy()
    arr.flat[arr.size // 2] += 0.5 + abs(float(arr.flat[arr.size // 2]))
    w.CopyFrom(numpy_helper.from_array(arr, w.name))
    onnx.save(m, str(dst))
    return node.name


@pytest.mark.parametrize("name", ["resnet", "vit"])
def test_layerwise_names_the_node_whose_weight_was_perturbed(name: str, exported_models, tmp_path: Path) -> None:
    e = exported_models[name]
    bad = tmp_path / "bad.onnx"
    broken = _perturbed_copy(e.path, bad)
    feeds = e.inputs(2)
    rep = compare(OnnxRuntimeRunner(e.path), TetherRunner(bad), feeds, layerwise=True)
    assert not rep.ok
    first = rep.first_divergent
    # The broken node itself, or the fused kernel that computes it (MatMul + Add into one Gemm).
    assert first is not None and (first.node == broken or broken in first.fused_from), rep.table()
    # Without the passes every node's value exists, and the broken node is named itself.
    unfused = compare(OnnxRuntimeRunner(e.path), TetherRunner(bad, optimize=False), feeds, layerwise=True)
    assert unfused.first_divergent is not None and unfused.first_divergent.node == broken, unfused.table()
    # Every layer before it agrees; the weight change shows only from that node on.
    assert all(la.ok for la in rep.layers or [] if la.index < first.index)
    # Bisection: the broken node creates its error; a later node only inherits it.
    res = bisect(OnnxRuntimeRunner(e.path), TetherRunner(bad), broken, feeds)
    assert res.creates_error
    later = [la for la in rep.layers or [] if la.index > first.index and la.status == "compared" and not la.ok
             and not la.fused_from]
    assert later, rep.table()
    assert not bisect(OnnxRuntimeRunner(e.path), TetherRunner(bad), later[-1].node, feeds).creates_error


def test_layerwise_of_a_correct_model_passes_and_maps_fused_kernels_to_onnx_names(exported_models) -> None:
    e = exported_models["mobilenetv2"]
    tether_runner = TetherRunner(e.path)
    rep = compare(OnnxRuntimeRunner(e.path), tether_runner, e.inputs(1), layerwise=True)
    assert rep.ok and rep.first_divergent is None, rep.table()
    layers = rep.layers or []
    fused = [la for la in layers if la.status == "fused"]
    assert fused and not [la for la in layers if la.status == "missing"]
    fused_nodes = {n for st in tether_runner.steps() for n in st["fused_from"][:-1]}
    assert {la.node for la in fused} == fused_nodes  # each listed under the kernel that computes it
    graph_nodes = {n.name for n in tether_runner.model.nodes}  # type: ignore[union-attr]
    assert fused_nodes <= graph_nodes


def test_reading_intermediates_does_not_change_the_outputs(exported_models) -> None:
    e = exported_models["resnet"]
    r = TetherRunner(e.path)
    feeds = e.inputs(2)
    plain = r.run(feeds)
    values = r.intermediates(feeds)
    for name, out in plain.items():
        assert np.array_equal(values[name], out)
    assert list(r.intermediates(feeds, ["nonexistent", name])) == [name]


# ---------------------------------------------------------------------------------------------
# torch modules, assert_parity, the CLI


def test_torch_module_and_its_tether_session_pass(exported_models) -> None:
    e = exported_models["resnet"]
    sess = tt.compile(e.path)
    rep = assert_parity(e.module, sess, [e.inputs(1), e.inputs(3, seed=1)])
    assert rep.ok and rep.batches == 2 and rep.reference == "torch"


def test_wrong_export_fails_assert_parity_and_layerwise_names_the_node(exported_models, tmp_path: Path) -> None:
    e = exported_models["vit"]
    # A wrong export: every LayerNormalization with a far larger epsilon than the module's.
    m = onnx.load(str(e.path))
    ln = [n for n in m.graph.node if n.op_type == "LayerNormalization"]
    assert ln
    for n in ln:
        kept = [a for a in n.attribute if a.name != "epsilon"]
        del n.attribute[:]
        n.attribute.extend([*kept, helper.make_attribute("epsilon", 0.5)])
    bad = tmp_path / "wrong.onnx"
    onnx.save(m, str(bad))
    with pytest.raises(ParityError) as info:
        assert_parity(TorchRunner(e.module), tt.compile(bad), e.inputs(2))
    assert "FAIL" in str(info.value) and "worst element" in str(info.value)
    assert isinstance(info.value, AssertionError)
    rep = compare(OnnxRuntimeRunner(e.path), TetherRunner(bad), e.inputs(2), layerwise=True)
    assert rep.first_divergent is not None and rep.first_divergent.node == ln[0].name, rep.table()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether.cli", *args], capture_output=True, text=True, timeout=300)


def test_cli_compare_exits_0_on_pass_and_writes_reports(exported_models, tmp_path: Path) -> None:
    e = exported_models["resnet"]
    np.savez(tmp_path / "x.npz", **e.inputs(2))
    r = _cli("compare", str(e.path), "--against", "onnxruntime", "--inputs", str(tmp_path / "x.npz"),
             "--layerwise", "--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout and "no layer leaves tolerance" in r.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["ok"] is True and data["layers"] and data["input_shapes"]["x"][0] == 2
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_cli_compare_exits_1_on_failure_and_2_on_bad_usage(tmp_path: Path) -> None:
    good = _mlp_model(tmp_path / "mlp.onnx")
    r = _cli("compare", str(good), "--atol", "0", "--rtol", "0", "--dim", "batch=3")
    # Two engines summing in different orders rarely agree to the last bit on softmax outputs;
    # whichever way, the exit status follows the verdict printed.
    assert r.returncode == (0 if "PASS" in r.stdout else 1), r.stdout + r.stderr
    golden = tmp_path / "golden"
    x = {"x": np.ones((2, 8), np.float32)}
    y = {"y": _numpy_mlp(x["x"], good).astype(np.float32) + np.float32(0.1)}
    tt.parity.save_golden(golden, [(x, y)])
    r = _cli("compare", str(good), "--against", str(golden))
    assert r.returncode == 1 and "FAIL" in r.stdout
    r = _cli("compare", str(good), "--against", "tensorrt")
    assert r.returncode == 2, r.stderr
    assert "use 'onnxruntime', 'tether', 'cpu', an ONNX file or a golden bundle folder" in r.stderr
    r = _cli("compare", str(tmp_path / "missing.onnx"))
    assert r.returncode == 2 and "missing.onnx" in r.stderr


def test_layerwise_needs_runners_that_read_intermediates(tmp_path: Path) -> None:
    path = _mlp_model(tmp_path / "mlp.onnx")
    numpy_runner = CallableRunner(lambda x: {"y": _numpy_mlp(x, path)}, name="numpy")
    with pytest.raises(tt.ArgumentError, match="cannot read intermediate values"):
        compare(numpy_runner, TetherRunner(path), np.zeros((1, 8), np.float32), layerwise=True,
                model=tt.load(path))
    with pytest.raises(tt.ArgumentError, match="a model does not say which engine runs it"):
        compare(str(path), TetherRunner(path))

