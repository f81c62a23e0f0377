"""What merging shard states relies on: the engine gives a sample the same bits whatever else is
in its batch. A row alone in the micro-kernel's last tile (a batch of 1, or of 1 modulo 14
with AVX-512 and 6 with AVX2) takes the one-row kernel, which must sum in the tiled order."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tether as tt


def _gemm(k: int, n: int, activation: str | None) -> tt.Model:
    rng = np.random.default_rng(0)
    b = tt.GraphBuilder("fc")
    x = b.input("x", "float32", ("batch", k))
    b.initializer("w", rng.standard_normal((n, k)).astype(np.float32))
    b.initializer("c", rng.standard_normal(n).astype(np.float32))
    y = b.node("Gemm", [x, "w", "c"], name="fc", transB=1)
    b.output(b.node(activation, [y], outputs=["y"]) if activation else b.node("Identity", [y], outputs=["y"]))
    return b.build()


def _matmul_add(k: int, n: int) -> tt.Model:
    """MatMul then Add of a bias: the engine fuses them into one product with a column bias."""
    rng = np.random.default_rng(2)
    b = tt.GraphBuilder("mm")
    x = b.input("x", "float32", ("batch", 3, k))
    b.initializer("w", rng.standard_normal((k, n)).astype(np.float32))
    b.initializer("c", rng.standard_normal(n).astype(np.float32))
    b.output(b.node("Add", [b.node("MatMul", [x, "w"]), "c"], outputs=["y"]))
    return b.build()


def _batch_dependent_sizes(model: tt.Model, shape: tuple[int, ...], threads: int = 1) -> list[int]:
    sess = tt.compile(model, threads=threads)
    x = np.random.default_rng(1).standard_normal((32, *shape)).astype(np.float32)
    pairs = np.concatenate([sess(x[i:i + 2]) for i in range(0, 32, 2)])  # every row in a tile of 2
    return [n for n in range(1, 33) if not np.array_equal(sess(x[:n]), pairs[:n])]


def test_a_narrow_product_gives_each_row_the_same_bits_whatever_the_batch_size() -> None:
    assert _batch_dependent_sizes(_gemm(8, 10, None), (8,)) == []


# Outputs of one panel and of several (the one-row kernel takes up to four at once, then the
# rest), K past one cache block (256: partial sums accumulate), and fused activations.
@pytest.mark.parametrize("k,n,activation", [(64, 10, None), (64, 40, "Relu"), (300, 200, None), (600, 130, "Tanh"),
                                            (33, 1000, "Relu")])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_wide_product_gives_each_row_the_same_bits_whatever_the_batch_size(k, n, activation, threads) -> None:
    assert _batch_dependent_sizes(_gemm(k, n, activation), (k,), threads) == []


def test_a_batched_matmul_gives_each_row_the_same_bits_whatever_the_batch_size() -> None:
    # A batch of b makes 3b rows: a batch of 5 leaves one row alone in the last tile of 14.
    assert _batch_dependent_sizes(_matmul_add(96, 70), (3, 96)) == []


@pytest.mark.parametrize("isa", ["avx2", "generic"])
def test_the_one_row_kernel_sums_as_the_tiles_do_on_every_isa(isa) -> None:
    # TETHER_ISA picks the kernels at import: a fresh process per ISA.
    if isa == "avx2" and not tt.cpu_info()["avx2"]:
        pytest.skip("this CPU has no AVX2, so the AVX2 kernels cannot run here")
    code = ("from test_batch_invariance import _gemm, _batch_dependent_sizes\n"
            "assert _batch_dependent_sizes(_gemm(300, 200, 'Relu'), (300,)) == []\n"
            "assert _batch_dependent_sizes(_gemm(64, 10, None), (64,)) == []\n")
    env = {**os.environ, "TETHER_ISA": isa}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=Path(__file__).resolve().parent,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
