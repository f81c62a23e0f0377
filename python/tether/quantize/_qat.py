"""Quantization-aware training from a tether INT8 result: a torch module that computes, in its
forward, what tether's INT8 engine computes on the QDQ model, and the QDQ model of its trained
weights.

The prepared module quantizes as ONNX QuantizeLinear does (``x / scale`` in float32, rounded
half to even): torch's own ``fake_quantize_*`` multiplies by ``1 / scale``, which rounds a few
values in a million to the other integer. A layer whose input and output are both quantized
(tether fuses it into one integer kernel) computes its integer sums exactly and requantizes them
as the kernel does; gradients flow through the float computation (straight-through).
"""

from __future__ import annotations

import copy
import functools
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from tether._model import Model
from tether._native import core as _core

# Ops that only move or select values: their output holds values of their input, so with the
# input's parameters a quantized input gives an output quantizing to itself.
_SELECT = {"MaxPool", "GlobalMaxPool", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Slice", "Split",
           "Gather", "GatherElements", "DepthToSpace", "SpaceToDepth", "Identity"}
_GRIDS = {"int8": (-128, 127), "uint8": (0, 255)}
_INT32 = (-(2 ** 31), 2 ** 31 - 1)


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:  # torch is an optional dependency
        raise ImportError("tether.quantize.qat_prepare needs torch: pip install torch") from e
    return torch


@functools.cache
def _functions() -> tuple[Any, Any]:
    """The two autograd functions, made once torch is imported."""
    torch = _torch()

    function: Any = torch.autograd.Function

    class FakeQuantize(function):
        @staticmethod
        def forward(ctx: Any, x: Any, scale: Any, zero: Any, lo: float, hi: float) -> Any:
            q = torch.round(x / scale) + zero
            ctx.save_for_backward((q >= lo) & (q <= hi))
            return (torch.clamp(q, lo, hi) - zero) * scale

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            (inside,) = ctx.saved_tensors
            return grad * inside, None, None, None, None

    class Replace(function):
        @staticmethod
        def forward(ctx: Any, y: Any, exact: Any) -> Any:
            return exact.clone()

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return grad, None

    return FakeQuantize, Replace


def _fake_quantize(x: Any, scale: Any, zero: Any, lo: float, hi: float) -> Any:
    """ONNX QuantizeLinear then DequantizeLinear: clamp(round_half_even(x / s) + z) - z, times s,
    in float32; the gradient passes where the value is inside the grid (straight-through)."""
    return _functions()[0].apply(x, scale, zero, lo, hi)


def _replace(y: Any, exact: Any) -> Any:
    """``exact``'s values with ``y``'s gradient."""
    return _functions()[1].apply(y, exact)


def weight_scales(w: Any, per_channel: bool = True) -> Any:
    """tether's symmetric int8 weight scales per output channel (axis 0), or one per tensor:
    ``2 a / 254`` in float64 stored as float32, ``a`` the largest magnitude; 1 below the normal
    floats (``qparams_for_range`` of ``tether/quant.h``)."""
    torch = _torch()
    a = w.detach().abs().reshape(w.shape[0] if per_channel else 1, -1).amax(dim=1).double()
    s = ((a - (-a)) / 254.0).float()
    return torch.where(s.double() < float(np.finfo(np.float32).tiny), torch.ones_like(s), s)


@dataclass
class _Layer:
    node: str
    op: str
    path: str
    weight: str              # initializer names in the quantized model
    bias: str
    transposed: bool         # the model stores the module's weight transposed (MatMul)
    per_channel: bool


def _buffers(module: Any, scale: float | None, zero: int | None, dtype: str | None, prefix: str,
             tensor: str = "") -> None:
    torch = _torch()
    if scale is None:
        return
    setattr(module, f"tether_{prefix}_tensor", tensor)  # the ONNX value it stands for
    module.register_buffer(f"tether_{prefix}_scale", torch.tensor(scale, dtype=torch.float32))
    module.register_buffer(f"tether_{prefix}_zero_point", torch.tensor(float(zero or 0), dtype=torch.float32))
    setattr(module, f"tether_{prefix}_grid", _GRIDS[str(dtype)])


def _fq(module: Any, x: Any, prefix: str) -> Any:
    lo, hi = getattr(module, f"tether_{prefix}_grid")
    return _fake_quantize(x, getattr(module, f"tether_{prefix}_scale"), getattr(module, f"tether_{prefix}_zero_point"),
                          lo, hi)


def _refuse_export() -> None:
    if _torch().onnx.is_in_onnx_export():
        raise _core.UnsupportedError("a module from tether.quantize.qat_prepare computes integer arithmetic that an "
                                     "ONNX exporter would record as float ops: write its QDQ model with "
                                     "tt.quantize.qat_export(module, result, path)")


def _layer_hook(module: Any, args: tuple[Any, ...], out: Any) -> Any:
    """A quantized Conv / Linear: input, weight and bias as the QDQ model quantizes them; its
    output quantized too when the model quantizes it, with the integer kernel's exact sums."""
    torch = _torch()
    _refuse_export()
    has_in, has_out = hasattr(module, "tether_input_scale"), hasattr(module, "tether_output_scale")
    x = _fq(module, args[0], "input") if has_in else args[0]
    w = module.weight
    ws = weight_scales(w, module.tether_weight_per_channel)
    shape = (-1,) + (1,) * (w.dim() - 1)
    wq = _fake_quantize(w, ws.reshape(shape), torch.zeros((), dtype=w.dtype), -127.0, 127.0)
    b = module.bias
    bs = None
    if b is not None and has_in and module.tether_bias_quantized:
        bs = module.tether_input_scale * ws  # float32 products, as tether's quantizer forms them
        b = _fake_quantize(b, bs, torch.zeros((), dtype=b.dtype), *_INT32)
    y = module._conv_forward(x, wq, b) if hasattr(module, "_conv_forward") else torch.nn.functional.linear(x, wq, b)
    if not has_out:
        return y
    yq = _fq(module, y, "output")
    if not has_in or (b is not None and bs is None):  # a float bias: tether runs the layer in float
        return yq
    conv = hasattr(module, "_conv_forward")
    with torch.no_grad():  # the integer kernel: exact int32 sums, float32 requantization
        qx = torch.round(x / module.tether_input_scale).double()
        qw = torch.clamp(torch.round(w / ws.reshape(shape)), -127, 127).double()
        acc = module._conv_forward(qx, qw, None) if conv else torch.nn.functional.linear(qx, qw)

        def channels(t: Any) -> Any:  # along axis 1 of a convolution's output, the last of a Linear's
            return t.reshape((1, -1) + (1,) * (acc.dim() - 2)) if conv else t

        if bs is not None:
            acc = acc + channels(torch.round(b / bs).double())
        m = (module.tether_input_scale * ws) / module.tether_output_scale
        v = acc.float() * channels(m)
        lo, hi = module.tether_output_grid
        z = module.tether_output_zero_point
        exact = torch.round(torch.clamp(v, lo - z, hi - z)) * module.tether_output_scale  # (q - z) * s
    return _replace(yq, exact)


def _output_hook(module: Any, args: tuple[Any, ...], out: Any) -> Any:
    _refuse_export()
    return _fq(module, out, "output")


class _Graph:
    """The float model's nodes, who writes and reads each value, and each node's torch module."""

    def __init__(self, result: Any) -> None:
        from tether.parity._provenance import node_origins

        self.model: Model = result.float_model
        self.nodes = {n.name: n for n in self.model.nodes}
        self.producer = {o: n for n in self.model.nodes for o in n.outputs if o}
        self.readers: dict[str, list[Any]] = {}
        for n in self.model.nodes:
            for i in n.inputs:
                self.readers.setdefault(i, []).append(n)
        self.outputs = {v.name for v in self.model.outputs}
        try:
            self.origins = {k: o.module for k, o in node_origins(self.model).items()}
        except (OSError, ValueError):
            self.origins = {}

    def returned_by(self, value: str) -> str | None:
        """The module whose forward returns ``value`` (its nodes write it and read it nowhere)."""
        n = self.producer.get(value)
        path = None if n is None else self.origins.get(n.name)
        if not path:
            return None
        inside = [m for m in self.model.nodes if (self.origins.get(m.name) or "") in (path,) or
                  (self.origins.get(m.name) or "").startswith(path + ".")]
        return None if any(value in m.inputs for m in inside) else path


def _weight_layers(result: Any, g: _Graph, mods: dict[str, Any]) -> list[_Layer]:
    torch = _torch()
    layers = []
    for p in result.plan.nodes:
        if not p.weight:
            continue
        path = g.origins.get(p.node) or (p.weight[: -len(".weight")] if p.weight.endswith(".weight") else "")
        m = mods.get(path)
        what = f"node '{p.node}' ({p.op_type}, weight '{p.weight}')"
        if m is None:
            raise _core.ArgumentError(f"qat_prepare: {what}: no module of the torch module computes it (the node's "
                                      "export metadata names none, and no module holds a parameter of that name)")
        ok = isinstance(m, torch.nn.Linear | torch.nn.Conv1d | torch.nn.Conv2d | torch.nn.Conv3d)
        if not ok or getattr(m, "padding_mode", "zeros") != "zeros":
            raise _core.ArgumentError(f"qat_prepare: {what} comes from module '{path}' ({type(m).__name__}); "
                                      "quantization-aware training takes Linear and Conv1d/2d/3d with zero padding")
        w = m.weight.detach().cpu().numpy()
        ref = result.float_model.initializer(p.weight)
        transposed = w.ndim == 2 and ref.shape == w.T.shape and not np.array_equal(ref, w) and np.array_equal(ref, w.T)
        if not (np.array_equal(ref, w) or transposed):
            raise _core.ArgumentError(f"qat_prepare: {what}: module '{path}' holds another weight than the quantized "
                                      "model (a BatchNormalization folded into it, cross-layer equalization, or "
                                      "another checkpoint); prepare the module the result was quantized from, with "
                                      "BatchNorm fused into its convolutions")
        q = result.scales.get(p.weight)
        axis_ok = q is not None and (q.axis is None or q.axis == (1 if transposed else 0))
        per_channel = q is not None and q.axis is not None
        if q is None or q.dtype != "int8" or np.any(q.zero_point != 0) or not axis_ok or not np.array_equal(
                q.scale.ravel(), weight_scales(m.weight, per_channel).numpy()):
            raise _core.ArgumentError(f"qat_prepare: {what}: its scales are not tether's symmetric int8 ones per "
                                      "output channel or per tensor of this weight; quantize with the default "
                                      "weight options")
        layers.append(_Layer(p.node, p.op_type, path, p.weight, p.bias if p.bias in result.scales else "", transposed,
                             per_channel))
    return layers


def _act(result: Any, name: str) -> tuple[float, int, str] | None:
    q = result.scales.get(name)
    if q is None or q.axis is not None or q.dtype not in _GRIDS:
        return None
    return float(q.scale[0]), int(q.zero_point[0]), q.dtype


def qat_prepare(module: Any, result: Any) -> Any:
    """A copy of ``module`` whose forward computes what tether's INT8 engine computes on
    ``result.model``, for quantization-aware training seeded from tether's calibration.

    ``result`` is the :class:`QuantizeResult` of ``module``'s export (``tt.export.torch`` with
    the dynamo exporter records which module wrote each node; weights are matched by node and
    by parameter name). Each quantized Conv / Gemm / MatMul comes from an ``nn.Linear`` or
    ``nn.Conv1d/2d/3d``, which then, in a forward hook: quantizes its input at tether's scale and
    zero point (fixed), its weight per output channel (or per tensor, as the result does) at
    ``max|w| / 127`` of the current weight (tether's rule, so the scale follows training), its
    bias to int32 at ``input_scale * weight_scale``, and its output at tether's parameters; a
    Relu reading only that output is covered (``relu(Q(y)) = Q(relu(y))``). Where input and
    output are both quantized, the
    output's integers are those of tether's integer kernel (exact int32 sums, requantized by
    ``float32(sum) * (s_x * s_w / s_y)`` rounded half to even). Quantization is ONNX's: ``x /
    scale`` rounded half to even (torch's ``fake_quantize_*`` multiplies by the reciprocal and
    differs on a few values in a million). Gradients are straight-through, zero outside the grid.
    Each hook's parameters are buffers of its module (``tether_input_scale``,
    ``tether_output_zero_point``, ...; ``tether_output_tensor`` names the ONNX value). An ONNX
    export of the prepared module raises UnsupportedError: :func:`qat_export` writes its model.

    Raises ArgumentError naming what cannot be mapped: a quantized node with no module, a module
    that is not Linear / Conv, a weight that differs from the model's (BatchNorm folded,
    equalization), a weight grid other than symmetric int8, or a quantized activation that no layer writes
    or reads (an Add, a pooling average, a graph input read by a non-weight node).

    Example:
        >>> res = tt.quantize.static("net.onnx", x_calib)                    # doctest: +SKIP
        >>> qat = tt.quantize.qat_prepare(net, res)                          # doctest: +SKIP
        >>> train(qat, steps=200)                                            # doctest: +SKIP
        >>> tt.quantize.qat_export(qat, res, "net.qat.int8.onnx")            # doctest: +SKIP
    """
    torch = _torch()
    if not isinstance(module, torch.nn.Module):
        raise _core.ArgumentError(f"qat_prepare: module must be a torch.nn.Module, got {type(module).__name__}")
    if result.plan is None or not result.quantized:
        raise _core.ArgumentError("qat_prepare: the result quantizes nothing (every node stayed in float)")
    g = _Graph(result)
    qat = copy.deepcopy(module)
    mods = dict(qat.named_modules())
    layers = _weight_layers(result, g, mods)
    by_node = {la.node: la for la in layers}
    planned = {t.name for t in result.plan.tensors}
    acts = {t: a for t in planned if (a := _act(result, t)) is not None}
    visible: set[str] = set()  # tensors every reader sees quantized
    for la in layers:
        x = g.nodes[la.node].inputs[0]
        scale, zero, dtype = acts.get(x) or (None, None, None)
        _buffers(mods[la.path], scale, zero, dtype, "input", x)
        mods[la.path].tether_bias_quantized = bool(la.bias)  # tether keeps a bias float in rare cases
        mods[la.path].tether_weight_per_channel = la.per_channel
    quantized = {p.node for p in result.plan.nodes}
    raw = _float_readers(result.model)
    layer_paths = {la.path for la in layers}
    for node in g.model.nodes:  # topological: a producer's coverage is known before its readers'
        for t in node.outputs:
            if t not in acts or t in visible:
                continue
            path = _output_module(t, g, by_node)
            if path and path in mods and not raw.get(t):
                m = mods[path]
                if hasattr(m, "tether_output_scale") and _params_of(m, "output") != acts[t]:
                    raise _core.ArgumentError(_unmapped(t, node, g))
                if not hasattr(m, "tether_output_scale"):
                    _buffers(m, *acts[t], "output", t)
                    if path not in layer_paths:
                        m.register_forward_hook(_output_hook)
                visible.add(t)
                continue
            src = node.inputs[0] if node.inputs else ""
            if node.op_type in _SELECT and src in visible and acts.get(src) == acts[t]:
                visible.add(t)
                continue
            if _read_by_layers_only(t, g, by_node, quantized):
                continue
            raise _core.ArgumentError(_unmapped(t, node, g))
    for t in acts:
        if t not in g.producer and not _read_by_layers_only(t, g, by_node, quantized):
            others = [r.name for r in g.readers.get(t, []) if r.name in quantized and r.name not in by_node]
            raise _core.ArgumentError(f"qat_prepare: graph input '{t}' is quantized for {others}, which no Linear or "
                                      "Conv module computes; its quantization cannot be placed in the module")
    _check_parameters(qat, layers, result.model)
    for la in layers:
        mods[la.path].register_forward_hook(_layer_hook)
    qat._tether_qat_layers = layers
    return qat


def _check_parameters(module: Any, layers: list[_Layer], model: Model) -> None:
    """Every trainable parameter must reach the exported model: as a quantized layer's weight or
    bias, or as an initializer of its own name."""
    owned = {f"{la.path}.{p}" if la.path else p for la in layers for p in ("weight", "bias")}
    names = set(model.initializer_names)
    lost = [n for n, p in module.named_parameters() if p.requires_grad and n not in owned and n not in names]
    if lost:
        raise _core.ArgumentError(f"qat_prepare: {len(lost)} trainable parameters are neither a quantized layer's "
                                  f"weight nor an initializer of the quantized model by name, so qat_export could "
                                  f"not write their trained values: {lost[:10]}")


def _params_of(module: Any, prefix: str) -> tuple[float, int, str]:
    lo, hi = getattr(module, f"tether_{prefix}_grid")
    dtype = next(k for k, v in _GRIDS.items() if v == (lo, hi))
    return (float(getattr(module, f"tether_{prefix}_scale")), int(getattr(module, f"tether_{prefix}_zero_point")),
            dtype)


def _float_readers(model: Model) -> dict[str, list[str]]:
    """Per value, the nodes of the QDQ model that read it unquantized (and "graph output")."""
    out: dict[str, list[str]] = {}
    for n in model.nodes:
        if n.op_type != "QuantizeLinear":
            for i in n.inputs:
                out.setdefault(i, []).append(n.name)
    for v in model.outputs:
        out.setdefault(v.name, []).append("graph output")
    return out


def _read_by_layers_only(t: str, g: _Graph, by_node: dict[str, _Layer], quantized: set[str]) -> bool:
    """Whether every node reading ``t`` quantized is a layer that quantizes it as its input."""
    readers = [r for r in g.readers.get(t, []) if r.name in quantized]
    return bool(readers) and all(r.name in by_node and r.inputs[0] == t for r in readers)


def _output_module(t: str, g: _Graph, by_node: dict[str, _Layer]) -> str | None:
    """The module whose output hook quantizes ``t``: the module returning it, or the layer whose
    output only a Relu reads when ``t`` is that Relu's output (the Relu commutes with it)."""
    node = g.producer[t]
    if t in g.outputs:
        return None
    if node.name in by_node:
        return by_node[node.name].path if g.returned_by(t) in (None, by_node[node.name].path) else None
    if node.op_type == "Relu":
        u = node.inputs[0]
        inner = g.producer.get(u)
        if inner is not None and inner.name in by_node and len(g.readers.get(u, [])) == 1 and u not in g.outputs:
            return by_node[inner.name].path
    path = g.returned_by(t)
    return path or None


def _unmapped(t: str, node: Any, g: _Graph) -> str:
    where = g.origins.get(node.name)
    return (f"qat_prepare: activation '{t}' (written by node '{node.name}', {node.op_type}"
            + (f", in module '{where}'" if where else ", in no submodule: a function call in a forward()") +
            ") is quantized, but no module returns it and no Linear / Conv writes it: its fake quantization "
            "cannot be placed; make the op a submodule of its own, or keep the node in float "
            "(exclude_nodes=[...])")


def qat_export(module: Any, result: Any, path: str | os.PathLike[str] | None = None) -> Model:
    """The QDQ model of a module from :func:`qat_prepare`, after training: ``result.model`` with
    each quantized layer's weight re-quantized from the module (int8 per output channel at
    ``max|w| / 127``, by tether's own quantizer) and its bias to int32 at ``input_scale *
    weight_scale``; activation parameters stay tether's (the module keeps them fixed), and every
    other weight of the model that is a parameter of the module (by name) takes its trained
    value. Written to ``path`` when given.

    Example:
        >>> m = tt.quantize.qat_export(qat, res, "net.qat.int8.onnx")      # doctest: +SKIP
        >>> tt.compile(m).run({"x": x})                                    # doctest: +SKIP
    """
    import onnx
    from onnx import numpy_helper

    layers = getattr(module, "_tether_qat_layers", None)
    if layers is None:
        raise _core.ArgumentError("qat_export: the module was not made by tether.quantize.qat_prepare")
    proto = onnx.load_from_string(result.model.to_bytes())
    inits = {i.name: i for i in proto.graph.initializer}
    producer = {o: n for n in proto.graph.node for o in n.output}
    nodes = {n.name: n for n in proto.graph.node}
    mods = dict(module.named_modules())

    def put(name: str, value: np.ndarray) -> None:
        old = inits[name]
        old.CopyFrom(numpy_helper.from_array(value.astype(numpy_helper.to_array(old).dtype).reshape(old.dims), name))

    for la in layers:
        m = mods[la.path]
        w = m.weight.detach().cpu().numpy().astype(np.float32)
        scale, _ = _core.quant_weight_qparams(w, 0 if la.per_channel else -1, "int8", True)
        q = np.clip(np.rint(w / scale.reshape((-1,) + (1,) * (w.ndim - 1))), -127, 127)
        dq = producer[nodes[la.node].input[1]]
        put(dq.input[0], q.T if la.transposed else q)
        put(dq.input[1], scale)
        if la.bias and m.bias is not None:
            bdq = producer[nodes[la.node].input[2]]
            in_scale = np.float32(m.tether_input_scale.item())
            bs = (in_scale * scale).astype(np.float32)
            qb = np.clip(np.rint(m.bias.detach().cpu().numpy().astype(np.float32) / bs), *_INT32)
            put(bdq.input[0], qb)
            put(bdq.input[1], bs)
    params = dict(module.named_parameters())
    for name, init in inits.items():
        if name in params and tuple(params[name].shape) == tuple(init.dims):
            put(name, params[name].detach().cpu().numpy().astype(np.float32))
    from tether._model import load

    out = load(proto.SerializeToString())
    if path is not None:
        out.save(path)
    return out
