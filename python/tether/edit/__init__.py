"""tether.edit: change a model's interface or form without changing what it computes.

Each edit returns a new :class:`tether.Model` (save it with ``Model.save``); :func:`check`
shows by parity that the edited model computes what the original did. ``tether edit`` is the
command line for the same calls.

Example:
    >>> import tether as tt
    >>> m = tt.load("model.onnx")                                       # doctest: +SKIP
    >>> e = tt.edit.fix_inputs(m, {"x": [1, 3, 224, 224]})              # doctest: +SKIP
    >>> e = tt.edit.rename(tt.edit.simplify(e), {"x": "image"})         # doctest: +SKIP
    >>> tt.edit.check(m, e, renames={"x": "image"}).ok                  # doctest: +SKIP
    True
    >>> e.save("model.fixed.onnx")                                      # doctest: +SKIP
"""

from tether.edit._check import check
from tether.edit._edits import convert_opset, fix_inputs, rename
from tether.edit._extract import extract
from tether.edit._simplify import simplify

__all__ = ["check", "convert_opset", "extract", "fix_inputs", "rename", "simplify"]
