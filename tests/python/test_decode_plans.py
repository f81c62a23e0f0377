"""Plans across decoding steps: each step's cache is one longer, so each runs at new input
shapes, and the plan for it starts from the previous plan's shape inference (only the nodes the
longer cache reaches are inferred again). Checked on a small attention layer with a KV cache,
whose shapes also flow through Shape -> Gather -> Range/Reshape: over lengths that grow, shrink
and repeat, every run equals a fresh session's bit for bit and onnxruntime's within float
tolerance; max_memory refuses exactly the lengths a fresh session refuses; the plan cache keeps
its bound."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import tether as tt
from onnx import TensorProto as P
from onnx import helper as h
from onnx import numpy_helper

HIDDEN, HEADS, HEAD = 16, 2, 8


def _layer() -> bytes:
    """x [1, 1, 16], past [1, 2, L, 8], mask [1, L + 1] -> y [1, 1, 16], present [1, 2, L + 1, 8]."""
    rng = np.random.default_rng(0)
    w = {n: numpy_helper.from_array(rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32) * 0.3, n)
         for n in ("wq", "wk", "wo")}
    ints = {"heads_shape": [1, HEADS, 1, HEAD], "two": [2], "zero": [0], "one": [1]}
    consts = [numpy_helper.from_array(np.asarray(v, np.int64), n) for n, v in ints.items()]
    consts.append(numpy_helper.from_array(np.asarray(-1e4, np.float32), "neg"))
    consts.append(numpy_helper.from_array(np.asarray(1.0, np.float32), "onef"))
    nodes = [
        h.make_node("MatMul", ["x", "wq"], ["q0"]),
        h.make_node("Reshape", ["q0", "heads_shape"], ["q"]),
        h.make_node("MatMul", ["x", "wk"], ["k0"]),
        h.make_node("Reshape", ["k0", "heads_shape"], ["k"]),
        h.make_node("Concat", ["past", "k"], ["present"], axis=2),
        h.make_node("Transpose", ["present"], ["kt"], perm=[0, 1, 3, 2]),
        h.make_node("MatMul", ["q", "kt"], ["scores"]),
        # The mask, [1, 1, 1, T] with T read from the cache's shape (a shape value per step).
        h.make_node("Shape", ["present"], ["pshape"]),
        h.make_node("Gather", ["pshape", "two"], ["total"], axis=0),
        h.make_node("Concat", ["one", "one", "one", "total"], ["mask_shape"], axis=0),
        h.make_node("Cast", ["mask"], ["maskf"], to=P.FLOAT),
        h.make_node("Sub", ["onef", "maskf"], ["hole"]),
        h.make_node("Mul", ["hole", "neg"], ["bias0"]),
        h.make_node("Reshape", ["bias0", "mask_shape"], ["bias"]),
        h.make_node("Add", ["scores", "bias"], ["masked"]),
        h.make_node("Softmax", ["masked"], ["probs"], axis=-1),
        h.make_node("MatMul", ["probs", "present"], ["ctx"]),
        h.make_node("Reshape", ["ctx", "x_shape"], ["ctx2"]),
        h.make_node("MatMul", ["ctx2", "wo"], ["o"]),
        # A value that depends on T through Range: the positions' mean added to the output.
        h.make_node("Squeeze", ["total", "zero"], ["t0"]),
        h.make_node("Range", ["zero_s", "t0", "one_s"], ["positions"]),
        h.make_node("Cast", ["positions"], ["posf"], to=P.FLOAT),
        h.make_node("ReduceMean", ["posf"], ["pos_mean"], keepdims=0),
        h.make_node("Add", ["o", "pos_mean"], ["y"]),
        h.make_node("Shape", ["x"], ["x_shape"]),
    ]
    consts += [numpy_helper.from_array(np.asarray(0, np.int64), "zero_s"),
               numpy_helper.from_array(np.asarray(1, np.int64), "one_s")]
    nodes.insert(0, nodes.pop())  # x_shape first
    graph = h.make_graph(
        nodes, "decode_layer",
        [h.make_tensor_value_info("x", P.FLOAT, [1, 1, HIDDEN]),
         h.make_tensor_value_info("past", P.FLOAT, [1, HEADS, "past_len", HEAD]),
         h.make_tensor_value_info("mask", P.INT64, [1, "total_len"])],
        [h.make_tensor_value_info("y", P.FLOAT, None), h.make_tensor_value_info("present", P.FLOAT, None)],
        initializer=list(w.values()) + consts)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


def _feeds(length: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.ones((1, length + 1), np.int64)
    if length > 2:
        mask[0, 0] = 0  # a padded first position
    return {"x": rng.standard_normal((1, 1, HIDDEN)).astype(np.float32),
            "past": rng.standard_normal((1, HEADS, length, HEAD)).astype(np.float32), "mask": mask}


LENGTHS = [0, 1, 2, 3, 4, 5, 9, 4, 4, 33, 2, 17, 3, 3, 64, 1]


def test_changing_cache_lengths_match_a_fresh_session_and_onnxruntime() -> None:
    model = _layer()
    sess = tt.compile(tt.load(model), threads=1)
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for step, length in enumerate(LENGTHS):
        feeds = _feeds(length, step)
        got = sess.run(feeds)
        fresh = tt.compile(tt.load(model), threads=1).run(feeds)
        want = dict(zip(["y", "present"], ref.run(["y", "present"], feeds), strict=True))
        for name in ("y", "present"):
            assert got[name].shape == want[name].shape, (length, name)
            np.testing.assert_array_equal(got[name], fresh[name], err_msg=f"length {length}: {name}")
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5, err_msg=f"length {length}")


def test_a_contradicting_mask_is_refused_after_lengths_that_fit() -> None:
    # The mask must be one longer than the cache: shape inference of the Add refuses it, also
    # when the plan starts from the previous step's inference.
    sess = tt.compile(tt.load(_layer()), threads=1)
    for length in (3, 4):
        sess.run(_feeds(length, length))
    bad = _feeds(5, 0)
    bad["mask"] = np.ones((1, 9), np.int64)
    with pytest.raises(tt.ShapeError):
        sess.run(bad)
    np.testing.assert_array_equal(sess.run(_feeds(5, 1))["y"], tt.compile(tt.load(_layer()), threads=1).run(_feeds(5, 1))["y"])


def _bytes_needed(model: bytes, length: int) -> int:
    """What a run at `length` takes against max_memory: the arena, the scratch (which depends
    on the GEMM kernels this CPU gets) and the outputs."""
    sess = tt.compile(tt.load(model), threads=1)
    out = sess.run(_feeds(length, length))
    m = sess.memory()
    return m["arena_bytes"] + m["scratch_bytes"] + sum(v.nbytes for v in out.values())


def test_max_memory_refuses_the_same_lengths_as_a_fresh_session() -> None:
    model = _layer()
    limit = _bytes_needed(model, 175)  # inside the sweep below on any CPU
    sess = tt.compile(tt.load(model), threads=1, max_memory=limit)
    refused = []
    lengths = [1, 8, *range(150, 200, 3), 10, *range(199, 150, -7), 300, 5]
    for length in lengths:
        feeds = _feeds(length, length)
        try:
            tt.compile(tt.load(model), threads=1, max_memory=limit).run(feeds)
            fresh_ok = True
        except tt.MemoryLimitError:
            fresh_ok = False
        if fresh_ok:
            sess.run(feeds)
        else:
            with pytest.raises(tt.MemoryLimitError, match="max_memory"):
                sess.run(feeds)
            refused.append(length)
    assert 300 in refused and 150 not in refused  # the limit falls inside the sweep


def test_the_plan_cache_keeps_its_bound_over_many_lengths() -> None:
    sess = tt.compile(tt.load(_layer()), threads=1)
    for length in range(40):
        sess.run(_feeds(length, length))
    assert sess.memory()["plans"] == 16


def test_outputs_the_caller_keeps_are_never_written_again_while_buffers_are_reused() -> None:
    # As a decoder runs: each step's present is fed back as the next step's past, so the caller
    # holds the last output while the next run writes; and one array is kept all along.
    sess = tt.compile(tt.load(_layer()), threads=1)
    kept = sess.run(_feeds(3, 3))["present"]
    kept_copy = kept.copy()
    addresses = set()
    past = None
    for length in range(40, 100):
        feeds = _feeds(length, length)
        if past is not None:
            feeds["past"] = past
        out = sess.run(feeds)
        fresh = tt.compile(tt.load(_layer()), threads=1).run(feeds)
        np.testing.assert_array_equal(out["present"], fresh["present"], err_msg=f"length {length}")
        np.testing.assert_array_equal(out["y"], fresh["y"], err_msg=f"length {length}")
        assert not np.shares_memory(out["present"], feeds["past"])
        addresses.add(out["present"].__array_interface__["data"][0])
        past = out["present"]
    np.testing.assert_array_equal(kept, kept_copy)  # untouched by 60 later runs
    # The present buffers alternate between a few that each last many steps, and so do arenas.
    assert len(addresses) <= 12, len(addresses)
    assert sess.memory()["arenas"] <= 12, sess.memory()
