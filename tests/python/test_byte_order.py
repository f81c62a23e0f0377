"""Byte-swapped numpy arrays ('>f4' on x86-64) are read by their values on every path that takes
numpy arrays: Session.run on the CPU and Vulkan engines, graph-builder constants, calibration,
parity and golden bundles. numpy itself, which honours byte order, is the oracle throughout.
Structured and object arrays stay refused with a typed error naming the input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import tether as tt
from _builder_models import residual_cnn
from _vulkan import BACKENDS
from onnx import TensorProto, helper, numpy_helper
from tether import _core
from tether.parity import compare_arrays
from tether.parity._golden import GoldenRunner, load_golden, read_onnx_test_dir, save_golden, write_onnx_test_dir

SWAPPED = ">" if np.little_endian else "<"  # the byte order this machine does not use


def _swapped(a: np.ndarray) -> np.ndarray:
    """The values of ``a`` in the non-native byte order."""
    out = a.astype(a.dtype.newbyteorder(SWAPPED))
    assert not out.dtype.isnative
    return out


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
           inits: list[onnx.TensorProto] | None = None, out_type: int = TensorProto.FLOAT) -> tt.Model:
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", out_type, None)],
                              initializer=inits or [])
    return tt.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())


def _add_half() -> tt.Model:
    return _model([helper.make_node("Add", ["x", "c"], ["y"])],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                  [numpy_helper.from_array(np.array([0.5], np.float32), "c")])


@pytest.mark.parametrize("device", BACKENDS)
def test_big_endian_float_input_gives_numpy_values_on_each_engine(device: str) -> None:
    x = _swapped(np.array([1, 2, 3, -4, 1e-3, 65504.5, -0.0], np.float32))
    before = x.tobytes()
    y = tt.compile(_add_half(), device=device).run({"x": x})["y"]
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, x.astype(np.float32) + np.float32(0.5))
    assert x.tobytes() == before  # the caller's array is read, never swapped in place


@pytest.mark.parametrize("device", BACKENDS)
def test_big_endian_strided_input_gives_numpy_values(device: str) -> None:
    x = _swapped(np.arange(24, dtype=np.float32) - 7.5)[1::3]
    assert not x.flags.c_contiguous
    y = tt.compile(_add_half(), device=device).run({"x": x})["y"]
    np.testing.assert_array_equal(y, np.ascontiguousarray(x).astype(np.float32) + np.float32(0.5))


def test_big_endian_int64_shape_input_reshapes_like_numpy() -> None:
    m = _model([helper.make_node("Reshape", ["x", "s"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6]),
                helper.make_tensor_value_info("s", TensorProto.INT64, [2])])
    x = np.arange(6, dtype=np.float32)
    y = tt.compile(m).run({"x": x, "s": _swapped(np.array([2, 3], np.int64))})["y"]
    np.testing.assert_array_equal(y, x.reshape(2, 3))


@pytest.mark.parametrize("device", BACKENDS)
def test_big_endian_gather_indices_match_numpy_take(device: str) -> None:
    m = _model([helper.make_node("Gather", ["x", "i"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
                helper.make_tensor_value_info("i", TensorProto.INT64, [3])])
    x, i = np.arange(4, dtype=np.float32) * 1.5, np.array([1, 3, -4], np.int64)
    y = tt.compile(m, device=device).run({"x": x, "i": _swapped(i)})["y"]
    np.testing.assert_array_equal(y, np.take(x, i))


@pytest.mark.parametrize(("np_dtype", "onnx_dtype"), [
    (np.float64, TensorProto.DOUBLE), (np.float16, TensorProto.FLOAT16), (np.int32, TensorProto.INT32),
    (np.int16, TensorProto.INT16), (np.uint16, TensorProto.UINT16), (np.uint32, TensorProto.UINT32),
    (np.uint64, TensorProto.UINT64)])
def test_big_endian_input_of_every_wide_dtype_passes_through_identity_unchanged(np_dtype: type,
                                                                                onnx_dtype: int) -> None:
    m = _model([helper.make_node("Identity", ["x"], ["y"])], [helper.make_tensor_value_info("x", onnx_dtype, [5])],
               out_type=onnx_dtype)
    x = np.array([0, 1, 7, 100, 1000], np_dtype)
    if np.issubdtype(np_dtype, np.signedinteger) or np.issubdtype(np_dtype, np.inexact):
        x[1] = -3
    y = tt.compile(m).run({"x": _swapped(x)})["y"]
    assert y.dtype == np.dtype(np_dtype)
    np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("dtype", [np.dtype([("a", "<f4"), ("b", "<f4")]), np.dtype([("a", ">f4")]),
                                   np.dtype(object)], ids=["structured", "structured_swapped", "object"])
def test_structured_and_object_inputs_stay_typed_errors_naming_the_input(dtype: np.dtype) -> None:
    x = np.zeros(3, dtype)
    with pytest.raises(tt.ArgumentError, match=r"input 'x' has numpy dtype .* which tether cannot take"):
        tt.compile(_add_half()).run({"x": x})


def test_builder_initializer_and_constant_attribute_from_big_endian_arrays_hold_their_values() -> None:
    w = np.array([[1.5, -2.0], [0.25, 4.0], [3.0, -1.0]], np.float32)
    k = np.array([10.0, -20.0], np.float32)
    b = tt.GraphBuilder("g")
    x = b.input("x", "float32", (1, 3))
    b.initializer("w", _swapped(w))
    c = b.node("Constant", [], value=_swapped(k))
    b.output(b.node("Add", [b.node("MatMul", [x, "w"]), c], outputs=["y"]))
    xv = np.array([[1.0, 2.0, 3.0]], np.float32)
    np.testing.assert_array_equal(tt.compile(b.build()).run({"x": xv})["y"], xv @ w + k)


def _batch(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((4, 3, 6, 6)).astype(np.float32) * 3


def test_calibrator_observes_big_endian_batches_by_their_values() -> None:
    x = _batch(3)
    cal = tt.quantize.Calibrator(residual_cnn(6), ["x"], bins=64, threads=1)
    cal.observe({"x": _swapped(x)})
    cal.observe(_swapped(x[:1] * 2))
    s = cal.stats()["x"]
    both = np.concatenate([x, x[:1] * 2])
    assert (s.count, s.min, s.max) == (both.size, both.min(), both.max())


def test_tensor_stats_observe_reads_big_endian_values() -> None:
    x = np.array([[-5.0, 2.0], [0.5, 7.25]], np.float32)
    s = _core.TensorStats(64, 1)
    s.observe(_swapped(x))
    assert (s.count, s.min, s.max) == (4, -5.0, 7.25)
    assert list(s.channel_absmax) == list(np.abs(x).max(axis=0))


def test_quantize_static_on_big_endian_batches_takes_their_extremes() -> None:
    x = _batch(5)
    res = tt.quantize.static(residual_cnn(6), [_swapped(x)], method="minmax", threads=1)
    lo, hi, _ = res.ranges["x"]
    assert (lo, hi) == (float(x.min()), float(x.max()))


def test_weight_qparams_of_a_big_endian_weight_follow_its_values() -> None:
    w = np.array([[0.5, -1.27], [2.54, 1.0]], np.float32)
    scales, _ = _core.quant_weight_qparams(_swapped(w), 0, "int8", True, False)
    # symmetric int8 [-127, 127]: scale = max|w| / 127 per output channel
    np.testing.assert_array_equal(scales, (np.abs(w).max(axis=1).astype(np.float64) / 127).astype(np.float32))


def test_compare_accepts_big_endian_inputs_and_feeds_their_values() -> None:
    x = _swapped(np.array([1.0, -2.5, 3.25], np.float32))
    seen: list[np.ndarray] = []

    def reference(x: np.ndarray) -> dict[str, np.ndarray]:
        seen.append(x)
        return {"y": np.asarray(x, np.float32) + np.float32(0.5)}

    rep = tt.compare(reference, tt.compile(_add_half()), {"x": x})
    assert rep.ok
    assert seen[0].dtype.isnative and seen[0].tolist() == [1.0, -2.5, 3.25]


def test_golden_bundle_saves_and_loads_big_endian_arrays_in_native_order(tmp_path: Path) -> None:
    x = np.array([1.0, -0.0, np.inf, 3.5], np.float32)
    ids = np.array([2**40, -7], np.int64)
    y = np.array([0.25, 8.0], np.float64)
    save_golden(tmp_path / "b", [({"x": _swapped(x), "ids": _swapped(ids)}, {"y": _swapped(y)})])
    (inputs, outputs), = load_golden(tmp_path / "b").samples
    for got, want in ((inputs["x"], x), (inputs["ids"], ids), (outputs["y"], y)):
        assert got.dtype == want.dtype and got.dtype.isnative
        assert got.tobytes() == want.tobytes()
    runner = GoldenRunner(tmp_path / "b")
    np.testing.assert_array_equal(runner.run({"x": x, "ids": ids})["y"], y)
    np.testing.assert_array_equal(runner.run({"x": _swapped(x), "ids": _swapped(ids)})["y"], y)


def test_golden_bundle_written_with_big_endian_npz_loads_native_values(tmp_path: Path) -> None:
    x, y = np.array([1.5, -2.0], np.float32), np.array([3.0], np.float32)
    save_golden(tmp_path / "b", [({"x": x}, {"y": y})])
    with open(tmp_path / "b" / "sample_0.npz", "wb") as f:  # as a big-endian machine's numpy writes it
        np.savez(f, **{"in/x": _swapped(x), "out/y": _swapped(y)})
    (inputs, outputs), = load_golden(tmp_path / "b").samples
    assert inputs["x"].dtype.isnative and inputs["x"].tolist() == x.tolist()
    assert outputs["y"].dtype.isnative and outputs["y"].tolist() == y.tolist()


def test_onnx_test_dir_of_big_endian_arrays_reads_back_with_onnx(tmp_path: Path) -> None:
    x = np.array([[1.0, -2.0, 3.5]], np.float32)
    write_onnx_test_dir(tmp_path, [({"x": _swapped(x)}, {"y": _swapped(x * 2)})])
    tensor = onnx.TensorProto()
    tensor.ParseFromString((tmp_path / "test_data_set_0" / "input_0.pb").read_bytes())
    np.testing.assert_array_equal(numpy_helper.to_array(tensor), x)
    (inputs, outputs), = read_onnx_test_dir(tmp_path)
    np.testing.assert_array_equal(outputs["y"], x * 2)


def test_compare_arrays_reads_big_endian_reference_and_candidate_by_value() -> None:
    r = np.array([1.0, 2.0, -3.0, 4.0], np.float32)
    c = r.astype(np.float64) + np.array([0.0, 0.5, 0.0, -0.25])
    m = compare_arrays(_swapped(r), _swapped(c))
    assert m.max_abs_error == float(np.abs(c - r).max()) and m.worst_index == (1,)
    assert m.worst_reference == 2.0 and m.worst_candidate == 2.5
