"""tether.export.torch: a torch module to a verified ONNX file, with its golden bundle beside it."""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import os
import re
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NoReturn

import numpy as np

from tether import _core
from tether._model import load
from tether.export._result import ExportError, ExportResult, fail, first_line
from tether.parity import (
    OnnxRuntimeRunner,
    TetherRunner,
    Tolerance,
    TorchRunner,
    compare,
    model_sha256,
    save_golden,
)

Dynamic = Mapping[str, Mapping[int, Any]]


def _input_names(module: Any, count: int) -> list[str]:
    """The forward's positional parameter names, as the exporter names the graph inputs."""
    params = [p for p in inspect.signature(module.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(params) >= count:
        return [p.name for p in params[:count]]
    return [p.name for p in params] + [f"input_{i}" for i in range(len(params), count)]


def _dims(dynamic: Dynamic | None, names: list[str]) -> tuple[dict[str, dict[int, str]], dict[str, Any]]:
    """Both styles of ``dynamic`` as (names per input and axis, torch.export dynamic_shapes).

    A string becomes one ``torch.export.Dim`` per distinct name, so inputs that share a name
    share the dim; a Dim passes through under its own name."""
    import torch

    if not dynamic:
        return {}, {}
    unknown = [k for k in dynamic if k not in names]
    if unknown:
        raise _core.ArgumentError(f"dynamic names {unknown}, which are not inputs of forward(); its inputs are {names}")
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
    return named, {n: shapes.get(n) for n in names}


def _export_dynamo(module: Any, args: tuple[Any, ...], path: Path, names: list[str], outputs: list[str] | None,
                   shapes: dict[str, Any], opset: int | None) -> None:
    import torch

    program = torch.onnx.export(module, args, None, dynamo=True, input_names=names, output_names=outputs,
                                dynamic_shapes=shapes or None, opset_version=opset, verbose=False)
    assert program is not None
    program.save(str(path), external_data=True)


def _export_torchscript(module: Any, args: tuple[Any, ...], path: Path, names: list[str], outputs: list[str] | None,
                        dims: dict[str, dict[int, str]], opset: int | None) -> None:
    import torch

    torch.onnx.export(module, args, str(path), dynamo=False, input_names=names, output_names=outputs,
                      dynamic_axes=dims or None, opset_version=opset or 17, verbose=False)


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


def _raise_export_error(module: Any, args: tuple[Any, ...], first: BaseException,
                        second: BaseException | None) -> NoReturn:
    op = _failed_op(first) or (second and _failed_op(second))
    where = _module_path(module, args, op) if op else None
    msg = f"torch.onnx.export could not export {type(module).__name__}"
    if op:
        msg += f": no ONNX translation for the torch op '{op}'"
        if where:
            msg += f", called in module '{where}'"
    msg += f".\n  {type(first).__name__}: {first_line(first)}"
    if second is not None:
        msg += f"\n  TorchScript exporter: {type(second).__name__}: {first_line(second)}"
    msg += ("\n  Register a translation with torch.onnx.export(custom_translation_table=...), or rewrite that part "
            "of the module with ops ONNX has.")
    raise ExportError(msg) from first


def _second_size(args: tuple[np.ndarray, ...], names: list[str], dims: dict[str, dict[int, str]],
                 seed: int) -> tuple[dict[str, int], dict[str, np.ndarray]]:
    """Inputs where every dynamic dim is one larger than in the example (shared names move
    together), with values drawn like the example's."""
    sizes: dict[str, int] = {}
    for n, a in zip(names, args, strict=True):
        for axis, dim in dims.get(n, {}).items():
            sizes.setdefault(dim, a.shape[axis] + 1)
    rng = np.random.default_rng(seed)
    feeds = {}
    for n, a in zip(names, args, strict=True):
        shape = [sizes[dims[n][k]] if k in dims.get(n, {}) else s for k, s in enumerate(a.shape)]
        if a.dtype.kind == "f":
            feeds[n] = rng.standard_normal(shape).astype(a.dtype) * (float(np.std(a)) or 1.0) + float(np.mean(a))
            feeds[n] = feeds[n].astype(a.dtype)
        elif a.dtype.kind in "iu":
            lo, hi = (int(a.min()), int(a.max()) + 1) if a.size else (0, 2)
            feeds[n] = rng.integers(lo, hi, size=shape).astype(a.dtype)
        elif a.dtype.kind == "b":
            feeds[n] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            raise _core.ArgumentError(f"input '{n}' is {a.dtype}; tether.export.torch takes numeric tensors")
    return sizes, feeds


def _fixed_dims(path: Path, dims: dict[str, dict[int, str]]) -> list[str]:
    """Requested dynamic dims that the exported graph declares with a fixed size."""
    inputs = {i.name: i for i in load(path).inputs}
    fixed = []
    for n, axes in dims.items():
        shape = inputs[n].shape if n in inputs else None
        for axis, dim in axes.items():
            if shape is not None and axis < len(shape) and isinstance(shape[axis], int):
                fixed.append(f"dim {axis} ('{dim}') of input '{n}' is fixed to {shape[axis]}")
    return fixed


def _verifier(path: Path, threads: int | None, notes: list[str]) -> Any:
    try:
        return TetherRunner(path, threads=threads)
    except _core.UnsupportedError as e:
        notes.append(f"tether cannot run the exported model ({str(e).splitlines()[0]}); verified with onnxruntime")
        return OnnxRuntimeRunner(path, threads=threads)


def torch(module: Any, example_inputs: Any, path: str | os.PathLike[str], *, dynamic: Dynamic | None = None,
          output_names: Sequence[str] | None = None, opset: int | None = None,
          external_data: bool | Literal["auto"] = "auto", golden: bool = True,
          tolerance: Tolerance | str | None = None, check: bool = True, threads: int | None = None,
          seed: int = 0, exporter: Literal["auto", "dynamo", "torchscript"] = "auto") -> ExportResult:
    """Exports a torch module to ONNX at ``path`` and proves the file computes what the module does.

    ``example_inputs``: a tensor or a tuple of tensors, the forward's positional arguments; the
    graph's inputs take the forward's parameter names, its outputs ``output_names`` (default:
    the exporter's names).
    ``dynamic``: dims that must stay symbolic, per forward parameter name, as names
    (``{"x": {0: "batch"}}``) or ``torch.export.Dim`` objects (``{"x": {0: Dim("batch")}}``).

    Steps: the module goes to eval mode (a warning when it was training; its mode is restored
    afterwards); the exporter torch recommends (``dynamo=True``) runs, and when it fails the
    TorchScript exporter runs with a warning (``exporter="dynamo"`` or ``"torchscript"`` picks
    one); weights past 2 GiB go to external data when ``external_data="auto"`` (``True`` and
    ``False`` force it). Then tether runs the file (or
    onnxruntime, when tether lacks a kernel) on the example and compares with the module, runs
    it again with every dynamic dim one larger to prove the dim is really dynamic, and writes
    the golden bundle (example inputs and the module's outputs) to ``<path without .onnx>.golden``.

    Raises ExportError when both exporters fail (naming the torch op and the module path where
    it is called), when a requested dynamic dim was fixed, and, with ``check=True``, when parity
    fails; the error's ``result`` then holds the ExportResult.

    Example:
        >>> res = tt.export.torch(net, (x,), "net.onnx", dynamic={"x": {0: "batch"}})  # doctest: +SKIP
        >>> print(res.report.table())                                                   # doctest: +SKIP
    """
    import torch as torch_

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    args = tuple(example_inputs) if isinstance(example_inputs, list | tuple) else (example_inputs,)
    if not all(isinstance(a, torch_.Tensor) for a in args):
        raise _core.ArgumentError("example_inputs must be a torch.Tensor or a tuple of them")
    names = _input_names(module, len(args))
    dims, shapes = _dims(dynamic, names)
    notes: list[str] = []
    for n, a in zip(names, args, strict=True):
        for axis, dim in dims.get(n, {}).items():
            if axis >= a.dim():
                raise _core.ArgumentError(f"dynamic dim {axis} of input '{n}': the example has rank {a.dim()}")
            if a.shape[axis] < 2:
                notes.append(f"dim {axis} ('{dim}') of input '{n}' is {a.shape[axis]} in the example; torch "
                             "specializes sizes 0 and 1, so give an example of size 2 or more for a dynamic dim")

    was_training = bool(getattr(module, "training", False))
    if was_training:
        notes.append("the module was in training mode; it was exported in eval mode (Dropout off, BatchNorm "
                     "running statistics) and put back in training mode afterwards")
    module.eval()
    try:
        if exporter not in ("auto", "dynamo", "torchscript"):
            raise _core.ArgumentError(f"exporter must be 'auto', 'dynamo' or 'torchscript', got {exporter!r}")
        used, external = _export(module, args, path, names, dims, list(output_names) if output_names else None, shapes,
                                 opset, external_data, exporter, notes)
    finally:
        if was_training:
            module.train()
    result = ExportResult(path=path, exporter=used, dynamic_dims=dims, warnings=notes,
                          external_data=path.with_name(path.name + ".data") if external else None)
    for w in notes:
        warnings.warn(w, stacklevel=2)
    _verify(module, args, names, result, tolerance, check, threads, seed, golden)
    return result


def _export(module: Any, args: tuple[Any, ...], path: Path, names: list[str], dims: dict[str, dict[int, str]],
            outputs: list[str] | None, shapes: dict[str, Any], opset: int | None,
            external_data: bool | Literal["auto"], which: str, notes: list[str]) -> tuple[str, bool]:
    """Exports into a temporary folder, then saves through tether; returns the exporter used
    and whether the weights went to external data."""
    if external_data not in (True, False, "auto"):
        raise _core.ArgumentError(f"external_data must be True, False or 'auto', got {external_data!r}")
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp, _quiet() as caught:
        raw = Path(tmp) / "export.onnx"
        first: Exception | None = None
        exporter = "torch.onnx.export(dynamo=True)"
        try:
            if which == "torchscript":
                raise _Skipped
            _export_dynamo(module, args, raw, names, outputs, shapes, opset)
        except Exception as e:  # noqa: BLE001 - any exporter failure leads to the fallback
            first = None if isinstance(e, _Skipped) else e
            if which == "dynamo" and first is not None:
                _raise_export_error(module, args, first, None)
            try:
                _export_torchscript(module, args, raw, names, outputs, dims, opset)
            except Exception as second:  # noqa: BLE001
                _raise_export_error(module, args, first or second, second if first else None)
            exporter = "torch.onnx.export(dynamo=False)"
            if first is not None:
                notes.append(f"the dynamo exporter failed ({type(first).__name__}: {first_line(first)}); "
                             "the TorchScript exporter was used")
        notes.extend(f"{w.category.__name__}: {w.message}" for w in caught if issubclass(w.category, _tracer_warning()))
        # tether's "auto" keeps weights inside unless the file would pass protobuf's 2 GiB limit.
        files = load(raw).save(path, external_data=external_data)
    return exporter, len(files) > 1


class _Skipped(Exception):
    """The dynamo exporter was not asked for."""


@contextlib.contextmanager
def _quiet() -> Iterator[list[warnings.WarningMessage]]:
    """Keeps the exporters' progress lines and log records off the user's console; warnings are
    collected for the result."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("always")
            yield caught
    finally:
        logger.setLevel(level)


def _tracer_warning() -> type[Warning]:
    """The warning class the TorchScript tracer raises when it bakes a value into the graph."""
    import torch

    return getattr(torch.jit, "TracerWarning", UserWarning)


def _verify(module: Any, args: tuple[Any, ...], names: list[str], result: ExportResult,
            tolerance: Tolerance | str | None, check: bool, threads: int | None, seed: int, golden: bool) -> None:
    feeds = {n: a.detach().cpu().numpy() for n, a in zip(names, args, strict=True)}
    fixed = _fixed_dims(result.path, result.dynamic_dims)
    if fixed:
        fail(result, f"the exported model is not dynamic where asked: {'; '.join(fixed)}. The exporter fixed the "
                      "size (often a Python int taken from a tensor's shape in forward())")
    runner = _verifier(result.path, threads, result.warnings)
    reference = TorchRunner(module, names, None, "torch")
    result.report = compare(reference, runner, feeds, tolerance=tolerance)
    if golden:
        outputs = reference.run(feeds)
        result.golden_path = save_golden(result.path.with_suffix(".golden"), [(feeds, outputs)], {
            "model_sha256": model_sha256(result.path), "producer": f"torch {_torch_version()}",
            "exporter": result.exporter, "tolerance": "fp32", "inputs": names, "outputs": list(outputs),
            "dynamic_dims": {k: {str(a): d for a, d in v.items()} for k, v in result.dynamic_dims.items()},
        }, overwrite=True)
    if result.dynamic_dims:
        sizes, bigger = _second_size(tuple(feeds.values()), names, result.dynamic_dims, seed)
        try:
            reference.run(bigger)
        except Exception as e:  # noqa: BLE001 - the module's own limits are not the export's fault
            result.warnings.append(f"the module itself does not run with {_sizes(sizes)} ({type(e).__name__}: "
                                   f"{first_line(e)}), so the dynamic dims were checked at the example's size only")
            warnings.warn(result.warnings[-1], stacklevel=3)
            bigger = {}
        try:
            dyn = compare(reference, runner, bigger, tolerance=tolerance) if bigger else None
        except _core.Error as e:
            fail(result, f"the exported model does not run with {_sizes(sizes)}: {e}")
        result.dynamic_report = dyn
        if dyn is not None and not dyn.ok:
            fail(result, f"the exported model differs from the module at {_sizes(sizes)} although it matched at the "
                          f"example's size: a dynamic dim was fixed inside the graph.\n{dyn.table()}")
    if check and result.report is not None and not result.report.ok:
        fail(result, f"the exported model does not compute what the module computes:\n{result.report.table()}")


def _sizes(sizes: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def _torch_version() -> str:
    import torch

    return str(torch.__version__).split("+")[0]


__all__ = ["torch"]

