"""Tiny random transformers models for the export-with-cache and generation tests: GPT-2, a
Llama-style model (RoPE, RMSNorm, 4 query and 2 key/value heads), T5 and Whisper, seeded, with
weights wider than the defaults so that greedy tokens vary from step to step and a lost cache
entry changes them."""

from __future__ import annotations

from typing import Any

import torch
import transformers

VOCAB = 96


def gpt2() -> Any:
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=64,
                                     initializer_range=0.3, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config).eval()


def llama() -> Any:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                                      max_position_embeddings=64, initializer_range=0.3, bos_token_id=0,
                                      eos_token_id=0, pad_token_id=0)
    return transformers.LlamaForCausalLM(config).eval()


def t5() -> Any:
    torch.manual_seed(0)
    config = transformers.T5Config(d_model=32, d_ff=64, num_layers=1, num_decoder_layers=1, num_heads=4, d_kv=8,
                                   vocab_size=VOCAB, initializer_factor=3.0, decoder_start_token_id=0,
                                   pad_token_id=0, eos_token_id=1)
    return transformers.T5ForConditionalGeneration(config).eval()


def whisper() -> Any:
    torch.manual_seed(0)
    config = transformers.WhisperConfig(vocab_size=VOCAB, num_mel_bins=8, encoder_layers=1, decoder_layers=1,
                                        encoder_attention_heads=2, decoder_attention_heads=2, d_model=32,
                                        encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=8,
                                        max_target_positions=64, init_std=0.3, decoder_start_token_id=0,
                                        pad_token_id=0, eos_token_id=1, bos_token_id=0)
    return transformers.WhisperForConditionalGeneration(config).eval()


BUILD = {"gpt2": gpt2, "llama": llama, "t5": t5, "whisper": whisper}
TASK = {"gpt2": "text-generation", "llama": "text-generation", "t5": "text2text-generation",
        "whisper": "automatic-speech-recognition"}
