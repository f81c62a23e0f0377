"""Ops whose output sizes depend on data (NonZero, Compress, Unique, NonMaxSuppression) inside
larger graphs: the CPU engine plans the steps after such an op once the op has run, and the
results match onnxruntime on every run, whatever sizes the data gives."""

from __future__ import annotations

import threading

import numpy as np
import onnxruntime as ort
import pytest
import tether as tt
import torch
from onnx import TensorProto as P
from onnx import helper as h
from onnx import numpy_helper

OPSET = [h.make_opsetid("", 17)]


def _model(nodes, inputs, outputs, inits=()):
    g = h.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return h.make_model(g, opset_imports=OPSET).SerializeToString()


def _both(model: bytes, feeds: dict[str, np.ndarray], threads: int = 2):
    sess = tt.compile(tt.load(model), threads=threads)
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return sess, ref


def _check(sess, ref, feeds, rtol=1e-5, atol=1e-5):
    got = sess.run(feeds)
    want = ref.run(None, feeds)
    for o, w in zip(ref.get_outputs(), want, strict=True):
        assert got[o.name].shape == w.shape, o.name
        np.testing.assert_allclose(got[o.name], w, rtol=rtol, atol=atol, err_msg=o.name)
    return got


def test_nonzero_feeds_gathernd_and_arithmetic_with_changing_counts() -> None:
    # x -> NonZero -> Transpose -> GatherND(x) -> Mul 2 -> ReduceSum: every step after NonZero
    # has sizes that follow from the count of non-zeros, which changes from run to run.
    model = _model(
        [
            h.make_node("Relu", ["x"], ["r"]),
            h.make_node("NonZero", ["r"], ["nz"]),
            h.make_node("Transpose", ["nz"], ["idx"]),
            h.make_node("GatherND", ["x", "idx"], ["vals"]),
            h.make_node("Mul", ["vals", "two"], ["y"]),
            h.make_node("ReduceSum", ["y"], ["total"], keepdims=0),
            h.make_node("Shape", ["idx"], ["count"]),
        ],
        [h.make_tensor_value_info("x", P.FLOAT, ["n", 6])],
        [
            h.make_tensor_value_info("y", P.FLOAT, None),
            h.make_tensor_value_info("total", P.FLOAT, None),
            h.make_tensor_value_info("count", P.INT64, None),
            h.make_tensor_value_info("idx", P.INT64, None),
        ],
        [numpy_helper.from_array(np.array(2.0, np.float32), "two")],
    )
    sess, ref = _both(model, {})
    rng = np.random.default_rng(0)
    seen = set()
    for n in (4, 4, 7, 4, 1):
        x = rng.standard_normal((n, 6)).astype(np.float32)
        got = _check(sess, ref, {"x": x})
        seen.add(got["idx"].shape[0])
    assert len(seen) > 2  # the runs did see different counts
    # No non-zero at all: every value downstream is empty, the sum is 0.
    got = _check(sess, ref, {"x": -np.ones((3, 6), np.float32)})
    assert got["y"].shape == (0,)


def test_shape_computed_from_data_reaches_range_and_reshape() -> None:
    # The length of a Range comes from the data (ReduceMax -> Cast), and a Reshape target from
    # the Range's size: the engine plans the rest once the values are known.
    model = _model(
        [
            h.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
            h.make_node("Cast", ["m"], ["limit"], to=P.INT64),
            h.make_node("Range", ["zero", "limit", "one"], ["r"]),
            h.make_node("Cast", ["r"], ["rf"], to=P.FLOAT),
            h.make_node("Mul", ["rf", "rf"], ["sq"]),
            h.make_node("Concat", ["limit1", "minus1"], ["shape"], axis=0),
            h.make_node("Unsqueeze", ["limit", "ax0"], ["limit1"]),
            h.make_node("Reshape", ["sq", "shape"], ["y"]),
        ],
        [h.make_tensor_value_info("x", P.FLOAT, [5])],
        [h.make_tensor_value_info("y", P.FLOAT, None)],
        [
            numpy_helper.from_array(np.array(0, np.int64), "zero"),
            numpy_helper.from_array(np.array(1, np.int64), "one"),
            numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
            numpy_helper.from_array(np.array([0], np.int64), "ax0"),
        ],
    )
    sess, ref = _both(model, {})
    for top in (3.5, 9.0, 3.2, 1.0):
        x = np.array([0.0, 1.0, top, 0.5, -2.0], np.float32)
        got = _check(sess, ref, {"x": x})
        assert got["y"].shape == (int(top), 1)


def test_unique_and_compress_inside_a_graph() -> None:
    model = _model(
        [
            h.make_node("Unique", ["x"], ["u", "first", "inverse", "counts"], sorted=1),
            h.make_node("Greater", ["counts", "one"], ["repeated"]),
            h.make_node("Compress", ["u", "repeated"], ["dups"], axis=0),
            h.make_node("Neg", ["dups"], ["y"]),
        ],
        [h.make_tensor_value_info("x", P.INT64, ["n"])],
        [
            h.make_tensor_value_info("y", P.INT64, None),
            h.make_tensor_value_info("inverse", P.INT64, None),
            h.make_tensor_value_info("first", P.INT64, None),
        ],
        [numpy_helper.from_array(np.array(1, np.int64), "one")],
    )
    sess, ref = _both(model, {})
    rng = np.random.default_rng(1)
    for n in (10, 30, 3, 10):
        _check(sess, ref, {"x": rng.integers(0, 8, n).astype(np.int64)})


def test_unique_with_axis_and_unsorted_matches_onnxruntime() -> None:
    model = _model(
        [h.make_node("Unique", ["x"], ["u", "first", "inverse", "counts"], sorted=0, axis=1)],
        [h.make_tensor_value_info("x", P.FLOAT, [2, "n"])],
        [h.make_tensor_value_info(n, t, None) for n, t in
         (("u", P.FLOAT), ("first", P.INT64), ("inverse", P.INT64), ("counts", P.INT64))],
    )
    sess, ref = _both(model, {})
    x = np.array([[1, 0, 1, 2, 0, 1], [3, 5, 3, 1, 5, 2]], np.float32)
    _check(sess, ref, {"x": x})


class _Detector(torch.nn.Module):
    """A YOLO-style single-scale head: boxes (cx, cy, w, h) and class scores per cell."""

    def __init__(self, classes: int = 3) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, stride=2, padding=1), torch.nn.SiLU(),
            torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.SiLU(),
        )
        self.head = torch.nn.Conv2d(32, 4 + classes, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.head(self.body(x)).flatten(2)  # [b, 4 + classes, cells]
        boxes = torch.sigmoid(y[:, :4]).transpose(1, 2) * 64.0  # [b, cells, 4]
        scores = torch.sigmoid(y[:, 4:])  # [b, classes, cells]
        return boxes, scores


def _detector_with_nms(tmp_path) -> bytes:
    import onnx

    torch.manual_seed(0)
    path = tmp_path / "det.onnx"
    tt.export.torch(_Detector().eval(), (torch.randn(1, 3, 32, 32),), path)
    m = onnx.load(str(path))
    g = m.graph
    boxes, scores = g.output[0].name, g.output[1].name
    g.initializer.extend([
        numpy_helper.from_array(np.array([5], np.int64), "max_per_class"),
        numpy_helper.from_array(np.array([0.4], np.float32), "iou"),
        numpy_helper.from_array(np.array([0.45], np.float32), "score_min"),
        numpy_helper.from_array(np.array([2], np.int64), "col2"),
    ])
    g.node.extend([
        h.make_node("NonMaxSuppression", [boxes, scores, "max_per_class", "iou", "score_min"], ["selected"],
                    center_point_box=1),
        h.make_node("Gather", ["selected", "col2"], ["box_col"], axis=1),
        h.make_node("Squeeze", ["box_col"], ["box_idx"], ),
        h.make_node("Gather", [boxes, "box_idx"], ["kept_boxes"], axis=1),
    ])
    del g.output[:]
    g.output.extend([
        h.make_tensor_value_info("selected", P.INT64, None),
        h.make_tensor_value_info("kept_boxes", P.FLOAT, None),
    ])
    return m.SerializeToString()


def test_detector_with_nms_matches_onnxruntime(tmp_path) -> None:
    model = _detector_with_nms(tmp_path)
    sess, ref = _both(model, {})
    rng = np.random.default_rng(2)
    counts = set()
    for _ in range(4):
        x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32) * 2
        got = _check(sess, ref, {"x" if "x" in [i.name for i in sess.inputs] else sess.inputs[0].name: x}, atol=1e-4)
        counts.add(got["selected"].shape[0])
    assert max(counts) > 0


def test_concurrent_runs_with_different_counts() -> None:
    model = _model(
        [h.make_node("NonZero", ["x"], ["nz"]), h.make_node("ReduceSum", ["nz"], ["s"], keepdims=0)],
        [h.make_tensor_value_info("x", P.FLOAT, [64])],
        [h.make_tensor_value_info("s", P.INT64, None)],
    )
    sess = tt.compile(tt.load(model), threads=1)
    rng = np.random.default_rng(3)
    xs = [np.where(rng.random(64) < p, 1.0, 0.0).astype(np.float32) for p in (0.1, 0.5, 0.9) for _ in range(10)]
    errors: list[str] = []

    def work(chunk):
        for x in chunk:
            got = int(sess.run({"x": x})["s"])
            if got != int(np.nonzero(x)[0].sum()):
                errors.append(f"{got} != {int(np.nonzero(x)[0].sum())}")

    threads = [threading.Thread(target=work, args=(xs[k::3],)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_bad_nms_input_is_a_typed_error() -> None:
    model = _model(
        [h.make_node("NonMaxSuppression", ["b", "s", "k"], ["sel"])],
        [h.make_tensor_value_info("b", P.FLOAT, [1, "n", 4]), h.make_tensor_value_info("s", P.FLOAT, [1, 1, "m"])],
        [h.make_tensor_value_info("sel", P.INT64, None)],
        [numpy_helper.from_array(np.array([3], np.int64), "k")],
    )
    sess = tt.compile(tt.load(model))
    with pytest.raises(tt.ArgumentError, match=r"scores have shape \[1, 1, 5\]; expected \[1, classes, 6\]"):
        sess.run({"b": np.zeros((1, 6, 4), np.float32), "s": np.zeros((1, 1, 5), np.float32)})
