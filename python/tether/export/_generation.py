"""Verification of an exported transformers model by generation: the torch model and the
exported file each run a greedy generation, each feeding its own KV cache back in, and every
step's logits and token are compared."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tether.parity import Tolerance

if TYPE_CHECKING:  # torch and transformers load only when a transformers model is exported
    from tether.export._hf_modules import CacheShape, Layout

Feeds = dict[str, np.ndarray]
Step = Callable[[Feeds], dict[str, np.ndarray]]

# fp32 logits of a model run twice with different summation orders: a wrong op or a lost cache
# entry moves them by the size of the values, rounding by a few units in the 6th digit.
DEFAULT_TOLERANCE = Tolerance(atol=1e-4, rtol=1e-4)


class StepFailure(Exception):
    """A step of the generation where the file left the torch model: which step, what, and the
    feeds the file was given there (to find the first layer that differs)."""

    def __init__(self, step: int, what: str, feeds: Feeds, graph: str) -> None:
        super().__init__(what)
        self.step, self.what, self.feeds, self.graph = step, what, feeds, graph


@dataclass
class Generation:
    """What a checked generation found: per step the largest logits error, the tokens, and the
    torch side's feeds and outputs of the first steps (for the golden bundle)."""

    tolerance: Tolerance
    step_errors: list[float] = field(default_factory=list)
    tokens: list[np.ndarray] = field(default_factory=list)
    encoder_error: float | None = None
    recorded: list[tuple[Feeds, dict[str, np.ndarray]]] = field(default_factory=list)


def engine_step(run: Step, graph: str) -> Callable[[int, bool, Feeds], dict[str, np.ndarray]]:
    """``run`` as a step of the generation: an engine error becomes a StepFailure naming the step."""

    def step(k: int, seq2seq: bool, feeds: Feeds) -> dict[str, np.ndarray]:
        try:
            return run(feeds)
        except Exception as e:  # noqa: BLE001 - any engine failure on the file fails the check at this step
            raise StepFailure(k, f"{step_name(k, seq2seq)}: tether cannot run the file: {type(e).__name__}: {e}",
                              feeds, graph) from e

    return step


def torch_step(module: Any, layout: Layout) -> Step:
    """The wrapper module as a function of numpy feeds, returning outputs by the layout's names."""
    import torch

    def run(feeds: Feeds) -> dict[str, np.ndarray]:
        with torch.no_grad():
            out = module(*(torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in layout.inputs))
        out = out if isinstance(out, tuple | list) else (out,)
        return {n: o.detach().cpu().numpy() for n, o in zip(layout.outputs, out, strict=True)}

    return run


def step_name(step: int, seq2seq: bool) -> str:
    if step < 0:
        return "the encoder"
    if step == 0:
        return "the first decoder step" if seq2seq else "the prefill"
    return f"decode step {step}"


def _error(want: np.ndarray, got: np.ndarray, tol: Tolerance) -> tuple[float, bool]:
    """The largest absolute difference, and whether every element is within ``tol`` with atol
    scaled by the largest magnitude of ``want`` (above 1), as tether.export.torch does."""
    want64, got64 = want.astype(np.float64), got.astype(np.float64)
    if not (np.isfinite(want64).all() and np.isfinite(got64).all()):
        same = np.array_equal(want64, got64, equal_nan=True)
        return (0.0 if same else float("inf")), same
    diff = np.abs(want64 - got64)
    peak = float(np.abs(want64).max(initial=0.0))
    bound = tol.atol * max(1.0, peak) + tol.rtol * np.abs(want64)
    return float(diff.max(initial=0.0)), bool((diff <= bound).all())


def _compare_step(gen: Generation, step: int, want: np.ndarray, got: np.ndarray, valid: np.ndarray,
                  feeds: Feeds, graph: str, seq2seq: bool) -> np.ndarray:
    """Compares one step's logits at the valid (unpadded) positions, and the greedy tokens at
    the last position; returns the token of each row."""
    err, ok = _error(want[valid], got[valid], gen.tolerance)
    gen.step_errors.append(err)
    where = step_name(step, seq2seq)
    if not ok:
        raise StepFailure(step, f"{where}: the logits differ from torch's by max abs error {err:.3g}, beyond atol "
                                f"{gen.tolerance.atol:g} (scaled by the largest logit when above 1) + rtol "
                                f"{gen.tolerance.rtol:g}", feeds, graph)
    want_tok, got_tok = want[:, -1].argmax(-1), got[:, -1].argmax(-1)
    if not np.array_equal(want_tok, got_tok):
        row = int(np.flatnonzero(want_tok != got_tok)[0])
        top = np.sort(want[row, -1])[-2:]
        raise StepFailure(step, f"{where}: the greedy token of row {row} is {int(got_tok[row])}, torch's is "
                                f"{int(want_tok[row])} (logits within tolerance, max abs error {err:.3g}; torch's two "
                                f"best logits differ by {float(top[1] - top[0]):.3g})", feeds, graph)
    gen.tokens.append(want_tok.astype(np.int64))
    return want_tok.astype(np.int64)


def _record(gen: Generation, keep: int, feeds: Feeds, outputs: dict[str, np.ndarray]) -> None:
    if len(gen.recorded) < keep:
        gen.recorded.append(({n: a.copy() for n, a in feeds.items()}, outputs))


def positions_of(mask: np.ndarray) -> np.ndarray:
    """Position ids as transformers' generate makes them: counting unpadded tokens, 1 on padding."""
    pos = np.cumsum(mask, axis=1) - 1
    return np.where(mask == 0, 1, pos).astype(np.int64)


def decoder_only(ref: Step, cand: Step, layout: Layout, cache: CacheShape, prompt: np.ndarray, mask: np.ndarray,
                 steps: int, tol: Tolerance, keep: int, with_past: bool, graph: str) -> Generation:
    """Prefill on ``prompt`` then ``steps`` greedy decode steps; with past, each side feeds its own
    ``present`` back as ``past_key_values``; without, each step runs the whole sequence."""
    gen = Generation(tol)
    batch = prompt.shape[0]
    ids, full_mask = prompt.astype(np.int64), mask.astype(np.int64)
    empty = [t.numpy() for t in cache.empty(batch)] if with_past else []
    past = {"ref": empty, "cand": empty}
    past_names = layout.inputs[len(layout.inputs) - len(empty):]
    new_ids = ids
    for step in range(steps + 1):
        feeds: Feeds = {"input_ids": new_ids, "attention_mask": full_mask}
        if "position_ids" in layout.inputs:
            feeds["position_ids"] = positions_of(full_mask)[:, -new_ids.shape[1]:]
        ref_feeds = feeds | dict(zip(past_names, past["ref"], strict=True))
        cand_feeds = feeds | dict(zip(past_names, past["cand"], strict=True))
        want, got = ref(ref_feeds), engine_step(cand, graph)(step, False, cand_feeds)
        _record(gen, keep, ref_feeds, want)
        valid = full_mask[:, -new_ids.shape[1]:] == 1
        token = _compare_step(gen, step, want["logits"], got["logits"], valid, cand_feeds, graph, False)
        full_mask = np.concatenate([full_mask, np.ones((batch, 1), np.int64)], axis=1)
        ids = np.concatenate([ids, token[:, None]], axis=1)
        if with_past:
            past = {"ref": [want[n] for n in layout.outputs[1:]], "cand": [got[n] for n in layout.outputs[1:]]}
            new_ids = token[:, None]
        else:
            new_ids = ids
    return gen


def seq2seq(ref: tuple[Step, Step], cand: tuple[Step, Step], layouts: tuple[Layout, Layout], enc_feeds: Feeds,
            start: int, steps: int, tol: Tolerance, keep: int,
            graphs: tuple[str, str]) -> tuple[Generation, list[tuple[Feeds, dict[str, np.ndarray]]]]:
    """The encoder once on ``enc_feeds``, then ``steps + 1`` greedy decoder steps from ``start``,
    each side reading its own encoder's cross-attention cache and feeding its own ``present``
    back. Returns the generation and the encoder's torch feeds and outputs."""
    gen = Generation(tol)
    enc_layout, dec_layout = layouts
    want_enc, got_enc = ref[0](enc_feeds), engine_step(cand[0], graphs[0])(-1, True, enc_feeds)
    errors = [_error(want_enc[n], got_enc[n], tol) for n in enc_layout.outputs]
    gen.encoder_error = max(e for e, _ in errors)
    if not all(ok for _, ok in errors):
        raise StepFailure(-1, f"the encoder: its outputs differ from torch's by max abs error {gen.encoder_error:.3g}",
                          enc_feeds, graphs[0])
    cross = {"ref": [want_enc[n] for n in enc_layout.outputs[1:]], "cand": [got_enc[n] for n in enc_layout.outputs[1:]]}
    batch = next(iter(enc_feeds.values())).shape[0]
    layers = len(cross["ref"]) // 2
    own = {side: [np.zeros((batch, c.shape[1], 0, c.shape[3]), c.dtype) for c in cross[side]] for side in cross}
    ids = np.full((batch, 1), start, np.int64)
    for step in range(steps + 1):
        sides = {}
        for side in ("ref", "cand"):
            f: Feeds = {"input_ids": ids}
            if "encoder_attention_mask" in dec_layout.inputs:
                f["encoder_attention_mask"] = enc_feeds["attention_mask"]
            for i in range(layers):
                for part, source in (("decoder", own[side]), ("encoder", cross[side])):
                    f[f"past_key_values.{i}.{part}.key"] = source[2 * i]
                    f[f"past_key_values.{i}.{part}.value"] = source[2 * i + 1]
            sides[side] = f
        want, got = ref[1](sides["ref"]), engine_step(cand[1], graphs[1])(step, True, sides["cand"])
        _record(gen, keep, sides["ref"], want)
        valid = np.ones(ids.shape, bool)
        token = _compare_step(gen, step, want["logits"], got["logits"], valid, sides["cand"], graphs[1], True)
        own = {"ref": [want[n] for n in dec_layout.outputs[1:]], "cand": [got[n] for n in dec_layout.outputs[1:]]}
        ids = token[:, None]
    return gen, [(enc_feeds, want_enc)]


def first_layer(graph: str, feeds: Feeds) -> str:
    """The first node whose output differs between onnxruntime and tether on ``feeds``, or "" when
    that cannot be told (onnxruntime missing, or no single node to blame)."""
    try:
        from tether.parity import OnnxRuntimeRunner, TetherRunner, compare

        rep = compare(OnnxRuntimeRunner(Path(graph)), TetherRunner(Path(graph)), [feeds], layerwise=True)
        first = rep.first_divergent
        return "" if first is None else f"; the first node whose output differs from onnxruntime's: {first.where()}"
    except Exception:  # noqa: BLE001 - the layer is a hint; the failing step is reported without it
        return ""
