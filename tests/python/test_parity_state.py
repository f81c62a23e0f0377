"""Mergeable results: parity states of unequal shards, merged in shuffled order, give the report
of one pass; calibration states taken batch by batch (reset between) merge into one pass's;
tether never imports Ray, and tether.distributed without Ray names the extra."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import tether as tt
from tether.parity import CallableRunner, InputSpec, ParityState, compare


def _data(n: int = 203) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((n, 6)) * np.exp(rng.uniform(-6, 6, (n, 1)))).astype(np.float32)
    y = rng.integers(0, 4, n)
    return x, y


_W = np.random.default_rng(4).standard_normal((6, 4)).astype(np.float32)


def _logits(x: np.ndarray) -> np.ndarray:
    """x @ W row by row in one summation order: BLAS's float32 product may round a row
    differently with the batch it is in, and the shards here are batches of other sizes."""
    return np.einsum("ij,jk->ik", x, _W, optimize=False)


def _ref(x: np.ndarray) -> dict[str, np.ndarray]:
    return {"logits": _logits(x), "ids": np.argmax(x, axis=1)}


def _cand(x: np.ndarray) -> dict[str, np.ndarray]:
    z = _logits(x) * np.float32(1.0001)
    z[:, 1] += np.float32(0.3) * np.abs(z).max(axis=1)  # class 1 drifts: some slices lose agreement
    ids = np.argmax(x, axis=1)
    ids[x[:, 0] > 1.5] = 0  # a rule per row: the same whatever the batch
    return {"logits": z, "ids": ids}


def _fields(m: tt.parity.Metrics) -> dict:
    d = m.to_dict()
    d.pop("shape")
    return d


def test_unequal_shards_merged_in_shuffled_order_give_the_single_pass_report() -> None:
    x, y = _data()
    spec = [InputSpec("x", np.dtype("float32"), (None, 6))]
    whole = compare(CallableRunner(_ref, name="ref", input_specs=spec), CallableRunner(_cand, name="cand", input_specs=spec),
                    [x[i:i + 32] for i in range(0, len(x), 32)], labels=y)
    cuts = [0, 1, 18, 23, 90, 97, 150, 203]  # shards of 1, 17, 5, 67, 7, 53 and 53 rows
    blobs = []
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        s = ParityState()
        s.add(_ref(x[a:b]), _cand(x[a:b]), first_row=a, labels=y[a:b])
        blobs.append(s.to_bytes())
    merged = ParityState()
    for k in np.random.default_rng(0).permutation(len(blobs)):
        merged.merge(blobs[k])
    metrics = merged.metrics()
    for o in whole.outputs:
        assert _fields(metrics[o.name]) == _fields(o.metrics), o.name
        assert metrics[o.name].shape == (203, *o.batches[0].shape[1:])
    assert [s.to_dict() for s in merged.slices() or []] == [s.to_dict() for s in whole.slices or []]
    assert any(s.top1_agreement < 1 for s in whole.slices or [])


def test_merged_sums_are_the_correctly_rounded_exact_sums() -> None:
    x, _ = _data()
    r = _ref(x)["logits"].astype(np.float64).ravel()
    c = _cand(x)["logits"].astype(np.float64).ravel()
    state = ParityState("fp32")
    for a in range(0, len(x), 50):
        state.add({"logits": _ref(x[a:a + 50])["logits"]}, {"logits": _cand(x[a:a + 50])["logits"]})
    m = state.metrics()["logits"]
    rr, cc, rc = math.fsum(r * r), math.fsum(c * c), math.fsum(r * c)
    d = np.abs(c - r)
    assert m.cosine == rc / math.sqrt(rr * cc)
    assert m.snr_db == 10 * math.log10(rr / math.fsum(d * d))
    assert m.mean_abs_error == math.fsum(d) / d.size
    worst = int(np.argmax(d))
    assert m.worst_index == np.unravel_index(worst, (len(x), 4)) or m.mismatches > 0


def test_appended_states_count_rows_from_the_rows_before_them() -> None:
    x, y = _data(60)
    total, pieces = ParityState(), ParityState()
    total.add(_ref(x), _cand(x), labels=y)
    for a, b in ((0, 7), (7, 41), (41, 60)):
        s = ParityState()
        s.add(_ref(x[a:b]), _cand(x[a:b]), first_row=0, labels=y[a:b])
        pieces.append(s.to_bytes())
    for name, m in total.metrics().items():
        assert _fields(pieces.metrics()[name]) == _fields(m)


def test_states_of_different_tolerances_or_foreign_bytes_are_refused() -> None:
    a, b = ParityState("fp32"), ParityState("int8")
    b.add({"y": np.ones(3, np.float32)}, {"y": np.ones(3, np.float32)})
    with pytest.raises(tt.ArgumentError, match="different tolerances"):
        a.merge(b)
    with pytest.raises(tt.ArgumentError, match="not a parity state"):
        a.merge(b"calibration")


def _cnn() -> tt.Model:
    rng = np.random.default_rng(0)
    b = tt.GraphBuilder("cnn")
    x = b.input("x", "float32", ("batch", 3, 8, 8))
    b.initializer("w1", rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3)
    b.initializer("b1", rng.standard_normal(4).astype(np.float32) * 0.1)
    b.initializer("fc", rng.standard_normal((5, 4)).astype(np.float32) * 0.5)
    b.initializer("fcb", rng.standard_normal(5).astype(np.float32) * 0.1)
    h = b.node("Relu", [b.node("Conv", [x, "w1", "b1"], name="conv1", pads=[1, 1, 1, 1])], name="relu1")
    p = b.node("Flatten", [b.node("GlobalAveragePool", [h], name="gap")], name="flat")
    b.output(b.node("Gemm", [p, "fc", "fcb"], name="fc", transB=1, outputs=["logits"]))
    return b.build()


def test_calibration_states_taken_batch_by_batch_merge_into_one_pass() -> None:
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((50, 3, 8, 8)) * rng.uniform(0.1, 4, (50, 1, 1, 1))).astype(np.float32)
    x[23, 0, 0, 0] = np.nan
    one = tt.quantize.Calibrator(_cnn(), bins=256, threads=1, skip_nonfinite=True)
    one.observe(x)
    worker = tt.quantize.Calibrator(_cnn(), bins=256, threads=1, skip_nonfinite=True)
    total = tt.quantize.Calibrator(_cnn(), bins=256, threads=1, skip_nonfinite=True)
    for a, b in ((0, 13), (13, 14), (14, 50)):
        worker.observe(x[a:b])
        total.merge(worker.state())
        worker.reset()
    assert total.skipped == one.skipped == [23]
    assert total.samples == one.samples == 50
    for name, s in one.stats().items():
        t = total.stats()[name]
        assert (t.count, t.min, t.max, list(t.positive), list(t.negative)) == (
            s.count, s.min, s.max, list(s.positive), list(s.negative))
    for method in ("minmax", "entropy"):
        assert total.compute(method) == one.compute(method)


def test_tether_never_imports_ray() -> None:
    code = ("import sys, tether, tether.quantize, tether.parity, tether.export, tether.cli, tether.testing\n"
            "assert not any(m == 'ray' or m.startswith('ray.') for m in sys.modules), 'ray imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_distributed_without_ray_raises_an_import_error_naming_the_extra() -> None:
    code = ("import sys\nsys.modules['ray'] = None\n"
            "try:\n    import tether.distributed\nexcept ImportError as e:\n    print(e)\nelse:\n    print('imported')\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert "pip install 'tether[ray]'" in out and "Ray Data" in out
