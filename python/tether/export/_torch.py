"""tether.export.torch: a torch module to a verified ONNX file, with its golden bundle beside it."""

from __future__ import annotations

import contextlib
import inspect
import io
import linecache
import logging
import os
import re
import shutil
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NoReturn

from tether._model import load
from tether._native import core as _core
from tether.export._files import Staging
from tether.export._result import ExportError, ExportResult, fail, first_line, note
from tether.export._torch_check import Options, verify
from tether.parity import Tolerance

Dynamic = Mapping[str, Mapping[int, Any]]

_DYNAMO = "torch.onnx.export(dynamo=True)"
_TORCHSCRIPT = "torch.onnx.export(dynamo=False)"
# The tracer's warning when a Python `if` (or bool()) reads a tensor's value: the branch taken is recorded.
_BRANCH_WARNING = "Python boolean"


def _forward_names(module: Any, count: int) -> list[str]:
    """The forward's positional parameter names, as the exporter names the graph inputs."""
    params = [p for p in inspect.signature(module.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(params) >= count:
        return [p.name for p in params[:count]]
    return [p.name for p in params] + [f"input_{i}" for i in range(len(params), count)]


def _input_names(module: Any, count: int, given: Sequence[str] | None) -> list[str]:
    if given is None:
        return _forward_names(module, count)
    names = list(given)
    if len(names) != count or not all(isinstance(n, str) and n for n in names):
        raise _core.ArgumentError(f"input_names must be {count} non-empty strings, one per example input; got {names}")
    if len(set(names)) != len(names):
        raise _core.ArgumentError(f"input_names must be distinct; got {names}")
    return names


def _output_names(given: Sequence[str] | None) -> list[str] | None:
    """``output_names`` checked as far as it can be before exporting: non-empty, distinct strings."""
    if given is None:
        return None
    names = list(given)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise _core.ArgumentError(f"output_names must be non-empty strings, one per output of the module; got {names}")
    if len(set(names)) != len(names):
        raise _core.ArgumentError(f"output_names must be distinct; got {names}")
    return names


def _check_output_count(given: list[str] | None, exported: list[str]) -> None:
    """The exporters name as many outputs as they are given names and leave the rest (or drop
    the extra names) silently: a count that is not the module's is an error."""
    if given is not None and len(given) != len(exported):
        raise _core.ArgumentError(f"output_names holds {len(given)} name{'s' * (len(given) != 1)}; the module "
                                  f"returns {len(exported)} outputs (the exported graph's outputs: {exported}): give "
                                  "one name per output, in the order forward() returns them (nested outputs flattened)")


def _dims(dynamic: Dynamic | None, names: list[str],
          named_by: str) -> tuple[dict[str, dict[int, str]], tuple[Any, ...]]:
    """Both styles of ``dynamic`` as (names per input and axis, torch.export dynamic_shapes in
    the order of the example inputs).

    A string becomes one ``torch.export.Dim`` per distinct name, so inputs that share a name
    share the dim; a Dim passes through under its own name."""
    import torch

    if not dynamic:
        return {}, ()
    unknown = [k for k in dynamic if k not in names]
    if unknown:
        raise _core.ArgumentError(f"dynamic names {unknown}, which are not {named_by}; its inputs are {names}")
    made: dict[str, Any] = {}
    named: dict[str, dict[int, str]] = {}
    shapes: dict[str, Any] = {}
    for inp, axes in dynamic.items():
        named[inp], shapes[inp] = {}, {}
        for axis, dim in axes.items():
            if isinstance(dim, str):
                if not dim.isidentifier():
                    raise _core.ArgumentError(f"dynamic dim name {dim!r} of input '{inp}' must be an identifier")
                dim_obj = made.setdefault(dim, torch.export.Dim(dim))
                named[inp][int(axis)] = dim
            else:
                dim_obj = dim
                named[inp][int(axis)] = str(getattr(dim, "__name__", dim))
            shapes[inp][int(axis)] = dim_obj
    return named, tuple(shapes.get(n) for n in names)


def _check_sizes(sizes: Mapping[str, int] | None, dims: dict[str, dict[int, str]], args: tuple[Any, ...],
                 names: list[str]) -> dict[str, int]:
    """The size of each dynamic dim at the second check: ``sizes`` where given, else one larger
    than the example's."""
    example: dict[str, int] = {}
    for n, a in zip(names, args, strict=True):
        for axis, dim in dims.get(n, {}).items():
            example.setdefault(dim, int(a.shape[axis]))
    given = dict(sizes or {})
    unknown = [k for k in given if k not in example]
    if unknown:
        raise _core.ArgumentError(f"check_sizes names {unknown}, which are not dynamic dims; the dynamic dims are "
                                  f"{sorted(example)}")
    for dim, size in given.items():
        if not isinstance(size, int) or size < 1 or size == example[dim]:
            raise _core.ArgumentError(f"check_sizes['{dim}'] = {size!r}: give a size of at least 1 other than the "
                                      f"example's {example[dim]}, so the check runs the file at a second size")
    return {dim: given.get(dim, size + 1) for dim, size in example.items()}


def _export_dynamo(module: Any, args: tuple[Any, ...], path: Path, ex: _Export) -> None:
    import torch

    program = torch.onnx.export(module, args, None, dynamo=True, input_names=ex.names, output_names=ex.outputs,
                                dynamic_shapes=ex.shapes or None, opset_version=ex.opset, verbose=False,
                                custom_translation_table=dict(ex.table) if ex.table else None)
    assert program is not None
    program.save(str(path), external_data=True)


def _export_torchscript(module: Any, args: tuple[Any, ...], path: Path, ex: _Export) -> None:
    import torch

    torch.onnx.export(module, args, str(path), dynamo=False, input_names=ex.names, output_names=ex.outputs,
                      dynamic_axes=ex.dims or None, opset_version=ex.opset or 17, verbose=False)


def _failed_op(error: BaseException) -> str | None:
    """The torch op named in an exporter's error, as ``namespace::name``."""
    text = f"{error}\n{error.__cause__ or ''}"
    for pattern in (r"OpOverload\(op='([\w.]+)'", r"\b(aten|prims|[a-z_][\w]*)::(\w+)", r"torch\.ops\.(\w+)\.(\w+)"):
        m = re.search(pattern, text)
        if m:
            op = m.group(1) if m.lastindex == 1 else f"{m.group(1)}::{m.group(2)}"
            return op.replace(".default", "").replace(".", "::", 1) if "::" not in op else op
    return None


def _module_path(module: Any, args: tuple[Any, ...], op: str) -> str | None:
    """Where ``op`` is called in the module, from torch.export's record of module calls."""
    import torch

    try:
        program = torch.export.export(module, args, strict=False)
    except Exception:  # noqa: BLE001 - the module path is a hint; the op is reported without it
        return None
    ns, _, name = op.partition("::")
    for node in program.graph.nodes:
        target = str(node.target)
        if node.op == "call_function" and (f"{ns}.{name}" in target or f"{ns}::{name}" in target):
            stack = node.meta.get("nn_module_stack") or {}
            if stack:
                path = list(stack.values())[-1][0]
                return str(path) or "(the top module)"
            return "(the top module)"
    return None


def _cause(error: BaseException) -> str:
    """What an exporter's error comes down to: the innermost exception of the chain (the
    dynamo exporter wraps the real error in a page of next steps), with the line of the
    module's code that raised it when the error names one."""
    inner, seen = error, {id(error)}
    while inner.__cause__ is not None and id(inner.__cause__) not in seen:
        inner = inner.__cause__
        seen.add(id(inner))
    text = str(error)
    summary = re.search(r"## Exception summary\s*<class '(?:[\w.]+\.)?(\w+)'>: ([^\n]+)", text)
    if inner is error and summary:
        what = f"{summary.group(1)}: {summary.group(2).strip()}"
    else:
        what = f"{type(inner).__name__}: {first_line(inner)}"
    where = re.search(r'The following call raised this error:\s*File "([^"]+)", line (\d+), in (\w+)\s*\n\s*([^\n]+)',
                      f"{text}\n{inner}")
    if where:
        what += f" (in {where.group(3)}, {Path(where.group(1)).name}:{where.group(2)}: `{where.group(4).strip()}`)"
    return what


def _raise_export_error(module: Any, args: tuple[Any, ...], result: ExportResult, first: BaseException,
                        second: BaseException | None) -> NoReturn:
    op = _failed_op(first) or (second and _failed_op(second))
    where = _module_path(module, args, op) if op else None
    msg = f"torch.onnx.export could not export {type(module).__name__}"
    if op:
        msg += f": no ONNX translation for the torch op '{op}'"
        if where:
            msg += f", called in module '{where}'"
    msg += f".\n  {type(first).__name__}: {first_line(first)}"
    if _cause(first) != f"{type(first).__name__}: {first_line(first)}":
        msg += f"\n  cause: {_cause(first)}"
    if second is not None:
        msg += f"\n  TorchScript exporter: {type(second).__name__}: {first_line(second)}"
    msg += ("\n  Register a translation with tether.export.torch(custom_translation_table=...), or rewrite that part "
            "of the module with ops ONNX has.")
    result.failure = msg
    err = ExportError(f"export to {result.path}: {msg}")
    err.result = result  # type: ignore[attr-defined]
    raise err from first


@dataclass
class _Export:
    """What both exporters are given."""

    names: list[str]
    outputs: list[str] | None
    dims: dict[str, dict[int, str]]
    shapes: tuple[Any, ...]
    opset: int | None
    table: Mapping[Any, Any] | None
    notes: list[str] = field(default_factory=list)
    tracer: list[warnings.WarningMessage] = field(default_factory=list)
    dynamo_error: str = ""


def torch(module: Any, example_inputs: Any, path: str | os.PathLike[str], *, dynamic: Dynamic | None = None,
          input_names: Sequence[str] | None = None, output_names: Sequence[str] | None = None,
          opset: int | None = None, external_data: bool | Literal["auto"] = "auto", golden: bool = True,
          tolerance: Tolerance | str | None = None, check: bool = True, threads: int | None = None,
          seed: int = 0, exporter: Literal["auto", "dynamo", "torchscript"] = "auto",
          custom_translation_table: Mapping[Any, Any] | None = None, check_sizes: Mapping[str, int] | None = None,
          generated_inputs: int = 3, allow_baked_branches: bool = False) -> ExportResult:
    """Exports a torch module to ONNX at ``path`` and proves the file computes what the module does.

    ``example_inputs``: a tensor or a tuple of tensors, the forward's positional arguments; the
    graph's inputs take ``input_names`` (default: the forward's parameter names), its outputs
    ``output_names`` (default: the exporter's names; one per output, else ArgumentError).
    ``dynamic``: dims that must stay symbolic, per input name, as names
    (``{"x": {0: "batch"}}``) or ``torch.export.Dim`` objects (``{"x": {0: Dim("batch")}}``).
    ``custom_translation_table``: ``{torch op: onnxscript function}`` for ops the dynamo
    exporter cannot translate, passed to ``torch.onnx.export``.

    Steps: the module goes to eval mode (a warning when it was training; its mode is restored
    afterwards); the exporter torch recommends (``dynamo=True``) runs, and when it fails the
    TorchScript exporter runs with a warning giving the cause (``exporter="dynamo"`` or
    ``"torchscript"`` picks one; ``exporter_reason`` says which ran and why). A branch the
    TorchScript tracer recorded on a tensor's value (``if x.mean() > 0``) fails the export
    unless ``allow_baked_branches=True``. Weights past 2 GiB go to external data when
    ``external_data="auto"`` (``True`` and ``False`` force it). Then tether runs the file (or
    onnxruntime, when tether lacks a kernel) and compares it with the module on the example
    (``report``), on ``generated_inputs`` inputs of the example's shapes drawn from its value
    range and its mirror image (``generated_report``; 0 turns it off), and with every dynamic
    dim at a second size, one larger or ``check_sizes[dim]`` (``dynamic_report``), to prove the
    dim is really dynamic; and writes the golden bundle (example inputs and the module's
    outputs) to ``<path without .onnx>.golden``.

    Without a ``tolerance``, each float output is compared with its dtype's profile (fp32:
    atol 1e-5, rtol 1e-4) with atol scaled by the largest magnitude the output reaches, so a
    deep network's float summation order does not fail it.

    Files are written under temporary names beside ``path`` and moved into place once
    verified: an export that raises leaves nothing at ``path`` (an earlier file there stays).

    Raises ExportError when both exporters fail (naming the torch op and the module path where
    it is called), when neither tether nor onnxruntime can run the file, when a requested
    dynamic dim was fixed, when a branch was baked, and, with ``check=True``, when parity
    fails; the error's ``result`` then holds the ExportResult with ``failure`` set.

    Example:
        >>> res = tt.export.torch(net, (x,), "net.onnx", dynamic={"x": {0: "batch"}})  # doctest: +SKIP
        >>> print(res.report.table())                                                   # doctest: +SKIP
        >>> res = tt.export.torch(net, (x,), "net.onnx", input_names=["image"],         # doctest: +SKIP
        ...                       dynamic={"image": {0: "batch"}}, check_sizes={"batch": 4})
    """
    import torch as torch_

    path = Path(path)
    args = tuple(example_inputs) if isinstance(example_inputs, list | tuple) else (example_inputs,)
    if not all(isinstance(a, torch_.Tensor) for a in args):
        raise _core.ArgumentError("example_inputs must be a torch.Tensor or a tuple of them")
    _check_options(exporter, external_data, custom_translation_table, generated_inputs)
    names = _input_names(module, len(args), input_names)
    dims, shapes = _dims(dynamic, names, "inputs of forward()" if input_names is None else "in input_names")
    ex = _Export(names, _output_names(output_names), dims, shapes, opset, custom_translation_table)
    for n, a in zip(names, args, strict=True):
        for axis, dim in dims.get(n, {}).items():
            if axis >= a.dim():
                raise _core.ArgumentError(f"dynamic dim {axis} of input '{n}': the example has rank {a.dim()}")
            if a.shape[axis] < 2:
                ex.notes.append(f"dim {axis} ('{dim}') of input '{n}' is {a.shape[axis]} in the example; torch "
                                "specializes sizes 0 and 1, so give an example of size 2 or more for a dynamic dim")
    sizes = _check_sizes(check_sizes, dims, args, names)
    opts = Options(tolerance, check, threads, seed, golden, generated_inputs, sizes)

    staging = Staging(path, golden=golden)
    result = ExportResult(path=path, exporter=_TORCHSCRIPT if exporter == "torchscript" else _DYNAMO,
                          dynamic_dims=dims, warnings=ex.notes)
    try:
        _export_in_eval_mode(module, args, staging, result, ex, external_data, exporter)
        _check_branches(result, ex, allow_baked_branches)
        for w in result.warnings:
            warnings.warn(w, stacklevel=2)
        shown = len(result.warnings)
        verify(module, args, names, result, staging.path, opts)
        for w in result.warnings[shown:]:
            warnings.warn(w, stacklevel=2)
        staging.commit()
    except BaseException:
        staging.discard()
        result.golden_path = result.external_data = None
        raise
    return result


def _check_options(exporter: str, external_data: Any, table: Any, generated: Any) -> None:
    if exporter not in ("auto", "dynamo", "torchscript"):
        raise _core.ArgumentError(f"exporter must be 'auto', 'dynamo' or 'torchscript', got {exporter!r}")
    if external_data not in (True, False, "auto"):
        raise _core.ArgumentError(f"external_data must be True, False or 'auto', got {external_data!r}")
    if table is not None and not isinstance(table, Mapping):
        raise _core.ArgumentError("custom_translation_table must be a dict {torch op: onnxscript function}, got a "
                                  f"{type(table).__name__}")
    if table and exporter == "torchscript":
        raise _core.ArgumentError("custom_translation_table is for the dynamo exporter; exporter='torchscript' "
                                  "cannot use it")
    if not isinstance(generated, int) or isinstance(generated, bool) or generated < 0:
        raise _core.ArgumentError(f"generated_inputs must be an int >= 0, got {generated!r}")


def _export_in_eval_mode(module: Any, args: tuple[Any, ...], staging: Staging, result: ExportResult, ex: _Export,
                         external_data: bool | Literal["auto"], which: str) -> None:
    was_training = bool(getattr(module, "training", False))
    if was_training:
        ex.notes.append("the module was in training mode; it was exported in eval mode (Dropout off, BatchNorm "
                        "running statistics) and put back in training mode afterwards")
    module.eval()
    try:
        external = _export(module, args, staging, result, ex, external_data, which)
    finally:
        if was_training:
            module.train()
    result.external_data = result.path.with_name(result.path.name + ".data") if external else None


def _export(module: Any, args: tuple[Any, ...], staging: Staging, result: ExportResult, ex: _Export,
            external_data: bool | Literal["auto"], which: str) -> bool:
    """Exports into the staging folder, then saves through tether; sets the exporter used and
    why on ``result``, and returns whether the weights went to external data."""
    raw_dir = staging.dir / "raw"
    raw_dir.mkdir()
    raw = raw_dir / "export.onnx"
    with _quiet() as caught:
        if which == "torchscript":
            _run_torchscript(module, args, raw, result, ex, None)
            result.exporter_reason = "the TorchScript exporter, asked for with exporter='torchscript'"
        else:
            try:
                _export_dynamo(module, args, raw, ex)
            except Exception as e:  # noqa: BLE001 - any exporter failure leads to the fallback
                if which == "dynamo":
                    _raise_export_error(module, args, result, e, None)
                caught.clear()  # the dynamo attempt's warnings are not about the file
                _run_torchscript(module, args, raw, result, ex, e)
                cause = ex.dynamo_error = _cause(e)
                result.exporter_reason = f"the TorchScript exporter, because the dynamo exporter failed: {cause}"
                note(ex.notes, f"the dynamo exporter failed ({cause}); the TorchScript exporter was used")
            else:
                result.exporter_reason = ("the dynamo exporter, torch's recommended one" if which == "auto" else
                                          "the dynamo exporter, asked for with exporter='dynamo'")
        if ex.table and result.exporter == _TORCHSCRIPT:
            note(ex.notes, "the TorchScript exporter does not use custom_translation_table")
        ex.tracer = _tracer_warnings(caught)
        for w in ex.tracer:
            note(ex.notes, _describe_warning(w))
        exported = load(raw)
        _check_output_count(ex.outputs, [o.name for o in exported.outputs])
        # tether's "auto" keeps weights inside unless the file would pass protobuf's 2 GiB limit.
        files = exported.save(staging.path, external_data=external_data)
    shutil.rmtree(raw_dir, ignore_errors=True)
    return len(files) > 1


def _run_torchscript(module: Any, args: tuple[Any, ...], raw: Path, result: ExportResult, ex: _Export,
                     first: BaseException | None) -> None:
    result.exporter = _TORCHSCRIPT
    try:
        _export_torchscript(module, args, raw, ex)
    except Exception as second:  # noqa: BLE001
        if first is not None:
            result.exporter = f"{_DYNAMO}, then {_TORCHSCRIPT}"
        _raise_export_error(module, args, result, first or second, second if first else None)


def _tracer_warnings(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    """The tracer's warnings, once per message and place (the tracer repeats them)."""
    kind = _tracer_warning()
    seen: set[tuple[str, str, int]] = set()
    out = []
    for w in caught:
        key = (str(w.message), w.filename, w.lineno)
        if issubclass(w.category, kind) and key not in seen:
            seen.add(key)
            out.append(w)
    return out


def _source(w: warnings.WarningMessage) -> str:
    line = linecache.getline(w.filename, w.lineno).strip()
    return f"{Path(w.filename).name}:{w.lineno}" + (f" (`{line}`)" if line else "")


def _describe_warning(w: warnings.WarningMessage) -> str:
    return f"{w.category.__name__} at {_source(w)}: {w.message}"


def _check_branches(result: ExportResult, ex: _Export, allowed: bool) -> None:
    """A branch the tracer took on a tensor's value is in the file as the only branch."""
    branches = [w for w in ex.tracer if _BRANCH_WARNING in str(w.message)]
    if not branches or allowed:
        return
    places = "; ".join(_source(w) for w in branches)
    why = f" It ran because the dynamo exporter failed: {ex.dynamo_error}." if ex.dynamo_error else ""
    fail(result, f"the TorchScript exporter recorded only the branch the example took where forward() tests a "
                 f"tensor's value: {places}. The file would compute that branch for every input.{why} Compute both "
                 "sides and select with torch.where, or use torch.cond, so the dynamo exporter can export it; or "
                 "pass allow_baked_branches=True if the branch taken never changes.")


@contextlib.contextmanager
def _quiet() -> Iterator[list[warnings.WarningMessage]]:
    """Keeps the exporters' progress lines and log records off the user's console; warnings are
    collected for the result."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._export", "torch.fx",
                                              "torch._dynamo", "torch.fx.experimental.symbolic_shapes")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("always")
            yield caught
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _tracer_warning() -> type[Warning]:
    """The warning class the TorchScript tracer raises when it bakes a value into the graph."""
    import torch

    return getattr(torch.jit, "TracerWarning", UserWarning)


__all__ = ["torch"]
