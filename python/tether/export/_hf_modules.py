"""torch modules around a transformers model that take and return its KV cache as flat tensors,
so an ONNX exporter sees plain tensor inputs and outputs instead of transformers' Cache objects.

Names follow onnxruntime-genai and optimum: ``past_key_values.{i}.key`` in, ``present.{i}.key``
out (``.decoder.``/``.encoder.`` between for an encoder-decoder model's self and cross attention).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache, EncoderDecoderCache

BATCH, SEQ, PAST, TOTAL = "batch_size", "sequence_length", "past_sequence_length", "total_sequence_length"
ENC_SEQ = "encoder_sequence_length"


@dataclass
class Layout:
    """One exported graph: its input and output names, and the dynamic dims of each input."""

    inputs: list[str]
    outputs: list[str]
    dynamic: dict[str, dict[int, str]] = field(default_factory=dict)


@dataclass
class CacheShape:
    """The KV cache of a model: layers, key/value heads and head size, read off one real run."""

    layers: int
    heads: int
    head_dim: int
    dtype: Any

    def empty(self, batch: int) -> list[torch.Tensor]:
        """A cache of length 0 for every layer, keys and values: the past of a prefill."""
        return [torch.zeros(batch, self.heads, 0, self.head_dim, dtype=self.dtype) for _ in range(2 * self.layers)]

    def random(self, batch: int, length: int, gen: torch.Generator) -> list[torch.Tensor]:
        return [torch.randn(batch, self.heads, length, self.head_dim, generator=gen).to(self.dtype)
                for _ in range(2 * self.layers)]


def cache_argument(model: Any) -> str | None:
    """The name under which the model's forward takes its KV cache (``cache`` in transformers 5,
    ``past_key_values`` before), or None when it takes none."""
    params = inspect.signature(model.forward).parameters
    return next((n for n in ("cache", "past_key_values") if n in params), None)


def takes(model: Any, name: str) -> bool:
    return name in inspect.signature(model.forward).parameters


def flat_cache(cache: Any) -> list[torch.Tensor]:
    """A Cache (or the legacy tuple of (key, value) pairs) as [key0, value0, key1, value1, ...]."""
    if hasattr(cache, "layers"):
        return [t for layer in cache.layers for t in (layer.keys, layer.values)]
    return [t for pair in cache for t in pair[:2]]


def returned_cache(out: Any) -> Any:
    """The cache a forward returned (``cache`` in transformers 5, ``past_key_values`` before)."""
    found = getattr(out, "cache", None)
    return found if found is not None else getattr(out, "past_key_values", None)


def with_named_inputs(module: torch.nn.Module, names: list[str]) -> torch.nn.Module:
    """``module`` with a forward whose signature names one parameter per graph input.

    torch.export matches ``dynamic_shapes`` to the forward's parameters, and a ``*past``
    parameter would take every cache tensor as one nested input."""
    base = type(module)

    def forward(self: Any, *args: torch.Tensor) -> Any:
        return base.forward(self, *args)

    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter("self", kind)]
    params += [inspect.Parameter(re.sub(r"\W", "_", n), kind) for n in names]
    forward.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    module.__class__ = type(base.__name__, (base,), {"forward": forward})
    return module


def pairs(flat: tuple[torch.Tensor, ...] | list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(flat[2 * i], flat[2 * i + 1]) for i in range(len(flat) // 2)]


class DecoderWithPast(torch.nn.Module):
    """A decoder-only LM as ``(input_ids, attention_mask[, position_ids], *past) -> (logits, *present)``;
    without ``with_past``, ``(input_ids, attention_mask[, position_ids]) -> logits``."""

    def __init__(self, model: Any, with_past: bool, positions: bool) -> None:
        super().__init__()
        self.model = model
        self.with_past = with_past
        self.positions = positions
        self.cache_arg = cache_argument(model)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *rest: torch.Tensor) -> Any:
        kwargs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.positions:
            kwargs["position_ids"], rest = rest[0], rest[1:]
        if not self.with_past:
            return self.model(**kwargs, use_cache=False).logits
        assert self.cache_arg is not None
        kwargs[self.cache_arg] = DynamicCache(pairs(rest), config=self.model.config)
        out = self.model(**kwargs, use_cache=True)
        return (out.logits, *flat_cache(returned_cache(out)))


def decoder_layout(cache: CacheShape, with_past: bool, positions: bool) -> Layout:
    inputs, outputs = ["input_ids", "attention_mask"], ["logits"]
    mask_len = TOTAL if with_past else SEQ
    dynamic = {"input_ids": {0: BATCH, 1: SEQ}, "attention_mask": {0: BATCH, 1: mask_len}}
    if positions:
        inputs.append("position_ids")
        dynamic["position_ids"] = {0: BATCH, 1: SEQ}
    if with_past:
        for i in range(cache.layers):
            for kind in ("key", "value"):
                inputs.append(f"past_key_values.{i}.{kind}")
                dynamic[inputs[-1]] = {0: BATCH, 2: PAST}
                outputs.append(f"present.{i}.{kind}")
    return Layout(inputs, outputs, dynamic)


def decoder_cache_shape(model: Any) -> CacheShape:
    """The cache a decoder-only model keeps, read from one run on two tokens."""
    with torch.no_grad():
        out = model(input_ids=torch.zeros(1, 2, dtype=torch.long), use_cache=True)
    return _shape_of(flat_cache(returned_cache(out)))


def _shape_of(flat: list[torch.Tensor]) -> CacheShape:
    k = flat[0]
    return CacheShape(layers=len(flat) // 2, heads=int(k.shape[1]), head_dim=int(k.shape[3]), dtype=k.dtype)


class Seq2SeqEncoder(torch.nn.Module):
    """An encoder-decoder LM's encoder as ``(*inputs) -> (last_hidden_state, *cross)`` (inputs:
    ``input_ids, attention_mask`` for text, ``input_features`` for speech): the cross-attention
    keys and values of every decoder layer are computed once here, so each decoder step reads
    them instead of projecting the encoder's states again."""

    def __init__(self, model: Any, inputs: list[str]) -> None:
        super().__init__()
        self.model = model
        self.inputs = inputs
        self.cache_arg = cache_argument(model)

    def forward(self, *args: torch.Tensor) -> Any:
        feeds = dict(zip(self.inputs, args, strict=True))
        enc = self.model.get_encoder()(**feeds).last_hidden_state
        # One decoder step on a placeholder token fills the cross-attention cache, through the
        # model's own projections; the step's logits are not outputs, so the exporter drops them.
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        start = torch.zeros(args[0].shape[0], 1, dtype=torch.long)
        assert self.cache_arg is not None
        mask = {"attention_mask": feeds["attention_mask"]} if "attention_mask" in feeds else {}
        out = self.model(encoder_outputs=(enc,), decoder_input_ids=start, use_cache=True,
                         **mask, **{self.cache_arg: cache})
        return (enc, *flat_cache(returned_cache(out).cross_attention_cache))


class Seq2SeqDecoderWithPast(torch.nn.Module):
    """An encoder-decoder LM's decoder step as ``(input_ids[, encoder_attention_mask], *past) ->
    (logits, *present)``: ``past`` holds per layer the decoder's own keys and values, then the
    cross-attention ones the encoder graph wrote; ``present`` the decoder's, grown by the step.
    A speech model (Whisper) attends to every encoder frame and takes no encoder mask."""

    def __init__(self, model: Any, d_model: int, masked: bool) -> None:
        super().__init__()
        self.model = model
        self.d_model = d_model
        self.masked = masked
        self.cache_arg = cache_argument(model)

    def forward(self, input_ids: torch.Tensor, *rest: torch.Tensor) -> Any:
        mask = {"attention_mask": rest[0]} if self.masked else {}
        past = rest[1:] if self.masked else rest
        own = [past[4 * i:4 * i + 2] for i in range(len(past) // 4)]
        cross = [past[4 * i + 2:4 * i + 4] for i in range(len(past) // 4)]
        cache = EncoderDecoderCache(DynamicCache([tuple(p) for p in own]), DynamicCache([tuple(p) for p in cross]))
        # The cross-attention keys and values are given: no layer may project them again.
        cache.is_updated = dict.fromkeys(range(len(cross)), True)
        # The decoder reads the encoder's states only for their shape once the cross cache is set.
        states = cross[0][0].new_zeros(input_ids.shape[0], cross[0][0].shape[2], self.d_model)
        assert self.cache_arg is not None
        out = self.model(encoder_outputs=(states,), decoder_input_ids=input_ids, use_cache=True,
                         **mask, **{self.cache_arg: cache})
        return (out.logits, *flat_cache(returned_cache(out).self_attention_cache))


def seq2seq_cache_shapes(model: Any, inputs: list[str], example: tuple[torch.Tensor, ...]) -> tuple[CacheShape,
                                                                                                    CacheShape]:
    """The decoder's self-attention and cross-attention caches, read from one step."""
    enc = Seq2SeqEncoder(model, inputs)
    with torch.no_grad():
        _, *cross = enc(*example)
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        out = model(**dict(zip(inputs, example, strict=True)), decoder_input_ids=torch.zeros(example[0].shape[0], 1,
                                                                                             dtype=torch.long),
                    use_cache=True, **{enc.cache_arg or "cache": cache})
    return _shape_of(flat_cache(returned_cache(out).self_attention_cache)), _shape_of(cross)


def encoder_layout(cross: CacheShape, speech: bool) -> Layout:
    outputs = ["last_hidden_state"]
    outputs += [f"present.{i}.encoder.{kind}" for i in range(cross.layers) for kind in ("key", "value")]
    if speech:  # Whisper's encoder takes a fixed number of frames: only the batch varies
        return Layout(["input_features"], outputs, {"input_features": {0: BATCH}})
    dynamic = {"input_ids": {0: BATCH, 1: ENC_SEQ}, "attention_mask": {0: BATCH, 1: ENC_SEQ}}
    return Layout(["input_ids", "attention_mask"], outputs, dynamic)


def seq2seq_decoder_layout(own: CacheShape, masked: bool) -> Layout:
    inputs, outputs = ["input_ids"], ["logits"]
    dynamic = {"input_ids": {0: BATCH, 1: SEQ}}
    if masked:
        inputs.append("encoder_attention_mask")
        dynamic["encoder_attention_mask"] = {0: BATCH, 1: ENC_SEQ}
    for i in range(own.layers):
        for part, dim in (("decoder", PAST), ("encoder", ENC_SEQ)):
            for kind in ("key", "value"):
                inputs.append(f"past_key_values.{i}.{part}.{kind}")
                dynamic[inputs[-1]] = {0: BATCH, 2: dim}
        outputs += [f"present.{i}.decoder.{kind}" for kind in ("key", "value")]
    return Layout(inputs, outputs, dynamic)
