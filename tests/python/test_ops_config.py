"""tether ops-config and the op list a reduced deployment build (-DTETHER_DEPLOY_OPS) reads.

The build itself, with a model run through the reduced library, is `make test-reduced`
(tests/deploy/check_reduced.py); here: what the list holds, the command, and the configure
step's checks of a list.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
import tether as tt
from onnx import TensorProto, helper, numpy_helper
from tether._ops_config import QOPERATOR_EXPANDED, ops_config
from tether.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CMAKE = os.path.join(os.path.dirname(sys.executable), "cmake")
F = TensorProto.FLOAT


def _weight(name: str, shape: tuple[int, ...], seed: int = 0) -> onnx.TensorProto:
    return numpy_helper.from_array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), name)


def _save(tmp_path, name: str, nodes, inputs, outputs, inits=(), opset: int = 17) -> str:
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    path = str(tmp_path / f"{name}.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


@pytest.fixture
def cnn(tmp_path) -> str:
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wf"], ["y"], transB=1)]
    return _save(tmp_path, "cnn", nodes, [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
                 [helper.make_tensor_value_info("y", F, [1, 4])],
                 [_weight("w", (6, 3, 3, 3)), _weight("b", (6,)), _weight("wf", (4, 6))])


def test_ops_config_lists_the_kernels_the_session_runs_not_the_ops_they_replace(cnn):
    ops = ops_config([cnn])
    steps = {s["op_type"] for s in tt.compile(cnn, threads=1).steps()}  # "ai.tether:FusedConv", "Gemm"
    assert {f"{d}:{o}" if d else o for d, o in ops} == steps
    assert ("ai.tether", "FusedConv") in ops
    assert ("", "Relu") not in ops and ("", "Conv") not in ops


def test_ops_config_keeps_ops_constant_folding_computes(tmp_path):
    # w2 = Transpose(w) is computed once at compile time, with the Transpose kernel.
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["y"])]
    path = _save(tmp_path, "folded", nodes, [helper.make_tensor_value_info("x", F, [2, 3])],
                 [helper.make_tensor_value_info("y", F, [2, 4])], [_weight("w", (4, 3))])
    assert "Transpose" not in {s["op_type"] for s in tt.compile(path, threads=1).steps()}
    assert ("", "Transpose") in ops_config([path])
    assert ("", "Transpose") in ops_config([path], optimize=False)


def test_ops_config_keeps_the_ops_that_compute_a_lookup_table(tmp_path):
    # DequantizeLinear -> Sigmoid -> QuantizeLinear becomes QLinearLookup, whose table the
    # three kernels compute at compile time.
    u8 = TensorProto.UINT8
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xf"]), helper.make_node("Sigmoid", ["xf"], ["g"]),
             helper.make_node("QuantizeLinear", ["g", "s", "z"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(np.array(128, np.uint8), "z")]
    path = _save(tmp_path, "lookup", nodes, [helper.make_tensor_value_info("x", u8, [6])],
                 [helper.make_tensor_value_info("y", u8, [6])], inits)
    assert [s["op_type"] for s in tt.compile(path, threads=1).steps()] == ["ai.tether:QLinearLookup"]
    assert {("ai.tether", "QLinearLookup"), ("", "DequantizeLinear"), ("", "Sigmoid"), ("", "QuantizeLinear")} <= set(
        ops_config([path]))


def test_ops_config_lists_the_ops_of_if_and_loop_bodies(tmp_path):
    then_branch = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["t"])], "then", [],
                                    [helper.make_tensor_value_info("t", F, [2])])
    else_branch = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                                    [helper.make_tensor_value_info("e", F, [2])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Softplus", ["acc_in"], ["acc_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", F, [2])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", F, [2])])
    nodes = [helper.make_node("If", ["c"], ["z"], then_branch=then_branch, else_branch=else_branch),
             helper.make_node("Loop", ["n", "", "z"], ["y"], body=body)]
    path = _save(tmp_path, "control", nodes,
                 [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                  helper.make_tensor_value_info("x", F, [2]), helper.make_tensor_value_info("n", TensorProto.INT64, [])],
                 [helper.make_tensor_value_info("y", F, [2])])
    ops = ops_config([path])
    assert {("", "If"), ("", "Loop"), ("", "Sigmoid"), ("", "Neg"), ("", "Softplus")} <= set(ops)
    sess = tt.compile(path, threads=1)  # the list describes a model the engine runs
    x = np.array([0.5, -1.0], np.float32)
    out = sess.run({"c": np.array(True), "x": x, "n": np.array(2, np.int64)})["y"]
    np.testing.assert_allclose(out, np.log1p(np.exp(np.log1p(np.exp(1 / (1 + np.exp(-x)))))), rtol=1e-5)


def test_ops_config_names_an_op_the_cpu_engine_lacks(tmp_path):
    path = _save(tmp_path, "det", [helper.make_node("Det", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, [3, 3])],
                 [helper.make_tensor_value_info("y", F, [])])
    with pytest.raises(tt.UnsupportedError, match=r"det\.onnx.*Det"):
        ops_config([path])


def test_ops_config_command_writes_the_list_with_the_models_named(cnn, tmp_path, capsys):
    out = tmp_path / "ops.txt"
    assert main(["ops-config", cnn, "-o", str(out)]) == 0
    text = out.read_text()
    assert f"#   {cnn}" in text
    ops = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert ops == [f"{d}:{o}" if d else o for d, o in ops_config([cnn])]
    assert main(["ops-config", str(tmp_path / "absent.onnx")]) == 2
    assert "absent.onnx" in capsys.readouterr().err
    assert main(["ops-config", cnn, "-o", str(tmp_path / "missing" / "ops.txt")]) == 2
    assert "folder" in capsys.readouterr().err and not (tmp_path / "missing").exists()


def test_configure_scan_of_registrations_matches_the_cpu_registry():
    run = subprocess.run([CMAKE, f"-DTETHER_SOURCE_DIR={ROOT}", "-P", os.path.join(ROOT, "cmake", "DeployOps.cmake")],
                         capture_output=True, text=True, check=True)
    scanned = set(run.stderr.split())
    registry = {f"{d}:{o}" for d, o in tt.supported_ops("cpu")} - {":Constant"}
    # The QOperator contrib ops that sessions write out have no registration of their own:
    # ops-config maps each to the kernels it becomes.
    expanded = {f"{d}:{o}" for d, o in QOPERATOR_EXPANDED}
    assert expanded <= registry
    assert scanned == registry - expanded


def _configure(tmp_path, *defines: str) -> subprocess.CompletedProcess[str]:
    ninja = shutil.which("ninja", path=os.path.dirname(sys.executable))
    return subprocess.run([CMAKE, "-S", ROOT, "-B", str(tmp_path / "build"), "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}",
                           "-DTETHER_BUILD_TESTS=OFF", "-DTETHER_VULKAN=OFF", *defines],
                          capture_output=True, text=True, timeout=120)


def _unwrapped(text: str) -> str:
    """CMake's message with its line wrapping undone."""
    return " ".join(text.split())


def test_configure_refuses_an_op_list_outside_the_deployment_build(tmp_path):
    (tmp_path / "ops.txt").write_text("Relu\n")
    run = _configure(tmp_path, f"-DTETHER_DEPLOY_OPS={tmp_path / 'ops.txt'}")
    assert run.returncode != 0
    assert "applies to the deployment build only: configure with -DTETHER_DEPLOY=ON" in _unwrapped(run.stderr)


def test_configure_names_file_and_line_of_an_unknown_op(tmp_path):
    ops = tmp_path / "ops.txt"
    ops.write_text("# a list\nRelu\n\nai.tether:FusedConv\nai.tether:NoSuchOp\n")
    run = _configure(tmp_path, "-DTETHER_DEPLOY=ON", f"-DTETHER_DEPLOY_OPS={ops}")
    assert run.returncode != 0
    assert f"{ops}:5: the CPU engine has no kernel for 'ai.tether:NoSuchOp'" in _unwrapped(run.stderr), run.stderr


def test_configure_refuses_a_missing_op_list(tmp_path):
    run = _configure(tmp_path, "-DTETHER_DEPLOY=ON", f"-DTETHER_DEPLOY_OPS={tmp_path / 'absent.txt'}")
    assert run.returncode != 0
    assert f"'{tmp_path / 'absent.txt'}' is not a file" in _unwrapped(run.stderr), run.stderr


def test_ops_config_lists_what_a_body_compiled_on_its_own_fuses(tmp_path):
    # The body reads the main graph's weights: compiled on its own, MatMul + Add + Relu over them
    # becomes one ai.tether FusedGemm kernel, which the list must hold.
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["co"]), helper.make_node("MatMul", ["a", "w"], ["m"]),
         helper.make_node("Add", ["m", "b"], ["s"]), helper.make_node("Relu", ["s"], ["ao"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("a", F, [2, 4])],
        [helper.make_tensor_value_info("co", TensorProto.BOOL, []), helper.make_tensor_value_info("ao", F, [2, 4])])
    path = _save(tmp_path, "loop", [helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)],
                 [helper.make_tensor_value_info("x", F, [2, 4]), helper.make_tensor_value_info("n", TensorProto.INT64, [])],
                 [helper.make_tensor_value_info("y", F, [2, 4])], [_weight("w", (4, 4)), _weight("b", (4,), 1)])
    ops = ops_config([path])
    assert ("ai.tether", "FusedGemm") in ops
    assert {("", "Loop"), ("", "MatMul"), ("", "Add"), ("", "Relu")} <= set(ops)  # the body as written, too
