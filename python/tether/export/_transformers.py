"""tether.export.transformers: a transformers language model to ONNX with its KV cache as inputs
and outputs, verified against the torch model token by token over a greedy generation."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from tether._native import core as _core
from tether.export import _generation as gen_check
from tether.export._files import Staging, golden_path
from tether.export._result import ExportError, ExportResult, fail, note
from tether.parity import TetherRunner, Tolerance, model_sha256, save_golden

_TASKS = {"text-generation": "a decoder-only causal LM (GPT-2, Llama, ...)",
          "text2text-generation": "an encoder-decoder LM (T5, BART, ...)",
          "automatic-speech-recognition": "a speech encoder-decoder (Whisper)"}


@dataclass
class TransformersExportResult(ExportResult):
    """An :class:`ExportResult` for a transformers model, with what the check by generation found.

    ``steps``: decode steps checked after the prefill (after the first decoder step for an
    encoder-decoder model); ``step_errors``: the largest absolute logits error of each step,
    ``[0]`` the prefill; ``tokens``: the greedy tokens, ``[batch, steps + 1]``, identical in torch
    and in the file; ``prompt`` and ``attention_mask``: what the generation started from;
    ``generation_tolerance``: the tolerance every step's logits met; ``generation_failure``: why
    the generation check failed, when ``check=False`` let the export finish anyway. ``report``,
    ``generated_report`` and ``dynamic_report`` are the single-pass checks of the decoder file
    (as tether.export.torch makes them); for an encoder-decoder model ``encoder`` is the
    encoder file's own result, at ``encoder_path``.

    Example:
        >>> res = tt.export.transformers(model, "gpt2.onnx")                 # doctest: +SKIP
        >>> res.steps, max(res.step_errors) < 1e-4, res.tokens.shape           # doctest: +SKIP
        (32, True, (2, 33))
    """

    task: str = "text-generation"
    with_past: bool = True
    steps: int = 0
    step_errors: list[float] = field(default_factory=list)
    tokens: np.ndarray | None = None
    prompt: np.ndarray | None = None
    attention_mask: np.ndarray | None = None
    generation_tolerance: Tolerance | None = None
    encoder_path: Path | None = None
    encoder: ExportResult | None = None
    encoder_error: float | None = None
    generation_failure: str | None = None

    @property
    def ok(self) -> bool:
        return super().ok and self.generation_failure is None and (self.encoder is None or self.encoder.ok)

    def __str__(self) -> str:
        lines = [super().__str__()]
        if self.encoder is not None:
            lines.append(f"encoder: {self.encoder_path}")
        tol = self.generation_tolerance
        if self.generation_failure is not None:
            lines.append(f"generation check FAILED: {self.generation_failure}")
        elif self.step_errors and tol is not None:
            lines.append(f"generation: prefill + {self.steps} greedy decode steps, tokens identical to torch's; "
                         f"largest logits error {max(self.step_errors):.3g} (step "
                         f"{int(np.argmax(self.step_errors))}), tolerance atol={tol.atol:g} rtol={tol.rtol:g}")
        return "\n".join(lines)


def transformers(model: Any, path: str | os.PathLike[str], *, task: str = "text-generation", with_past: bool = True,
                 opset: int | None = None, check: bool = True, steps: int = 32, prompt: Any = None,
                 attention_mask: Any = None, tolerance: Tolerance | None = None, golden: bool = True,
                 golden_steps: int = 4, threads: int | None = None, seed: int = 0,
                 exporter: Literal["auto", "dynamo", "torchscript"] = "auto",
                 external_data: bool | Literal["auto"] = "auto") -> TransformersExportResult:
    """Exports a transformers language model with its KV cache and proves the file generates what
    the model generates, token by token.

    ``task="text-generation"`` takes a decoder-only causal LM (``GPT2LMHeadModel``,
    ``LlamaForCausalLM``, any class of ``AutoModelForCausalLM``) and writes one file at ``path``:
    inputs ``input_ids``, ``attention_mask``, ``position_ids`` (when the model takes them) and
    ``past_key_values.{i}.key`` / ``.value`` per layer; outputs ``logits`` and
    ``present.{i}.key`` / ``.value``, the past grown by the new tokens. A prefill feeds a past of
    length 0. ``task="text2text-generation"`` takes an encoder-decoder LM (T5) and writes the
    decoder at ``path`` and the encoder at ``<stem>.encoder.onnx``: the encoder maps
    ``input_ids``, ``attention_mask`` to ``last_hidden_state`` and the cross-attention cache
    ``present.{i}.encoder.key`` / ``.value``; the decoder maps ``input_ids``,
    ``encoder_attention_mask`` and ``past_key_values.{i}.decoder.*`` and ``.encoder.*`` to
    ``logits`` and ``present.{i}.decoder.*``. ``task="automatic-speech-recognition"`` takes
    Whisper and writes the same pair, the encoder taking ``input_features`` (``prompt``: float32
    ``[batch, mel bins, frames]``, default random) and the decoder no encoder mask. Dims
    ``batch_size``, ``sequence_length``, ``past_sequence_length``, ``total_sequence_length`` and
    ``encoder_sequence_length`` stay symbolic (Whisper's frames are fixed). ``with_past=False``
    (decoder-only) exports the model without cache inputs.

    Each file is exported and checked as :func:`tether.export.torch` does (the same exporters,
    a second size of every dynamic dim). Then, with ``check=True``, the model and the file run a
    greedy generation side by side: a prefill on ``prompt`` (default: two rows of 6 random
    tokens, the second left-padded by 2, per ``attention_mask``) and ``steps`` decode steps, each
    side feeding its own ``present`` back as the past. Every step's logits must agree within
    ``tolerance`` (default atol 1e-4, scaled by the largest logit when above 1, and rtol 1e-4)
    and the greedy tokens must be identical; otherwise ExportError names the step, the error and
    the first node where tether differs from onnxruntime. The golden bundle beside ``path``
    holds the prefill and the first ``golden_steps`` decode steps (feeds and the model's outputs),
    with every greedy token in its metadata, so the generation replays on another engine.

    Raises ArgumentError for a bad ``task``, ``path``, ``prompt`` or count, UnsupportedError for
    a model the task does not cover or ``with_past`` on a model without a KV cache, and
    ExportError as tether.export.torch does, and when the generation check fails.

    Example:
        >>> from transformers import GPT2Config, GPT2LMHeadModel                      # doctest: +SKIP
        >>> model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4)).eval()  # doctest: +SKIP
        >>> res = tt.export.transformers(model, "gpt2.onnx")                          # doctest: +SKIP
        >>> res.ok, res.steps, res.tokens.shape                                       # doctest: +SKIP
        (True, 32, (2, 33))
    """
    from tether.export import _hf_modules as hf

    path = _check_path(path)
    kind = _check_model(model, task, with_past)
    _check_counts(steps, golden_steps, tolerance)
    if kind == "speech":
        prompt_ids, mask = _features(prompt, attention_mask, model, seed), None
    else:
        prompt_ids, mask = _prompt(prompt, attention_mask, model, seed)
    staging = Staging(path, golden=golden)
    result = TransformersExportResult(path=path, exporter="", task=task, with_past=with_past, prompt=prompt_ids,
                                      attention_mask=mask)
    was_training = bool(model.training)
    if was_training:
        note(result.warnings, "the model was in training mode; it was exported in eval mode and put back in "
                              "training mode afterwards")
    model.eval()
    opts = {"opset": opset, "check": check, "threads": threads, "seed": seed, "exporter": exporter,
            "external_data": external_data}
    try:
        with _eager_attention(model):
            if kind != "decoder":
                layouts = _export_seq2seq(model, staging, result, opts, hf, kind == "speech")
            else:
                layouts = _export_decoder(model, staging, result, opts, hf, with_past)
            if check or golden:
                _generate(model, staging, result, layouts, kind != "decoder", steps, tolerance, golden, golden_steps,
                          threads, check)
        staging.commit()
        _name_final(result, staging.dir)
    except BaseException:
        staging.discard()
        result.golden_path = result.external_data = None
        raise
    finally:
        if was_training:
            model.train()
    for w in result.warnings:
        warnings.warn(w, stacklevel=2)
    return result


def _check_path(path: Any) -> Path:
    if not isinstance(path, str | os.PathLike) or not os.fspath(path):
        raise _core.ArgumentError(f"path must be a file path ending in .onnx, got {path!r}")
    p = Path(path)
    if p.suffix != ".onnx":
        raise _core.ArgumentError(f"path '{p}' must end in .onnx (the golden bundle and an encoder file are named "
                                  "after it)")
    if p.is_dir():
        raise _core.ArgumentError(f"path '{p}' is a directory; give the .onnx file to write")
    for parent in p.parents:
        if parent.exists() and not parent.is_dir():
            raise _core.ArgumentError(f"path '{p}': '{parent}' is a file, not a directory")
    return p


def _check_model(model: Any, task: str, with_past: bool) -> str:
    """What ``model`` is (``"decoder"``, ``"seq2seq"`` or ``"speech"``), after checking it suits
    ``task`` and ``with_past``."""
    from tether.export._hf_modules import cache_argument

    if task not in _TASKS:
        raise _core.ArgumentError(f"task {task!r} is not supported; tether.export.transformers takes "
                                  + "; ".join(f"{t!r} ({what})" for t, what in _TASKS.items()))
    try:
        from transformers import PreTrainedModel
        from transformers.models.auto import modeling_auto as auto
    except ImportError as e:
        raise _core.UnsupportedError(f"tether.export.transformers needs the transformers package: {e}") from e
    name = type(model).__name__
    if not isinstance(model, PreTrainedModel):
        raise _core.UnsupportedError(f"tether.export.transformers takes a transformers PreTrainedModel; got a {name} "
                                     "(export other torch modules with tether.export.torch)")
    causal = name in set(auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    seq2seq = name in set(auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES.values())
    if task == "text-generation" and not causal:
        hint = " It is an encoder-decoder LM: pass task='text2text-generation'." if seq2seq else ""
        raise _core.UnsupportedError(f"task 'text-generation' takes a causal LM (a class of AutoModelForCausalLM); "
                                     f"{name} is not one.{hint}")
    speech = name in set(auto.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES.values())
    if task == "text2text-generation" and not (seq2seq and getattr(model.config, "is_encoder_decoder", False)):
        hint = " It is a causal LM: pass task='text-generation'." if causal else ""
        raise _core.UnsupportedError(f"task 'text2text-generation' takes an encoder-decoder LM (a class of "
                                     f"AutoModelForSeq2SeqLM); {name} is not one.{hint}")
    if task == "automatic-speech-recognition" and not (speech and hasattr(model.config, "num_mel_bins")):
        raise _core.UnsupportedError(f"task 'automatic-speech-recognition' takes a speech encoder-decoder on mel "
                                     f"features (WhisperForConditionalGeneration); {name} is not one")
    if with_past and cache_argument(model) is None:
        raise _core.UnsupportedError(f"{name}.forward takes no KV cache (no 'cache' or 'past_key_values' argument), "
                                     "so it cannot be exported with_past=True; pass with_past=False to export it "
                                     "without one (each step then runs the whole sequence)")
    if task != "text-generation" and not with_past:
        raise _core.ArgumentError(f"task {task!r} exports the decoder with its KV cache only; with_past=False is "
                                  "for task 'text-generation'")
    return {"text-generation": "decoder", "text2text-generation": "seq2seq"}.get(task, "speech")


def _check_counts(steps: Any, golden_steps: Any, tolerance: Any) -> None:
    for name, value, low in (("steps", steps, 1), ("golden_steps", golden_steps, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise _core.ArgumentError(f"{name} must be an int >= {low}, got {value!r}")
    if tolerance is not None and not isinstance(tolerance, Tolerance):
        raise _core.ArgumentError(f"tolerance must be a tether.parity.Tolerance, got {tolerance!r}")


def _vocab(model: Any) -> int:
    return int(model.get_output_embeddings().weight.shape[0])


def _features(prompt: Any, mask: Any, model: Any, seed: int) -> np.ndarray:
    """A speech model's input features, ``[batch, mel bins, frames]`` float32, checked."""
    bins, frames = int(model.config.num_mel_bins), 2 * int(model.config.max_source_positions)
    if mask is not None:
        raise _core.ArgumentError("attention_mask is for text prompts; a speech model attends to every frame")
    if prompt is None:
        return np.random.default_rng(seed).standard_normal((2, bins, frames)).astype(np.float32)
    x = np.asarray(prompt.detach().cpu() if hasattr(prompt, "detach") else prompt)
    if x.dtype != np.float32 or x.ndim != 3 or x.shape[1:] != (bins, frames) or x.shape[0] == 0:
        raise _core.ArgumentError(f"prompt must be float32 input features shaped [batch, {bins}, {frames}] (mel bins, "
                                  f"frames); got {x.dtype} {list(x.shape)}")
    if not np.isfinite(x).all():
        raise _core.ArgumentError("prompt holds NaN or infinity")
    return x


def _prompt(prompt: Any, mask: Any, model: Any, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The prompt's token ids and attention mask, ``[batch, length]`` int64, checked."""
    vocab = _vocab(model)
    if prompt is None:
        if mask is not None:
            raise _core.ArgumentError("attention_mask was given without a prompt")
        ids = np.random.default_rng(seed).integers(0, vocab, size=(2, 6)).astype(np.int64)
        mask = np.ones_like(ids)
        mask[1, :2] = 0
        return ids, mask
    ids = np.asarray(prompt.detach().cpu() if hasattr(prompt, "detach") else prompt)
    if ids.ndim != 2 or ids.dtype.kind not in "iu" or 0 in ids.shape:
        raise _core.ArgumentError(f"prompt must be integer token ids shaped [batch, length]; got {ids.dtype} "
                                  f"{list(ids.shape)}")
    if ids.min() < 0 or ids.max() >= vocab:
        raise _core.ArgumentError(f"prompt holds token id {int(ids.max() if ids.max() >= vocab else ids.min())}, "
                                  f"outside the model's vocabulary [0, {vocab})")
    m = np.ones_like(ids) if mask is None else np.asarray(mask.detach().cpu() if hasattr(mask, "detach") else mask)
    if m.shape != ids.shape or not np.isin(m, (0, 1)).all():
        raise _core.ArgumentError(f"attention_mask must be 0/1 shaped like the prompt {list(ids.shape)}; got "
                                  f"{m.dtype} {list(m.shape)}")
    left_padded = (np.diff(m.astype(np.int64), axis=1) >= 0).all() and m[:, -1].all()
    if not left_padded:
        raise _core.ArgumentError("attention_mask must pad on the left (zeros, then ones, ending with a 1 in every "
                                  "row): greedy generation continues from each row's last token")
    return ids.astype(np.int64), m.astype(np.int64)


def _export_one(module: Any, example: tuple[Any, ...], layout: Any, target: Path, sizes: dict[str, int],
                opts: dict[str, Any], final: Path, result: TransformersExportResult) -> ExportResult:
    """tether.export.torch of one wrapper into the staging folder, its checks included; its
    warnings come back on the result. An error names ``final`` rather than the staged file and
    holds ``result``, with what the inner export found."""
    from tether.export._torch import torch as export_torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return export_torch(module, example, target, dynamic=layout.dynamic, input_names=layout.inputs,
                                output_names=layout.outputs, golden=False, check_sizes=sizes, generated_inputs=1,
                                **opts)
    except ExportError as e:
        message = str(e).replace(os.fspath(target), os.fspath(final))
        inner = getattr(e, "result", None)
        if isinstance(inner, ExportResult):
            _adopt(result, inner)
            result.failure = (inner.failure or message).replace(os.fspath(target), os.fspath(final))
        err = ExportError(message)
        err.result = result  # type: ignore[attr-defined]
        raise err from e


@contextlib.contextmanager
def _eager_attention(model: Any) -> Iterator[None]:
    """The model with transformers' eager attention while it is exported and checked: plain
    MatMul and Softmax, which the dynamo exporter traces for every architecture (its trace of
    T5's SDPA path fails on a view of symbolic strides). The check runs the same attention, so
    even the outputs at padded positions (a query row with every key masked, where SDPA and
    eager attention disagree) match the file and the golden bundle replays on any engine."""
    before = getattr(model.config, "_attn_implementation", None)
    if before in (None, "eager") or not hasattr(model, "set_attn_implementation"):
        yield
        return
    try:
        model.set_attn_implementation("eager")
    except (ValueError, NotImplementedError):  # a model with no eager path is exported as it is
        yield
        return
    try:
        yield
    finally:
        model.set_attn_implementation(before)


def _name_final(result: TransformersExportResult, staged: Path) -> None:
    """The models the reports name by their staged path, named where they now are."""
    reports = [result.report, result.generated_report, result.dynamic_report]
    if result.encoder is not None:
        reports += [result.encoder.report, result.encoder.generated_report, result.encoder.dynamic_report]
        if result.encoder.external_data is not None and result.encoder_path is not None:
            result.encoder.external_data = result.encoder_path.with_name(result.encoder.external_data.name)
    for report in reports:
        for info in (getattr(report, "models", None) or {}).values():
            where = Path(str(info.get("path", ""))) if isinstance(info, dict) else None
            if where is not None and staged in where.parents:
                info["path"] = os.fspath(result.path.parent / where.name)


def _adopt(result: TransformersExportResult, inner: ExportResult) -> None:
    result.exporter, result.exporter_reason = inner.exporter, inner.exporter_reason
    result.report, result.generated_report = inner.report, inner.generated_report
    result.dynamic_report, result.dynamic_dims = inner.dynamic_report, inner.dynamic_dims
    result.rounding_only = list(inner.rounding_only)
    if inner.external_data is not None:
        result.external_data = result.path.with_name(inner.external_data.name)
    for w in inner.warnings:
        note(result.warnings, w)


def _export_decoder(model: Any, staging: Staging, result: TransformersExportResult, opts: dict[str, Any], hf: Any,
                    with_past: bool) -> Any:
    """Exports the decoder-only model; returns its wrapper, layout and cache shape."""
    import torch

    cache = hf.decoder_cache_shape(model)
    positions = hf.takes(model, "position_ids")
    layout = hf.decoder_layout(cache, with_past, positions)
    module = hf.with_named_inputs(hf.DecoderWithPast(model, with_past, positions).eval(), layout.inputs)
    gen = torch.Generator().manual_seed(opts["seed"])
    batch, seq, past = 2, 3, (4 if with_past else 0)
    ids = torch.randint(0, _vocab(model), (batch, seq), generator=gen)
    example: list[Any] = [ids, torch.ones(batch, past + seq, dtype=torch.long)]
    if positions:
        example.append(torch.arange(past, past + seq).expand(batch, seq).contiguous())
    if with_past:
        example += cache.random(batch, past, gen)
    sizes = {hf.BATCH: 3, hf.SEQ: 4} | ({hf.PAST: 5, hf.TOTAL: 9} if with_past else {})
    inner = _export_one(module, tuple(example), layout, staging.path, sizes, opts, result.path, result)
    _adopt(result, inner)
    return module, layout, cache


def _export_seq2seq(model: Any, staging: Staging, result: TransformersExportResult, opts: dict[str, Any],
                    hf: Any, speech: bool) -> Any:
    """Exports the encoder and the decoder with past; returns each one's wrapper and layout."""
    import torch

    gen = torch.Generator().manual_seed(opts["seed"])
    batch, seq, past = 2, 2, 3
    if speech:
        frames = 2 * int(model.config.max_source_positions)
        enc_inputs = ["input_features"]
        enc_example: tuple[Any, ...] = (torch.randn(batch, int(model.config.num_mel_bins), frames, generator=gen),)
        enc_sizes = {hf.BATCH: 3}
    else:
        enc_inputs = ["input_ids", "attention_mask"]
        ids = torch.randint(0, _vocab(model), (batch, 5), generator=gen)
        enc_example, enc_sizes = (ids, torch.ones_like(ids)), {hf.BATCH: 3, hf.ENC_SEQ: 6}
    own, cross = hf.seq2seq_cache_shapes(model, enc_inputs, enc_example)
    enc_len = int(hf.Seq2SeqEncoder(model, enc_inputs)(*enc_example)[0].shape[1]) if speech else 5
    enc_layout, dec_layout = hf.encoder_layout(cross, speech), hf.seq2seq_decoder_layout(own, not speech)
    encoder = hf.with_named_inputs(hf.Seq2SeqEncoder(model, enc_inputs).eval(), enc_layout.inputs)
    decoder = hf.with_named_inputs(hf.Seq2SeqDecoderWithPast(model, model.config.d_model, not speech).eval(),
                                   dec_layout.inputs)
    enc_path = result.path.with_name(result.path.stem + ".encoder.onnx")
    result.encoder_path = enc_path
    result.encoder = _export_one(encoder, enc_example, enc_layout, staging.dir / enc_path.name, enc_sizes, opts,
                                 enc_path, result)
    result.encoder.path = enc_path
    dec_ids = torch.randint(0, _vocab(model), (batch, seq), generator=gen)
    mine, theirs = own.random(batch, past, gen), cross.random(batch, enc_len, gen)
    past_flat = [t for i in range(own.layers) for t in (*mine[2 * i:2 * i + 2], *theirs[2 * i:2 * i + 2])]
    mask = () if speech else (torch.ones(batch, enc_len, dtype=torch.long),)
    example = (dec_ids, *mask, *past_flat)
    sizes = {hf.BATCH: 3, hf.SEQ: 3, hf.PAST: 4, hf.ENC_SEQ: enc_len + 1}
    inner = _export_one(decoder, example, dec_layout, staging.path, sizes, opts, result.path, result)
    _adopt(result, inner)
    for w in result.encoder.warnings:
        note(result.warnings, f"encoder: {w}")
    return (encoder, enc_layout), (decoder, dec_layout)


def _start_token(model: Any) -> int:
    for source in (getattr(model, "generation_config", None), model.config):
        token = getattr(source, "decoder_start_token_id", None)
        if isinstance(token, int):
            return token
    token = getattr(model.config, "pad_token_id", None)
    return token if isinstance(token, int) else 0


def _generate(model: Any, staging: Staging, result: TransformersExportResult, layouts: Any, seq2seq: bool,
              steps: int, tolerance: Tolerance | None, golden: bool, golden_steps: int, threads: int | None,
              check: bool) -> None:
    """The check by generation, then the golden bundles; raises ExportError through ``fail``."""
    tol = tolerance or gen_check.DEFAULT_TOLERANCE
    keep = golden_steps + 1
    assert result.prompt is not None
    try:
        if seq2seq:
            (encoder, enc_layout), (decoder, dec_layout) = layouts
            enc_file = staging.dir / Path(str(result.encoder_path)).name
            ref = (gen_check.torch_step(encoder, enc_layout), gen_check.torch_step(decoder, dec_layout))
            cand = (TetherRunner(enc_file, threads=threads).run, TetherRunner(staging.path, threads=threads).run)
            enc_feeds = {"input_features": result.prompt} if result.attention_mask is None else {
                "input_ids": result.prompt, "attention_mask": result.attention_mask}
            gen, enc_samples = gen_check.seq2seq(ref, cand, (enc_layout, dec_layout), enc_feeds, _start_token(model),
                                                 steps, tol, keep, (str(enc_file), str(staging.path)))
        else:
            module, layout, cache = layouts
            assert result.attention_mask is not None
            cand_step = TetherRunner(staging.path, threads=threads).run
            gen = gen_check.decoder_only(gen_check.torch_step(module, layout), cand_step, layout, cache, result.prompt,
                                         result.attention_mask, steps, tol, keep, result.with_past, str(staging.path))
            enc_samples = []
    except gen_check.StepFailure as f:
        why = (f"the exported model does not generate what the model generates: at {f.what}"
               f"{gen_check.first_layer(f.graph, f.feeds)}")
        why = why.replace(os.fspath(staging.dir), os.fspath(result.path.parent))
        result.generation_failure = why
        if check:
            fail(result, why)
        note(result.warnings, why)
        return
    result.steps, result.step_errors = steps, gen.step_errors
    result.tokens = np.stack(gen.tokens, axis=1)
    result.generation_tolerance, result.encoder_error = tol, gen.encoder_error
    if golden:
        _save_goldens(staging, result, gen, enc_samples)


def _save_goldens(staging: Staging, result: TransformersExportResult, gen: gen_check.Generation,
                  enc_samples: list[Any]) -> None:
    import torch
    import transformers as hf_lib

    assert result.tokens is not None and result.generation_tolerance is not None
    generation: dict[str, Any] = {
        "greedy": True, "steps": result.steps, "tokens": result.tokens.tolist(),
        "samples": "sample k holds step k (0: the prefill) of the generation: the model's own feeds (its present "
                   "fed back as past) and outputs"}
    if result.attention_mask is not None:  # a text prompt; speech features stay in the encoder's bundle
        generation |= {"prompt": np.asarray(result.prompt).tolist(), "attention_mask": result.attention_mask.tolist()}
    meta = {"producer": f"torch {str(torch.__version__).split('+')[0]} / transformers {hf_lib.__version__}",
            "exporter": result.exporter, "task": result.task, "tolerance": result.generation_tolerance.to_dict(),
            "generation": generation}
    save_golden(golden_path(staging.path), gen.recorded, meta | {"model_sha256": model_sha256(staging.path)},
                overwrite=True)
    result.golden_path = golden_path(result.path)
    if enc_samples and result.encoder_path is not None:
        enc_file = staging.dir / result.encoder_path.name
        save_golden(golden_path(enc_file), enc_samples, meta | {"model_sha256": model_sha256(enc_file)},
                    overwrite=True)
        if result.encoder is not None:
            result.encoder.golden_path = golden_path(result.encoder_path)


__all__ = ["TransformersExportResult", "transformers"]
