"""tether.optimize: the graph passes compile() applies, on a copy you can inspect or save."""

from __future__ import annotations

import os

from tether._model import Model, load
from tether._native import core as _core


def optimize(model: Model | str | os.PathLike[str] | bytes) -> Model:
    """Returns an optimised copy of ``model``; the model passed in is not changed.

    The passes are those ``tt.compile(model, optimize=True)`` runs: Identity removal,
    constant folding (Shape chains over static shapes included), Conv + BatchNormalization
    folding, attention written out (MatMul, scale, mask, Softmax, MatMul) into one ``ai.tether``
    Attention node, MatMul + bias into Gemm or ``ai.tether`` FusedMatMul, a residual Add after a
    convolution into the convolution (``ai.tether`` FusedConv with a summand), activation fusion into
    ``ai.tether`` FusedConv / FusedGemm / FusedMatMul, and dead code removal. Values keep
    their names; a fused node is named after the last node it replaces, and its metadata
    ``tether.fused_from`` lists the replaced node names. The result runs on tether (the
    ``ai.tether`` ops are not standard ONNX, so onnxruntime cannot run it). Raises
    ShapeError when shape inference finds the model inconsistent.

    Example:
        >>> opt = tt.optimize(tt.load("resnet.onnx"))      # doctest: +SKIP
        >>> [n.op_type for n in opt.nodes][:3]              # doctest: +SKIP
        ['FusedConv', 'MaxPool', 'FusedConv']
        >>> opt.save("resnet.opt.onnx")                     # doctest: +SKIP
    """
    if not isinstance(model, Model):
        model = load(model)
    core, _report = _core.optimize(model._core)
    return Model(core)
