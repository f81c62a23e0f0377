"""compare(): run a reference and a candidate on the same inputs and report how they differ."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from tether._model import Model
from tether._native import core as _core
from tether.parity._inputs import Feeds, check_feeds, generate_inputs, index_ranges, iter_feeds
from tether.parity._metrics import Metrics, Tolerance, compare_arrays
from tether.parity._provenance import NodeOrigin, node_origins
from tether.parity._report import BisectResult, LayerResult, OutputResult, ParityReport, _badness
from tether.parity._runners import OnnxRuntimeRunner, TetherRunner, TorchRunner, as_runner
from tether.parity._state import ParityState
from tether.parity._types import InputSpec, Runner

# Elements of |c - r| kept per output for the report's histogram.
_HISTOGRAM_SAMPLE = 200_000
_LAYOUTS = {"NHWC->NCHW": (0, 3, 1, 2), "NCHW->NHWC": (0, 2, 3, 1), "NWC->NCW": (0, 2, 1), "NCW->NWC": (0, 2, 1)}


def _permutation(spec: str | Sequence[int]) -> tuple[int, ...]:
    if isinstance(spec, str):
        if spec not in _LAYOUTS:
            raise _core.ArgumentError(f"unknown layout change {spec!r}; use one of {sorted(_LAYOUTS)} or a permutation")
        return _LAYOUTS[spec]
    perm = tuple(int(p) for p in spec)
    if sorted(perm) != list(range(len(perm))):
        raise _core.ArgumentError(f"{list(perm)} is not a permutation")
    return perm


def _name_torch(runner: Runner, other: Runner) -> str:
    """A torch module compared with an ONNX model or a golden bundle takes the other side's
    names in order, as torch.onnx.export gives them, unless names were declared. Returns the
    note saying so when outputs were named that way, else ``""``."""
    if not isinstance(runner, TorchRunner):
        return ""
    specs = other.input_specs()
    if runner.input_names is None and specs:
        runner.input_names = [s.name for s in specs]
        if not runner.input_specs():
            runner._specs = list(specs)
    names = getattr(other, "output_names", None)
    if runner.names is not None or not callable(names):
        return ""
    runner.names = list(names())
    runner.names_from = other.name
    return (f"the outputs of '{runner.name}' are paired in order with those of '{other.name}' "
            f"({', '.join(runner.names)}): a module's outputs carry no names (declare them with "
            "TorchRunner(module, output_names=[...]) to pair them otherwise)")


def _specs(reference: Runner, candidate: Runner) -> list[InputSpec]:
    return reference.input_specs() or candidate.input_specs()


def _declared_specs(reference: Runner, candidate: Runner) -> list[tuple[Runner, list[InputSpec]]]:
    """The runners that read their inputs from a model (so their specs are the model's, not
    one sample's), tether's first: feeds are checked against them before anything runs."""
    found = [r for r in (reference, candidate) if isinstance(r, TetherRunner | OnnxRuntimeRunner)]
    found.sort(key=lambda r: not isinstance(r, TetherRunner))
    return [(r, r.input_specs()) for r in found]


def _stored_samples(reference: Runner, candidate: Runner) -> tuple[Runner, list[Feeds]] | None:
    """A golden runner's stored inputs: the only inputs it can answer."""
    from tether.parity._golden import GoldenRunner

    for r in (reference, candidate):
        if isinstance(r, GoldenRunner):
            return r, r.samples()
    return None


def _model_file(runner: Runner) -> dict[str, str] | None:
    """The file a runner runs and its SHA-256; a golden bundle's folder and the hash it records."""
    from tether.parity._golden import GoldenRunner, model_sha256

    if isinstance(runner, GoldenRunner):
        if not runner.path:
            return None
        return {"kind": "golden bundle", "path": runner.path,
                "sha256": str(runner.bundle.metadata.get("model_sha256", ""))}
    model = getattr(runner, "model", None)
    path = model.path if isinstance(model, Model) else getattr(getattr(runner, "session", None), "source_path", "")
    if path and os.path.isfile(path):
        return {"kind": "model", "path": path, "sha256": model_sha256(path)}
    return None


def _hash_notes(reference: Runner, candidate: Runner, failed: bool) -> list[str]:
    """A note when a golden bundle records the SHA-256 of another model file than the one the
    other side runs; when the other side is a Session (no file to hash) and the comparison
    failed, a note that the file could not be checked."""
    from tether.parity._golden import GoldenRunner, model_sha256

    notes = []
    for golden, other in ((reference, candidate), (candidate, reference)):
        if not isinstance(golden, GoldenRunner):
            continue
        recorded = golden.bundle.metadata.get("model_sha256")
        model = getattr(other, "model", None)
        path = model.path if isinstance(model, Model) else getattr(getattr(other, "session", None), "source_path", "")
        bundle = golden.path or golden.name
        if recorded and failed and isinstance(other, TetherRunner) and other.model is None and not path:
            # A Session of a model built in memory or read from bytes: no file to hash.
            notes.append(f"golden bundle '{bundle}' was recorded for a model with SHA-256 {recorded[:16]}…; "
                         f"'{other.name}' is a Session of a model with no file (built in memory or read from "
                         "bytes), so no file was checked against it: compare with TetherRunner(path) to check it")
        if not recorded or not path or not os.path.isfile(path):
            continue
        actual = model_sha256(path)
        if actual != recorded:
            notes.append(f"golden bundle '{bundle}' was recorded for a model with SHA-256 {recorded[:16]}…, "
                         f"but {os.path.basename(path)} has SHA-256 {actual[:16]}…: a different model file (its "
                         "outputs may differ by design, e.g. after quantization)")
    return notes


def _map_outputs(ref_out: dict[str, np.ndarray], cand_out: dict[str, np.ndarray], output_map: Mapping[str, str],
                 layouts: Mapping[str, tuple[int, ...]], reference: Runner, candidate: Runner
                 ) -> list[tuple[str, str, np.ndarray, np.ndarray]]:
    pairs = []
    unknown = [k for k in output_map if k not in ref_out]
    if unknown:
        raise _core.ArgumentError(f"output_map names {unknown[0]!r}, which is not an output of {reference.name}; its "
                                  f"outputs are {sorted(ref_out)}")
    for name, r in ref_out.items():
        cname = output_map.get(name, name)
        if cname not in cand_out and name in output_map:
            raise _core.ArgumentError(
                f"output_map maps '{name}' to '{cname}', which is not an output of {candidate.name}; its outputs are "
                f"{sorted(cand_out)}")
        if cname not in cand_out:
            raise _core.ArgumentError(
                f"output '{name}' of {reference.name} has no counterpart in {candidate.name}, whose outputs are "
                f"{sorted(cand_out)}; declare output_map={{'{name}': '<candidate name>'}}")
        c = cand_out[cname]
        if name in layouts:
            c = np.transpose(c, layouts[name])
        pairs.append((name, cname, r, c))
    return pairs


def compare(reference: Any, candidate: Any, inputs: Any = None, *, tolerance: Tolerance | str | None = None,
            output_map: Mapping[str, str] | None = None, layouts: Mapping[str, str | Sequence[int]] | None = None,
            layerwise: bool = False, model: Model | None = None, labels: Sequence[Any] | np.ndarray | None = None,
            label_output: str | None = None, seed: int = 0, batches: int = 1,
            ranges: Mapping[str, tuple[float, float]] | None = None,
            dims: Mapping[str, int] | None = None) -> ParityReport:
    """Runs ``reference`` and ``candidate`` on the same inputs and compares every output.

    Runners are anything :func:`as_runner` takes (a Runner, a tether Session, a torch module,
    a golden bundle, a callable). ``inputs`` is the user's data (an array, a dict, a ``.npz``
    path, or an iterable of batches), checked against the model's inputs before anything runs
    (:func:`check_feeds`); without it, a golden runner's stored samples are used, else
    ``batches`` feeds are generated from the input specs with ``seed``, ``ranges`` per input and
    ``dims`` for the model's symbolic dims (a name the model lacks is an error).

    ``tolerance``: a :class:`Tolerance` or a profile name (``"fp32"``, ``"fp16"``, ``"int8"``);
    by default each output takes the profile of its dtype (:meth:`Tolerance.for_dtype`).
    ``output_map`` maps a reference output name to the candidate's name for it, and
    ``layouts`` gives, per reference output, the transpose that brings the candidate's array
    to the reference's layout (``"NHWC->NCHW"`` or a permutation): names and layouts are
    declared, never guessed. ``layerwise=True`` also compares every intermediate value
    (both runners must offer ``intermediates``; ``model`` gives the graph when neither runner
    holds it) on one batch: with several, the batch holding the worst element of the first
    failing output (``layer_batch`` says which; batch 0 when every output passes). When a
    fused kernel of the candidate writes the first divergent value, each node of the kernel is
    bisected and ``first_divergent_bisect`` names the one that creates the error. With a torch
    module on one side, layer-wise comparison goes module by module against its dynamo export;
    a module's outputs take the other side's output names in order (a note says so).
    ``labels`` (one per sample, in input order) breaks a classifier output (``label_output``,
    default the first) down by label.

    Example:
        >>> rep = compare(OnnxRuntimeRunner("m.onnx"), TetherRunner("m.onnx"), layerwise=True)  # doctest: +SKIP
        >>> rep.ok, rep.first_divergent                         # doctest: +SKIP
        (True, None)
    """
    ref, cand = as_runner(reference), as_runner(candidate)
    cand_label = f"{cand.name} (candidate)" if cand.name == ref.name else cand.name
    pairing_notes = [n for n in (_name_torch(ref, cand), _name_torch(cand, ref)) if n]
    given = Tolerance.profile(tolerance) if isinstance(tolerance, str) else tolerance
    output_map = dict(output_map or {})
    perms = {k: _permutation(v) for k, v in (layouts or {}).items()}
    specs = _specs(ref, cand)
    declared = _declared_specs(ref, cand)
    stored = _stored_samples(ref, cand) if inputs is None else None
    if stored is not None:
        n = len(stored[1])
        where = getattr(stored[0], "path", "") or stored[0].name
        inputs_note = f"inputs: the {n} sample{'s' if n != 1 else ''} stored in golden bundle '{where}'"
        stream: Iterator[Feeds] = iter(stored[1])
    elif inputs is not None:
        inputs_note = ""
        stream = iter_feeds(inputs, specs)
    else:
        inputs_note = f"inputs generated from the input specs with seed {seed}"
        graph = next((m for m in (model, getattr(ref, "model", None), getattr(cand, "model", None))
                      if isinstance(m, Model)), None)
        indexed = {k: v for k, v in (index_ranges(graph) if graph is not None else {}).items()
                   if k not in (ranges or {})}
        inputs_note += "".join(f"; integer input '{k}' in [{lo}, {hi}): {why}" for k, (lo, hi, why) in indexed.items())
        stream = iter(generate_inputs(specs, seed=seed, batches=batches, ranges=ranges, dims=dims, model=graph))
    where = os.fspath(inputs) if isinstance(inputs, str | os.PathLike) else ""

    per_output: dict[str, list[Metrics]] = {}
    state = ParityState(given, label_output=label_output)
    errors: dict[str, list[np.ndarray]] = {}
    first_feeds: Feeds | None = None
    worst = _WorstFeeds()
    top1: list[tuple[np.ndarray, np.ndarray]] = []
    count = 0
    for feeds in stream:
        count += 1
        for _, declared_specs in declared[:1]:
            check_feeds(feeds, declared_specs, where or (f"batch {count - 1}" if count > 1 else ""))
        if first_feeds is None:
            first_feeds = feeds
        pairs = _map_outputs(ref.run(feeds), cand.run(feeds), output_map, perms, ref, cand)
        state.add_pairs(pairs)
        for name, _, r, c in pairs:
            per_output.setdefault(name, []).append(compare_arrays(r, c, given or Tolerance.for_dtype(r.dtype)))
            _keep_errors(errors.setdefault(name, []), r, c)
        if layerwise:
            worst.offer(count - 1, feeds, {name: m[-1] for name, m in per_output.items()})
        if labels is not None:
            target = label_output or pairs[0][0]
            match = [p for p in pairs if p[0] == target]
            if not match:
                raise _core.ArgumentError(f"label_output '{target}' is not an output; outputs: {[p[0] for p in pairs]}")
            top1.append((np.argmax(match[0][2], axis=-1).ravel(), np.argmax(match[0][3], axis=-1).ravel()))
    if count == 0:
        raise _core.ArgumentError("no inputs: the iterable of batches was empty")
    if labels is not None:
        state.add_top1(np.concatenate([t[0] for t in top1]), np.concatenate([t[1] for t in top1]), labels)
    assert first_feeds is not None
    report = report_from_state(state, ref.name, cand_label, given,
                               {k: tuple(np.shape(v)) for k, v in first_feeds.items()})
    for o in report.outputs:
        o.batches = per_output[o.name]
        if len(o.batches) == 1:  # one batch: its own metrics (its problem, if any, without rows)
            o.metrics = o.batches[0]
    report._errors = {k: np.concatenate(v) if v else np.zeros(0) for k, v in errors.items()}
    if inputs_note:
        report.notes.append(inputs_note)
    report.notes.extend(pairing_notes)
    report.notes.extend(_hash_notes(ref, cand, not report.ok))
    report.models = {role: f for role, r in (("reference", ref), ("candidate", cand)) if (f := _model_file(r))}
    report.devices = {role: str(r.device) for role, r in (("reference", ref), ("candidate", cand))
                      if isinstance(r, TetherRunner)}
    report.graph = next((m for m in (model, getattr(ref, "model", None), getattr(cand, "model", None))
                         if isinstance(m, Model)), None)
    if layerwise:
        layer_feeds = first_feeds
        if count > 1:
            report.layer_batch, layer_feeds, why = worst.pick(report, first_feeds)
            report.notes.append(f"layer-wise comparison ran on batch {report.layer_batch} of {count}{why}")
        if isinstance(ref, TorchRunner) or isinstance(cand, TorchRunner):
            report.layers, torch_notes = _torch_side(ref, cand, _graph_model(ref, cand, model), layer_feeds, given)
            report.notes.extend(torch_notes)
            report.notes.append("layer-wise against torch: each submodule's output (forward hooks) compared with "
                                "the value its nodes hand on, matched through the exporter's module scopes")
        else:
            report.layers = layerwise_compare(ref, cand, layer_feeds, tolerance=given, model=model)
        report.first_divergent_bisect = _bisect_fused_first(ref, cand, report, layer_feeds, given, model)
    return report


class _WorstFeeds:
    """Per output, a copy of the feeds of its worst batch so far (the batch ``worst_batch``
    names), so that layer-wise comparison runs where an output fails rather than on a batch
    where nothing does. Copies, because an iterable of batches may refill one buffer."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[tuple[bool, bool, float], int, Feeds]] = {}

    def offer(self, index: int, feeds: Feeds, metrics: Mapping[str, Metrics]) -> None:
        copied: Feeds | None = None
        for name, m in metrics.items():
            bad = _badness(m)
            if name in self._kept and bad <= self._kept[name][0]:
                continue
            if copied is None:
                copied = {k: np.array(v, copy=True) for k, v in feeds.items()}
            self._kept[name] = (bad, index, copied)

    def pick(self, report: ParityReport, first: Feeds) -> tuple[int, Feeds, str]:
        """The batch of the first failing output's worst element (batch 0 when every output
        passes), its feeds, and why it was chosen."""
        failing = next((o.name for o in report.outputs if not o.metrics.ok and o.name in self._kept), None)
        if failing is None:
            return 0, first, " (every output is within tolerance on every batch)"
        _, index, feeds = self._kept[failing]
        return index, feeds, f", the batch holding the worst element of output '{failing}'"


def _keep_errors(kept: list[np.ndarray], r: np.ndarray, c: np.ndarray) -> None:
    """A bounded sample of |c - r| (finite pairs) for the report's histogram."""
    if r.dtype == object or c.dtype == object or r.shape != np.shape(c) or r.size == 0:
        return
    have = sum(k.size for k in kept)
    if have >= _HISTOGRAM_SAMPLE:
        return
    d = np.abs(c.astype(np.float64) - r.astype(np.float64)).ravel()
    d = d[np.isfinite(d)]
    step = max(1, d.size // (_HISTOGRAM_SAMPLE - have))
    kept.append(d[::step][: _HISTOGRAM_SAMPLE - have])


def report_from_state(state: ParityState, reference: str, candidate: str, tolerance: Tolerance | None,
                      input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> ParityReport:
    """The :class:`ParityReport` of a dataset comparison from its merged :class:`ParityState`:
    per output the metrics over every row, per label the agreement table. ``tolerance`` is
    the one the comparison was given (None: each output took its dtype's profile).

    Example:
        >>> rep = report_from_state(state, "float", "int8", None)     # doctest: +SKIP
        >>> rep.outputs[0].metrics.worst_index                         # doctest: +SKIP
        (4031, 7)
    """
    tol = tolerance or Tolerance()
    metrics = state.metrics()
    outputs = [OutputResult(n, metrics[n], [], state.candidate_name(n)) for n in state.names]
    report = ParityReport(reference, candidate, tol, outputs, state.batches, dict(input_shapes or {}))
    if tolerance is None:
        for o in outputs:
            if o.metrics.tolerance != tol and not o.metrics.exact:
                report.notes.append(f"output '{o.name}' is {state.dtype(o.name)}: compared with "
                                    f"atol={o.metrics.tolerance.atol:g} rtol={o.metrics.tolerance.rtol:g}")
    report.slices = state.slices()
    return report


def _graph_model(ref: Runner, cand: Runner, model: Model | None) -> Model:
    for m in (model, getattr(ref, "model", None), getattr(cand, "model", None)):
        if isinstance(m, Model):
            return m
    raise _core.ArgumentError("layer-wise comparison needs the ONNX graph: pass model=tt.load(...) or runners "
                              "built from a model")


def _intermediates(runner: Runner, feeds: Feeds, names: list[str]) -> dict[str, np.ndarray]:
    fn = getattr(runner, "intermediates", None)
    if fn is None:
        raise _core.ArgumentError(f"runner '{runner.name}' cannot read intermediate values; layer-wise comparison "
                                  "needs a TetherRunner or an OnnxRuntimeRunner on each side")
    return dict(fn(feeds, names))


def _defined(runner: Runner, names: list[str]) -> list[str]:
    """``names`` that the runner's own graph computes (all of them when it holds no graph)."""
    model = getattr(runner, "model", None)
    if not isinstance(model, Model):
        return names
    own = {o for n in model.nodes for o in n.outputs if o}
    return [n for n in names if n in own]


def _fused_groups(runner: Runner) -> tuple[dict[str, str], dict[str, list[str]]]:
    """For the runner's fused kernels: node name -> the kernel that computes it without
    writing its output, and the kernel's last node -> every node it computes."""
    steps = getattr(runner, "steps", None)
    inside: dict[str, str] = {}
    groups: dict[str, list[str]] = {}
    for st in steps() if callable(steps) else []:
        if len(st["fused_from"]) > 1:
            groups[st["fused_from"][-1]] = list(st["fused_from"])
        for n in st["fused_from"][:-1]:
            inside[n] = f"{st['name']} ({st['op_type']})"
    return inside, groups


def layerwise_compare(reference: Any, candidate: Any, feeds: Feeds, *, tolerance: Tolerance | None = None,
                      model: Model | None = None) -> list[LayerResult]:
    """Compares every node output of the model's graph between two runners, in topological
    order, on one batch. A value a runner computes inside a fused kernel is listed as
    ``"fused"`` with the kernel's name; the value that kernel writes lists, in ``fused_from``,
    every node the kernel computes, so a divergence found there may come from any of them
    (:func:`bisect` runs each alone, or compare with ``TetherRunner(model, optimize=False)``).

    Example:
        >>> layers = layerwise_compare(OnnxRuntimeRunner(m), TetherRunner(m), {"x": x})   # doctest: +SKIP
        >>> [la.node for la in layers if not la.ok][:1]          # doctest: +SKIP
        ['layer2.conv1']
    """
    ref, cand = as_runner(reference), as_runner(candidate)
    graph = _graph_model(ref, cand, model)
    if isinstance(ref, TorchRunner) or isinstance(cand, TorchRunner):
        return _torch_side(ref, cand, graph, feeds, tolerance)[0]
    names = [o for n in graph.nodes for o in n.outputs if o]
    # Two different files (an original and its edited or quantized copy) share only some values:
    # each runner is asked for those its own graph defines.
    ref_vals = _intermediates(ref, feeds, _defined(ref, names))
    cand_vals = _intermediates(cand, feeds, _defined(cand, names))
    ref_inside, ref_groups = _fused_groups(ref)
    cand_inside, cand_groups = _fused_groups(cand)
    fused, groups = {**ref_inside, **cand_inside}, {**ref_groups, **cand_groups}
    origins = _origins(graph)
    out = []
    for k, node in enumerate(graph.nodes):
        label = node.name or (node.outputs[0] if node.outputs else f"#{k}")
        op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"
        for value in (o for o in node.outputs if o):
            if value in ref_vals and value in cand_vals:
                out.append(LayerResult(k, label, op, value, "compared",
                                       compare_arrays(ref_vals[value], cand_vals[value],
                                                      tolerance or Tolerance.for_dtype(ref_vals[value].dtype)),
                                       fused_from=groups.get(label, [])))
            elif label in fused:
                out.append(LayerResult(k, label, op, value, "fused", fused_into=fused[label]))
            else:
                out.append(LayerResult(k, label, op, value, "missing"))
            out[-1].origin = origins.get(label)
    return out


def _torch_side(ref: Runner, cand: Runner, graph: Model, feeds: Feeds,
                tolerance: Tolerance | None) -> tuple[list[LayerResult], list[str]]:
    """Module by module between a torch module and a runner of its ONNX export."""
    from tether.parity._torch_layers import torch_layerwise

    torch_is_reference = isinstance(ref, TorchRunner)
    module, other = (ref, cand) if torch_is_reference else (cand, ref)
    assert isinstance(module, TorchRunner)
    if isinstance(other, TorchRunner):
        raise _core.ArgumentError("layer-wise comparison of two torch modules is not supported: one side must run "
                                  "the ONNX model (TetherRunner or OnnxRuntimeRunner)")
    if getattr(other, "intermediates", None) is None:
        raise _core.ArgumentError(f"runner '{other.name}' cannot read intermediate values; layer-wise comparison "
                                  "with a torch module needs a TetherRunner or an OnnxRuntimeRunner on the other side")
    inside, _ = _fused_groups(other)
    return torch_layerwise(module, other, graph, feeds, torch_is_reference=torch_is_reference, tolerance=tolerance,
                           intermediates=lambda r, f, names: _intermediates(r, f, _defined(r, names)),
                           fused=inside)


def _origins(graph: Model) -> dict[str, NodeOrigin]:
    try:
        return node_origins(graph)
    except (OSError, ValueError) as e:  # a file the onnx package cannot read: the report goes on without origins
        import warnings

        warnings.warn(f"torch origins of the nodes could not be read: {e}", stacklevel=3)
        return {}


def _bisect_fused_first(ref: Runner, cand: Runner, report: ParityReport, feeds: Feeds,
                        tolerance: Tolerance | None, model: Model | None) -> BisectResult | None:
    """When a fused kernel of the candidate writes the first divergent value, the node that
    creates the error may be any node of the kernel: each is bisected alone to name it."""
    first = report.first_divergent
    if first is None or len(first.fused_from) < 2 or not _kernel_nodes(cand, first.node) \
            or getattr(cand, "for_model", None) is None:
        return None
    try:
        return bisect(ref, cand, first.node, feeds, tolerance=tolerance, model=model)
    except (_core.Error, ValueError) as e:
        report.notes.append(f"the fused kernel writing '{first.value}' could not be bisected node by node: {e}")
        return None


def _first_feeds(inputs: Any, reference: Runner, candidate: Runner) -> Feeds:
    """The first batch of ``inputs``, in any form :func:`compare` takes."""
    specs = _specs(reference, candidate)
    for feeds in iter_feeds(inputs, specs):
        for _, declared_specs in _declared_specs(reference, candidate)[:1]:
            check_feeds(feeds, declared_specs, os.fspath(inputs) if isinstance(inputs, str | os.PathLike) else "")
        return feeds
    raise _core.ArgumentError("no inputs: the iterable of batches was empty")


def _kernel_nodes(runner: Runner, node: str) -> list[str]:
    """Every node of the runner's fused kernel that computes ``node``, in order, or ``[]``
    when the runner computes it alone."""
    steps = getattr(runner, "steps", None)
    for st in steps() if callable(steps) else []:
        if len(st["fused_from"]) > 1 and node in st["fused_from"]:
            return list(st["fused_from"])
    return []


def _single_node_model(proto: Any, node: str, values: Mapping[str, np.ndarray]) -> bytes:
    """A model holding only ``node`` of ``proto``: its weights, its inputs and outputs typed
    from the arrays in ``values`` (the reference's), the opsets and local functions kept."""
    import onnx
    from onnx import helper

    target = next(n for n in proto.graph.node if n.name == node or (not n.name and node in n.output))
    weights = {i.name: i for i in proto.graph.initializer}

    def typed(name: str) -> Any:
        a = values[name]
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))

    graph = helper.make_graph(
        [target], f"{node} alone", [typed(i) for i in dict.fromkeys(target.input) if i and i not in weights],
        [typed(o) for o in target.output if o], [weights[i] for i in dict.fromkeys(target.input) if i in weights])
    model = helper.make_model(graph, opset_imports=list(proto.opset_import), ir_version=proto.ir_version)
    model.functions.extend(proto.functions)
    return bytes(model.SerializeToString()) if isinstance(model, onnx.ModelProto) else b""


def _bisect_node(ref: Runner, cand: Runner, graph: Model, proto: Any, node: str, feeds: Feeds,
                 tolerance: Tolerance | None) -> BisectResult:
    found = [n for n in graph.nodes if n.name == node or (not n.name and node in n.outputs)]
    if not found:
        raise _core.ArgumentError(f"node '{node}' is not in the model")
    target = found[0]
    inits = set(graph.initializer_names)
    inputs = [i for i in dict.fromkeys(target.inputs) if i and i not in inits]
    outputs = [o for o in target.outputs if o]
    value = outputs[0]
    ref_vals = _intermediates(ref, feeds, [i for i in inputs if i not in feeds] + outputs)
    sub_feeds = {i: feeds[i] if i in feeds else ref_vals.get(i) for i in inputs}
    missing = [i for i, v in sub_feeds.items() if v is None] + [o for o in outputs if o not in ref_vals]
    if missing:
        raise _core.ArgumentError(f"the reference did not produce value {missing[0]!r} of node '{node}' (a reference "
                                  "that fuses it away cannot show it: compile it with optimize=False)")
    make = getattr(cand, "for_model", None)
    if make is None:
        raise _core.ArgumentError(f"runner '{cand.name}' cannot run a single node; bisect needs a TetherRunner or an "
                                  "OnnxRuntimeRunner as the candidate")
    typed = {k: np.asarray(v) for k, v in {**sub_feeds, **ref_vals}.items() if v is not None}
    alone = make(_single_node_model(proto, node, typed)).run({k: v for k, v in sub_feeds.items() if v is not None})
    whole = _intermediates(cand, feeds, outputs)
    tol = tolerance or Tolerance.for_dtype(ref_vals[value].dtype)
    local = compare_arrays(ref_vals[value], alone[value], tol)
    total = compare_arrays(ref_vals[value], whole[value], tol) if value in whole else None
    return BisectResult(target.name or value, value, local, total, op_type=target.op_type)


def bisect(reference: Any, candidate: Any, node: str, inputs: Any, *, tolerance: Tolerance | None = None,
           model: Model | None = None) -> BisectResult:
    """Separates the error ``node`` creates from the error it inherits: the candidate's kind of
    runner runs the node alone on the reference's values of its inputs, and that output is
    compared with the reference's; the whole-run comparison of the same value is beside it.

    ``inputs`` takes every form :func:`compare` takes (an array, a dict, a tuple, a ``.npz``
    path, an iterable of batches: the first batch is used). When the candidate computes
    ``node`` inside a fused kernel (Conv + BatchNormalization + Relu, MatMul + Add + Gelu),
    every node of that kernel is run alone in turn: ``parts`` holds each result,
    ``fused_from`` the kernel's nodes, and ``origin`` the first node that leaves tolerance
    on its own, the one that creates the error. The candidate must offer ``for_model``
    (TetherRunner and OnnxRuntimeRunner do).

    Example:
        >>> print(bisect(ort, tether, "layer2.conv1", x))          # doctest: +SKIP
        node 'layer2.conv1' creates the error: alone max abs 0.31, in the whole run max abs 0.33
        >>> bisect(ort, tether, "node_gelu", x).origin             # doctest: +SKIP
        'node_MatMul_1'
    """
    ref, cand = as_runner(reference), as_runner(candidate)
    _name_torch(ref, cand)
    feeds = _first_feeds(inputs, ref, cand)
    # The node runs alone as the candidate holds it (its weights, its attributes).
    graph = _graph_model(cand, ref, model)
    import onnx

    proto = onnx.load_from_string(graph.to_bytes())
    kernel = _kernel_nodes(cand, node)
    if not kernel:
        return _bisect_node(ref, cand, graph, proto, node, feeds, tolerance)
    parts = [_bisect_node(ref, cand, graph, proto, n, feeds, tolerance) for n in kernel]
    asked = next((p for p in parts if p.node == node), parts[-1])
    written = parts[-1]
    return BisectResult(asked.node, asked.value, asked.local, written.total, op_type=asked.op_type,
                        fused_from=list(kernel), parts=parts, written_value=written.value)
