"""Tolerances and the per-tensor metrics, computed in float64 by tether's C++ core."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from tether._native import core as _core

Rule = Literal["numpy", "either"]


@dataclass(frozen=True)
class Tolerance:
    """When a candidate element ``c`` is close enough to its reference ``r``.

    ``rule="numpy"``: ``|c - r| <= atol + rtol * |r|`` (``numpy.allclose`` with the reference
    as ``b``). ``rule="either"``: ``|c - r| <= atol`` or ``|c - r| / |r| <= rtol``, the
    convention Polygraphy uses. Integer, bool and string outputs always compare exactly.

    Example:
        >>> Tolerance(atol=1e-4, rtol=1e-3).rule
        'numpy'
        >>> Tolerance.profile("fp16").atol
        0.001
    """

    atol: float = 1e-5
    rtol: float = 1e-4
    rule: Rule = "numpy"

    def __post_init__(self) -> None:
        if not (self.atol >= 0 and self.rtol >= 0):
            raise _core.ArgumentError(f"tolerance must be >= 0, got atol={self.atol} rtol={self.rtol}")
        if self.rule not in ("numpy", "either"):
            raise _core.ArgumentError(f"unknown tolerance rule {self.rule!r}; use 'numpy' or 'either'")

    @staticmethod
    def profile(name: str) -> Tolerance:
        """The default tolerance for a precision: ``"fp32"``, ``"fp16"``, ``"bf16"`` or ``"int8"``
        (see :data:`PROFILES`).

        Example:
            >>> Tolerance.profile("int8").rule
            'numpy'
        """
        try:
            return PROFILES[name]
        except KeyError:
            raise _core.ArgumentError(f"unknown tolerance profile {name!r}; known: {', '.join(PROFILES)}") from None

    @staticmethod
    def for_dtype(dtype: Any) -> Tolerance:
        """The default profile for outputs of ``dtype``: ``fp16`` for float16, ``bf16`` for
        bfloat16, ``fp32`` for everything else (integers and bools compare exactly anyway).

        Example:
            >>> Tolerance.for_dtype(np.float16) == PROFILES["fp16"]
            True
        """
        name = np.dtype(dtype).name
        return PROFILES["fp16" if name == "float16" else "bf16" if name == "bfloat16" else "fp32"]

    def to_dict(self) -> dict[str, Any]:
        """The tolerance as a JSON-able dict.

        Example:
            >>> Tolerance(1e-3, 0.0).to_dict()
            {'atol': 0.001, 'rtol': 0.0, 'rule': 'numpy'}
        """
        return asdict(self)


#: Default tolerances per precision. fp32: a reordered float32 sum over a few thousand terms;
#: fp16/bf16: a few units in the last place of the narrow type; int8: one quantization step of
#: an activation of unit scale over 127 levels, relative to the output's size.
PROFILES: dict[str, Tolerance] = {
    "fp32": Tolerance(atol=1e-5, rtol=1e-4),
    "fp16": Tolerance(atol=1e-3, rtol=1e-2),
    "bf16": Tolerance(atol=1e-2, rtol=5e-2),
    "int8": Tolerance(atol=5e-2, rtol=1e-1),
}


@dataclass
class Metrics:
    """How far a candidate tensor is from its reference (see :func:`compare_arrays`).

    Error statistics cover the element pairs where both values are finite; a pair where only
    one side is NaN, or the infinities differ, is a mismatch whatever the tolerance.
    ``required_atol`` is the smallest atol that passes with the tolerance's rtol, and
    ``required_rtol`` the smallest rtol that passes with its atol.

    Example:
        >>> m = compare_arrays(np.ones(4, np.float32), np.ones(4, np.float32) + 1e-3)
        >>> m.ok, round(m.max_abs_error, 6)
        (False, 0.001)
    """

    shape: tuple[int, ...]
    elements: int
    exact: bool
    max_abs_error: float
    mean_abs_error: float
    max_rel_error: float
    cosine: float
    snr_db: float
    mismatches: int
    nonfinite_mismatches: int
    mismatch_fraction: float
    worst_index: tuple[int, ...] | None
    worst_reference: Any
    worst_candidate: Any
    required_atol: float
    required_rtol: float
    ok: bool
    problem: str = ""
    tolerance: Tolerance = field(default_factory=Tolerance)
    #: NaN and infinity counts on each side, counted even where both sides agree.
    reference_nan: int = 0
    reference_inf: int = 0
    candidate_nan: int = 0
    candidate_inf: int = 0

    @property
    def nonfinite(self) -> bool:
        """True when either side holds a NaN or an infinity, agreeing or not."""
        return bool(self.reference_nan or self.reference_inf or self.candidate_nan or self.candidate_inf)

    def nonfinite_text(self) -> str:
        """The NaN and infinity counts of both sides, as ``"reference 2 NaN 0 inf, candidate 2 NaN 0 inf"``.

        Example:
            >>> compare_arrays(np.float32([np.nan, 1]), np.float32([np.nan, 1])).nonfinite_text()
            'reference 1 NaN 0 inf, candidate 1 NaN 0 inf'
        """
        return (f"reference {self.reference_nan} NaN {self.reference_inf} inf, "
                f"candidate {self.candidate_nan} NaN {self.candidate_inf} inf")

    def to_dict(self) -> dict[str, Any]:
        """The metrics as a JSON-able dict (infinities and NaN as strings).

        Example:
            >>> compare_arrays(np.zeros(2), np.zeros(2)).to_dict()["snr_db"]
            'inf'
        """
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, float) and not math.isfinite(v):
                d[k] = str(v)
        d["worst_index"] = None if self.worst_index is None else list(self.worst_index)
        d["shape"] = list(self.shape)
        if self.exact:  # integers, bools, strings: judged by the mismatch count alone
            for k in ("max_rel_error", "cosine", "snr_db", "required_atol", "required_rtol"):
                d[k] = None
        return d


def _as_array(x: Any) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind == "U":  # numpy strings compare like ONNX strings
        a = a.astype(object)
    return a


def _compare_objects(r: np.ndarray, c: np.ndarray, tol: Tolerance) -> Metrics:
    """Strings (object arrays): equal or not, element by element."""
    problem = ""
    if r.shape != c.shape:
        problem = f"shape {list(c.shape)} differs from the reference's {list(r.shape)}"
    elif c.dtype != object:
        problem = f"dtype {c.dtype} cannot be compared with the reference's strings"
    if problem:
        bad = math.inf
        return Metrics(r.shape, 0, True, bad, bad, bad, 0.0, -bad, 0, 0, 0.0, None, None, None, bad, bad, False,
                       problem, tol)
    diff = np.array([a != b for a, b in zip(r.ravel(), c.ravel(), strict=True)], dtype=bool)
    n = int(diff.sum())
    worst = int(np.argmax(diff)) if diff.size else -1
    idx = None if worst < 0 else tuple(int(i) for i in np.unravel_index(worst, r.shape))
    inf = math.inf if n else 0.0
    return Metrics(r.shape, r.size, True, inf, inf, inf, 0.0 if n else 1.0, -math.inf if n else math.inf, n, 0,
                   n / r.size if r.size else 0.0, idx, None if idx is None else r[idx], None if idx is None else c[idx],
                   inf, inf, n == 0, "", tol)


def compare_arrays(reference: Any, candidate: Any, tolerance: Tolerance | None = None) -> Metrics:
    """Compares ``candidate`` with ``reference`` in float64 and returns :class:`Metrics`.

    Float arrays of any width compare with each other, integers of any width by exact value,
    bools with bools, strings with strings. A difference of shape or of kind is not raised:
    the metrics come back with ``ok=False`` and ``problem`` saying what differs.

    Example:
        >>> m = compare_arrays(np.float32([1, 2]), np.float32([1, 2.0001]), Tolerance(atol=0, rtol=1e-3))
        >>> m.ok, m.worst_index
        (True, (1,))
    """
    tol = tolerance or Tolerance()
    r, c = _as_array(reference), _as_array(candidate)
    if r.dtype == object or c.dtype == object:
        return _compare_objects(r, c, tol)
    d = _core.compare(r, c, tol.atol, tol.rtol, tol.rule)
    counts = _nonfinite_counts(r) + _nonfinite_counts(c)
    flat = int(d["worst_index"])
    idx = None if flat < 0 or d["problem"] else tuple(int(i) for i in np.unravel_index(flat, r.shape))
    return Metrics(
        shape=tuple(d["shape"]), elements=d["elements"], exact=d["exact"], max_abs_error=d["max_abs_error"],
        mean_abs_error=d["mean_abs_error"], max_rel_error=d["max_rel_error"], cosine=d["cosine"],
        snr_db=d["snr_db"], mismatches=d["mismatches"], nonfinite_mismatches=d["nonfinite_mismatches"],
        mismatch_fraction=d["mismatch_fraction"], worst_index=idx,
        worst_reference=None if idx is None else r[idx].item(),
        worst_candidate=None if idx is None else c[idx].item(),
        required_atol=d["required_atol"], required_rtol=d["required_rtol"], ok=d["ok"], problem=d["problem"],
        tolerance=tol, reference_nan=counts[0], reference_inf=counts[1], candidate_nan=counts[2],
        candidate_inf=counts[3],
    )


def _nonfinite_counts(a: np.ndarray) -> tuple[int, int]:
    """(NaN count, infinity count) of a float array; (0, 0) for other kinds."""
    if a.dtype.kind not in "fc" and a.dtype.name != "bfloat16":
        return 0, 0
    f = a if a.dtype.kind in "fc" else a.astype(np.float32)
    return int(np.count_nonzero(np.isnan(f))), int(np.count_nonzero(np.isinf(f)))
