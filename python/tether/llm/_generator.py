"""tt.llm.Generator: greedy and sampled decoding of a decoder-only file with a KV cache, the
cache each step returns fed back as the next step's past."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from tether._model import Model
from tether._native import core as _core
from tether._session import Session, compile
from tether.llm._layout import DecoderLayout, read_layout
from tether.llm._sampling import check_sampling, draw, next_token_probs


def _positions(mask: np.ndarray) -> np.ndarray:
    """Position ids as transformers' generate makes them: unpadded tokens counted from 0, 1 on padding."""
    return np.where(mask == 0, 1, np.cumsum(mask, axis=1) - 1).astype(np.int64)


def _token_list(value: Any) -> list[int] | None:
    """``value`` as a list of ints, or None when it is not one."""
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):
        return None
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        return None
    return [int(t) for t in arr]


class Generator:
    """Generates tokens with a decoder-only model exported with its KV cache
    (:func:`tether.export.transformers` with ``with_past=True``, or any file with the same
    names: ``input_ids``, ``attention_mask``, optionally ``position_ids``,
    ``past_key_values.{i}.key/value`` in; ``logits``, ``present.{i}.key/value`` out).

    ``session_or_path``: a :class:`tether.Session`, a :class:`tether.Model` or a path (compiled
    for the CPU with ``threads``). ``eos_token_id``: a token id or several; a row that produces
    one stops, and the positions after it are ``pad_token_id``. ``pad_token_id`` also pads
    shorter prompts on the left. ``max_length``: the longest a row may grow, its prompt (padded
    to the batch's longest) and new tokens together; ``None``: no limit.

    Prompts of unequal length run in one batch, left-padded, with ``attention_mask`` 0 on the
    padding and ``position_ids`` counting each row's own tokens, as transformers' ``generate``
    does. One run per token: the prefill runs every prompt token with an empty past, then each
    step runs the batch's new tokens with the ``present`` arrays the previous run returned as
    its past, passed as they are (no copy in Python).

    Raises ArgumentError naming what is missing when the file does not fit that layout (an
    encoder-decoder decoder, no ``past_key_values``, a ``present`` missing, an input it cannot feed).

    Example:
        >>> gen = tt.llm.Generator("llama.onnx", eos_token_id=2)          # doctest: +SKIP
        >>> gen.generate([[1, 15, 27], [1, 9]], max_new_tokens=16)         # doctest: +SKIP
        array([[ 4, 81, ...], [33,  2,  0, ...]])
        >>> gen.generate(prompts, 16, do_sample=True, top_p=0.9, seed=0)   # doctest: +SKIP
        >>> for tokens in gen.stream(prompts, 16):                         # doctest: +SKIP
        ...     print(tokens)                                              # one per row, per step
    """

    def __init__(self, session_or_path: Session | Model | str | os.PathLike[str], *,
                 eos_token_id: int | Sequence[int] | None = None, pad_token_id: int = 0,
                 max_length: int | None = None, threads: int | None = None) -> None:
        if isinstance(session_or_path, Session):
            self.session = session_or_path
        elif isinstance(session_or_path, Model | str | os.PathLike):
            self.session = compile(session_or_path, threads=threads)
        else:
            raise _core.ArgumentError(f"tt.llm.Generator takes a tether.Session, a tether.Model or a path, "
                                      f"got {type(session_or_path).__name__}")
        where = f"'{self.session.source_path}'" if self.session.source_path else "the session's model"
        self.layout: DecoderLayout = read_layout(self.session.inputs, self.session.outputs, where)
        eos = [] if eos_token_id is None else _token_list(np.atleast_1d(np.asarray(eos_token_id)))
        if eos is None or any(t < 0 for t in eos):
            raise _core.ArgumentError(f"eos_token_id must be a token id >= 0, several, or None; got {eos_token_id!r}")
        if isinstance(pad_token_id, bool) or not isinstance(pad_token_id, int | np.integer) or pad_token_id < 0:
            raise _core.ArgumentError(f"pad_token_id must be a token id >= 0, got {pad_token_id!r}")
        if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int | np.integer)
                                       or max_length < 2):
            raise _core.ArgumentError(f"max_length must be an integer >= 2 or None, got {max_length!r}")
        self.eos_token_id = np.asarray(eos, np.int64)
        self.pad_token_id = int(pad_token_id)
        self.max_length = None if max_length is None else int(max_length)

    def _prompts(self, prompts: Any) -> tuple[np.ndarray, np.ndarray]:
        """The prompts left-padded into ``[batch, longest]`` ids and their attention mask."""
        if isinstance(prompts, np.ndarray) and prompts.ndim == 2:
            rows: list[list[int] | None] = [_token_list(r) for r in prompts]
        elif isinstance(prompts, Sequence) and not isinstance(prompts, str | bytes) and len(prompts) > 0:
            rows = [_token_list(r) for r in prompts]
        else:
            raise _core.ArgumentError("prompts must be a list of token-id lists (one per row) or a 2-D integer "
                                      f"array, got {type(prompts).__name__}")
        vocab = self.layout.vocab
        for i, row in enumerate(rows):
            if row is None or not row:
                raise _core.ArgumentError(f"prompt {i} must be a non-empty list of integer token ids, got "
                                          f"{prompts[i]!r}")
            bad = [t for t in row if t < 0 or (vocab and t >= vocab)]
            if bad:
                raise _core.ArgumentError(f"prompt {i} holds token id {bad[0]}, outside the model's vocabulary "
                                          f"[0, {vocab})" if vocab else f"prompt {i} holds negative token id {bad[0]}")
        longest = max(len(r) for r in rows if r is not None)
        ids = np.full((len(rows), longest), self.pad_token_id, np.int64)
        mask = np.zeros((len(rows), longest), np.int64)
        for i, row in enumerate(rows):
            assert row is not None
            ids[i, longest - len(row):] = row
            mask[i, longest - len(row):] = 1
        return ids, mask

    def _new_tokens(self, prompt_length: int, max_new_tokens: int) -> int:
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int | np.integer) or max_new_tokens < 1:
            raise _core.ArgumentError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
        if self.max_length is None:
            return int(max_new_tokens)
        if prompt_length >= self.max_length:
            raise _core.ArgumentError(f"the longest prompt has {prompt_length} tokens, max_length is "
                                      f"{self.max_length}: no room for a new token")
        return min(int(max_new_tokens), self.max_length - prompt_length)

    def stream(self, prompts: Any, max_new_tokens: int, *, do_sample: bool = False, temperature: float = 1.0,
               top_k: int = 0, top_p: float = 1.0, seed: int | None = None) -> Iterator[np.ndarray]:
        """Yields the next token of every row, ``[batch]`` int64, one array per step, as
        :meth:`generate` computes them. A row that has finished yields ``pad_token_id``; the
        stream ends when every row has finished or after ``max_new_tokens`` steps. The arguments
        are checked at the call, before the first token.

        Example:
            >>> for tokens in gen.stream([[1, 5, 9]], 8):      # doctest: +SKIP
            ...     print(int(tokens[0]), end=" ")
        """
        ids, mask = self._prompts(prompts)
        steps = self._new_tokens(ids.shape[1], max_new_tokens)
        if do_sample:
            check_sampling(temperature, top_k, top_p)
        rng = np.random.default_rng(seed) if do_sample else None
        return self._steps(ids, mask, steps, rng, (temperature, top_k, top_p))

    def _steps(self, ids: np.ndarray, mask: np.ndarray, steps: int, rng: np.random.Generator | None,
               sampling: tuple[float, int, float]) -> Iterator[np.ndarray]:
        layout, batch = self.layout, ids.shape[0]
        empty = np.zeros((batch, layout.kv_heads, 0, layout.head_dim), np.dtype(layout.dtype))
        past: list[np.ndarray] = [empty] * len(layout.past)
        done = np.zeros(batch, bool)
        new = ids
        for _ in range(steps):
            feeds = {"input_ids": new, "attention_mask": mask}
            if layout.position_ids:
                feeds["position_ids"] = _positions(mask)[:, -new.shape[1]:]
            feeds.update(zip(layout.past, past, strict=True))
            out = self.session.run(feeds)
            logits = out["logits"][:, -1, :]
            if rng is None:
                token = logits.argmax(axis=1).astype(np.int64)
            else:
                temperature, top_k, top_p = sampling
                token = draw(next_token_probs(logits, temperature=temperature, top_k=top_k, top_p=top_p), rng)
            token = np.where(done, self.pad_token_id, token)
            done |= np.isin(token, self.eos_token_id)
            yield token
            if done.all():
                return
            past = [out[n] for n in layout.present]
            mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], axis=1)
            new = token[:, None]

    def generate(self, prompts: Any, max_new_tokens: int, *, do_sample: bool = False, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int | None = None) -> np.ndarray:
        """The new tokens of every row, ``[batch, n]`` int64, ``n <= max_new_tokens`` (fewer when
        every row reached an end-of-sequence token first); after a row's end-of-sequence token
        come ``pad_token_id``.

        ``prompts``: a list of token-id lists, one per row, of any lengths, or a 2-D integer
        array. ``do_sample=False``: greedy (the most probable token; on a tie the lowest id).
        ``do_sample=True`` draws from :func:`tether.llm.next_token_probs` (``temperature``, then
        ``top_k``, then ``top_p``, as defined there) with ``numpy.random.default_rng(seed)``:
        each step one uniform per row, rows in order (finished rows too), picks the first token
        id whose cumulative probability exceeds it, so a seed gives the same tokens every time.

        Raises ArgumentError for empty prompts or token ids outside the vocabulary,
        ``max_new_tokens < 1``, a prompt that leaves no room under ``max_length``, and sampling
        parameters out of range (with ``do_sample=True``).

        Example:
            >>> gen.generate([[1, 15, 27], [1, 9]], 4)          # doctest: +SKIP
            array([[81,  4, 17, 55], [33,  2,  0,  0]])
            >>> gen.generate([[1, 15]], 4, do_sample=True, top_k=40, temperature=0.8, seed=3)  # doctest: +SKIP
        """
        tokens = list(self.stream(prompts, max_new_tokens, do_sample=do_sample, temperature=temperature, top_k=top_k,
                                  top_p=top_p, seed=seed))
        return np.stack(tokens, axis=1)

    def __repr__(self) -> str:
        lay = self.layout
        return (f"<tether.llm.Generator: {len(lay.past) // 2} layers, {lay.kv_heads} kv heads of {lay.head_dim}, "
                f"vocabulary {lay.vocab or '?'}>")
