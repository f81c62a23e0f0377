"""tether.bench: latency, throughput, cold start, memory and kernel profile of a model in
tether's engine, beside onnxruntime and OpenVINO measured in the same process, on the same
inputs and thread count, in interleaved rounds."""

from __future__ import annotations

import importlib.util
import math
import numbers
import os
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tether._bench._engines import PEERS, OnnxRuntimeEngine, OpenVinoEngine, TetherEngine
from tether._bench._result import BenchResult, EngineResult
from tether._model import Model
from tether._native import core as _core
from tether._session import cpu_info
from tether.parity import InputSpec, TetherRunner, check_feeds, generate_inputs, iter_feeds
from tether.parity._runners import _dtype

__all__ = ["PEERS", "BenchResult", "EngineResult", "bench"]

#: Rounds the timed runs are split into; the engines take turns in each, the first changing.
ROUNDS = 10
#: Runs of a profiled session (after one unprofiled first run).
PROFILE_RUNS = 10
_INSTALL = {"onnxruntime": "pip install onnxruntime", "openvino": "pip install openvino"}


class _Rss:
    """This process's resident memory, from /proc (None where there is none). The peak is
    reset for each window by writing 5 to /proc/self/clear_refs; where that is refused, a
    window's peak is the resident size at its end."""

    def __init__(self) -> None:
        self.available = os.path.exists("/proc/self/statm")
        self._page = os.sysconf("SC_PAGE_SIZE") if self.available else 0
        self._resettable = self.available and self._reset()

    @staticmethod
    def _reset() -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    def now(self) -> int | None:
        if not self.available:
            return None
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self._page

    def _peak(self) -> int | None:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return None

    def start(self) -> int | None:
        """Starts a window; returns the resident size at its start."""
        if self._resettable:
            self._reset()
        return self.now()

    def growth(self, start: int | None) -> int | None:
        """The largest rise above ``start`` since the window began."""
        if start is None:
            return None
        now = self.now() or 0
        peak = self._peak() if self._resettable else None
        return max(now, peak or 0, start) - start


def _peers(against: str | Sequence[str]) -> list[str]:
    names = [a.strip() for a in (against.split(",") if isinstance(against, str) else against) if a.strip()]
    for n in names:
        if n not in PEERS:
            raise _core.ArgumentError(f"against: unknown peer '{n}'; the peers are: {', '.join(PEERS)}")
    if len(set(names)) != len(names):
        raise _core.ArgumentError(f"against: a peer is named twice: {', '.join(names)}")
    return [p for p in PEERS if p in names]


def _check_numbers(threads: int | None, batch: int | None, warmup: int, iterations: int | None,
                   seconds: float | None, precision: str, device: str) -> None:
    def bad(what: str, value: object, allowed: str) -> None:
        raise _core.ArgumentError(f"{what} {value}: expected {allowed}")

    def whole(v: object) -> bool:
        return isinstance(v, numbers.Integral) and not isinstance(v, bool)

    if threads is not None and not (whole(threads) and threads >= 0):
        bad("threads", threads, "an integer >= 0 (0: one per physical core)")
    if batch is not None and not (whole(batch) and batch >= 1):
        bad("batch", batch, "an integer >= 1")
    if not (whole(warmup) and warmup >= 0):
        bad("warmup", warmup, "an integer >= 0")
    if iterations is not None and seconds is not None:
        raise _core.ArgumentError("iterations and time both say how long to measure; give one")
    if iterations is not None and not (whole(iterations) and iterations >= 1):
        bad("iterations", iterations, "an integer >= 1")
    if seconds is not None and not (isinstance(seconds, numbers.Real) and 0 < seconds < math.inf):
        bad("time", seconds, "a finite number of seconds > 0")
    if precision not in ("fp32", "fp16"):
        bad("precision", repr(precision), "'fp32' or 'fp16'")
    if not re.fullmatch(r"cpu|vulkan(:\d+)?", device):
        raise _core.ArgumentError(f"unknown device '{device}'; available: cpu, vulkan, vulkan:N (see tt.devices())")
    if precision == "fp16" and device == "cpu":
        raise _core.ArgumentError("precision fp16 is for Vulkan devices; the CPU engine computes in float32")


def _specs(model: Model) -> list[InputSpec]:
    """The inputs a run must feed: the graph inputs without a default in the initializers."""
    weights = set(model.initializer_names)
    return [InputSpec(i.name, _dtype(i.dtype), i.shape) for i in model.inputs if i.name not in weights]


def _batch_dims(specs: Sequence[InputSpec], batch: int, dims: Mapping[str, int]) -> dict[str, int]:
    """The symbolic dims that set dim 0 of every input to ``batch``; refuses an input whose
    dim 0 is fixed to another size."""
    batched = [s for s in specs if s.shape]
    if not batched:
        raise _core.ArgumentError(f"batch {batch}: no input of the model has a dim 0 to set")
    out = dict(dims)
    for s in batched:
        d = s.shape[0]  # type: ignore[index]
        if isinstance(d, str):
            if out.get(d, batch) != batch:
                raise _core.ArgumentError(f"batch {batch}: dim '{d}' of input '{s.name}' is also given as {out[d]}")
            out[d] = batch
        elif d is None:
            raise _core.ArgumentError(f"batch {batch}: dim 0 of input '{s.name}' is unknown, neither a size nor a "
                                      "name; give the inputs instead")
        elif d != batch:
            raise _core.ArgumentError(f"batch {batch}: input '{s.name}' has a static batch dim of {d} (shape "
                                      f"{list(s.shape)}); the model runs at batch {d} only")  # type: ignore[arg-type]
    return out


def _feeds(specs: Sequence[InputSpec], inputs: Any, batch: int | None, dims: Mapping[str, int],
           seed: int) -> tuple[dict[str, np.ndarray], str]:
    """The feeds of every run and where they come from: the user's (checked as ``tether run``
    checks them) or generated as ``tether run`` generates them."""
    if inputs is None:
        return generate_inputs(specs, seed=seed, dims=dims)[0], f"generated, seed {seed}"
    where = os.fspath(inputs) if isinstance(inputs, str | os.PathLike) else "inputs"
    feeds = next(iter(iter_feeds(inputs, specs)), None)
    if feeds is None:
        raise _core.ArgumentError("inputs: no batch was given")
    check_feeds(feeds, specs, where)
    for s in specs:
        a = feeds[s.name]
        if batch is not None and s.shape and a.shape[0] != batch:
            raise _core.ArgumentError(f"batch {batch}: {where}: input '{s.name}' has batch {a.shape[0]} (shape "
                                      f"{list(a.shape)}); give inputs of batch {batch} or leave the batch out")
    return feeds, where


def _batch_of(feeds: Mapping[str, np.ndarray]) -> int:
    """Dim 0 of the first input that has one (1 when none has)."""
    for a in feeds.values():
        if a.ndim:
            return int(a.shape[0])
    return 1


def _max_abs_diff(ours: Mapping[str, np.ndarray], theirs: Mapping[str, np.ndarray]) -> float | None:
    worst = None
    for name, a in ours.items():
        b = theirs.get(name)
        if b is None or np.shape(a) != np.shape(b) or a.dtype.kind not in "fiub" or a.size == 0:
            continue
        d = float(np.max(np.abs(a.astype(np.float64) - np.asarray(b).astype(np.float64))))
        worst = d if worst is None or not d <= worst else worst
    return worst


def _cold_start(engine: Any, rss: _Rss, feeds: Mapping[str, np.ndarray]
                ) -> tuple[dict[str, float | None], dict[str, np.ndarray], int | None]:
    """A peer's load, compile and first run, timed; its first outputs; the resident memory it
    gained through them."""
    start = rss.now()
    phases: dict[str, float | None] = {"load": None}
    if engine.separate_load:
        t0 = time.perf_counter()
        engine.load()
        phases["load"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    engine.compile()
    phases["compile"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = engine.run(dict(feeds))
    phases["first_run"] = time.perf_counter() - t0
    return phases, out, _rise(rss, start)


def _rise(rss: _Rss, start: int | None) -> int | None:
    now = rss.now()
    return None if start is None or now is None else now - start


def _rounds(engines: Sequence[Any], feeds: dict[str, np.ndarray], iterations: int | None, seconds: float,
            rss: _Rss) -> tuple[int, dict[str, list[float]], dict[str, int | None]]:
    """Timed runs in rounds; in each the engines take turns (the first changing from round to
    round), each one running a block. With several engines, a block starts with one untimed run,
    so that caches another engine left behind are refilled before timing."""
    rounds = min(ROUNDS, iterations) if iterations is not None else ROUNDS
    times: dict[str, list[float]] = {e.name: [] for e in engines}
    peaks: dict[str, int | None] = {e.name: None for e in engines}
    for r in range(rounds):
        for e in [*engines[r % len(engines):], *engines[: r % len(engines)]]:
            if len(engines) > 1:
                e.run(feeds)
            start = rss.start()
            block = times[e.name]
            if iterations is not None:
                for _ in range(iterations // rounds + (r < iterations % rounds)):
                    t0 = time.perf_counter()
                    e.run(feeds)
                    block.append(time.perf_counter() - t0)
            else:
                began = time.perf_counter()
                while True:
                    t0 = time.perf_counter()
                    e.run(feeds)
                    t1 = time.perf_counter()
                    block.append(t1 - t0)
                    if t1 - began >= seconds / rounds:
                        break
            grew = rss.growth(start)
            if grew is not None:
                peaks[e.name] = max(grew, peaks[e.name] or 0)
    return rounds, times, peaks


def _peer_file(model: Model | str | os.PathLike[str] | bytes, tmp: str) -> str:
    """A file the peers can read: the user's, else the model written out."""
    if isinstance(model, str | os.PathLike):
        return os.fspath(model)
    path = os.path.join(tmp, "model.onnx")
    with open(path, "wb") as f:
        f.write(model.to_bytes() if isinstance(model, Model) else bytes(model))
    return path


def _machine() -> dict[str, Any]:
    info = cpu_info()
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"cpu": info.get("brand") or "unknown CPU", "isa": info["isa"], "physical_cores": info["physical_cores"],
            "load_average": None if load is None else [round(v, 2) for v in load]}


def bench(model: Model | str | os.PathLike[str] | bytes, *, device: str = "cpu", threads: int | None = None,
          batch: int | None = None, precision: str = "fp32", inputs: Any = None, dims: Mapping[str, int] | None = None,
          seed: int = 0, warmup: int = 5, iterations: int | None = None, seconds: float | None = None,
          against: str | Sequence[str] = (), profile: bool = False) -> BenchResult:
    """Measures a model in tether's engine and, in the same process, in each peer of
    ``against`` that is installed: latency percentiles, throughput, cold start (load, compile,
    first run), resident memory and, with ``profile``, the kernels that take the most time.

    ``device``, ``threads`` and ``precision`` are :func:`tether.compile`'s; the peers
    (``"onnxruntime"``, ``"openvino"``, or both, as a list or a comma-separated string) run on
    the CPU with tether's thread count, on the same feeds. A peer that is not installed is not
    measured; the result says so. ``inputs`` are what :func:`tether.parity.iter_feeds` takes
    (a ``.npz`` path, a dict of arrays, ...; the first batch is used); without them inputs are
    generated from ``seed`` as ``tether run`` makes them, each symbolic dim 1 unless ``dims``
    sizes it. ``batch`` sets dim 0 of every input (its symbolic dim; a static dim 0 must equal
    it, and given inputs must have it).

    After the first run, each engine runs ``warmup`` times untimed; then the timed runs,
    ``iterations`` per engine or about ``seconds`` per engine (default 3), are split into
    rounds in which the engines take turns, so that machine noise falls on all of them alike.
    Memory is this process's resident size (Linux): ``rss_held_bytes`` is its growth from
    before the engine was loaded until after its first run (weights, plans, arenas),
    ``rss_run_peak_bytes`` the largest rise during a block of timed runs (the process's peak,
    VmHWM, is reset for each block through /proc/self/clear_refs), ``rss_peak_bytes`` their
    sum; tether adds its session's plan (``arena``: :meth:`tether.Session.memory`). Profiles
    come from sessions of their own (tether: ``compile(..., profile=True)``; onnxruntime: its
    profiler; OpenVINO: its performance counters), run 10 times after a first run, so the timed
    runs carry no profiling cost.

    Raises ArgumentError before loading anything for a bad number, an unknown device or peer,
    or both ``iterations`` and ``seconds``; ArgumentError for a ``batch`` that a static dim 0 or
    the given inputs contradict; the errors of :func:`tether.compile` and ``Session.run``.

    Example:
        >>> res = tt.bench("model.onnx", threads=2, iterations=100, against="onnxruntime,openvino")  # doctest: +SKIP
        >>> print(res)                                                            # doctest: +SKIP
        >>> res.to_dict()["tether_over_peer"]["onnxruntime"]["p50"]               # doctest: +SKIP
        0.83
    """
    peers = _peers(against)
    _check_numbers(threads, batch, warmup, iterations, seconds, precision, device)
    if dims and inputs is not None:
        raise _core.ArgumentError("dims size the generated inputs; they do not apply to inputs that are given")
    installed = [p for p in peers if importlib.util.find_spec(p) is not None]
    not_measured = {p: f"not installed ({_INSTALL[p]})" for p in peers if p not in installed}
    if isinstance(model, str | os.PathLike) and os.path.isfile(model):
        with open(model, "rb") as f:  # every engine then reads it from the page cache, not the first alone
            while f.read(1 << 24):
                pass
    rss = _Rss()
    tether, cold, held, feeds, source, ours = _start_tether(model, device, threads, precision, batch, inputs,
                                                           dict(dims or {}), seed, rss)
    engines: list[Any] = [tether]
    colds, helds, diffs = {tether.name: cold}, {tether.name: held}, {}
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp:
        path = _peer_file(model, tmp) if installed else ""
        for name in installed:
            try:
                engine: Any = (OnnxRuntimeEngine(path, tether.threads) if name == "onnxruntime" else
                               OpenVinoEngine(path, tether.threads, {k: v.shape for k, v in feeds.items()}))
                colds[name], out, helds[name] = _cold_start(engine, rss, feeds)
            except Exception as err:  # noqa: BLE001 - a peer that fails leaves tether's figures standing
                not_measured[name] = f"failed: {type(err).__name__}: {str(err).strip().splitlines()[0][:300]}"
                continue
            diffs[name] = _max_abs_diff(ours, out)
            engines.append(engine)
        for e in engines:
            for _ in range(warmup):
                e.run(feeds)
        rounds, times, run_peaks = _rounds(engines, feeds, iterations, 3.0 if seconds is None else seconds, rss)
        profiles = {e.name: e.profile(feeds, PROFILE_RUNS) for e in engines} if profile else {}
    batch_used = batch if batch is not None else _batch_of(feeds)
    results = []
    for e in engines:
        memory: dict[str, Any] = {"rss_held_bytes": helds[e.name], "rss_run_peak_bytes": run_peaks[e.name]}
        memory["rss_peak_bytes"] = None if None in memory.values() else sum(memory.values())
        if e is tether:
            memory["arena"] = tether.memory()
        results.append(EngineResult(e.name, e.version, e.device, batch_used, times[e.name], colds[e.name], memory,
                                    profiles.get(e.name), diffs.get(e.name)))
    settings = {"device": device, "threads": tether.threads, "batch": batch_used, "precision": precision,
                "warmup": warmup, "iterations": iterations, "time_s": None if iterations is not None else
                (3.0 if seconds is None else float(seconds)), "rounds": rounds, "inputs_from": source,
                "profile_runs": PROFILE_RUNS if profile else None}
    notes = _notes(len(engines) > 1, device, precision, rss)
    return BenchResult(_label(model), settings, {k: f"{v.dtype}{list(v.shape)}" for k, v in feeds.items()},
                       _machine(), results, not_measured, notes)


def _start_tether(model: Model | str | os.PathLike[str] | bytes, device: str, threads: int | None, precision: str,
                  batch: int | None, inputs: Any, dims: dict[str, int], seed: int, rss: _Rss) -> tuple[
                      TetherEngine, dict[str, float | None], int | None, dict[str, np.ndarray], str,
                      dict[str, np.ndarray]]:
    """tether's cold start: load, the checks that need the model's inputs, compile; then the
    feeds are made (outside the timing and the memory counted) and the first run is timed.
    Returns the engine, the phases, the memory it holds, the feeds, their source and the
    first outputs."""
    tether = TetherEngine(model if isinstance(model, Model) else (os.fspath(model) if isinstance(
        model, str | os.PathLike) else bytes(model)), device, threads, precision)
    start = rss.now()
    cold: dict[str, float | None] = {"load": None}
    separate_load = tether.separate_load
    t0 = time.perf_counter()
    tether.load()
    if separate_load:
        cold["load"] = time.perf_counter() - t0
    assert tether.model is not None
    if batch is not None:
        batched = _batch_dims(_specs(tether.model), batch, dims)
        dims = batched if inputs is None else dims
    t0 = time.perf_counter()
    tether.compile()
    cold["compile"] = time.perf_counter() - t0
    before_feeds = _rise(rss, start)
    specs = TetherRunner(tether.session).input_specs()  # type: ignore[arg-type]
    feeds, source = _feeds(specs, inputs, batch, dims, seed)
    start = rss.now()
    t0 = time.perf_counter()
    ours = tether.run(feeds)
    cold["first_run"] = time.perf_counter() - t0
    grew = _rise(rss, start)
    held = None if grew is None or before_feeds is None else before_feeds + grew
    return tether, cold, held, feeds, source, ours


def _notes(peers: bool, device: str, precision: str, rss: _Rss) -> list[str]:
    notes = []
    if peers and device != "cpu":
        notes.append(f"the peers run on the CPU; tether on {device}")
    if peers and precision != "fp32":
        notes.append(f"the peers compute in float32; tether keeps tensors in {precision}")
    if not rss.available:
        notes.append("resident memory is not measured on this system (no /proc)")
    return notes


def _label(model: Model | str | os.PathLike[str] | bytes) -> str:
    if isinstance(model, str | os.PathLike):
        return os.fspath(model)
    return (model.path or "<model>") if isinstance(model, Model) else "<bytes>"
