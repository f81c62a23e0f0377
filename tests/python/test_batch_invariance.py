"""What merging shard states relies on: the engine gives a sample the same bits whatever else is
in its batch. Known exception (docs/distributed.md): a row alone in the last tile of a matrix
product of 16 or more inputs goes through the one-row micro-kernel, which sums in four chains."""

from __future__ import annotations

import numpy as np
import pytest
import tether as tt


def _gemm(k: int) -> tt.Model:
    rng = np.random.default_rng(0)
    b = tt.GraphBuilder("fc")
    x = b.input("x", "float32", ("batch", k))
    b.initializer("w", rng.standard_normal((10, k)).astype(np.float32))
    b.initializer("c", rng.standard_normal(10).astype(np.float32))
    b.output(b.node("Gemm", [x, "w", "c"], name="fc", transB=1, outputs=["y"]))
    return b.build()


def _batch_dependent_sizes(k: int) -> list[int]:
    sess = tt.compile(_gemm(k), threads=1)
    x = np.random.default_rng(1).standard_normal((32, k)).astype(np.float32)
    pairs = np.concatenate([sess(x[i:i + 2]) for i in range(0, 32, 2)])  # every row in a tile of 2
    return [n for n in range(1, 33) if not np.array_equal(sess(x[:n]), pairs[:n])]


def test_a_narrow_product_gives_each_row_the_same_bits_whatever_the_batch_size() -> None:
    assert _batch_dependent_sizes(8) == []


@pytest.mark.xfail(reason="engine: a row alone in the micro-kernel's last tile (a batch of 1 modulo 14 with "
                          "AVX-512, 6 with AVX2) of a product with >= 16 inputs takes the one-row kernel, which "
                          "sums in four chains", strict=False)
def test_a_wide_product_gives_each_row_the_same_bits_whatever_the_batch_size() -> None:
    assert _batch_dependent_sizes(64) == []
