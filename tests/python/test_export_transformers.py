"""tether.export.transformers: GPT-2, a Llama-style model (RoPE, RMSNorm, grouped-query
attention) and T5 exported with their KV cache, verified by 32 greedy steps, and checked here
against the model's own cache-free greedy loop and against onnxruntime running the files."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import tether as tt
import torch
from tether.export import _generation
from tether.parity import GoldenRunner, OnnxRuntimeRunner, TetherRunner, compare, load_golden

transformers = pytest.importorskip("transformers")

import _tiny_transformers as tiny  # noqa: E402
from _tiny_transformers import VOCAB  # noqa: E402


@pytest.fixture(scope="module")
def exported(tiny_transformers: Any) -> Any:
    """Each model exported once per session, on first use: (model, result)."""
    return tiny_transformers


def _positions(mask: np.ndarray) -> np.ndarray:
    return np.where(mask == 0, 1, np.cumsum(mask, axis=1) - 1)


def _torch_greedy(model: Any, prompt: np.ndarray, mask: np.ndarray, steps: int) -> np.ndarray:
    """What generate(do_sample=False) computes, without a cache: the whole sequence each step."""
    ids, m = torch.from_numpy(prompt), torch.from_numpy(mask)
    out = []
    with torch.no_grad():
        for _ in range(steps + 1):
            logits = model(input_ids=ids, attention_mask=m, position_ids=torch.from_numpy(_positions(m.numpy()))).logits
            token = logits[:, -1].argmax(-1, keepdim=True)
            out.append(token)
            ids, m = torch.cat([ids, token], 1), torch.cat([m, torch.ones_like(token)], 1)
    return torch.cat(out, 1).numpy()


def _ort_greedy(path: Path, prompt: np.ndarray, mask: np.ndarray, steps: int) -> np.ndarray:
    """onnxruntime running the exported file with its own present fed back as the past."""
    sess = ort.InferenceSession(str(path))
    past_names = [i.name for i in sess.get_inputs() if i.name.startswith("past_key_values.")]
    heads = {i.name: i.shape for i in sess.get_inputs()}
    batch = prompt.shape[0]
    feeds = {n: np.zeros((batch, heads[n][1], 0, heads[n][3]), np.float32) for n in past_names}
    ids, m, out = prompt, mask, []
    for _ in range(steps + 1):
        feeds |= {"input_ids": ids, "attention_mask": m, "position_ids": _positions(m)[:, -ids.shape[1]:]}
        logits, *present = sess.run(None, feeds)
        token = logits[:, -1].argmax(-1)[:, None].astype(np.int64)
        out.append(token)
        feeds |= dict(zip(past_names, present, strict=True))
        ids, m = token, np.concatenate([m, np.ones_like(token)], 1)
    return np.concatenate(out, 1)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_decoder_with_past_generates_the_models_greedy_tokens_in_tether_and_onnxruntime(name: str,
                                                                                        exported: Any) -> None:
    model, res = exported(name)
    assert res.ok and res.exporter == "torch.onnx.export(dynamo=True)", str(res)
    assert model.config._attn_implementation == "sdpa"  # eager only while exported and checked
    assert res.steps == 32 and len(res.step_errors) == 33
    assert max(res.step_errors) <= 1e-4
    want = _torch_greedy(model, res.prompt, res.attention_mask, 32)
    np.testing.assert_array_equal(res.tokens, want)
    assert len(set(want[0].tolist())) > 3, "the test model should not repeat one token"
    np.testing.assert_array_equal(_ort_greedy(res.path, res.prompt, res.attention_mask, 32), want)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_decoder_file_has_genai_names_and_dynamic_batch_sequence_and_past(name: str, exported: Any) -> None:
    model, res = exported(name)
    graph = tt.load(res.path)
    names = [i.name for i in graph.inputs]
    layers = model.config.num_hidden_layers
    past = [f"past_key_values.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    assert names == ["input_ids", "attention_mask", "position_ids", *past]
    assert [o.name for o in graph.outputs] == ["logits"] + [p.replace("past_key_values", "present") for p in past]
    shapes = {i.name: i.shape for i in graph.inputs}
    assert shapes["input_ids"] == ("batch_size", "sequence_length")
    assert shapes["attention_mask"] == ("batch_size", "total_sequence_length")
    heads = model.config.num_key_value_heads if name == "llama" else model.config.n_head
    assert shapes["past_key_values.0.key"] == ("batch_size", heads, "past_sequence_length", 16)
    # Proven at a second size of every dim, besides the generation's own sizes (prompt 6, past 0 to 37).
    assert res.dynamic_report is not None and res.dynamic_report.ok
    assert res.dynamic_report.input_shapes["past_key_values.0.key"] == (3, heads, 5, 16)


def _ort_seq2seq(res: Any, enc_feeds: dict[str, np.ndarray]) -> np.ndarray:
    """onnxruntime running the encoder once and the decoder with its own cache, greedily."""
    states, *cross = ort.InferenceSession(str(res.encoder_path)).run(None, enc_feeds)
    decoder = ort.InferenceSession(str(res.path))
    own = [np.zeros((*c.shape[:2], 0, c.shape[3]), np.float32) for c in cross]
    token, got = np.zeros((states.shape[0], 1), np.int64), []
    for _ in range(33):
        feeds = {"input_ids": token}
        if "attention_mask" in enc_feeds:
            feeds["encoder_attention_mask"] = enc_feeds["attention_mask"]
        for i in range(len(cross) // 2):
            for j, kind in enumerate(("key", "value")):
                feeds[f"past_key_values.{i}.decoder.{kind}"] = own[2 * i + j]
                feeds[f"past_key_values.{i}.encoder.{kind}"] = cross[2 * i + j]
        logits, *own = decoder.run(None, feeds)
        token = logits[:, -1].argmax(-1)[:, None].astype(np.int64)
        got.append(token)
    return np.concatenate(got, 1)


def _torch_seq2seq_greedy(model: Any, enc_feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The model's own greedy loop without a cache: the whole decoder sequence each step."""
    feeds = {n: torch.from_numpy(a) for n, a in enc_feeds.items()}
    dec = torch.zeros(next(iter(feeds.values())).shape[0], 1, dtype=torch.long)
    with torch.no_grad():
        for _ in range(33):
            logits = model(**feeds, decoder_input_ids=dec).logits
            dec = torch.cat([dec, logits[:, -1].argmax(-1, keepdim=True)], 1)
    return dec[:, 1:].numpy()


@pytest.mark.parametrize("name", ["t5", "whisper"])
def test_encoder_and_decoder_with_past_generate_the_models_greedy_tokens(name: str, exported: Any) -> None:
    model, res = exported(name)
    assert res.ok and res.encoder_path == res.path.with_name(f"{name}.encoder.onnx"), str(res)
    # T5's logits reach the hundreds here; the check scales atol by the largest logit.
    assert res.steps == 32 and max(res.step_errors) <= 1e-3
    if name == "t5":
        enc_feeds = {"input_ids": res.prompt, "attention_mask": res.attention_mask}
        assert tt.load(res.encoder_path).inputs[0].shape == ("batch_size", "encoder_sequence_length")
    else:
        enc_feeds = {"input_features": res.prompt}
        assert tt.load(res.encoder_path).inputs[0].shape == ("batch_size", 8, 16)
    want = _torch_seq2seq_greedy(model, enc_feeds)
    np.testing.assert_array_equal(res.tokens, want)
    assert len(set(want[0].tolist())) > 3, "the test model should not repeat one token"
    np.testing.assert_array_equal(_ort_seq2seq(res, enc_feeds), want)
    assert res.encoder is not None and res.encoder.dynamic_report is not None and res.encoder.dynamic_report.ok


def test_golden_bundle_replays_the_first_steps_on_another_engine(exported: Any) -> None:
    _, res = exported("gpt2")
    bundle = load_golden(res.golden_path)
    assert len(bundle.samples) == 5  # the prefill and 4 decode steps
    assert bundle.metadata["generation"]["tokens"] == res.tokens.tolist()
    prefill, step1 = bundle.samples[0][0], bundle.samples[1][0]
    np.testing.assert_array_equal(prefill["input_ids"], res.prompt)
    assert prefill["past_key_values.0.key"].shape[2] == 0 and step1["past_key_values.0.key"].shape[2] == 6
    np.testing.assert_array_equal(step1["input_ids"][:, 0], res.tokens[:, 0])
    for engine in (OnnxRuntimeRunner(res.path), TetherRunner(res.path)):
        rep = compare(GoldenRunner(bundle), engine, tolerance=tt.parity.Tolerance(atol=1e-4, rtol=1e-4))
        assert rep.ok, rep.table()


def test_generation_check_names_the_step_where_the_cache_goes_wrong(exported: Any) -> None:
    """A candidate that drops the oldest cache entry from decode step 3 on: the check fails there."""
    model, res = exported("gpt2")
    from tether.export import _hf_modules as hf

    cache = hf.decoder_cache_shape(model)
    layout = hf.decoder_layout(cache, True, True)
    module = hf.DecoderWithPast(model, True, True).eval()
    sess = tt.compile(res.path)

    def lossy(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if feeds["input_ids"].shape[1] == 1 and feeds["attention_mask"].shape[1] >= 6 + 3:
            feeds = dict(feeds)
            for n in layout.inputs[3:]:
                feeds[n] = feeds[n][:, :, 1:]
            feeds["attention_mask"] = feeds["attention_mask"][:, 1:]
        return sess.run(feeds)

    with pytest.raises(_generation.StepFailure) as info:
        _generation.decoder_only(_generation.torch_step(module, layout), lossy, layout, cache, res.prompt,
                                 res.attention_mask, 32, _generation.DEFAULT_TOLERANCE, 0, True, str(res.path))
    assert info.value.step == 3 and "decode step 3" in str(info.value)

    def failing(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if feeds["attention_mask"].shape[1] == 6 + 2:
            raise tt.ShapeError("no room")
        return sess.run(feeds)

    with pytest.raises(_generation.StepFailure, match="decode step 2: tether cannot run the file: ShapeError: no room"):
        _generation.decoder_only(_generation.torch_step(module, layout), failing, layout, cache, res.prompt,
                                 res.attention_mask, 32, _generation.DEFAULT_TOLERANCE, 0, True, str(res.path))


def test_a_step_that_leaves_torch_fails_the_export_naming_the_step_and_error(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Exported without a cache, and run by an engine whose logits drift by 0.5 at decode step 2."""
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=VOCAB,
                                                                 n_positions=64, initializer_range=0.3))

    class Drifting(TetherRunner):
        def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            out = super().run(feeds)
            if feeds["input_ids"].shape[1] == 6 + 2:  # the prompt and two generated tokens
                out["logits"] = out["logits"] + np.float32(0.5)
            return out

    monkeypatch.setattr(importlib.import_module("tether.export._transformers"), "TetherRunner", Drifting)
    with pytest.raises(tt.export.ExportError, match=r"at decode step 2: the logits differ from torch's by max abs "
                                                    r"error 0\.5") as info:
        tt.export.transformers(model, tmp_path / "m.onnx", with_past=False)
    assert info.value.result.failure is not None
    assert info.value.result.exporter == "torch.onnx.export(dynamo=True)"
    assert not list(tmp_path.iterdir())


def test_unsupported_task_and_model_classes_raise_typed_errors(tmp_path: Path) -> None:
    gpt2 = tiny.gpt2()
    with pytest.raises(tt.ArgumentError, match="task 'summarize' is not supported"):
        tt.export.transformers(gpt2, tmp_path / "m.onnx", task="summarize")
    with pytest.raises(tt.UnsupportedError, match="pass task='text2text-generation'"):
        tt.export.transformers(tiny.t5(), tmp_path / "m.onnx")
    with pytest.raises(tt.UnsupportedError, match="pass task='text-generation'"):
        tt.export.transformers(gpt2, tmp_path / "m.onnx", task="text2text-generation")
    with pytest.raises(tt.UnsupportedError, match="WhisperForConditionalGeneration\\); T5ForConditionalGeneration"):
        tt.export.transformers(tiny.t5(), tmp_path / "m.onnx", task="automatic-speech-recognition")
    bert = transformers.BertForSequenceClassification(transformers.BertConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=VOCAB))
    with pytest.raises(tt.UnsupportedError, match="BertForSequenceClassification is not one"):
        tt.export.transformers(bert, tmp_path / "m.onnx")
    with pytest.raises(tt.UnsupportedError, match="a transformers PreTrainedModel; got a Linear"):
        tt.export.transformers(torch.nn.Linear(2, 2), tmp_path / "m.onnx")
    assert not list(tmp_path.iterdir())


def test_with_past_on_a_model_without_a_cache_raises_unsupported(tmp_path: Path) -> None:
    gpt1 = transformers.OpenAIGPTLMHeadModel(transformers.OpenAIGPTConfig(n_layer=1, n_embd=32, n_head=2,
                                                                          vocab_size=VOCAB, n_positions=32))
    with pytest.raises(tt.UnsupportedError, match="OpenAIGPTLMHeadModel.forward takes no KV cache.*with_past=False"):
        tt.export.transformers(gpt1, tmp_path / "gpt1.onnx")
    assert not list(tmp_path.iterdir())


def test_bad_path_prompt_and_counts_raise_argument_errors(tmp_path: Path) -> None:
    gpt2 = tiny.gpt2()
    (tmp_path / "file").write_text("")
    (tmp_path / "dir.onnx").mkdir()
    cases = [({"path": tmp_path / "m.txt"}, "must end in .onnx"),
             ({"path": tmp_path / "dir.onnx"}, "is a directory"),
             ({"path": tmp_path / "file" / "m.onnx"}, "is a file, not a directory"),
             ({"prompt": np.array([[1, VOCAB]])}, f"token id {VOCAB}, outside the model's vocabulary"),
             ({"prompt": np.array([1, 2])}, r"shaped \[batch, length\]"),
             ({"prompt": np.array([[1, 2, 3]]), "attention_mask": np.array([[1, 1, 0]])}, "pad on the left"),
             ({"steps": 0}, "steps must be an int >= 1"),
             ({"tolerance": 1e-3}, "tolerance must be a tether.parity.Tolerance")]
    for kwargs, message in cases:
        args = {"path": tmp_path / "m.onnx"} | kwargs
        with pytest.raises(tt.ArgumentError, match=message):
            tt.export.transformers(gpt2, **args)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.onnx", "file"]


def test_importing_tether_loads_neither_torch_nor_transformers() -> None:
    # The export of transformers models imports them when called: a deployment without torch,
    # or a CLI call, must not pay seconds of import for them.
    import subprocess
    import sys
    code = "import sys, tether; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"], out
