"""reduce(): cut a model that fails a comparison down to the smallest subgraph that still fails."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tether._model import Model, load
from tether._native import core as _core
from tether.parity._golden import GoldenBundle, GoldenRunner, _is_bundle, model_sha256, save_golden
from tether.parity._inputs import Feeds, check_feeds, generate_inputs, iter_feeds
from tether.parity._metrics import Metrics, Tolerance, compare_arrays
from tether.parity._report import _num
from tether.parity._runners import OnnxRuntimeRunner, TetherRunner

_Nodes = frozenset[int]


@dataclass
class ReduceResult:
    """What :func:`reduce` found and wrote.

    ``failed`` is False when the whole model passes the comparison: then nothing is reduced or
    written and ``value``, ``metrics`` and the paths are None. Otherwise ``value`` is the value
    the reduced model outputs and fails on, ``metrics`` the candidate's error on it in the
    reduced model (against the reference's value), ``output`` and ``output_metrics`` the graph
    output that failed in the whole model, ``nodes`` the reduced model's nodes as
    (name, op type), ``inputs`` its inputs as ``"dtype[shape]"``, ``runs`` the subgraphs run.

    Example:
        >>> res = reduce("model.onnx", against="float.onnx", tolerance="int8")   # doctest: +SKIP
        >>> res.nodes_before, res.nodes_after, res.value                         # doctest: +SKIP
        (57, 1, 'block3.mm_out')
    """

    failed: bool
    model: str
    reference: str
    candidate: str
    nodes_before: int
    nodes_after: int
    tolerance: Tolerance | None
    value: str | None = None
    metrics: Metrics | None = None
    output: str | None = None
    output_metrics: Metrics | None = None
    nodes: list[tuple[str, str]] = field(default_factory=list)
    inputs: dict[str, str] = field(default_factory=dict)
    model_path: str | None = None
    golden_path: str | None = None
    runs: int = 0
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        vs = f"{self.candidate} against {self.reference}"
        if not self.failed:
            lines = [f"{self.model} does not fail: every output within tolerance ({vs}); nothing to reduce"]
            return "\n".join(lines + [f"  note: {n}" for n in self.notes])
        m = self.metrics
        if m is None:
            return "\n".join([f"{self.model} fails ({vs}) but was not reduced"] + [f"  note: {n}" for n in self.notes])
        tol = m.tolerance
        lines = [f"reduced {self.model} from {self.nodes_before} nodes to {self.nodes_after} "
                 f"({self.runs} subgraph{'s' if self.runs != 1 else ''} run; {vs})",
                 f"  fails at value '{self.value}': {_error_text(m)} (atol {tol.atol:g}, rtol {tol.rtol:g})"]
        if self.output_metrics is not None and self.output != self.value:
            lines.append(f"  in the whole model, output '{self.output}': {_error_text(self.output_metrics)}")
        lines.append("  nodes: " + ", ".join(f"{n} ({op})" for n, op in self.nodes))
        lines.append("  inputs (the reference's values): " + ", ".join(f"{k} {v}" for k, v in self.inputs.items()))
        lines.append(f"  written: {self.model_path} and golden bundle {self.golden_path}")
        return "\n".join(lines + [f"  note: {n}" for n in self.notes])


def _error_text(m: Metrics) -> str:
    if m.problem:
        return m.problem
    if m.exact:
        return f"{m.mismatches} of {m.elements} elements differ"
    return f"max abs {_num(m.max_abs_error)}, SNR {_num(m.snr_db)} dB"


# ---------------------------------------------------------------- the graph being cut


def _outer_reads(graph: Any) -> list[str]:
    """Names a subgraph (an If or Loop body) reads from the graphs around it."""
    local = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    out = []
    for n in graph.node:
        out += [v for v in _reads(n) if v not in local]
        local.update(n.output)
    return out


def _reads(node: Any) -> list[str]:
    """Every value a node reads: its inputs and what its subgraphs take from the outer scope."""
    from onnx import AttributeProto

    names = [i for i in node.input if i]
    for a in node.attribute:
        graphs = [a.g] if a.type == AttributeProto.GRAPH else list(a.graphs) if a.type == AttributeProto.GRAPHS else []
        for g in graphs:
            names += _outer_reads(g)
    return list(dict.fromkeys(names))


def _constant_value(node: Any) -> np.ndarray | None:
    from onnx import numpy_helper

    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.attribute) != 1:
        return None
    a = node.attribute[0]
    kinds = {"value": lambda: numpy_helper.to_array(a.t), "value_float": lambda: np.float32(a.f),
             "value_floats": lambda: np.asarray(a.floats, np.float32), "value_int": lambda: np.int64(a.i),
             "value_ints": lambda: np.asarray(a.ints, np.int64)}
    return np.asarray(kinds[a.name]()) if a.name in kinds else None


class _Graph:
    """The candidate's graph, with Constant nodes held as initializers: a cut never turns a
    constant into a graph input that the engine could no longer fold."""

    def __init__(self, model: Model) -> None:
        import onnx
        from onnx import numpy_helper

        self.proto = onnx.load_from_string(model.to_bytes())
        g = self.proto.graph
        kept = []
        for n in g.node:
            value = _constant_value(n)
            if value is None:
                kept.append(n)
            else:
                g.initializer.append(numpy_helper.from_array(value, n.output[0]))
        self.nodes = kept
        self.weights = {i.name: i for i in g.initializer}
        self.reads = [[v for v in _reads(n) if v not in self.weights] for n in kept]
        self.producer = {o: k for k, n in enumerate(kept) for o in n.output if o}
        self.value_info = {v.name: v for v in g.value_info}

    def name(self, k: int) -> str:
        n = self.nodes[k]
        return n.name or n.output[0]

    def cone(self, target: str, allowed: _Nodes) -> _Nodes:
        """The nodes of ``allowed`` that ``target`` depends on; values made outside enter as inputs."""
        keep: set[int] = set()
        stack = [target]
        while stack:
            k = self.producer.get(stack.pop())
            if k is None or k not in allowed or k in keep:
                continue
            keep.add(k)
            stack.extend(self.reads[k])
        return frozenset(keep)

    def entering(self, nodes: _Nodes) -> list[str]:
        """The values ``nodes`` read that none of them produces, in graph order."""
        made = {o for k in nodes for o in self.nodes[k].output}
        return list(dict.fromkeys(v for k in sorted(nodes) for v in self.reads[k] if v not in made))

    def subgraph(self, nodes: _Nodes, target: str, values: Mapping[str, np.ndarray], *,
                 metadata: Mapping[str, str] | None = None) -> bytes:
        """A model of ``nodes`` alone whose inputs are the values entering them and whose one
        output is ``target``, each typed from ``values`` (the reference's arrays)."""
        from onnx import helper

        def typed(name: str) -> Any:
            a = values[name]
            return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))

        chosen = [self.nodes[k] for k in sorted(nodes)]
        used = dict.fromkeys(v for n in chosen for v in _reads(n) if v in self.weights)
        made = {o for n in chosen for o in n.output if o}
        g = helper.make_graph(chosen, f"{self.proto.graph.name or 'graph'} reduced to {target}",
                              [typed(v) for v in self.entering(nodes)], [typed(target)],
                              [self.weights[v] for v in used],
                              value_info=[self.value_info[v] for v in made if v in self.value_info and v != target])
        m = helper.make_model(g, opset_imports=list(self.proto.opset_import), ir_version=self.proto.ir_version)
        m.functions.extend(self.proto.functions)
        for k, v in (metadata or {}).items():
            m.metadata_props.add(key=k, value=v)
        return bytes(m.SerializeToString())


# ---------------------------------------------------------------- the search


class _Search:
    """Runs subgraphs of the candidate on the reference's values and remembers each verdict."""

    def __init__(self, graph: _Graph, make: Any, values: dict[str, np.ndarray], tolerance: Tolerance | None,
                 max_runs: int) -> None:
        self.graph, self.make, self.values, self.tolerance = graph, make, values, tolerance
        self.max_runs, self.runs = max_runs, 0
        self.seen: dict[tuple[_Nodes, str], Metrics | None] = {}

    def metrics(self, nodes: _Nodes, target: str) -> Metrics | None:
        """The candidate's error on ``target`` computed by ``nodes`` alone, or None when the cut
        is not possible (a value entering it that the reference does not show) or refused."""
        key = (nodes, target)
        if key in self.seen:
            return self.seen[key]
        entering = self.graph.entering(nodes)
        result = None
        if nodes and target in self.values and all(v in self.values for v in entering) \
                and self.runs < self.max_runs:
            self.runs += 1
            try:
                runner = self.make(self.graph.subgraph(nodes, target, self.values))
                got = runner.run({v: self.values[v] for v in entering})[target]
                ref = self.values[target]
                result = compare_arrays(ref, got, self.tolerance or Tolerance.for_dtype(ref.dtype))
            except (ValueError, KeyError, RuntimeError):  # tether.Error; onnx's and onnxruntime's refusals
                result = None
        self.seen[key] = result
        return result

    def fails(self, nodes: _Nodes, target: str) -> bool:
        m = self.metrics(nodes, target)
        return m is not None and not m.ok

    def bisect(self, target: str) -> _Nodes:
        """The shortest tail of the target's nodes, in graph order, that still fails: the values
        entering the tail come from the reference."""
        order = sorted(self.graph.cone(target, frozenset(range(len(self.graph.nodes)))))
        lo, hi = 0, len(order) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.fails(self.graph.cone(target, frozenset(order[mid:])), target):
                lo = mid
            else:
                hi = mid - 1
        return self.graph.cone(target, frozenset(order[lo:]))

    def shrink(self, nodes: _Nodes, target: str) -> tuple[_Nodes, str]:
        """Drops nodes one at a time while the rest still fails, until each one left is needed:
        the target's own node by moving the target to an earlier value of the subgraph (the
        first, in graph order, whose own nodes still fail), any other by feeding its outputs
        from the reference."""
        changed = True
        while changed and self.runs < self.max_runs:
            changed = False
            last = self.graph.producer[target]
            earlier = [o for k in sorted(nodes - {last}) for o in self.graph.nodes[k].output if o in self.values]
            for v in earlier:
                if self.fails(self.graph.cone(v, nodes), v):
                    nodes, target, changed = self.graph.cone(v, nodes), v, True
                    break
            if changed:
                continue
            for k in sorted(nodes):
                if k not in nodes or k == last:
                    continue
                smaller = self.graph.cone(target, nodes - {k})
                if self.fails(smaller, target):
                    nodes, changed = smaller, True
        return nodes, target


# ---------------------------------------------------------------- reference, inputs, paths


def _reference(against: Any, model: Model, threads: int | None) -> tuple[str, OnnxRuntimeRunner | None,
                                                                          GoldenRunner | None]:
    if isinstance(against, GoldenBundle):
        return "golden bundle", None, GoldenRunner(against)
    if not isinstance(against, str | os.PathLike):
        raise _core.ArgumentError(f"against: expected 'onnxruntime', a model file or a golden bundle, got "
                                  f"{type(against).__name__}")
    text = os.fspath(against)
    if text == "onnxruntime":
        return "onnxruntime", OnnxRuntimeRunner(model, threads=threads), None
    if os.path.isdir(text):
        return f"golden bundle {text}", None, GoldenRunner(text)
    if os.path.isfile(text):
        name = f"onnxruntime: {os.path.basename(text)}"
        return name, OnnxRuntimeRunner(text, name, threads=threads), None
    if os.path.exists(text):
        raise _core.ArgumentError(f"against '{text}': neither a file nor a folder")
    if os.sep in text or "." in text or (os.altsep and os.altsep in text):
        raise _core.ArgumentError(f"against '{text}': no such file or directory")
    raise _core.ArgumentError(f"against '{text}': not 'onnxruntime', a model file or a golden bundle folder")


def _feeds(inputs: Any, specs: Any, golden: GoldenRunner | None, seed: int,
           dims: Mapping[str, int] | None, notes: list[str]) -> Feeds:
    where = os.fspath(inputs) if isinstance(inputs, str | os.PathLike) else ""
    if inputs is None and golden is not None:
        stored = golden.samples()
        if len(stored) > 1:
            notes.append(f"reduced on the first of the {len(stored)} samples stored in the golden bundle")
        feeds = stored[0]
    elif inputs is None:
        feeds = generate_inputs(specs, seed=seed, dims=dims)[0]
        notes.append(f"inputs generated from the input specs with seed {seed}")
    else:
        first: Feeds | None = next(iter(iter_feeds(inputs, specs)), None)
        if first is None:
            raise _core.ArgumentError("no inputs: the iterable of batches was empty")
        feeds = first
    check_feeds(feeds, specs, where)
    return feeds


def _same_file(a: Path, b: str) -> bool:
    return bool(b) and a.exists() and os.path.exists(b) and os.path.samefile(a, b)


def _paths(model: Model, output: Any, golden: Any, against: Any) -> tuple[Path, Path]:
    """Where the reduced model and its bundle go, refused before any work when they cannot be written."""
    if output is None:
        if not model.path:
            raise _core.ArgumentError("output: name the file for the reduced model (the model has no file to name "
                                      "it after)")
        source = Path(model.path)
        output = source.with_name(source.stem + ".reduced.onnx")
    out = Path(output)
    bundle = Path(golden) if golden is not None else out.with_name(out.stem + ".golden")
    against_path = os.fspath(against) if isinstance(against, str | os.PathLike) else ""
    for path, what in ((out, "output"), (bundle, "golden")):
        if _same_file(path, model.path) or _same_file(path, against_path):
            raise _core.ArgumentError(f"{what} '{path}' is an input of the reduction; refusing to replace it")
        folder = path.absolute().parent
        if not folder.is_dir():
            raise _core.ArgumentError(f"{what} '{path}': folder '{folder}' does not exist")
        if not os.access(folder, os.W_OK | os.X_OK) or os.statvfs(folder).f_flag & os.ST_RDONLY:
            raise _core.ArgumentError(f"{what} '{path}': folder '{folder}' is not writable")
    if out.is_dir():
        raise _core.ArgumentError(f"output '{out}' is a folder; name a file to write")
    if bundle.exists() and (not bundle.is_dir() or (any(bundle.iterdir()) and not _is_bundle(bundle))):
        raise _core.ArgumentError(f"golden '{bundle}' exists and is not a golden bundle; refusing to replace it")
    return out, bundle


def _reference_values(ref: OnnxRuntimeRunner | None, golden: GoldenRunner | None, model: Model, feeds: Feeds,
                      tolerance: Tolerance | None, threads: int | None, notes: list[str]) -> dict[str, np.ndarray]:
    """Every value the reference can show for these inputs, by name: the inputs, its outputs
    and each value inside its graph."""
    values = dict(feeds)
    if ref is not None:
        assert ref.model is not None
        inside = [o for n in ref.model.nodes for o in n.outputs if o]
        values.update(ref.intermediates(feeds, inside) if inside else ref.run(feeds))
        return values
    assert golden is not None
    stored = golden.run(feeds)
    values.update(stored)
    # A bundle holds outputs only. When onnxruntime, running this very file, agrees with them, the
    # file is faithful and its values inside the graph are the reference's too.
    ort = OnnxRuntimeRunner(model, threads=threads)
    got = ort.run(feeds)
    agree = [compare_arrays(a, got[n], tolerance or Tolerance.for_dtype(a.dtype)).ok for n, a in stored.items()
             if n in got]
    inside = [o for n in model.nodes for o in n.outputs if o and o not in got]
    if agree and all(agree):
        values.update({k: v for k, v in ort.intermediates(feeds, inside).items() if k not in stored})
        notes.append("values inside the graph: onnxruntime running the same file, which agrees with the golden "
                     "bundle's outputs")
    elif any(v in stored for v in inside):
        notes.append("values inside the graph: those the golden bundle holds by name (onnxruntime running this "
                     "file disagrees with the bundle's outputs)")
    else:
        notes.append("the golden bundle holds only outputs and onnxruntime running this file disagrees with them "
                     "too, so no value inside the graph has a known reference: the model is cut only to the nodes "
                     "the failing output needs; pass the reference model as against= to cut further")
    return values


def _write(graph: _Graph, nodes: _Nodes, target: str, values: Mapping[str, np.ndarray], out: Path, bundle: Path,
           meta: dict[str, str], tolerance: Tolerance) -> None:
    data = graph.subgraph(nodes, target, values, metadata={f"tether.reduce.{k}": v for k, v in meta.items()})
    tmp = out.with_name(f".{out.name}.tmp-{uuid.uuid4().hex}")
    try:  # renamed into place: an earlier file is never left half overwritten
        tmp.write_bytes(data)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    sample = ({v: values[v] for v in graph.entering(nodes)}, {target: values[target]})
    producer = f"tether.parity.reduce ({meta['reference']})"
    save_golden(bundle, [sample], {"model_sha256": model_sha256(out), "producer": producer,
                                   "tolerance": tolerance.to_dict(), **meta}, overwrite=True)


def _locate(search: _Search, cand: TetherRunner | OnnxRuntimeRunner, feeds: Feeds, output: str,
            judged: Any) -> tuple[_Nodes, str] | None:
    """The smallest failing subgraph for a failing ``output``, and the value it fails on."""
    graph = search.graph
    everything = frozenset(range(len(graph.nodes)))
    if output not in graph.producer:
        raise _core.ArgumentError(f"output '{output}' is not computed by a node: nothing to reduce")
    # The first value that fails as the candidate's kernels write it, among those the failing
    # output depends on: where the error starts.
    upstream = sorted(graph.cone(output, everything))
    shared = [o for k in upstream for o in graph.nodes[k].output if o in search.values and o not in feeds]
    written = cand.intermediates(feeds, shared)
    first = next((v for v in shared if v in written and not judged(v, written[v]).ok), output)
    target = first if first == output or search.fails(graph.cone(first, everything), first) else output
    nodes = search.bisect(target)
    if not search.fails(nodes, target):  # the candidate refused every cut: keep what the target needs
        nodes = graph.cone(target, everything)
    if not search.fails(nodes, target):
        return None
    return search.shrink(nodes, target)


def reduce(model: Model | str | os.PathLike[str] | bytes, inputs: Any = None, *,
           against: str | os.PathLike[str] | GoldenBundle = "onnxruntime", device: str = "cpu",
           runner: str = "tether", tolerance: Tolerance | str | None = None,
           output: str | os.PathLike[str] | None = None, golden: str | os.PathLike[str] | None = None,
           threads: int | None = None, seed: int = 0, dims: Mapping[str, int] | None = None,
           max_runs: int = 400) -> ReduceResult:
    """Cuts ``model`` down to the smallest subgraph that still fails the comparison with
    ``against``, and writes it with a golden bundle of its inputs and the reference's outputs.

    The candidate is ``model`` run by ``runner`` (``"tether"`` on ``device``, or
    ``"onnxruntime"``). ``against`` is ``"onnxruntime"`` running the same file, another model
    file run by onnxruntime (the float model of an INT8 one: values are matched by name), or a
    golden bundle (folder or :class:`GoldenBundle`; its values inside the graph come from
    onnxruntime running ``model`` when that agrees with the bundle's outputs). ``inputs`` takes
    every form :func:`compare` takes (the first batch is used); without it, the bundle's first
    sample or inputs generated with ``seed`` and ``dims``.

    Of the values the first failing output depends on, the first that fails (in graph order, as
    the candidate's kernels write it, so a fused kernel runs as it does in the whole model)
    becomes the target. Bisection then keeps the
    shortest tail of the nodes it depends on that still fails, the values entering the tail
    made graph inputs fed with the reference's values of them; node by node removal follows
    until every node left is needed for the failure. A value the reference does not compute
    (an INT8 model's quantized tensors) is never a cut. At most ``max_runs`` subgraphs run.

    The reduced model goes to ``output`` (default ``<model>.reduced.onnx`` beside the model)
    and its bundle to ``golden`` (default the output's name with ``.golden``). When the whole
    model passes, nothing is written and the result's ``failed`` is False.

    Raises:
        ArgumentError: a bad ``against``, ``runner`` or ``inputs``, an output path that cannot be
            written or would replace an input of the reduction, or no output with a reference.
        GoldenError: the bundle is malformed or holds no sample with the given inputs.

    Example:
        >>> res = reduce("model.int8.onnx", x, against="model.onnx", tolerance="int8")  # doctest: +SKIP
        >>> print(res)                                                                   # doctest: +SKIP
        reduced model.int8.onnx from 212 nodes to 4 (19 subgraphs run; tether (cpu) against onnxruntime: model.onnx)
          fails at value 'layer3.conv1_out': max abs 0.61, SNR 9.2 dB (atol 0.05, rtol 0.1)
    """
    if runner not in ("tether", "onnxruntime"):
        raise _core.ArgumentError(f"runner {runner!r}: use 'tether' or 'onnxruntime'")
    if max_runs < 1:
        raise _core.ArgumentError(f"max_runs {max_runs}: expected an integer >= 1")
    tol = Tolerance.profile(tolerance) if isinstance(tolerance, str) else tolerance
    source = model if isinstance(model, Model) else load(model)
    label = os.path.basename(source.path) if source.path else "the model"
    out, bundle = _paths(source, output, golden, against)
    ref_name, ref, gold = _reference(against, source, threads)
    if runner == "tether":
        cand: TetherRunner | OnnxRuntimeRunner = TetherRunner(source, f"tether ({device})", device=device,
                                                              threads=threads)
    else:
        cand = OnnxRuntimeRunner(source, "onnxruntime (candidate)", threads=threads)
    notes: list[str] = []
    feeds = _feeds(inputs, cand.input_specs(), gold, seed, dims, notes)
    values = _reference_values(ref, gold, source, feeds, tol, threads, notes)

    def judged(name: str, got: np.ndarray) -> Metrics:
        return compare_arrays(values[name], got, tol or Tolerance.for_dtype(values[name].dtype))

    whole = {n: judged(n, a) for n, a in cand.run(feeds).items() if n in values}
    if not whole:
        raise _core.ArgumentError(f"no output of {label} has a reference value: its outputs are "
                                  f"{cand.output_names()}, the reference shows none of them")
    result = ReduceResult(False, label, ref_name, cand.name, len(source.nodes), len(source.nodes), tol, notes=notes)
    failing = [n for n, m in whole.items() if not m.ok]
    if not failing:
        return result
    result.failed, result.output, result.output_metrics = True, failing[0], whole[failing[0]]
    if len(failing) > 1:
        notes.append(f"{len(failing)} outputs fail: {', '.join(failing)}; reduced for '{failing[0]}'")
    graph = _Graph(source)
    search = _Search(graph, cand.for_model, values, tol, max_runs)
    found = _locate(search, cand, feeds, failing[0], judged)
    result.runs = search.runs
    if found is None:
        notes.append(f"the failure of '{failing[0]}' did not reproduce in any subgraph run on its own (the "
                     f"candidate refused them, or max_runs={max_runs} was reached): nothing written")
        return result
    nodes, target = found
    if search.runs >= max_runs:
        notes.append(f"stopped after max_runs={max_runs} subgraph runs: some nodes left may not be needed")
    final = search.metrics(nodes, target)
    assert final is not None  # shrink keeps only sets that ran and failed
    meta = {"source": label, "value": target, "reference": ref_name, "candidate": cand.name}
    _write(graph, nodes, target, values, out, bundle, meta, final.tolerance)
    result.value, result.metrics, result.runs = target, final, search.runs
    result.nodes_after = len(nodes)
    result.nodes = [(graph.name(k), graph.nodes[k].op_type) for k in sorted(nodes)]
    result.inputs = {v: f"{values[v].dtype}{list(values[v].shape)}" for v in graph.entering(nodes)}
    result.model_path, result.golden_path = str(out), str(bundle)
    return result
