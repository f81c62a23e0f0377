"""The small types every part of the parity toolkit shares: input specs and the Runner protocol."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

Dim = int | str | None


@dataclass(frozen=True)
class InputSpec:
    """Name, numpy dtype and shape of one input a runner takes. A dim is an int, a symbol
    (``"batch"``) or None (unknown).

    Example:
        >>> InputSpec("x", np.dtype("float32"), ("batch", 3, 32, 32)).rank
        4
    """

    name: str
    dtype: np.dtype
    shape: tuple[Dim, ...] | None

    @property
    def rank(self) -> int | None:
        """The number of dims, or None when the rank is unknown."""
        return None if self.shape is None else len(self.shape)


@runtime_checkable
class Runner(Protocol):
    """Anything that maps named numpy inputs to named numpy outputs.

    ``name`` labels it in reports; ``input_specs()`` says what it takes (may be empty when it
    cannot tell); ``run(feeds)`` returns outputs by name.

    Example:
        >>> class Doubler:
        ...     name = "doubler"
        ...     def input_specs(self): return [InputSpec("x", np.dtype("float32"), (4,))]
        ...     def run(self, feeds): return {"y": feeds["x"] * 2}
        >>> isinstance(Doubler(), Runner)
        True
    """

    name: str

    def input_specs(self) -> list[InputSpec]: ...

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...
