"""Weight-only quantization: MatMul and Gemm weights to 4 or 8 bits in blocks along K, written as
onnxruntime's com.microsoft MatMulNBits (which tether's CPU engine and onnxruntime both run).

Round to nearest, per block of ``block_size`` weights of one output column along K:

- asymmetric: the block's range widened to hold 0, ``[lo, hi]``; ``scale = (hi - lo) / qmax``
  with ``qmax = 2**bits - 1``; ``zero_point = clip(round(-lo / scale), 0, qmax)``;
  ``q = clip(round(w / scale) + zero_point, 0, qmax)``.
- symmetric: ``scale = max|w| / (2**(bits-1) - 1)``, the zero point MatMulNBits' default
  ``2**(bits-1)``, ``q = clip(round(w / scale), -(2**(bits-1) - 1), 2**(bits-1) - 1) + 2**(bits-1)``.

``round`` is numpy's (half to even) on the float32 scale, so the codes are the same on every
machine. A block of zeros gets scale 1. Positions past K in the last block hold the zero point.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tether._model import Model
from tether._native import core as _core
from tether.edit._proto import ModelSource, as_model, from_proto, to_proto

_FORMATS = ("matmulnbits",)
_METHODS = ("rtn",)


@dataclass(frozen=True)
class WeightOnlyLayer:
    """One quantized weight: the node, its weight initializer, ``[K, N]``, and the error of the
    dequantized weight: ``rel_error = ||W - W_q|| / ||W||`` and ``sqnr_db = 10 log10(sum W^2 /
    sum (W - W_q)^2)`` (inf when exact). ``transposed`` is True when the node read the
    initializer through a 2-D Transpose (a head tied to the embedding): ``W`` is then its transpose."""

    node: str
    weight: str
    shape: tuple[int, int]
    rel_error: float
    sqnr_db: float
    transposed: bool = False


@dataclass
class WeightOnlyResult:
    """What :func:`weight_only` made: ``model`` (MatMulNBits nodes in place of the quantized
    MatMul and Gemm nodes), ``layers`` (one :class:`WeightOnlyLayer` per quantized node, in graph
    order) and ``skipped`` (node -> why it stayed float; empty names are shown by output).

    Example:
        >>> res = tt.quantize.weight_only("llm.onnx", bits=4, block_size=32)   # doctest: +SKIP
        >>> print(res.table()); res.save("llm.int4.onnx")                      # doctest: +SKIP
    """

    model: Model
    layers: list[WeightOnlyLayer]
    skipped: dict[str, str] = field(default_factory=dict)
    bits: int = 4
    block_size: int = 32
    symmetric: bool = False

    def save(self, path: str | os.PathLike[str], *, external_data: bool = False) -> None:
        """Writes the quantized model (weights inline, or beside it with ``external_data``).

        Example:
            >>> res.save("model.int4.onnx")                        # doctest: +SKIP
        """
        self.model.save(path, external_data=external_data)

    def table(self) -> str:
        """The per-layer report as text, worst SQNR first.

        Example:
            >>> print(res.table())                                 # doctest: +SKIP
        """
        kind = "symmetric" if self.symmetric else "asymmetric"
        lines = [f"weight-only {self.bits}-bit, blocks of {self.block_size}, {kind}: {len(self.layers)} layers",
                 f"{'node':32s} {'K x N':>13s} {'rel error':>10s} {'SQNR dB':>8s}"]
        for layer in sorted(self.layers, key=lambda x: x.sqnr_db):
            k, n = layer.shape
            tied = f"  (Transpose of {layer.weight})" if layer.transposed else ""
            lines.append(f"{layer.node[:32]:32s} {f'{k} x {n}':>13s} {layer.rel_error:10.2e} "
                         f"{layer.sqnr_db:8.2f}{tied}")
        lines += [f"  kept float: {name}: {why}" for name, why in self.skipped.items()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<WeightOnlyResult: {len(self.layers)} layers quantized, {len(self.skipped)} kept float>"


def _quantize_blocks(w: np.ndarray, bits: int, block: int, symmetric: bool):
    """W [K, N] float32 -> codes [N, k_blocks, block] (uint8), scales [N, k_blocks] (float32),
    zero points [N, k_blocks] (uint8), and the dequantized W [K, N] (float64)."""
    k, n = w.shape
    kb = -(-k // block)
    wt = np.zeros((n, kb * block), np.float64)
    wt[:, :k] = w.T
    blocks = wt.reshape(n, kb, block)
    valid = (np.arange(kb * block) < k).reshape(kb, block)[None]
    if symmetric:
        qmax = 2 ** (bits - 1) - 1
        amax = np.where(valid, np.abs(blocks), 0.0).max(axis=2)
        scale = (amax / qmax).astype(np.float32)
        zero = np.full(scale.shape, 2 ** (bits - 1), np.int64)
        lo_code, hi_code = -qmax, qmax
    else:
        qmax = 2**bits - 1
        lo = np.minimum(np.where(valid, blocks, np.inf).min(axis=2), 0.0)
        hi = np.maximum(np.where(valid, blocks, -np.inf).max(axis=2), 0.0)
        scale = ((hi - lo) / qmax).astype(np.float32)
        lo_code, hi_code = 0, qmax
    scale = np.where(scale > 0, scale, np.float32(1))
    s64 = scale.astype(np.float64)[:, :, None]
    if not symmetric:
        zero = np.clip(np.rint(-lo / scale.astype(np.float64)), 0, qmax).astype(np.int64)
        codes = np.clip(np.rint(blocks / s64) + zero[:, :, None], lo_code, hi_code)
    else:
        codes = np.clip(np.rint(blocks / s64), lo_code, hi_code) + zero[:, :, None]
    codes = np.where(valid, codes, zero[:, :, None]).astype(np.uint8)
    deq = ((codes.astype(np.float64) - zero[:, :, None]) * s64).reshape(n, kb * block)[:, :k].T
    return codes, scale, zero.astype(np.uint8), deq


def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Codes along the last axis, low bits first: two 4-bit codes a byte (padded with 0)."""
    if bits == 8:
        return np.ascontiguousarray(codes, np.uint8)
    if codes.shape[-1] % 2:
        codes = np.concatenate([codes, np.zeros((*codes.shape[:-1], 1), np.uint8)], axis=-1)
    return np.ascontiguousarray(codes[..., 0::2] | (codes[..., 1::2] << 4), np.uint8)


def _check_args(bits: int, block_size: int, method: str, format: str, min_size: int) -> None:  # noqa: A002
    if bits not in (4, 8):
        raise _core.ArgumentError(f"bits must be 4 or 8, got {bits!r}")
    if not isinstance(block_size, int) or block_size < 16 or block_size & (block_size - 1):
        raise _core.ArgumentError(f"block_size must be a power of two >= 16, got {block_size!r}")
    if method not in _METHODS:
        raise _core.ArgumentError(f"method {method!r} is not available; the methods are {list(_METHODS)}")
    if format not in _FORMATS:
        raise _core.ArgumentError(f"format {format!r} is not available; the formats are {list(_FORMATS)}")
    if not isinstance(min_size, int) or min_size < 0:
        raise _core.ArgumentError(f"min_size must be a count of weights >= 0, got {min_size!r}")


def _transposes(g: Any, inits: dict[str, Any]) -> dict[str, str]:
    """Output name -> initializer name for each Transpose that swaps the two axes of an
    initializer: how an exported LM head tied to the token embedding reads its weight."""
    found = {}
    for node in g.node:
        if node.op_type != "Transpose" or node.domain not in ("", "ai.onnx") or node.input[:1] == [] \
                or node.input[0] not in inits:
            continue
        perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
        if len(inits[node.input[0]].dims) == 2 and perm in (None, [1, 0]):
            found[node.output[0]] = node.input[0]
    return found


def _candidate(node: Any, inits: dict[str, Any], tied: dict[str, str]) -> tuple[str | None, str]:
    """(weight initializer name, "") when the node can become MatMulNBits, else (None, why not).
    ``tied`` maps Transpose outputs to the initializers they transpose (empty when not wanted)."""
    if node.op_type not in ("MatMul", "Gemm") or node.domain not in ("", "ai.onnx"):
        return None, ""
    if len(node.input) < 2 or (node.input[1] not in inits and node.input[1] not in tied):
        return None, "its weight (input 1) is not an initializer"
    t = inits[node.input[1]] if node.input[1] in inits else inits[tied[node.input[1]]]
    if t.data_type != 1 or len(t.dims) != 2:
        return None, "its weight is not a 2-D float32 initializer"
    if node.op_type == "Gemm":
        attrs = {a.name: a for a in node.attribute}
        if attrs.get("transA") is not None and attrs["transA"].i != 0:
            return None, "Gemm with transA = 1"
        if attrs.get("alpha") is not None and attrs["alpha"].f != 1.0:
            return None, "Gemm with alpha other than 1"
        if len(node.input) > 2 and node.input[2]:
            if attrs.get("beta") is not None and attrs["beta"].f != 1.0:
                return None, "Gemm with a bias and beta other than 1"
            c = inits.get(node.input[2])
            flip = (attrs.get("transB") is not None and attrs["transB"].i != 0) != (node.input[1] in tied)
            n = t.dims[0] if flip else t.dims[1]
            if c is None or list(c.dims) != [n] or c.data_type != 1:
                return None, f"Gemm whose C is not a float32 [{n}] initializer"
    return t.name, ""


def weight_only(
    model: ModelSource,
    *,
    bits: int = 4,
    block_size: int = 32,
    symmetric: bool = False,
    method: str = "rtn",
    format: str = "matmulnbits",  # noqa: A002 - the name users know from the other quantizers
    exclude_nodes: Iterable[str] = (),
    min_size: int = 1024,
    tied: bool = True,
) -> WeightOnlyResult:
    """Quantizes the weights of MatMul and Gemm nodes to ``bits`` (4 or 8) in blocks of
    ``block_size`` along K, round to nearest (see the module's docs for the arithmetic), and
    writes each such node as com.microsoft MatMulNBits; activations stay float32.

    A node is quantized when its weight (input 1) is a 2-D float32 initializer with at least
    ``min_size`` elements and its name is not in ``exclude_nodes``; a Gemm also needs alpha 1,
    transA 0 and a bias, if any, of N float32 values with beta 1 (transB is handled). Every
    other MatMul and Gemm stays float and ``skipped`` says why. A model with nothing to quantize
    is returned unchanged with that note, not an error.

    With ``tied`` (the default) a weight read through a Transpose (perm ``[1, 0]``) of a 2-D
    float32 initializer counts too: an LM head tied to the token embedding, as exporters write
    it. Its MatMulNBits holds the transposed weight; the float initializer stays while another
    node (the embedding's Gather) reads it, and the Transpose goes once nothing reads it. The
    model then carries the embedding twice, float and packed; ``tied=False`` keeps such heads float.

    Raises:
        ArgumentError: bits other than 4 or 8, a block_size that is not a power of two >= 16,
            an unknown method or format, a negative min_size, or a name in exclude_nodes that no
            node has.

    Example:
        >>> res = tt.quantize.weight_only("llm.onnx", bits=4, block_size=32)   # doctest: +SKIP
        >>> res.layers[0].sqnr_db > 20                                          # doctest: +SKIP
        True
        >>> tt.compile(res.model).run({"x": x})                                 # doctest: +SKIP
        >>> tt.quantize.weight_only("gpt2.onnx", tied=False).skipped            # doctest: +SKIP
        {'node_linear': "its weight is a Transpose of initializer 'wte' and tied=False", ...}
    """
    _check_args(bits, block_size, method, format, min_size)
    proto = to_proto(as_model(model))
    g = proto.graph
    excluded = set(exclude_nodes)
    unknown = excluded - {n.name for n in g.node}
    if unknown:
        raise _core.ArgumentError(f"exclude_nodes names no node of the model: {sorted(unknown)}")
    inits = {t.name: t for t in g.initializer}
    layers: list[WeightOnlyLayer] = []
    skipped: dict[str, str] = {}
    new_nodes, users_left = [], _uses(g)
    transposed = _transposes(g, inits)
    for node in g.node:
        label = node.name or f"{node.op_type} -> {node.output[0]}"
        weight, why = _candidate(node, inits, transposed if tied else {})
        if weight is None and not tied and len(node.input) > 1 and node.input[1] in transposed and why:
            why = f"its weight is a Transpose of initializer {transposed[node.input[1]]!r} and tied=False"
        if weight is not None and node.name in excluded:
            weight, why = None, "in exclude_nodes"
        if weight is not None and int(np.prod(inits[weight].dims)) < min_size:
            weight, why = None, f"its weight has fewer than min_size = {min_size} elements"
        if weight is None:
            if why:
                skipped[label] = why
            new_nodes.append(node)
            continue
        via = node.input[1] if node.input[1] not in inits else None
        nbits, layer = _rewrite(node, label, inits[weight], via is not None, g, bits, block_size, symmetric)
        users_left[via or weight] -= 1
        new_nodes.append(nbits)
        layers.append(layer)
    if not layers:
        skipped.setdefault("", "no MatMul or Gemm with a 2-D float32 initializer weight to quantize")
        return WeightOnlyResult(as_model(model), [], skipped, bits, block_size, symmetric)
    # A Transpose whose every reader became MatMulNBits goes, and with it one use of its input.
    dropped = {id(n) for n in new_nodes if n.op_type == "Transpose" and n.output[0] in transposed
               and users_left.get(n.output[0], 1) == 0}
    for n in new_nodes:
        if id(n) in dropped:
            users_left[n.input[0]] -= 1
    del g.node[:]
    g.node.extend(n for n in new_nodes if id(n) not in dropped)
    unused = [t for t in g.initializer if users_left.get(t.name, 1) == 0]
    for t in unused:
        g.initializer.remove(t)
    gone = {t.name for t in unused}
    kept_inputs = [v for v in g.input if v.name not in gone]  # models that list weights as inputs too
    del g.input[:]
    g.input.extend(kept_inputs)
    if not any(o.domain == "com.microsoft" for o in proto.opset_import):
        proto.opset_import.add(domain="com.microsoft", version=1)
    return WeightOnlyResult(from_proto(proto), layers, skipped, bits, block_size, symmetric)


def _uses(g: Any) -> dict[str, int]:
    """How many node inputs and graph outputs read each name (subgraphs included)."""
    from tether.edit._proto import subgraphs

    counts: dict[str, int] = {}

    def visit(graph: Any) -> None:
        for node in graph.node:
            for name in node.input:
                counts[name] = counts.get(name, 0) + 1
            for sub in subgraphs(node):
                visit(sub)
        for o in graph.output:
            counts[o.name] = counts.get(o.name, 0) + 1

    visit(g)
    return counts


def _rewrite(node: Any, label: str, weight: Any, via_transpose: bool, g: Any, bits: int, block: int,
             symmetric: bool):
    from onnx import helper, numpy_helper

    w = numpy_helper.to_array(weight).astype(np.float32)
    trans_b = node.op_type == "Gemm" and any(a.name == "transB" and a.i != 0 for a in node.attribute)
    if trans_b != via_transpose:
        w = w.T
    k, n = w.shape
    codes, scale, zero, deq = _quantize_blocks(w, bits, block, symmetric)
    stem = f"{weight.name}_T" if via_transpose else weight.name
    base = f"{stem}_q{bits}"
    names = {base + s for s in ("", "_scales", "_zero_points")}
    taken = {t.name for t in g.initializer} | {v for nd in g.node for v in (*nd.input, *nd.output)}
    suffix = 0
    while names & taken:
        suffix += 1
        base = f"{stem}_q{bits}_{suffix}"
        names = {base + s for s in ("", "_scales", "_zero_points")}
    g.initializer.append(numpy_helper.from_array(_pack(codes, bits), base))
    g.initializer.append(numpy_helper.from_array(scale, base + "_scales"))
    inputs = [node.input[0], base, base + "_scales"]
    if not symmetric:
        g.initializer.append(numpy_helper.from_array(_pack(zero, bits), base + "_zero_points"))
        inputs.append(base + "_zero_points")
    if node.op_type == "Gemm" and len(node.input) > 2 and node.input[2]:
        inputs += [""] * (5 - len(inputs)) + [node.input[2]]
    out = helper.make_node("MatMulNBits", inputs, list(node.output), name=node.name, domain="com.microsoft", K=k,
                           N=n, bits=bits, block_size=block, accuracy_level=0)
    err = float(np.sum((w.astype(np.float64) - deq) ** 2))
    power = float(np.sum(w.astype(np.float64) ** 2))
    rel = float(np.sqrt(err / power)) if power > 0 else 0.0
    sqnr = float(10 * np.log10(power / err)) if err > 0 else float("inf")
    return out, WeightOnlyLayer(label, weight.name, (k, n), rel, sqnr, via_transpose)
