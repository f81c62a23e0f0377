"""What a benchmark found: per engine latency, throughput, cold start, memory and profile, as
a table (``str``) and as the dict that ``tether bench --json`` writes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Changes when a field of :meth:`BenchResult.to_dict` changes meaning or goes away.
SCHEMA = "tether.bench/1"

#: How many kernels a profile lists.
TOP_KERNELS = 10


@dataclass
class EngineResult:
    """One engine's measurements. Times are in seconds here and in milliseconds in
    :meth:`to_dict`; ``times`` holds every timed run."""

    name: str
    version: str
    device: str
    batch: int
    times: list[float]
    cold_start: dict[str, float | None]
    memory: dict[str, Any]
    profile: list[dict[str, Any]] | None = None
    max_abs_diff: float | None = None

    def latency_ms(self) -> dict[str, float]:
        """min, p50, p90, p99, max, mean and stdev of the timed runs in ms (percentiles
        interpolated linearly between the nearest runs)."""
        t = np.asarray(self.times, dtype=np.float64) * 1e3
        p50, p90, p99 = np.percentile(t, [50, 90, 99])
        return {"min": float(t.min()), "p50": float(p50), "p90": float(p90), "p99": float(p99),
                "max": float(t.max()), "mean": float(t.mean()), "stdev": float(t.std(ddof=1)) if t.size > 1 else 0.0}

    def throughput(self) -> float:
        """Samples per second over the timed runs: batch x runs / their total time."""
        return self.batch * len(self.times) / sum(self.times)

    def cold_start_ms(self) -> dict[str, float | None]:
        """load, compile and first run in ms (None for a phase the engine does not have on its
        own), and their total."""
        out = {k: None if v is None else v * 1e3 for k, v in self.cold_start.items()}
        out["total"] = sum(v for v in out.values() if v is not None)
        return out

    def to_dict(self) -> dict[str, Any]:
        """The engine's fields as JSON-ready values."""
        return {"version": self.version, "device": self.device, "runs": len(self.times),
                "latency_ms": self.latency_ms(), "throughput_samples_per_s": self.throughput(),
                "cold_start_ms": self.cold_start_ms(), "memory": dict(self.memory),
                "profile": None if self.profile is None else self.profile[:TOP_KERNELS],
                "max_abs_diff_vs_tether": self.max_abs_diff}


@dataclass
class BenchResult:
    """What :func:`tether.bench` measured: the settings, the machine, one :class:`EngineResult`
    per engine (tether first), the peers left out with the reason, and notes.

    Example:
        >>> res = tt.bench("model.onnx", iterations=50, against=["onnxruntime"])   # doctest: +SKIP
        >>> res.to_dict()["engines"]["tether"]["latency_ms"]["p50"]                 # doctest: +SKIP
        0.412
        >>> print(res)                                                              # doctest: +SKIP
    """

    model: str
    settings: dict[str, Any]
    inputs: dict[str, str]
    machine: dict[str, Any]
    engines: list[EngineResult]
    not_measured: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def engine(self, name: str) -> EngineResult:
        """The result of the engine ``name``; KeyError when it was not measured."""
        for e in self.engines:
            if e.name == name:
                return e
        raise KeyError(f"{name} was not measured; measured: {', '.join(e.name for e in self.engines)}")

    def ratios(self) -> dict[str, dict[str, float]]:
        """For each peer, tether's latency (p50, mean) and cold start over the peer's: below 1,
        tether is faster."""
        base = self.engines[0]
        t_lat, t_cold = base.latency_ms(), base.cold_start_ms()["total"] or 0.0
        out = {}
        for e in self.engines[1:]:
            lat, cold = e.latency_ms(), e.cold_start_ms()["total"] or 0.0
            out[e.name] = {"p50": t_lat["p50"] / lat["p50"], "mean": t_lat["mean"] / lat["mean"],
                           "cold_start": t_cold / cold if cold else float("nan")}
        return out

    def to_dict(self) -> dict[str, Any]:
        """Everything as JSON-ready values (what ``tether bench --json`` writes); described in
        docs/cli.md.

        Example:
            >>> json.dumps(res.to_dict())                 # doctest: +SKIP
        """
        return {"schema": SCHEMA, "model": self.model, **self.settings, "inputs": dict(self.inputs),
                "machine": dict(self.machine), "engines": {e.name: e.to_dict() for e in self.engines},
                "tether_over_peer": self.ratios(), "not_measured": dict(self.not_measured), "notes": list(self.notes)}

    def to_json(self) -> str:
        """:meth:`to_dict` as indented JSON text."""
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        s = self.settings
        runs = f"{s['iterations']} timed runs" if s["iterations"] is not None else f"~{s['time_s']:g} s of timed runs"
        threads = f"{s['threads']} thread{'' if s['threads'] == 1 else 's'}"
        lines = [f"tether bench {self.model}: batch {s['batch']}, {threads}, tether on {s['device']} "
                 f"({s['precision']}); {s['warmup']} warm-up runs, then {runs} per engine in {s['rounds']} "
                 "interleaved rounds",
                 f"machine: {self.machine['cpu']}, {self.machine['physical_cores']} physical cores, ISA "
                 f"{self.machine['isa']}, load average {self.machine['load_average']}",
                 "inputs: " + ", ".join(f"{k} {v}" for k, v in self.inputs.items()) + f" ({s['inputs_from']})", ""]
        ratios = self.ratios()
        lines.append(f"{'latency ms':<14}{'min':>9}{'p50':>9}{'p90':>9}{'p99':>9}{'max':>9}{'mean':>9}{'runs':>7}"
                     f"{'samples/s':>11}  tether/peer p50")
        for e in self.engines:
            lat = e.latency_ms()
            ratio = f"  {ratios[e.name]['p50']:.2f}" if e.name in ratios else ""
            lines.append(f"{e.name:<14}" + "".join(f"{lat[k]:>9.3f}" for k in ("min", "p50", "p90", "p99", "max",
                                                                               "mean"))
                         + f"{len(e.times):>7}{e.throughput():>11.1f}{ratio}")
        lines += ["", f"{'cold start ms':<14}{'load':>10}{'compile':>10}{'first run':>11}{'total':>10}"]
        for e in self.engines:
            c = e.cold_start_ms()
            cells = "".join(f"{'-' if c[k] is None else format(c[k], '.1f'):>{w}}"
                            for k, w in (("load", 10), ("compile", 10), ("first_run", 11), ("total", 10)))
            lines.append(f"{e.name:<14}{cells}")
        lines += ["", f"{'memory MB':<14}{'held':>10}{'run peak':>10}{'peak':>10}"]
        for e in self.engines:
            m = e.memory
            cells = "".join(f"{'-' if m.get(k) is None else format(m[k] / 2**20, '.1f'):>10}"
                            for k in ("rss_held_bytes", "rss_run_peak_bytes", "rss_peak_bytes"))
            lines.append(f"{e.name:<14}{cells}")
        arena = self.engines[0].memory.get("arena", {})
        if arena:
            lines.append("tether's plan: " + ", ".join(f"{k} {v}" for k, v in arena.items()))
        for e in self.engines:
            if e.max_abs_diff is not None:
                lines.append(f"{e.name}: outputs differ from tether's by at most {e.max_abs_diff:.3g}")
        for e in self.engines:
            if e.profile is None:
                continue
            lines += ["", f"top kernels of {e.name} ({s['profile_runs']} profiled runs)",
                      f"  {'ms/run':>9} {'share':>6}  name (op)"]
            for row in e.profile[:TOP_KERNELS]:
                lines.append(f"  {row['ms_per_run']:>9.3f} {row['share'] * 100:>5.1f}%  {row['name']} "
                             f"({row['op_type']})")
        for name, why in self.not_measured.items():
            lines.append(f"{name}: not measured: {why}")
        if self.notes:
            lines += [""] + [f"note: {n}" for n in self.notes]
        return "\n".join(lines)
