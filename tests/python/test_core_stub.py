"""python/tether/_core.pyi describes the compiled module as it is: every public function and
class of tether._core, each class's methods and properties, constructors, exception bases and
parameter names, read from the module by introspection and from the stub by its syntax tree.
A binding added, renamed or changed without its stub fails here, naming what differs."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
from tether import _core

STUB = Path(__file__).resolve().parents[2] / "python" / "tether" / "_core.pyi"


def _stub_tree() -> ast.Module:
    return ast.parse(STUB.read_text(), filename=str(STUB))


def _decorators(fn: ast.FunctionDef) -> set[str]:
    return {d.id if isinstance(d, ast.Name) else ast.unparse(d) for d in fn.decorator_list}


def _stub_defs() -> tuple[dict[str, ast.FunctionDef], dict[str, ast.ClassDef]]:
    """Top-level functions and classes of the stub (type aliases such as `_Type` are not names
    of the module)."""
    functions, classes = {}, {}
    for item in _stub_tree().body:
        if isinstance(item, ast.FunctionDef):
            functions[item.name] = item
        elif isinstance(item, ast.ClassDef):
            classes[item.name] = item
    return functions, classes


def _stub_members(cls: ast.ClassDef) -> dict[str, str]:
    """name -> kind for a stub class body: 'writable attribute' (annotated, or a property with a
    setter), 'read-only property', 'static method' or 'method'."""
    members: dict[str, str] = {}
    for item in cls.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            members[item.target.id] = "writable attribute"
        elif isinstance(item, ast.FunctionDef):
            decorators = _decorators(item)
            if any(d.endswith(".setter") for d in decorators):
                members[item.name] = "writable attribute"
            elif "property" in decorators:
                members[item.name] = "read-only property"
            elif "staticmethod" in decorators:
                members[item.name] = "static method"
            else:
                members[item.name] = "method"
    return members


def _module_members(cls: type) -> dict[str, str]:
    """name -> kind for a bound class, in the stub's words; '__init__' is listed only when the
    binding defines a constructor (pybind11 gives every class a slot that refuses to construct)."""
    members: dict[str, str] = {}
    for name, value in vars(cls).items():
        if name == "__init__":
            if (getattr(value, "__doc__", "") or "").startswith("__init__("):
                members[name] = "method"
            continue
        if name.startswith("_"):
            continue
        if isinstance(value, property):
            members[name] = "writable attribute" if value.fset is not None else "read-only property"
        elif isinstance(value, staticmethod):
            members[name] = "static method"
        else:
            members[name] = "method"
    return members


def _split_top_level(text: str) -> list[str]:
    """`text` split at the commas outside brackets and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _bound_parameters(obj: object) -> list[tuple[str, bool]] | None:
    """(name, has a default) per parameter of a pybind11 function, from the signature line of its
    docstring; None for an overloaded function (its docstring lists several signatures). A
    parameter bound without a name (pybind11 calls it argN) takes no keyword: it is named
    '(positional)'."""
    doc = (getattr(obj, "__doc__", "") or "").strip()
    first = doc.splitlines()[0] if doc else ""
    if "Overloaded function." in doc or "(" not in first:
        return None
    inside = first[first.index("(") + 1: first.rindex(")", 0, first.rindex("->") if "->" in first else None)]
    params = []
    for part in _split_top_level(inside):
        name = part.split(":", 1)[0].split("=", 1)[0].strip()
        if name != "self":
            params.append(("(positional)" if re.fullmatch(r"arg\d+", name) else name, " = " in part))
    return params


def _stub_parameters(fn: ast.FunctionDef) -> list[tuple[str, bool]]:
    args = fn.args.posonlyargs + fn.args.args
    n_defaults = len(fn.args.defaults)
    positional = {a.arg for a in fn.args.posonlyargs}
    params = [("(positional)" if a.arg in positional else a.arg, i >= len(args) - n_defaults)
              for i, a in enumerate(args)]
    params += [(a.arg, d is not None) for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True)]
    is_method = bool(args) and args[0].arg == "self"
    return params[1:] if is_method else params


def _public_module_names() -> set[str]:
    return {name for name in dir(_core) if not name.startswith("_")}


def test_every_public_name_of_the_module_is_in_the_stub_and_every_stub_name_in_the_module():
    functions, classes = _stub_defs()
    stub_names = set(functions) | set(classes)
    missing = sorted(_public_module_names() - stub_names)
    extra = sorted(name for name in stub_names if not hasattr(_core, name))
    assert not missing, f"tether._core has {missing}, which {STUB.name} does not declare"
    assert not extra, f"{STUB.name} declares {extra}, which tether._core does not have"


def test_functions_are_functions_and_classes_classes_in_both():
    functions, classes = _stub_defs()
    wrong = [f"{n}: a class in the stub" for n in classes if hasattr(_core, n) and not inspect.isclass(getattr(_core, n))]
    wrong += [f"{n}: a function in the stub" for n in functions if inspect.isclass(getattr(_core, n, None))]
    assert not wrong, wrong


def test_each_class_has_the_stubs_methods_properties_and_constructor():
    _, classes = _stub_defs()
    problems = []
    for name, node in sorted(classes.items()):
        cls = getattr(_core, name, None)
        if not inspect.isclass(cls) or issubclass(cls, BaseException):
            continue
        want, got = _module_members(cls), _stub_members(node)
        got = {k: v for k, v in got.items() if not k.startswith("_") or k == "__init__"}
        for member in sorted(set(want) | set(got)):
            if member not in got:
                problems.append(f"{name}.{member}: a {want[member]} of the module, missing from the stub")
            elif member not in want:
                problems.append(f"{name}.{member}: in the stub as a {got[member]}, not in the module")
            elif want[member] != got[member]:
                problems.append(f"{name}.{member}: the module has a {want[member]}, the stub a {got[member]}")
    # A read-only property declared `x: int` would let a type checker pass an assignment that
    # raises AttributeError at run time.
    assert not problems, "\n".join(problems)


def test_exception_classes_have_the_stubs_bases():
    _, classes = _stub_defs()
    problems = []
    for name, node in sorted(classes.items()):
        cls = getattr(_core, name, None)
        if not (inspect.isclass(cls) and issubclass(cls, BaseException)):
            continue
        want = [base.__name__ for base in cls.__bases__]
        got = [ast.unparse(base) for base in node.bases]
        if want != got:
            problems.append(f"{name}: bases {want} in the module, {got} in the stub")
    assert not problems, "\n".join(problems)


def _callables() -> list[tuple[str, object, ast.FunctionDef]]:
    functions, classes = _stub_defs()
    pairs = [(name, getattr(_core, name), fn) for name, fn in functions.items() if hasattr(_core, name)]
    for cls_name, node in classes.items():
        cls = getattr(_core, cls_name, None)
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name in vars(cls or object):
                if "property" in _decorators(item) or any(d.endswith(".setter") for d in _decorators(item)):
                    continue
                pairs.append((f"{cls_name}.{item.name}", getattr(cls, item.name), item))
    return sorted(pairs, key=lambda p: p[0])


_CALLABLES = _callables()


@pytest.mark.parametrize("name,obj,fn", _CALLABLES, ids=[name for name, _, _ in _CALLABLES])
def test_parameters_have_the_stubs_names_order_and_defaults(name, obj, fn):
    bound = _bound_parameters(obj)
    if bound is None:
        pytest.skip(f"{name} is overloaded: its docstring lists several signatures")
    assert _stub_parameters(fn) == bound, f"{name}: (parameter, has a default) differ between stub and module"


def test_the_signature_reader_sees_what_inspect_sees_on_a_plain_python_function():
    # An oracle for the docstring parser above: a Python function's signature in pybind11's
    # docstring form, read back, gives what inspect.signature reports.
    def sample(a, b: dict[str, int] = {"x": 1, "y": 2}, c: str = "p, q", d: tuple[int, int] = (1, 2)):  # noqa: B006
        pass

    sample.__doc__ = "sample(a: object, b: dict[str, int] = {'x': 1, 'y': 2}, c: str = 'p, q', d: tuple[int, int] = (1, 2)) -> None"
    want = [(p.name, p.default is not inspect.Parameter.empty) for p in inspect.signature(sample).parameters.values()]
    assert _bound_parameters(sample) == want


def test_an_unnamed_bound_parameter_matches_only_a_positional_only_stub_parameter():
    # pybind11 names a parameter bound without py::arg "arg0"; it takes no keyword, which the
    # stub says with "/".
    def bound():
        pass

    bound.__doc__ = "from_bytes(arg0: bytes) -> object"
    positional = ast.parse("def from_bytes(data: bytes, /) -> object: ...").body[0]
    keyword = ast.parse("def from_bytes(data: bytes) -> object: ...").body[0]
    assert _stub_parameters(positional) == _bound_parameters(bound)
    assert _stub_parameters(keyword) != _bound_parameters(bound)
