"""The build's configure step: a missing required library names the Debian package to
install; missing Vulkan only says the Vulkan engine is left out."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def configure(tmp_path: Path, *defines: str) -> subprocess.CompletedProcess[str]:
    cmake = shutil.which("cmake")
    assert cmake is not None
    return subprocess.run(
        [cmake, "-S", str(ROOT), "-B", str(tmp_path / "build"), "-DTETHER_BUILD_TESTS=ON", *defines],
        capture_output=True, text=True,
    )


@pytest.mark.parametrize(
    "package,define",
    [
        ("libprotobuf-dev", "-DCMAKE_DISABLE_FIND_PACKAGE_Protobuf=TRUE"),
        ("libeigen3-dev", "-DCMAKE_DISABLE_FIND_PACKAGE_Eigen3=TRUE"),
        ("libgtest-dev", "-DCMAKE_DISABLE_FIND_PACKAGE_GTest=TRUE"),
    ],
)
def test_missing_required_library_names_the_debian_package(package, define, tmp_path):
    r = configure(tmp_path, define)
    assert r.returncode != 0
    assert f"apt-get install {package}" in " ".join(r.stderr.split())


def test_missing_vulkan_builds_without_the_vulkan_engine(tmp_path):
    r = configure(tmp_path, "-DCMAKE_DISABLE_FIND_PACKAGE_Vulkan=TRUE")
    assert r.returncode == 0, r.stderr
    message = " ".join(r.stderr.split())  # cmake wraps long messages
    assert "building without the Vulkan engine" in message
    assert "Install libvulkan-dev, glslc and mesa-vulkan-drivers" in message


def test_build_never_uses_march_native():
    for f in [ROOT / "CMakeLists.txt", ROOT / "pyproject.toml", *ROOT.glob("cmake/*.cmake"), *ROOT.glob("*/CMakeLists.txt"),
              *ROOT.glob("cpp/**/CMakeLists.txt")]:
        text = f.read_text()
        assert "-march=native" not in text and "-mtune=native" not in text, f
