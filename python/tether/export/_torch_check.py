"""The checks behind tether.export.torch: the file against the module on the example, on
generated inputs of the example's shapes, and at a second size of the dynamic dims."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tether._model import load
from tether._native import core as _core
from tether.export._files import golden_path
from tether.export._result import ExportResult, fail, note, suggest_tolerance, whole
from tether.parity import (
    InputSpec,
    OnnxRuntimeRunner,
    ParityReport,
    TetherRunner,
    Tolerance,
    TorchRunner,
    compare,
    model_sha256,
    save_golden,
)

Feeds = dict[str, np.ndarray]
Run = tuple[Feeds, dict[str, np.ndarray], dict[str, np.ndarray]]  # feeds, the module's outputs, the file's

# Below this signal-to-noise ratio a difference is more than float rounding: a fixed dim or a
# wrong op gives errors of the size of the values (SNR near 0 dB).
_ROUNDING_SNR_DB = {"float16": 40.0, "bfloat16": 30.0}
_ROUNDING_SNR_DB_DEFAULT = 80.0


@dataclass
class Options:
    """The verification options of tether.export.torch."""

    tolerance: Tolerance | str | None
    check: bool
    threads: int | None
    seed: int
    golden: bool
    generated: int
    sizes: dict[str, int]


def verify(module: Any, args: tuple[Any, ...], names: list[str], result: ExportResult, staged: Path,
           opts: Options) -> None:
    """Checks the file written at ``staged`` (to be moved to ``result.path``) against the module
    and writes the golden bundle beside it; raises ExportError through :func:`fail`."""
    example = {n: a.detach().cpu().numpy() for n, a in zip(names, args, strict=True)}
    fixed = _fixed_dims(staged, result.dynamic_dims)
    if fixed:
        fail(result, f"the exported model is not dynamic where asked: {'; '.join(fixed)}. The exporter fixed the "
                     "size (often a Python int taken from a tensor's shape in forward())")
    candidate = _candidate(staged, opts.threads, result, example)
    outputs = [o.name for o in load(staged).outputs]
    reference = TorchRunner(module, names, outputs, "torch")

    first = _run_pair(reference, candidate, [example], result, "on the example")
    assert first is not None
    result.report = _report(reference.name, candidate.name, first, opts.tolerance)
    if opts.golden:
        _save_golden(staged, result, first[0], names, opts.tolerance)
    generated = dynamic = None
    if opts.generated:
        generated = _run_pair(reference, candidate, _generated(example, opts.generated, opts.seed), result,
                              "on generated inputs of the example's shapes")
        if generated:
            result.generated_report = _report(reference.name, candidate.name, generated, opts.tolerance)
    if result.dynamic_dims:
        bigger = _second_size(example, result.dynamic_dims, opts.sizes, opts.seed)
        dynamic = _run_pair(reference, candidate, [bigger], result, f"with {_sizes(opts.sizes)}")
        if dynamic:
            result.dynamic_report = _report(reference.name, candidate.name, dynamic, opts.tolerance)
    checks = [(result.report, first), (result.generated_report, generated), (result.dynamic_report, dynamic)]
    _judge(result, opts, {n: a.dtype for n, a in first[0][1].items()}, checks, reference)


def _judge(result: ExportResult, opts: Options, dtypes: Mapping[str, np.dtype],
           checks: list[tuple[ParityReport | None, list[Run] | None]], reference: TorchRunner) -> None:
    """Raises (or warns, for a parity failure with ``check=False``) naming what failed and why.
    ``checks``: the report and runs on the example, on generated inputs, at the second size."""
    wheres = ["on the example",
              "on generated inputs of the example's shapes (though it matched on the example)",
              f"at {_sizes(opts.sizes)} (though it matched at the example's size)"]
    for k, ((report, runs), where) in enumerate(zip(checks, wheres, strict=True)):
        if report is None or report.ok:
            continue
        rounding = _rounding(report, dtypes) or _rounding_in_float64(reference, runs or [], report)
        if rounding:
            why = (f"the exported model differs from the module {where} by float rounding only: {rounding}. Neither a "
                   "fixed dim nor a wrong op: the tolerance is tighter than this model's float arithmetic allows")
            if k == 0 and opts.check:
                fail(result, f"{why}; pass a looser one, e.g. tolerance={suggest_tolerance(report)}", report.table())
            # Inputs tether made up (generated values, the second size) may drive the model where its
            # float arithmetic is coarse: worth a warning, not a refusal of a faithful file.
            note(result.warnings, why)
            if k > 0:
                result.rounding_only.append(("generated", "dynamic")[k - 1])
            continue
        if k == 0:
            why = f"the exported model does not compute what the module computes {where}"
        elif k == 1:
            why = (f"the exported model differs from the module {where}: it depends on input values the exporter "
                   "fixed (a Python branch on a tensor's value, .item(), a tensor converted to a Python number)"
                   + _tracer_hint(result))
        else:
            fail(result, f"the exported model differs from the module {where}: a dynamic dim was fixed inside the "
                         "graph (a Python int taken from a tensor's shape in forward(), say)", report.table())
        if opts.check:
            fail(result, why, report.table())
        note(result.warnings, why)


def _tracer_hint(result: ExportResult) -> str:
    traced = [w for w in result.warnings if w.startswith("TracerWarning")]
    return f". The tracer warned: {traced[0]}" if traced else ""


def _rounding(report: ParityReport, dtypes: Mapping[str, np.dtype]) -> str:
    """Why the failed outputs of ``report`` look like float rounding, or "" when they do not:
    every value finite, and an error far below the values' size."""
    bad = [o for o in report.outputs if not o.metrics.ok]
    if not bad:
        return ""
    parts = []
    for o in bad:
        m = o.metrics
        floor = _ROUNDING_SNR_DB.get(str(dtypes.get(o.name, "")), _ROUNDING_SNR_DB_DEFAULT)
        if m.problem or m.nonfinite_mismatches or m.exact or not m.snr_db >= floor:
            return ""
        parts.append(f"output '{o.name}' has max abs error {m.max_abs_error:.3g} at SNR {m.snr_db:.0f} dB (a fixed dim "
                     "or a wrong op gives errors the size of the values, SNR near 0 dB)")
    return "; ".join(parts)


# How far the file may stray from a float64 evaluation of the module, in multiples of how far
# the module's own float32 result strays from it, and still count as rounding. A wrong op or
# a fixed branch gives errors the size of the values, far beyond any such multiple.
_FLOAT64_RATIO = 8.0


def _rounding_in_float64(reference: TorchRunner, runs: list[Run], report: ParityReport) -> str:
    """Why the failed outputs of ``report`` are float rounding, judged against the module run in
    float64 on the same inputs, or "" when they are not (or the module does not run in float64).

    Some inputs make a network amplify rounding (values in the thousands out of a random-weight
    CNN): then the module's own float32 result is as far from the exact one as the file's, and
    an SNR threshold alone would call that a wrong export."""
    import torch

    bad = [o.name for o in report.outputs if not o.metrics.ok]
    if not runs or not bad or any(runs[0][1][n].dtype.kind != "f" for n in bad):
        return ""
    try:
        exact = TorchRunner(copy.deepcopy(reference.module).to(torch.float64), reference.input_names,
                            reference.names, "torch float64")
        own = dict.fromkeys(bad, 0.0)
        file = dict.fromkeys(bad, 0.0)
        for feeds, want, got in runs:
            wide = {n: a.astype(np.float64) if a.dtype.kind == "f" else a for n, a in feeds.items()}
            ref = exact.run(wide)
            for n in bad:
                r = ref[n].astype(np.float64)
                if not (np.isfinite(r).all() and np.isfinite(want[n]).all() and np.isfinite(got[n]).all()):
                    return ""
                own[n] = max(own[n], float(np.max(np.abs(want[n] - r), initial=0.0)))
                file[n] = max(file[n], float(np.max(np.abs(got[n] - r), initial=0.0)))
    except Exception:  # noqa: BLE001 - a module that cannot run in float64 gives no evidence either way
        return ""
    if any(not (own[n] > 0 and file[n] <= _FLOAT64_RATIO * own[n]) for n in bad):
        return ""
    return "; ".join(f"output '{n}' is {file[n]:.3g} from the module evaluated in float64, where the module's own "
                     f"float32 result is {own[n]:.3g} from it (these inputs amplify rounding)" for n in bad)


def _candidate(path: Path, threads: int | None, result: ExportResult, example: Feeds) -> Any:
    """tether's runner for the file, or onnxruntime's when tether lacks a kernel; ExportError
    when neither can run it."""
    try:
        return TetherRunner(path, threads=threads)
    except _core.UnsupportedError as e:
        tether_error = whole(e)
    try:
        runner = OnnxRuntimeRunner(path, threads=threads)
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
        fail(result, f"neither tether nor onnxruntime can run the exported model, so it cannot be verified.\n"
                     f"  tether: {tether_error}\n  onnxruntime: {whole(e)}{_float64_hint(example)}")
    note(result.warnings, f"tether cannot run the exported model ({tether_error}); verified with onnxruntime")
    return runner


def _float64_hint(example: Feeds) -> str:
    wide = [n for n, a in example.items() if a.dtype == np.float64]
    if not wide:
        return ""
    return (f"\n  The module computes in float64 (input {', '.join(repr(n) for n in wide)}), which these engines run "
            "for few ops: export module.float() with float32 examples.")


def _run_pair(reference: TorchRunner, candidate: Any, feeds: list[Feeds], result: ExportResult,
              where: str) -> list[Run] | None:
    """The module's and the file's outputs on each feed; None (with a warning) when the module
    itself does not run on them; ExportError when the file does not."""
    runs: list[Run] = []
    for f in feeds:
        try:
            want = reference.run(f)
        except Exception as e:  # noqa: BLE001 - the module's own limits are not the export's fault
            if not runs and where == "on the example":
                raise
            note(result.warnings, f"the module itself does not run {where} ({type(e).__name__}: {whole(e, 300)}), "
                                  f"so the file was not checked there")
            return None
        try:
            got = candidate.run(f)
        except Exception as e:  # noqa: BLE001 - any engine failure on the file is the export's
            fail(result, f"the exported model does not run {where} in {candidate.name}: {whole(e)}")
        runs.append((f, want, got))
    return runs


class _Replay:
    """A runner that answers with outputs computed before, looked up by the feeds' contents."""

    def __init__(self, name: str, runs: list[Run], side: int, outputs: Sequence[str]) -> None:
        self.name = name
        self._outputs = list(outputs)
        self._by_feeds = {_digest(f): r[side] for r in runs for f in (r[0],)}

    def input_specs(self) -> list[InputSpec]:
        return []

    def output_names(self) -> list[str]:
        return list(self._outputs)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        got = self._by_feeds[_digest(feeds)]
        return {n: got[n] for n in self._outputs}


def _digest(feeds: Mapping[str, np.ndarray]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(feeds):
        a = np.ascontiguousarray(feeds[name])
        h.update(f"{name}:{a.dtype}:{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _tolerances(runs: list[Run], given: Tolerance | str | None) -> dict[str, Tolerance]:
    """Each output's tolerance: the one given, else its dtype's profile with atol scaled by the
    largest magnitude the module's output reaches (float summation order perturbs an element by
    a fraction of the terms summed, not of the element)."""
    names = list(runs[0][1])
    if given is not None:
        tol = Tolerance.profile(given) if isinstance(given, str) else given
        return dict.fromkeys(names, tol)
    out = {}
    for n in names:
        base = Tolerance.for_dtype(runs[0][1][n].dtype)
        peak = max((_peak(r[1][n]) for r in runs), default=0.0)
        out[n] = Tolerance(atol=base.atol * max(1.0, peak), rtol=base.rtol, rule=base.rule)
    return out


def _peak(a: np.ndarray) -> float:
    if a.dtype.kind != "f" or not a.size:
        return 0.0
    finite = np.abs(a[np.isfinite(a)])
    return float(finite.max()) if finite.size else 0.0


def _report(reference: str, candidate: str, runs: list[Run] | None, given: Tolerance | str | None) -> ParityReport:
    """The parity report of the file against the module over ``runs``, each output under its
    tolerance (see :func:`_tolerances`)."""
    assert runs
    tolerances = _tolerances(runs, given)
    groups: dict[Tolerance, list[str]] = {}
    for n, t in tolerances.items():
        groups.setdefault(t, []).append(n)
    feeds = [r[0] for r in runs]
    reports = [compare(_Replay(reference, runs, 1, outs), _Replay(candidate, runs, 2, outs), feeds, tolerance=t)
               for t, outs in groups.items()]
    merged = reports[0]
    by_name = {o.name: o for rep in reports for o in rep.outputs}
    merged.outputs = [by_name[n] for n in tolerances]
    errors = getattr(merged, "_errors", None)
    if isinstance(errors, dict):
        for rep in reports[1:]:
            errors.update(getattr(rep, "_errors", {}))
    merged.notes = [n for n in merged.notes if not n.startswith("inputs generated")]
    for n, t in tolerances.items():
        if t != merged.tolerance:
            merged.notes.append(f"output '{n}' compared with atol={t.atol:g} rtol={t.rtol:g}")
    if given is None:
        merged.notes.append("without a tolerance, each output's atol is its dtype's, scaled by the largest magnitude "
                            "the output reaches (when above 1)")
    return merged


def _save_golden(staged: Path, result: ExportResult, run: Run, names: list[str],
                 tolerance: Tolerance | str | None) -> None:
    feeds, outputs, _ = run
    assert result.report is not None
    save_golden(golden_path(staged), [(feeds, outputs)], {
        "model_sha256": model_sha256(staged), "producer": f"torch {_torch_version()}",
        "exporter": result.exporter, "tolerance": tolerance if isinstance(tolerance, str) else "fp32",
        "output_tolerances": {o.name: o.metrics.tolerance.to_dict() for o in result.report.outputs},
        "inputs": names, "outputs": list(outputs),
        "dynamic_dims": {k: {str(a): d for a, d in v.items()} for k, v in result.dynamic_dims.items()},
    }, overwrite=True)
    result.golden_path = golden_path(result.path)


def _draw(rng: np.random.Generator, a: np.ndarray, shape: Sequence[int], kind: int, name: str) -> np.ndarray:
    """Values for input ``name`` shaped ``shape``, drawn from the example ``a``: like it
    (kind 0), mirrored about zero (kind 1), or uniform over its symmetric range (kind 2)."""
    if a.dtype.kind == "f":
        mean, std = (float(np.mean(a)), float(np.std(a))) if a.size else (0.0, 1.0)
        std = std or 1.0
        if kind % 3 == 2:
            top = float(np.max(np.abs(a))) if a.size else 1.0
            return rng.uniform(-(top or 1.0), top or 1.0, size=shape).astype(a.dtype)
        centre = -mean if kind % 3 == 1 else mean
        return (rng.standard_normal(shape) * std + centre).astype(a.dtype)
    if a.dtype.kind in "iu":
        lo, hi = (int(a.min()), int(a.max()) + 1) if a.size else (0, 2)
        return rng.integers(lo, hi, size=shape).astype(a.dtype)
    if a.dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    raise _core.ArgumentError(f"input '{name}' is {a.dtype}; tether.export.torch takes numeric tensors")


def _generated(example: Feeds, count: int, seed: int) -> list[Feeds]:
    rng = np.random.default_rng(seed + 1)
    return [{n: _draw(rng, a, a.shape, k, n) for n, a in example.items()} for k in range(count)]


def _second_size(example: Feeds, dims: dict[str, dict[int, str]], sizes: Mapping[str, int], seed: int) -> Feeds:
    """Inputs where every dynamic dim takes its size from ``sizes`` (shared names move
    together), with values drawn like the example's."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for n, a in example.items():
        shape = [sizes[dims[n][k]] if k in dims.get(n, {}) else s for k, s in enumerate(a.shape)]
        feeds[n] = _draw(rng, a, shape, 0, n)
    return feeds


def _fixed_dims(path: Path, dims: dict[str, dict[int, str]]) -> list[str]:
    """Requested dynamic dims that the exported graph declares with a fixed size."""
    inputs = {i.name: i for i in load(path).inputs}
    fixed = []
    for n, axes in dims.items():
        shape = inputs[n].shape if n in inputs else None
        for axis, dim in axes.items():
            if shape is not None and axis < len(shape) and isinstance(shape[axis], int):
                fixed.append(f"dim {axis} ('{dim}') of input '{n}' is fixed to {shape[axis]}")
    return fixed


def _sizes(sizes: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def _torch_version() -> str:
    import torch

    return str(torch.__version__).split("+")[0]


__all__ = ["Options", "verify"]
