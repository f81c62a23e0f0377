"""What a decoder-only file with a KV cache takes and returns, read from its input and output
names and dims (the names tether.export.transformers, onnxruntime-genai and optimum write)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NoReturn

from tether._model import ValueInfo
from tether._native import core as _core

_PAST = re.compile(r"past_key_values\.(\d+)\.(key|value)$")


@dataclass(frozen=True)
class DecoderLayout:
    """The cache of a decoder-only file: ``layers`` pairs of past inputs and present outputs,
    each ``[batch, kv_heads, length, head_dim]`` of ``dtype``; ``vocab`` is the logits' last
    dim (0 when symbolic)."""

    past: tuple[str, ...]
    present: tuple[str, ...]
    kv_heads: int
    head_dim: int
    dtype: str
    vocab: int
    position_ids: bool


def _refuse(what: str, where: str) -> NoReturn:
    raise _core.ArgumentError(f"tt.llm.Generator: {where} does not fit a decoder-only model with a KV cache: "
                              f"{what} (export one with tt.export.transformers(model, path, with_past=True))")


def _need(cond: bool, what: str, where: str) -> None:
    if not cond:
        _refuse(what, where)


def read_layout(inputs: list[ValueInfo], outputs: list[ValueInfo], where: str) -> DecoderLayout:
    """The layout of a file with inputs ``input_ids``, ``attention_mask``, ``position_ids``
    (optional), ``past_key_values.{i}.key/value`` and outputs ``logits``, ``present.{i}.key/value``;
    ArgumentError naming what is missing or malformed otherwise."""
    ins = {v.name: v for v in inputs}
    outs = {v.name: v for v in outputs}
    if any(".decoder." in n or ".encoder." in n for n in ins):
        _refuse("it is the decoder of an encoder-decoder model (past_key_values.{i}.decoder/encoder.*), "
                "which tt.llm.Generator does not drive", where)
    for name in ("input_ids", "attention_mask"):
        _need(name in ins, f"it has no input '{name}' (inputs: {', '.join(ins)})", where)
        _need(ins[name].dtype == "int64", f"input '{name}' is {ins[name].dtype}, not int64", where)
    _need("logits" in outs, f"it has no output 'logits' (outputs: {', '.join(outs)})", where)
    layers = sorted({int(m.group(1)) for n in ins if (m := _PAST.match(n))})
    _need(bool(layers), "it has no past_key_values.{i}.key / .value inputs", where)
    _need(layers == list(range(len(layers))), f"its past_key_values layers are {layers}, not 0..{len(layers) - 1}",
          where)
    past, present = [], []
    for i in range(len(layers)):
        for part in ("key", "value"):
            p, q = f"past_key_values.{i}.{part}", f"present.{i}.{part}"
            _need(p in ins, f"it has no input '{p}'", where)
            _need(q in outs, f"it has no output '{q}' for input '{p}'", where)
            past.append(p)
            present.append(q)
    known = {"input_ids", "attention_mask", "position_ids", *past}
    extra = [n for n in ins if n not in known]
    _need(not extra, f"it takes inputs the generator cannot feed: {', '.join(extra)}", where)
    first = ins[past[0]]
    shape = first.shape
    if shape is None or len(shape) != 4:
        _refuse(f"input '{first.name}' is {first}, not [batch, kv_heads, past_length, head_dim]", where)
    kv_heads, head_dim = shape[1], shape[3]
    if not (isinstance(kv_heads, int) and isinstance(head_dim, int)):
        _refuse(f"input '{first.name}' is {first}: its kv_heads (dim 1) and head_dim (dim 3) must be fixed sizes",
                where)
    for n in past:
        _need(ins[n].dtype == first.dtype, f"input '{n}' is {ins[n].dtype}, '{first.name}' {first.dtype}", where)
    logits = outs["logits"].shape
    last = logits[-1] if logits else None
    vocab = last if isinstance(last, int) else 0
    return DecoderLayout(tuple(past), tuple(present), kv_heads, head_dim, first.dtype, vocab,
                         "position_ids" in ins)
