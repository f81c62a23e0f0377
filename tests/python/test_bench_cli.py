"""`tether bench` and `tt.bench`: the structure and the internal consistency of what they
report (never the timings themselves), peers measured exactly when installed, and bad input
refused with exit status 2 before any work."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
import tether as tt
from onnx import helper, numpy_helper
from tether import cli

_LAT = ("min", "p50", "p90", "p99", "max")
_HAS_OPENVINO = importlib.util.find_spec("openvino") is not None
_HAS_VULKAN = any(d["backend"] == "vulkan" for d in tt.devices())


def _mlp(path: Path, batch: int | str = "batch", layers: int = 1) -> Path:
    """``layers`` MatMul + Relu pairs on x float32 [batch, 8]."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        inits.append(numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"], name=f"fc{i}"),
                  helper.make_node("Relu", [f"h{i}"], [f"y{i}"], name=f"relu{i}")]
        prev = f"y{i}"
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [batch, 8])],
                          [helper.make_tensor_value_info(prev, onnx.TensorProto.FLOAT, [batch, 8])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("bench")
    _mlp(d / "m.onnx")
    _mlp(d / "static.onnx", batch=2)
    _mlp(d / "deep.onnx", layers=12)
    np.savez(d / "x5.npz", x=np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32))
    return d


def _bench_json(files: Path, capsys, *args: str) -> dict:
    out = files / "out.json"
    assert cli.main(["bench", *args, "--warmup", "1", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "latency ms" in table and "cold start ms" in table
    return json.loads(out.read_text())


def _check_engine(e: dict, runs: int, batch: int) -> None:
    lat = e["latency_ms"]
    assert e["runs"] == runs
    assert [lat[k] for k in _LAT] == sorted(lat[k] for k in _LAT)
    assert lat["min"] > 0 and lat["min"] <= lat["mean"] <= lat["max"]
    # samples/s over the timed runs is batch runs over their total time, i.e. over mean x runs
    assert e["throughput_samples_per_s"] == pytest.approx(batch * 1e3 / lat["mean"], rel=1e-9)
    cold = e["cold_start_ms"]
    phases = [cold[k] for k in ("load", "compile", "first_run") if cold[k] is not None]
    assert all(v > 0 for v in phases) and cold["total"] == pytest.approx(sum(phases))
    mem = e["memory"]
    assert mem["rss_peak_bytes"] == mem["rss_held_bytes"] + mem["rss_run_peak_bytes"]


def test_bench_reports_ordered_percentiles_and_each_installed_peer(files: Path, capsys) -> None:
    d = _bench_json(files, capsys, str(files / "m.onnx"), "--iterations", "7", "--threads", "1",
                    "--against", "onnxruntime,openvino")
    assert d["schema"] == "tether.bench/1" and d["iterations"] == 7 and d["time_s"] is None
    assert d["threads"] == 1 and d["batch"] == 1 and d["inputs"] == {"x": "float32[1, 8]"}
    expected = ["tether", "onnxruntime"] + (["openvino"] if _HAS_OPENVINO else [])
    assert list(d["engines"]) == expected and sorted(d["tether_over_peer"]) == sorted(expected[1:])
    assert ("openvino" in d["not_measured"]) is not _HAS_OPENVINO
    for e in d["engines"].values():
        _check_engine(e, 7, 1)
    t = d["engines"]["tether"]
    assert t["memory"]["arena"]["plans"] >= 1 and t["profile"] is None
    for peer in expected[1:]:
        e = d["engines"][peer]
        assert e["max_abs_diff_vs_tether"] < 1e-4  # the same inputs went to every engine
        assert d["tether_over_peer"][peer]["p50"] == pytest.approx(t["latency_ms"]["p50"] / e["latency_ms"]["p50"])
    assert d["engines"]["onnxruntime"]["cold_start_ms"]["load"] is None  # its session loads and compiles at once


def test_bench_batch_sizes_the_symbolic_dim_and_given_inputs_set_it(files: Path, capsys) -> None:
    d = _bench_json(files, capsys, str(files / "m.onnx"), "--iterations", "3", "--batch", "4")
    assert d["batch"] == 4 and d["inputs"] == {"x": "float32[4, 8]"} and d["rounds"] == 3
    _check_engine(d["engines"]["tether"], 3, 4)
    d = _bench_json(files, capsys, str(files / "m.onnx"), "--iterations", "2", "--inputs", str(files / "x5.npz"))
    assert d["batch"] == 5 and d["inputs"] == {"x": "float32[5, 8]"} and d["inputs_from"].endswith("x5.npz")
    d = _bench_json(files, capsys, str(files / "static.onnx"), "--iterations", "2", "--batch", "2")
    assert d["batch"] == 2


def test_bench_time_mode_runs_each_engine_at_least_once_per_round(files: Path, capsys) -> None:
    d = _bench_json(files, capsys, str(files / "m.onnx"), "--time", "0.05", "--against", "onnxruntime")
    assert d["iterations"] is None and d["time_s"] == 0.05
    for e in d["engines"].values():
        assert e["runs"] >= d["rounds"]
        _check_engine(e, e["runs"], 1)


def test_bench_profile_lists_the_slowest_kernels_of_the_model(files: Path, capsys) -> None:
    d = _bench_json(files, capsys, str(files / "deep.onnx"), "--iterations", "2", "--profile",
                    "--against", "onnxruntime")
    nodes = {n.name for n in onnx.load(str(files / "deep.onnx")).graph.node}
    for name, e in d["engines"].items():
        rows = e["profile"]
        assert 1 <= len(rows) <= 10, name
        ms = [r["ms_per_run"] for r in rows]
        assert ms == sorted(ms, reverse=True)
        assert all(0 <= r["share"] <= 1 for r in rows) and sum(r["share"] for r in rows) <= 1 + 1e-9
        assert {r["name"] for r in rows} <= nodes, name  # kernels are named by the model's nodes
    assert len(d["engines"]["onnxruntime"]["profile"]) == 10  # 24 nodes: the top 10


def test_bench_json_to_stdout_leaves_the_table_on_stderr(files: Path, capsys) -> None:
    assert cli.main(["bench", str(files / "m.onnx"), "--iterations", "2", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["engines"]["tether"]["runs"] == 2
    assert "latency ms" in err


def test_bench_api_notes_a_peer_that_is_not_installed(files: Path, monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "openvino" else real(n, *a))
    res = tt.bench(tt.load(files / "m.onnx"), iterations=2, warmup=0, against=["openvino", "onnxruntime"])
    assert [e.name for e in res.engines] == ["tether", "onnxruntime"]
    assert "not installed" in res.not_measured["openvino"] and "openvino: not measured" in str(res)
    assert res.engine("tether").cold_start["load"] is None  # a Model was given: nothing to load
    assert res.to_dict()["engines"]["onnxruntime"]["max_abs_diff_vs_tether"] < 1e-4


@pytest.mark.skipif(not _HAS_VULKAN, reason="no Vulkan device")
def test_bench_on_vulkan_notes_that_peers_run_on_the_cpu(files: Path) -> None:
    res = tt.bench(str(files / "m.onnx"), device="vulkan", iterations=2, warmup=0, against="onnxruntime")
    d = res.to_dict()
    assert d["device"] == "vulkan" and d["engines"]["onnxruntime"]["device"] == "cpu"
    assert any("CPU" in n for n in d["notes"])
    assert d["engines"]["onnxruntime"]["max_abs_diff_vs_tether"] < 1e-4


@pytest.mark.parametrize(("args", "message"), [
    (["--iterations", "0"], "--iterations 0: expected an integer >= 1"),
    (["--warmup", "-1"], "--warmup -1"),
    (["--time", "nan"], "--time nan"),
    (["--time", "0"], "--time 0.0"),
    (["--batch", "0"], "--batch 0"),
    (["--threads", "-1"], "--threads -1"),
    (["--iterations", "3", "--time", "1"], "give one"),
    (["--device", "gpu"], "unknown device 'gpu'"),
    (["--precision", "fp16"], "fp16 is for Vulkan"),
    (["--against", "onnxruntime,tensorrt"], "unknown peer 'tensorrt'"),
    (["--against", "onnxruntime,onnxruntime"], "named twice"),
    (["--json", "missing/out.json"], "--json 'missing/out.json': folder"),
])
def test_bench_refuses_bad_usage_before_reading_the_model(tmp_path: Path, capsys, args: list[str],
                                                          message: str) -> None:
    # The model does not exist: an error about it would mean the usage was checked too late.
    assert cli.main(["bench", str(tmp_path / "absent.onnx"), *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("tether: error: ") and len(err.strip().splitlines()) == 1
    assert message in err, err


def test_bench_refuses_a_batch_the_model_or_the_inputs_contradict(files: Path, capsys) -> None:
    assert cli.main(["bench", str(files / "static.onnx"), "--batch", "4"]) == 2
    assert "static batch dim of 2" in capsys.readouterr().err
    assert cli.main(["bench", str(files / "m.onnx"), "--batch", "4", "--inputs", str(files / "x5.npz")]) == 2
    assert "has batch 5" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # not a number at all: argparse's usage error
        cli.main(["bench", str(files / "m.onnx"), "--batch", "four"])
    assert e.value.code == 2
    capsys.readouterr()


def test_bench_api_refuses_bad_arguments_with_typed_errors(files: Path) -> None:
    for kwargs in ({"iterations": 0}, {"seconds": math.inf}, {"against": "tflite"}, {"batch": -2},
                   {"dims": {"batch": 2}, "inputs": str(files / "x5.npz")}):
        with pytest.raises(tt.ArgumentError):
            tt.bench(str(files / "m.onnx"), **kwargs)


def test_bench_keeps_tethers_figures_when_a_peer_fails(files: Path, monkeypatch) -> None:
    from tether._bench import _engines

    def refuse(self) -> None:
        raise RuntimeError("cannot create a session\nsecond line")

    monkeypatch.setattr(_engines.OnnxRuntimeEngine, "compile", refuse)
    res = tt.bench(str(files / "m.onnx"), iterations=2, warmup=0, against="onnxruntime")
    assert [e.name for e in res.engines] == ["tether"] and len(res.engine("tether").times) == 2
    assert res.not_measured["onnxruntime"] == "failed: RuntimeError: cannot create a session"


def test_bench_times_exactly_the_runs_it_reports(files: Path, monkeypatch) -> None:
    calls = []
    real_run = tt.Session.run
    monkeypatch.setattr(tt.Session, "run", lambda self, feeds: calls.append(1) or real_run(self, feeds))
    res = tt.bench(str(files / "m.onnx"), iterations=13, warmup=4)
    # one cold run, the warm-up, the timed runs: alone, tether has no untimed run between blocks
    assert len(calls) == 1 + 4 + 13 and len(res.engine("tether").times) == 13
    assert res.settings["rounds"] == 10
