"""Writes the seed corpus of engine_fuzzer: one or two small valid models per op the CPU engine
runs, taken from the node test cases of the installed `onnx` package (the conformance suite's
models), with each integer or bool input stored as an initializer holding the case's values,
so that shape tensors, axes, indices and repeats are part of the model the fuzzer mutates.
Float inputs stay graph inputs: the fuzzer generates their values.

    .venv/bin/python tests/fuzz/make_engine_seeds.py tests/fuzz/engine_seeds

Needs tether (for the list of ops), onnx and numpy. Cases whose inputs are sequences,
optionals or strings, or hold more than 4096 values, are left out.
"""

from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import tether as tt
from onnx import numpy_helper

MAX_VALUES = 4096
PER_OP = 2


def _ops(graph: onnx.GraphProto) -> set[tuple[str, str]]:
    found = set()
    for node in graph.node:
        found.add(("" if node.domain in ("", "ai.onnx") else node.domain, node.op_type))
        for attr in node.attribute:
            for g in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
                found |= _ops(g)
    return found


def seed(case) -> onnx.ModelProto | None:
    """The case's model with its integer inputs turned into initializers, or None."""
    if not case.data_sets:
        return None
    feeds = case.data_sets[0][0]
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    graph = model.graph
    if len(feeds) != len(graph.input):
        return None
    keep = []
    for vi, value in zip(graph.input, feeds, strict=True):
        if not isinstance(value, np.ndarray) or value.dtype.kind in "OUS" or value.size > MAX_VALUES:
            return None
        if value.dtype.kind in "iub":
            graph.initializer.append(numpy_helper.from_array(value, vi.name))
        else:
            keep.append(vi)
    del graph.input[:]
    graph.input.extend(keep)
    return model


def main(out: Path) -> None:
    from onnx.backend.test.case.node import collect_testcases

    supported = set(tt.supported_ops("cpu"))
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.onnx"):
        old.unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = sorted(collect_testcases(None), key=lambda c: c.name)
    per_op: dict[str, int] = {}
    written = 0
    for case in cases:
        if "_expanded" in case.name or not _ops(case.model.graph) <= supported:
            continue
        op = case.model.graph.node[0].op_type
        if per_op.get(op, 0) >= PER_OP:
            continue
        model = seed(case)
        if model is None:
            continue
        per_op[op] = per_op.get(op, 0) + 1
        name = re.sub(r"[^A-Za-z0-9_]", "_", case.name.removeprefix("test_"))
        (out / f"{name}.onnx").write_bytes(model.SerializeToString())
        written += 1
    print(f"{written} seeds for {len(per_op)} ops in {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fuzz/engine_seeds"))
