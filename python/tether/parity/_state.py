"""ParityState: what a comparison over a dataset accumulates, kept so that shards merge exactly."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tether._native import core as _core
from tether.parity._metrics import Metrics, Tolerance, _as_array, _nonfinite_counts
from tether.parity._report import SliceResult

_MAGIC = b"tether.parity.dataset/1\n"


@dataclass
class _Output:
    state: _core.CompareState
    candidate_name: str
    dtype: str
    tolerance: Tolerance
    nonfinite: list[int] = field(default_factory=lambda: [0, 0, 0, 0])  # reference NaN, inf, candidate NaN, inf


def _label_key(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


class ParityState:
    """The comparison of a reference and a candidate over rows of a dataset, as a state that
    can be computed on a shard, sent as bytes and merged exactly.

    Per output it keeps counts (elements, mismatches, NaN and infinities on each side),
    extremes (max abs and rel error, required atol and rtol), the exact sums behind the mean
    error, the cosine and the SNR (Σ|c−r|, Σr², Σc², Σrc, Σ(c−r)², rounded once when read) and
    the worst element with its row in the dataset; per label, the samples, the top-1 agreements
    and each side's correct answers. Every field is a count, an extreme or an exact sum, so
    states of shards of any size, merged in any order, give the metrics of one pass over all
    rows bit for bit. ``tolerance`` is a :class:`Tolerance`, a profile name, or None (each
    output takes the profile of its dtype, as :func:`compare` does).

    Example:
        >>> a, b = ParityState(), ParityState()
        >>> r = np.arange(6, dtype=np.float32).reshape(3, 2)
        >>> c = r.copy(); c[1, 0] += 0.5
        >>> a.add({"y": r[:2]}, {"y": c[:2]}, first_row=0)      # rows 0 and 1
        >>> b.add({"y": r[2:]}, {"y": c[2:]}, first_row=2)      # row 2
        >>> b.merge(ParityState.from_bytes(a.to_bytes()))
        >>> m = b.metrics()["y"]
        >>> m.shape, m.mismatches, m.worst_index, m.max_abs_error
        ((3, 2), 1, (1, 0), 0.5)
    """

    def __init__(self, tolerance: Tolerance | str | None = None, *, label_output: str | None = None) -> None:
        self.tolerance = Tolerance.profile(tolerance) if isinstance(tolerance, str) else tolerance
        self.label_output = label_output
        self.batches = 0
        self._outputs: dict[str, _Output] = {}
        self._labels: dict[Any, list[int]] = {}  # label -> [samples, agree, reference correct, candidate correct]
        self._numeric_labels = True
        self._labelled = False

    # -- accumulate ---------------------------------------------------------------------------

    def _output(self, name: str, candidate_name: str, dtype: np.dtype) -> _Output:
        if name not in self._outputs:
            tol = self.tolerance or Tolerance.for_dtype(dtype)
            self._outputs[name] = _Output(_core.CompareState(tol.atol, tol.rtol, tol.rule), candidate_name,
                                          str(dtype), tol)
        return self._outputs[name]

    def add_pairs(self, pairs: Iterable[tuple[str, str, Any, Any]], first_row: int | None = None,
                  labels: Sequence[Any] | np.ndarray | None = None) -> None:
        """Adds one batch given as ``(name, candidate name, reference, candidate)`` per output,
        the batch being rows ``first_row ...`` of the dataset (by default each output's rows
        follow the rows it already holds); ``labels`` (one per sample) adds the batch's top-1
        agreement of the label output (``label_output``, default the first).

        Example:
            >>> state.add_pairs([("logits", "logits", r, c)], first_row=64, labels=y[64:96])  # doctest: +SKIP
        """
        pairs = list(pairs)
        for name, cname, ref, cand in pairs:
            r, c = _as_array(ref), _as_array(cand)
            out = self._output(name, cname, r.dtype)
            row = out.state.rows if first_row is None else first_row
            if r.dtype == object or c.dtype == object:
                self._add_objects(out, r, c, row)
            else:
                out.state.add(r, c, row)
            counts = _nonfinite_counts(r) + _nonfinite_counts(c)
            out.nonfinite = [a + b for a, b in zip(out.nonfinite, counts, strict=True)]
        if labels is not None:
            self._add_labels(pairs, labels)
        self.batches += 1

    def add(self, reference: dict[str, Any], candidate: dict[str, Any], first_row: int | None = None,
            labels: Sequence[Any] | np.ndarray | None = None) -> None:
        """Adds one batch of outputs by name (the candidate's under the same names).

        Example:
            >>> state.add({"y": r}, {"y": c}, first_row=0)      # doctest: +SKIP
        """
        missing = [k for k in reference if k not in candidate]
        if missing:
            raise _core.ArgumentError(f"output '{missing[0]}' of the reference has no counterpart in the candidate, "
                                      f"whose outputs are {sorted(candidate)}")
        self.add_pairs([(k, k, reference[k], candidate[k]) for k in reference], first_row, labels)

    @staticmethod
    def _add_objects(out: _Output, r: np.ndarray, c: np.ndarray, first_row: int) -> None:
        if r.shape != c.shape or c.dtype != object:
            # A shape or kind problem: the C++ state records it with its rows.
            out.state.add(np.zeros(r.shape, np.bool_), c if c.dtype != object else np.zeros(c.shape), first_row)
            return
        unequal = np.array([a != b for a, b in zip(r.ravel(), c.ravel(), strict=True)], dtype=np.uint8)
        out.state.add_unequal(unequal.reshape(r.shape if r.ndim else (1,)), first_row)

    def _add_labels(self, pairs: list[tuple[str, str, Any, Any]], labels: Sequence[Any] | np.ndarray) -> None:
        target = self.label_output or pairs[0][0]
        match = [p for p in pairs if p[0] == target]
        if not match:
            raise _core.ArgumentError(f"label_output '{target}' is not an output; outputs: {[p[0] for p in pairs]}")
        self.add_top1(np.argmax(np.asarray(match[0][2]), axis=-1), np.argmax(np.asarray(match[0][3]), axis=-1),
                      labels)

    def add_top1(self, reference: np.ndarray, candidate: np.ndarray, labels: Sequence[Any] | np.ndarray) -> None:
        """Adds the top-1 classes of both sides (one per sample) with the samples' labels.

        Example:
            >>> state.add_top1(np.argmax(r, -1), np.argmax(c, -1), y)   # doctest: +SKIP
        """
        ref, cand = np.asarray(reference).ravel(), np.asarray(candidate).ravel()
        lab = np.asarray(labels).ravel()
        if lab.size != ref.size:
            raise _core.ArgumentError(f"{lab.size} labels were given for {ref.size} samples")
        self._labelled = True
        self._numeric_labels = self._numeric_labels and lab.dtype.kind in "iu"
        for value in np.unique(lab):
            sel = lab == value
            counts = self._labels.setdefault(_label_key(value), [0, 0, 0, 0])
            counts[0] += int(sel.sum())
            counts[1] += int((ref[sel] == cand[sel]).sum())
            if lab.dtype.kind in "iu":
                counts[2] += int((ref[sel] == value).sum())
                counts[3] += int((cand[sel] == value).sum())

    # -- merge and move ------------------------------------------------------------------------

    def merge(self, others: ParityState | bytes | Iterable[ParityState | bytes]) -> None:
        """Adds other states (or their bytes) of the same comparison: the result is the state
        of one pass over all their rows.

        Example:
            >>> total = ParityState(); total.merge([a.to_bytes(), b.to_bytes()])   # doctest: +SKIP
        """
        items = [others] if isinstance(others, ParityState | bytes | bytearray) else list(others)
        for item in items:
            other = ParityState.from_bytes(bytes(item)) if isinstance(item, bytes | bytearray) else item
            if other.tolerance != self.tolerance and other._outputs:
                raise _core.ArgumentError(f"parity states of different tolerances cannot merge: {self.tolerance} "
                                          f"versus {other.tolerance}")
            if self.label_output is None:
                self.label_output = other.label_output
            for name, o in other._outputs.items():
                mine = self._outputs.get(name)
                if mine is None:
                    mine = self._outputs[name] = _Output(
                        _core.CompareState(o.tolerance.atol, o.tolerance.rtol, o.tolerance.rule), o.candidate_name,
                        o.dtype, o.tolerance)
                mine.state.merge(o.state)
                mine.nonfinite = [a + b for a, b in zip(mine.nonfinite, o.nonfinite, strict=True)]
            for label, counts in other._labels.items():
                have = self._labels.setdefault(label, [0, 0, 0, 0])
                for k in range(4):
                    have[k] += counts[k]
            self._labelled = self._labelled or other._labelled
            self._numeric_labels = self._numeric_labels and other._numeric_labels
            self.batches += other.batches

    def append(self, other: ParityState | bytes) -> None:
        """Merges a state whose rows were counted from 0 as the rows that follow this state's
        (per output): a shard whose place in the dataset is only known in order.

        Example:
            >>> total.append(next_shard_state)                  # doctest: +SKIP
        """
        o = ParityState.from_bytes(bytes(other)) if isinstance(other, bytes | bytearray) else ParityState.from_bytes(
            other.to_bytes())
        for name, out in o._outputs.items():
            mine = self._outputs.get(name)
            out.state.shift_rows(0 if mine is None else mine.state.rows)
        self.merge(o)

    def to_bytes(self) -> bytes:
        """The state as bytes (a JSON header and each output's C++ state), for another process.

        Example:
            >>> blob = state.to_bytes()                         # doctest: +SKIP
        """
        blobs = [o.state.to_bytes() for o in self._outputs.values()]
        header = {
            "tolerance": None if self.tolerance is None else self.tolerance.to_dict(),
            "label_output": self.label_output, "batches": self.batches,
            "outputs": [{"name": n, "candidate_name": o.candidate_name, "dtype": o.dtype,
                         "tolerance": o.tolerance.to_dict(), "nonfinite": o.nonfinite, "bytes": len(b)}
                        for (n, o), b in zip(self._outputs.items(), blobs, strict=True)],
            "labels": [[label, counts] for label, counts in self._labels.items()],
            "labelled": self._labelled, "numeric_labels": self._numeric_labels,
        }
        text = json.dumps(header).encode()
        return _MAGIC + struct.pack("<Q", len(text)) + text + b"".join(blobs)

    @staticmethod
    def from_bytes(data: bytes) -> ParityState:
        """A state from :meth:`to_bytes`; ArgumentError for other bytes.

        Example:
            >>> state = ParityState.from_bytes(blob)            # doctest: +SKIP
        """
        if not data.startswith(_MAGIC) or len(data) < len(_MAGIC) + 8:
            raise _core.ArgumentError("not a parity state (bytes from ParityState.to_bytes were expected)")
        at = len(_MAGIC)
        (size,) = struct.unpack_from("<Q", data, at)
        at += 8
        header = json.loads(data[at:at + size])
        at += size
        tol = header["tolerance"]
        state = ParityState(None if tol is None else Tolerance(**tol), label_output=header["label_output"])
        state.batches = int(header["batches"])
        for o in header["outputs"]:
            blob = data[at:at + o["bytes"]]
            at += o["bytes"]
            state._outputs[o["name"]] = _Output(_core.CompareState.from_bytes(blob), o["candidate_name"], o["dtype"],
                                                Tolerance(**o["tolerance"]), list(o["nonfinite"]))
        state._labels = {label: list(counts) for label, counts in header["labels"]}
        state._labelled = bool(header["labelled"])
        state._numeric_labels = bool(header["numeric_labels"])
        return state

    # -- read ----------------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """The outputs compared, in the order they were first added."""
        return list(self._outputs)

    def candidate_name(self, name: str) -> str:
        return self._outputs[name].candidate_name

    def dtype(self, name: str) -> np.dtype:
        return np.dtype(self._outputs[name].dtype)

    def metrics(self) -> dict[str, Metrics]:
        """Per output, the :class:`Metrics` over every row added: ``shape`` is ``(rows, ...)``
        and ``worst_index`` locates the worst element in it (its first entry is the row).

        Example:
            >>> state.metrics()["logits"].worst_index             # doctest: +SKIP
            (4031, 7)
        """
        out = {}
        for name, o in self._outputs.items():
            d = o.state.metrics()
            shape = tuple(int(s) for s in d["shape"])
            flat = int(d["worst_index"])
            idx = None
            if flat >= 0 and not d["problem"]:
                elements = int(np.prod(shape)) if shape else 1
                idx = (tuple(int(i) for i in np.unravel_index(flat, shape)) if elements > flat
                       else (int(o.state.worst_location[0]),))
            exact = bool(d["exact"])
            as_value = (lambda v: int(v)) if exact and np.dtype(o.dtype).kind in "iub" else (lambda v: float(v))
            strings = np.dtype(o.dtype) == object
            out[name] = Metrics(
                shape=shape, elements=d["elements"], exact=exact, max_abs_error=d["max_abs_error"],
                mean_abs_error=d["mean_abs_error"], max_rel_error=d["max_rel_error"], cosine=d["cosine"],
                snr_db=d["snr_db"], mismatches=d["mismatches"], nonfinite_mismatches=d["nonfinite_mismatches"],
                mismatch_fraction=d["mismatch_fraction"], worst_index=idx,
                worst_reference=None if idx is None or strings else as_value(d["worst_reference"]),
                worst_candidate=None if idx is None or strings else as_value(d["worst_candidate"]),
                required_atol=d["required_atol"], required_rtol=d["required_rtol"], ok=d["ok"], problem=d["problem"],
                tolerance=o.tolerance, reference_nan=o.nonfinite[0], reference_inf=o.nonfinite[1],
                candidate_nan=o.nonfinite[2], candidate_inf=o.nonfinite[3])
        return out

    def slices(self) -> list[SliceResult] | None:
        """Per label (sorted), the samples, top-1 agreement and, for integer class ids, each
        side's accuracy; None when no labels were given.

        Example:
            >>> [(s.label, s.top1_agreement) for s in state.slices()]   # doctest: +SKIP
            [(0, 1.0), (1, 0.98)]
        """
        if not self._labelled:
            return None
        out = []
        for label in sorted(self._labels):
            n, agree, ref_ok, cand_ok = self._labels[label]
            numeric = self._numeric_labels
            out.append(SliceResult(label, n, agree / n, ref_ok / n if numeric else None,
                                   cand_ok / n if numeric else None))
        return out
