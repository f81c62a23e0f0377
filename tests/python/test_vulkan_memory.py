"""Vulkan sessions under max_memory (host and device memory alike, CPU-fallback nodes included),
and nodes whose Vulkan kernel cannot take their shapes running on the CPU instead of failing a
run. Results are compared with numpy; errors by type and message. Every test runs under the
validation layer and fails on any message."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
import tether as tt
from _vulkan import VULKAN_DEVICES, assert_close, requires_vulkan
from onnx import helper, numpy_helper

pytestmark = [requires_vulkan, pytest.mark.usefixtures("vulkan_validation")]

F, I64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64


def _model(nodes, inputs, consts=None, outputs=("y",), opset=18) -> tt.Model:
    """A model of `nodes`; `inputs` maps a name to (element type, shape)."""
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, t, shape) for n, (t, shape) in inputs.items()],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in (consts or {}).items()])
    return tt.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10).SerializeToString())


def _fill(name="fill") -> tt.Model:
    """ConstantOfShape (a CPU node in a Vulkan session) whose output is the model's."""
    return _model([helper.make_node("ConstantOfShape", ["s"], ["y"], name=name)], {"s": (I64, ["r"])})


# ---- the memory limit ---------------------------------------------------------------------------


def test_a_cpu_node_output_past_the_default_limit_is_a_memory_limit_error_naming_it():
    sess = tt.compile(_fill(), device="vulkan")
    with pytest.raises(tt.MemoryLimitError, match=r"ConstantOfShape 'fill': output 'y' of shape \[1000000000000\] \(float32\) "
                                                  r"would take 4000000000000 bytes; a run of this session may take \d+ bytes"):
        sess.run({"s": np.array([10**12], np.int64)})
    assert_close(sess.run({"s": np.array([2, 3], np.int64)})["y"], np.zeros((2, 3), np.float32))


def test_max_memory_limits_a_cpu_node_output_in_a_vulkan_session():
    sess = tt.compile(_fill(), device="vulkan", max_memory=1 << 20)
    with pytest.raises(tt.MemoryLimitError, match=r"ConstantOfShape 'fill': output 'y' of shape \[1000, 1000\] \(float32\) would "
                                                  r"take 4000000 bytes; a run of this session may take 1048576 bytes"):
        sess.run({"s": np.array([1000, 1000], np.int64)})
    assert_close(sess.run({"s": np.array([100, 100], np.int64)})["y"], np.zeros((100, 100), np.float32))


def test_max_memory_limits_a_value_a_vulkan_kernel_writes():
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="act")], {"x": (F, ["n"])})
    sess = tt.compile(model, device="vulkan", max_memory=1 << 20)
    assert sess.steps()[0]["backend"] == "vulkan"
    with pytest.raises(tt.MemoryLimitError, match=r"Relu 'act': output 'y' of shape \[1048576\] \(float32\) would take "
                                                  r"4194304 bytes; a run of this session may take 1048576 bytes"):
        sess.run({"x": np.ones(1 << 20, np.float32)})
    x = np.linspace(-1, 1, 1000, dtype=np.float32)
    assert_close(sess.run({"x": x})["y"], np.maximum(x, 0))


def test_a_data_sized_value_feeding_a_vulkan_kernel_is_a_memory_limit_error_not_a_device_error():
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["c"], name="fill"), helper.make_node("Relu", ["c"], ["y"], name="act")]
    sess = tt.compile(_model(nodes, {"s": (I64, [1])}), device="vulkan")
    with pytest.raises(tt.MemoryLimitError, match=r"ConstantOfShape 'fill': output 'c' of shape \[1000000000000\]"):
        sess.run({"s": np.array([10**12], np.int64)})
    assert_close(sess.run({"s": np.array([5], np.int64)})["y"], np.zeros(5, np.float32))


def test_values_each_within_the_limit_but_together_past_it_are_refused_with_the_whole_counted():
    # x (uploaded), r and y on the device, r downloaded for the CPU's Sinh, y returned:
    # each 400 KB, the run several times that.
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="act"), helper.make_node("Sinh", ["r"], ["y"], name="sinh")]
    model = _model(nodes, {"x": (F, ["n"])})
    sess = tt.compile(model, device="vulkan", max_memory=1 << 20)
    x = np.random.default_rng(0).standard_normal(100_000).astype(np.float32)
    with pytest.raises(tt.MemoryLimitError, match=r"a run with these input shapes would take \d+ bytes \(device arena \d+, "
                                                  r"device scratch \d+, staging \d+, host arena and scratch \d+, outputs 400000; the largest value, "
                                                  r".*a run of this session may take 1048576 bytes"):
        sess.run({"x": x})
    small = x[:1000]
    assert_close(sess.run({"x": small})["y"], np.sinh(np.maximum(small, 0)), rtol=1e-5)
    roomy = tt.compile(model, device="vulkan", max_memory=64 << 20)
    assert_close(roomy.run({"x": x})["y"], np.sinh(np.maximum(x, 0)), rtol=1e-5)


def test_an_allocation_the_process_cannot_get_is_a_memory_limit_error_not_a_memory_error():
    # Under an 4 GB address-space cap an 8 GB output is within the default limit (the machine's
    # memory) yet cannot be allocated: the failure must still be typed and name the value.
    script = textwrap.dedent("""
        import resource
        import numpy as np, onnx, tether as tt
        from onnx import helper
        g = helper.make_graph([helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill")], "g",
                              [helper.make_tensor_value_info("s", onnx.TensorProto.INT64, [1])],
                              [onnx.ValueInfoProto(name="y")])
        m = tt.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString())
        sess = tt.compile(m, device="vulkan")
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        try:
            sess.run({"s": np.array([2 * 10**9], np.int64)})
            print("RAN")
        except tt.MemoryLimitError as e:
            print("TYPED", e)
        except MemoryError as e:
            print("UNTYPED", type(e).__name__, e)
        print("AFTER", sess.run({"s": np.array([3], np.int64)})["y"].tolist())
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("TYPED ConstantOfShape 'fill': output 'y'"), r.stdout
    assert "of shape [2000000000] (float32, 8000000000 bytes) could not be allocated" in lines[0], r.stdout
    assert lines[-1] == "AFTER [0.0, 0.0, 0.0]", r.stdout


# ---- shapes a Vulkan kernel cannot take -----------------------------------------------------------


def _rank8_add(shape_a, shape_b) -> tt.Model:
    return _model([helper.make_node("Add", ["a", "b"], ["y"], name="add8")], {"a": (F, shape_a), "b": (F, shape_b)})


A8 = [2, 1, 2, 1, 2, 1, 2, 1]
B8 = [1, 2, 1, 2, 1, 2, 1, 2]


def _alternating():
    a = np.arange(16, dtype=np.float32).reshape(A8)
    b = (np.arange(16, dtype=np.float32) * 100).reshape(B8)
    return a, b


def test_a_static_broadcast_past_the_kernels_dims_runs_on_the_cpu_with_a_note():
    sess = tt.compile(_rank8_add(A8, B8), device="vulkan")
    assert [s["backend"] for s in sess.steps()] == ["cpu"]
    assert "Add 'add8': for its shapes: broadcasting over 8 dims that do not merge; the Vulkan kernel takes 6" in sess.report
    a, b = _alternating()
    assert_close(sess.run({"a": a, "b": b})["y"], a + b)


def test_strict_refuses_a_static_broadcast_past_the_kernels_dims_at_compile():
    with pytest.raises(tt.UnsupportedError, match=r"strict: the vulkan backend cannot run 1 node .*\n  Add 'add8': for its "
                                                  r"shapes: broadcasting over 8 dims"):
        tt.compile(_rank8_add(A8, B8), device="vulkan", strict=True)


def test_a_dynamic_broadcast_runs_on_the_cpu_for_shapes_the_kernel_refuses_and_on_vulkan_otherwise():
    dyn = [f"d{k}" for k in range(8)]
    sess = tt.compile(_rank8_add(dyn, [f"e{k}" for k in range(8)]), device="vulkan")
    assert [s["backend"] for s in sess.steps()] == ["vulkan"]
    a, b = _alternating()
    assert_close(sess.run({"a": a, "b": b})["y"], a + b)
    # Same rank, dims that merge: the Vulkan kernel takes it.
    rng = np.random.default_rng(3)
    c, d = rng.standard_normal((2, 3, 1, 1, 2, 1, 1, 2)).astype(np.float32), rng.standard_normal((1,) * 8).astype(np.float32)
    assert_close(sess.run({"a": c, "b": d})["y"], c + d)
    assert_close(sess.run({"a": b, "b": a})["y"], a + b)  # the first plan's shapes, the other way round


def test_strict_refuses_a_dynamic_broadcast_past_the_kernels_dims_at_run():
    dyn = [f"d{k}" for k in range(8)]
    sess = tt.compile(_rank8_add(dyn, [f"e{k}" for k in range(8)]), device="vulkan", strict=True)
    a, b = _alternating()
    with pytest.raises(tt.UnsupportedError, match=r"strict: the Vulkan backend cannot run Add 'add8': broadcasting over 8 dims "
                                                  r"that do not merge; the Vulkan kernel takes 6 \(for these input shapes"):
        sess.run({"a": a, "b": b})
    ones = np.ones(A8, np.float32)
    assert_close(sess.run({"a": ones, "b": ones})["y"], ones + ones)


def test_a_fallback_node_between_vulkan_nodes_reads_and_writes_through_the_device():
    dyn = [f"d{k}" for k in range(8)]
    nodes = [helper.make_node("Relu", ["a"], ["ra"], name="left"), helper.make_node("Add", ["ra", "b"], ["s"], name="add8"),
             helper.make_node("Neg", ["s"], ["y"], name="flip")]
    sess = tt.compile(_model(nodes, {"a": (F, dyn), "b": (F, [f"e{k}" for k in range(8)])}), device="vulkan")
    assert [s["backend"] for s in sess.steps()] == ["vulkan"] * 3
    a, b = _alternating()
    a = a - 7
    assert_close(sess.run({"a": a, "b": b})["y"], -(np.maximum(a, 0) + b))
    inter = tt.compile(_model(nodes, {"a": (F, dyn), "b": (F, [f"e{k}" for k in range(8)])}), device="vulkan", keep=["s"])
    _, captured = inter._core.run_capture({"a": a, "b": b}, ["ra", "s"])
    got = dict(captured)
    assert_close(got["ra"], np.maximum(a, 0))
    assert_close(got["s"], np.maximum(a, 0) + b)


@pytest.mark.skipif(not any(d.get("fp16_storage") for d in VULKAN_DEVICES), reason="no Vulkan device with 16-bit storage")
def test_a_fallback_node_under_fp16_storage_reads_and_writes_float32_on_the_host():
    dyn = [f"d{k}" for k in range(8)]
    nodes = [helper.make_node("Relu", ["a"], ["ra"], name="left"), helper.make_node("Add", ["ra", "b"], ["s"], name="add8"),
             helper.make_node("Neg", ["s"], ["y"], name="flip")]
    sess = tt.compile(_model(nodes, {"a": (F, dyn), "b": (F, [f"e{k}" for k in range(8)])}), device="vulkan", precision="fp16")
    a, b = _alternating()
    a = a - 7
    assert_close(sess.run({"a": a, "b": b})["y"], -(np.maximum(a, 0) + b), rtol=1e-2)


def test_profiling_times_a_node_that_a_plan_ran_on_the_cpu():
    dyn = [f"d{k}" for k in range(8)]
    sess = tt.compile(_rank8_add(dyn, [f"e{k}" for k in range(8)]), device="vulkan", profile=True)
    a, b = _alternating()
    assert_close(sess.run({"a": a, "b": b})["y"], a + b)
    entries = [e for e in sess.profile() if e["name"] == "add8"]
    assert len(entries) == 1 and entries[0]["runs"] == 1 and entries[0]["seconds"] > 0


def test_a_transpose_whose_dims_do_not_merge_runs_on_the_cpu():
    perm = [7, 6, 5, 4, 3, 2, 1, 0]
    model = _model([helper.make_node("Transpose", ["x"], ["y"], name="flip", perm=perm)], {"x": (F, [2] * 8)})
    sess = tt.compile(model, device="vulkan")
    assert "Transpose 'flip': for its shapes:" in sess.report
    x = np.arange(256, dtype=np.float32).reshape([2] * 8)
    assert_close(sess.run({"x": x})["y"], np.transpose(x, perm))


def test_a_matmul_whose_batch_dims_do_not_merge_runs_on_the_cpu():
    model = _model([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
                   {"a": (F, [2, 1, 2, 1, 2, 3, 4]), "b": (F, [1, 2, 1, 2, 1, 4, 5])})
    sess = tt.compile(model, device="vulkan")
    assert "MatMul 'mm': for its shapes:" in sess.report
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((2, 1, 2, 1, 2, 3, 4)).astype(np.float32), rng.standard_normal((1, 2, 1, 2, 1, 4, 5)).astype(np.float32)
    assert_close(sess.run({"a": a, "b": b})["y"], np.matmul(a, b), rtol=1e-5)


def test_a_layer_norm_whose_scale_broadcasts_within_a_row_runs_on_the_cpu():
    # Normalised over [3, 4]; scale and bias [4] broadcast across the 3: neither per element nor one.
    rng = np.random.default_rng(5)
    scale, bias = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    model = _model([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], name="ln", axis=-2)],
                   {"x": (F, [2, 3, 4])}, {"g": scale, "b": bias}, opset=17)
    sess = tt.compile(model, device="vulkan")
    assert "LayerNormalization 'ln': for its shapes:" in sess.report
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    mean = x.mean(axis=(1, 2), keepdims=True)
    var = x.var(axis=(1, 2), keepdims=True)
    assert_close(sess.run({"x": x})["y"], ((x - mean) / np.sqrt(var + 1e-5) * scale + bias).astype(np.float32), rtol=1e-4)
