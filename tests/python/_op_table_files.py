"""The op table (_op_cases.py) as files, for runners without Python: per case, caseNNNN.onnx (the
case's model, its feeds as the inputs' defaults) and caseNNNN.expected.onnx (a model without
nodes whose outputs are initializers holding the oracle's outputs, named as the case's outputs;
metadata: the case id and its tolerance). tests/cpp/op_table_test.cc runs them on the CPU
engine, on this machine and under qemu-aarch64 (Makefile, test-arm64).

Run as a script: python tests/python/_op_table_files.py DIR writes the CPU cases into DIR.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import onnx
from _op_cases import OpCase, table
from onnx import helper, numpy_helper


def with_feeds_as_defaults(case: OpCase) -> onnx.ModelProto:
    """The case's model, each input holding its feed as an initializer (its default)."""
    m = onnx.load_from_string(case.model)
    for name, value in case.feeds.items():
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
    return m


def expected_model(case: OpCase) -> onnx.ModelProto:
    """The oracle's outputs as a model of initializers, one graph output per case output."""
    m = onnx.load_from_string(case.model)
    names = [o.name for o in m.graph.output]
    outs = case.expected()
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in zip(names, outs, strict=True)]
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), np.asarray(v).shape)
           for n, v in zip(names, outs, strict=True)]
    g = helper.make_graph([], "expected", [], vis, inits)
    e = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    helper.set_model_props(e, {"case": case.id, "rtol": repr(case.rtol)})
    return e


def cpu_cases() -> list[OpCase]:
    """The table's cases that run on the CPU engine."""
    return [c for c in table() if not c.backends or "cpu" in c.backends]


def write(directory: Path, cases: Iterable[OpCase], expected: bool = True) -> dict[str, str]:
    """Writes the cases (numbered: ids hold '/'); returns file stem -> case id."""
    directory.mkdir(parents=True, exist_ok=True)
    ids = {}
    for k, case in enumerate(cases):
        stem = f"case{k:04d}"
        ids[stem] = case.id
        onnx.save(with_feeds_as_defaults(case), str(directory / f"{stem}.onnx"))
        if expected:
            onnx.save(expected_model(case), str(directory / f"{stem}.expected.onnx"))
    return ids


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/python/_op_table_files.py DIR")
    written = write(Path(sys.argv[1]), cpu_cases())
    print(f"{len(written)} op-table cases written to {sys.argv[1]}")
