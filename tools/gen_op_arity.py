"""Writes cpp/src/ops/arity.inc: for each version of each ONNX operator, the fewest input
positions it takes, how many leading inputs must be present (not optional: Loop's M and cond
may be empty names), the most inputs, how many leading outputs must be listed and named (ONNX's
"single" outputs: Max's result, both of TopK's) and the most outputs it allows. A node is
checked against the version its model's opset selects (Slice takes its starts and ends as
inputs from opset 10, as attributes before).

    make gen         # or: .venv/bin/python tools/gen_op_arity.py --write
    make gen-check   # or: .venv/bin/python tools/gen_op_arity.py --check (part of `make lint`)

writes or checks all three tables from the schemas of the onnx version pyproject.toml pins
(and refuses another one). One table alone goes to standard output:

    .venv/bin/python tools/gen_op_arity.py [--index-types | --same-types]

The second table lists the inputs every version of an op types as integers or bool only
(Reshape's shape, Gather's indices, Loop's M and cond, Where's condition): kernels read them as
such, so a float or complex tensor there is a ShapeError too.

The third lists, per op version, the inputs that share one type variable (Add's A and B,
ScatterND's data and updates, all of Concat's inputs): kernels read them as one element type,
so inputs of two types there are a ShapeError as well.

Shape inference checks every ONNX-domain node against it before the op's own rule, so a node
that lacks a required input or lists outputs no version of its op has gets a ShapeError
naming it instead of reaching a kernel (an extra input can read as another op's: a fourth
input of Conv is FusedConv's summand). tests/python/test_op_arity.py checks the table
against the installed onnx package.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import onnx
from onnx import TensorProto, defs

_INDEX_TYPES = {TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8,
                TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64, TensorProto.BOOL}
_TENSOR_TYPES = {f"tensor({name.lower()})": value for name, value in TensorProto.DataType.items()}
_TENSOR_TYPES.update({"tensor(float)": TensorProto.FLOAT, "tensor(double)": TensorProto.DOUBLE})


def _present(schema: defs.OpSchema) -> int:
    """How many leading inputs of `schema` must be given (not optional, not empty)."""
    n = 0
    for formal in schema.inputs[: schema.min_input]:
        if formal.option == defs.OpSchema.FormalParameterOption.Optional:
            break
        n += 1
    return n


def _required_outputs(schema: defs.OpSchema) -> int:
    """How many leading outputs of `schema` are neither optional nor variadic."""
    n = 0
    for formal in schema.outputs:
        if formal.option != defs.OpSchema.FormalParameterOption.Single:
            break
        n += 1
    return n


def _arity(schema: defs.OpSchema) -> tuple[int, int, int, int, int]:
    return (schema.min_input, _present(schema), min(schema.max_input, 1 << 20), _required_outputs(schema),
            min(schema.max_output, 1 << 20))


def table() -> dict[tuple[str, int], tuple[int, int, int, int, int]]:
    """(op_type, since_version) -> (fewest input positions, fewest leading inputs that must be
    present, most inputs, leading outputs that must be given, most outputs) of that version of
    the op in the ONNX domain; since_version 0 is the loosest over every version, for a model
    whose opset predates the op."""
    out: dict[tuple[str, int], tuple[int, int, int, int, int]] = {}
    for schema in defs.get_all_schemas_with_history():
        if schema.domain not in ("", "ai.onnx"):
            continue
        this = _arity(schema)
        out[(schema.name, schema.since_version)] = this
        lo, present, most_in, outs, most_out = out.get((schema.name, 0), (1 << 30, 1 << 30, 0, 1 << 30, 0))
        out[(schema.name, 0)] = (min(lo, this[0]), min(present, this[1]), max(most_in, this[2]), min(outs, this[3]),
                                 max(most_out, this[4]))
    return dict(sorted(out.items()))


def index_types() -> dict[tuple[str, int], int]:
    """(op_type, input position) -> the ONNX dtypes allowed there (a bit mask by TensorProto
    number), for the positions every version of the op types as integers or bool only. A
    position at or past a variadic input of any version is left out (Scan's first input was
    sequence_lens before opset 9 and is a state of any type since)."""
    allowed: dict[tuple[str, int], set[int] | None] = {}
    variadic_from: dict[str, int] = {}
    for schema in defs.get_all_schemas_with_history():
        if schema.domain not in ("", "ai.onnx"):
            continue
        constraints = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
        for i, formal in enumerate(schema.inputs):
            if formal.option == defs.OpSchema.FormalParameterOption.Variadic:
                variadic_from[schema.name] = min(variadic_from.get(schema.name, i), i)
                break
            names = constraints.get(formal.type_str, [formal.type_str])
            types = {_TENSOR_TYPES.get(n, -1) for n in names}
            key = (schema.name, i)
            before = allowed.get(key, set())
            allowed[key] = None if before is None or -1 in types else before | types
    out = {}
    for (op, i), types in sorted(allowed.items()):
        if types and types <= _INDEX_TYPES and i < variadic_from.get(op, 1 << 30):
            out[(op, i)] = sum(1 << t for t in types)
    return out


def same_types() -> dict[tuple[str, int], list[tuple[int, int]]]:
    """(op_type, since_version) -> the groups of inputs that version types with one variable:
    (bit mask of single input positions, first position of a homogeneous variadic input of the
    same variable or -1). Only groups of two inputs or more (a variadic one counts as many); a
    version without any is listed with no groups when another version of its op has some, so
    that the version the opset selects is found (Pow's base and exponent may differ from 12)."""
    out: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for schema in defs.get_all_schemas_with_history():
        if schema.domain not in ("", "ai.onnx"):
            continue
        groups: dict[str, list[int]] = {}
        variadic: dict[str, int] = {}
        for i, formal in enumerate(schema.inputs):
            if formal.option == defs.OpSchema.FormalParameterOption.Variadic:
                if formal.is_homogeneous:
                    variadic[formal.type_str] = i
                break
            groups.setdefault(formal.type_str, []).append(i)
        rows = []
        for var in sorted(set(groups) | set(variadic)):
            singles = groups.get(var, [])
            if len(singles) + (2 if var in variadic else 0) < 2 or var.startswith("tensor("):
                continue  # a fixed type, not a variable: index_types and the op's rule check those
            rows.append((sum(1 << i for i in singles), variadic.get(var, -1)))
        out[(schema.name, schema.since_version)] = rows
    grouped = {op for (op, _), rows in out.items() if rows}
    return dict(sorted((key, rows) for key, rows in out.items() if key[0] in grouped))


def _render_arity() -> str:
    lines = [f"// Generated by tools/gen_op_arity.py from onnx {onnx.__version__}: op, since version (0: the loosest",
             "// over all versions), fewest input positions, fewest leading inputs that must be present, most",
             "// inputs, leading outputs that must be present, most outputs (variadic: 1 << 20)."]
    for (op, since), (lo, present, most_in, outs, most_out) in table().items():
        lines.append(f'{{"{op}", {since}, {lo}, {present}, {most_in}, {outs}, {most_out}}},')
    return "\n".join(lines) + "\n"


def _render_index_types() -> str:
    lines = [f"// Generated by tools/gen_op_arity.py --index-types from onnx {onnx.__version__}: op, input position,",
             "// the dtypes every version allows there (bit k: ONNX's TensorProto type k), integers or bool only."]
    for (op, i), mask in index_types().items():
        lines.append(f'{{"{op}", {i}, {mask:#x}}},')
    return "\n".join(lines) + "\n"


def _render_same_types() -> str:
    lines = [f"// Generated by tools/gen_op_arity.py --same-types from onnx {onnx.__version__}: op, since version,",
             "// inputs of one type variable (bit i: input i), first input of a variadic run of it (-1: none)."]
    for (op, since), rows in same_types().items():
        for mask, var in rows or [(0, -1)]:
            lines.append(f'{{"{op}", {since}, {mask:#x}, {var}}},')
    return "\n".join(lines) + "\n"


_ROOT = Path(__file__).resolve().parents[1]
_TABLES = {"cpp/src/ops/arity.inc": _render_arity, "cpp/src/ops/index_types.inc": _render_index_types,
           "cpp/src/ops/same_types.inc": _render_same_types}


def _pinned_onnx() -> str:
    """The onnx version pyproject.toml pins (`"onnx==X"` in the dev extra): the tables are
    generated from its schemas, so that they change only when the pin does."""
    found = re.search(r'"onnx==([^"]+)"', (_ROOT / "pyproject.toml").read_text())
    if not found:
        raise SystemExit("pyproject.toml pins no onnx version (\"onnx==X\" in the dev extra)")
    return found.group(1)


def _write_or_check(check: bool) -> None:
    pinned = _pinned_onnx()
    if onnx.__version__ != pinned:
        raise SystemExit(f"the tables come from onnx {pinned} (pyproject.toml), this Python has onnx "
                         f"{onnx.__version__}: pip install onnx=={pinned}")
    stale = []
    for relative, render in _TABLES.items():
        path, text = _ROOT / relative, render()
        if check:
            if not path.is_file() or path.read_text() != text:
                stale.append(relative)
        elif not path.is_file() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {relative}")
    if stale:
        raise SystemExit(f"{', '.join(stale)} differ from what onnx {pinned}'s schemas give: run `make gen`")


def main() -> None:
    args = sys.argv[1:]
    one_table = {(): _render_arity, ("--index-types",): _render_index_types, ("--same-types",): _render_same_types}
    if tuple(args) in one_table:
        sys.stdout.write(one_table[tuple(args)]())
    elif args in (["--write"], ["--check"]):
        _write_or_check(check=args == ["--check"])
    else:
        raise SystemExit("usage: gen_op_arity.py [--index-types | --same-types | --write | --check]")


if __name__ == "__main__":
    main()
