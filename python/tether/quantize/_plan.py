"""Profiles, options, prepare() and plan(): where a QDQ model puts its QuantizeLinear/DequantizeLinear."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tether._model import Model
from tether._native import core as _core

_GRID_KEYS = ("dtype", "symmetric", "reduce_range")


def profiles() -> list[str]:
    """The named conventions: ``"onnxruntime"``, ``"tensorrt"``, ``"ncnn"``.

    Example:
        >>> tt.quantize.profiles()
        ['onnxruntime', 'tensorrt', 'ncnn']
    """
    return list(_core.quant_profile_names())


def profile_options(profile: str = "onnxruntime") -> dict[str, Any]:
    """The options a profile stands for: activation and weight grids (dtype, symmetric,
    reduce_range), per_channel, quantize_bias, quantize_outputs, op_types.

    Example:
        >>> tt.quantize.profile_options("tensorrt")["activations"]
        {'dtype': 'int8', 'symmetric': True, 'reduce_range': False}
    """
    return dict(_core.quant_profile_options(profile))


def make_options(profile: str = "onnxruntime", overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The profile's options with ``overrides`` applied (same keys; grids may be partial), checked.

    Example:
        >>> make_options("onnxruntime", {"activations": {"dtype": "uint8"}})["activations"]["dtype"]
        'uint8'
    """
    known = set(profile_options(profile)) | {"profile"}
    given = dict(overrides or {})
    unknown = sorted(set(given) - known)
    if unknown:
        raise _core.ArgumentError(f"unknown quantization options {unknown}; known: {sorted(known)}")
    for key in ("activations", "weights"):
        if key in given:
            bad = sorted(set(given[key]) - set(_GRID_KEYS))
            if bad:
                raise _core.ArgumentError(f"unknown {key} options {bad}; known: {list(_GRID_KEYS)}")
    return dict(_core.quant_options({"profile": profile, **given}))


def prepare(model: Model) -> Model:
    """A copy of ``model`` simplified in standard ONNX before quantization: nodes named,
    Identity removed, constants folded, BatchNormalization folded into the conv before it,
    shapes inferred. Value names stay.

    Example:
        >>> float_model = tt.quantize.prepare(tt.load("model.onnx"))   # doctest: +SKIP
    """
    return Model(_core.quant_prepare(model._core))


def plan(prepared: Model, options: Mapping[str, Any]) -> _core.Plan:
    """Which tensors get Q/DQ (``plan.tensors``, with the groups sharing parameters) and which
    nodes are quantized (``plan.nodes``, with weight and bias), for ``options``
    (:func:`make_options`).

    Example:
        >>> p = plan(prepare(model), make_options("tensorrt"))          # doctest: +SKIP
        >>> [n.node for n in p.nodes][:2]                               # doctest: +SKIP
        ['conv1', 'conv2']
    """
    return _core.quant_plan(prepared._core, dict(options))


def exclusions(options: Mapping[str, Any], nodes: Sequence[str]) -> dict[str, Any]:
    """``options`` with ``nodes`` added to the nodes kept in float."""
    out = dict(options)
    out["exclude_nodes"] = list(dict.fromkeys([*options.get("exclude_nodes", []), *nodes]))
    return out
