"""Golden bundles and the ONNX backend-test layout: what is saved loads back bit for bit, the .pb
files agree with the onnx package's own reader and writer, every malformed bundle is refused with
a message naming the file, and GoldenRunner answers only for the stored inputs."""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from tether.parity._golden import (
    GoldenBundle,
    GoldenError,
    GoldenRunner,
    load_golden,
    model_sha256,
    read_onnx_test_dir,
    save_golden,
    write_onnx_test_dir,
)
from tether.parity._types import Runner


def _samples() -> list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    x[0, 0], x[0, 1] = np.nan, -0.0  # bitwise equality must keep NaN and the sign of zero
    return [
        (
            {"x": x, "ids": np.array([[1, -(2**62), 2**62]], np.int64), "mask": np.array([True, False, True])},
            {"y": rng.standard_normal(5).astype(np.float16), "loss": np.array(3.5, np.float32),
             "none": np.zeros((0, 3), np.float32)},
        ),
        (
            {"x": rng.standard_normal((4, 3)).astype(np.float32), "ids": np.zeros((1, 3), np.int64),
             "mask": np.zeros(3, bool)},
            {"y": rng.standard_normal(5).astype(np.float16), "loss": np.array(-1.0, np.float32),
             "none": np.zeros((0, 3), np.float32)},
        ),
        (
            {"x": np.zeros((0, 3), np.float32), "ids": np.ones((1, 3), np.int64), "mask": np.ones(3, bool)},
            {"y": np.zeros(5, np.float16), "loss": np.array(0.0, np.float32), "none": np.zeros((0, 3), np.float32)},
        ),
    ]


def _assert_bitwise(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert list(got) == list(want)
    for name, w in want.items():
        g = got[name]
        assert g.dtype == w.dtype and g.shape == w.shape, name
        assert g.tobytes() == w.tobytes(), name


def test_save_then_load_returns_every_sample_bitwise_and_keeps_metadata(tmp_path):
    samples = _samples()
    meta = {"model_sha256": "ab" * 32, "producer": "torch 2.13.0",
            "tolerance": {"atol": 1e-5, "rtol": 1e-4, "rule": "allclose"}}
    path = save_golden(tmp_path / "golden", samples, meta)

    bundle = load_golden(path)
    assert len(bundle.samples) == len(samples)
    for (gi, go), (wi, wo) in zip(bundle.samples, samples, strict=True):
        _assert_bitwise(gi, wi)
        _assert_bitwise(go, wo)
    assert {k: bundle.metadata[k] for k in meta} == meta
    created = datetime.datetime.fromisoformat(bundle.metadata["created"])
    assert abs(datetime.datetime.now(datetime.timezone.utc) - created) < datetime.timedelta(minutes=5)


def test_bundle_is_plain_json_and_npz_readable_without_tether(tmp_path):
    samples = _samples()
    path = save_golden(tmp_path / "golden", samples, {"producer": "p"})

    doc = json.loads((path / "golden.json").read_text())
    assert doc["format"] == "tether.golden" and doc["version"] == 1 and doc["metadata"]["producer"] == "p"
    assert sorted(p.name for p in path.iterdir()) == ["golden.json", "sample_0.npz", "sample_1.npz", "sample_2.npz"]
    for k, (inputs, outputs) in enumerate(samples):
        entry = doc["samples"][k]
        assert entry["inputs"] == [{"name": n, "dtype": a.dtype.name, "shape": list(a.shape)} for n, a in inputs.items()]
        assert entry["outputs"] == [{"name": n, "dtype": a.dtype.name, "shape": list(a.shape)} for n, a in outputs.items()]
        with np.load(path / f"sample_{k}.npz", allow_pickle=False) as z:
            assert sorted(z.files) == sorted([f"in/{n}" for n in inputs] + [f"out/{n}" for n in outputs])
            _assert_bitwise({n: z[f"in/{n}"] for n in inputs}, inputs)
            _assert_bitwise({n: z[f"out/{n}"] for n in outputs}, outputs)


def test_onnx_style_names_with_slashes_and_colons_round_trip(tmp_path):
    sample = ({"/encoder/input:0": np.arange(3, dtype=np.int32)}, {"/decoder/Add_output_0": np.ones(2, np.float64)})
    bundle = load_golden(save_golden(tmp_path / "g", [sample]))
    _assert_bitwise(bundle.samples[0][0], sample[0])
    _assert_bitwise(bundle.samples[0][1], sample[1])


def test_save_refuses_an_existing_bundle_unless_overwrite_and_then_replaces_it(tmp_path):
    first, second = _samples()[:1], _samples()[1:]
    path = save_golden(tmp_path / "g", first, {"run": 1})
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_golden(path, second, {"run": 2})
    assert load_golden(path).metadata["run"] == 1

    save_golden(path, second, {"run": 2}, overwrite=True)
    bundle = load_golden(path)
    assert bundle.metadata["run"] == 2 and len(bundle.samples) == 2
    assert not (path / "sample_2.npz").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"]  # no temporary or old copies left


def test_save_refuses_to_replace_a_directory_or_file_that_is_not_a_bundle(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a golden bundle"):
        save_golden(other, _samples(), overwrite=True)
    assert (other / "notes.txt").read_text() == "keep me"

    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(FileExistsError, match="not a directory"):
        save_golden(a_file, _samples(), overwrite=True)


def test_save_into_an_existing_empty_directory_is_allowed(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    _assert_bitwise(load_golden(save_golden(empty, _samples()[:1])).samples[0][0], _samples()[0][0])


def test_a_crash_while_saving_leaves_nothing_that_loads(tmp_path, monkeypatch):
    real_savez = np.savez
    calls = []

    def failing_savez(file, **arrays):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full")
        real_savez(file, **arrays)

    monkeypatch.setattr(np, "savez", failing_savez)
    with pytest.raises(OSError, match="disk full"):
        save_golden(tmp_path / "g", _samples())
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(GoldenError):
        load_golden(tmp_path / "g")


def test_save_refuses_object_arrays_empty_sample_lists_and_unjsonable_metadata(tmp_path):
    with pytest.raises(GoldenError, match="'s'.*object"):
        save_golden(tmp_path / "a", [({"s": np.array([{"a": 1}], dtype=object)}, {})])
    with pytest.raises(GoldenError, match="at least one sample"):
        save_golden(tmp_path / "b", [])
    with pytest.raises(GoldenError, match="JSON-able"):
        save_golden(tmp_path / "c", _samples(), {"atol": np.float32(1e-5)})
    assert list(tmp_path.iterdir()) == []


def _rewrite_npz(file: Path, change) -> None:
    with np.load(file, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    change(arrays)
    with open(file, "wb") as f:
        np.savez(f, **arrays)


def _edit_index(path: Path, change) -> None:
    doc = json.loads((path / "golden.json").read_text())
    change(doc)
    (path / "golden.json").write_text(json.dumps(doc))


# Each case breaks a good bundle and names the file the error must name and what it must say.
_BREAKS = {
    "missing_directory": (lambda p: shutil.rmtree(p), "", "no golden bundle directory"),
    "missing_index": (lambda p: (p / "golden.json").unlink(), "golden.json", "missing"),
    "index_not_json": (lambda p: (p / "golden.json").write_text("{"), "golden.json", "not readable JSON"),
    "wrong_format_name": (lambda p: _edit_index(p, lambda d: d.update(format="other")), "golden.json",
                          "format is 'other', expected 'tether.golden'"),
    "wrong_format_version": (lambda p: _edit_index(p, lambda d: d.update(version=2)), "golden.json",
                             "format version is 2, expected 1"),
    "missing_sample_file": (lambda p: (p / "sample_1.npz").unlink(), "sample_1.npz", "missing"),
    "sample_not_a_zip": (lambda p: (p / "sample_0.npz").write_bytes(b"garbage"), "sample_0.npz", "not an npz"),
    "extra_tensor_in_npz": (lambda p: _rewrite_npz(p / "sample_0.npz", lambda a: a.update({"in/z": np.ones(1)})),
                            "sample_0.npz", r"holds \[.*'in/z'.*\], expected"),
    "tensor_missing_from_npz": (lambda p: _rewrite_npz(p / "sample_1.npz", lambda a: a.pop("out/y")),
                                "sample_1.npz", "expected .*'out/y'"),
    "dtype_disagrees": (lambda p: _rewrite_npz(p / "sample_0.npz", lambda a: a.update({"in/x": a["in/x"].astype(np.float64)})),
                        "sample_0.npz", r"'in/x' is float64\[2, 3\], expected float32\[2, 3\]"),
    "shape_disagrees": (lambda p: _rewrite_npz(p / "sample_2.npz", lambda a: a.update({"out/y": np.zeros(6, np.float16)})),
                        "sample_2.npz", r"'out/y' is float16\[6\], expected float16\[5\]"),
    "index_names_disagree": (lambda p: _edit_index(p, lambda d: d["samples"][0]["inputs"][0].update(name="w")),
                             "sample_0.npz", "expected .*'in/w'"),
    "pickled_object_array": (lambda p: _rewrite_npz(p / "sample_0.npz",
                                                    lambda a: a.update({"in/x": np.array([{"a": 1}], dtype=object)})),
                             "sample_0.npz", "'in/x'.*pickle"),
}


@pytest.mark.parametrize("case", list(_BREAKS))
def test_load_refuses_a_broken_bundle_naming_the_file_and_the_expectation(tmp_path, case):
    path = save_golden(tmp_path / "g", _samples())
    breaker, file, said = _BREAKS[case]
    breaker(path)
    with pytest.raises(GoldenError) as info:
        load_golden(path)
    message = str(info.value)
    assert str(path / file).rstrip("/") in message
    assert re.search(said, message), message


def test_write_onnx_test_dir_is_read_back_by_onnx_numpy_helper(tmp_path):
    samples = [(i, {"y": o["y"]}) for i, o in _samples()]
    out = write_onnx_test_dir(tmp_path / "t", samples, input_names=["mask", "x", "ids"], output_names=["y"])

    assert sorted(p.name for p in out.iterdir()) == ["test_data_set_0", "test_data_set_1", "test_data_set_2"]
    for k, (inputs, outputs) in enumerate(samples):
        data_set = out / f"test_data_set_{k}"
        assert sorted(p.name for p in data_set.iterdir()) == ["input_0.pb", "input_1.pb", "input_2.pb", "output_0.pb"]
        for file, name, want in [("input_0.pb", "mask", inputs["mask"]), ("input_1.pb", "x", inputs["x"]),
                                 ("input_2.pb", "ids", inputs["ids"]), ("output_0.pb", "y", outputs["y"])]:
            tensor = onnx.load_tensor(str(data_set / file))
            assert tensor.name == name
            _assert_bitwise({name: numpy_helper.to_array(tensor)}, {name: want})


def test_write_onnx_test_dir_refuses_names_other_than_the_model_order_and_existing_data_sets(tmp_path):
    sample = ({"x": np.ones(2, np.float32)}, {"y": np.ones(2, np.float32)})
    with pytest.raises(GoldenError, match=r"sample 0 inputs: has \['x'\], expected exactly \['a'\]"):
        write_onnx_test_dir(tmp_path / "a", [sample], input_names=["a"])
    write_onnx_test_dir(tmp_path / "b", [sample])
    with pytest.raises(FileExistsError, match="test_data_set"):
        write_onnx_test_dir(tmp_path / "b", [sample])


def test_read_onnx_test_dir_reads_files_written_by_plain_onnx(tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([True, False])
    c = np.array(7, np.int64)
    for k in range(2):
        d = tmp_path / f"test_data_set_{k}"
        d.mkdir()
        (d / "input_0.pb").write_bytes(numpy_helper.from_array(a + k, "a").SerializeToString())
        (d / "input_1.pb").write_bytes(numpy_helper.from_array(b).SerializeToString())  # unnamed
        (d / "output_0.pb").write_bytes(numpy_helper.from_array(c + k, "c").SerializeToString())

    samples = read_onnx_test_dir(tmp_path)
    assert len(samples) == 2
    for k, (inputs, outputs) in enumerate(samples):
        _assert_bitwise(inputs, {"a": a + k, "input_1": b})
        _assert_bitwise(outputs, {"c": c + k})


# Model-level test folders that the onnx wheel ships (its node-level folders are generated, not
# shipped); their layout is the one the node tests use.
_PACKAGED_TEST_DIRS = ["simple/test_single_relu_model", "simple/test_expand_shape_model1"]


@pytest.mark.parametrize("case", _PACKAGED_TEST_DIRS)
def test_read_onnx_test_dir_reads_the_onnx_packages_own_test_dirs_and_writes_the_same_layout(tmp_path, case):
    source = Path(onnx.__file__).parent / "backend" / "test" / "data" / case
    assert source.is_dir(), f"onnx {onnx.__version__} ships no {source}"
    samples = read_onnx_test_dir(source)
    data_sets = sorted(p for p in source.iterdir() if p.name.startswith("test_data_set_"))
    assert len(samples) == len(data_sets) >= 1
    for (inputs, outputs), d in zip(samples, data_sets, strict=True):
        for prefix, got in (("input", inputs), ("output", outputs)):
            tensors = [onnx.load_tensor(str(f)) for f in sorted(d.glob(f"{prefix}_*.pb"))]
            _assert_bitwise(got, {t.name: numpy_helper.to_array(t) for t in tensors})

    graph = onnx.load(str(source / "model.onnx")).graph
    out = write_onnx_test_dir(tmp_path / source.name, samples, [i.name for i in graph.input],
                              [o.name for o in graph.output])
    written = sorted(p.relative_to(out) for p in out.rglob("*.pb"))
    assert written == sorted(p.relative_to(source) for p in source.rglob("*.pb"))
    for rel in written:
        assert onnx.load_tensor(str(out / rel)) == onnx.load_tensor(str(source / rel)), rel


def _write_pb(file: Path, arr: np.ndarray, name: str) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_bytes(numpy_helper.from_array(arr, name).SerializeToString())


def test_read_onnx_test_dir_refuses_gaps_malformed_files_and_empty_directories(tmp_path):
    one = np.ones(2, np.float32)
    gap = tmp_path / "gap"
    _write_pb(gap / "test_data_set_0" / "input_0.pb", one, "x")
    _write_pb(gap / "test_data_set_2" / "input_0.pb", one, "x")
    with pytest.raises(GoldenError, match=re.escape(f"{gap}: data sets numbered [0, 2], expected 0..1")):
        read_onnx_test_dir(gap)

    file_gap = tmp_path / "file_gap"
    _write_pb(file_gap / "test_data_set_0" / "input_1.pb", one, "x")
    with pytest.raises(GoldenError, match=re.escape(f"{file_gap / 'test_data_set_0'}: input files numbered [1]")):
        read_onnx_test_dir(file_gap)

    bad = tmp_path / "bad"
    _write_pb(bad / "test_data_set_0" / "input_0.pb", one, "x")
    (bad / "test_data_set_0" / "output_0.pb").write_bytes(b"\xff\xff\xff not a tensor")
    with pytest.raises(GoldenError, match=re.escape(f"{bad / 'test_data_set_0' / 'output_0.pb'}: not a readable")):
        read_onnx_test_dir(bad)

    twice = tmp_path / "twice"
    _write_pb(twice / "test_data_set_0" / "input_0.pb", one, "x")
    _write_pb(twice / "test_data_set_0" / "input_1.pb", one, "x")
    with pytest.raises(GoldenError, match=re.escape(f"{twice / 'test_data_set_0' / 'input_1.pb'}: tensor name 'x'")):
        read_onnx_test_dir(twice)

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(GoldenError, match=re.escape(f"{empty}: no test_data_set_*")):
        read_onnx_test_dir(empty)
    with pytest.raises(GoldenError, match="no such directory"):
        read_onnx_test_dir(tmp_path / "absent")


def test_golden_runner_returns_the_stored_outputs_for_every_stored_input(tmp_path):
    samples = _samples()
    runner = GoldenRunner(save_golden(tmp_path / "g", samples), name="ref")
    assert isinstance(runner, Runner) and runner.name == "ref"
    assert [(s.name, s.dtype, s.shape) for s in runner.input_specs()] == [
        (n, a.dtype, a.shape) for n, a in samples[0][0].items()
    ]
    stored = runner.samples()
    assert len(stored) == len(samples)
    for feeds, (inputs, outputs) in zip(stored, samples, strict=True):
        _assert_bitwise(feeds, inputs)
        got = runner.run(feeds)
        _assert_bitwise(got, outputs)
        got["y"][...] = 0  # the caller gets copies: the bundle stays intact
    _assert_bitwise(runner.run(samples[0][0]), samples[0][1])


def test_golden_runner_names_the_input_that_differs_from_the_closest_sample():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    ids = np.array([1, 2], np.int64)
    runner = GoldenRunner(GoldenBundle([({"x": x, "ids": ids}, {"y": x}), ({"x": x + 10, "ids": ids + 1}, {"y": x})]))

    nudged = x.copy()
    nudged[1, 2] += 0.25
    with pytest.raises(GoldenError, match=r"closest is sample 0, where input 'x' differs: max abs difference 0\.25"):
        runner.run({"x": nudged, "ids": ids})
    with pytest.raises(GoldenError, match=r"closest is sample 1, where input 'ids' differs: max abs difference 3"):
        runner.run({"x": x + 10, "ids": ids + 4})
    with pytest.raises(GoldenError, match=r"input 'x' is float64\[2, 3\], stored float32\[2, 3\]"):
        runner.run({"x": x.astype(np.float64), "ids": ids})
    with pytest.raises(GoldenError, match=r"input 'x' is float32\[3, 2\], stored float32\[2, 3\]"):
        runner.run({"x": x.reshape(3, 2), "ids": ids})
    with pytest.raises(GoldenError, match="input 'ids' is missing from the feeds"):
        runner.run({"x": x})
    with pytest.raises(GoldenError, match="input 'extra' is not stored"):
        runner.run({"x": x, "ids": ids, "extra": ids})
    signed = x.copy()
    signed[0, 0] = -0.0
    with pytest.raises(GoldenError, match="input 'x' is equal in value but not bitwise"):
        runner.run({"x": signed, "ids": ids})


def _tiny_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(64, dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "tiny",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [64])], [w],
    )
    return helper.make_model(graph)


def test_model_sha256_is_the_sha256_of_the_file_bytes_without_external_data(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save_model(_tiny_model(), str(path))
    (tmp_path / "other.onnx.data").write_bytes(b"belongs to another model")
    want = hashlib.sha256(path.read_bytes()).hexdigest()
    assert model_sha256(path) == want
    assert model_sha256(str(path)) == want
    assert model_sha256(path.read_bytes()) == want


def test_model_sha256_covers_the_external_data_file_after_the_model(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save_model(_tiny_model(), str(path), save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    data = tmp_path / "m.onnx.data"
    assert data.is_file()
    assert model_sha256(path) == hashlib.sha256(path.read_bytes() + data.read_bytes()).hexdigest()
    before = model_sha256(path)
    data.write_bytes(data.read_bytes()[:-1] + b"\x01")
    assert model_sha256(path) != before


def _scale_model(path: Path, scale: float) -> Path:
    g = helper.make_graph(
        [helper.make_node("Mul", ["x", "s"], ["y"], name="scale")], "scale",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(np.array(scale, np.float32), "s")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_compare_with_a_golden_runner_and_no_inputs_runs_on_the_stored_samples(tmp_path):
    import tether as tt

    model = _scale_model(tmp_path / "m.onnx", 3.0)
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((n, 3)).astype(np.float32) for n in (2, 5)]
    bundle = save_golden(tmp_path / "g", [({"x": x}, {"y": x * np.float32(3)}) for x in xs],
                         {"model_sha256": hashlib.sha256(model.read_bytes()).hexdigest()})
    rep = tt.compare(GoldenRunner(bundle), tt.compile(model))
    assert rep.ok and rep.batches == 2, rep.table()
    assert [m.shape for m in rep.outputs[0].batches] == [(2, 3), (5, 3)]
    assert any("the 2 samples stored in golden bundle" in n for n in rep.notes), rep.notes
    assert not any("SHA-256" in n for n in rep.notes)
    # The same bundle against a model file whose hash differs from the recorded one says so.
    other = _scale_model(tmp_path / "other.onnx", 3.5)
    from tether.parity import TetherRunner

    rep = tt.compare(GoldenRunner(bundle), TetherRunner(other))
    assert not rep.ok
    notes = [n for n in rep.notes if "SHA-256" in n]
    actual = hashlib.sha256(other.read_bytes()).hexdigest()
    assert len(notes) == 1 and actual[:16] in notes[0] and "other.onnx" in notes[0], rep.notes
