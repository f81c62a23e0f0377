"""NaN and infinity are counted per output and per layer on both sides, and reported even when
both sides agree; integer outputs are judged by their count of unequal elements alone. The
oracle is numpy on the same arrays."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from tether.parity import CallableRunner, InputSpec, OnnxRuntimeRunner, TetherRunner, compare, compare_arrays


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_nonfinite_counts_match_numpy_on_each_side(dtype: type) -> None:
    rng = np.random.default_rng(2)
    r = rng.standard_normal(200).astype(dtype)
    c = r.copy()
    r[[3, 50, 77]] = np.nan
    c[[3, 50]] = np.nan
    r[[10, 11]] = np.inf
    c[[10, 12, 13]] = -np.inf
    m = compare_arrays(r, c)
    assert (m.reference_nan, m.reference_inf) == (int(np.isnan(r).sum()), int(np.isinf(r).sum()))
    assert (m.candidate_nan, m.candidate_inf) == (int(np.isnan(c).sum()), int(np.isinf(c).sum()))
    assert m.nonfinite and not m.ok
    d = m.to_dict()
    assert (d["reference_nan"], d["candidate_inf"]) == (3, 3)


def test_agreeing_nan_and_infinity_pass_but_are_reported_per_output_and_layer(tmp_path: Path) -> None:
    g = helper.make_graph(
        [helper.make_node("Log", ["x"], ["logx"], name="log"),
         helper.make_node("Reciprocal", ["x"], ["inv"], name="inverse"),
         helper.make_node("Add", ["logx", "inv"], ["y"], name="sum")],
        "nonfinite", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [6])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [6])])
    path = tmp_path / "nf.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    x = np.float32([-1, 0, 0.5, 1, 2, 4])
    with np.errstate(all="ignore"):
        logx, inv = np.log(x), np.reciprocal(x)
        y = logx + inv
    rep = compare(OnnxRuntimeRunner(path), TetherRunner(path, optimize=False), x, layerwise=True)
    assert rep.ok, rep.table()
    m = rep.outputs[0].metrics
    assert (m.reference_nan, m.reference_inf) == (int(np.isnan(y).sum()), int(np.isinf(y).sum()))
    assert (m.candidate_nan, m.candidate_inf) == (m.reference_nan, m.reference_inf)
    text = rep.table()
    assert (f"NaN or infinity in output 'y': reference {int(np.isnan(y).sum())} NaN {int(np.isinf(y).sum())} inf"
            in text), text
    assert "both sides agree on their positions" in text
    layers = {la.value: la.metrics for la in rep.layers or [] if la.metrics is not None}
    for value, oracle in (("logx", logx), ("inv", inv)):
        lm = layers[value]
        assert (lm.reference_nan, lm.reference_inf) == (int(np.isnan(oracle).sum()), int(np.isinf(oracle).sum()))
    nonfinite_layers = sum(1 for v in (logx, inv, y) if not np.isfinite(v).all())
    assert f"{nonfinite_layers} layer values hold NaN or infinity; the first: 'log' (Log)" in text, text
    data = json.loads(rep.to_json())
    assert data["outputs"][0]["metrics"]["candidate_nan"] == int(np.isnan(y).sum())
    page = rep.to_html()
    assert 'class="nonfinite_reference nonfinite"' in page


def test_integer_outputs_are_judged_by_mismatch_count_without_snr_or_cosine() -> None:
    spec = [InputSpec("x", np.dtype("float32"), (5, 7))]
    x = np.random.default_rng(4).standard_normal((5, 7)).astype(np.float32)
    ref_ids = np.argmax(x, axis=1)
    cand_ids = ref_ids.copy()
    cand_ids[2] = (cand_ids[2] + 1) % 7
    ref = CallableRunner(lambda x: {"ids": np.argmax(x, axis=1)}, name="numpy", input_specs=spec)
    cand = CallableRunner(lambda x: {"ids": cand_ids}, name="edited", input_specs=spec)
    rep = compare(ref, cand, x)
    m = rep.outputs[0].metrics
    assert m.exact and not m.ok and m.mismatches == int((ref_ids != cand_ids).sum())
    row = next(line for line in rep.table().splitlines() if line.startswith("ids "))
    assert f"{m.mismatches} of {ref_ids.size}" in row and "exact" in row and "dB" not in row
    d = m.to_dict()
    assert d["cosine"] is None and d["snr_db"] is None and d["max_rel_error"] is None
    assert d["mismatches"] == 1
