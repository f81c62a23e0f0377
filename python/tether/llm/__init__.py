"""Decoding with language models exported with their KV cache: :class:`Generator` (greedy,
temperature, top-k and top-p sampling under a seed, prompts of unequal length in one batch)
and :func:`next_token_probs`, the distribution sampling draws from. See docs/llm.md.

Example:
    >>> gen = tt.llm.Generator("llama.onnx", eos_token_id=2)         # doctest: +SKIP
    >>> gen.generate([[1, 15, 27], [1, 9]], max_new_tokens=16)        # doctest: +SKIP
"""

from tether.llm._generator import Generator
from tether.llm._sampling import next_token_probs

__all__ = ["Generator", "next_token_probs"]
