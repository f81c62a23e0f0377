"""ParityReport: what a comparison found, as a table, JSON or an HTML page."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from tether.parity._metrics import Metrics, Tolerance


@dataclass
class OutputResult:
    """One output compared over every batch: aggregated metrics, and per batch."""

    name: str
    metrics: Metrics
    batches: list[Metrics] = field(default_factory=list)
    candidate_name: str = ""  # the candidate's name for it, when mapped

    def to_dict(self) -> dict[str, Any]:
        d = {"name": self.name, "metrics": self.metrics.to_dict(), "batches": len(self.batches)}
        if self.candidate_name and self.candidate_name != self.name:
            d["candidate_name"] = self.candidate_name
        return d


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
        return d


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
    in the whole run (created plus inherited)."""

    node: str
    value: str
    local: Metrics
    total: Metrics | None  # None when the candidate computes the value inside a fused kernel

    @property
    def creates_error(self) -> bool:
        """True when the node alone, on the reference's own inputs, leaves tolerance."""
        return not self.local.ok

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "value": self.value, "creates_error": self.creates_error,
                "local": self.local.to_dict(), "total": None if self.total is None else self.total.to_dict()}

    def __str__(self) -> str:
        verdict = "creates the error" if self.creates_error else "inherits the error from its inputs"
        whole = "not computed on its own" if self.total is None else f"max abs {_num(self.total.max_abs_error)}"
        return f"node '{self.node}' {verdict}: alone max abs {_num(self.local.max_abs_error)}, in the whole run {whole}"


def _num(x: float) -> str:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return f"{x:.3g}"


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    return "\n".join([_row(header, widths), _row(["-" * w for w in widths], widths)] + [_row(r, widths) for r in rows])


def _metric_cells(m: Metrics) -> list[str]:
    if m.problem:
        return ["FAIL", m.problem, "", "", "", "", ""]
    return ["ok" if m.ok else "FAIL", _num(m.max_abs_error), _num(m.max_rel_error), _num(m.cosine),
            _num(m.snr_db), f"{m.mismatch_fraction:.2%}", f"{_num(m.required_atol)} / {_num(m.required_rtol)}"]


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

    def worst_layers(self, k: int = 5) -> list[LayerResult]:
        """The ``k`` compared layers with the lowest SNR (largest error relative to the signal)."""
        compared = [la for la in self.layers or [] if la.metrics is not None]
        return sorted(compared, key=lambda la: (la.metrics.snr_db if la.metrics else 0.0))[:k]

    def table(self) -> str:
        """The per-output table, then the layer-wise summary when there is one, as text."""
        lines = [f"parity: {self.candidate} vs {self.reference} ({self.batches} batch"
                 f"{'es' if self.batches != 1 else ''}; tolerance {self.tolerance.rule}: atol={self.tolerance.atol:g}"
                 f" rtol={self.tolerance.rtol:g}): {'PASS' if self.ok else 'FAIL'}"]
        rows = [[o.name, *_metric_cells(o.metrics)] for o in self.outputs]
        lines.append(_table(["output", *_METRIC_HEADER], rows))
        for o in self.outputs:
            m = o.metrics
            if not m.ok and m.worst_index is not None:
                lines.append(f"worst element of '{o.name}': index {list(m.worst_index)}: reference "
                             f"{m.worst_reference!r}, candidate {m.worst_candidate!r} ({m.mismatches} of "
                             f"{m.elements} out of tolerance)")
        if self.layers is not None:
            compared = sum(1 for la in self.layers if la.status == "compared")
            fused = sum(1 for la in self.layers if la.status == "fused")
            lines.append(f"layer-wise: {compared} values compared, {fused} inside fused kernels of the candidate")
            first = self.first_divergent
            if first is None:
                lines.append("no layer leaves tolerance")
            else:
                assert first.metrics is not None
                lines.append(f"first divergent node: '{first.node}' ({first.op_type}), value '{first.value}': "
                             f"max abs {_num(first.metrics.max_abs_error)}, SNR {_num(first.metrics.snr_db)} dB")
                if first.fused_from:
                    lines.append(f"  written by a fused kernel computing {', '.join(first.fused_from)}: the error may "
                                 "start in any of them (bisect each, or compare unfused)")
            worst = self.worst_layers()
            if worst:
                lines.append(_table(["worst layers", "op", *_METRIC_HEADER],
                                    [[la.node, la.op_type, *_metric_cells(la.metrics)] for la in worst if la.metrics]))
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
            "slices": None if self.slices is None else [s.to_dict() for s in self.slices],
            "notes": list(self.notes),
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
