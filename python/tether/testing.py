"""Helpers for pytest: assert that two runners compute the same function.

Example:
    >>> import tether.testing
    >>> tether.testing.assert_parity(module, sess, x)          # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from tether.parity import ParityReport, compare

__all__ = ["ParityError", "assert_parity"]


class ParityError(AssertionError):
    """Raised by :func:`assert_parity`; ``report`` holds the whole :class:`ParityReport`."""

    def __init__(self, message: str, report: ParityReport) -> None:
        super().__init__(message)
        self.report = report


def assert_parity(reference: Any, candidate: Any, inputs: Any = None, **options: Any) -> ParityReport:
    """Compares ``candidate`` with ``reference`` (as :func:`tether.parity.compare`, with the
    same keyword options) and raises :class:`ParityError`, an ``AssertionError``, when any
    output leaves tolerance. The message holds the table, the worst element of each failing
    output and, with ``layerwise=True``, the first node that diverged. Returns the report.

    Example:
        >>> assert_parity(TorchRunner(net), tt.compile(m), x, tolerance="fp32")   # doctest: +SKIP
    """
    report = compare(reference, candidate, inputs, **options)
    if not report.ok:
        raise ParityError(report.table(), report)
    return report
