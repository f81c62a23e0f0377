"""The Vulkan session: devices, CPU fallback in the same session and strict refusal, plans per
input shapes, concurrent runs, intermediates, device errors, and machines without Vulkan.
Results are compared with the CPU engine (and onnxruntime where the CPU engine itself is
the subject). Every test runs under the validation layer and fails on any message."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
import tether as tt
from _onnx_oracle import run_ort
from _vulkan import VULKAN_DEVICES, assert_close, requires_vulkan
from onnx import helper, numpy_helper
from tether import _core
from tether.parity import TetherRunner

pytestmark = [requires_vulkan, pytest.mark.usefixtures("vulkan_validation")]

LAYER = Path("/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json")


def _model(nodes, inputs, consts=None, outputs=("y",), opset=18) -> tt.Model:
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, shape) for n, shape in inputs.items()],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in (consts or {}).items()])
    return tt.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10).SerializeToString())


def _mlp_with_sinh() -> tt.Model:
    """MatMul -> Relu -> Sinh (no Vulkan kernel) -> Sigmoid -> MatMul, batch dim symbolic."""
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"), helper.make_node("Relu", ["h"], ["r"], name="act"),
             helper.make_node("Sinh", ["r"], ["c"], name="spread"),
             helper.make_node("Sigmoid", ["c"], ["s"], name="squash"),
             helper.make_node("MatMul", ["s", "w2"], ["y"], name="fc2")]
    return _model(nodes, {"x": ["batch", 13]}, {"w1": rng.standard_normal((13, 7)).astype(np.float32),
                                                "w2": rng.standard_normal((7, 3)).astype(np.float32)})


def _x(batch: int, seed: int = 0, width: int = 13) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, width)).astype(np.float32)


def test_devices_list_the_cpu_then_each_vulkan_device_with_its_properties():
    devices = tt.devices()
    assert devices[0]["device"] == "cpu" and devices[0]["backend"] == "cpu"
    assert devices[0]["name"] == tt.cpu_info()["brand"]
    vulkan = devices[1:]
    assert vulkan and all(d["backend"] == "vulkan" for d in vulkan)
    for k, d in enumerate(vulkan):
        assert d["device"] == f"vulkan:{k}" and d["index"] == k
        assert d["type"] in {"discrete_gpu", "integrated_gpu", "virtual_gpu", "cpu", "other"}
        assert d["name"] and d["driver_name"] and d["driver_version"]
        assert [int(p) for p in d["api_version"].split(".")] >= [1, 1, 0]
        assert isinstance(d["fp16"], bool) and isinstance(d["int8"], bool) and isinstance(d["fp16_storage"], bool)
        assert d["subgroup_size"] >= 1 and d["memory_bytes"] > 0
        if d["driver_name"] == "llvmpipe":  # Mesa's lavapipe: a Vulkan 1.3 device on the CPU
            assert d["type"] == "cpu" and d["api_version"].startswith("1.3")


@pytest.mark.skipif(not LAYER.exists(), reason="vulkan-validationlayers is not installed")
def test_the_validation_layer_is_on_in_the_tests():
    assert os.environ.get("TETHER_VULKAN_VALIDATION") == "1"
    assert _core._diagnostics()["vulkan"]["enabled"]
    assert "validation layer on" in tt.compile(_mlp_with_sinh(), device="vulkan").report


def test_a_device_index_out_of_range_is_an_argument_error_listing_the_devices():
    n = len(VULKAN_DEVICES)
    with pytest.raises(tt.ArgumentError, match=rf"device 'vulkan:{n}' does not exist; the Vulkan devices are: vulkan:0 '"):
        tt.compile(_mlp_with_sinh(), device=f"vulkan:{n}")
    with pytest.raises(tt.ArgumentError, match="device 'vulkan:one' does not exist"):
        tt.compile(_mlp_with_sinh(), device="vulkan:one")
    assert tt.compile(_mlp_with_sinh(), device="vulkan:0").device == "vulkan:0"


def test_a_node_without_a_vulkan_kernel_runs_on_the_cpu_in_the_same_session():
    model = _mlp_with_sinh()
    sess = tt.compile(model, device="vulkan")
    backends = {s["name"]: s["backend"] for s in sess.steps()}
    assert backends["spread"] == "cpu"
    assert all(b == "vulkan" for name, b in backends.items() if name != "spread")
    assert "cpu fallback: 1 node the Vulkan backend does not run:\n  Sinh 'spread': no Vulkan kernel" in sess.report
    cpu = tt.compile(model, device="cpu")
    for batch in (1, 3, 127):
        x = _x(batch, batch)
        got = sess.run({"x": x})["y"]
        assert_close(got, cpu.run({"x": x})["y"], what=f"batch {batch}")
        assert_close(got, run_ort(model._core.to_bytes(), {"x": x})[0], what=f"batch {batch} vs onnxruntime")
    # What crosses per run, each once (regions of 16 bytes): x up, the Relu output down, the
    # Sinh output up, y down.
    crossing = [127 * 13 * 4, 127 * 7 * 4, 127 * 7 * 4, 127 * 3 * 4]
    assert sess.memory()["staging_bytes"] == sum((b + 15) // 16 * 16 for b in crossing)


def test_strict_refuses_the_nodes_the_vulkan_backend_lacks_and_names_them():
    with pytest.raises(tt.UnsupportedError, match=r"strict: the vulkan backend cannot run 1 node of this model .*\n"
                                                  r"  Sinh 'spread': no Vulkan kernel for this op"):
        tt.compile(_mlp_with_sinh(), device="vulkan", strict=True)


@pytest.mark.parametrize("form, reason", [
    ({"mode": "cubic"}, "mode 'cubic' has no Vulkan kernel"),
    ({"scales": [1, 2, 2, 2]}, "it resizes an axis other than the last two"),
    ({"sizes": [2, 6, 20, 24]}, "it may resize an axis other than the last two (its sizes)"),
    ({"scales_input": True}, "its scales are computed at run time"),
])
def test_resize_forms_the_vulkan_kernel_lacks_run_on_the_cpu_with_the_reason(form, reason):
    x = np.random.default_rng(5).standard_normal((2, 3, 10, 12)).astype(np.float32)
    inputs, consts, feeds = {"x": list(x.shape)}, {}, {"x": x}
    if "sizes" in form:
        consts["z"] = np.array(form["sizes"], np.int64)
        args = ["x", "", "", "z"]
    elif "scales_input" in form:
        inputs["s"] = [4]
        feeds["s"] = np.array([1, 1, 2, 2], np.float32)
        args = ["x", "", "s"]
    else:
        consts["s"] = np.array(form.get("scales", [1, 1, 2, 2]), np.float32)
        args = ["x", "", "s"]
    node = helper.make_node("Resize", args, ["y"], name="up", mode=form.get("mode", "nearest"))
    model = _model([node], inputs, consts)
    sess = tt.compile(model, device="vulkan")
    assert [s["backend"] for s in sess.steps() if s["name"] == "up"] == ["cpu"]
    assert f"Resize 'up': {reason}" in sess.report, sess.report
    assert_close(sess.run(feeds)["y"], run_ort(model._core.to_bytes(), feeds)[0], what="vs onnxruntime")


def _conv_chain() -> tt.Model:
    """Conv -> Relu -> MaxPool -> Conv: the CPU engine runs it channels last."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
             helper.make_node("Conv", ["p1", "w2"], ["y"], name="conv2")]
    return _model(nodes, {"x": [2, 3, 10, 12]}, {"w1": rng.standard_normal((8, 3, 3, 3)).astype(np.float32),
                                                 "w2": rng.standard_normal((4, 8, 1, 1)).astype(np.float32)})


def test_vulkan_compiles_the_onnx_layout_and_leaves_channels_last_nodes_to_the_cpu():
    model = _conv_chain()
    x = np.random.default_rng(4).standard_normal((2, 3, 10, 12)).astype(np.float32)
    want = run_ort(model._core.to_bytes(), {"x": x})[0]
    # Compiled for Vulkan, the model keeps the ONNX layout and runs wholly on the device ...
    sess = tt.compile(model, device="vulkan", strict=True)
    assert "channels last" not in sess.report and all(s["backend"] == "vulkan" for s in sess.steps())
    assert_close(sess.run({"x": x})["y"], want, what="vulkan")
    # ... while a model optimised for the CPU engine (channels last) hands those nodes back to it.
    optimised = tt.optimize(model)
    assert any(n.attributes.get("channels_last") == 1 for n in optimised.nodes)
    mixed = tt.compile(optimised, device="vulkan", optimize=False)
    on_cpu = {s["op_type"] for s in mixed.steps() if s["backend"] == "cpu"}
    assert "ai.tether:FusedConv" in on_cpu and "channels_last = 1 is the CPU engine's layout" in mixed.report
    assert_close(mixed.run({"x": x})["y"], want, what="channels-last model on vulkan")


def test_each_new_input_shape_makes_one_plan_that_later_runs_reuse():
    model = _mlp_with_sinh()
    sess, cpu = tt.compile(model, device="vulkan"), tt.compile(model)
    for batch in (2, 5, 2, 5, 2):
        assert_close(sess.run({"x": _x(batch)})["y"], cpu.run({"x": _x(batch)})["y"])
    assert sess.memory()["plans"] == 2


def test_concurrent_runs_on_one_session_give_the_serial_results():
    model = _mlp_with_sinh()
    sess, cpu = tt.compile(model, device="vulkan"), tt.compile(model)
    feeds = [_x(batch, seed) for seed, batch in enumerate([1, 3, 13, 3, 1, 13, 7, 7])]
    expected = [cpu.run({"x": x})["y"] for x in feeds]
    results: dict[tuple[int, int], np.ndarray] = {}
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for r in range(4):
                k = (t + r) % len(feeds)
                results[(t, r)] = sess.run({"x": feeds[k]})["y"]
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for (t, r), got in results.items():
        assert_close(got, expected[(t + r) % len(feeds)], what=f"thread {t} run {r}")
    assert len(results) == 16


def test_intermediates_on_vulkan_are_the_cpu_engines():
    model = _mlp_with_sinh()
    x = {"x": _x(3)}
    ours = TetherRunner(model, device="vulkan").intermediates(x)
    ref = TetherRunner(model, device="cpu").intermediates(x)
    assert list(ours) == list(ref)
    for name in ref:
        assert_close(ours[name], ref[name], what=name)
    some = TetherRunner(model, device="vulkan").intermediates(x, ["r", "y"])
    assert list(some) == ["r", "y"]


def test_outputs_that_are_inputs_or_listed_twice_and_empty_batches_match_the_cpu_engine():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("MatMul", ["r", "w"], ["y"])]
    w = np.random.default_rng(3).standard_normal((13, 5)).astype(np.float32)
    model = _model(nodes, {"x": ["n", 13]}, {"w": w}, outputs=("y", "x", "r", "y"))
    sess, cpu = tt.compile(model, device="vulkan", strict=True), tt.compile(model)
    for batch in (0, 2):
        got, ref = sess._core.run({"x": _x(batch)}), cpu._core.run({"x": _x(batch)})
        assert len(got) == 4
        for k, (a, b) in enumerate(zip(got, ref, strict=True)):
            assert_close(a, b, what=f"batch {batch}, output {k}")


def test_a_value_larger_than_the_device_binds_is_a_device_error_and_the_session_stays_usable():
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"], name="outer")]
    model = _model(nodes, {"a": ["n", 1], "b": [1, "n"]})
    sess = tt.compile(model, device="vulkan")
    n = 20000  # a 1.6 GB product: more than one binding (or lavapipe's whole heap) holds
    with pytest.raises(tt.DeviceError, match=r"value 'y' takes 1.49 GB, more than the .* binds at once"):
        sess.run({"a": np.ones((n, 1), np.float32), "b": np.ones((1, n), np.float32)})
    a, b = _x(13, 1, 1), _x(1, 2, 13)
    assert_close(sess.run({"a": a, "b": b})["y"], a @ b)


def test_the_cli_compares_vulkan_with_the_cpu_engine_layer_by_layer_and_runs_on_vulkan(tmp_path):
    path = tmp_path / "m.onnx"
    _mlp_with_sinh().save(str(path))
    r = subprocess.run([sys.executable, "-m", "tether.cli", "compare", str(path), "--against", "cpu", "--device", "vulkan",
                        "--layerwise", "--dim", "batch=3", "--json", "-"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["ok"] and (report["reference"], report["candidate"]) == ("tether cpu", "tether")
    layers = {layer["node"]: layer for layer in report["layers"]}
    for node in ("act", "spread", "squash", "fc2"):
        assert layers[node]["status"] == "compared" and layers[node]["metrics"]["ok"], node
    r = subprocess.run([sys.executable, "-m", "tether.cli", "run", str(path), "--device", "vulkan", "--dim", "batch=2",
                        "--repeat", "1"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "threads, vulkan)" in r.stdout


def test_profile_times_cpu_nodes_vulkan_stretches_and_each_vulkan_kernel_on_the_device():
    sess = tt.compile(_mlp_with_sinh(), device="vulkan", profile=True)
    assert "profiling times each kernel by timestamps on the device" in sess.report
    for _ in range(3):
        sess.run({"x": _x(2)})
    entries = sess.profile()
    assert [e["op_type"] for e in entries] == ["vulkan:segment", "ai.tether:FusedMatMul", "Sinh", "vulkan:segment",
                                               "Sigmoid", "MatMul"]
    assert all(e["runs"] == 3 and e["seconds"] > 0 for e in entries)
    # A stretch's kernels ran on the device within the wall time the host waited for it.
    assert entries[1]["seconds"] <= entries[0]["seconds"]
    assert entries[4]["seconds"] + entries[5]["seconds"] <= entries[3]["seconds"]


def test_profile_of_a_real_model_times_every_vulkan_kernel(exported_models):
    sess = tt.compile(tt.load(exported_models["unet"].path), device="vulkan", profile=True, strict=True)
    sess.run(exported_models["unet"].inputs(2))
    timed = {e["name"]: e for e in sess.profile() if e["op_type"] != "vulkan:segment"}
    kernels = [s for s in sess.steps() if s["backend"] == "vulkan" and s["op_type"] not in
               {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}]  # views: nothing runs
    assert {"Resize", "ai.tether:FusedConv", "ConvTranspose", "MaxPool", "Concat"} <= {s["op_type"] for s in kernels}
    for s in kernels:
        assert timed[s["name"]]["runs"] == 1 and timed[s["name"]]["seconds"] > 0, s["name"]


def test_fp16_storage_halves_device_memory_and_agrees_with_the_cpu_engine_across_cpu_fallback():
    model = _mlp_with_sinh()
    half = tt.compile(model, device="vulkan", precision="fp16")
    full = tt.compile(model, device="vulkan")
    assert "precision fp16: float values and weights stored as float16" in half.report
    cpu = tt.compile(model)
    for batch in (1, 127):
        x = _x(batch, batch).astype(np.float16).astype(np.float32)
        # The Sinh between the two Vulkan stretches runs on the CPU: its input comes down and
        # its output goes up through float16.
        assert_close(half.run({"x": x})["y"], cpu.run({"x": x})["y"], 1e-2, f"batch {batch}")
        full.run({"x": x})
    h, f = half.memory(), full.memory()
    assert h["device_weight_bytes"] < f["device_weight_bytes"]  # each weight aligned: not quite half
    assert h["intermediate_bytes"] * 2 == f["intermediate_bytes"]


def test_fp16_precision_is_refused_on_the_cpu_and_unknown_precisions_are_argument_errors():
    with pytest.raises(tt.UnsupportedError, match="precision 'fp16' is for Vulkan devices; the CPU engine computes in float32"):
        tt.compile(_mlp_with_sinh(), precision="fp16")
    with pytest.raises(tt.ArgumentError, match="precision 'bf16' is not known; it is 'fp32' or 'fp16'"):
        tt.compile(_mlp_with_sinh(), device="vulkan", precision="bf16")


def test_fp16_on_a_device_without_16_bit_storage_is_an_unsupported_error_naming_the_feature():
    script = """
import json, tether as tt
from onnx import helper, TensorProto
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
m = tt.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
out = {"storage": [d["fp16_storage"] for d in tt.devices() if d["backend"] == "vulkan"],
       "fp32": tt.compile(m, device="vulkan").device}
try:
    tt.compile(m, device="vulkan", precision="fp16")
except tt.UnsupportedError as e:
    out["error"] = str(e)
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "TETHER_VULKAN_NO_FP16_STORAGE": "1"},
                          capture_output=True, text=True, timeout=120, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["storage"] and not any(out["storage"]) and out["fp32"] == "vulkan"
    assert "does not support 16-bit storage buffers (storageBuffer16BitAccess)" in out["error"], out
    assert "compile with precision='fp32'" in out["error"]


def _without_vulkan(env: dict[str, str]) -> dict:
    script = """
import json, numpy as np, tether as tt
from onnx import helper, TensorProto
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
m = tt.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
out = {"devices": tt.devices(), "cpu": tt.compile(m).run({"x": np.array([-1, 2], np.float32)})["y"].tolist()}
try:
    tt.compile(m, device="vulkan")
except tt.UnsupportedError as e:
    out["error"] = str(e)
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_without_a_vulkan_driver_devices_list_the_cpu_and_compile_says_how_to_get_one(tmp_path):
    nothing = str(tmp_path / "no_driver.json")
    out = _without_vulkan({"VK_ICD_FILENAMES": nothing, "VK_DRIVER_FILES": nothing})
    assert [d["device"] for d in out["devices"]] == ["cpu"]
    assert out["cpu"] == [0.0, 2.0]
    assert out["error"].startswith("no Vulkan device was found: the Vulkan loader found no driver")
    assert "apt-get install mesa-vulkan-drivers" in out["error"]


def test_without_a_vulkan_loader_devices_list_the_cpu_and_compile_says_how_to_get_one(tmp_path):
    out = _without_vulkan({"TETHER_VULKAN_LIBRARY": str(tmp_path / "libvulkan.so.1")})
    assert [d["device"] for d in out["devices"]] == ["cpu"]
    assert out["cpu"] == [0.0, 2.0]
    assert out["error"].startswith(f"no Vulkan device was found: the Vulkan loader {tmp_path}/libvulkan.so.1 could not be opened")
    assert "apt-get install mesa-vulkan-drivers" in out["error"]


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="tensorflow is not installed")
@pytest.mark.parametrize("when", ["before tether opens Vulkan", "after tether opened Vulkan"])
def test_a_process_that_loads_tensorflow_still_runs_on_vulkan(when):
    # TensorFlow exports its copy of LLVM globally; lavapipe's LLVM must not bind to it, whether
    # TensorFlow comes first or after tether listed the devices (shaders compile at first run).
    first, then = ("import tensorflow", "tt.devices()") if when.startswith("before") else ("tt.devices()", "import tensorflow")
    script = """
import numpy as np, tether as tt
FIRST
THEN
from onnx import helper, TensorProto
g = helper.make_graph([helper.make_node("Gelu", ["x"], ["y"])], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 13])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 13])])
m = tt.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString())
x = np.linspace(-4, 4, 39, dtype=np.float32).reshape(3, 13)
got, ref = tt.compile(m, device="vulkan").run({"x": x})["y"], tt.compile(m).run({"x": x})["y"]
print(float(np.abs(got - ref).max() / np.abs(ref).max()))
""".replace("FIRST", first).replace("THEN", then)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.strip().splitlines()[-1]) <= 1e-4
