"""What every exporter returns, and the error it raises."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from tether import _core
from tether.parity import ParityReport


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

    ``ok`` is True when every parity check passed (the report's, and the second-size run that
    proves each dynamic dim is really dynamic).

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

    @property
    def ok(self) -> bool:
        return all(r is None or r.ok for r in (self.report, self.dynamic_report))

    def __str__(self) -> str:
        lines = [f"exported {self.path} with {self.exporter}: {'verified' if self.ok else 'PARITY FAILED'}"]
        if self.external_data is not None:
            lines.append(f"weights in {self.external_data}")
        if self.golden_path is not None:
            lines.append(f"golden bundle in {self.golden_path}")
        if self.report is not None:
            lines.append(self.report.table())
        if self.dynamic_report is not None:
            lines.append("at a second size of the dynamic dims:")
            lines.append(self.dynamic_report.table())
        lines.extend(f"warning: {w}" for w in self.warnings)
        return "\n".join(lines)


def fail(result: ExportResult, why: str) -> NoReturn:
    """Raises ExportError for ``result`` (kept on the error as ``result``), saying ``why``."""
    err = ExportError(f"export to {result.path}: {why}")
    err.result = result  # type: ignore[attr-defined]
    raise err


def first_line(e: BaseException) -> str:
    """The first line of an exception's message, without terminal colour codes (exporters
    print coloured, multi-page errors); the exception's type name when the message is empty."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
    return text.splitlines()[0] if text else type(e).__name__
