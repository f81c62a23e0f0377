"""ParityReport: what a comparison found, as a table, JSON or an HTML page."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from tether.parity._metrics import Metrics, Tolerance
from tether.parity._provenance import NodeOrigin


@dataclass
class OutputResult:
    """One output compared over every batch: aggregated metrics, and per batch."""

    name: str
    metrics: Metrics
    batches: list[Metrics] = field(default_factory=list)
    candidate_name: str = ""  # the candidate's name for it, when mapped

    @property
    def worst_batch(self) -> int | None:
        """In dataset mode, the index of the batch that holds the worst element (the batch whose
        metrics gave ``worst_index``); None with a single batch."""
        if len(self.batches) < 2:
            return None
        return max(range(len(self.batches)), key=lambda k: _badness(self.batches[k]))

    def to_dict(self) -> dict[str, Any]:
        d = {"name": self.name, "metrics": self.metrics.to_dict(), "batches": len(self.batches),
             "worst_batch": self.worst_batch}
        if self.candidate_name and self.candidate_name != self.name:
            d["candidate_name"] = self.candidate_name
        return d


def _badness(m: Metrics) -> tuple[bool, bool, float]:
    """How bad a batch is, to find the one holding the worst element: a NaN or infinity
    disagreement first, then a failure, then the largest error."""
    return (m.nonfinite_mismatches > 0, not m.ok, m.max_abs_error)


@dataclass
class LayerResult:
    """One value of the graph compared layer by layer.

    ``status``: ``"compared"``; ``"fused"`` when the candidate computes the node inside a
    fused kernel (``fused_into`` names it) so the value never exists there; ``"missing"`` when
    a runner did not produce the value.
    """

    index: int
    node: str
    op_type: str
    value: str
    status: str
    metrics: Metrics | None = None
    fused_into: str = ""
    fused_from: list[str] = field(default_factory=list)  # every node of the fused kernel writing this value
    #: The torch module and source line that produced the node (dynamo exporter's records), if known.
    origin: NodeOrigin | None = None

    @property
    def ok(self) -> bool:
        return self.metrics is None or self.metrics.ok

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"index": self.index, "node": self.node, "op_type": self.op_type, "value": self.value,
                             "status": self.status}
        if self.metrics is not None:
            d["metrics"] = self.metrics.to_dict()
        if self.fused_into:
            d["fused_into"] = self.fused_into
        if self.fused_from:
            d["fused_from"] = list(self.fused_from)
        if self.origin is not None:
            d["origin"] = self.origin.to_dict()
        return d

    def where(self) -> str:
        """``"torch module fc1 (Linear), model.py:13"``, or ``""`` without recorded origin.

        Example:
            >>> rep.first_divergent.where()                        # doctest: +SKIP
            'torch module layer2.0.conv1 (Conv2d), model.py:41'
        """
        if self.origin is None:
            return ""
        src = f", {self.origin.source}" if self.origin.source else ""
        return f"torch module {self.origin.label}{src}"


@dataclass
class SliceResult:
    """Agreement of a classifier output on the samples with one label."""

    label: Any
    samples: int
    top1_agreement: float
    reference_accuracy: float | None = None
    candidate_accuracy: float | None = None

    def to_dict(self) -> dict[str, Any]:
        label = self.label.item() if hasattr(self.label, "item") else self.label
        return {"label": label, "samples": self.samples, "top1_agreement": self.top1_agreement,
                "reference_accuracy": self.reference_accuracy, "candidate_accuracy": self.candidate_accuracy}


@dataclass
class BisectResult:
    """Error a node creates (run alone on the reference's inputs) versus the error it shows
    in the whole run (created plus inherited).

    When the candidate computes the node inside a fused kernel, ``fused_from`` lists every
    node of the kernel and ``parts`` holds each one bisected alone; ``total`` is then the
    whole-run comparison of the value the kernel writes (``written_value``), and ``origin``
    names the node that creates the error.
    """

    node: str
    value: str
    local: Metrics
    total: Metrics | None  # None when the candidate computes the value inside a fused kernel
    op_type: str = ""
    fused_from: list[str] = field(default_factory=list)
    parts: list[BisectResult] = field(default_factory=list)
    written_value: str = ""

    @property
    def origin(self) -> str | None:
        """The node that creates the error: the first node of the fused kernel (or the node
        itself) that leaves tolerance when run alone; None when none does."""
        for p in self.parts or [self]:
            if not p.local.ok:
                return p.node
        return None

    @property
    def creates_error(self) -> bool:
        """True when the node alone, on the reference's own inputs, leaves tolerance; for a
        node computed inside a fused kernel, when any node of that kernel does (``origin``
        names it)."""
        return self.origin is not None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"node": self.node, "op_type": self.op_type, "value": self.value,
                             "creates_error": self.creates_error, "origin": self.origin,
                             "local": self.local.to_dict(),
                             "total": None if self.total is None else self.total.to_dict()}
        if self.fused_from:
            d["fused_from"] = list(self.fused_from)
            d["written_value"] = self.written_value
            d["parts"] = [p.to_dict() for p in self.parts]
        return d

    def lines(self) -> list[str]:
        """The verdict as text lines: one for a node alone, a line per node for a fused kernel.

        Example:
            >>> bisect(ort, tether, "node_gelu", x).lines()[1]     # doctest: +SKIP
            '  node_MatMul_1 (MatMul): alone max abs 0.572, creates the error'
        """
        whole_ok = self.total is not None and self.total.ok
        if not self.parts:
            verdict = ("creates the error" if self.creates_error else
                       "is within tolerance alone and in the whole run" if whole_ok else
                       "inherits the error from its inputs")
            whole = "not computed on its own" if self.total is None else f"max abs {_num(self.total.max_abs_error)}"
            return [f"node '{self.node}' {verdict}: alone max abs {_num(self.local.max_abs_error)}, in the whole run "
                    f"{whole}"]
        origin = self.origin
        head = (f"node '{self.node}' is computed by a fused kernel of the candidate with {', '.join(self.fused_from)};"
                " each node bisected alone on the reference's inputs: ")
        head += (f"node '{origin}' creates the error" if origin is not None else
                 "each is within tolerance, alone and in the whole run" if whole_ok else
                 "none creates the error alone, so the kernel inherits it from its inputs")
        out = [head]
        for p in self.parts:
            mark = "creates the error" if not p.local.ok else "within tolerance"
            out.append(f"  {p.node} ({p.op_type}): alone max abs {_num(p.local.max_abs_error)}, {mark}")
        if self.total is not None:
            out.append(f"  the kernel's output '{self.written_value}' in the whole run: max abs "
                       f"{_num(self.total.max_abs_error)}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _num(x: float) -> str:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return f"{x:.3g}"


def _with_device(name: str, device: str) -> str:
    """``name`` with ``device`` after the engine's name (``"tether vulkan:0 (candidate)"``,
    ``"tether cpu: edited.onnx"``), unless the name already says it."""
    if not device or device in name.replace(":", " ").split() or device in name.split():
        return name
    base, mark, rest = name.partition(" (candidate)")
    head, colon, tail = base.partition(": ")
    return f"{head} {device}{colon}{tail}{mark}{rest}"


def _file_text(f: dict[str, str]) -> str:
    if f.get("kind") == "golden bundle":
        recorded = f"recorded for a model with SHA-256 {f['sha256']}" if f["sha256"] else "no model hash recorded"
        return f"golden bundle: {f['path']} ({recorded})"
    return f"model: {f['path']} (SHA-256 {f['sha256']})"


def _agreement(m: Metrics) -> str:
    if m.nonfinite_mismatches:
        return f" ({m.nonfinite_mismatches} positions disagree)"
    return " (both sides agree on their positions)"


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    return "\n".join([_row(header, widths), _row(["-" * w for w in widths], widths)] + [_row(r, widths) for r in rows])


def _metric_cells(m: Metrics) -> list[str]:
    if m.problem:
        return ["FAIL", m.problem, "", "", "", "", ""]
    if m.exact:  # integers, bools, strings: only the count of unequal elements means something
        return ["ok" if m.ok else "FAIL", _num(m.max_abs_error) if math.isfinite(m.max_abs_error) else "", "", "", "",
                _out_of_tolerance(m), "exact"]
    return ["ok" if m.ok else "FAIL", _num(m.max_abs_error), _num(m.max_rel_error), _num(m.cosine),
            _num(m.snr_db), _out_of_tolerance(m), f"{_num(m.required_atol)} / {_num(m.required_rtol)}"]


def _out_of_tolerance(m: Metrics) -> str:
    """``"1 of 100,000"``, with the share beside the count only when it rounds to something:
    a rounded "0.00%" on a failing row would read as nothing out of tolerance."""
    if not m.mismatches:
        return f"0 of {m.elements:,}"
    share = f" ({m.mismatch_fraction:.2%})" if m.mismatch_fraction >= 0.00005 else ""
    return f"{m.mismatches:,} of {m.elements:,}{share}"


_METRIC_HEADER = ["", "max abs", "max rel", "cosine", "SNR dB", "out of tol", "needs atol / rtol"]


@dataclass
class ParityReport:
    """The result of comparing a candidate runner with a reference runner.

    ``ok`` is True when every output of every batch is within tolerance. ``outputs`` holds a
    row per output; ``layers`` (layer-wise mode) a row per graph value in topological order,
    with ``first_divergent`` the first node whose output leaves tolerance; ``slices`` the
    per-label agreement of a classifier output (dataset mode).

    Example:
        >>> rep = tt.parity.compare(ref, cand, x)              # doctest: +SKIP
        >>> print(rep.table())                                  # doctest: +SKIP
        >>> rep.to_html("report.html")                          # doctest: +SKIP
    """

    reference: str
    candidate: str
    tolerance: Tolerance
    outputs: list[OutputResult]
    batches: int
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    layers: list[LayerResult] | None = None
    slices: list[SliceResult] | None = None
    notes: list[str] = field(default_factory=list)
    #: A quantized candidate's quantization summary (tether.quantize.QuantizationSummary).
    quantization: Any = None
    #: When a fused kernel of the candidate writes the first divergent value: each node of the
    #: kernel bisected alone, naming in ``origin`` the node that creates the error.
    first_divergent_bisect: BisectResult | None = None
    #: The files each side ran, by role ("reference", "candidate"): ``path`` and ``sha256``
    #: (for a golden bundle, the folder and the model hash it records).
    models: dict[str, dict[str, str]] = field(default_factory=dict)
    #: In dataset mode with layer-wise comparison, the batch the layers were compared on: the
    #: one holding the worst element of the first failing output (0 when every output passes).
    layer_batch: int | None = None
    #: The device each side ran on, by role, for runners that have one (tether's: "cpu", "vulkan:0").
    devices: dict[str, str] = field(default_factory=dict)
    #: The model the comparison ran on (the graph the HTML report draws), when a side had one.
    graph: Any = field(default=None, repr=False, compare=False)
    _errors: dict[str, Any] = field(default_factory=dict, repr=False)  # output -> sample of |c - r| for the HTML

    @property
    def ok(self) -> bool:
        return all(o.metrics.ok for o in self.outputs)

    @property
    def first_divergent(self) -> LayerResult | None:
        """The first compared layer, in topological order, whose value leaves tolerance."""
        for layer in self.layers or []:
            if layer.status == "compared" and not layer.ok:
                return layer
        return None

    def _nonfinite_layer_lines(self) -> list[str]:
        found = [la for la in self.layers or [] if la.metrics is not None and la.metrics.nonfinite]
        if not found:
            return []
        first = found[0]
        assert first.metrics is not None
        return [f"{len(found)} layer values hold NaN or infinity; the first: '{first.node}' ({first.op_type}), value "
                f"'{first.value}': {first.metrics.nonfinite_text()}{_agreement(first.metrics)}"]

    def fused_caveat(self) -> list[str]:
        """What the report says when a fused kernel writes the first divergent value: the
        kernel's nodes, and the node that creates the error when bisection found it (the same
        lines in the text and the HTML); empty otherwise.

        Example:
            >>> rep.fused_caveat()[1]                              # doctest: +SKIP
            "bisected alone on the reference's inputs: node 'node_MatMul_1' (MatMul) creates the error ..."
        """
        first = self.first_divergent
        if first is None or not first.fused_from:
            return []
        out = [f"written by a fused kernel computing {', '.join(first.fused_from)}: the error may start in any of "
               "them"]
        b = self.first_divergent_bisect
        if b is None:
            out[0] += " (bisect each, or compare with TetherRunner(model, optimize=False))"
            return out
        origin = b.origin
        if origin is None:
            out.append("bisected alone on the reference's inputs, no node of the kernel leaves tolerance: the error "
                       "comes in through the kernel's inputs")
        else:
            part = next(p for p in b.parts if p.node == origin)
            traced = next((la for la in self.layers or [] if la.node == origin and la.origin is not None), None)
            out.append(f"bisected alone on the reference's inputs: node '{origin}' ({part.op_type}) creates the error "
                       f"(alone max abs {_num(part.local.max_abs_error)}); the others stay within tolerance"
                       if sum(not p.local.ok for p in b.parts) == 1 else
                       f"bisected alone on the reference's inputs: node '{origin}' ({part.op_type}) is the first that "
                       f"creates an error (alone max abs {_num(part.local.max_abs_error)}); also out of tolerance "
                       f"alone: {', '.join(p.node for p in b.parts if not p.local.ok and p.node != origin)}")
            if traced is not None:
                out.append(f"node '{origin}' comes from {traced.where()}")
        return out

    def _no_divergent_layer_text(self) -> str:
        """Why no layer is named while an output fails: the layers were compared on one batch
        only, or the failing value is one that was not compared layer by layer."""
        failing = [o.name for o in self.outputs if not o.metrics.ok]
        if not failing:
            return "no layer leaves tolerance"
        batch = 0 if self.layer_batch is None else self.layer_batch
        passes_there = [o.name for o in self.outputs if not o.metrics.ok and len(o.batches) > 1
                        and batch < len(o.batches) and o.batches[batch].ok]
        if passes_there:
            return (f"no layer leaves tolerance on batch {batch}, where output '{passes_there[0]}' is within "
                    "tolerance: it fails on other batches")
        skipped = sum(1 for la in self.layers or [] if la.status != "compared")
        return (f"no compared layer leaves tolerance, yet output '{failing[0]}' fails: its error is in a value not "
                f"compared layer by layer ({skipped} inside fused kernels or missing on one side; compare with "
                "TetherRunner(model, optimize=False)), or in how the outputs were paired (output_map, layouts)")

    def worst_layers(self, k: int = 5) -> list[LayerResult]:
        """The ``k`` compared layers with the lowest SNR (largest error relative to the signal)."""
        compared = [la for la in self.layers or [] if la.metrics is not None]
        return sorted(compared, key=lambda la: (la.metrics.snr_db if la.metrics else 0.0))[:k]

    def title(self) -> str:
        """``"candidate vs reference"``, each side with the device it ran on when its name does
        not say it already.

        Example:
            >>> tt.compare(TetherRunner(m, device="vulkan"), TetherRunner(m)).title()   # doctest: +SKIP
            'tether cpu (candidate) vs tether vulkan:0'
        """
        return (f"{_with_device(self.candidate, self.devices.get('candidate', ''))} vs "
                f"{_with_device(self.reference, self.devices.get('reference', ''))}")

    def table(self) -> str:
        """The per-output table, then the layer-wise summary when there is one, as text."""
        lines = [f"parity: {self.title()} ({self.batches} batch"
                 f"{'es' if self.batches != 1 else ''}; tolerance {self.tolerance.rule}: atol={self.tolerance.atol:g}"
                 f" rtol={self.tolerance.rtol:g}): {'PASS' if self.ok else 'FAIL'}"]
        for role, f in self.models.items():
            lines.append(f"{role} {_file_text(f)}")
        rows = [[o.name, *_metric_cells(o.metrics)] for o in self.outputs]
        lines.append(_table(["output", *_METRIC_HEADER], rows))
        for o in self.outputs:
            m = o.metrics
            if not m.ok and m.worst_index is not None:
                batch = "" if o.worst_batch is None else f" (batch {o.worst_batch})"
                lines.append(f"worst element of '{o.name}'{batch}: index {list(m.worst_index)}: reference "
                             f"{m.worst_reference!r}, candidate {m.worst_candidate!r} ({m.mismatches:,} of "
                             f"{m.elements:,} out of tolerance)")
        for o in self.outputs:
            if o.metrics.nonfinite:
                lines.append(f"NaN or infinity in output '{o.name}': {o.metrics.nonfinite_text()}"
                             f"{_agreement(o.metrics)}")
        if self.layers is not None:
            compared = sum(1 for la in self.layers if la.status == "compared")
            fused = sum(1 for la in self.layers if la.status == "fused")
            on = "" if self.layer_batch is None else f" on batch {self.layer_batch}"
            lines.append(f"layer-wise{on}: {compared} values compared, {fused} inside fused kernels of the candidate")
            first = self.first_divergent
            if first is None:
                lines.append(self._no_divergent_layer_text())
            else:
                assert first.metrics is not None
                lines.append(f"first divergent node: '{first.node}' ({first.op_type}), value '{first.value}': "
                             f"max abs {_num(first.metrics.max_abs_error)}, SNR {_num(first.metrics.snr_db)} dB")
                if first.origin is not None:
                    lines.append(f"  from {first.where()}")
                lines.extend(f"  {line}" for line in self.fused_caveat())
            lines.extend(self._nonfinite_layer_lines())
            worst = self.worst_layers()
            if worst:
                traced = any(la.origin is not None for la in worst)
                lines.append(_table(["worst layers", "op", *_METRIC_HEADER, *(["torch module", "source"] if traced
                                                                               else [])],
                                    [[la.node, la.op_type, *_metric_cells(la.metrics),
                                      *([la.origin.label if la.origin else "", la.origin.source if la.origin else ""]
                                        if traced else [])]
                                     for la in worst if la.metrics]))
        if self.slices:
            lines.append(_table(["label", "samples", "top-1 agreement", "reference acc", "candidate acc"],
                                [[str(s.label), str(s.samples), f"{s.top1_agreement:.2%}",
                                  "" if s.reference_accuracy is None else f"{s.reference_accuracy:.2%}",
                                  "" if s.candidate_accuracy is None else f"{s.candidate_accuracy:.2%}"]
                                 for s in self.slices]))
        lines.extend(f"note: {n}" for n in self.notes)
        if self.quantization is not None:
            lines.append(self.quantization.table())
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-able data."""
        first = self.first_divergent
        return {
            "ok": self.ok, "reference": self.reference, "candidate": self.candidate,
            "tolerance": self.tolerance.to_dict(), "batches": self.batches,
            "input_shapes": {k: list(v) for k, v in self.input_shapes.items()},
            "outputs": [o.to_dict() for o in self.outputs],
            "layers": None if self.layers is None else [la.to_dict() for la in self.layers],
            "first_divergent": None if first is None else first.to_dict(),
            "first_divergent_bisect": None if self.first_divergent_bisect is None
            else self.first_divergent_bisect.to_dict(),
            "slices": None if self.slices is None else [s.to_dict() for s in self.slices],
            "notes": list(self.notes),
            "models": {k: dict(v) for k, v in self.models.items()},
            "layer_batch": self.layer_batch,
            "devices": dict(self.devices),
            "quantization": None if self.quantization is None else self.quantization.to_dict(),
        }

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        """The report as JSON text, also written to ``path`` when given.

        Example:
            >>> json.loads(rep.to_json())["ok"]                 # doctest: +SKIP
            True
        """
        text = json.dumps(self.to_dict(), indent=2)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return text

    def to_html(self, path: str | os.PathLike[str] | None = None) -> str:
        """A self-contained HTML page: the tables, an error histogram per output and, in
        layer-wise mode, the SNR of every layer, drawn with matplotlib. Written to ``path``
        when given; returns the HTML.

        Example:
            >>> rep.to_html("report.html")                      # doctest: +SKIP
        """
        from tether.parity._html import render

        html = render(self)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(html)
        return html
