"""Where a node came from in the torch program: the module path and the source line that the
dynamo exporter (``torch.onnx.export(..., dynamo=True)``) records in each node's metadata."""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from typing import Any

from tether._model import Model
from tether._native import core as _core
from tether._regular_file import open_regular

_SCOPES = "pkg.torch.onnx.name_scopes"
_CLASSES = "pkg.torch.onnx.class_hierarchy"
_STACK = "pkg.torch.onnx.stack_trace"
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
# Frames inside torch itself say how an op is implemented, not where the user's model calls it.
_TORCH_DIR = os.sep + "torch" + os.sep


@dataclass(frozen=True)
class NodeOrigin:
    """The torch module that produced an ONNX node and the line of the user's code that called it.

    ``module`` is the attribute path from the root module (``"layer1.0.conv1"``; ``""`` for the
    root itself), ``module_class`` its class (``"torch.nn.modules.conv.Conv2d"``), ``file`` and
    ``line`` the innermost frame of the recorded stack outside torch's own sources.

    Example:
        >>> NodeOrigin("fc1", "torch.nn.modules.linear.Linear", "model.py", 13).label
        'fc1 (Linear)'
    """

    module: str
    module_class: str = ""
    file: str = ""
    line: int = 0
    #: Every enclosing module's path, from the root's ``""`` to ``module``.
    modules: tuple[str, ...] = ()
    #: The class of each module in ``modules``.
    classes: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``"path (Class)"``, or ``"root (Class)"`` for the root module."""
        cls = self.module_class.rsplit(".", 1)[-1]
        if not cls:
            return self.module or "root"
        return f"{self.module or 'root'} ({cls})"

    @property
    def source(self) -> str:
        """``"file.py:13"`` (the file's base name), or ``""`` when no stack was recorded."""
        return f"{os.path.basename(self.file)}:{self.line}" if self.file else ""

    def to_dict(self) -> dict[str, Any]:
        """The origin as JSON-able data, with the full file path."""
        return {"module": self.module, "module_class": self.module_class, "file": self.file, "line": self.line,
                "modules": list(self.modules)}


def _list(text: str) -> list[str]:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return []
    return [str(v) for v in value] if isinstance(value, list | tuple) else []


def _user_frame(stack: str) -> tuple[str, int]:
    frames = [(f, int(n)) for f, n, _ in _FRAME.findall(stack)]
    user = [fr for fr in frames if _TORCH_DIR not in fr[0]]
    return (user or frames or [("", 0)])[-1]


def origin_of(props: dict[str, str]) -> NodeOrigin | None:
    """The origin recorded in one node's metadata_props, or None when the exporter recorded none.

    Example:
        >>> origin_of({"pkg.torch.onnx.name_scopes": "['', 'fc1', 'linear']",
        ...            "pkg.torch.onnx.class_hierarchy": "['M', 'torch.nn.modules.linear.Linear', 'aten.linear']",
        ...            "pkg.torch.onnx.stack_trace": 'File "m.py", line 9, in forward'}).source
        'm.py:9'
    """
    scopes = _list(props.get(_SCOPES, ""))
    if not scopes and _STACK not in props:
        return None
    classes = _list(props.get(_CLASSES, ""))
    # One scope per module from the root (each the module's full attribute path, the root's
    # empty), then the traced call itself (an aten op).
    modules = scopes[:-1] if len(scopes) > 1 else scopes
    path = modules[-1] if modules else ""
    cls = classes[len(modules) - 1] if 0 < len(modules) <= len(classes) else ""
    file, line = _user_frame(props.get(_STACK, ""))
    return NodeOrigin(path, cls, file, line, tuple(modules), tuple(classes[:len(modules)]))


def node_origins(model: Model) -> dict[str, NodeOrigin]:
    """Node name -> :class:`NodeOrigin` for every node of the main graph whose metadata holds
    the dynamo exporter's records (empty for models from other exporters).

    Example:
        >>> node_origins(tt.load("mlp.onnx"))["node_MatMul_1"].label      # doctest: +SKIP
        'fc1 (Linear)'
    """
    import onnx

    if model.path and os.path.isfile(model.path):
        with open_regular(model.path, what="model file", error=_core.ModelError) as f:
            proto = onnx.load(f, load_external_data=False)
    else:
        proto = onnx.load_from_string(model.to_bytes())
    out = {}
    for k, node in enumerate(proto.graph.node):
        origin = origin_of({p.key: p.value for p in node.metadata_props})
        if origin is not None:
            out[node.name or (node.output[0] if node.output else f"#{k}")] = origin
    return out
