"""tether.compile and tether.Session: run a model with tether's own engine."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from tether._model import Model, ValueInfo, load
from tether._native import core as _core


class Session:
    """A model compiled for one device. Get one with :func:`tether.compile`.

    ``run`` may be called from several threads at once; the GIL is released while it runs.
    Inputs that are C-contiguous numpy arrays are read in place, without a copy.

    Example:
        >>> sess = tt.compile(tt.load("resnet.onnx"), threads=2)     # doctest: +SKIP
        >>> out = sess.run({"x": np.zeros((1, 3, 32, 32), np.float32)})  # doctest: +SKIP
        >>> logits = sess(np.zeros((1, 3, 32, 32), np.float32))     # doctest: +SKIP
    """

    def __init__(self, core: _core.Session, device: str, source_path: str = "") -> None:
        self._core = core
        self.device = device
        #: The file the model was loaded from ("" for a model built or read from bytes): what
        #: a golden bundle's recorded SHA-256 is checked against.
        self.source_path = source_path

    @property
    def inputs(self) -> list[ValueInfo]:
        """The model's inputs, with symbolic dims where the model has them."""
        return [ValueInfo._from_core(n, t) for n, t in self._core.inputs()]

    @property
    def outputs(self) -> list[ValueInfo]:
        """The model's outputs."""
        return [ValueInfo._from_core(n, t) for n, t in self._core.outputs()]

    @property
    def threads(self) -> int:
        """Threads one run uses."""
        return int(self._core.threads)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Runs the model and returns its outputs by name, in the model's order.

        Raises ArgumentError naming the input for an unknown or missing name, a wrong dtype
        or rank, or a dim that contradicts the model.

        Example:
            >>> sess.run({"x": x})["logits"].shape       # doctest: +SKIP
            (1, 10)
        """
        arrays = self._core.run(dict(feeds))
        return {info.name: a for info, a in zip(self.outputs, arrays, strict=True)}

    def __call__(self, *args: np.ndarray, **kwargs: np.ndarray) -> Any:
        """Runs on positional inputs (in the model's order) or keyword inputs; returns the
        only output as an array, or a tuple of outputs.

        Example:
            >>> logits = sess(x)                           # doctest: +SKIP
        """
        feeds = dict(kwargs)
        names = [i.name for i in self.inputs]
        if len(args) > len(names):
            raise _core.ArgumentError(f"{len(args)} inputs given, the model takes {len(names)}: {', '.join(names)}")
        feeds.update(zip(names, args, strict=False))
        outs = list(self.run(feeds).values())
        return outs[0] if len(outs) == 1 else tuple(outs)

    def memory(self) -> dict[str, int]:
        """Memory of the latest plan: ``arena_bytes`` (one arena shared by every
        intermediate), ``intermediate_bytes`` (what they would take side by side),
        ``scratch_bytes``, and the counts ``plans`` and ``arenas`` made so far. On a Vulkan
        device the arena is device memory, ``scratch_bytes`` the host memory of values
        computed on the CPU, and ``device_weight_bytes`` and ``staging_bytes`` count the
        weights in device memory and the staging buffer for transfers.

        Example:
            >>> m = sess.memory()                         # doctest: +SKIP
            >>> m["arena_bytes"] < m["intermediate_bytes"]   # doctest: +SKIP
            True
        """
        return dict(self._core.memory())

    def profile(self) -> list[dict[str, Any]]:
        """Kernel time per node over every run so far, in execution order: ``name``,
        ``op_type``, ``runs`` and ``seconds``. Empty unless compiled with ``profile=True``. On
        a Vulkan device, each run of consecutive Vulkan kernels is one entry (op_type
        ``vulkan:segment``: the wall time of its upload, submission, wait and download
        together), followed by one entry per kernel in it with its time on the device, measured
        by GPU timestamps around it (where the device's queue has none, the stretch's entry
        alone). A stretch's kernels add up to at most its own entry: sum either, not both.

        Example:
            >>> sess = tt.compile(model, profile=True)     # doctest: +SKIP
            >>> sess(x); sorted(sess.profile(), key=lambda p: -p["seconds"])[0]  # doctest: +SKIP
            {'name': 'conv1', 'op_type': 'Conv', 'runs': 1, 'seconds': 0.0021}
        """
        return list(self._core.profile())

    @property
    def report(self) -> str:
        """What compile did: passes applied, kernels, threads; on a Vulkan device, the device
        and each node that runs on the CPU instead, with the reason."""
        return str(self._core.report())

    def steps(self) -> list[dict[str, Any]]:
        """The kernels a run executes, in order: ``name``, ``op_type``, ``fused_from`` (the
        model's node names each computes), ``inputs``, ``outputs`` and ``backend`` (``"cpu"``
        or ``"vulkan"``).

        Example:
            >>> [s["backend"] for s in tt.compile(model, device="vulkan").steps()]  # doctest: +SKIP
            ['vulkan', 'vulkan', 'cpu']
        """
        return [dict(s) for s in self._core.steps()]

    def __repr__(self) -> str:
        return f"<tether.Session on {self.device}: {len(self.inputs)} inputs, {len(self.outputs)} outputs>"


def compile(  # noqa: A001 - the public name mirrors the lifecycle: load, compile, run
    model: Model | str | os.PathLike[str] | bytes,
    device: str = "cpu",
    *,
    threads: int | None = None,
    optimize: bool = True,
    profile: bool = False,
    keep: Sequence[str] = (),
    strict: bool = False,
    max_memory: int | None = None,
    precision: str = "fp32",
) -> Session:
    """Compiles a model for ``device`` and returns a :class:`Session`.

    ``device``: ``"cpu"``; ``"vulkan"`` (the first discrete GPU, else an integrated, virtual or
    CPU Vulkan device) or ``"vulkan:N"`` (device N of :func:`devices`). On Vulkan, nodes the
    Vulkan backend lacks run on the CPU in the same session, their inputs and outputs copied
    between host and device once per run; ``Session.report`` lists each such node and why
    (a node whose Vulkan kernel cannot take its shapes, known at compile, is one; with shapes
    known only at run, the plan for shapes the kernel refuses runs it on the CPU).
    ``strict=True`` raises UnsupportedError naming those nodes instead (at compile, or at the
    run whose shapes the kernel refuses).
    ``threads``: threads per run on the CPU (default: one per physical core). ``optimize``:
    apply the graph passes first. ``profile``: time every kernel (see :meth:`Session.profile`).
    ``keep``: value names the passes must leave computed (never fused into another kernel),
    for tools that observe intermediates. ``max_memory``: bytes one run may take for its
    intermediates, outputs and scratch, on every device (default: the machine's physical
    memory); on Vulkan it counts host and device memory together (the device arena, staging,
    the host memory of CPU-fallback nodes, the outputs). A run that would need more, because of
    its input shapes or of sizes computed from data (ConstantOfShape, Expand, Tile, Range,
    Resize, ...), raises MemoryLimitError naming the node, value, shape and bytes before
    allocating anything. ``precision``: ``"fp32"``, or on a
    Vulkan device whose ``fp16_storage`` is true (see :func:`devices`) ``"fp16"``: float tensors
    and float weights are kept as float16 in device memory (half the bytes), arithmetic stays
    float32; expect relative errors around 1e-3 against float32.

    Raises UnsupportedError listing every node the device cannot run (and, for a Vulkan
    device, when none is found: how to install one; for ``precision="fp16"`` on the CPU or on
    a device without 16-bit storage), ArgumentError for an unknown device or precision or a
    ``keep`` name the model lacks, DeviceError when the device fails.

    Example:
        >>> sess = tt.compile("model.onnx", threads=1)    # doctest: +SKIP
        >>> sess = tt.compile(model, keep=["conv1_out"])   # doctest: +SKIP
        >>> sess = tt.compile(model, max_memory=2 << 30)   # doctest: +SKIP
        >>> gpu = tt.compile(model, device="vulkan")       # doctest: +SKIP
        >>> half = tt.compile(model, device="vulkan", precision="fp16")  # doctest: +SKIP
        >>> print(gpu.report)                              # doctest: +SKIP
        vulkan: device vulkan:0 'llvmpipe (LLVM 15.0.6, 256 bits)' (cpu, llvmpipe ...)
        vulkan: 14 kernels on vulkan, 0 on cpu (2 threads), 76.0 KB of weights in device memory
    """
    if not isinstance(model, Model):
        model = load(model)
    if max_memory is not None and int(max_memory) <= 0:
        raise _core.ArgumentError(f"max_memory must be a positive number of bytes, got {max_memory}")
    core = _core.compile(model._core, device, 0 if threads is None else int(threads), optimize, profile, list(keep),
                         bool(strict), 0 if max_memory is None else int(max_memory), str(precision))
    return Session(core, device, model.path)


def devices() -> list[dict[str, Any]]:
    """The devices :func:`compile` takes: the CPU, then each Vulkan device. Each is a dict with
    ``device`` (what ``compile`` takes: ``"cpu"``, ``"vulkan:0"``, ...), ``backend``, ``index``,
    ``name``, ``type`` and ``memory_bytes`` (physical memory; a GPU's device-local memory), then
    the backend's own facts. The CPU: ``cores``, ``threads``, ``isa`` (the widest instruction
    set tether's kernels use: ``"avx512"``, ``"avx2"`` or ``"generic"``), and ``avx2``,
    ``avx512``, ``avx512_vnni``, ``avx_vnni``, ``amx_int8`` (what the kernels may use here).
    Vulkan: ``driver_name``, ``driver_version``, ``api_version``, ``fp16`` and ``int8``
    (arithmetic in shaders), ``fp16_storage`` (float16 in storage buffers: what
    ``compile(..., precision="fp16")`` needs), ``subgroup_size``, ``subgroup_arithmetic``
    (subgroup reductions in compute shaders, which the GPU row kernels use) and
    ``cooperative_matrix`` (tensor cores that precision="fp16" products use). Without a Vulkan loader or
    driver the list holds the CPU alone (``apt-get install mesa-vulkan-drivers`` gives lavapipe,
    a Vulkan device on the CPU).

    Example:
        >>> [d["device"] for d in tt.devices()]            # doctest: +SKIP
        ['cpu', 'vulkan:0']
        >>> tt.devices()[1]["name"]                        # doctest: +SKIP
        'llvmpipe (LLVM 15.0.6, 256 bits)'
    """
    return [dict(d) for d in _core.devices()]


def cpu_info() -> dict[str, Any]:
    """What tether's CPU engine found on this machine: CPU model (``brand``), the widest
    instruction set its kernels use (``isa``: avx512, avx2 or generic), feature flags (among
    them ``amx_int8``: AMX tiles for integer products), the float GEMM micro-kernel chosen
    (``gemm_kernel``), the integer one (``int8_gemm_kernel``, for quantized models) and the
    number of physical cores. ``TETHER_ISA=avx512|avx2|generic`` caps what is used.

    Example:
        >>> tt.cpu_info()["isa"]                      # doctest: +SKIP
        'avx512'
    """
    return dict(_core.cpu_info())


def supported_ops(device: str = "cpu") -> list[tuple[str, str]]:
    """The ops ``device`` has kernels for, as sorted ``(domain, op_type)`` pairs, with ``""``
    for the ONNX domain. A listed op may still reject some dtypes or attributes:
    :func:`compile` names every such node.

    Example:
        >>> ("", "Conv") in tt.supported_ops()
        True
    """
    return [tuple(op.split(":", 1)) for op in _core.supported_ops(device)]  # type: ignore[misc]
