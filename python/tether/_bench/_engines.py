"""The engines a benchmark times: tether, and the peers onnxruntime and OpenVINO on the CPU.

Each engine splits its cold start into the phases it has (load, compile, first run), runs on
the same feeds and thread count as the others, and profiles itself in a session of its own so
that the timed runs carry no profiling cost.
"""

from __future__ import annotations

import datetime
import json
import os
import tempfile
from collections import defaultdict
from typing import Any

import numpy as np

from tether._model import Model, load
from tether._session import Session, compile

#: The peers ``against`` may name, in the order they are measured.
PEERS = ("onnxruntime", "openvino")

_VULKAN_SEGMENT = "vulkan:segment"


def _profile_rows(seconds: dict[str, float], op_types: dict[str, str], runs: int,
                  total: float | None = None) -> list[dict[str, Any]]:
    """Kernel rows sorted by time, with their share of ``total`` (default: the sum of the rows)."""
    total = sum(seconds.values()) if total is None else total
    rows = [{"name": name, "op_type": op_types.get(name, ""), "ms_per_run": s * 1e3 / max(runs, 1),
             "share": s / total if total > 0 else 0.0} for name, s in seconds.items()]
    return sorted(rows, key=lambda r: -r["ms_per_run"])


class TetherEngine:
    """tether's engine on ``device``; ``load`` is no phase of its own when given a Model."""

    name = "tether"

    def __init__(self, source: Model | str | bytes, device: str, threads: int | None, precision: str) -> None:
        self._source = source
        self.model: Model | None = source if isinstance(source, Model) else None
        self.session: Session | None = None
        self.device, self._threads, self._precision = device, threads, precision

    @property
    def version(self) -> str:
        from tether import __version__

        return __version__

    @property
    def separate_load(self) -> bool:
        return self.model is None

    def load(self) -> None:
        if self.model is None:
            self.model = load(self._source)  # type: ignore[arg-type]

    def compile(self) -> None:
        assert self.model is not None
        self.session = compile(self.model, self.device, threads=self._threads, precision=self._precision)

    @property
    def threads(self) -> int:
        assert self.session is not None
        return self.session.threads

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        assert self.session is not None
        return self.session.run(feeds)

    def memory(self) -> dict[str, int]:
        assert self.session is not None
        return self.session.memory()

    def profile(self, feeds: dict[str, np.ndarray], runs: int) -> list[dict[str, Any]]:
        assert self.model is not None
        sess = compile(self.model, self.device, threads=self._threads, precision=self._precision, profile=True)
        sess.run(feeds)  # the first run plans memory: not part of the profile
        before = {e["name"]: e["seconds"] for e in sess.profile()}
        for _ in range(runs):
            sess.run(feeds)
        entries = [dict(e, seconds=e["seconds"] - before.get(e["name"], 0.0)) for e in sess.profile()]
        return _tether_rows(entries, {s["name"] for s in sess.steps() if s["backend"] == "vulkan"}, runs)


def _tether_rows(entries: list[dict[str, Any]], vulkan: set[str], runs: int) -> list[dict[str, Any]]:
    """Rows of tether's profile. On Vulkan, a stretch of device kernels is one wall-time entry
    followed by each kernel's device time: the kernels are listed (the stretch itself when its
    device has no timestamps), and shares are of the wall time (stretches plus CPU kernels), so
    nothing is counted twice."""
    seconds: dict[str, float] = {}
    op_types: dict[str, str] = {}
    total = 0.0
    pending: dict[str, Any] | None = None  # a stretch not yet followed by a kernel of its own
    for e in entries:
        if e["op_type"] == _VULKAN_SEGMENT:
            if pending is not None:
                seconds[pending["name"]], op_types[pending["name"]] = pending["seconds"], _VULKAN_SEGMENT
            pending = e
            total += e["seconds"]
            continue
        if e["name"] in vulkan:
            pending = None
        else:
            if pending is not None:
                seconds[pending["name"]], op_types[pending["name"]] = pending["seconds"], _VULKAN_SEGMENT
            pending = None
            total += e["seconds"]
        seconds[e["name"]], op_types[e["name"]] = e["seconds"], e["op_type"]
    if pending is not None:
        seconds[pending["name"]], op_types[pending["name"]] = pending["seconds"], _VULKAN_SEGMENT
    return _profile_rows(seconds, op_types, runs, total)


class OnnxRuntimeEngine:
    """onnxruntime's CPU provider, intra-op threads as tether's, nodes run one after another.
    Creating its session loads and compiles at once: it has no load phase of its own."""

    name = "onnxruntime"
    separate_load = False
    device = "cpu"

    def __init__(self, path: str, threads: int) -> None:
        import onnxruntime

        self._ort, self._path, self._threads = onnxruntime, path, threads
        self.version = str(onnxruntime.__version__)
        self._session: Any = None

    def _options(self) -> Any:
        opts = self._ort.SessionOptions()
        opts.intra_op_num_threads = self._threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = self._ort.ExecutionMode.ORT_SEQUENTIAL
        return opts

    def load(self) -> None:
        pass

    def compile(self) -> None:
        self._session = self._ort.InferenceSession(self._path, self._options(), providers=["CPUExecutionProvider"])
        self._names = [o.name for o in self._session.get_outputs()]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self._names, self._session.run(None, feeds), strict=True))

    def profile(self, feeds: dict[str, np.ndarray], runs: int) -> list[dict[str, Any]]:
        with tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp:
            opts = self._options()
            opts.enable_profiling = True
            opts.profile_file_prefix = os.path.join(tmp, "ort")
            sess = self._ort.InferenceSession(self._path, opts, providers=["CPUExecutionProvider"])
            for _ in range(runs + 1):
                sess.run(None, feeds)
            with open(sess.end_profiling(), encoding="utf-8") as f:
                events = [e for e in json.load(f) if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
        seconds: dict[str, float] = defaultdict(float)
        op_types: dict[str, str] = {}
        seen: set[str] = set()
        for e in events:
            node = e["name"][: -len("_kernel_time")]
            if node not in seen:  # its first event is the first run, which plans memory: left out
                seen.add(node)
                continue
            seconds[node] += e["dur"] * 1e-6
            op_types[node] = e.get("args", {}).get("op_name", "")
        return _profile_rows(dict(seconds), op_types, runs)


class OpenVinoEngine:
    """OpenVINO's CPU plug-in, reshaped to the feeds' shapes, INFERENCE_NUM_THREADS as tether's
    threads, float32 inference (not bf16, its default where the CPU has AMX), latency hint."""

    name = "openvino"
    separate_load = True
    device = "cpu"

    def __init__(self, path: str, threads: int, shapes: dict[str, tuple[int, ...]]) -> None:
        import openvino  # type: ignore[import-untyped]

        self._ov, self._path, self._threads, self._shapes = openvino, path, threads, shapes
        self.version = str(openvino.get_version()).split("-")[0]
        self._core = openvino.Core()
        self._model: Any = None

    def _compiled(self, profile: bool) -> Any:
        config: dict[str, Any] = {"INFERENCE_NUM_THREADS": self._threads, "INFERENCE_PRECISION_HINT": "f32",
                                  "PERFORMANCE_HINT": "LATENCY"}
        if profile:
            config["PERF_COUNT"] = True
        return self._core.compile_model(self._model, "CPU", config)

    def load(self) -> None:
        self._model = self._core.read_model(self._path)

    def compile(self) -> None:
        self._model.reshape({name: self._ov.PartialShape(list(s)) for name, s in self._shapes.items()})
        compiled = self._compiled(False)
        self._request = compiled.create_infer_request()
        self._outputs = list(compiled.outputs)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        res = self._request.infer(feeds)
        return {o.get_any_name(): np.asarray(res[o]) for o in self._outputs}

    def profile(self, feeds: dict[str, np.ndarray], runs: int) -> list[dict[str, Any]]:
        request = self._compiled(True).create_infer_request()
        request.infer(feeds)
        seconds: dict[str, float] = defaultdict(float)
        op_types: dict[str, str] = {}
        executed = self._ov.ProfilingInfo.Status.EXECUTED
        for _ in range(runs):
            request.infer(feeds)
            for info in request.profiling_info:  # the latest run's counters
                if info.status == executed:
                    real: datetime.timedelta = info.real_time
                    seconds[info.node_name] += real.total_seconds()
                    op_types[info.node_name] = info.node_type
        return _profile_rows(dict(seconds), op_types, runs)
