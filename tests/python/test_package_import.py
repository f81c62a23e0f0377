"""`import tether` loads the core and what compile and run need; the subpackages (quantize,
export, parity, convert, edit, llm, testing, distributed) load on first use, and every name of
tether.__all__ resolves."""

from __future__ import annotations

import subprocess
import sys

LAZY = ["convert", "distributed", "edit", "export", "llm", "parity", "quantize", "testing", "_bench"]


def _modules_after(code: str) -> list[str]:
    script = f"import sys\n{code}\nprint(' '.join(sorted(m for m in sys.modules if m.startswith('tether'))))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.split()


def test_import_tether_loads_no_subpackage():
    loaded = _modules_after("import tether as tt\nassert tt.compile and tt.load and tt.Session")
    assert "tether._core" in loaded
    assert [m for m in loaded if m.split(".")[1:2] and m.split(".")[1] in LAZY] == [], loaded


def test_a_subpackage_and_the_names_taken_from_subpackages_load_on_first_use():
    loaded = _modules_after("import tether as tt\nassert callable(tt.quantize.static)")
    assert "tether.quantize" in loaded and "tether.export" not in loaded
    import tether as tt
    from tether.parity import ParityReport, compare
    assert tt.compare is compare and tt.ParityReport is ParityReport
    assert callable(tt.track) and callable(tt.bench)
    for name in tt.__all__:
        assert getattr(tt, name) is not None, name
    assert set(tt.__all__) <= set(dir(tt))


def test_an_unknown_name_is_an_attribute_error():
    import pytest
    import tether as tt

    with pytest.raises(AttributeError, match="no attribute 'nonesuch'"):
        tt.nonesuch  # noqa: B018
