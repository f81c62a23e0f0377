"""compile(keep=...): values the passes leave computed, for tools that observe intermediates."""

from __future__ import annotations

import numpy as np
import pytest
import tether as tt


def test_every_kept_value_is_computed_and_equals_the_unoptimized_run(exported):
    model = tt.load(exported.path)
    feeds = exported.inputs(batch=2)
    plain = tt.compile(model, optimize=False, threads=1)
    _, reference = plain._core.run_capture(feeds, [])
    reference = dict(reference)
    names = sorted(reference)
    kept = tt.compile(model, threads=1, keep=names)
    outputs, captured = kept._core.run_capture(feeds, names)
    captured = dict(captured)
    # Every value of the unoptimized run exists in the optimized one, with the same values up
    # to the rounding of fused epilogues.
    assert sorted(captured) == names
    for name in names:
        r, c = reference[name], captured[name]
        assert r.shape == c.shape and r.dtype == c.dtype, name
        if np.issubdtype(r.dtype, np.floating):
            np.testing.assert_allclose(c, r, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(r).max())), err_msg=name)
        else:
            np.testing.assert_array_equal(c, r, err_msg=name)
    ref_out = plain.run(feeds)
    for got, (name, want) in zip(outputs, ref_out.items(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=name)


def test_keep_blocks_exactly_the_fusions_that_would_hide_the_value(exported_models):
    model = tt.load(exported_models["resnet"].path)
    fused = tt.compile(model)
    conv_outputs = [s["inputs"][0] for s in tt.compile(model, optimize=False)._core.steps() if s["op_type"] == "Relu"]
    hidden = [v for v in conv_outputs if all(v not in s["outputs"] for s in fused._core.steps())]
    assert hidden, "the optimized session fuses Conv + Relu"
    kept = tt.compile(model, keep=hidden[:1])
    written = {v for s in kept._core.steps() for v in s["outputs"]}
    assert hidden[0] in written
    # Only that fusion is given up: the other hidden values stay hidden.
    assert all(v not in written for v in hidden[1:])


def test_keep_names_a_value_the_model_lacks():
    b = tt.GraphBuilder()
    x = b.input("x", "float32", [2])
    b.output(b.node("Relu", [x], name="r"))
    with pytest.raises(tt.ArgumentError, match="keep: the model has no value named 'nope'"):
        tt.compile(b.build(), keep=["nope"])
