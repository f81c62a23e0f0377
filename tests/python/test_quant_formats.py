"""TensorRT calibration caches and ncnn int8 tables: lines decoded by hand with struct and
float32, round trips that keep every bit, and malformed text reported by line."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import tether as tt
from tether import _core


def _bits(v: float) -> int:
    return int(np.float32(v).view(np.uint32))


def test_tensorrt_lines_are_the_big_endian_hex_of_the_float32_scale() -> None:
    amax = 1.0
    scale = float(np.float32(amax / 127))  # TensorRT's scale of a tensor whose threshold is 1
    text = _core.quant_write_tensorrt_cache({"prob": scale, "data": 0.5}, "TRT-7000-EntropyCalibration2")
    want = [
        "TRT-7000-EntropyCalibration2",
        "data: " + struct.pack(">f", 0.5).hex(),
        "prob: " + struct.pack(">f", scale).hex(),
    ]
    assert text == "\n".join(want) + "\n"
    assert "prob: 3c010204" in text  # 1/127 as float32 is 0x3c010204


def test_tensorrt_cache_from_the_tensorrt_sample_decodes_by_hand() -> None:
    sample = "TRT-7000-EntropyCalibration2\ndata: 3c008912\nconv1: 3c88edfc\nip2: 3e691968\nprob: 3c010a14\n"
    got = _core.quant_read_tensorrt_cache(sample)
    for line in sample.splitlines()[1:]:
        name, hexdigits = line.split(": ")
        assert _bits(got[name]) == struct.unpack(">I", bytes.fromhex(hexdigits))[0]
    assert list(got) == ["conv1", "data", "ip2", "prob"]


def test_tensorrt_cache_round_trips_every_bit() -> None:
    rng = np.random.default_rng(2)
    values = np.concatenate([rng.uniform(0, 1, 50) * 10.0 ** rng.uniform(-30, 30, 50), [0.0, 1e-45, 3.4e38]])
    scales = {f"(Unnamed Layer* {i}) [Convolution]_output": float(np.float32(v)) for i, v in enumerate(values)}
    scales["name: with colon"] = 0.25
    back = _core.quant_read_tensorrt_cache(_core.quant_write_tensorrt_cache(scales))
    assert back.keys() == scales.keys()
    assert all(_bits(back[k]) == _bits(v) for k, v in scales.items())


def test_tensorrt_reader_accepts_crlf_upper_case_and_short_hex() -> None:
    got = _core.quant_read_tensorrt_cache("TRT-8601-EntropyCalibration2\r\na: 3C010204\r\nb: 0\r\n\r\n")
    assert _bits(got["a"]) == 0x3C010204 and got["b"] == 0.0


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "line 1 '': expected a header"),
        ("data: 3c008912\n", "line 1 'data: 3c008912': expected a header"),
        ("TRT-7000-EntropyCalibration2\ndata 3c008912\n", "line 2 'data 3c008912': expected '<tensor name>: <8 hex"),
        ("TRT-7000-EntropyCalibration2\na: 1\n\nb: 3c00891x\n", "line 4 'b: 3c00891x': the scale '3c00891x' is not 1"),
        ("TRT-7000-EntropyCalibration2\nb: 1234567890\n", "line 2 .*not 1 to 8 hex digits"),
        ("TRT-7000-EntropyCalibration2\n: 3c008912\n", "line 2 .*the tensor name is empty"),
        ("TRT-7000-EntropyCalibration2\na: 7fc00000\n", "line 2 .*is not a finite non-negative float"),
        ("TRT-7000-EntropyCalibration2\na: bf800000\n", "line 2 .*the scale -1 is not a finite non-negative"),
        ("TRT-7000-EntropyCalibration2\na: 1\na: 2\n", "line 3 'a: 2': tensor 'a' appears twice"),
    ],
)
def test_malformed_tensorrt_caches_are_parse_errors_naming_the_line(text: str, match: str) -> None:
    with pytest.raises(tt.ParseError, match="TensorRT calibration cache " + match):
        _core.quant_read_tensorrt_cache(text)


def test_tensorrt_writer_refuses_what_it_cannot_write() -> None:
    with pytest.raises(tt.ArgumentError, match="tensor name 'a\nb' contains a line break"):
        _core.quant_write_tensorrt_cache({"a\nb": 1.0})
    with pytest.raises(tt.ArgumentError, match="scale of 'a' is nan"):
        _core.quant_write_tensorrt_cache({"a": float("nan")})
    with pytest.raises(tt.ArgumentError, match="header 'cache' must start with 'TRT-'"):
        _core.quant_write_tensorrt_cache({"a": 1.0}, "cache")
    with pytest.raises(tt.ArgumentError, match="a tensor name is empty"):
        _core.quant_write_tensorrt_cache({"": 1.0})


def test_ncnn_table_follows_ncnn2tables_layout() -> None:
    # Weight lines, then input lines, each sorted by layer; numbers in their shortest exact form.
    weights, inputs = {"conv2": [2.5], "conv1": [156.625, 0.125]}, {"conv2": 41.28125, "conv1": 1.0}
    text = _core.quant_write_ncnn_table(weights, inputs)
    assert text == "conv1_param_0 156.625 0.125\nconv2_param_0 2.5\nconv1 1\nconv2 41.28125\n"


def test_ncnn_table_written_by_ncnn2table_reads_as_float32() -> None:
    # ncnn2table prints "%f " per value, with a trailing space.
    text = "conv1_param_0 156.639840 23.500000 \nfc_param_0 1270.000000 \nconv1 41.283264 \nfc 0.007874 \n"
    weights, inputs = _core.quant_read_ncnn_table(text)
    assert {k: [np.float32(v) for v in vs] for k, vs in weights.items()} == {
        "conv1": [np.float32("156.639840"), np.float32(23.5)],
        "fc": [np.float32(1270.0)],
    }
    want = {"conv1": np.float32("41.283264"), "fc": np.float32("0.007874")}
    assert {k: np.float32(v) for k, v in inputs.items()} == want


def test_ncnn_table_round_trips_every_bit() -> None:
    rng = np.random.default_rng(4)
    weights = {
        f"conv{i}": [float(v) for v in (127 / rng.uniform(1e-6, 10, rng.integers(1, 64))).astype(np.float32)]
        for i in range(8)
    }
    weights["dead"] = [float("inf"), 1.0]  # ncnn2table writes 127 / 0 for a dead channel
    inputs = {f"conv{i}": float(np.float32(127 / rng.uniform(0.01, 100))) for i in range(8)}
    back_w, back_i = _core.quant_read_ncnn_table(_core.quant_write_ncnn_table(weights, inputs))
    assert back_w.keys() == weights.keys() and back_i.keys() == inputs.keys()
    for k, vs in weights.items():
        assert [_bits(v) for v in back_w[k]] == [_bits(v) for v in vs]
    assert all(_bits(back_i[k]) == _bits(v) for k, v in inputs.items())


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("conv1_param_0 1.0\nconv1\n", "line 2 'conv1': expected a name followed by scales"),
        ("conv1_param_0 1.0 abc\n", "line 1 'conv1_param_0 1.0 abc': 'abc' is not a number"),
        ("conv1 1.0 2.0\n", "line 1 .*expected one input scale for layer 'conv1', found 2"),
        ("attn_param_1 1.0\n", "line 1 .*only '<layer>_param_0' weight lines are supported"),
        ("_param_0 1.0\n", "line 1 .*only '<layer>_param_0'"),
        ("a_param_0 1\n\na_param_0 2\n", "line 3 'a_param_0 2': the weight scales of layer 'a' appear twice"),
        ("a 1\na 2\n", "line 2 'a 2': the input scale of layer 'a' appears twice"),
    ],
)
def test_malformed_ncnn_tables_are_parse_errors_naming_the_line(text: str, match: str) -> None:
    with pytest.raises(tt.ParseError, match="ncnn int8 table " + match):
        _core.quant_read_ncnn_table(text)


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("conv 1", "contains white space"),
        ("x_param_1", "contains '_param_'"),
        ("", "a layer name is empty"),
        ("n" * 248, "longer than ncnn's keys"),
    ],
)
def test_ncnn_writer_refuses_names_ncnn_would_misread(name: str, match: str) -> None:
    with pytest.raises(tt.ArgumentError, match=match):
        _core.quant_write_ncnn_table({}, {name: 1.0})
    with pytest.raises(tt.ArgumentError, match=match):
        _core.quant_write_ncnn_table({name: [1.0]}, {})
