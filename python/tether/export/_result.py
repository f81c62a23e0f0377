"""What every exporter returns, and the error it raises."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from tether._native import core as _core
from tether.parity import ParityReport

_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


class ExportError(_core.Error):
    """An export that could not be done or did not verify: the message names the framework op
    or layer and, where known, the module path where it occurred.

    Example:
        >>> try:
        ...     tt.export.torch(net, (x,), "m.onnx")              # doctest: +SKIP
        ... except tt.export.ExportError as e:
        ...     print(e)                                          # doctest: +SKIP
    """


@dataclass
class ExportResult:
    """A verified export: the files written, the parity report of the exported model against
    the framework's own outputs, and every warning raised on the way.

    ``ok`` is True when every parity check passed (the example's ``report``, the
    ``generated_report`` on other inputs of the example's shapes, and the ``dynamic_report``
    at a second size that proves each dynamic dim is really dynamic) and nothing failed. A
    check on inputs tether made up (generated values, the second size) that missed the
    tolerance by float rounding only, measured against the module run in float64, is named
    in ``rounding_only`` (``"generated"``, ``"dynamic"``) with a warning, and does not count
    against ``ok``.
    ``exporter`` names the exporter that ran and ``exporter_reason`` why that one.
    ``failure`` says what failed when the export raised ExportError (the error's ``result``);
    then nothing was left at ``path``.

    Example:
        >>> res = tt.export.torch(net, (x,), "m.onnx", dynamic={"x": {0: "batch"}})  # doctest: +SKIP
        >>> res.ok, res.path, res.golden_path                                         # doctest: +SKIP
        (True, PosixPath('m.onnx'), PosixPath('m.golden'))
    """

    path: Path
    exporter: str
    report: ParityReport | None = None
    golden_path: Path | None = None
    external_data: Path | None = None
    dynamic_dims: dict[str, dict[int, str]] = field(default_factory=dict)
    dynamic_report: ParityReport | None = None
    warnings: list[str] = field(default_factory=list)
    generated_report: ParityReport | None = None
    exporter_reason: str = ""
    failure: str | None = None
    rounding_only: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        reports = [self.report]
        reports += [r for r, k in ((self.generated_report, "generated"), (self.dynamic_report, "dynamic"))
                    if k not in self.rounding_only]
        return self.failure is None and all(r is None or r.ok for r in reports)

    def __str__(self) -> str:
        if self.failure is not None:
            lines = [f"export to {self.path} with {self.exporter} FAILED: {self.failure}",
                     f"nothing was written to {self.path}"]
        else:
            lines = [f"exported {self.path} with {self.exporter}: {'verified' if self.ok else 'PARITY FAILED'}"]
        if self.exporter_reason:
            lines.append(f"exporter: {self.exporter_reason}")
        if self.external_data is not None:
            lines.append(f"weights in {self.external_data}")
        if self.golden_path is not None:
            lines.append(f"golden bundle in {self.golden_path}")
        if self.report is not None:
            lines.append("on the example:")
            lines.append(self.report.table())
        def rounding(check: str) -> str:
            return " (float rounding only, see the warnings)" if check in self.rounding_only else ""

        if self.generated_report is not None:
            lines.append(f"on generated inputs of the example's shapes{rounding('generated')}:")
            lines.append(self.generated_report.table())
        if self.dynamic_report is not None:
            lines.append(f"at a second size of the dynamic dims{rounding('dynamic')}:")
            lines.append(self.dynamic_report.table())
        lines.extend(f"warning: {w}" for w in self.warnings)
        return "\n".join(lines)


def fail(result: ExportResult, why: str, details: str = "") -> NoReturn:
    """Raises ExportError for ``result`` (kept on the error as ``result``, with ``failure``
    set to ``why``), saying ``why`` and then ``details`` (a report's table, say)."""
    result.failure = why
    err = ExportError(f"export to {result.path}: {why}" + (f"\n{details}" if details else ""))
    err.result = result  # type: ignore[attr-defined]
    raise err


def suggest_tolerance(report: ParityReport) -> str:
    """A tolerance, as code, under which every failing output of ``report`` would pass: twice the
    largest atol they need (one significant digit) at the report's rtol.

    Example:
        >>> suggest_tolerance(report)                  # doctest: +SKIP
        'Tolerance(atol=0.2, rtol=0.1)'
    """
    atol = max((o.metrics.required_atol for o in report.outputs if not o.metrics.ok), default=0.0)
    rtol = report.tolerance.rtol
    rounded = float(f"{2 * atol:.1g}") if atol > 0 else report.tolerance.atol
    return f"Tolerance(atol={rounded:g}, rtol={rtol:g})"


def note(notes: list[str], message: str) -> None:
    """Appends ``message`` to ``notes`` unless it is there already."""
    if message not in notes:
        notes.append(message)


def first_line(e: BaseException) -> str:
    """The first line of an exception's message, without terminal colour codes (exporters
    print coloured, multi-page errors); the exception's type name when the message is empty."""
    text = _COLOUR.sub("", str(e)).strip()
    return text.splitlines()[0] if text else type(e).__name__


def whole(e: BaseException, limit: int = 1200) -> str:
    """An exception's whole message on one line (lines joined by ``; ``, or a space after a
    colon; colour codes and blank lines dropped), cut at ``limit`` characters; the type name
    when the message is empty."""
    text = ""
    for line in (ln.strip() for ln in _COLOUR.sub("", str(e)).splitlines()):
        if line:
            text += (" " if not text or text.endswith(":") else "; ") + line
    text = text.strip() or type(e).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."
