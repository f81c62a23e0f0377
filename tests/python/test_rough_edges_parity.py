"""Parity reports as a new user reads them: layer-wise comparison over several batches runs on
the batch that fails, a golden bundle pairs a torch module's outputs in order, a golden bundle
against a Session says what it could not check, failing rows count their elements out of
tolerance, titles name the device, and generated integers index an embedding within its rows.
Oracles: numpy forward passes and counts, the weights themselves, tt.devices()."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import tether as tt
from _vulkan import requires_vulkan
from onnx import helper, numpy_helper
from tether.parity import CallableRunner, GoldenRunner, OnnxRuntimeRunner, TetherRunner, generate_inputs, save_golden
from tether.parity._inputs import index_ranges
from tether.parity._report import _with_device


def _save(path: Path, nodes: list, inputs: list, outputs: list, weights: dict[str, np.ndarray]) -> Path:
    g = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in weights.items()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _capped(path: Path, cap: float) -> Path:
    """y = min(x, cap) * 2, x float32 [n, 4]."""
    f = onnx.TensorProto.FLOAT
    return _save(path, [helper.make_node("Min", ["x", "k"], ["h"], name="cap"),
                        helper.make_node("Mul", ["h", "two"], ["y"], name="scale")],
                 [helper.make_tensor_value_info("x", f, ["n", 4])], [helper.make_tensor_value_info("y", f, ["n", 4])],
                 {"k": np.array([cap], np.float32), "two": np.array([2.0], np.float32)})


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether.cli", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def test_layerwise_over_several_batches_runs_on_the_batch_that_fails(tmp_path):
    ref, cand = _capped(tmp_path / "ref.onnx", 100.0), _capped(tmp_path / "cand.onnx", 10.0)
    rng = np.random.default_rng(0)
    batches = [rng.uniform(-1, 1, (8, 4)).astype(np.float32) for _ in range(3)]
    batches[2][5, 1] = 12.0  # only this batch reaches the cap where the two files differ
    failing = [k for k, b in enumerate(batches) if (b > 10).any()]  # numpy: where the files differ
    rep = tt.compare(OnnxRuntimeRunner(ref), TetherRunner(cand, optimize=False), batches, layerwise=True)
    assert not rep.ok and rep.layer_batch == failing[0] == rep.outputs[0].worst_batch
    first = rep.first_divergent
    assert first is not None and first.node == "cap", rep.table()
    assert (first.metrics.worst_reference, first.metrics.worst_candidate) == (12.0, 10.0)
    text = rep.table()
    assert f"layer-wise on batch {failing[0]}:" in text and "no layer leaves tolerance" not in text, text
    assert rep.to_dict()["layer_batch"] == failing[0]


def test_no_divergent_layer_beside_a_failing_output_says_why(tmp_path):
    f = onnx.TensorProto.FLOAT
    path = _save(tmp_path / "two.onnx", [helper.make_node("Mul", ["x", "two"], ["a"], name="double"),
                                         helper.make_node("Mul", ["x", "three"], ["b"], name="triple")],
                 [helper.make_tensor_value_info("x", f, [2, 3])],
                 [helper.make_tensor_value_info("a", f, [2, 3]), helper.make_tensor_value_info("b", f, [2, 3])],
                 {"two": np.array(2, np.float32), "three": np.array(3, np.float32)})
    x = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    # Crossed names: every layer agrees, the outputs do not (2x against 3x).
    rep = tt.compare(OnnxRuntimeRunner(path), TetherRunner(path), x, layerwise=True, output_map={"a": "b", "b": "a"})
    assert not rep.ok and rep.first_divergent is None
    text = rep.table()
    assert "no layer leaves tolerance\n" not in text + "\n"
    assert "yet output 'a' fails" in text and "output_map" in text, text


def _mlp():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).eval()


def _numpy_mlp(net, x: np.ndarray) -> np.ndarray:
    w = [p.detach().numpy().astype(np.float64) for p in net.parameters()]
    return (np.maximum(x @ w[0].T + w[1], 0) @ w[2].T + w[3]).astype(np.float32)


def test_a_golden_bundle_pairs_a_torch_modules_outputs_in_order(tmp_path):
    net = _mlp()
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    bundle = save_golden(tmp_path / "g.golden", [({"input": x}, {"logits": _numpy_mlp(net, x)})])
    rep = tt.compare(GoldenRunner(bundle), net)
    assert rep.ok and [o.name for o in rep.outputs] == ["logits"], rep.table()
    assert any("paired in order" in n and "logits" in n for n in rep.notes), rep.notes
    # Paired, hence compared: other recorded values fail.
    wrong = save_golden(tmp_path / "w.golden", [({"input": x}, {"logits": _numpy_mlp(net, x) + 1})])
    assert not tt.compare(GoldenRunner(wrong), net).ok
    # Another number of outputs cannot be paired in order: a typed error that says so.
    two = save_golden(tmp_path / "two.golden", [({"input": x}, {"logits": _numpy_mlp(net, x), "extra": x})])
    with pytest.raises(tt.ArgumentError, match=r"returned 1 outputs, but 'golden' has 2 .* in order"):
        tt.compare(GoldenRunner(two), net)


def test_a_golden_bundle_checks_the_file_a_session_was_compiled_from(tmp_path):
    a, b = _capped(tmp_path / "a.onnx", 0.5), _capped(tmp_path / "b.onnx", 0.25)
    x = np.random.default_rng(2).uniform(-1, 1, (3, 4)).astype(np.float32)
    recorded = hashlib.sha256(a.read_bytes()).hexdigest()
    actual = hashlib.sha256(b.read_bytes()).hexdigest()
    bundle = save_golden(tmp_path / "a.golden", [({"x": x}, {"y": np.minimum(x, np.float32(0.5)) * 2})],
                         {"model_sha256": recorded})
    # A session compiled from a path keeps it: the documented form is checked like a file.
    for other in (tt.compile(b), TetherRunner(b)):
        rep = tt.compare(GoldenRunner(bundle), other)
        assert not rep.ok  # numpy: x holds values in (0.25, 0.5], where the two files differ
        notes = [n for n in rep.notes if "SHA-256" in n]
        assert len(notes) == 1 and recorded[:16] in notes[0] and actual[:16] in notes[0], rep.notes
        assert rep.models["candidate"]["sha256"] == actual
    # A session of a model read from bytes has no file: a failing comparison says so.
    rep = tt.compare(GoldenRunner(bundle), tt.compile(tt.load(b.read_bytes())))
    notes = [n for n in rep.notes if "SHA-256" in n]
    assert len(notes) == 1 and recorded[:16] in notes[0] and "Session" in notes[0], rep.notes
    assert str(bundle) in notes[0] and "TetherRunner(path)" in notes[0]


def test_a_failing_row_counts_its_elements_out_of_tolerance(tmp_path):
    f, n = onnx.TensorProto.FLOAT, 100_000

    def shifted(path: Path, bump: float) -> Path:
        c = np.zeros(n, np.float32)
        c[123] = bump
        return _save(path, [helper.make_node("Add", ["x", "c"], ["h"], name="shift"),
                            helper.make_node("Relu", ["h"], ["y"], name="act")],
                     [helper.make_tensor_value_info("x", f, [1, n])], [helper.make_tensor_value_info("y", f, [1, n])],
                     {"c": c})

    ref, cand = shifted(tmp_path / "ref.onnx", 0.0), shifted(tmp_path / "cand.onnx", 1.0)
    x = np.abs(np.random.default_rng(0).standard_normal((1, n))).astype(np.float32)
    rep = tt.compare(OnnxRuntimeRunner(ref), TetherRunner(cand, optimize=False), x, layerwise=True)
    r, c = np.maximum(x.astype(np.float64), 0), np.maximum(x.astype(np.float64) + (np.arange(n) == 123), 0)
    out = int(np.count_nonzero(np.abs(c - r) > 1e-5 + 1e-4 * np.abs(r)))  # numpy rule, fp32 profile
    assert out == 1
    text = rep.table()
    rows = [line for line in text.splitlines() if line.startswith(("y ", "shift ", "act "))]
    assert len(rows) == 3 and all("FAIL" in row and f"{out} of 100,000" in row for row in rows), text
    assert "0.00%" not in text


def test_titles_name_each_sides_device_when_its_name_does_not():
    assert _with_device("tether (candidate)", "vulkan:0") == "tether vulkan:0 (candidate)"
    assert _with_device("tether: edited.onnx", "cpu") == "tether cpu: edited.onnx"
    assert _with_device("tether cpu", "cpu") == "tether cpu"
    assert _with_device("onnxruntime", "") == "onnxruntime"


@requires_vulkan
def test_a_vulkan_against_cpu_report_names_both_devices(tmp_path):
    path = _capped(tmp_path / "m.onnx", 0.5)
    vulkan = next(d["device"] for d in tt.devices() if d["backend"] == "vulkan")
    rep = tt.compare(TetherRunner(path, device="cpu"), TetherRunner(path, device="vulkan"), dims={"n": 3})
    title = f"tether {vulkan} (candidate) vs tether cpu"
    assert rep.table().startswith(f"parity: {title} ") and f"<title>parity {title}" in rep.to_html()
    r = _cli("compare", str(path), "--against", "cpu", "--device", "vulkan", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith(f"parity: tether {vulkan} vs tether cpu "), r.stdout + r.stderr


def _embedding(path: Path, rows: int, cast: bool = False) -> tuple[Path, np.ndarray]:
    """y = table[ids], ids int64 [batch, 6] (int32 through a Cast with ``cast``), table [rows, 4]."""
    table = np.random.default_rng(3).standard_normal((rows, 4)).astype(np.float32)
    ids = "ids32" if cast else "ids"
    nodes = [helper.make_node("Cast", ["ids"], [ids], to=onnx.TensorProto.INT64, name="widen")] if cast else []
    nodes.append(helper.make_node("Gather", ["table", ids], ["y"], name="embed"))
    dtype = onnx.TensorProto.INT32 if cast else onnx.TensorProto.INT64
    _save(path, nodes, [helper.make_tensor_value_info("ids", dtype, ["batch", 6])],
          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 6, 4])], {"table": table})
    return path, table


def test_generated_ids_stay_within_the_rows_of_the_embedding_they_index(tmp_path):
    path, _ = _embedding(tmp_path / "e.onnx", 3, cast=True)
    model = tt.load(path)
    assert index_ranges(model)["ids"][:2] == (0, 3)
    ids = generate_inputs(TetherRunner(model).input_specs(), dims={"batch": 50}, model=model)[0]["ids"]
    assert ids.dtype == np.int32 and set(np.unique(ids)) == {0, 1, 2}
    rep = tt.compare(OnnxRuntimeRunner(path), TetherRunner(path))
    assert rep.ok and any("'ids' in [0, 3)" in n for n in rep.notes), rep.notes


def test_cli_compare_and_run_take_an_integer_range_and_default_to_the_embedding_rows(tmp_path):
    path, table = _embedding(tmp_path / "emb.onnx", 5)
    r = _cli("compare", "emb.onnx", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    r = _cli("run", "emb.onnx", "--int-range", "3:5", "--dim", "batch=4", "--repeat", "0", "--save", "out.npz",
             cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    got = np.load(tmp_path / "out.npz")["y"].reshape(-1, 4)
    assert all(any(np.array_equal(row, table[k]) for k in (3, 4)) for row in got)  # only rows 3 and 4 were read
    # Out of the table: tether's one line, without onnxruntime's own log before it.
    r = _cli("compare", "emb.onnx", "--int-range", "ids=0:50", "--dim", "batch=8", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("tether: error:") and "onnxruntime:" not in r.stderr.split(
        "tether: error:")[0], r.stderr
    for bad, words in (("5:5", "is empty"), ("nope=0:3", "'nope' is not an integer input"), ("0-3", "LO:HI")):
        r = _cli("compare", "emb.onnx", "--int-range", bad, cwd=tmp_path)
        assert r.returncode == 2 and words in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_an_integer_range_the_inputs_dtype_cannot_hold_is_refused():
    from tether.parity import InputSpec
    from tether.parity._inputs import int_ranges_option

    ids = InputSpec("ids", np.dtype("uint8"), (4,))
    info = np.iinfo(np.uint8)  # numpy's bounds of the dtype
    assert int_ranges_option([f"{info.min}:{info.max + 1}"], [ids]) == {"ids": (0, 256)}
    for bad in ("-1:3", f"0:{info.max + 2}"):
        with pytest.raises(tt.ArgumentError, match=r"does not fit input 'ids' of dtype uint8 \(\[0, 255\]\)"):
            int_ranges_option([bad], [ids])

def _two(name: str) -> CallableRunner:
    return CallableRunner(lambda x: [x + 1, x * 2], ["logits", "probs"], name=name)


def test_an_output_map_key_that_is_no_reference_output_raises_naming_it() -> None:
    x = np.ones((2, 3), np.float32)
    with pytest.raises(tt.ArgumentError, match=r"output_map names 'nope', which is not an output of ref; its outputs "
                                               r"are \['logits', 'probs'\]"):
        tt.compare(_two("ref"), _two("cand"), {"x": x}, output_map={"nope": "logits"})


def test_an_output_map_value_the_candidate_lacks_says_so_rather_than_asking_for_output_map() -> None:
    x = np.ones((2, 3), np.float32)
    with pytest.raises(tt.ArgumentError, match=r"output_map maps 'logits' to 'nope', which is not an output of "
                                               r"cand; its outputs are \['logits', 'probs'\]") as e:
        tt.compare(_two("ref"), _two("cand"), {"x": x}, output_map={"logits": "nope"})
    assert "declare output_map" not in str(e.value)
