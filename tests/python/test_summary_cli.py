"""Model summary, `tether inspect` and `make demo`'s job, checked against counts made with onnx."""

from __future__ import annotations

import collections
import json
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import tether as tt
from onnx import numpy_helper


def onnx_counts(path):
    m = onnx.load(str(path))
    ops = collections.Counter(n.op_type for n in m.graph.node)
    arrays = [numpy_helper.to_array(t) for t in m.graph.initializer]
    return ops, sum(a.size for a in arrays), sum(a.nbytes for a in arrays), len(arrays)


def test_summary_counts_match_onnx(exported):
    ops, params, nbytes, count = onnx_counts(exported.path)
    s = tt.load(exported.path).summary()
    assert s.op_counts == dict(ops)
    assert list(s.op_counts.values()) == sorted(s.op_counts.values(), reverse=True)
    assert (s.num_parameters, s.weight_bytes, s.num_initializers) == (params, nbytes, count)
    assert s.num_nodes == sum(ops.values())
    text = str(s)
    assert f"{params:,}" in text and f"input       x: {exported.input_dtype}[batch" in text


def test_model_properties_match_onnx(exported):
    proto = onnx.load(str(exported.path))
    model = tt.load(exported.path)
    assert model.ir_version == proto.ir_version
    assert model.producer == f"{proto.producer_name} {proto.producer_version}"
    assert model.opset == {(o.domain or "ai.onnx"): o.version for o in proto.opset_import}
    assert [v.name for v in model.outputs] == [o.name for o in proto.graph.output]
    assert [(n.op_type, n.inputs, n.outputs) for n in model.nodes] == [
        (n.op_type, tuple(n.input), tuple(n.output)) for n in proto.graph.node
    ]


def test_cli_inspect_prints_the_summary(exported):
    ops, params, _, _ = onnx_counts(exported.path)
    out = subprocess.run([sys.executable, "-m", "tether.cli", "inspect", str(exported.path)],
                         capture_output=True, text=True, check=True).stdout
    assert f"{params:,}" in out
    for op, n in ops.items():
        assert any(line.split() == [op, str(n)] for line in out.splitlines()), op


def test_cli_inspect_json(exported):
    ops, params, nbytes, _ = onnx_counts(exported.path)
    out = subprocess.run([sys.executable, "-m", "tether.cli", "inspect", str(exported.path), "--json"],
                         capture_output=True, text=True, check=True).stdout
    d = json.loads(out)
    assert d["op_counts"] == dict(ops) and d["num_parameters"] == params and d["weight_bytes"] == nbytes
    assert d["inputs"][0]["shape"][0] == "batch"


def test_cli_reports_bad_models_with_exit_status_2(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    r = subprocess.run([sys.executable, "-m", "tether.cli", "inspect", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.startswith("tether: error: ") and "bad.onnx" in r.stderr


def test_console_script_is_installed():
    exe = shutil.which("tether", path=str(Path(sys.executable).parent))
    assert exe is not None
    r = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == f"tether {tt.__version__}"


def test_demo_exports_and_inspects_a_network(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tether.demo", str(tmp_path)], capture_output=True, text=True, check=True)
    assert (tmp_path / "demo.onnx").exists()
    proto_ops, params, _, _ = onnx_counts(tmp_path / "demo.onnx")
    assert f"parameters  {params:,}" in r.stdout
    assert "input       image: float32[batch, 1, 8, 8]" in r.stdout
    assert "logits: float32[batch, 10]" in r.stdout
