"""A fixed sample of the differential fuzzer (tests/fuzz/differential.py): mutated ONNX node
tests and random nodes, run by onnxruntime and by tether; where both succeed, they agree."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
import differential  # noqa: E402

SEEDS = range(0, 400)


@pytest.mark.parametrize("first", range(SEEDS.start, SEEDS.stop, 50))
def test_tether_agrees_with_onnxruntime_wherever_both_run(first):
    problems = []
    for seed in range(first, first + 50):
        c = differential.case(seed)
        out = differential.run(c)
        if out.kind in ("mismatch", "internal"):
            problems.append(f"seed {seed} ({c.label}): {out.kind}: {out.detail}")
    assert problems == []
