"""Exports transformers models at their real sizes with the KV cache and verifies each by
generation: GPT-2 (the 124M config), the Llama-style model of bench/llm.py (12 layers, hidden
768, 12 query and 4 key/value heads, RoPE, RMSNorm, vocabulary 32k) and T5-small (the t5-small
config, encoder and decoder), random weights (nothing from a hub).

Each goes through `tt.export.transformers(model, path, steps=32)`: the file is exported and
checked as every export is, then tether runs a greedy generation beside the torch model (a
prefill of two prompts, the second left-padded, then 32 decode steps, each side feeding its own
cache back), every step's logits within the export's tolerance and every greedy token identical,
or the export raises naming the step. The test suite runs the same check on small configs in
every CI run; this script is the full-size run, minutes per model.

Usage:
    python tools/verify_llm_exports.py [--models gpt2,llama,t5] [--dir DIR]

Exits 1 when a model fails; prints one line per model (time, steps, worst step error, distinct
tokens).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def build(name: str) -> tuple[Any, str]:
    """The model with random weights (seeded) and its export task."""
    import torch
    import transformers

    torch.manual_seed(0)
    if name == "gpt2":
        return transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval(), "text-generation"
    if name == "llama":
        config = transformers.LlamaConfig(hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                                          num_attention_heads=12, num_key_value_heads=4, vocab_size=32000,
                                          max_position_embeddings=256, tie_word_embeddings=False)
        return transformers.LlamaForCausalLM(config).eval(), "text-generation"
    if name == "t5":
        config = transformers.T5Config(decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)  # t5-small's sizes
        return transformers.T5ForConditionalGeneration(config).eval(), "text2text-generation"
    raise SystemExit(f"unknown model {name!r} (gpt2, llama, t5)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt2,llama,t5")
    parser.add_argument("--dir", default="", help="where the files go (default: a temporary folder)")
    args = parser.parse_args()
    import tether as tt

    folder = Path(args.dir or tempfile.mkdtemp(prefix="tether-llm-export-"))
    folder.mkdir(parents=True, exist_ok=True)
    failed = False
    for name in args.models.split(","):
        model, task = build(name)
        params = sum(p.numel() for p in model.parameters()) / 1e6
        start = time.perf_counter()
        try:
            res = tt.export.transformers(model, folder / f"{name}.onnx", task=task, steps=32, golden=False)
        except tt.Error as e:
            print(f"{name:6s} {params:6.1f}M params  FAILED: {e}")
            failed = True
            continue
        rows = res.tokens.tolist()
        print(f"{name:6s} {params:6.1f}M params  {'ok' if res.ok else 'FAILED'}  {time.perf_counter() - start:6.1f} s  "
              f"{res.steps} decode steps  worst step error {max(res.step_errors):.2e}  tokens {res.tokens.shape}, "
              f"distinct per row {[len(set(r)) for r in rows]}  exporter {res.exporter}")
        failed |= not res.ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
