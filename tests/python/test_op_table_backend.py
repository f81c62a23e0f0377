"""The shared op table (_op_cases.py) on a third backend that the executor does not know: the
reference backend that tests/cpp/executor_backend_test.cc registers (plain loops for a dozen
float32 ops, host memory, its own name). Each case is written as a model whose inputs carry the
case's feeds as defaults; the C++ test runs every case with a node of the backend's ops mixed
with the CPU and checks it against the CPU engine alone, and that each of the backend's ops ran
on it in some case (docs/engine.md, "One executor")."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from _op_cases import op_cases
from _op_table_files import write

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "build" / "py" / "tests" / "cpp" / "executor_backend_test"


def test_the_reference_backend_runs_the_op_table_cases_of_its_ops(tmp_path):
    assert PROGRAM.exists(), f"{PROGRAM} is missing: build the C++ tests first (make setup builds them)"
    ids = write(tmp_path, op_cases(), expected=False)
    env = dict(os.environ, TETHER_OP_TABLE_DIR=str(tmp_path))
    done = subprocess.run([str(PROGRAM), "--gtest_filter=ExecutorBackend.RunsTheOpTableCasesOfItsOps"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "[  SKIPPED ]" not in done.stdout, done.stdout[-2000:]
    ran = dict(re.findall(r"^op-table (\S+): (\d+) reference kernels", done.stdout, re.M))
    # The cases that run there are table cases, and most of them put kernels on the backend.
    assert ran and set(ran) <= set(ids)
    assert sum(int(n) > 0 for n in ran.values()) >= len(ran) // 2, {ids[k]: n for k, n in ran.items()}
