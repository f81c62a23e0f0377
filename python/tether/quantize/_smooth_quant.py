"""SmoothQuant (Xiao et al., "SmoothQuant: Accurate and Efficient Post-Training Quantization for
Large Language Models", 2022): a few activation channels with outliers ruin a per-tensor INT8
scale, while weights are easy to quantize. For ``Y = X W`` (X ``[..., K]``, W ``[K, N]``),
``Y = (X / s) (s W)`` for any per-input-channel ``s > 0``; choosing
``s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)`` moves part of each outlier's range into the
weights.

``X / s`` is folded into the LayerNormalization that produces X (its scale and bias divided by
``s``) when every reader of X is a smoothed MatMul/Gemm; otherwise a ``Mul`` by ``1 / s`` is
inserted before the readers, and kept in float (it is excluded from quantization, since
quantizing its input would quantize the outliers again).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tether._model import Model, Node
from tether._native import core as _core
from tether.quantize._equalize import _Graph

#: The grid searched when ``smooth_quant_alpha="search"``.
ALPHA_GRID = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)


@dataclass
class _Group:
    """An activation ``x`` and the MatMul/Gemm nodes that read it with a constant weight: they
    share one ``s``."""

    x: str
    readers: list[Node]
    weights: list[str]  # per reader, its weight initializer
    k_axis: list[int]  # per reader, the weight axis of X's channels
    x_max: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)


def _reader_weight(n: Node, x: str, graph: _Graph) -> tuple[str, int] | None:
    """(weight initializer, axis of its input channels) when ``n`` computes ``x @ W`` with a
    float32 2-D weight held by this node alone; else None."""
    if n.domain not in ("", "ai.onnx") or len(n.inputs) < 2 or n.inputs[0] != x or n.inputs[1] not in graph.single_use:
        return None
    w = graph.model.initializer(n.inputs[1])
    if w.dtype != np.float32 or w.ndim != 2:
        return None
    if n.op_type == "MatMul":
        return n.inputs[1], 0
    if n.op_type == "Gemm" and not n.attributes.get("transA", 0):
        return n.inputs[1], 1 if n.attributes.get("transB", 0) else 0
    return None


def find_groups(model: Model) -> list[_Group]:
    """Each activation read by at least one smoothable MatMul/Gemm, in graph order."""
    graph = _Graph(model)
    groups: dict[str, _Group] = {}
    for n in graph.nodes:
        if n.op_type not in ("MatMul", "Gemm") or not n.inputs or n.inputs[0] in graph.inits:
            continue
        rw = _reader_weight(n, n.inputs[0], graph)
        if rw is None:
            continue
        g = groups.setdefault(n.inputs[0], _Group(n.inputs[0], [], [], []))
        g.readers.append(n)
        g.weights.append(rw[0])
        g.k_axis.append(rw[1])
    return list(groups.values())


def observe_maxima(model: Model, groups: list[_Group], batches: Iterable[dict[str, np.ndarray]],
                   threads: int | None = None) -> None:
    """Per group, ``max|X_j|`` over every calibration row (exact whatever the batching)."""
    from tether._session import compile as compile_model

    feeds_names = {i.name for i in model.inputs}
    wanted = sorted({g.x for g in groups} - feeds_names)
    sess = compile_model(model, threads=threads, keep=wanted)
    for feeds in batches:
        _, values = sess._core.run_capture(dict(feeds), wanted)
        got = {**dict(values), **feeds}
        for g in groups:
            x = np.abs(np.asarray(got[g.x], np.float64))
            m = x.reshape(-1, x.shape[-1]).max(axis=0) if x.size else np.zeros(x.shape[-1])
            g.x_max = m if g.x_max is None else np.maximum(g.x_max, m)


def scales(x_max: np.ndarray, w_max: np.ndarray, alpha: float) -> np.ndarray:
    """``s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)``; channels where either is zero or not
    finite keep ``s_j = 1``."""
    s = np.ones_like(x_max, dtype=np.float64)
    ok = np.isfinite(x_max) & np.isfinite(w_max) & (x_max > 0) & (w_max > 0)
    s[ok] = x_max[ok] ** alpha / w_max[ok] ** (1.0 - alpha)
    return s


def _w_max(model: Model, g: _Group) -> np.ndarray:
    """Per input channel, the largest weight magnitude over every reader's weight."""
    parts = [np.abs(np.moveaxis(model.initializer(w).astype(np.float64), a, 0)).max(axis=1)
             for w, a in zip(g.weights, g.k_axis, strict=True)]
    return np.max(np.stack(parts), axis=0)


def _foldable_norm(graph: _Graph, g: _Group, k: int) -> Node | None:
    """The LayerNormalization producing ``g.x`` over its last axis alone, with its own float32
    scale and bias of ``k`` values, when every reader of ``g.x`` is in ``g`` and it is no graph
    output."""
    if g.x in graph.outputs or len(graph.readers.get(g.x, [])) != len(g.readers):
        return None
    for n in graph.nodes:
        if g.x in n.outputs:
            if (n.op_type != "LayerNormalization" or n.domain not in ("", "ai.onnx") or n.outputs[0] != g.x
                    or int(n.attributes.get("axis", -1)) not in (-1,) or len(n.inputs) < 3):
                return None
            ok = all(p in graph.single_use and graph.model.initializer(p).dtype == np.float32
                     and graph.model.initializer(p).shape == (k,) for p in n.inputs[1:3])
            return n if ok else None
    return None


def smooth(model: Model, groups: list[_Group],
           alpha: float) -> tuple[Model, list[str], list[str], dict[str, np.ndarray]]:
    """The smoothed model, the inserted Mul nodes (to keep in float), notes, and ``s`` per
    activation."""
    import onnx
    from onnx import numpy_helper

    from tether.edit._proto import from_proto, to_proto

    graph = _Graph(model)
    proto = to_proto(model)
    inits = {t.name: t for t in proto.graph.initializer}
    changed: dict[str, np.ndarray] = {}
    inserted: list[str] = []
    notes: list[str] = []
    used = {v for n in model.nodes for v in (*n.inputs, *n.outputs)} | set(model.initializer_names)
    all_s: dict[str, np.ndarray] = {}
    for g in groups:
        if g.x_max is None:
            continue
        s = scales(g.x_max, _w_max(model, g), alpha)
        all_s[g.x] = s
        for w, a in zip(g.weights, g.k_axis, strict=True):
            shape = (-1, 1) if a == 0 else (1, -1)
            changed[w] = model.initializer(w).astype(np.float64) * s.reshape(shape)
        norm = _foldable_norm(graph, g, s.size)
        if norm is not None:
            for p in norm.inputs[1:3]:
                changed[p] = model.initializer(p).astype(np.float64) / s
            notes.append(f"smooth quant: '{g.x}' smoothed into LayerNormalization '{norm.name}' for "
                         f"{[r.name for r in g.readers]}")
            continue
        base = f"{g.x}_smooth"
        while base in used or f"{base}_scale" in used or f"{base}_out" in used:
            base += "_"
        used.update((base, f"{base}_scale", f"{base}_out"))
        proto.graph.initializer.append(numpy_helper.from_array((1.0 / s).astype(np.float32), f"{base}_scale"))
        first = min(i for i, n in enumerate(proto.graph.node) if n.name in {r.name for r in g.readers})
        proto.graph.node.insert(first, onnx.helper.make_node("Mul", [g.x, f"{base}_scale"], [f"{base}_out"], name=base))
        for n in proto.graph.node:
            if n.name in {r.name for r in g.readers}:
                n.input[0] = f"{base}_out"
        inserted.append(base)
        notes.append(f"smooth quant: Mul '{base}' inserted before {[r.name for r in g.readers]} (no LayerNormalization "
                     "of their own to fold into); it runs in float")
    for name, v in changed.items():
        inits[name].CopyFrom(numpy_helper.from_array(v.astype(np.float32), name))
    return from_proto(proto), inserted, notes, all_s


def sqnr_db(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> float:
    """Output SQNR in dB over every output of every batch (sums in float64, in order)."""
    signal = noise = 0.0
    for r, c in zip(reference, candidate, strict=True):
        r64 = np.asarray(r, np.float64)
        signal += float(np.sum(r64 * r64))
        noise += float(np.sum((r64 - np.asarray(c, np.float64)) ** 2))
    if noise == 0.0:
        return float("inf")
    return float(10 * np.log10(signal / noise)) if signal > 0 else float("-inf")


def check_alpha(alpha: Any) -> list[float]:
    """``smooth_quant_alpha`` as the list of alphas to try: one float in [0, 1], a sequence of
    them, or ``"search"`` for :data:`ALPHA_GRID`."""
    if isinstance(alpha, str):
        if alpha != "search":
            raise _core.ArgumentError(f"smooth_quant_alpha must be a float in [0, 1], a list of them or 'search', "
                                      f"got {alpha!r}")
        return list(ALPHA_GRID)
    values = list(alpha) if isinstance(alpha, list | tuple) else [alpha]
    if not values:
        raise _core.ArgumentError("smooth_quant_alpha: the list of alphas to search is empty")
    for a in values:
        if isinstance(a, bool) or not isinstance(a, int | float) or not 0.0 <= float(a) <= 1.0:
            raise _core.ArgumentError(f"smooth_quant_alpha: {a!r} is not a float in [0, 1]")
    return [float(a) for a in values]


def smooth_quant(model: Model, batches: Callable[[], Iterable[dict[str, np.ndarray]]], alphas: list[float],
                 quantize: Callable[[Model, list[str]], Callable[[dict[str, np.ndarray]], list[np.ndarray]]],
                 threads: int | None = None) -> tuple[Model, list[str], list[str]]:
    """The smoothed prepared model, its inserted Mul nodes and notes. With several ``alphas``
    each is tried: ``quantize(smoothed, float_nodes)`` calibrates and quantizes it and returns a
    function running the INT8 model on one batch, whose outputs' SQNR against ``model``'s on the
    calibration batches decides (the first best alpha in the given order wins)."""
    groups = find_groups(model)
    if not groups:
        return model, [], ["smooth quant: no MatMul or Gemm with a constant weight reads an activation"]
    observe_maxima(model, groups, batches(), threads)
    if len(alphas) == 1:
        m, inserted, notes, _ = smooth(model, groups, alphas[0])
        return m, inserted, [*notes, f"smooth quant: alpha {alphas[0]:g}"]
    from tether._session import compile as compile_model

    ref = compile_model(model, threads=threads)
    best: tuple[float, float, Model, list[str], list[str]] | None = None
    tried = []
    for a in alphas:
        m, inserted, notes, _ = smooth(model, groups, a)
        run_int8 = quantize(m, inserted)
        refs: list[np.ndarray] = []
        cands: list[np.ndarray] = []
        for feeds in batches():
            refs.extend(ref.run(dict(feeds)).values())
            cands.extend(run_int8(dict(feeds)))
        score = sqnr_db(refs, cands)
        tried.append(f"{a:g}: {score:.2f} dB")
        if best is None or score > best[0]:
            best = (score, a, m, inserted, notes)
    assert best is not None
    return best[2], best[3], [*best[4], f"smooth quant: alpha {best[1]:g} chosen by output SQNR on the calibration "
                                        f"batches ({', '.join(tried)})"]
