"""tt.quantize.read_tensorrt_cache / read_ncnn_table: calibration files read from a path. The
values are checked against the file's own numbers, decoded here by hand (TensorRT: big-endian
float32 bits in hex; ncnn: decimal scales), and against numpy's 127 / max|w|; ranges read back
quantize to the same model bytes as the calibration that wrote them."""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

import numpy as np
import pytest
import tether as tt
from _builder_models import residual_cnn


@pytest.fixture(scope="module")
def calibrated() -> tuple[tt.quantize.QuantizeResult, tt.quantize.QuantizeResult]:
    model = tt.quantize.prepare(residual_cnn(12))
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((24, 3, 12, 12)) * rng.uniform(0.3, 2.0, (24, 1, 1, 1))).astype(np.float32)
    return (tt.quantize.static(model, x, profile="tensorrt", eval_samples=0, threads=1),
            tt.quantize.static(model, x, profile="ncnn", eval_samples=0, threads=1))


def _hand_read_cache(path: Path) -> dict[str, float]:
    lines = path.read_text().splitlines()
    assert lines[0].startswith("TRT-")
    out = {}
    for line in lines[1:]:
        name, _, hexits = line.rpartition(": ")
        out[name] = struct.unpack(">f", bytes.fromhex(hexits.rjust(8, "0")))[0]
    return out


def test_tensorrt_cache_read_from_a_path_gives_the_file_scales_as_symmetric_ranges(tmp_path, calibrated):
    res, _ = calibrated
    res.write_tensorrt_cache(tmp_path / "m.cache")
    expected = _hand_read_cache(tmp_path / "m.cache")
    for path in (tmp_path / "m.cache", str(tmp_path / "m.cache")):
        ranges = tt.quantize.read_tensorrt_cache(path)
        assert set(ranges) == set(expected) == {t.name for t in res.plan.tensors}
        for name, (lo, hi, method) in ranges.items():
            assert method == "tensorrt-cache" and lo == -hi
            assert np.float32(hi / 127) == np.float32(expected[name]), name


def test_tensorrt_ranges_read_back_quantize_to_the_same_model_bytes(tmp_path, calibrated):
    res, _ = calibrated
    res.write_tensorrt_cache(tmp_path / "m.cache")
    ranges = tt.quantize.read_tensorrt_cache(tmp_path / "m.cache")
    qmodel, _, _, _ = tt._core.quant_quantize_qdq(res.float_model._core, res.plan, ranges,
                                                   tt.quantize.make_options("tensorrt"))
    assert tt.Model(qmodel).to_bytes() == res.model.to_bytes()


def test_tensorrt_cache_written_by_hand_with_crlf_and_blank_lines(tmp_path):
    # 1/127 is 0x3c010204; 0.5 is 0x3f000000; a name may hold ": ".
    (tmp_path / "hand.cache").write_bytes(b"TRT-8510-EntropyCalibration2\r\nconv 1: x: 3c010204\r\n\r\ny: 3F000000\r\n")
    ranges = tt.quantize.read_tensorrt_cache(tmp_path / "hand.cache")
    assert ranges == {"conv 1: x": (-127 * float(np.float32(1 / 127)), 127 * float(np.float32(1 / 127)),
                                    "tensorrt-cache"),
                      "y": (-63.5, 63.5, "tensorrt-cache")}


def test_ncnn_table_read_from_a_path_gives_the_file_scales(tmp_path, calibrated):
    _, res = calibrated
    res.write_ncnn_table(tmp_path / "m.table")
    weights, inputs = tt.quantize.read_ncnn_table(tmp_path / "m.table")
    by_hand_w, by_hand_i = {}, {}
    for line in (tmp_path / "m.table").read_text().splitlines():
        key, *values = line.split()
        if key.endswith("_param_0"):
            by_hand_w[key[:-len("_param_0")]] = [float(np.float32(v)) for v in values]
        else:
            by_hand_i[key] = float(np.float32(values[0]))
    assert weights == by_hand_w and inputs == by_hand_i
    assert set(weights) == {p.node for p in res.plan.nodes if p.weight}
    # The weight scales are ncnn's 127 / max|w| per output channel, from the float weights.
    for p in res.plan.nodes:
        w = np.asarray(res.float_model.initializer(p.weight), np.float32)
        np.testing.assert_allclose(weights[p.node], 127 / np.abs(w).reshape(w.shape[0], -1).max(axis=1), rtol=1e-6)
        lo, hi, _ = res.ranges[p.inputs[0]]
        assert 127 / inputs[p.node] == pytest.approx(max(abs(lo), abs(hi)), rel=1e-6)


def test_ncnn_table_written_by_hand_with_tabs_and_an_infinite_scale(tmp_path):
    (tmp_path / "hand.table").write_text("conv1_param_0\t127.5 inf\nconv1 3.25\n\n")
    assert tt.quantize.read_ncnn_table(str(tmp_path / "hand.table")) == ({"conv1": [127.5, float("inf")]},
                                                                         {"conv1": 3.25})


@pytest.mark.parametrize("reader", [tt.quantize.read_tensorrt_cache, tt.quantize.read_ncnn_table])
def test_missing_file_is_an_argument_error_naming_the_path(tmp_path, reader):
    with pytest.raises(tt.ArgumentError, match=r"'.*no_such\.file' does not exist"):
        reader(tmp_path / "no_such.file")


@pytest.mark.parametrize("reader", [tt.quantize.read_tensorrt_cache, tt.quantize.read_ncnn_table])
def test_folder_and_fifo_are_refused_before_reading(tmp_path, reader):
    with pytest.raises(tt.ArgumentError, match="is a directory, not a regular file"):
        reader(tmp_path)
    os.mkfifo(tmp_path / "fifo")
    caught: list[BaseException] = []

    def read() -> None:
        try:
            reader(tmp_path / "fifo")
        except BaseException as e:  # noqa: BLE001  # handed to the test thread
            caught.append(e)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(30)  # a reader that opened the FIFO would wait for a writer forever
    assert not t.is_alive()
    assert len(caught) == 1 and isinstance(caught[0], tt.ArgumentError) and "is a FIFO" in str(caught[0])


def test_a_file_that_is_not_a_tensorrt_cache_is_a_parse_error_naming_path_and_line(tmp_path):
    (tmp_path / "bad.cache").write_text("TRT-8601-EntropyCalibration2\na: 3c010204\nb = 3c010204\n")
    with pytest.raises(tt.ParseError, match=r"TensorRT calibration cache '.*bad\.cache' line 3 'b = 3c010204'"):
        tt.quantize.read_tensorrt_cache(tmp_path / "bad.cache")
    (tmp_path / "table.cache").write_text("conv1 3.25\n")
    with pytest.raises(tt.ParseError, match=r"'.*table\.cache' line 1 'conv1 3.25': expected a header"):
        tt.quantize.read_tensorrt_cache(tmp_path / "table.cache")


def test_a_file_that_is_not_an_ncnn_table_is_a_parse_error_naming_path_and_line(tmp_path, calibrated):
    res, _ = calibrated
    res.write_tensorrt_cache(tmp_path / "m.cache")  # a TensorRT cache given as an ncnn table
    with pytest.raises(tt.ParseError, match=r"ncnn int8 table '.*m\.cache' line 1 'TRT-8601-EntropyCalibration2'"):
        tt.quantize.read_ncnn_table(tmp_path / "m.cache")
    (tmp_path / "bad.table").write_text("conv1_param_0 1 2\nconv1 nan\n")
    with pytest.raises(tt.ParseError, match=r"'.*bad\.table' line 2 'conv1 nan'"):
        tt.quantize.read_ncnn_table(tmp_path / "bad.table")
