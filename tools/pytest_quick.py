"""The test selection of `make quick`: a pytest plugin that marks the tests listed in
tools/quick_skip.txt as `slow`, so that `-m "not slow"` leaves them out, and does not even
import the test files listed there whole. `make test` does not load it and runs every test.

    PYTHONPATH=tools .venv/bin/python -m pytest -p pytest_quick -m "not slow"

The list holds three kinds of lines:

    fixture:exported_models@tests/python/conftest.py   # every test that uses this fixture
    tests/python/test_bench_zoo.py                     # a whole file
    tests/python/test_engine.py::test_x[param]         # one test

Fixtures that take many seconds to set up (exporting every torch model, starting ray) are
listed by hand: their cost falls on whichever test uses them first. The tests are those that
took half a second or more (set-up included) in a run on the shared 2-core build machine;
regenerate them from JUnit reports of a full run and of a `make quick` run (the longest time
of each test counts; the fixture lines are kept):

    .venv/bin/python -m pytest --junitxml=/tmp/full.xml
    .venv/bin/python tools/pytest_quick.py /tmp/full.xml [/tmp/quick.xml ...] > /tmp/list
    mv /tmp/list tools/quick_skip.txt
"""

from __future__ import annotations

import inspect
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIST = Path(__file__).with_name("quick_skip.txt")
THRESHOLD_S = 0.5


def _read_list() -> tuple[set[str], set[str], set[tuple[str, str]]]:
    """(whole files, test node ids, (fixture, file that defines it)) from the list; '#' starts
    a comment."""
    files, tests, fixtures = set(), set(), set()
    for line in LIST.read_text().splitlines():
        entry = line.split("#", 1)[0].strip()
        if entry.startswith("fixture:"):
            name, _, path = entry[len("fixture:"):].partition("@")
            fixtures.add((name, path))
        elif entry:
            (tests if "::" in entry else files).add(entry)
    return files, tests, fixtures


_FILES, _TESTS, _FIXTURES = _read_list()


def _relative(path: str | Path) -> str | None:
    try:
        return Path(path).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    return True if _relative(collection_path) in _FILES else None


def _uses_listed_fixture(item: pytest.Item) -> bool:
    """Whether `item` uses, directly or through other fixtures, a fixture the list names (by
    name and the file that defines the one this test gets: test files reuse names)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    for name in item.fixturenames:
        definitions = info.name2fixturedefs.get(name)
        if definitions and (name, _relative(inspect.getsourcefile(definitions[-1].func) or "")) in _FIXTURES:
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid in _TESTS or _uses_listed_fixture(item):
            item.add_marker(pytest.mark.slow)


def _node_id(classname: str, name: str) -> str | None:
    """A JUnit test case's pytest node id: the classname's dotted path names the file, then
    any test class inside it; None when the file is gone (a report older than the tree)."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut]) + ".py"
        if (ROOT / path).is_file():
            return "::".join([path, *parts[cut:], name])
    return None


def _main(reports: list[str]) -> None:
    """Prints the list: the fixture lines of the current one, then the files whose every test is
    slow, then the slow tests of the others."""
    times: dict[str, dict[str, float]] = defaultdict(dict)
    for report in reports:
        for case in ET.parse(report).iter("testcase"):
            node = _node_id(case.get("classname", ""), case.get("name", ""))
            if node is None:
                continue
            cases = times[node.split("::", 1)[0]]
            cases[node] = max(cases.get(node, 0.0), float(case.get("time", "0")))
    print("# Written by tools/pytest_quick.py: what `make quick` leaves out (`make test` runs all of it).")
    print(f"# Fixtures by hand; tests of {THRESHOLD_S:g} s or more as measured, set-up included.")
    for line in LIST.read_text().splitlines():
        if line.startswith("fixture:"):
            print(line)
    for path, cases in sorted(times.items()):
        slow = {node: s for node, s in cases.items() if s >= THRESHOLD_S}
        if slow and len(slow) == len(cases):
            print(f"{path}  # {len(cases)} tests, {sum(cases.values()):.1f} s")
        else:
            for node, s in sorted(slow.items()):
                print(f"{node}  # {s:.1f} s")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit("usage: pytest_quick.py JUNIT_REPORT.xml... > LIST")
    _main(sys.argv[1:])
