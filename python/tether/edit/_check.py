"""check: parity of an edited model against the original, where the edit keeps the function."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tether._native import core as _core
from tether.edit._proto import ModelSource, as_model
from tether.parity._compare import compare
from tether.parity._inputs import Feeds, generate_inputs
from tether.parity._metrics import Tolerance
from tether.parity._report import ParityReport
from tether.parity._runners import CallableRunner, OnnxRuntimeRunner, TetherRunner
from tether.parity._types import InputSpec


def _runner(model: ModelSource, runner: str, name: str, device: str,
            threads: int | None) -> TetherRunner | OnnxRuntimeRunner:
    if runner == "tether":
        return TetherRunner(model, name, device=device, threads=threads)
    if runner == "onnxruntime":
        return OnnxRuntimeRunner(model, name, threads=threads)
    raise _core.ArgumentError(f"runner {runner!r}: use 'tether' or 'onnxruntime'")


def _feeds(orig: list[InputSpec], edit: dict[str, InputSpec], back: Mapping[str, str],
           dims: Mapping[str, int] | None, seed: int) -> Feeds:
    """Inputs for the original: of the edited model's shapes where it takes the same input, and
    its symbols' sizes where it fixed them."""
    sizes: dict[str, int] = {}
    specs = []
    for s in orig:
        e = next((edit[k] for k, v in back.items() if v == s.name and k in edit), None)
        if e is not None and s.shape is not None and e.shape is not None and len(s.shape) == len(e.shape):
            sizes.update({d: n for d, n in zip(s.shape, e.shape, strict=True)
                          if isinstance(d, str) and isinstance(n, int)})
            specs.append(InputSpec(s.name, s.dtype, e.shape))
        else:
            specs.append(s)
    specs = [InputSpec(s.name, s.dtype, None if s.shape is None else tuple(sizes.get(d, d) if isinstance(d, str)
                                                                             else d for d in s.shape))
             for s in specs]
    return generate_inputs(specs, seed=seed, dims=dims)[0]


def check(original: ModelSource, edited: ModelSource, *, renames: Mapping[str, str] | None = None,
          runner: str = "tether", device: str = "cpu", threads: int | None = None, seed: int = 0,
          dims: Mapping[str, int] | None = None, tolerance: Tolerance | str | None = None) -> ParityReport:
    """Shows by parity that ``edited`` computes what ``original`` computes.

    Inputs are generated for the original with ``seed`` (an input the edited model also takes
    gets the edited model's shape, so fixed dims are exercised; ``dims`` sizes the symbols
    left). The original runs once; each input of the edited model is fed the original's value
    of that name (an intermediate, for an extracted subgraph), and each output of the edited
    model is compared with the original's value of that name. ``renames`` (``{old: new}``,
    as given to :func:`rename`) maps the names. Both models run on ``runner`` (``"tether"`` on
    ``device``, or ``"onnxruntime"``).

    Raises:
        ArgumentError: a name of the edited model that the original does not compute, or a bad
            ``runner`` or ``dims``.

    Example:
        >>> fixed = tt.edit.fix_inputs("m.onnx", {"x": [2, 3, 32, 32]})   # doctest: +SKIP
        >>> rep = tt.edit.check("m.onnx", fixed)                          # doctest: +SKIP
        >>> rep.ok                                                         # doctest: +SKIP
        True
    """
    orig_model, edit_model = as_model(original), as_model(edited)
    back = {new: old for old, new in (renames or {}).items()}
    engine = f"tether {device}" if runner == "tether" else runner
    ref = _runner(orig_model, runner, f"{engine}: original", device, threads)
    cand = _runner(edit_model, runner, f"{engine}: edited", device, threads)
    edit_specs = {s.name: s for s in cand.input_specs()}
    for name in edit_specs:
        back.setdefault(name, name)
    for name in cand.output_names():
        back.setdefault(name, name)
    feeds = _feeds(ref.input_specs(), edit_specs, back, dims, seed)
    wanted = [back[n] for n in (*edit_specs, *cand.output_names()) if back[n] not in feeds]
    known = set(ref.output_names()) | {o for n in orig_model.nodes for o in n.outputs if o}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise _core.ArgumentError(f"check: the original model has no value '{unknown[0]}' (a name of the edited "
                                  "model); pass renames= when names were changed")
    values: dict[str, np.ndarray] = dict(feeds)
    inside = [n for n in wanted if n not in ref.output_names()]
    if isinstance(ref, TetherRunner) and inside:
        ref = ref.keeping(inside)
    values.update(ref.intermediates(feeds, wanted) if inside else ref.run(feeds))
    edit_feeds = {n: values[back[n]] for n in edit_specs}
    expected = {n: values[back[n]] for n in cand.output_names()}
    reference = CallableRunner(lambda **_: expected, list(expected), ref.name)
    return compare(reference, cand, edit_feeds, tolerance=tolerance)
