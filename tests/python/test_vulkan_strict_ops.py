"""Vulkan kernels for the ops models bring beyond convolutions and products: Gather with run-time
indices, Where, comparisons and logic, Cast, Slice with computed starts, Tile, Range, Pad,
CumSum, TopK, RNN/GRU/LSTM. Each model is compiled with strict=True, so a passing test proves the
node ran on the device, and compared with onnxruntime (exactly for integers and bools). Shapes
and attributes follow the ONNX spec's cases: negative indices, broadcasting, clamped bounds and
negative steps, exclusive/reverse scans, ties, directions, initial states and sequence lengths.
Every test runs under the validation layer and fails on any message."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tether as tt
from _vulkan import assert_close, requires_vulkan
from onnx import helper, numpy_helper

pytestmark = [requires_vulkan, pytest.mark.usefixtures("vulkan_validation")]

F, I32, I64, B = onnx.TensorProto.FLOAT, onnx.TensorProto.INT32, onnx.TensorProto.INT64, onnx.TensorProto.BOOL
_TYPES = {np.dtype(np.float32): F, np.dtype(np.int32): I32, np.dtype(np.int64): I64, np.dtype(np.bool_): B}
RNG = np.random.default_rng(7)


def _model(nodes, feeds, consts=None, outputs=("y",), opset=18) -> bytes:
    """A model of `nodes` whose inputs are `feeds` (name -> array: its dtype, any sizes)."""
    inputs = [helper.make_tensor_value_info(n, _TYPES[a.dtype], [f"{n}{d}" for d in range(a.ndim)]) for n, a in feeds.items()]
    graph = helper.make_graph(nodes, "g", inputs, [onnx.ValueInfoProto(name=o) for o in outputs],
                              [numpy_helper.from_array(np.asarray(a), n) for n, a in (consts or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10).SerializeToString()


def _check(nodes, feeds, consts=None, outputs=("y",), opset=18, rtol=1e-5, runs=None):
    """Compiles the model on Vulkan with strict=True and compares every output with onnxruntime's,
    for `feeds` and then each further feed dict of `runs` (plans per input shapes and values)."""
    data = _model(nodes, feeds, consts, outputs, opset)
    sess = tt.compile(tt.load(data), device="vulkan", strict=True)
    # Each named node is a Vulkan kernel: neither folded away nor a shape computation on the host.
    backends = {s["name"]: s["backend"] for s in sess.steps()}
    for n in nodes:
        assert not n.name or backends.get(n.name) == "vulkan", (n.name, backends)
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for f in [feeds, *(runs or [])]:
        got = sess.run(f)
        for name, want in zip(outputs, ref.run(list(outputs), f), strict=True):
            assert_close(got[name], want, rtol, what=name)
    return sess


def _floats(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---- Gather with run-time indices ---------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_with_runtime_negative_indices_matches_onnxruntime(axis):
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=axis, name="g")
    idx = np.array([[0, -1, 2], [-3, 1, 1]], np.int64)
    _check([node], {"x": _floats(3, 4, 3), "i": idx},
           runs=[{"x": _floats(5, 3, 3), "i": idx[::-1]}, {"x": _floats(3, 3, 3), "i": idx[:, :0]}])
    _check([node], {"x": _floats(3, 4, 3), "i": np.array(-2, np.int64)})


def test_gather_embedding_of_int64_and_bool_rows_with_int32_indices():
    node = helper.make_node("Gather", ["x", "i"], ["y"], name="g")
    idx = np.array([4, 0, 4, 2], np.int32)
    _check([node], {"x": RNG.integers(-2**40, 2**40, (5, 3)).astype(np.int64), "i": idx})
    _check([node], {"x": RNG.random((5, 3)) > 0.5, "i": idx})


def test_gather_index_out_of_range_at_run_time_is_an_argument_error_naming_the_node():
    node = helper.make_node("Gather", ["x", "i"], ["y"], name="embed")
    sess = tt.compile(tt.load(_model([node], {"x": _floats(5, 2), "i": np.zeros(3, np.int64)})), device="vulkan", strict=True)
    for bad in (5, -6, 2**33):
        with pytest.raises(tt.ArgumentError, match=rf"Gather 'embed': an index is out of range for axis 0 of size 5; the index: {bad}"):
            sess.run({"x": _floats(5, 2), "i": np.array([0, bad, 1], np.int64)})
    assert_close(sess.run({"x": np.eye(5, 2, dtype=np.float32), "i": np.array([1, -5], np.int64)})["y"],
                 np.eye(5, 2, dtype=np.float32)[[1, 0]])


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd_with_runtime_negative_indices_and_batch_dims(batch_dims):
    node = helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims, name="gnd")
    idx = np.array([[[1, -1], [0, 2]], [[-2, 0], [1, 1]]], np.int64)  # tuples of 2
    _check([node], {"x": _floats(2, 3, 4, 5), "i": idx}, runs=[{"x": _floats(2, 2, 3, 1), "i": idx[:, :1]}])
    _check([node], {"x": RNG.integers(-2**40, 2**40, (2, 3, 4)).astype(np.int64), "i": idx[..., :1]})
    sess = tt.compile(tt.load(_model([node], {"x": _floats(2, 3, 4), "i": idx})), device="vulkan", strict=True)
    with pytest.raises(tt.ArgumentError, match="GatherND 'gnd': an index is out of range for the data's dims; the index: 4"):
        sess.run({"x": _floats(2, 3, 4), "i": np.array([[[0, 4]], [[0, 0]]], np.int64)})


# ---- Where, comparisons, logic, Cast ------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
def test_where_broadcasts_its_three_operands(dtype):
    node = helper.make_node("Where", ["c", "a", "b"], ["y"], name="w")
    c = RNG.random((3, 1, 4)) > 0.4
    a = (RNG.standard_normal((1, 5, 4)) * 1e3).astype(dtype)
    b = np.array(-7, dtype)
    _check([node], {"c": c, "a": a, "b": b}, runs=[{"c": c[:1], "a": a[:, :2], "b": np.array(3, dtype)}])


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_comparisons_on_floats_with_nan_and_int64_past_32_bits(op):
    node = helper.make_node(op, ["a", "b"], ["y"], name="cmp")
    a = np.array([[1.0, np.nan, -0.0, 3.0, np.inf]], np.float32)
    _check([node], {"a": a, "b": np.array([[1.0], [np.nan], [0.0]], np.float32)})
    big = np.array([2**40, -2**40, 5, -1, 2**32], np.int64)
    _check([node], {"a": big, "b": np.array([2**40, 2**40, 5, 2**32 - 1, 0], np.int64)})


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_boolean_logic_broadcasts(op):
    _check([helper.make_node(op, ["a", "b"], ["y"], name="l")],
           {"a": RNG.random((2, 3, 5)) > 0.5, "b": RNG.random((3, 1)) > 0.5})


def test_not_and_a_comparison_feeding_where():
    nodes = [helper.make_node("Less", ["x", "t"], ["m"], name="lt"), helper.make_node("Not", ["m"], ["n"], name="not"),
             helper.make_node("Where", ["n", "x", "z"], ["y"], name="w")]
    _check(nodes, {"x": _floats(4, 7)}, consts={"t": np.float32(0.25), "z": np.float32(-1e9)})


@pytest.mark.parametrize(("src", "dst"), [(np.float32, np.int64), (np.float32, np.int32), (np.float32, np.bool_),
                                          (np.int64, np.float32), (np.int64, np.int32), (np.bool_, np.float32),
                                          (np.int32, np.int64), (np.bool_, np.int64), (np.int64, np.bool_)])
def test_cast_between_float_int32_int64_and_bool(src, dst):
    node = helper.make_node("Cast", ["x"], ["y"], to=_TYPES[np.dtype(dst)], name="c")
    if src == np.float32:
        x = np.array([0.0, -0.0, 1.5, -1.5, -2.9, 7e5, -3e9 if dst == np.int64 else -2.5e9, 4e9 if dst == np.int64 else 2.5],
                     np.float32)
    elif src == np.bool_:
        x = np.array([True, False, True])
    else:
        x = np.array([0, 1, -1, 2**31 - 1, -2**31, 12345678] + ([2**40, -2**40 - 3] if src == np.int64 else []), src)
    _check([node], {"x": x})


# ---- Slice, Tile, Range, Pad, Expand, Reshape with computed values ---------------------------------


def test_slice_with_starts_from_an_input_negative_clamped_and_stepping_backwards():
    node = helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"], name="sl")
    consts = {"e": np.array([100, -8], np.int64), "a": np.array([0, -1], np.int64), "st": np.array([1, -2], np.int64)}
    x = _floats(6, 7)
    _check([node], {"x": x, "s": np.array([2, -1], np.int64)}, consts,
           runs=[{"x": x, "s": np.array([-100, 100], np.int64)}, {"x": x, "s": np.array([-2, 2**40], np.int64)},
                 {"x": _floats(3, 9), "s": np.array([5, 4], np.int64)}])


def test_slice_with_ends_from_shape_and_int64_data():
    nodes = [helper.make_node("Shape", ["x"], ["sh"]), helper.make_node("Gather", ["sh", "one"], ["n"], axis=0),
             helper.make_node("Sub", ["n", "one"], ["e"]), helper.make_node("Slice", ["x", "zero", "e", "one"], ["y"], name="sl")]
    consts = {"one": np.array([1], np.int64), "zero": np.array([0], np.int64)}
    _check(nodes, {"x": RNG.integers(-9, 9, (2, 6)).astype(np.int64)}, consts,
           runs=[{"x": RNG.integers(-9, 9, (3, 4)).astype(np.int64)}])


def test_tile_range_and_expand_with_values_from_inputs():
    nodes = [helper.make_node("Shape", ["x"], ["sh"]), helper.make_node("Concat", ["two", "sh"], ["sh2"], axis=0),
             helper.make_node("Expand", ["x", "sh2"], ["e"], name="expand"),
             helper.make_node("Tile", ["x", "reps"], ["t"], name="tile"),
             helper.make_node("Range", ["fs", "fl", "fd"], ["r"], name="frange"),
             helper.make_node("Range", ["s", "l", "d"], ["y"], name="irange")]
    feeds = {"x": _floats(5, 3), "reps": np.array([2, 3], np.int64), "fs": np.array(-1.5, np.float32),
             "fl": np.array(2.0, np.float32), "fd": np.array(0.25, np.float32), "s": np.array(-3, np.int64),
             "l": np.array(2**33, np.int64), "d": np.array(2**31 - 1, np.int64)}
    again = dict(feeds, x=_floats(2, 4), reps=np.array([1, 2], np.int64), fd=np.array(-0.5, np.float32),
                 d=np.array(-7, np.int64), l=np.array(-30, np.int64))
    _check(nodes, feeds, {"two": np.array([2], np.int64)}, outputs=("e", "t", "r", "y"), runs=[again])


def test_range_of_int64_past_32_bits_is_an_argument_error_on_the_device():
    node = helper.make_node("Range", ["s", "l", "d"], ["y"], name="irange")
    feeds = {"s": np.array(2**40, np.int64), "l": np.array(2**40 + 3, np.int64), "d": np.array(1, np.int64)}
    sess = tt.compile(tt.load(_model([node], feeds)), device="vulkan", strict=True)
    with pytest.raises(tt.ArgumentError, match=rf"Range 'irange': its start or delta does not fit 32 bits.*the value: {2**40}"):
        sess.run(feeds)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_with_pads_from_an_input(mode):
    node = helper.make_node("Pad", ["x", "p", "v"], ["y"], mode=mode, name="pad")
    v = np.float32(2.5) if mode == "constant" else np.float32(0)
    feeds = {"x": _floats(3, 4), "p": np.array([1, 2, 2, -1] if mode == "constant" else [1, 2, 2, 1], np.int64)}
    _check([node], feeds, {"v": v}, opset=19)


def test_reshape_of_int64_stays_on_the_device():
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Mul", ["r2", "r2"], ["y"])]
    # A float product after the int64 view: the view is on Vulkan, not a CPU fallback.
    nodes.insert(1, helper.make_node("Cast", ["r"], ["r2"], to=F))
    _check(nodes, {"x": RNG.integers(-5, 5, (2, 6)).astype(np.int64)}, {"s": np.array([3, -1], np.int64)})


# ---- CumSum, TopK -------------------------------------------------------------------------------


@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("axis", [0, -1])
def test_cumsum_exclusive_reverse_along_an_axis(exclusive, reverse, axis):
    node = helper.make_node("CumSum", ["x", "a"], ["y"], exclusive=exclusive, reverse=reverse, name="cs")
    _check([node], {"x": _floats(13, 5)}, {"a": np.array(axis, np.int64)}, rtol=1e-5)
    _check([node], {"x": RNG.integers(-2**40, 2**40, (3, 7)).astype(np.int64)}, {"a": np.array(axis, np.int32)})


def test_cumsum_of_int32_wraps_like_onnxruntime():
    node = helper.make_node("CumSum", ["x", "a"], ["y"], name="cs")
    _check([node], {"x": np.array([2**30, 2**30, 2**30, -5], np.int32)}, {"a": np.array(0, np.int64)})


@pytest.mark.parametrize(("largest", "axis"), [(1, -1), (0, -1), (1, 0), (0, 1)])
def test_topk_largest_smallest_with_ties_in_index_order(largest, axis):
    node = helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=axis, largest=largest, sorted=1, name="top")
    x = RNG.integers(-3, 4, (4, 9)).astype(np.float32)  # many ties
    _check([node], {"x": x}, {"k": np.array([3], np.int64)}, outputs=("y", "i"))
    _check([node], {"x": RNG.integers(-2**40, 2**40, (4, 9)).astype(np.int64)}, {"k": np.array([4], np.int64)}, outputs=("y", "i"))


# ---- RNN, GRU, LSTM -----------------------------------------------------------------------------


def _rnn(op, direction, hidden, inputs, *, seq=5, batch=3, size=4, lens=None, h0=False, c0=False, peep=False, **attrs):
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    dirs = 2 if direction == "bidirectional" else 1
    consts = {"W": _floats(dirs, gates * hidden, size) * 0.5, "R": _floats(dirs, gates * hidden, hidden) * 0.5,
              "B": _floats(dirs, 2 * gates * hidden) * 0.2}
    names = ["x", "W", "R", "B", "", "", "", ""]
    feeds = {"x": _floats(seq, batch, size)}
    if lens is not None:
        names[4] = "lens"
        consts["lens"] = np.array(lens, np.int32)
    if h0:
        names[5] = "h0"
        feeds["h0"] = _floats(dirs, batch, hidden)
    if c0:
        names[6] = "c0"
        feeds["c0"] = _floats(dirs, batch, hidden)
    if peep:
        names[7] = "P"
        consts["P"] = _floats(dirs, 3 * hidden) * 0.3
    while names and names[-1] == "":
        names.pop()
    outs = ["y", "yh", "yc"][: 3 if op == "LSTM" else 2]
    node = helper.make_node(op, names, outs, hidden_size=hidden, direction=direction, name="rec", **attrs)
    return _check([node], feeds, consts, outputs=tuple(outs), rtol=1e-4)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_directions_and_linear_before_reset(direction, lbr):
    _rnn("GRU", direction, 6, None, linear_before_reset=lbr, h0=lbr == 1)


def test_gru_with_sequence_lengths_and_initial_state():
    _rnn("GRU", "bidirectional", 5, None, lens=[5, 2, 1], h0=True, linear_before_reset=1)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_lstm_directions_with_peepholes_and_initial_states(direction):
    _rnn("LSTM", direction, 7, None, h0=True, c0=True, peep=direction != "reverse")


def test_lstm_sequence_lengths_input_forget_and_clip():
    _rnn("LSTM", "bidirectional", 4, None, lens=[1, 5, 3], input_forget=1, clip=0.8)


def test_rnn_with_custom_activations():
    _rnn("RNN", "bidirectional", 3, None, activations=["Relu", "HardSigmoid"], activation_alpha=[0.3], activation_beta=[0.4])


def test_batch_first_gru_matches_the_cpu_engine():
    """layout=1, which onnxruntime's CPU GRU does not take: the CPU engine is the oracle."""
    hidden, dirs = 4, 2
    node = helper.make_node("GRU", ["x", "W", "R", "B"], ["y", "yh"], hidden_size=hidden, direction="bidirectional",
                            layout=1, linear_before_reset=1, name="rec")
    consts = {"W": _floats(dirs, 3 * hidden, 3), "R": _floats(dirs, 3 * hidden, hidden), "B": _floats(dirs, 6 * hidden)}
    data = _model([node], {"x": _floats(2, 6, 3)}, consts, ("y", "yh"))
    feeds = {"x": _floats(2, 6, 3)}
    got = tt.compile(tt.load(data), device="vulkan", strict=True).run(feeds)
    want = tt.compile(tt.load(data), device="cpu").run(feeds)
    for k in ("y", "yh"):
        assert_close(got[k], want[k], 1e-4, what=k)


# ---- small zoo-style networks, wholly on the device ---------------------------------------------


def test_torch_tagger_and_tiny_encoder_compile_wholly_on_vulkan(tmp_path):
    """An embedding + 2-layer bidirectional GRU + LSTM tagger, and an encoder whose position ids
    come from arange and whose padding mask is computed (Equal, Where, Not, Cast, CumSum): strict
    Vulkan, in float32 and under precision fp16, against onnxruntime."""
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 8)
            self.gru = nn.GRU(8, 6, num_layers=2, bidirectional=True)
            self.lstm = nn.LSTM(12, 5, batch_first=False)
            self.out = nn.Linear(5, 4)

        def forward(self, ids):
            h, _ = self.gru(self.emb(ids))
            h, _ = self.lstm(h)
            return self.out(h)

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.pos = nn.Embedding(30, 16), nn.Embedding(40, 16)
            self.layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)

        def forward(self, ids):
            pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0).expand_as(ids)
            pad = ids == 0
            h = self.emb(ids) + self.pos(pos)
            h = torch.where(pad.unsqueeze(-1), torch.zeros_like(h), h)
            return self.layer(h).cumsum(1) * (~pad).unsqueeze(-1).to(h.dtype)

    torch.manual_seed(0)
    for net, ids in ((Tagger(), torch.randint(0, 50, (7, 2))), (Encoder(), torch.randint(0, 30, (2, 9)))):
        path = str(tmp_path / f"{type(net).__name__}.onnx")
        torch.onnx.export(net.eval(), (ids,), path, input_names=["ids"], output_names=["y"], dynamo=False,
                          dynamic_axes={"ids": {0: "a", 1: "b"}})
        feeds = {"ids": ids.numpy()}
        want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        assert_close(tt.compile(path, device="vulkan", strict=True).run(feeds)["y"], want, 1e-4)
        # Float tensors stored as float16: the same kernels' other build.
        half = tt.compile(path, device="vulkan", strict=True, precision="fp16")
        assert_close(half.run(feeds)["y"], want, 2e-2, what="fp16")


def test_rnn_sequence_lengths_out_of_range_and_wrong_shapes_are_argument_errors():
    hidden = 3
    node = helper.make_node("LSTM", ["x", "W", "R", "", "lens"], ["y"], hidden_size=hidden, name="rec")
    consts = {"W": _floats(1, 4 * hidden, 2), "R": _floats(1, 4 * hidden, hidden)}
    data = _model([node], {"x": _floats(4, 2, 2), "lens": np.array([4, 1], np.int32)}, consts)
    sess = tt.compile(tt.load(data), device="vulkan", strict=True)
    with pytest.raises(tt.ArgumentError, match="LSTM 'rec': sequence_lens holds a value outside 0 to 4; the value: 5"):
        sess.run({"x": _floats(4, 2, 2), "lens": np.array([5, 1], np.int32)})
    with pytest.raises(tt.ArgumentError, match=r"LSTM 'rec': sequence_lens has shape \[3\], expected \[2\]"):
        sess.run({"x": _floats(4, 2, 2), "lens": np.array([1, 1, 1], np.int32)})
    # An empty one is given, with the wrong shape, as onnxruntime says too.
    with pytest.raises(tt.ArgumentError, match=r"LSTM 'rec': sequence_lens has shape \[0\], expected \[2\]"):
        sess.run({"x": _floats(4, 2, 2), "lens": np.zeros(0, np.int32)})
