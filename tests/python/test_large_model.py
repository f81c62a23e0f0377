"""Models over 2 GiB: loaded through external data, saved through external data, and run
in onnxruntime with the same results. The weight file is sparse, so the test stays fast."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
import tether as tt
from onnx import TensorProto, helper

ROW = 1024  # floats per row: 4 KiB
ROWS = 532_480  # 2,181,038,080 bytes: just over 2 GiB
PICKS = np.array([0, 1, 262_144, 524_288, ROWS - 2, ROWS - 1], dtype=np.int64)  # rows past 2 GiB included


def row_values(i: int) -> np.ndarray:
    return (np.arange(ROW, dtype=np.float32) + i * 0.5).astype(np.float32)


@pytest.fixture(scope="module")
def large_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("large")
    data = folder / "w.bin"
    with open(data, "wb") as f:
        f.truncate(ROWS * ROW * 4)
        for i in PICKS:
            f.seek(int(i) * ROW * 4)
            f.write(row_values(int(i)).tobytes())
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[ROWS, ROW])
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value="w.bin")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["w", "idx"], ["y"], axis=0, name="lookup")], "large",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", ROW])],
        initializer=[w],
    )
    path = folder / "large.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10), str(path))
    return path


def run(path) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {"idx": PICKS})[0]


@pytest.mark.large
def test_model_over_2gib_roundtrips_through_external_data(large_model, tmp_path):
    model = tt.load(large_model)
    s = model.summary()
    assert s.weight_bytes == ROWS * ROW * 4 > 2**31
    w = model.initializer("w")
    assert w.shape == (ROWS, ROW)
    for i in PICKS:
        assert np.array_equal(w[i], row_values(int(i)))

    out = tmp_path / "copy.onnx"
    files = model.save(out)  # "auto": too large for one file, so the weights go outside
    assert files == [out, tmp_path / "copy.onnx.data"]
    assert os.path.getsize(tmp_path / "copy.onnx.data") == ROWS * ROW * 4
    assert os.path.getsize(out) < 4096
    onnx.checker.check_model(str(out), full_check=True)

    expected = np.stack([row_values(int(i)) for i in PICKS])
    got_original, got_copy = run(large_model), run(out)
    assert np.array_equal(got_original, expected)
    assert got_copy.tobytes() == got_original.tobytes()


@pytest.mark.large
def test_model_over_2gib_refuses_a_single_file(large_model, tmp_path):
    model = tt.load(large_model)
    with pytest.raises(tt.ArgumentError, match=r"2\.03 GiB, over the 2 GiB an ONNX file can hold; save it with external data"):
        model.save(tmp_path / "single.onnx", external_data=False)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(tt.ArgumentError, match="over the 2 GiB"):
        model.to_bytes()
