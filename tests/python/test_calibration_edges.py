"""Calibration edges: a channel axis a tensor lacks is refused (never silently untracked),
negative axes count from the end, and the TensorRT cache and ncnn table readers give parsed
values or a typed ParseError naming the line on any bytes: non-UTF-8 names, meaningless ncnn
scales and old-Mac line ends included. numpy and hand-decoded files are the oracles."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import onnx
import pytest
import tether as tt
from _builder_models import residual_cnn
from onnx import TensorProto, helper
from tether import _core
from tether.quantize._calibrator import _channel_axis
from tether.quantize._result import _ncnn_scale


@pytest.fixture(scope="module")
def cnn() -> tt.Model:
    return residual_cnn(6)


def _x(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((3, 3, 6, 6)).astype(np.float32)


def _hex_float(h: str) -> float:
    return struct.unpack(">f", bytes.fromhex(h))[0]


# ---- Calibrator channel axes -----------------------------------------------------------------

@pytest.mark.parametrize("axis", [4, 99, -5, 2**31, -(2**40), 2**70])
def test_channel_axis_outside_the_rank_is_argument_error_naming_tensor_rank_and_axis(cnn: tt.Model,
                                                                                   axis: int) -> None:
    with pytest.raises(tt.ArgumentError, match=rf"tensor 'x' has rank 4, so it has no channel axis {axis} "
                                               r"\(axes -4 to 3\)"):
        tt.quantize.Calibrator(cnn, [("x", axis)])


@pytest.mark.parametrize("axis", [1.0, "1", True, (1,)])
def test_channel_axis_that_is_not_an_int_is_argument_error(cnn: tt.Model, axis: object) -> None:
    with pytest.raises(tt.ArgumentError, match="tensor 'x': channel axis .* is not an int"):
        tt.quantize.Calibrator(cnn, [("x", axis)])


@pytest.mark.parametrize("item", [("x",), ("x", 1, 2), (1, 1), 5])
def test_malformed_tensor_entries_are_argument_errors(cnn: tt.Model, item: object) -> None:
    with pytest.raises(tt.ArgumentError, match="is neither a name nor a \\(name, channel_axis\\) pair"):
        tt.quantize.Calibrator(cnn, [item])


@pytest.mark.parametrize(("axis", "numpy_axis"), [(1, 1), (-3, 1), (3, 3), (-1, 3), (-4, 0), (0, 0)])
def test_channel_axes_in_range_track_numpy_channel_extremes(cnn: tt.Model, axis: int, numpy_axis: int) -> None:
    x = _x(1)
    cal = tt.quantize.Calibrator(cnn, [("x", axis)], bins=64, threads=1)
    cal.observe(x)
    s = cal.stats()["x"]
    assert s.channel_axis == numpy_axis
    others = tuple(d for d in range(4) if d != numpy_axis)
    assert list(s.channel_absmax) == np.abs(x).max(axis=others).tolist()


def test_a_plain_name_or_axis_none_tracks_no_channels(cnn: tt.Model) -> None:
    cal = tt.quantize.Calibrator(cnn, ["x"], bins=64, threads=1)
    cal.observe(_x())
    assert cal.stats()["x"].channel_axis == -1 and len(cal.stats()["x"].channel_absmax) == 0
    cal = tt.quantize.Calibrator(cnn, [("x", None)], bins=64, threads=1)
    cal.observe(_x())
    assert cal.stats()["x"].channel_axis == -1 and len(cal.stats()["x"].channel_absmax) == 0


def test_unknown_name_with_an_axis_still_names_the_missing_value(cnn: tt.Model) -> None:
    with pytest.raises(tt.ArgumentError, match="cannot observe 'nope': the model has no value of that name"):
        tt.quantize.Calibrator(cnn, [("nope", 99)])


def test_unknown_rank_refuses_negative_axes_it_cannot_count_from_the_end() -> None:
    assert _channel_axis("r", 2, None) == 2
    with pytest.raises(tt.ArgumentError, match="tensor 'r' has an unknown rank, so channel axis -1 cannot"):
        _channel_axis("r", -1, None)
    with pytest.raises(tt.ArgumentError, match="tensor 'r' has an unknown rank, so channel axis 2147483648"):
        _channel_axis("r", 2**31, None)
    with pytest.raises(tt.ArgumentError, match=r"tensor 's' has rank 0, so it has no channel axis 0 \(no axes\)"):
        _channel_axis("s", 0, ())


def test_core_calibrator_refuses_axes_past_the_rank_and_below_minus_one(cnn: tt.Model) -> None:
    with pytest.raises(tt.ArgumentError, match=r"cannot track the channels of 'x' along axis 99: it has rank 4 "
                                               r"\(axes 0 to 3\)"):
        _core.Calibrator(cnn._core, [("x", 99)], 64, 1, False)
    with pytest.raises(tt.ArgumentError, match="cannot track the channels of 'x' along axis -2: a channel axis is 0"):
        _core.Calibrator(cnn._core, [("x", -2)], 64, 1, False)


def _relu_of_any_rank() -> tt.Model:
    """Relu of an input declared without a shape: the rank of 'y' is known only when it runs."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return tt.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())


def test_core_calibrator_checks_an_axis_of_unknown_rank_when_the_tensor_runs() -> None:
    x = np.arange(8, dtype=np.float32) - 3
    cal = _core.Calibrator(_relu_of_any_rank()._core, [("y", 2)], 64, 1, False)
    with pytest.raises(tt.ArgumentError, match=r"calibration batch 0: cannot track the channels of 'y' along axis 2: "
                                               r"it has rank 2 \(axes 0 to 1\)"):
        cal.observe({"x": x.reshape(2, 4)})
    cal.observe({"x": x.reshape(2, 2, 2)})  # rank 3: axis 2 exists
    s = cal.stats()["y"]
    assert list(s.channel_absmax) == np.maximum(x.reshape(2, 2, 2), 0).max(axis=(0, 1)).tolist()


# ---- TensorRT calibration cache ----------------------------------------------------------------

@pytest.mark.parametrize(("text", "line"), [
    (b"TRT-1\n\xff\xfe: 3c010a14\n", 2),
    (b"TRT-1\nok: 3c010a14\nbad\xc3: 3c010a14\n", 3),
    (b"TRT-1\xe9\nx: 3c010a14\n", 1),
    (b"TRT-1\n\xed\xa0\x80: 3c010a14\n", 2),  # a UTF-16 surrogate encoded as UTF-8
])
def test_tensorrt_cache_with_non_utf8_bytes_is_parse_error_naming_the_line(text: bytes, line: int) -> None:
    with pytest.raises(tt.ParseError, match=f"TensorRT calibration cache line {line} .*not valid UTF-8"):
        _core.quant_read_tensorrt_cache(text)


def test_tensorrt_cache_with_utf8_names_reads_them_as_str() -> None:
    got = _core.quant_read_tensorrt_cache("TRT-1\nconv_é→1: 3c010a14\n".encode())
    assert got == {"conv_é→1": _hex_float("3c010a14")}


@pytest.mark.parametrize("eol", ["\r", "\r\n", "\n"])
def test_tensorrt_cache_reads_every_line_end_convention(eol: str) -> None:
    text = eol.join(["TRT-8601-EntropyCalibration2", "a: 3c010a14", "", "b c: 3f000000", ""])
    assert _core.quant_read_tensorrt_cache(text) == {"a": _hex_float("3c010a14"), "b c": 0.5}


def test_tensorrt_cache_with_mixed_line_ends_numbers_lines_as_an_editor_would() -> None:
    with pytest.raises(tt.ParseError, match="TensorRT calibration cache line 4 'oops'"):
        _core.quant_read_tensorrt_cache("TRT-1\r\na: 3c010a14\rb: 3c010a14\noops\r\n")


def test_tensorrt_cache_written_by_tether_reads_back_with_cr_line_ends() -> None:
    scales = {"conv1_out": float(np.float32(0.0123)), "relu:0": 1.0, "x": 0.0}
    text = _core.quant_write_tensorrt_cache(scales)
    assert _core.quant_read_tensorrt_cache(text.replace("\n", "\r")) == scales


# ---- ncnn int8 table -------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "line", "why"), [
    ("conv1 nan\n", 1, "the scale nan is not positive"),
    ("a 1\nconv1 -3\n", 2, "the scale -3 is not positive"),
    ("conv1 0\n", 1, "the scale 0 is not positive"),
    ("conv1 -0.0\n", 1, "the scale -0 is not positive"),
    ("conv1 -inf\n", 1, "the scale -inf is not positive"),
    ("conv1_param_0 1 nan 2\n", 1, "the scale nan is not positive"),
    ("conv1_param_0 1 2 -0.5\n", 1, "the scale -0.5 is not positive"),
    ("conv1 1e999\n", 1, "the scale '1e999' is out of float32's range"),
])
def test_ncnn_scales_that_mean_nothing_are_parse_errors_naming_the_line(text: str, line: int, why: str) -> None:
    with pytest.raises(tt.ParseError, match=f"ncnn int8 table line {line} .*: {why}"):
        _core.quant_read_ncnn_table(text)


def test_ncnn_inf_scale_of_an_all_zero_channel_reads_as_ncnn2table_writes_it() -> None:
    # ncnn2table prints 127 / 0 with "%f" for a channel whose weights are all zero
    weights, inputs = _core.quant_read_ncnn_table("conv1_param_0 inf 2.5 \nconv1 3.0 \n")
    assert weights == {"conv1": [float("inf"), 2.5]} and inputs == {"conv1": 3.0}


@pytest.mark.parametrize(("text", "line"), [(b"\xff\xfe 1.0\n", 1), (b"a 1\nb\x80_param_0 1 2\n", 2)])
def test_ncnn_table_with_non_utf8_bytes_is_parse_error_naming_the_line(text: bytes, line: int) -> None:
    with pytest.raises(tt.ParseError, match=f"ncnn int8 table line {line} .*not valid UTF-8"):
        _core.quant_read_ncnn_table(text)


def test_ncnn_table_with_cr_line_ends_reads_each_entry() -> None:
    assert _core.quant_read_ncnn_table("a_param_0 1 2\rb 2\ra 0.5\r") == ({"a": [1.0, 2.0]}, {"b": 2.0, "a": 0.5})


@pytest.mark.parametrize("scale", [float("nan"), 0.0, -1.0, float("-inf")])
def test_ncnn_writer_refuses_scales_the_reader_would_refuse(scale: float) -> None:
    with pytest.raises(tt.ArgumentError, match="layer 'conv1' has scale .* expected a positive float"):
        _core.quant_write_ncnn_table({"conv1": [1.0, scale]}, {})
    with pytest.raises(tt.ArgumentError, match="layer 'conv1' has scale"):
        _core.quant_write_ncnn_table({}, {"conv1": scale})


def test_ncnn_scale_of_a_range_too_small_for_127_over_it_is_one() -> None:
    assert _ncnn_scale(0.5) == 254.0
    assert _ncnn_scale(0.0) == 1.0
    assert _ncnn_scale(1e-45) == 1.0  # 127 / the smallest denormal overflows float32
    assert _ncnn_scale(2.0) == float(np.float32(127) / np.float32(2.0))


def test_quantized_cnn_with_a_near_zero_weight_channel_writes_a_table_the_reader_takes(tmp_path: Path) -> None:
    model = residual_cnn(6)
    proto = onnx.load_from_string(model.to_bytes())
    for init in proto.graph.initializer:
        if init.name == "w1":
            w = onnx.numpy_helper.to_array(init).copy()
            w[2] = 1e-45  # 127 / max|w| overflows for this channel
            init.CopyFrom(onnx.numpy_helper.from_array(w, "w1"))
    res = tt.quantize.static(tt.load(proto.SerializeToString()), [_x(2)], threads=1, profile="ncnn")
    res.write_ncnn_table(tmp_path / "t.table")
    weights, _ = _core.quant_read_ncnn_table((tmp_path / "t.table").read_bytes())
    assert weights["conv1"][2] == 1.0
    assert all(np.isfinite(v) and v > 0 for vs in weights.values() for v in vs)


# ---- both readers on random bytes --------------------------------------------------------------------

def test_random_mutations_of_real_files_are_parsed_or_typed_parse_errors() -> None:
    rng = np.random.default_rng(123)
    trt = _core.quant_write_tensorrt_cache({f"t{i}": float(np.float32(0.01 * (i + 1))) for i in range(12)}).encode()
    ncnn = _core.quant_write_ncnn_table({f"c{i}": [0.5 * (i + 1), 3.0] for i in range(6)},
                                        {f"c{i}": 12.5 for i in range(6)}).encode()
    for read, base in ((_core.quant_read_tensorrt_cache, trt), (_core.quant_read_ncnn_table, ncnn)):
        for _ in range(1500):
            b = bytearray(base)
            for _ in range(int(rng.integers(1, 5))):
                pos = int(rng.integers(0, len(b)))
                if rng.integers(0, 2):
                    b[pos] = int(rng.integers(0, 256))
                else:
                    b[pos:pos] = bytes([int(rng.choice([0x0A, 0x0D, 0x20, 0x3A, 0x2D, 0x80, 0xC3, 0xFF]))])
            try:
                got = read(bytes(b))
            except tt.ParseError:
                continue
            names = list(got) if isinstance(got, dict) else [*got[0], *got[1]]
            assert all(isinstance(n, str) for n in names)
            if isinstance(got, tuple):
                assert all(v > 0 for vs in got[0].values() for v in vs) and all(v > 0 for v in got[1].values())


# ---- NUL bytes in names ----------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "line", "byte"), [
    (b"TRT-1\nconv\x001: 3c010a14\n", 2, 5),
    (b"TRT-1\nok: 3c010a14\n\x00: 3c010a14\n", 3, 1),
    (b"TRT-1\x00\nx: 3c010a14\n", 1, 6),
])
def test_tensorrt_cache_name_with_a_nul_byte_is_parse_error_naming_the_line(text: bytes, line: int, byte: int) -> None:
    # The message shows the NUL as \0 and goes on past it (a C string would end there).
    with pytest.raises(tt.ParseError, match=rf"TensorRT calibration cache line {line} '.*\\0.*': byte {byte} of the line "
                                            r"is a NUL, which no name may hold"):
        _core.quant_read_tensorrt_cache(text)


@pytest.mark.parametrize(("text", "line", "byte"), [
    (b"conv\x001 1.0\n", 1, 5),
    (b"a 1\nconv1\x00_param_0 1 2\n", 2, 6),
    (b"a 1\nb 2\x00\n", 2, 4),
])
def test_ncnn_table_name_with_a_nul_byte_is_parse_error_naming_the_line(text: bytes, line: int, byte: int) -> None:
    with pytest.raises(tt.ParseError, match=rf"ncnn int8 table line {line} '.*\\0.*': byte {byte} of the line is a NUL"):
        _core.quant_read_ncnn_table(text)


def test_writers_refuse_names_with_a_nul_byte_that_their_readers_refuse() -> None:
    with pytest.raises(tt.ArgumentError, match=r"tensor name 'a\\0b' contains a NUL byte"):
        _core.quant_write_tensorrt_cache({"a\x00b": 1.0})
    with pytest.raises(tt.ArgumentError, match=r"header 'TRT-1\\0' contains a NUL byte"):
        _core.quant_write_tensorrt_cache({"a": 1.0}, "TRT-1\x00")
    with pytest.raises(tt.ArgumentError, match=r"layer name 'a\\0b' contains a NUL byte"):
        _core.quant_write_ncnn_table({"a\x00b": [1.0]}, {})
    with pytest.raises(tt.ArgumentError, match=r"layer name 'c\\0' contains a NUL byte"):
        _core.quant_write_ncnn_table({}, {"c\x00": 1.0})
