"""The source layers keep their direction: graph passes and op definitions name no backend, the
Python bindings reach the core through its public headers only, and the Python package reaches
the compiled module through tether._native alone (docs/building.md, "Layout").
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def _includes(folder: Path, root: Path = ROOT) -> list[tuple[str, str]]:
    found = []
    for f in sorted(folder.rglob("*")):
        if f.suffix in (".cc", ".h", ".inc"):
            for inc in INCLUDE.findall(f.read_text()):
                found.append((str(f.relative_to(root)), inc))
    return found


@pytest.mark.parametrize("layer", ["passes", "ops"])
def test_passes_and_ops_include_nothing_from_the_engine(layer):
    files = _includes(ROOT / "cpp" / "src" / layer)
    assert files, f"no sources found under cpp/src/{layer}"
    crossing = [(f, inc) for f, inc in files if inc.startswith("engine/")]
    assert crossing == [], f"cpp/src/{layer} includes engine headers: {crossing}"


def test_bindings_include_only_public_headers():
    files = _includes(ROOT / "bindings")
    assert files
    private = [(f, inc) for f, inc in files if not (inc.startswith("tether/") or inc == "bindings.h")]
    assert private == [], f"the bindings include private headers: {private}"


def test_the_check_sees_a_crossing_include(tmp_path):
    # The scan itself: an engine include in a pass is found.
    (tmp_path / "p.cc").write_text('#include <vector>\n  #  include "engine/kernel.h"\n#include "ops/constant.h"\n')
    assert _includes(tmp_path, tmp_path) == [("p.cc", "engine/kernel.h"), ("p.cc", "ops/constant.h")]


# The executor and what every backend shares: they name no backend (a device is a Backend, its
# Space and one line of registration in engine/backends.cc).
SHARED_ENGINE = ["executor.h", "executor.cc", "executor_parts.h", "executor_space.cc", "space.h", "kernel.h",
                 "kernel.cc", "session.h", "session_parts.cc", "planner.h", "planner.cc", "plan_cache.h"]


def test_the_executor_names_no_backend():
    engine = ROOT / "cpp" / "src" / "engine"
    named = []
    for name in SHARED_ENGINE:
        code = re.sub(r"//[^\n]*", "", (engine / name).read_text())  # comments may give examples
        named += [(name, word) for word in ("vulkan", "Vulkan", "cpu::", "GpuKernel") if word in code]
        named += [(name, inc) for inc in INCLUDE.findall(code) if inc.startswith(("engine/vulkan/", "engine/cpu/"))]
    assert named == [], f"shared engine files name a backend: {named}"


def _core_imports(folder: Path, root: Path = ROOT) -> list[tuple[str, int]]:
    """(file, line) of each import of the compiled module tether._core under `folder`."""
    found = []
    for f in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
                names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            if any(n == "tether._core" or n.startswith("tether._core.") for n in names):
                found.append((str(f.relative_to(root)), node.lineno))
    return found


def test_the_package_reaches_the_core_through_native_alone():
    found = _core_imports(ROOT / "python" / "tether")
    assert [f for f, _ in found if f.endswith("_native.py")], "tether/_native.py no longer imports the core"
    others = [(f, line) for f, line in found if not f.endswith("tether/_native.py")]
    assert others == [], f"modules import tether._core directly (use `from tether._native import core`): {others}"


def test_the_check_sees_a_direct_core_import(tmp_path):
    (tmp_path / "a.py").write_text("from tether import _core\nimport tether._core as c\nfrom tether._native import core\n")
    (tmp_path / "b.py").write_text("from tether._core import ShapeError\n")
    assert _core_imports(tmp_path, tmp_path) == [("a.py", 1), ("a.py", 2), ("b.py", 1)]
