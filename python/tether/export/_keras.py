"""tether.export.keras and tether.export.tflite: a Keras 3 model (TensorFlow backend) to a verified
ONNX or TFLite file."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import tempfile
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tether._native import core as _core
from tether.export._files import Staging, golden_path
from tether.export._result import ExportError, ExportResult, fail, first_line, suggest_tolerance, whole
from tether.export._rewrites import erfc_as_erf
from tether.parity import (
    CallableRunner,
    InputSpec,
    OnnxRuntimeRunner,
    ParityReport,
    TetherRunner,
    Tolerance,
    compare,
    iter_feeds,
    model_sha256,
    save_golden,
)

# Batches of the representative data that verify an int8 model when no example inputs are given.
_VERIFY_BATCHES = 8
_SCOPE_SUFFIX = re.compile(r"_\d+$")


def _frameworks() -> tuple[Any, Any]:
    """keras and tensorflow, checking that Keras runs on TensorFlow."""
    try:
        import keras  # type: ignore[import-not-found,import-untyped,unused-ignore]
        import tensorflow as tf  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError as e:
        raise ExportError("tether.export.keras and tether.export.tflite need keras 3 and tensorflow: "
                          "pip install tensorflow tf2onnx") from e
    if keras.backend.backend() != "tensorflow":
        raise ExportError(f"Keras runs on the {keras.backend.backend()!r} backend; these exporters need the "
                          "TensorFlow backend (set KERAS_BACKEND=tensorflow before importing keras)")
    return keras, tf


def _tolerance(given: Tolerance | str | None, default: str) -> Tolerance | str:
    """The tolerance the checks use: ``given`` (a profile name or a Tolerance), else ``default``."""
    if given is None:
        return default
    if isinstance(given, str):
        Tolerance.profile(given)  # ArgumentError naming the known profiles
        return given
    if not isinstance(given, Tolerance):
        raise _core.ArgumentError(f"tolerance must be a profile name ('fp32', 'fp16', 'bf16', 'int8') or a "
                                  f"tether.parity.Tolerance, got {given!r}")
    return given


def _recorded(tolerance: Tolerance | str) -> str | dict[str, Any]:
    """The tolerance as a golden bundle records it: a profile name or ``{atol, rtol, rule}``."""
    return tolerance if isinstance(tolerance, str) else tolerance.to_dict()


def _producer() -> str:
    keras, tf = _frameworks()
    return f"keras {keras.__version__} / tensorflow {tf.__version__}"


def _to_numpy(obj: Any) -> Any:
    """Example inputs (arrays or tensors, alone, in a list/tuple or a dict) as numpy arrays."""
    if isinstance(obj, Mapping):
        return {str(k): _to_numpy(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return tuple(_to_numpy(v) for v in obj)
    return np.asarray(obj)


def _model_input_names(model: Any) -> list[str]:
    try:
        return [str(t.name) for t in (model.inputs or [])]
    except (AttributeError, ValueError):  # a subclassed model has no symbolic inputs
        return []


def _by_keras_name(model: Any, example: Any) -> Any:
    """A tuple example as a dict by Keras input name, in the model's input order (the exported
    file and LiteRT may order their inputs otherwise); anything else as it is."""
    names = _model_input_names(model)
    if not isinstance(example, tuple) or not names:
        return example
    if len(example) != len(names):
        raise _core.ArgumentError(f"example_inputs holds {len(example)} arrays; model '{model.name}' takes "
                                  f"{len(names)} inputs, in this order: {names}")
    return dict(zip(names, example, strict=True))


def _call(model: Any, example: Any) -> Any:
    """``model(example, training=False)`` on the example as the user structured it, as tensors."""
    keras, _ = _frameworks()
    if isinstance(example, Mapping):
        return model({k: keras.ops.convert_to_tensor(v) for k, v in example.items()}, training=False)
    if isinstance(example, tuple):
        return model([keras.ops.convert_to_tensor(v) for v in example], training=False)
    return model(keras.ops.convert_to_tensor(example), training=False)


def _keras_outputs(model: Any, names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The model's outputs on ``feeds`` (keyed by the exported file's input names), flattened in
    Keras's order. One input is passed alone; several as a dict by Keras input name when the
    names are the model's, else as a list in the file's order."""
    keras, _ = _frameworks()
    # Tensors rather than arrays: Keras then matches one input to a one-element input list silently.
    tensors = {n: keras.ops.convert_to_tensor(feeds[n]) for n in names}
    if len(names) == 1:
        x: Any = tensors[names[0]]
    elif set(names) <= set(_model_input_names(model)):
        x = tensors
    else:
        x = [tensors[n] for n in names]
    out = model(x, training=False)
    return [np.asarray(keras.ops.convert_to_numpy(t)) for t in keras.tree.flatten(out)]


def _reference(model: Any, input_names: Sequence[str], output_names: Sequence[str],
               specs: Sequence[InputSpec] = ()) -> CallableRunner:
    """Keras itself as the parity reference, its flattened outputs named by position."""
    def run(**feeds: np.ndarray) -> list[np.ndarray]:
        out = _keras_outputs(model, input_names, feeds)
        if len(out) != len(output_names):
            raise ExportError(f"the Keras model returns {len(out)} outputs, the exported file has "
                              f"{len(output_names)}: {list(output_names)}")
        return out

    return CallableRunner(run, list(output_names), name="keras", input_specs=specs)


def _layers(model: Any) -> set[str]:
    flatten = getattr(model, "_flatten_layers", None)
    layers = flatten(include_self=False, recursive=True) if callable(flatten) else getattr(model, "layers", [])
    return {str(layer.name) for layer in layers}


def _layer_of(model: Any, node: str) -> str | None:
    """The innermost Keras layer whose name scope holds the TensorFlow node ``node``
    (``functional_1/log_gamma_1/Lgamma`` -> ``log_gamma``; tracing adds the ``_N`` suffix)."""
    names = _layers(model)
    for scope in reversed(node.split("/")[:-1]):
        for candidate in (scope, _SCOPE_SUFFIX.sub("", scope)):
            if candidate in names:
                return candidate
    return None


def _where(model: Any, node: str) -> str:
    layer = _layer_of(model, node)
    return f"in layer '{layer}' (node {node})" if layer else f"in node {node}"


class _Records(logging.Handler):
    """Collects the converter's log records instead of printing them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _quiet(logger_name: str) -> Iterator[_Records]:
    """Keeps the converter's log records, warnings and progress lines off the user's console."""
    logger = logging.getLogger(logger_name)
    handler = _Records()
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def _unknown_ops(path: Path) -> list[tuple[str, str, str]]:
    """(op type, domain, node name) of every node, subgraphs included, that has no ONNX schema:
    TensorFlow ops the converter left in the graph as they were."""
    import onnx

    found: list[tuple[str, str, str]] = []

    def walk(graph: Any) -> None:
        for node in graph.node:
            if not onnx.defs.has(node.op_type, node.domain):
                found.append((node.op_type, node.domain, node.name))
            for attr in node.attribute:
                for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    walk(g)

    walk(onnx.load(str(path), load_external_data=False).graph)
    return found


def _tf2onnx_version() -> str:
    try:
        import tf2onnx  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return "not installed"
    return str(tf2onnx.__version__)


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _export_onnx(model: Any, path: Path, opset: int | None) -> int:
    """Keras's own ONNX export (tf2onnx from a tf.function of the model), with its ``Erfc``
    nodes rewritten (see :func:`erfc_as_erf`; returns how many); raises ExportError naming the
    op and layer when the converter fails or leaves another TensorFlow op unconverted."""
    converter = f"tf2onnx {_tf2onnx_version()}"
    with _quiet("tf2onnx") as log:
        try:
            model.export(str(path), format="onnx", verbose=False, opset_version=opset)
        except Exception as e:  # noqa: BLE001 - every converter failure becomes an ExportError
            _remove(path)
            nodes = re.findall(r"Failed to convert node '?([^'\s]+)", "\n".join(log.messages))
            where = f" {_where(model, nodes[0])}" if nodes else ""
            said = "".join(f"\n  converter: {m.splitlines()[0]}" for m in log.messages[:5])
            raise ExportError(
                f"Keras's ONNX export ({converter}) failed for model '{model.name}'{where}: "
                f"{type(e).__name__}: {first_line(e)}{said}\n  What to do: export to TFLite with "
                "tether.export.tflite, or rewrite the layer with ops the converter handles (standard Keras layers "
                "and keras.ops rather than raw tf.* calls).") from e
    rewritten = erfc_as_erf(path)
    unknown = _unknown_ops(path)
    if unknown:
        _remove(path)
        listed = "; ".join(f"'{op}'{f' (domain {dom})' if dom else ''} {_where(model, node)}"
                           for op, dom, node in unknown[:5])
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        said = "".join(f"\n  converter: {m.splitlines()[0]}" for m in log.messages if "not supported" in m or
                       "Unsupported" in m)
        raise ExportError(
            f"Keras's ONNX export ({converter}) left {len(unknown)} TensorFlow op(s) with no ONNX equivalent in "
            f"model '{model.name}': {listed}{more}{said}\n  What to do: rewrite that layer with ops ONNX has "
            "(keras.ops or tf ops the converter supports), or export to TFLite with tether.export.tflite if LiteRT "
            "runs the op.")
    return rewritten


def _dynamic_dims(path: Path) -> dict[str, dict[int, str]]:
    """The symbolic dims of the file's inputs, by input and axis."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    out: dict[str, dict[int, str]] = {}
    for inp in graph.input:
        if inp.name in inits:
            continue
        shape = inp.type.tensor_type.shape.dim
        dims = {k: d.dim_param or "?" for k, d in enumerate(shape) if not d.HasField("dim_value")}
        if dims:
            out[inp.name] = dims
    return out


def _io_names(path: Path) -> tuple[list[str], list[str]]:
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    return [i.name for i in graph.input if i.name not in inits], [o.name for o in graph.output]


def _feeds(example: Any, names: list[str]) -> dict[str, np.ndarray]:
    specs = [InputSpec(n, np.dtype("float32"), None) for n in names]
    feeds = next(iter_feeds(example, specs))
    missing = [n for n in names if n not in feeds]
    if missing:
        raise _core.ArgumentError(f"example_inputs has no input {missing[0]!r}; the exported model takes {names} "
                                  f"and the example gives {sorted(feeds)}")
    return {n: feeds[n] for n in names}


def _one_larger(feeds: Mapping[str, np.ndarray], dims: Mapping[str, Mapping[int, str]]) -> dict[str, np.ndarray]:
    """The feeds with the batch (a symbolic dim 0) one larger: the first sample repeated at the end."""
    return {n: np.concatenate([v, v[:1]]) if 0 in dims.get(n, {}) and v.ndim else v for n, v in feeds.items()}


def _tether_or_ort(path: Path, notes: list[str]) -> Any:
    try:
        return TetherRunner(path)
    except _core.UnsupportedError as e:
        notes.append(f"tether cannot run the exported model ({whole(e)}); verified with onnxruntime")
        return OnnxRuntimeRunner(path)


def _failed(report: ParityReport, who: str) -> str:
    bad = [o for o in report.outputs if not o.metrics.ok]
    worst = max(bad, key=lambda o: (bool(o.metrics.problem), o.metrics.max_abs_error)) if bad else None
    if worst is None:
        return f"{who} differs from Keras"
    what = worst.metrics.problem or f"max abs error {worst.metrics.max_abs_error:.3g}"
    return f"{who} differs from Keras (output '{worst.name}': {what})"


def keras(model: Any, example_inputs: Any, path: str | os.PathLike[str], *, opset: int | None = None,
          verify: bool = True, golden: bool = True, check: bool = True,
          tolerance: Tolerance | str | None = None) -> ExportResult:
    """Exports a Keras 3 model (TensorFlow backend) to ONNX at ``path`` and proves the file
    computes what Keras does.

    ``example_inputs``: one array (a single-input model), a tuple/list of arrays in the model's
    input order, or a dict by Keras input name; tensors are taken as arrays.

    Route: Keras's own ``model.export(path, format="onnx")``, which converts a tf.function of
    the model with tf2onnx (``opset`` defaults to tf2onnx's). The file keeps Keras's layout
    (NHWC images stay NHWC) and the batch dim stays symbolic. **Names**: the file's inputs are
    the Keras input names; its outputs are the converter's (``Identity:0``, ``Identity_1:0``...),
    and Keras's outputs, flattened in Keras's order (``keras.tree.flatten``), map to them by
    position, which is the converter's contract.

    Verification (``verify=True``): on ``example_inputs``, the file runs in tether (the
    ``report``) and in onnxruntime, each compared with ``model(x, training=False)`` under
    ``tolerance`` (a profile name or a :class:`tether.parity.Tolerance`; default the ``fp32``
    profile); a failing onnxruntime comparison, or tether lacking a kernel (then
    onnxruntime's comparison is the report), is in ``warnings``. A symbolic batch is checked
    again one larger (``dynamic_report``). A failed comparison raises ExportError (the error's
    ``result`` holds the ExportResult), or with ``check=False`` leaves ``ok`` False and issues a
    warning. With ``golden=True`` the example and Keras's outputs go to ``<path>.golden``
    (``.onnx`` replaced), with the file's sha256, the producer and the tolerance.

    TensorFlow's ``Erfc`` (Keras's exact GELU, the ``"gelu"`` activation, computes
    ``0.5 * x * erfc(-x / sqrt(2))``), which tf2onnx leaves as it is, becomes ``1 - Erf(x)``:
    the same to float32's absolute precision (``erfc`` of a large argument, near 0, is not
    kept to its relative precision).

    Raises ExportError when the converter fails or leaves a TensorFlow op it cannot convert
    (an op with no ONNX equivalent, often a raw ``tf.*`` call in a Lambda or custom layer):
    the message names the op, the Keras layer whose scope holds it and the converter's own
    words, and nothing is left at ``path``.

    Example:
        >>> res = tt.export.keras(model, x, "model.onnx")          # doctest: +SKIP
        >>> res.ok, res.golden_path                                 # doctest: +SKIP
        (True, PosixPath('model.golden'))
        >>> print(res.report.table())                               # doctest: +SKIP
        >>> tt.export.keras(model, x, "model.onnx", tolerance="fp16")  # doctest: +SKIP
    """
    _frameworks()
    path = Path(path)
    tol = _tolerance(tolerance, "fp32")
    example = _by_keras_name(model, _to_numpy(example_inputs))
    # Keras exports only a model that has been called; the call also checks the example.
    _call(model, example)
    staging = Staging(path, golden=golden)
    try:
        result = _keras_staged(model, example, path, staging.path, opset, verify, golden, check, tol)
        staging.commit()
        staging.name_final(result.report, result.dynamic_report)
    except BaseException:
        staging.discard()
        raise
    for w in result.warnings:
        warnings.warn(w, stacklevel=2)
    return result


def _keras_staged(model: Any, example: Any, path: Path, staged: Path, opset: int | None, verify: bool, golden: bool,
                  check: bool, tolerance: Tolerance | str) -> ExportResult:
    """keras()'s export and checks on the file written at ``staged``, to be moved to ``path``."""
    rewritten = _export_onnx(model, staged, opset)
    input_names, output_names = _io_names(staged)
    feeds = _feeds(example, input_names)
    reference = _reference(model, input_names, output_names)
    exporter = f"keras Model.export(format='onnx') via tf2onnx {_tf2onnx_version()}"
    if rewritten:
        exporter += f", its {rewritten} Erfc node(s) rewritten as 1 - Erf"
    result = ExportResult(path=path, exporter=exporter, dynamic_dims=_dynamic_dims(staged))
    if verify:
        _verify_onnx(reference, result, feeds, staged, tolerance)
    if golden:
        outputs = reference.run(feeds)
        save_golden(golden_path(staged), [(feeds, outputs)], {
            "model_sha256": model_sha256(staged), "producer": _producer(), "exporter": result.exporter,
            "tolerance": _recorded(tolerance), "inputs": input_names, "outputs": output_names,
            "dynamic_dims": {k: {str(a): d for a, d in v.items()} for k, v in result.dynamic_dims.items()},
        }, overwrite=True)
        result.golden_path = golden_path(path)
    if check and not result.ok:
        result.golden_path = None
        fail(result, "\n".join(result.warnings) or "parity failed")
    return result


def _verify_onnx(reference: CallableRunner, result: ExportResult, feeds: dict[str, np.ndarray], staged: Path,
                 tolerance: Tolerance | str) -> None:
    runner = _tether_or_ort(staged, result.warnings)
    result.report = compare(reference, runner, feeds, tolerance=tolerance)
    if not result.report.ok:
        result.warnings.append(_failed(result.report, runner.name))
    if isinstance(runner, TetherRunner):
        try:
            ort = compare(reference, OnnxRuntimeRunner(staged), feeds, tolerance=tolerance)
        except Exception as e:  # noqa: BLE001 - onnxruntime's verdict is a second opinion, reported as a warning
            result.warnings.append(f"onnxruntime cannot run the exported model: {type(e).__name__}: {whole(e)}")
        else:
            if not ort.ok:
                result.warnings.append(_failed(ort, "onnxruntime") + f":\n{ort.table()}")
    if any(0 in axes for axes in result.dynamic_dims.values()):
        result.dynamic_report = compare(reference, runner, _one_larger(feeds, result.dynamic_dims),
                                        tolerance=tolerance)
        if not result.dynamic_report.ok:
            result.warnings.append(_failed(result.dynamic_report, f"{runner.name} at a batch one larger"))


def _representative(model: Any, items: Iterable[Any]) -> list[Any]:
    """The calibration batches as float32 arrays by input name (the SavedModel signature's
    names are the Keras input names), or as lists in input order when the model has no names."""
    names = _model_input_names(model)
    out: list[Any] = []
    for item in items:
        x = _to_numpy(item)
        if isinstance(x, Mapping):
            out.append({k: np.asarray(v, np.float32) for k, v in x.items()})
            continue
        arrays = [np.asarray(v, np.float32) for v in (x if isinstance(x, tuple) else (x,))]
        if names and len(names) != len(arrays):
            raise _core.ArgumentError(f"a representative batch holds {len(arrays)} arrays; the model takes "
                                      f"{len(names)} inputs {names}")
        out.append(dict(zip(names, arrays, strict=True)) if names else arrays)
    if not out:
        raise _core.ArgumentError("representative_data is empty: give a few hundred samples of real inputs")
    return out


def _convert_tflite(model: Any, representative: list[Any] | None) -> bytes:
    """Keras -> SavedModel (in a temporary folder) -> TFLite flatbuffer."""
    _, tf = _frameworks()
    with tempfile.TemporaryDirectory() as tmp, _quiet("tensorflow") as log:
        saved = Path(tmp) / "saved_model"
        try:
            model.export(str(saved), format="tf_saved_model", verbose=False)
        except Exception as e:  # noqa: BLE001 - every export failure becomes an ExportError
            raise ExportError(f"Keras could not export model '{model.name}' as a SavedModel: {type(e).__name__}: "
                              f"{first_line(e)}\n  What to do: call the model once on an example (a subclassed "
                              "model is built by its first call) and use layers that trace as tf.function.") from e
        converter = tf.lite.TFLiteConverter.from_saved_model(str(saved))
        if representative is not None:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            converter.representative_dataset = lambda: iter(representative)
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        try:
            return bytes(converter.convert())
        except Exception as e:  # noqa: BLE001
            text = str(e)
            ops = sorted(set(re.findall(r"'tf\.(\w+)' op", text)))
            nodes = re.findall(r"\"([\w.-]+(?:/[\w.-]+)+)\"", text)
            where = f" {_where(model, nodes[0])}" if nodes else ""
            what = f": no TFLite kernel for {', '.join(ops)}{where}" if ops else ""
            said = "".join(f"\n  converter: {m.splitlines()[0]}" for m in log.messages[:3])
            raise ExportError(
                f"the TFLite converter (tensorflow {tf.__version__}) could not convert model '{model.name}'{what}: "
                f"{type(e).__name__}: {first_line(e)}{said}\n  What to do: rewrite that layer with ops TFLite has, "
                + ("or drop representative_data to keep the model in float" if representative is not None
                   else "or export to ONNX with tether.export.keras") + ".") from e


def _tflite_output_names(runner: Any, count: int) -> list[str]:
    """The TFLite names of Keras's flattened outputs: the signature's ``output_K`` when present,
    else the interpreter's output order."""
    names = runner.output_names()
    by_signature = [f"output_{k}" for k in range(count)]
    return by_signature if set(by_signature) <= set(names) else names


def tflite(model: Any, path: str | os.PathLike[str], *, representative_data: Iterable[Any] | None = None,
           verify: bool = True, example_inputs: Any = None, check: bool = True,
           tolerance: Tolerance | str | None = None) -> ExportResult:
    """Exports a Keras 3 model (TensorFlow backend) to a TFLite flatbuffer at ``path`` and
    checks it in LiteRT against Keras.

    Route: ``model.export(dir, format="tf_saved_model")`` into a temporary folder, then
    ``tf.lite.TFLiteConverter.from_saved_model``. Without ``representative_data`` the model
    stays float32. With it (an iterable of input batches: arrays, tuples of arrays in input
    order, or dicts by input name; read once, into memory) the model is quantized after
    training to full integer: every op runs in int8 (``TFLITE_BUILTINS_INT8``, ranges
    calibrated on that data), while the model's inputs and outputs stay float32 (a quantize op
    on the way in, a dequantize op on the way out), so it is a drop-in for the float model.

    Names: :class:`tether.parity._litert.LiteRTRunner` names inputs by the Keras input names
    and outputs ``output_0``, ``output_1``..., Keras's flattened outputs in order.

    Verification (``verify=True``): LiteRT runs the file and its outputs are compared with
    ``model(x, training=False)`` element by element, under ``tolerance`` (a profile name or a
    :class:`tether.parity.Tolerance`; default the ``fp32`` profile for a float model and
    ``int8`` for a quantized one, whose few outliers may fail it while the predictions agree:
    the error then suggests a tolerance under which it passes), on ``example_inputs`` when
    given, else on the first representative batches (quantized), else on inputs generated from
    the model's input specs (uniform in (-1, 1), batch 1). A failed comparison raises
    ExportError (its ``result`` holds the ExportResult), or with ``check=False`` leaves ``ok``
    False and issues a warning.

    Raises ExportError when Keras cannot write the SavedModel or the converter fails (the
    message names the TensorFlow op without a TFLite kernel and its layer, where found).

    Example:
        >>> res = tt.export.tflite(model, "model.tflite")                                 # doctest: +SKIP
        >>> q = tt.export.tflite(model, "model_int8.tflite", representative_data=batches)  # doctest: +SKIP
        >>> q.ok, q.report.tolerance                                                      # doctest: +SKIP
        >>> q = tt.export.tflite(model, "model_int8.tflite", representative_data=batches,  # doctest: +SKIP
        ...                      tolerance=tt.parity.Tolerance(atol=0.2, rtol=0.1))
    """
    _, tf = _frameworks()
    path = Path(path)
    tol = _tolerance(tolerance, "int8" if representative_data is not None else "fp32")
    example = _by_keras_name(model, _to_numpy(example_inputs)) if example_inputs is not None else None
    if example is not None:
        _call(model, example)
    representative = _representative(model, representative_data) if representative_data is not None else None
    flatbuffer = _convert_tflite(model, representative)
    kind = "int8 (float input and output)" if representative is not None else "float32"
    result = ExportResult(path=path, exporter=f"tf.lite.TFLiteConverter (tensorflow {tf.__version__}), {kind}")
    staging = Staging(path, golden=False)
    try:
        staging.path.write_bytes(flatbuffer)
        if verify:
            _verify_tflite(model, staging.path, result, example, representative, check, tol)
        staging.commit()
        staging.name_final(result.report)
    except BaseException:
        staging.discard()
        raise
    for w in result.warnings:
        warnings.warn(w, stacklevel=2)
    return result


def _verify_tflite(model: Any, staged: Path, result: ExportResult, example: Any, representative: list[Any] | None,
                   check: bool, tolerance: Tolerance | str) -> None:
    """LiteRT runs the file written at ``staged`` and is compared with Keras."""
    from tether.parity._litert import LiteRTRunner

    runner = LiteRTRunner(staged)
    input_names = [s.name for s in runner.input_specs()]
    probe = _keras_outputs(model, input_names, _first_feeds(runner, example, representative))
    reference = _reference(model, input_names, _tflite_output_names(runner, len(probe)), runner.input_specs())
    if example is not None:
        inputs: Any = _feeds(example, input_names)
    elif representative is not None:
        inputs = [_batch_feeds(b, input_names) for b in representative[:_VERIFY_BATCHES]]
    else:
        inputs = None
    result.report = compare(reference, runner, inputs, tolerance=tolerance)
    if not result.report.ok:
        result.warnings.append(_failed(result.report, "LiteRT"))
        if check:
            fail(result, f"{result.warnings[-1]}; if that error is acceptable, pass tolerance="
                         f"{suggest_tolerance(result.report)} (or check=False)", result.report.table())


def _batch_feeds(batch: Any, names: list[str]) -> dict[str, np.ndarray]:
    if isinstance(batch, Mapping):
        return {n: batch[n] for n in names}
    return dict(zip(names, batch, strict=True))


def _first_feeds(runner: Any, example: Any, representative: list[Any] | None) -> dict[str, np.ndarray]:
    """One feed to learn how many outputs Keras returns."""
    names = [s.name for s in runner.input_specs()]
    if example is not None:
        return _feeds(example, names)
    if representative is not None:
        return _batch_feeds(representative[0], names)
    from tether.parity import generate_inputs

    return next(iter(generate_inputs(runner.input_specs())))


__all__ = ["keras", "tflite"]
