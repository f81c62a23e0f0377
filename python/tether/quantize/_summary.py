"""What a quantization did, for the parity report: ranges, data hygiene, float layers, sensitivity."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

from tether.quantize._evaluate import LayerSensitivity


@dataclass
class TensorSummary:
    """One quantized activation: its range, parameters and what calibration saw of it."""

    name: str
    min: float
    max: float
    method: str
    scale: float | None            # None when no reader ended up quantized
    zero_point: int | None
    clipped: float                 # share of calibration values outside [min, max] (bin resolution)
    channels: int                  # tracked channels (0: not tracked)
    dead_channels: int             # channels that were zero on every sample
    zero_range: bool               # every calibration value equal (e.g. all zero)
    group: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class QuantizationSummary:
    """The quantization side of a report: settings, calibration counts, per-tensor ranges, the
    nodes kept in float and why, layer sensitivity and the budget."""

    profile: str
    method: str
    samples: int
    batches: int
    skipped: list[int]
    tensors: list[TensorSummary]
    float_nodes: dict[str, str]    # node -> why it stayed float
    sensitivity: list[LayerSensitivity] | None = None
    budget: str | None = None
    budget_met: bool | None = None
    float_accuracy: float | None = None
    accuracy: float | None = None
    evaluated_samples: int = 0
    runner: str = "tether"
    notes: list[str] = field(default_factory=list)

    @property
    def quantized_activations(self) -> int:
        """How many activations the returned model quantizes (0: it is the float model)."""
        return sum(1 for t in self.tensors if t.scale is not None)

    def float_only(self) -> str | None:
        """Why the returned model is the float model, or None when it quantizes something.

        Example:
            >>> res.summary.float_only()                              # doctest: +SKIP
            'the budget SQNR >= 200 dB on every output is met only with every node in float'
        """
        if self.quantized_activations:
            return None
        if self.budget and self.budget_met:
            return f"the budget {self.budget} is met only with every node in float"
        if self.budget and self.budget_met is False:
            return f"the budget {self.budget} is not met even with every node in float"
        return "every node was kept in float" if self.float_nodes else "the model has nothing to quantize"

    def _budget_verdict(self) -> str:
        if not self.budget_met:
            return "NOT met"
        return "met only with every node in float" if not self.quantized_activations else "met"

    def problems(self) -> list[str]:
        """Lines for what calibration found suspicious: dead channels, zero ranges, heavy clipping."""
        out = []
        for t in self.tensors:
            if t.dead_channels:
                out.append(f"'{t.name}': {t.dead_channels} of {t.channels} channels were zero on every sample")
            if t.zero_range:
                out.append(f"'{t.name}': every calibration value was {t.min:g} (zero range)")
            if t.clipped > 0.01:
                out.append(f"'{t.name}': {t.clipped:.2%} of the calibration values fall outside the chosen range")
        if self.skipped:
            out.append(f"{len(self.skipped)} samples with NaN or infinity were skipped: {self.skipped[:10]}"
                       f"{' ...' if len(self.skipped) > 10 else ''}")
        return out

    def table(self) -> str:
        from tether.parity._report import _table

        acc = ""
        if self.accuracy is not None and self.float_accuracy is not None:
            acc = f"; top-1 accuracy {self.float_accuracy:.2%} float -> {self.accuracy:.2%} int8"
        lines = [f"quantization: profile {self.profile}, method {self.method}, {self.samples} calibration samples in "
                 f"{self.batches} batches, {self.quantized_activations} activations quantized ({len(self.tensors)} "
                 f"calibrated), {len(self.float_nodes)} nodes in float; evaluated on {self.evaluated_samples} samples "
                 f"by {self.runner}{acc}"]
        why = self.float_only()
        if why:
            lines.append(f"NOTHING QUANTIZED: the returned model is the float model; {why}")
        if self.budget:
            lines.append(f"budget: {self.budget}: {self._budget_verdict()}")
        if self.float_nodes:
            lines.append(_table(["kept in float", "why"], [[n, w] for n, w in self.float_nodes.items()]))
        if self.sensitivity:
            rows = [[s.node, s.op_type, _fmt(s.sqnr_db), "" if s.accuracy_drop is None else f"{s.accuracy_drop:+.2%}"]
                    for s in self.sensitivity[:10]]
            lines.append(_table(["most sensitive layers", "op", "SQNR dB alone", "accuracy drop alone"], rows))
        lines.append(_table(["tensor", "min", "max", "method", "scale", "zero point", "clipped", "dead channels"],
                            [[t.name, _fmt(t.min), _fmt(t.max), t.method, "float" if t.scale is None else _fmt(t.scale),
                              "" if t.zero_point is None else str(t.zero_point), f"{t.clipped:.3%}",
                              f"{t.dead_channels}/{t.channels}" if t.channels else ""] for t in self.tensors]))
        lines.extend(f"calibration: {p}" for p in self.problems())
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile, "method": self.method, "samples": self.samples, "batches": self.batches,
            "skipped": list(self.skipped), "tensors": [t.to_dict() for t in self.tensors],
            "float_nodes": dict(self.float_nodes),
            "sensitivity": None if self.sensitivity is None else [s.to_dict() for s in self.sensitivity],
            "budget": self.budget, "budget_met": self.budget_met, "float_accuracy": self.float_accuracy,
            "accuracy": self.accuracy, "evaluated_samples": self.evaluated_samples, "runner": self.runner,
            "quantized_activations": self.quantized_activations, "float_only": self.float_only(),
            "problems": self.problems(), "notes": list(self.notes),
        }

    def html(self) -> str:
        """The section of the HTML report: summary, float layers, sensitivity chart, tensor table."""
        e = html.escape
        parts = [f"<h2>Quantization</h2><p>{e(self.table().splitlines()[0])}</p>"]
        why = self.float_only()
        if why:
            parts.append(f"<p><b>Nothing quantized</b>: the returned model is the float model; {e(why)}</p>")
        if self.budget:
            parts.append(f"<p>budget: {e(self.budget)}: <b>{self._budget_verdict()}</b></p>")
        if self.float_nodes:
            rows = "".join(f"<tr><td class='name'>{e(n)}</td><td class='text'>{e(w)}</td></tr>"
                           for n, w in self.float_nodes.items())
            parts.append(f"<table id='float-nodes'><thead><tr><th>kept in float</th><th>why</th></tr></thead>"
                         f"<tbody>{rows}</tbody></table>")
        if self.sensitivity:
            parts.append(_sensitivity_chart(self.sensitivity))
        problems = self.problems()
        if problems:
            parts.append("<ul>" + "".join(f"<li>{e(p)}</li>" for p in problems) + "</ul>")
        head = ["tensor", "min", "max", "method", "scale", "zero point", "clipped", "dead channels"]
        rows = "".join(
            "<tr>" + f"<td class='name'>{e(t.name)}</td>" + "".join(
                f"<td>{e(str(c))}</td>" for c in (_fmt(t.min), _fmt(t.max), t.method,
                                             "" if t.scale is None else _fmt(t.scale),
                                             "" if t.zero_point is None else t.zero_point, f"{t.clipped:.3%}",
                                             f"{t.dead_channels}/{t.channels}" if t.channels else "")) + "</tr>"
            for t in self.tensors)
        parts.append("<div class='scroll'><table id='quantized-tensors'><thead><tr>"
                     + "".join(f"<th>{e(h)}</th>" for h in head) + f"</tr></thead><tbody>{rows}</tbody></table></div>")
        return "\n".join(parts)


def _fmt(x: float) -> str:
    return str(x) if not math.isfinite(x) else f"{x:.4g}"


def _sensitivity_chart(layers: list[LayerSensitivity]) -> str:
    from tether.parity._html import _figure, _svg

    shown = layers[:30]
    fig = _figure()
    fig.set_size_inches(6.5, max(2.0, 0.22 * len(shown) + 0.8))
    ax = fig.add_subplot()
    finite = [s.sqnr_db if math.isfinite(s.sqnr_db) else 0.0 for s in shown]
    ax.barh(range(len(shown)), finite, color="#4a78b5")
    ax.set_yticks(range(len(shown)), [s.node for s in shown], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("output SQNR (dB) with only this node quantized")
    ax.set_title("layer sensitivity (most sensitive first)", fontsize=9)
    return f"<figure class='chart'>{_svg(fig)}</figure>"
