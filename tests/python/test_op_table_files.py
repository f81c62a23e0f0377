"""The op table as files (_op_table_files.py) run by the C++ runner tests/cpp/op_table_test.cc on
the CPU engine of this machine: the same runner runs them under qemu-aarch64 in `make test`
(Makefile, test-arm64), so here it must pass on every case the table runs on the CPU."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from _op_table_files import cpu_cases, write

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "build" / "py" / "tests" / "cpp" / "op_table_test"


def test_the_cpp_runner_passes_every_cpu_case_of_the_op_table(tmp_path):
    assert PROGRAM.exists(), f"{PROGRAM} is missing: build the C++ tests first (make setup builds them)"
    cases = cpu_cases()
    write(tmp_path, cases)
    done = subprocess.run([str(PROGRAM)], env=dict(os.environ, TETHER_OP_TABLE_DIR=str(tmp_path)),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert re.search(rf"op-table: {len(cases)} of {len(cases)} cases match their oracle", done.stdout), done.stdout[-2000:]


def test_the_runner_reports_a_wrong_oracle(tmp_path):
    # One case whose expected output is changed must fail, naming the case.
    import onnx
    from onnx import numpy_helper

    case = next(c for c in cpu_cases() if c.id.startswith("Add"))
    write(tmp_path, [case])
    path = tmp_path / "case0000.expected.onnx"
    m = onnx.load(str(path))
    value = numpy_helper.to_array(m.graph.initializer[0]).copy()
    value.flat[0] += 1.0
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(value, m.graph.initializer[0].name))
    onnx.save(m, str(path))
    done = subprocess.run([str(PROGRAM)], env=dict(os.environ, TETHER_OP_TABLE_DIR=str(tmp_path)),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert case.id in done.stdout and "largest error" in done.stdout, done.stdout[-2000:]
