"""tether's CPU engine on the real-model set, against onnxruntime and torch."""

from __future__ import annotations

import os
import threading

import numpy as np
import onnx
import pytest
import tether as tt
import torch
from _onnx_oracle import run_ort
from _vulkan import BACKENDS
from onnx import TensorProto, helper


def close_to(got: np.ndarray, ref: np.ndarray) -> float:
    """The error relative to the reference's largest magnitude (the issue's criterion)."""
    assert got.shape == ref.shape and got.dtype == ref.dtype
    return float(np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


def test_engine_matches_onnxruntime_and_torch_at_batch_1_and_8(exported):
    sess = tt.compile(tt.load(exported.path), threads=2)
    for batch in (1, 8):
        feeds = exported.inputs(batch, seed=batch)
        ours = sess(feeds["x"])
        ort_out = run_ort(exported.path, feeds)[0]
        with torch.no_grad():
            torch_out = exported.module(torch.from_numpy(feeds["x"])).numpy()
        assert close_to(ours, ort_out) <= 1e-4
        assert close_to(ours, torch_out) <= 1e-4
    assert sess.memory()["plans"] == 2


def test_lstm_and_unet_exports_hold_the_ops_they_are_here_to_cover(exported_models):
    def ops(name):
        return {n.op_type for n in onnx.load(str(exported_models[name].path)).graph.node}

    assert "LSTM" in ops("lstm")
    assert {"Resize", "ConvTranspose", "MaxPool", "Concat"} <= ops("unet")


def test_unoptimized_and_single_thread_sessions_agree(exported):
    model = tt.load(exported.path)
    x = exported.inputs(3)["x"]
    a = tt.compile(model, threads=1, optimize=False)(x)
    b = tt.compile(model, threads=2)(x)
    assert close_to(a, b) <= 1e-6


def test_arena_is_well_below_the_sum_of_intermediates_and_is_reused(exported_models):
    resnet = exported_models["resnet"]
    sess = tt.compile(tt.load(resnet.path), threads=1)
    x = resnet.inputs(4)["x"]
    first = sess(x)
    m = sess.memory()
    assert m["arena_bytes"] <= 0.5 * m["intermediate_bytes"], m
    for _ in range(5):
        assert np.array_equal(sess(x), first)
    assert (sess.memory()["plans"], sess.memory()["arenas"]) == (1, 1)
    sess(resnet.inputs(2)["x"])
    assert sess.memory()["plans"] == 2


def test_concurrent_runs_from_several_threads_give_each_its_own_result(exported_models):
    model = exported_models["transformer"]
    sess = tt.compile(tt.load(model.path), threads=2)
    inputs = [model.inputs(1 + i % 3, seed=i)["x"] for i in range(8)]
    expected = [sess(x) for x in inputs]
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(5):
                results[i] = sess(inputs[i])
                assert np.array_equal(results[i], expected[i])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert all(np.array_equal(results[i], expected[i]) for i in range(8))


def test_nan_and_inf_inputs_propagate_like_onnxruntime(exported_models):
    mlp = exported_models["mlp"]
    x = mlp.inputs(4)["x"]
    x[0, 3] = np.nan
    x[1, 5] = np.inf
    x[2, 7] = -np.inf
    ours = tt.compile(tt.load(mlp.path), threads=1)(x)
    ref = run_ort(mlp.path, {"x": x})[0]
    assert np.array_equal(np.isnan(ours), np.isnan(ref))
    finite = np.isfinite(ref)
    assert np.allclose(ours[finite], ref[finite], rtol=1e-4, atol=1e-4 * np.abs(ref[finite]).max())


def test_inputs_are_read_in_place_and_outputs_are_writeable(exported_models):
    mlp = exported_models["mlp"]
    sess = tt.compile(tt.load(mlp.path), threads=1)
    x = mlp.inputs(2)["x"]
    out = sess.run({"x": x})
    (name, y), = out.items()
    assert name == sess.outputs[0].name and y.flags.writeable and y.flags.c_contiguous
    # A non-contiguous view gives the same result as its contiguous copy.
    wide = np.repeat(x, 2, axis=1)[:, ::2]
    assert not wide.flags.c_contiguous
    assert np.array_equal(sess(wide), sess(np.ascontiguousarray(wide)))


# ---- bad input ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlp_session(exported_models):
    return tt.compile(tt.load(exported_models["mlp"].path), threads=1)


def test_unknown_input_name_raises_argument_error(mlp_session):
    with pytest.raises(tt.ArgumentError, match=r"unknown input 'y'; the model's inputs are: x"):
        mlp_session.run({"y": np.zeros((1, 64), np.float32)})


def test_missing_input_raises_argument_error(mlp_session):
    with pytest.raises(tt.ArgumentError, match=r"input 'x' is missing"):
        mlp_session.run({})


def test_wrong_dtype_raises_argument_error(mlp_session):
    with pytest.raises(tt.ArgumentError, match=r"input 'x' is float64, the model expects float32"):
        mlp_session.run({"x": np.zeros((1, 64))})


def test_wrong_rank_raises_argument_error(mlp_session):
    with pytest.raises(tt.ArgumentError, match=r"input 'x' has rank 3 \(shape \[1, 1, 64\]\), the model expects rank 2 \[batch, 64\]"):
        mlp_session.run({"x": np.zeros((1, 1, 64), np.float32)})


def test_dim_contradicting_the_model_raises_argument_error(mlp_session):
    with pytest.raises(tt.ArgumentError, match=r"input 'x' has shape \[2, 63\], but dim 1 must be 64"):
        mlp_session.run({"x": np.zeros((2, 63), np.float32)})


def test_symbol_bound_to_two_sizes_raises_argument_error():
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n"]), helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, ["n"])],
    )
    sess = tt.compile(tt.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString()))
    with pytest.raises(tt.ArgumentError, match=r"dim 'n' is 2 in input 'a' but 3 in input 'b'"):
        sess.run({"a": np.zeros(2, np.float32), "b": np.zeros(3, np.float32)})


def test_unsupported_ops_are_all_listed_at_compile_time():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="fine"),
         helper.make_node("Frobnicate", ["r"], ["f"], name="first_bad", domain="com.example"),
         helper.make_node("Zap", ["f"], ["y"], name="second_bad", domain="com.example")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("com.example", 1)])
    with pytest.raises(tt.UnsupportedError) as e:
        tt.compile(tt.load(model.SerializeToString()))
    msg = str(e.value)
    assert "cpu cannot run 2 nodes of this model" in msg
    assert "com.example:Frobnicate 'first_bad': no cpu kernel for this op" in msg
    assert "com.example:Zap 'second_bad': no cpu kernel for this op" in msg


def test_unknown_device_raises_argument_error(mlp_session, exported_models):
    with pytest.raises(tt.ArgumentError, match="unknown device 'tpu'; available: cpu, vulkan, vulkan:N"):
        tt.compile(tt.load(exported_models["mlp"].path), device="tpu")
    with pytest.raises(tt.ArgumentError, match="unknown device 'gpu'"):
        tt.supported_ops("gpu")


def _proc_cpuinfo() -> tuple[set[str], int]:
    """The CPU's flags and its physical cores (distinct package/core ids), read from /proc."""
    flags: set[str] = set()
    cores: set[tuple[str, str]] = set()
    package = ""
    for line in open("/proc/cpuinfo").read().splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "flags":
            flags = set(value.split())
        elif key == "physical id":
            package = value
        elif key == "core id":
            cores.add((package, value))
    return flags, len(cores) or os.cpu_count() or 1


@pytest.mark.skipif(not os.path.exists("/proc/cpuinfo"), reason="reads the CPU's flags from Linux's /proc/cpuinfo")
def test_the_cpu_device_reports_its_memory_cores_and_instruction_sets_as_linux_sees_them():
    cpu = tt.devices()[0]
    flags, cores = _proc_cpuinfo()
    meminfo = dict(line.split(":", 1) for line in open("/proc/meminfo").read().splitlines())
    total = int(meminfo["MemTotal"].split()[0]) * 1024
    assert cpu["device"] == "cpu" and cpu["backend"] == "cpu" and cpu["type"] == "cpu" and cpu["index"] == -1
    assert abs(cpu["memory_bytes"] - total) <= 1 << 20  # sysconf pages vs /proc/meminfo's kB
    assert cpu["cores"] == cores and cpu["threads"] == os.cpu_count()
    capped = os.environ.get("TETHER_ISA")  # caps what the kernels use, never adds
    have_avx2 = {"avx2", "fma"} <= flags
    have_avx512 = {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags
    assert cpu["avx2"] == (have_avx2 and capped != "generic")
    assert cpu["avx512"] == (have_avx512 and capped in (None, "avx512"))
    assert cpu["avx512_vnni"] <= ("avx512_vnni" in flags) and cpu["amx_int8"] <= ("amx_int8" in flags)
    assert cpu["avx_vnni"] <= ("avx_vnni" in flags)
    assert cpu["isa"] == ("avx512" if cpu["avx512"] else "avx2" if cpu["avx2"] else "generic")


def test_constant_node_output_that_is_also_read_by_a_node():
    from onnx import numpy_helper

    c = np.arange(12, dtype=np.float32).reshape(3, 4)
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(c)), helper.make_node("Add", ["x", "c"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None), helper.make_tensor_value_info("c", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10).SerializeToString()
    x = np.ones((3, 4), np.float32)
    for optimize in (False, True):
        out = tt.compile(tt.load(model), optimize=optimize).run({"x": x})
        assert np.array_equal(out["y"], x + c) and np.array_equal(out["c"], c)


def test_reshape_shares_its_input_bytes_and_keeps_them_alive():
    """A Reshape between intermediates is placed on its input's bytes (no copy, no second
    buffer), and the input stays intact while both are read later."""
    from onnx import TensorProto, helper, numpy_helper

    shape = [4, 64, 32]
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Reshape", ["a", "s1"], ["b"]),
             helper.make_node("Sigmoid", ["b"], ["c"]),
             helper.make_node("Reshape", ["c", "s0"], ["d"]),
             helper.make_node("Tanh", ["a"], ["e"]),  # reads a after b's and d's steps
             helper.make_node("Add", ["d", "e"], ["y"])]
    inits = [numpy_helper.from_array(np.array([4, 2048], np.int64), "s1"),
             numpy_helper.from_array(np.array(shape, np.int64), "s0")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    sess = tt.compile(tt.load(model.SerializeToString()), threads=1)
    got = sess.run({"x": x})["y"]
    a = np.maximum(x, 0)
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-a)) + np.tanh(a), rtol=1e-5, atol=1e-6)
    # a, b (its bytes), c, d (c's bytes), e: three buffers of 32 KiB live at most, not five.
    m = sess.memory()
    assert m["intermediate_bytes"] == 3 * x.nbytes, m


def test_an_output_buffer_is_reused_only_once_the_caller_dropped_it():
    """The session writes an output into last run's buffer when nothing outside holds it any
    more; an array the caller keeps is never overwritten by a later run."""
    node = helper.make_node("Mul", ["x", "x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 1024])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 1024])])
    sess = tt.compile(tt.load(helper.make_model(graph).SerializeToString()))
    a = np.full((64, 1024), 2.0, np.float32)
    b = np.full((64, 1024), 3.0, np.float32)
    kept = sess.run({"x": a})["y"]
    again = sess.run({"x": b})["y"]  # `kept` is still held: a new buffer
    assert kept.ctypes.data != again.ctypes.data
    np.testing.assert_array_equal(kept, 4.0)
    np.testing.assert_array_equal(again, 9.0)
    address = again.ctypes.data
    del again
    third = sess.run({"x": a})["y"]  # the second run's buffer was dropped: written again
    assert third.ctypes.data == address
    np.testing.assert_array_equal(third, 4.0)
    np.testing.assert_array_equal(kept, 4.0)


@pytest.mark.parametrize("device", BACKENDS)
def test_the_plan_cache_keeps_the_16_shapes_used_last(device):
    """Each new input shape gets a plan (and arenas) once; past 16 shapes the one used longest
    ago is dropped, and a shape that comes back after that is planned again, with the same
    results. One bound for every backend."""
    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])])
    sess = tt.compile(tt.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()),
                      device=device, strict=True)
    rng = np.random.default_rng(15)
    inputs = {n: rng.standard_normal((n, 8)).astype(np.float32) for n in range(1, 21)}
    want = {n: run_ort(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString(),
                       {"x": x})[0] for n, x in inputs.items()}
    for n in range(1, 21):
        np.testing.assert_allclose(sess.run({"x": inputs[n]})["y"], want[n], rtol=1e-6, atol=1e-7)
        assert sess.memory()["plans"] == min(n, 16)
    sess.run({"x": inputs[20]})  # the newest stays
    assert sess.memory()["plans"] == 16
    np.testing.assert_allclose(sess.run({"x": inputs[1]})["y"], want[1], rtol=1e-6, atol=1e-7)  # planned again
    assert sess.memory()["plans"] == 16
