"""The next-token distribution of sampled decoding: temperature, then top-k, then top-p, each as
its definition states, and the draw from it."""

from __future__ import annotations

import numpy as np

from tether._native import core as _core


def check_sampling(temperature: float, top_k: int, top_p: float) -> None:
    """ArgumentError naming the first sampling parameter out of its range."""
    if not (isinstance(temperature, int | float) and np.isfinite(temperature) and temperature > 0):
        raise _core.ArgumentError(f"temperature must be a finite number above 0, got {temperature!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer) or top_k < 0:
        raise _core.ArgumentError(f"top_k must be an integer >= 0 (0: no top-k filter), got {top_k!r}")
    if not (isinstance(top_p, int | float) and 0 < top_p <= 1):
        raise _core.ArgumentError(f"top_p must be in (0, 1] (1: no top-p filter), got {top_p!r}")


def next_token_probs(logits: np.ndarray, *, temperature: float = 1.0, top_k: int = 0,
                     top_p: float = 1.0) -> np.ndarray:
    """The distribution sampled decoding draws the next token from, per row of ``logits``
    (``[batch, vocab]``), in float64.

    In order: the logits are divided by ``temperature``; ``top_k > 0`` keeps the tokens whose
    logit is at least the k-th largest (every token tied with the k-th is kept, so more than k
    may remain); the softmax of what is kept; ``top_p < 1`` then keeps the smallest set of most
    probable tokens whose probability sums to at least ``top_p`` (tokens ordered by probability,
    highest first, equal probabilities by token id, lowest first; the most probable token is
    always kept); the kept probabilities are renormalised to sum to 1. Removed tokens have
    probability 0.

    Raises ArgumentError for ``temperature <= 0``, ``top_k < 0`` or ``top_p`` outside (0, 1], or
    logits that are not a 2-D float array.

    Example:
        >>> p = tt.llm.next_token_probs(np.array([[2.0, 1.0, 1.0, -3.0]]), top_k=2)
        >>> (p[0] > 0).tolist()                            # the tie with the 2nd is kept
        [True, True, True, False]
    """
    check_sampling(temperature, top_k, top_p)
    logits = np.asarray(logits)
    if logits.ndim != 2 or not np.issubdtype(logits.dtype, np.floating):
        raise _core.ArgumentError(f"logits must be a 2-D float array [batch, vocab], got "
                                  f"{logits.dtype}{list(logits.shape)}")
    scaled = logits.astype(np.float64) / float(temperature)
    if 0 < top_k < scaled.shape[1]:
        kth = -np.partition(-scaled, top_k - 1, axis=1)[:, top_k - 1:top_k]
        scaled = np.where(scaled >= kth, scaled, -np.inf)
    probs = np.exp(scaled - scaled.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    if top_p < 1:
        order = np.argsort(-probs, axis=1, kind="stable")
        ranked = np.take_along_axis(probs, order, axis=1)
        before = np.cumsum(ranked, axis=1) - ranked  # mass of the tokens ranked above each one
        keep_ranked = before < top_p
        keep = np.zeros_like(keep_ranked)
        np.put_along_axis(keep, order, keep_ranked, axis=1)
        probs = np.where(keep, probs, 0.0)
        probs /= probs.sum(axis=1, keepdims=True)
    return probs


def draw(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One token per row by inverse transform: a uniform ``u`` in [0, 1) per row (rows in order,
    one ``rng.random(batch)`` call) picks the first token id whose cumulative probability, in
    token-id order, exceeds ``u``."""
    u = np.asarray(rng.random(probs.shape[0]))
    cdf: np.ndarray = np.cumsum(probs, axis=1)
    cdf /= cdf[:, -1:]
    picked = (cdf <= u[:, None]).sum(axis=1)
    # u below 1 and a last cdf of exactly 1 keep picked in range; the clip guards a zero row
    return np.minimum(picked, probs.shape[1] - 1).astype(np.int64)
