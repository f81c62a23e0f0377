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


def test_demo_trains_exports_inspects_and_verifies_a_network(tmp_path):
    import numpy as np
    import onnxruntime as ort
    from sklearn.datasets import load_digits

    r = subprocess.run([sys.executable, "-m", "tether.demo", str(tmp_path)], capture_output=True, text=True, check=True)
    path = tmp_path / "digits.onnx"
    proto_ops, params, _, _ = onnx_counts(path)
    assert f"parameters  {params:,}" in r.stdout
    assert "input       image: float32[batch, 1, 8, 8]" in r.stdout
    assert "logits: float32[batch, 10]" in r.stdout
    # The accuracy lines agree with onnxruntime run here on scikit-learn's digits (the oracle).
    accuracies = {line.split()[2]: line.split()[3] for line in r.stdout.splitlines() if line.startswith("test accuracy")}
    assert set(accuracies) == {"torch", "tether", "onnxruntime"} and len(set(accuracies.values())) == 1
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    logits = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]
    assert np.mean(np.argmax(logits, axis=1) == d.target) > 0.9
    assert r.stdout.count("PASS") >= 3 and "FAIL" not in r.stdout
    assert (tmp_path / "digits.golden" / "golden.json").exists() and (tmp_path / "parity.html").exists()


def test_cli_run_prints_outputs_and_latency_and_saves_what_onnxruntime_computes(exported, tmp_path):
    import numpy as np
    from _onnx_oracle import run_ort

    feeds = exported.inputs(3, seed=7)
    np.savez(tmp_path / "in.npz", **feeds)
    out_file = tmp_path / "out.npz"
    r = subprocess.run([sys.executable, "-m", "tether.cli", "run", str(exported.path), "--inputs", str(tmp_path / "in.npz"),
                        "--threads", "1", "--repeat", "3", "--save", str(out_file)], capture_output=True, text=True, check=True)
    expected = run_ort(exported.path, feeds)[0]
    assert f"{list(expected.shape)}" in r.stdout
    assert "latency: median" in r.stdout and "over 3 runs (1 threads, cpu)" in r.stdout
    with np.load(out_file) as saved:
        (got,) = [saved[k] for k in saved.files]
    assert np.abs(got - expected).max() <= 1e-4 * np.abs(expected).max()


def test_cli_run_makes_random_inputs_with_given_dims(exported_models):
    r = subprocess.run([sys.executable, "-m", "tether.cli", "run", str(exported_models["mlp"].path), "--dim", "batch=5",
                        "--repeat", "0"], capture_output=True, text=True, check=True)
    assert ": float32[5, 10]" in r.stdout and "latency" not in r.stdout


def test_cli_run_reports_a_bad_input_file(exported_models, tmp_path):
    import numpy as np

    np.savez(tmp_path / "bad.npz", wrong=np.zeros((1, 64), np.float32))
    r = subprocess.run([sys.executable, "-m", "tether.cli", "run", str(exported_models["mlp"].path), "--inputs",
                        str(tmp_path / "bad.npz")], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown input 'wrong'" in r.stderr
