"""Runners: tether sessions, onnxruntime, torch modules and plain callables behind one protocol."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tether._model import Model, load
from tether._native import core as _core
from tether._session import Session, compile
from tether.parity._types import InputSpec, Runner

ModelSource = Model | str | os.PathLike[str] | bytes

# ONNX tensor type strings as onnxruntime prints them -> numpy dtypes.
_ORT_TYPES = {
    "tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
    "tensor(int8)": "int8", "tensor(int16)": "int16", "tensor(int32)": "int32", "tensor(int64)": "int64",
    "tensor(uint8)": "uint8", "tensor(uint16)": "uint16", "tensor(uint32)": "uint32", "tensor(uint64)": "uint64",
    "tensor(bool)": "bool", "tensor(string)": "object", "tensor(bfloat16)": "bfloat16",
}


def _dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes  # type: ignore[import-not-found]

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(object if name == "string" else name)


def _as_model(source: ModelSource) -> Model:
    return source if isinstance(source, Model) else load(source)


def _resolved_device(session: Session) -> str:
    # "vulkan" leaves the choice to compile; its report names the device it chose.
    if session.device != "vulkan":
        return session.device
    found = re.search(r"\bdevice (vulkan:\d+)", session.report)
    return found.group(1) if found else session.device


class TetherRunner:
    """A model run by tether's own engine, from a model (compiled here) or a compiled
    :class:`tether.Session`. Besides ``run`` it reads every intermediate value from the
    engine (:meth:`intermediates`) without changing what runs.

    Example:
        >>> r = TetherRunner("model.onnx", threads=1)          # doctest: +SKIP
        >>> r.run({"x": x})["logits"].shape                     # doctest: +SKIP
        (1, 10)
    """

    def __init__(self, model: ModelSource | Session, name: str = "tether", *, device: str = "cpu",
                 threads: int | None = None, optimize: bool = True) -> None:
        self.name = name
        self._options: dict[str, Any] = {"device": device, "threads": threads, "optimize": optimize}
        if isinstance(model, Session):
            self.model: Model | None = None
            self.session = model
        else:
            self.model = _as_model(model)
            self.session = compile(self.model, device, threads=threads, optimize=optimize)

    @property
    def device(self) -> str:
        """The device the session runs on, as :func:`tether.devices` names it: ``"cpu"``,
        ``"vulkan:0"`` (for ``device="vulkan"``, the device compile chose).

        Example:
            >>> TetherRunner("model.onnx", device="vulkan").device   # doctest: +SKIP
            'vulkan:0'
        """
        return _resolved_device(self.session)

    def input_specs(self) -> list[InputSpec]:
        """The session's inputs."""
        return [InputSpec(i.name, _dtype(i.dtype), i.shape) for i in self.session.inputs]

    def output_names(self) -> list[str]:
        """The session's outputs, in order."""
        return [o.name for o in self.session.outputs]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Runs the session."""
        return self.session.run(feeds)

    def intermediates(self, feeds: dict[str, np.ndarray], names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Every value a kernel writes in one run (or those in ``names``), by value name, in
        execution order; the outputs are among them. Values that the graph passes fused away
        are absent: :meth:`steps` says which kernel computes which of the model's nodes.

        Example:
            >>> vals = r.intermediates({"x": x})                 # doctest: +SKIP
            >>> list(vals)[:2]                                   # doctest: +SKIP
            ['stem.relu_out', 'layer1.conv1_out']
        """
        _, values = self.session._core.run_capture(dict(feeds), list(names or []))
        return dict(values)

    def steps(self) -> list[dict[str, Any]]:
        """The kernels one run executes, in order: ``name``, ``op_type``, ``fused_from`` (the
        model's node names the kernel computes), ``inputs`` and ``outputs`` (value names)."""
        return list(self.session._core.steps())

    def for_model(self, model: ModelSource) -> TetherRunner:
        """A runner of the same kind and options for another model (used by bisection)."""
        return TetherRunner(model, self.name, **self._options)

    def keeping(self, values: Sequence[str]) -> TetherRunner:
        """The same model and options compiled again with ``values`` kept computed (never fused
        into another kernel), so :meth:`intermediates` can read them; needs a runner built from
        a model, not from a Session.

        Example:
            >>> r.keeping(["fc1_out"]).intermediates({"x": x}, ["fc1_out"])   # doctest: +SKIP
        """
        if self.model is None:
            raise _core.ArgumentError(f"runner '{self.name}' was built from a Session: build it from the model to "
                                      "compile it again")
        runner = TetherRunner.__new__(TetherRunner)
        runner.name, runner._options, runner.model = self.name, dict(self._options), self.model
        runner.session = compile(self.model, self._options["device"], threads=self._options["threads"],
                                 optimize=self._options["optimize"], keep=list(values))
        return runner


class OnnxRuntimeRunner:
    """A model run by onnxruntime (CPU provider by default). :meth:`intermediates` adds the
    requested values as extra graph outputs of a copy of the model.

    Example:
        >>> r = OnnxRuntimeRunner("model.onnx", threads=1)     # doctest: +SKIP
        >>> r.run({"x": x})                                     # doctest: +SKIP
    """

    def __init__(self, model: ModelSource, name: str = "onnxruntime", *, threads: int | None = None,
                 providers: Sequence[str] = ("CPUExecutionProvider",), optimize: bool = True) -> None:
        import onnxruntime as ort

        self.name = name
        self.model = _as_model(model)
        self._options: dict[str, Any] = {"threads": threads, "providers": tuple(providers), "optimize": optimize}
        self._ort = ort
        # The file itself when there is one (onnxruntime finds its external data); the layer-wise
        # copies are made from bytes with every weight inside.
        self.session = self._make_session(self.model.path or self.model.to_bytes())
        self._layer_sessions: dict[tuple[str, ...], Any] = {}

    def _make_session(self, data: bytes | str) -> Any:
        so = self._ort.SessionOptions()
        # Failures reach the caller as exceptions that tether words itself; onnxruntime's own
        # error log would print the same failure first, in its format.
        so.log_severity_level = 4
        if self._options["threads"]:
            so.intra_op_num_threads = int(self._options["threads"])
        if not self._options["optimize"]:
            so.graph_optimization_level = self._ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        return self._ort.InferenceSession(data, so, providers=list(self._options["providers"]))

    def input_specs(self) -> list[InputSpec]:
        """The model's inputs as onnxruntime sees them."""
        return [InputSpec(i.name, _dtype(_ORT_TYPES.get(i.type, "float32").replace("object", "string")),
                          tuple(d if isinstance(d, int | str) else None for d in i.shape))
                for i in self.session.get_inputs()]

    def output_names(self) -> list[str]:
        """The model's outputs, in order."""
        return [o.name for o in self.session.get_outputs()]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Runs the model in onnxruntime. Inputs onnxruntime refuses (a missing name, a wrong
        dtype or shape) raise ArgumentError with its reason."""
        names = self.output_names()
        return dict(zip(names, self._run(self.session, names, feeds), strict=True))

    def _run(self, sess: Any, names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

        try:
            return list(sess.run(list(names), dict(feeds)))
        except (InvalidArgument, ValueError) as e:
            raise _core.ArgumentError(f"runner '{self.name}': onnxruntime refused the inputs: {e}") from None

    def intermediates(self, feeds: dict[str, np.ndarray], names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """The values ``names`` (default: every node output) from one run of a copy of the
        model that lists them as outputs. onnxruntime keeps a requested value intact through
        its own fusions, so each is the value the ONNX graph defines.

        Example:
            >>> r.intermediates({"x": x}, ["conv1_out"])        # doctest: +SKIP
        """
        wanted = tuple(names) if names else tuple(o for n in self.model.nodes for o in n.outputs if o)
        sess = self._layer_sessions.get(wanted)
        if sess is None:
            sess = self._make_session(_with_outputs(self.model.to_bytes(), wanted))
            self._layer_sessions = {wanted: sess}  # one cached copy: they can be large
        got = [o.name for o in sess.get_outputs()]
        return dict(zip(got, self._run(sess, got, feeds), strict=True))

    def for_model(self, model: ModelSource) -> OnnxRuntimeRunner:
        """A runner of the same kind and options for another model (used by bisection)."""
        return OnnxRuntimeRunner(model, self.name, **self._options)


def _with_outputs(model_bytes: bytes, names: Sequence[str]) -> bytes:
    """The model with ``names`` appended to its graph outputs (types left for the runtime)."""
    import onnx

    proto = onnx.load_from_string(model_bytes)
    present = {o.name for o in proto.graph.output}
    for n in names:
        if n not in present:
            proto.graph.output.append(onnx.ValueInfoProto(name=n))
            present.add(n)
    return proto.SerializeToString()


class TorchRunner:
    """A torch ``nn.Module`` run in eval mode without gradients on numpy inputs.

    ``input_names`` orders the module's positional arguments; ``output_names`` names its
    outputs (a tensor, or a tuple/list/dict of them, flattened in order). When they are not
    given and the module is compared with an ONNX model, :func:`tether.parity.compare` takes
    the model's names in order, the way ``torch.onnx.export`` names them.

    Example:
        >>> r = TorchRunner(net, ["x"], ["logits"])            # doctest: +SKIP
        >>> r.run({"x": x})["logits"].shape                     # doctest: +SKIP
    """

    def __init__(self, module: Any, input_names: Sequence[str] | None = None,
                 output_names: Sequence[str] | None = None, name: str = "torch", *,
                 input_specs: Sequence[InputSpec] | None = None) -> None:
        self.name = name
        self.module = module
        self.input_names = list(input_names) if input_names is not None else None
        self.names = list(output_names) if output_names is not None else None
        #: The runner whose output names ``names`` were taken from (in order), when not declared.
        self.names_from = ""
        self._specs = list(input_specs or [])

    def input_specs(self) -> list[InputSpec]:
        """The specs given at construction (a module does not declare its inputs)."""
        return list(self._specs)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Runs the module on the feeds in ``input_names`` order."""
        import torch

        names = self.input_names if self.input_names is not None else list(feeds)
        missing = [n for n in names if n not in feeds]
        if missing:
            raise _core.ArgumentError(f"runner '{self.name}': input {missing[0]!r} is missing; it takes {names}")
        was_training = bool(getattr(self.module, "training", False))
        self.module.eval()
        try:
            with torch.no_grad():
                out = self.module(*[torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in names])
        finally:
            if was_training:
                self.module.train()
        flat = _flatten(out)
        arrays = [t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t) for t in flat]
        names_out = self.names or (["output"] if len(arrays) == 1 else [f"output_{i}" for i in range(len(arrays))])
        if len(names_out) != len(arrays) and self.names_from:
            raise _core.ArgumentError(f"runner '{self.name}': the module returned {len(arrays)} outputs, but "
                                      f"'{self.names_from}' has {len(names_out)} ({names_out}) to pair them with in "
                                      "order; declare TorchRunner(module, output_names=[...]) and output_map")
        if len(names_out) != len(arrays):
            raise _core.ArgumentError(f"runner '{self.name}': the module returned {len(arrays)} outputs, "
                                      f"but {len(names_out)} output names were declared: {names_out}")
        return dict(zip(names_out, arrays, strict=True))


    def module_outputs(self, feeds: dict[str, np.ndarray]) -> dict[str, list[list[np.ndarray]]]:
        """Runs the module once with a forward hook on every submodule and returns, by module
        path (``"layer1.0.conv1"``, as ``named_modules`` names it), the tensors each call of it
        returned (a list per call, its outputs flattened in order). The root module is left out:
        its outputs are :meth:`run`'s.

        Example:
            >>> r.module_outputs({"x": x})["fc1"][0][0].shape     # doctest: +SKIP
            (2, 32)
        """
        import torch

        captured: dict[str, list[list[np.ndarray]]] = {}

        def hook(path: str) -> Callable[..., None]:
            def record(_module: Any, _args: Any, output: Any) -> None:
                # A copy now: an in-place op later in the forward would change the tensor.
                captured.setdefault(path, []).append(
                    [t.detach().cpu().numpy().copy() for t in _flatten(output) if isinstance(t, torch.Tensor)])
            return record

        handles = [m.register_forward_hook(hook(path)) for path, m in self.module.named_modules() if path]
        try:
            self.run(feeds)
        finally:
            for h in handles:
                h.remove()
        return captured


def _flatten(out: Any) -> list[Any]:
    if isinstance(out, Mapping):
        return [t for v in out.values() for t in _flatten(v)]
    if isinstance(out, list | tuple):
        return [t for v in out for t in _flatten(v)]
    return [out]


class CallableRunner:
    """Any Python function as a runner. It gets the feeds as keyword arguments and returns a
    dict of arrays, one array, or a tuple of arrays (named by ``output_names``).

    Example:
        >>> r = CallableRunner(lambda x: x * 2, output_names=["y"], name="double")
        >>> r.run({"x": np.ones(2)})["y"]
        array([2., 2.])
    """

    def __init__(self, fn: Callable[..., Any], output_names: Sequence[str] | None = None, name: str = "callable",
                 *, input_specs: Sequence[InputSpec] | None = None) -> None:
        self.name = name
        self.fn = fn
        self.names = list(output_names) if output_names is not None else None
        self._specs = list(input_specs or [])

    def input_specs(self) -> list[InputSpec]:
        """The specs given at construction."""
        return list(self._specs)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Calls the function with the feeds as keyword arguments."""
        out = self.fn(**feeds)
        if isinstance(out, Mapping):
            return {str(k): np.asarray(v) for k, v in out.items()}
        arrays = [np.asarray(a) for a in (out if isinstance(out, list | tuple) else [out])]
        names = self.names or (["output"] if len(arrays) == 1 else [f"output_{i}" for i in range(len(arrays))])
        if len(names) != len(arrays):
            raise _core.ArgumentError(f"runner '{self.name}': the function returned {len(arrays)} outputs, "
                                      f"but {len(names)} output names were declared: {names}")
        return dict(zip(names, arrays, strict=True))


def as_runner(obj: Any, name: str | None = None) -> Runner:
    """``obj`` as a runner: a runner itself, a :class:`tether.Session`, a golden bundle, a
    torch module or a callable. Models and paths are not accepted here, since they do not say
    which engine should run them: wrap them in :class:`TetherRunner` or :class:`OnnxRuntimeRunner`.

    Example:
        >>> as_runner(lambda x: x + 1, name="plus1").name
        'plus1'
    """
    if isinstance(obj, Runner):
        return obj
    if isinstance(obj, Session):
        return TetherRunner(obj, name or "tether")
    from tether.parity._golden import GoldenBundle, GoldenRunner

    if isinstance(obj, GoldenBundle):
        return GoldenRunner(obj, name or "golden")
    if type(obj).__module__.startswith("torch") or hasattr(obj, "state_dict"):
        return TorchRunner(obj, name=name or "torch")
    if isinstance(obj, Model | str | bytes | os.PathLike):
        raise _core.ArgumentError("a model does not say which engine runs it: pass TetherRunner(model) or "
                                  "OnnxRuntimeRunner(model)")
    if callable(obj):
        return CallableRunner(obj, name=name or str(getattr(obj, "__name__", "callable")))
    raise _core.ArgumentError(f"cannot run a {type(obj).__name__}: give a Runner, a tether.Session, a torch "
                              "module, a golden bundle or a callable")
