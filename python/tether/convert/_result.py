"""The result of a half precision conversion."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tether._model import Model


@dataclass
class ConvertResult:
    """A converted model and what the conversion decided.

    ``kept`` maps each node left in float32 to why (a block list, an op ONNX defines no half
    form of, an overflow or the error budget); ``notes`` name clamped constants and a budget not
    met. ``error_before`` and ``error_after`` (automatic mode only) are the largest relative
    error over the outputs with nothing but the block lists kept, and with ``kept``.

    Example:
        >>> res = tt.convert.float16(model, batches=x, max_error=1e-2)   # doctest: +SKIP
        >>> res.kept                                                    # doctest: +SKIP
        {'logits_mm': "overflow: output 'logits' reaches |x| = 1.3e+05 in float32"}
        >>> res.save("model.fp16.onnx")                                 # doctest: +SKIP
    """

    model: Model
    dtype: str
    kept: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    error_before: float | None = None
    error_after: float | None = None
    max_error: float | None = None

    @property
    def ok(self) -> bool:
        """True unless a budget was given and the converted model misses it."""
        return self.max_error is None or (self.error_after is not None and self.error_after <= self.max_error)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes the converted model as ONNX."""
        self.model.save(path)

    def __str__(self) -> str:
        lines = [f"{self.dtype} conversion: {len(self.kept)} node(s) kept in float32"]
        if self.max_error is not None:
            lines.append(f"relative error on the outputs: {self.error_before:.3g} before, "
                         f"{self.error_after:.3g} after (budget {self.max_error:.3g}: "
                         f"{'met' if self.ok else 'NOT met'})")
        lines += [f"  kept {name}: {why}" for name, why in self.kept.items()]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)
