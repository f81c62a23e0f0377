"""Runs a test script in a subprocess under a forced TETHER_ISA (the dispatch is chosen once per
process), returning the JSON its last line prints.

    result = run_under_isa(Path(__file__), "avx2")   # {"isa": "avx2", "bad": {...}}
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


def run_under_isa(script: Path, isa: str | None) -> dict[str, Any]:
    """The script's last printed line as JSON, run with TETHER_ISA=isa (None: the native choice);
    skips when isa is "avx2" and this CPU has no AVX2, and checks the ISA the script reports."""
    import tether as tt

    native = tt.cpu_info()
    if isa == "avx2" and not native["avx2"]:
        pytest.skip("this CPU has no AVX2")
    env = dict(os.environ)
    env.pop("TETHER_ISA", None)
    if isa is not None:
        env["TETHER_ISA"] = isa
    out = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, check=True, cwd=script.parent
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["isa"] == (isa or native["isa"])
    return result
