"""The op table: one list of small graphs, each with its inputs, that every backend runs
(tests/python/test_op_table.py). Sizes are awkward (1, 3, 13, 127), with broadcasting,
padding, strides, dilations, groups, negative axes and every dtype an op takes.

Each case's result on the CPU engine is compared with an independent oracle: onnxruntime on
the case's model (or on `ort_model`, the standard-ONNX form of an `ai.tether` node), or a
numpy `oracle` written with the case where onnxruntime does not run the op. Every other
backend is compared with the CPU engine. The cases whose ops have kernels compiled per
instruction set (ISA_OPS) also run under each TETHER_ISA: run as a script, this file checks
them in one process and prints one JSON line (the chosen kernels and each failure)."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RTOL = 1e-4  # float32: the largest error allowed, relative to the reference's largest magnitude

# Ops whose CPU kernels are compiled once per instruction set (gemm, conv_nhwc, qgemm,
# matmul_nbits): a case holding one runs under every TETHER_ISA.
ISA_OPS = frozenset({
    "Conv", "ConvTranspose", "Gemm", "MatMul", "FusedConv", "FusedGemm", "FusedMatMul", "MaxPool", "AveragePool",
    "GlobalAveragePool", "GlobalMaxPool", "QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger",
    "MatMulIntegerToFloat", "ConvIntegerToFloat", "QGemm", "MatMulNBits"})

Oracle = Callable[[dict[str, np.ndarray]], list[np.ndarray]]

# Cases of ops a backend lists whose form it refuses when compiled strict (a typed
# UnsupportedError naming the limit): the table expects the refusal, so that the day the
# backend takes the form the case must move back to the passing ones.
REFUSED: dict[str, dict[str, str]] = {"vulkan": {
    "Max-int64-3-inputs": "Vulkan's Max takes float32 and two inputs",
    "Add-int64": "Vulkan's binary arithmetic takes float32 only",
    "Mul-int32": "Vulkan's binary arithmetic takes float32 only",
    "Sub-int64-scalar": "Vulkan's binary arithmetic takes float32 only",
    "Div-int32-truncates": "Vulkan's binary arithmetic takes float32 only",
    "Cast-float-to-float16": "Vulkan's Cast writes float32, int32, int64, bool and uint8 only",
    "Cast-int32-to-int8-wraps": "Vulkan's Cast writes float32, int32, int64, bool and uint8 only",
    "LayerNormalization-stats-outputs": "Vulkan's LayerNormalization does not write Mean and InvStdDev",
    "conv7": "Vulkan's Conv takes 1-D and 2-D convolutions (this one is 3-D)",
    "conv7_residual_relu": "Vulkan's FusedConv takes 1-D and 2-D convolutions (this one is 3-D)",
}}
# Cases a backend runs and gets wrong: known bugs, each a strict xfail until fixed.
WRONG: dict[str, dict[str, str]] = {}


@dataclass(frozen=True)
class OpCase:
    id: str
    model: bytes
    feeds: dict[str, np.ndarray] = field(hash=False)
    fused: str = ""    # the fused op the graph passes must make of it ("ai.tether:FusedConv")
    rtol: float = RTOL
    oracle: Oracle | None = field(default=None, hash=False, compare=False)  # when onnxruntime cannot run it
    ort_model: bytes = b""  # what onnxruntime runs instead of `model` (the ONNX form of an ai.tether node)
    backends: tuple[str, ...] = ()  # () for every backend that lists its ops; else only these
    why_only: str = ""  # why the case is limited to `backends`

    @property
    def ort(self) -> bool:
        """onnxruntime is the CPU engine's oracle for this case."""
        return self.oracle is None

    @property
    def ops(self) -> set[tuple[str, str]]:
        """(domain, op type) of every node, subgraphs included."""
        return _ops_of(onnx.load_from_string(self.model).graph)

    @property
    def isa(self) -> bool:
        """The case runs a kernel compiled per instruction set."""
        return any(op in ISA_OPS for _, op in self.ops)

    def expected(self) -> list[np.ndarray]:
        """The CPU engine's oracle: onnxruntime on one thread, or the case's numpy oracle."""
        if self.oracle is not None:
            return self.oracle(self.feeds)
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 3  # errors only: old-opset cases are deliberate
        # exact uint8 x int8 products on CPUs without VNNI (else int16 pair sums saturate)
        opts.add_session_config_entry("session.x64quantprecision", "1")
        sess = ort.InferenceSession(self.ort_model or self.model, opts, providers=["CPUExecutionProvider"])
        return sess.run(None, self.feeds)


def _ops_of(g: onnx.GraphProto) -> set[tuple[str, str]]:
    ops = set()
    for n in g.node:
        ops.add(("" if n.domain == "ai.onnx" else n.domain, n.op_type))
        for a in n.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                ops |= _ops_of(sub)
    return ops


def _graph(nodes: Sequence[onnx.NodeProto], feeds: dict[str, np.ndarray], consts: dict[str, np.ndarray] | None = None,
           outputs: Sequence[str] = ("y",), opset: int = 18) -> bytes:
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in feeds.items()]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in (consts or {}).items()]
    nodes = list(nodes)
    seen: set[str] = set()
    for k, n in enumerate(nodes):
        if n.name in seen:
            n.name = f"{n.name}_{k}"
        seen.add(n.name)
    g = helper.make_graph(nodes, "case", inputs, [onnx.ValueInfoProto(name=o) for o in outputs], inits)
    domains = sorted({d for d, _ in _ops_of(g) if d})
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(g, opset_imports=opsets, ir_version=10).SerializeToString()


def _node(op: str, inputs: Sequence[str], outputs: Sequence[str] = ("y",), **attrs: object) -> onnx.NodeProto:
    return helper.make_node(op, list(inputs), list(outputs), name=f"the_{op.lower()}", **attrs)


class _Table:
    """Builds cases: one node (`one`) or a chain of nodes (`chain`), with seeded random inputs."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(2024)
        self.cases: list[OpCase] = []

    def rand(self, *shape: int, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
        return self.rng.uniform(lo, hi, shape).astype(np.float32)

    def ints(self, *shape: int, lo: int = -9, hi: int = 9, dtype: type = np.int64) -> np.ndarray:
        return self.rng.integers(lo, hi + 1, shape).astype(dtype)

    def one(self, case_id: str, op: str, feeds: dict[str, np.ndarray], consts: dict[str, np.ndarray] | None = None,
            inputs: Sequence[str] | None = None, opset: int = 18, outputs: Sequence[str] = ("y",),
            oracle: Oracle | None = None, domain: str = "", rtol: float = RTOL, **attrs: object) -> None:
        names = list(inputs) if inputs is not None else [*feeds, *(consts or {})]
        node = _node(op, names, outputs, **attrs)
        node.domain = domain
        model = _graph([node], feeds, consts, outputs, opset)
        self.cases.append(OpCase(case_id, model, feeds, oracle=oracle, rtol=rtol))

    def chain(self, case_id: str, nodes: Sequence[onnx.NodeProto], feeds: dict[str, np.ndarray],
              consts: dict[str, np.ndarray] | None = None, fused: str = "", opset: int = 18,
              outputs: Sequence[str] = ("y",), rtol: float = RTOL, backends: tuple[str, ...] = (),
              why_only: str = "") -> None:
        self.cases.append(OpCase(case_id, _graph(nodes, feeds, consts, outputs, opset), feeds, fused=fused, rtol=rtol,
                                 backends=backends, why_only=why_only))


def _all_cases() -> list[OpCase]:
    t = _Table()
    for section in (_core_cases, _math_cases, _data_cases, _sequence_cases, _quantized_cases, _transformer_cases):
        section(t)
    return t.cases + list(_isa_cases())


def op_cases() -> list[OpCase]:
    """The cases that every backend listing their ops runs (per-ISA cases included; those a
    backend refuses, REFUSED, are in table() only)."""
    refused = {case_id for by_backend in REFUSED.values() for case_id in by_backend}
    return [c for c in _all_cases() if c.id not in refused]


def table() -> list[OpCase]:
    """The whole table: every case, with those a backend refuses and the CPU's channels-last
    layout forms (cpu_layout_cases())."""
    return _all_cases() + list(cpu_layout_cases())


def _core_cases(t: _Table) -> None:
    rand, one, chain = t.rand, t.one, t.chain

    # ---- unary ops and activations --------------------------------------------------------------
    x = rand(3, 13)
    positive = rand(2, 127, lo=0.05, hi=3.0)
    for op in ["Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Neg", "Abs", "Floor", "Ceil", "Softplus", "Sin", "Cos", "Sign",
               "Softsign", "HardSwish", "Mish"]:
        one(f"{op}-3x13", op, {"x": x})
    one("Tanh-large", "Tanh", {"x": rand(1, 127, lo=-60, hi=60)})
    with_nan = rand(2, 9)
    with_nan[0, ::3] = np.nan
    one("Sign-nan", "Sign", {"x": with_nan})  # NaN stays NaN, as numpy and onnxruntime have it
    one("Sigmoid-large", "Sigmoid", {"x": rand(1, 127, lo=-90, hi=90)})
    one("Log-2x127", "Log", {"x": positive})
    one("Sqrt-2x127", "Sqrt", {"x": positive})
    one("Reciprocal-2x127", "Reciprocal", {"x": positive})
    one("Round-halves", "Round", {"x": np.array([[-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, -3.51]], np.float32)})
    one("LeakyRelu-alpha", "LeakyRelu", {"x": x}, alpha=0.15)
    one("Elu", "Elu", {"x": x}, alpha=0.7)
    one("Selu", "Selu", {"x": x})
    one("Celu", "Celu", {"x": x}, alpha=1.3)
    one("ThresholdedRelu", "ThresholdedRelu", {"x": x}, alpha=0.4)
    one("HardSigmoid", "HardSigmoid", {"x": x}, alpha=0.3, beta=0.4)
    one("Gelu-erf", "Gelu", {"x": rand(2, 3, 13, lo=-5, hi=5)}, opset=20)
    one("Gelu-tanh", "Gelu", {"x": rand(2, 3, 13, lo=-5, hi=5)}, opset=20, approximate="tanh")
    one("Clip-inputs", "Clip", {"x": x}, {"lo": np.float32(-0.5), "hi": np.float32(0.7)}, opset=13)
    one("Clip-min-only", "Clip", {"x": x}, {"lo": np.float32(0.1)}, inputs=["x", "lo"], opset=13)
    one("Clip-attributes", "Clip", {"x": x}, opset=6, min=-1.0, max=0.25)

    # ---- binary ops with numpy broadcasting ---------------------------------------------------------
    one("Add-3x1x13+1x5x1", "Add", {"a": rand(3, 1, 13), "b": rand(1, 5, 1)})
    one("Sub-13-2x3x13", "Sub", {"a": rand(13), "b": rand(2, 3, 13)})
    one("Mul-scalar", "Mul", {"a": rand(3, 13)}, {"b": np.float32(1.7)})
    one("Div-2x3x1x127/127", "Div", {"a": rand(2, 3, 1, 127)}, {"b": rand(127, lo=0.5, hi=2.0)})
    one("Pow-positive", "Pow", {"a": rand(3, 13, lo=0.1, hi=2.0), "b": rand(13, lo=-1.5, hi=2.5)})
    one("Pow-square", "Pow", {"a": rand(3, 13)}, {"b": np.float32(2.0)})
    one("Pow-cube-negative-base", "Pow", {"a": rand(3, 13)}, {"b": np.float32(3.0)})
    one("Max-1x13-3x1", "Max", {"a": rand(1, 13), "b": rand(3, 1)})
    one("Min-same", "Min", {"a": rand(2, 13), "b": rand(2, 13)})
    one("Add-1x1", "Add", {"a": rand(1, 1), "b": rand(1, 1)})
    one("Mul-rank6", "Mul", {"a": rand(2, 1, 3, 1, 2, 3), "b": rand(1, 2, 1, 3, 1, 3)})
    one("PRelu-channel-slope", "PRelu", {"x": rand(2, 3, 5, 5)}, {"slope": rand(3, 1, 1, lo=0.0, hi=0.5)})

    # ---- Gemm, MatMul, batched MatMul, and what the passes fuse them into ----------------------------
    one("Gemm-13x7x5-bias", "Gemm", {"a": rand(13, 7)}, {"b": rand(7, 5), "c": rand(5)})
    one("Gemm-transA-transB-alpha-beta", "Gemm", {"a": rand(7, 13)}, {"b": rand(5, 7), "c": rand(13, 1)},
        transA=1, transB=1, alpha=0.5, beta=2.0)
    one("Gemm-1x127x3-scalar-c", "Gemm", {"a": rand(1, 127)}, {"b": rand(127, 3), "c": np.float32(0.3)})
    one("Gemm-no-c-127x13x127", "Gemm", {"a": rand(127, 13), "b": rand(13, 127)})
    one("MatMul-3x13x7", "MatMul", {"a": rand(3, 13), "b": rand(13, 7)})
    one("MatMul-batched-2x3x13x7x5", "MatMul", {"a": rand(2, 3, 13, 7)}, {"b": rand(7, 5)})
    one("MatMul-broadcast-batches", "MatMul", {"a": rand(2, 1, 5, 13), "b": rand(3, 13, 4)})
    one("MatMul-vector-matrix", "MatMul", {"a": rand(13), "b": rand(13, 5)})
    one("MatMul-matrix-vector", "MatMul", {"a": rand(3, 13), "b": rand(13)})
    one("MatMul-outer-127x1x127", "MatMul", {"a": rand(127, 1), "b": rand(1, 127)})
    one("MatMul-k127", "MatMul", {"a": rand(3, 127), "b": rand(127, 13)})
    # Both sides of 32 or more: the GEMM's 4 x 4 outputs per invocation, with ragged edge tiles.
    one("MatMul-blocked-batched-2x65x33x70", "MatMul", {"a": rand(2, 65, 33)}, {"b": rand(33, 70)})
    # Batches of one row against a shared B (a sequence-first transformer's projections): the
    # rows stack into one product.
    one("MatMul-thin-batches-40x1x33x70", "MatMul", {"a": rand(40, 1, 33)}, {"b": rand(33, 70)})
    one("MatMul-batched-matrix-vector", "MatMul", {"a": rand(2, 3, 13), "b": rand(13)})
    one("Gemm-blocked-transB-bias-127x40x33", "Gemm", {"a": rand(127, 40)}, {"b": rand(33, 40), "c": rand(33)}, transB=1)
    # Rows of whole vec4s (K and N multiples of 4: the vec4 GEMM on lavapipe), with M and N off
    # its 8-row and 8-column blocks, bias of every broadcast form, broadcast batches.
    one("MatMul-vec4-37x64x52", "MatMul", {"a": rand(37, 64)}, {"b": rand(64, 52)})
    one("Gemm-vec4-col-bias-alpha-beta", "Gemm", {"a": rand(9, 12)}, {"b": rand(12, 20), "c": rand(20)}, alpha=0.5, beta=2.0)
    one("Gemm-vec4-row-bias", "Gemm", {"a": rand(9, 12)}, {"b": rand(12, 20), "c": rand(9, 1)})
    one("Gemm-vec4-matrix-bias", "Gemm", {"a": rand(9, 12)}, {"b": rand(12, 20), "c": rand(9, 20)})
    one("MatMul-vec4-broadcast-batches", "MatMul", {"a": rand(2, 1, 5, 8), "b": rand(3, 8, 12)})
    one("MatMul-vec4-one-row", "MatMul", {"a": rand(1, 96)}, {"b": rand(96, 100)})
    one("Gemm-vec4-transB-bias-5x24x10", "Gemm", {"a": rand(5, 24)}, {"b": rand(10, 24), "c": rand(10)}, transB=1)
    one("Gemm-vec4-transB-classifier-1x64x333", "Gemm", {"a": rand(1, 64)}, {"b": rand(333, 64), "c": rand(333)}, transB=1)
    chain("FusedMatMul-vec4-bias-relu", [_node("MatMul", ["x", "w"], ["m"]), _node("Add", ["m", "b"], ["a"]),
                                         _node("Relu", ["a"], ["y"])],
          {"x": rand(2, 7, 16)}, {"w": rand(16, 24), "b": rand(24)}, fused="ai.tether:FusedMatMul")
    chain("FusedConv-1x1-vec4-residual-relu", [_node("Conv", ["x", "w", "b"], ["c"]), _node("Add", ["c", "r"], ["s"]),
                                               _node("Relu", ["s"], ["y"])],
          {"x": rand(2, 8, 4, 6), "r": rand(2, 12, 4, 6)}, {"w": rand(12, 8, 1, 1), "b": rand(12)},
          fused="ai.tether:FusedConv")
    chain("FusedMatMul-bias-gelu", [_node("MatMul", ["x", "w"], ["m"]), _node("Add", ["m", "b"], ["a"]),
                                    _node("Gelu", ["a"], ["y"])],
          {"x": rand(2, 7, 13)}, {"w": rand(13, 5), "b": rand(5)}, fused="ai.tether:FusedMatMul", opset=20)
    chain("Gemm-from-MatMul-Add-Relu", [_node("MatMul", ["x", "w"], ["m"]), _node("Add", ["m", "b"], ["a"]),
                                        _node("Relu", ["a"], ["y"])],
          {"x": rand(3, 13)}, {"w": rand(13, 7), "b": rand(7)}, fused="ai.tether:FusedGemm")
    chain("FusedGemm-sigmoid", [_node("Gemm", ["x", "w", "b"], ["m"], transB=1), _node("Sigmoid", ["m"], ["y"])],
          {"x": rand(3, 13)}, {"w": rand(7, 13), "b": rand(7)}, fused="ai.tether:FusedGemm")

    # ---- convolutions ---------------------------------------------------------------------------------
    img = rand(1, 3, 13, 13)
    one("Conv-3x3-pad1", "Conv", {"x": img}, {"w": rand(5, 3, 3, 3), "b": rand(5)}, pads=[1, 1, 1, 1])
    one("Conv-stride2", "Conv", {"x": img}, {"w": rand(4, 3, 3, 3)}, strides=[2, 2])
    one("Conv-dilation2", "Conv", {"x": img}, {"w": rand(4, 3, 3, 3), "b": rand(4)}, dilations=[2, 2], pads=[2, 2, 2, 2])
    one("Conv-depthwise-multiplier2", "Conv", {"x": img}, {"w": rand(6, 1, 3, 3), "b": rand(6)}, group=3,
        pads=[1, 1, 1, 1])
    one("Conv-groups2", "Conv", {"x": rand(2, 4, 7, 9)}, {"w": rand(6, 2, 3, 1)}, group=2, pads=[1, 0, 1, 0])
    one("Conv-asymmetric-pads", "Conv", {"x": img}, {"w": rand(3, 3, 2, 3)}, pads=[0, 1, 2, 0])
    one("Conv-same-upper-stride2", "Conv", {"x": img}, {"w": rand(3, 3, 3, 3)}, auto_pad="SAME_UPPER", strides=[2, 2])
    one("Conv-1x1-bias", "Conv", {"x": rand(2, 13, 7, 7)}, {"w": rand(5, 13, 1, 1), "b": rand(5)})
    one("Conv-1x1-stride2", "Conv", {"x": rand(2, 13, 7, 7)}, {"w": rand(5, 13, 1, 1)}, strides=[2, 2])
    one("Conv-1d", "Conv", {"x": rand(2, 3, 13)}, {"w": rand(4, 3, 3), "b": rand(4)}, pads=[1, 1], strides=[2])
    one("Conv-1x1-input-127", "Conv", {"x": rand(1, 1, 1, 127)}, {"w": rand(3, 1, 1, 1)})
    # 8 output channels per group or more: 8 channels per invocation of the direct convolution.
    one("Conv-3x3-m16-groups2", "Conv", {"x": rand(2, 4, 13, 11)}, {"w": rand(16, 2, 3, 3), "b": rand(16)}, group=2,
        pads=[1, 1, 1, 1])
    one("Conv-3x3-m24-stride2", "Conv", {"x": rand(1, 3, 13, 13)}, {"w": rand(24, 3, 3, 3)}, strides=[2, 2])
    one("Conv-1x1-m40-blocked-gemm", "Conv", {"x": rand(2, 13, 9, 9)}, {"w": rand(40, 13, 1, 1), "b": rand(40)})
    chain("FusedConv-residual-relu", [_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                                      _node("Add", ["c", "r"], ["s"]), _node("Relu", ["s"], ["y"])],
          {"x": rand(2, 4, 7, 7), "r": rand(2, 4, 7, 7)}, {"w": rand(4, 4, 3, 3), "b": rand(4)},
          fused="ai.tether:FusedConv")
    chain("FusedConv-1x1-residual-relu6", [_node("Conv", ["x", "w"], ["c"]), _node("Add", ["c", "r"], ["s"]),
                                           _node("Clip", ["s", "lo", "hi"], ["y"])],
          {"x": rand(1, 13, 5, 5), "r": rand(1, 7, 5, 5)},
          {"w": rand(7, 13, 1, 1), "lo": np.float32(0.0), "hi": np.float32(6.0)}, fused="ai.tether:FusedConv")
    chain("FusedConv-depthwise-hardswish", [_node("Conv", ["x", "w"], ["c"], group=3, pads=[1, 1, 1, 1], strides=[2, 2]),
                                            _node("HardSwish", ["c"], ["y"])],
          {"x": img}, {"w": rand(3, 1, 3, 3)}, fused="ai.tether:FusedConv")
    chain("FusedConv-leakyrelu", [_node("Conv", ["x", "w", "b"], ["c"]), _node("LeakyRelu", ["c"], ["y"], alpha=0.2)],
          {"x": img}, {"w": rand(2, 3, 3, 3), "b": rand(2)}, fused="ai.tether:FusedConv")

    one("ConvTranspose-k2-s2-bias", "ConvTranspose", {"x": rand(1, 4, 5, 5)}, {"w": rand(4, 3, 2, 2), "b": rand(3)},
        strides=[2, 2])
    one("ConvTranspose-k3-s2-p1-output-padding", "ConvTranspose", {"x": rand(2, 3, 4, 5)}, {"w": rand(3, 2, 3, 3)},
        strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])
    one("ConvTranspose-groups2-dilation2", "ConvTranspose", {"x": rand(1, 4, 5, 5)}, {"w": rand(4, 3, 3, 3)}, group=2,
        dilations=[2, 2], pads=[1, 0, 2, 1])
    one("ConvTranspose-same-upper", "ConvTranspose", {"x": rand(1, 3, 5, 5)}, {"w": rand(3, 2, 3, 3)}, auto_pad="SAME_UPPER",
        strides=[2, 2])
    one("ConvTranspose-output-shape", "ConvTranspose", {"x": rand(1, 3, 5, 5)}, {"w": rand(3, 2, 3, 3)},
        strides=[2, 2], output_shape=[12, 11])
    one("ConvTranspose-1d-stride3", "ConvTranspose", {"x": rand(2, 3, 7)}, {"w": rand(3, 4, 3), "b": rand(4)}, strides=[3])

    # ---- pooling --------------------------------------------------------------------------------------
    one("MaxPool-k3-s2-p1", "MaxPool", {"x": img}, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    one("MaxPool-ceil", "MaxPool", {"x": img}, kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    one("MaxPool-dilation", "MaxPool", {"x": img}, kernel_shape=[2, 3], dilations=[2, 2])
    one("MaxPool-1d", "MaxPool", {"x": rand(2, 3, 13)}, kernel_shape=[3], strides=[2], pads=[1, 1])
    one("AveragePool-exclude-pad", "AveragePool", {"x": img}, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    one("AveragePool-include-pad", "AveragePool", {"x": img}, kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)
    one("AveragePool-ceil-stride2", "AveragePool", {"x": img}, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    one("GlobalAveragePool", "GlobalAveragePool", {"x": rand(2, 5, 7, 7)})
    one("GlobalMaxPool", "GlobalMaxPool", {"x": rand(2, 5, 13, 1)})

    # ---- normalisations --------------------------------------------------------------------------------
    one("Softmax-last-3x127", "Softmax", {"x": rand(3, 127, lo=-10, hi=10)})
    one("Softmax-axis1", "Softmax", {"x": rand(2, 13, 5)}, axis=1)
    one("Softmax-opset11-coerced", "Softmax", {"x": rand(2, 3, 5)}, opset=11, axis=1)
    one("LogSoftmax-last", "LogSoftmax", {"x": rand(3, 13)})
    one("LayerNormalization-last", "LayerNormalization", {"x": rand(2, 7, 13)}, {"s": rand(13), "b": rand(13)}, axis=-1)
    one("LayerNormalization-axis1", "LayerNormalization", {"x": rand(2, 3, 5)}, {"s": rand(3, 5)}, axis=1,
        epsilon=1e-3)

    # ---- data movement ---------------------------------------------------------------------------------
    one("Concat-axis1", "Concat", {"a": rand(2, 3, 5), "b": rand(2, 1, 5)}, {"c": rand(2, 4, 5)}, axis=1)
    one("Concat-axis0", "Concat", {"a": rand(1, 13), "b": rand(3, 13)}, axis=0)
    one("Concat-last", "Concat", {"a": rand(3, 1), "b": rand(3, 127)}, axis=-1)
    one("Split-sizes", "Split", {"x": rand(2, 13, 5)}, {"s": np.array([3, 10], np.int64)}, axis=1, outputs=["y", "z"])
    one("Split-equal", "Split", {"x": rand(6, 5)}, axis=0, num_outputs=3, outputs=["y", "z", "w"])
    one("Transpose-021", "Transpose", {"x": rand(2, 13, 7)}, perm=[0, 2, 1])
    one("Transpose-3102", "Transpose", {"x": rand(2, 3, 5, 7)}, perm=[3, 1, 0, 2])
    one("Transpose-default", "Transpose", {"x": rand(3, 1, 13)})
    one("Slice-steps", "Slice", {"x": rand(5, 13)}, {"st": np.array([1, -5], np.int64), "en": np.array([4, 100], np.int64),
                                                      "ax": np.array([0, 1], np.int64), "sp": np.array([1, 2], np.int64)})
    one("Slice-reverse", "Slice", {"x": rand(3, 13)}, {"st": np.array([-1], np.int64), "en": np.array([-100], np.int64),
                                                        "ax": np.array([1], np.int64), "sp": np.array([-3], np.int64)})
    one("Expand-3x1-to-2x3x5", "Expand", {"x": rand(3, 1)}, {"s": np.array([2, 3, 5], np.int64)})
    one("Gather-axis0", "Gather", {"x": rand(13, 5)}, {"i": np.array([[0, 3], [12, -1]], np.int64)}, axis=0)
    one("Gather-axis1-scalar", "Gather", {"x": rand(2, 13, 3)}, {"i": np.array(-2, np.int64)}, axis=1)
    chain("Reshape-Flatten-views", [_node("Relu", ["x"], ["r"]), _node("Reshape", ["r", "s"], ["v"]),
                                    _node("Sigmoid", ["v"], ["f"]), _node("Flatten", ["f"], ["y"], axis=2)],
          {"x": rand(2, 3, 13)}, {"s": np.array([3, 2, 13], np.int64)})
    chain("Squeeze-Unsqueeze-views", [_node("Neg", ["x"], ["n"]), _node("Unsqueeze", ["n", "a"], ["u"]),
                                      _node("Abs", ["u"], ["b"]), _node("Squeeze", ["b", "a0"], ["y"])],
          {"x": rand(3, 1, 13)}, {"a": np.array([0], np.int64), "a0": np.array([0, 2], np.int64)})

    # ---- Resize and Upsample over the last two axes ------------------------------------------------
    def scales(*v: float) -> dict[str, np.ndarray]:
        return {"s": np.array(v, np.float32)}

    def sizes(*v: int) -> dict[str, np.ndarray]:
        return {"z": np.array(v, np.int64)}

    one("Resize-nearest-x2-half-pixel", "Resize", {"x": img}, scales(1, 1, 2, 2), inputs=["x", "", "s"])
    # asymmetric x2 lands on exact halves: the nearest_mode decides every other index.
    for nm in ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]:
        one(f"Resize-nearest-asymmetric-x2-{nm}", "Resize", {"x": img}, scales(1, 1, 2, 2), inputs=["x", "", "s"],
            coordinate_transformation_mode="asymmetric", nearest_mode=nm)
    # 20 -> 6 with half_pixel puts output 4 at 14.5 (an ulp away in float): a tie all the same.
    one("Resize-nearest-sizes-20to6-ties", "Resize", {"x": rand(1, 2, 13, 20)}, sizes(1, 2, 5, 6), inputs=["x", "", "", "z"])
    one("Resize-nearest-tf-half-pixel-for-nn", "Resize", {"x": img}, scales(1, 1, 0.6, 1.5), inputs=["x", "", "s"],
        coordinate_transformation_mode="tf_half_pixel_for_nn")
    one("Resize-linear-x2-half-pixel", "Resize", {"x": rand(2, 3, 7, 5)}, scales(1, 1, 2, 2), inputs=["x", "", "s"],
        mode="linear")
    one("Resize-linear-align-corners-13to27", "Resize", {"x": img}, sizes(1, 3, 27, 4), inputs=["x", "", "", "z"],
        mode="linear", coordinate_transformation_mode="align_corners")
    one("Resize-linear-pytorch-half-pixel-to-1", "Resize", {"x": img}, sizes(1, 3, 1, 7), inputs=["x", "", "", "z"],
        mode="linear", coordinate_transformation_mode="pytorch_half_pixel")
    one("Resize-linear-asymmetric-width-only", "Resize", {"x": img}, scales(1, 1, 1, 2.5), inputs=["x", "", "s"],
        mode="linear", coordinate_transformation_mode="asymmetric")
    one("Resize-linear-half-pixel-symmetric", "Resize", {"x": img}, scales(1, 1, 1.7, 0.6), inputs=["x", "", "s"],
        mode="linear", coordinate_transformation_mode="half_pixel_symmetric", opset=19)
    one("Resize-linear-axes-rank3", "Resize", {"x": rand(2, 13, 7)}, scales(0.5, 3), inputs=["x", "", "s"], mode="linear",
        axes=[1, 2])
    one("Resize-nearest-rank2", "Resize", {"x": rand(13, 7)}, sizes(127, 3), inputs=["x", "", "", "z"])
    one("Resize-opset10-linear", "Resize", {"x": img}, scales(1, 1, 2, 1.5), opset=10, mode="linear")
    one("Upsample-opset9-nearest", "Upsample", {"x": img}, scales(1, 1, 2, 3), opset=9)

    # ---- reductions ---------------------------------------------------------------------------------
    r3 = rand(2, 3, 13)
    one("ReduceMean-last-keep", "ReduceMean", {"x": r3}, {"ax": np.array([2], np.int64)})
    one("ReduceMean-12-drop", "ReduceMean", {"x": r3}, {"ax": np.array([1, 2], np.int64)}, keepdims=0)
    one("ReduceSum-axis0", "ReduceSum", {"x": r3}, {"ax": np.array([0], np.int64)}, opset=13)
    one("ReduceMax-all", "ReduceMax", {"x": r3}, keepdims=0)
    one("ReduceMin-negative-axis", "ReduceMin", {"x": r3}, {"ax": np.array([-2], np.int64)})
    one("ReduceL2", "ReduceL2", {"x": r3}, {"ax": np.array([2], np.int64)})
    one("ReduceL1", "ReduceL1", {"x": r3}, {"ax": np.array([1], np.int64)})
    one("ReduceSumSquare", "ReduceSumSquare", {"x": r3}, {"ax": np.array([2], np.int64)})
    one("ReduceLogSumExp", "ReduceLogSumExp", {"x": r3}, {"ax": np.array([2], np.int64)})
    one("ReduceLogSum", "ReduceLogSum", {"x": positive}, {"ax": np.array([1], np.int64)})
    one("ReduceProd", "ReduceProd", {"x": rand(3, 5, lo=0.5, hi=1.5)}, {"ax": np.array([1], np.int64)})


def _math_cases(t: _Table) -> None:
    """Element-wise math, comparisons, logic and casts, with broadcasting and non-float dtypes."""
    rand, ints, one = t.rand, t.ints, t.one
    unit = rand(3, 13, lo=-0.95, hi=0.95)
    wide = rand(2, 13, lo=-3.0, hi=3.0)
    for op, x in [("Acos", unit), ("Asin", unit), ("Atanh", unit), ("Atan", wide), ("Asinh", wide), ("Sinh", wide),
                  ("Cosh", wide), ("Acosh", rand(1, 127, lo=1.0, hi=9.0)), ("Tan", rand(3, 13, lo=-1.4, hi=1.4))]:
        one(f"{op}-{'x'.join(map(str, x.shape))}", op, {"x": x})
    special = np.array([[1.0, np.inf, -np.inf, np.nan, -0.0, 3.5, -np.inf, 7.0]], np.float32)
    one("IsNaN", "IsNaN", {"x": special})
    one("IsInf-both", "IsInf", {"x": special})
    one("IsInf-negative-only", "IsInf", {"x": special}, detect_positive=0)
    one("Shrink", "Shrink", {"x": rand(3, 13)}, lambd=0.6, bias=0.25)
    one("Mod-int64-divisor-sign", "Mod", {"a": ints(3, 13, lo=-20, hi=20)}, {"b": np.array([3, -4, 5, -7, 2, 9, -1, 6, -3, 4,
                                                                                           8, -5, 11], np.int64)})
    one("Mod-fmod-float", "Mod", {"a": rand(3, 13, lo=-9, hi=9), "b": rand(1, 13, lo=0.5, hi=3) * np.float32(-1) ** np.arange(13)
                                  .astype(np.float32)}, fmod=1)
    one("Mean-broadcast-3", "Mean", {"a": rand(3, 1, 13), "b": rand(1, 5, 1), "c": rand(13)})
    one("Sum-broadcast-3", "Sum", {"a": rand(2, 13), "b": rand(1, 13), "c": rand(2, 1)})
    one("Sum-one-input", "Sum", {"a": rand(3, 5)})
    one("Max-int64-3-inputs", "Max", {"a": ints(2, 3), "b": ints(3), "c": ints(2, 1)})
    one("Add-int64", "Add", {"a": ints(3, 1, 5), "b": ints(4, 5)})
    one("Mul-int32", "Mul", {"a": ints(3, 13, dtype=np.int32), "b": ints(13, dtype=np.int32)})
    one("Sub-int64-scalar", "Sub", {"a": ints(13)}, {"b": np.int64(5)})
    one("Div-int32-truncates", "Div", {"a": ints(3, 13, lo=-50, hi=50, dtype=np.int32)},
        {"b": np.array([3, -4, 5, 7, -2, 9, 1, 6, -3, 4, 8, -5, 11], np.int32)})

    # comparisons: float with exact ties (small integers), int64 broadcasting
    tie_a, tie_b = np.round(rand(3, 1, 13, lo=-3, hi=3)), np.round(rand(4, 13, lo=-3, hi=3))
    one("Equal-float-ties", "Equal", {"a": tie_a, "b": tie_b})
    one("Equal-int64", "Equal", {"a": ints(3, 13, lo=-2, hi=2), "b": ints(13, lo=-2, hi=2)})
    one("Greater-float", "Greater", {"a": tie_a, "b": tie_b})
    one("GreaterOrEqual-float", "GreaterOrEqual", {"a": tie_a, "b": tie_b})
    one("Less-int32", "Less", {"a": ints(2, 13, lo=-3, hi=3, dtype=np.int32), "b": ints(2, 1, lo=-3, hi=3, dtype=np.int32)})
    one("LessOrEqual-float", "LessOrEqual", {"a": tie_a, "b": tie_b})
    one("Greater-int64-scalar", "Greater", {"a": ints(3, 5)}, {"b": np.int64(0)})

    # logic on bool
    p, q = t.rng.random((3, 1, 13)) < 0.5, t.rng.random((4, 13)) < 0.5
    one("And-broadcast", "And", {"a": p, "b": q})
    one("Or-broadcast", "Or", {"a": p, "b": q})
    one("Xor-broadcast", "Xor", {"a": p, "b": q})
    one("Not", "Not", {"x": q})
    one("Where-broadcast", "Where", {"c": p, "a": rand(3, 4, 13), "b": rand(13)})
    one("Where-int64", "Where", {"c": q, "a": ints(4, 13)}, {"b": np.int64(-1)})
    one("Where-scalar-cond", "Where", {"c": np.array(True), "a": rand(2, 5), "b": rand(2, 5)})

    # casts: truncation toward zero, bools, half precision, narrow integers
    frac = np.array([[-2.7, -1.5, -0.5, 0.0, 0.4, 1.5, 2.9, 100.25, -100.75]], np.float32)
    one("Cast-float-to-int32", "Cast", {"x": frac}, to=TensorProto.INT32)
    one("Cast-float-to-int64", "Cast", {"x": frac}, to=TensorProto.INT64)
    one("Cast-float-to-bool", "Cast", {"x": np.array([[0.0, -0.0, 1e-30, -2.0, np.nan]], np.float32)}, to=TensorProto.BOOL)
    one("Cast-bool-to-float", "Cast", {"x": q}, to=TensorProto.FLOAT)
    one("Cast-int64-to-float", "Cast", {"x": ints(3, 13, lo=-1000, hi=1000)}, to=TensorProto.FLOAT)
    one("Cast-float-to-float16", "Cast", {"x": rand(3, 13, lo=-100, hi=100)}, to=TensorProto.FLOAT16)
    one("Cast-uint8-to-int32", "Cast", {"x": ints(2, 13, lo=0, hi=255, dtype=np.uint8)}, to=TensorProto.INT32)
    one("Cast-int32-to-int8-wraps", "Cast", {"x": ints(2, 13, lo=-100, hi=100, dtype=np.int32)}, to=TensorProto.INT8)
    one("CastLike-float-like-int64", "CastLike", {"x": frac}, {"like": np.zeros(1, np.int64)})
    one("CastLike-int32-like-float", "CastLike", {"x": ints(3, 5, dtype=np.int32)}, {"like": np.zeros(1, np.float32)})


def _data_cases(t: _Table) -> None:
    """Data movement, indexing, shape ops, normalisations and the rest of the non-recurrent ops."""
    rand, ints, one, chain = t.rand, t.ints, t.one, t.chain
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731

    # constants and views the passes would fold: each still a node in the graph the engine runs
    chain("Constant-into-Add", [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(rand(1, 13))),
                                _node("Add", ["x", "c"])], {"x": rand(3, 13)})
    one("Identity", "Identity", {"x": rand(3, 13)})
    one("Identity-int64", "Identity", {"x": ints(2, 5)})
    one("Dropout-inference", "Dropout", {"x": rand(3, 13)})
    one("Dropout-inference-mask", "Dropout", {"x": rand(2, 7)}, outputs=["y", "mask"])
    chain("Shape-ConstantOfShape", [_node("Shape", ["x"], ["s"]),
                                    _node("ConstantOfShape", ["s"], ["c"], value=numpy_helper.from_array(np.array([2.5], np.float32))),
                                    _node("Add", ["x", "c"])], {"x": rand(2, 3, 5)})
    one("ConstantOfShape-int64", "ConstantOfShape", {}, {"s": i64(2, 0, 3)}, value=numpy_helper.from_array(i64(7)))
    one("Shape-start-end", "Shape", {"x": rand(2, 3, 5, 7)}, start=1, end=-1)
    one("Shape-negative-start", "Shape", {"x": rand(2, 3, 5)}, start=-2)
    one("Size", "Size", {"x": rand(2, 3, 13)})

    # indexing
    one("GatherElements-axis-neg1", "GatherElements", {"x": rand(3, 5)}, {"i": np.array([[0, -1], [4, 2], [-5, 3]], np.int64)},
        axis=-1)
    one("GatherElements-axis0-int64", "GatherElements", {"x": ints(3, 4)}, {"i": np.array([[2, 0, 1, -1]], np.int64)}, axis=0)
    one("GatherND-batch-dims1", "GatherND", {"x": rand(2, 3, 4)}, {"i": np.array([[[1, 2]], [[-1, 0]]], np.int64)},
        batch_dims=1)
    one("GatherND-slices", "GatherND", {"x": rand(3, 4, 5)}, {"i": np.array([[0, 1], [2, -1]], np.int64)})
    one("Gather-int64-data", "Gather", {"x": ints(5, 3)}, {"i": np.array([4, 0, -2], np.int64)}, axis=0)
    one("ScatterElements-add-neg-index", "ScatterElements", {"x": rand(3, 5), "u": rand(3, 2)},
        {"i": np.array([[0, -1], [2, 2], [4, 1]], np.int64)}, inputs=["x", "i", "u"], axis=1, reduction="add")
    one("ScatterElements-none", "ScatterElements", {"x": rand(4, 3), "u": rand(2, 3)},
        {"i": np.array([[1, 0, 3], [2, 3, 0]], np.int64)}, inputs=["x", "i", "u"], axis=0)
    one("ScatterElements-max", "ScatterElements", {"x": rand(3, 5), "u": rand(3, 2)},
        {"i": np.array([[0, 0], [2, 3], [4, 4]], np.int64)}, inputs=["x", "i", "u"], axis=1, reduction="max")
    one("ScatterND-rows", "ScatterND", {"x": rand(4, 5), "u": rand(2, 5)}, {"i": np.array([[3], [0]], np.int64)},
        inputs=["x", "i", "u"])
    one("ScatterND-mul-elements", "ScatterND", {"x": rand(3, 4), "u": rand(3)}, {"i": np.array([[0, 1], [2, 3], [0, 1]], np.int64)},
        inputs=["x", "i", "u"], reduction="mul")
    one("Scatter-opset10", "Scatter", {"x": rand(3, 5), "u": rand(2, 2)}, {"i": np.array([[1, 3], [0, 4]], np.int64)},
        inputs=["x", "i", "u"], axis=1, opset=10)
    one("Compress-axis1", "Compress", {"x": rand(3, 5, 2)}, {"c": np.array([True, False, True, True], bool)}, axis=1)
    one("Compress-flat", "Compress", {"x": rand(3, 4)}, {"c": np.array([0, 1, 1, 0, 0, 0, 1], bool)})
    one("NonZero-float", "NonZero", {"x": rand(3, 5) * (t.rng.random((3, 5)) < 0.5)})
    one("NonZero-bool-rank1", "NonZero", {"x": t.rng.random(13) < 0.3})
    one("OneHot-last-negative-indices", "OneHot", {"i": np.array([[0, 3, -1], [4, -5, 2]], np.int64)},
        {"d": np.array(5, np.int64), "v": np.array([-1.0, 2.0], np.float32)})
    one("OneHot-axis0", "OneHot", {"i": np.array([1, 0, 2, 2], np.int64)}, {"d": np.array(3, np.int64),
                                                                          "v": np.array([0, 7], np.int64)}, axis=0)
    one("Trilu-upper-k1", "Trilu", {"x": rand(2, 4, 5)}, {"k": np.array(1, np.int64)})
    one("Trilu-lower-k-neg1", "Trilu", {"x": rand(5, 3)}, {"k": np.array(-1, np.int64)}, upper=0)
    one("Trilu-upper-int64", "Trilu", {"x": ints(3, 3)})
    one("Unique-sorted-flat", "Unique", {"x": np.array([2, -1, 3, 2, 0, -1, 3, 3], np.int64)}, outputs=["y", "i", "inv", "n"])
    one("Unique-axis0-float", "Unique", {"x": np.array([[1, 2], [3, 4], [1, 2], [0, 5]], np.float32)},
        outputs=["y", "i", "inv", "n"], axis=0)
    one("Unique-unsorted", "Unique", {"x": np.array([5, 1, 5, 2, 1, 9], np.int64)}, outputs=["y", "i", "inv", "n"], sorted=0)
    one("Tile-2x1x3", "Tile", {"x": rand(2, 3, 5)}, {"r": i64(2, 1, 3)})
    one("Tile-int64", "Tile", {"x": ints(3, 1)}, {"r": i64(1, 4)})
    one("DepthToSpace-DCR", "DepthToSpace", {"x": rand(2, 8, 3, 5)}, blocksize=2)
    one("DepthToSpace-CRD", "DepthToSpace", {"x": rand(1, 12, 2, 3)}, blocksize=2, mode="CRD")
    one("SpaceToDepth", "SpaceToDepth", {"x": rand(2, 3, 6, 4)}, blocksize=2)
    one("Range-float", "Range", {}, {"a": np.array(-1.5, np.float32), "b": np.array(4.0, np.float32),
                                     "d": np.array(0.7, np.float32)})
    one("Range-int64-negative-step", "Range", {}, {"a": np.array(10, np.int64), "b": np.array(-3, np.int64),
                                                  "d": np.array(-4, np.int64)})
    chain("Range-from-shape", [_node("Shape", ["x"], ["s"], start=1, end=2), _node("Squeeze", ["s"], ["n"]),
                               _node("Cast", ["n"], ["f"], to=TensorProto.FLOAT),
                               _node("Range", ["zero", "f", "one"], ["r"]), _node("Mul", ["x", "r"])],
          {"x": rand(2, 7)}, {"zero": np.array(0.0, np.float32), "one": np.array(1.0, np.float32)})
    one("Pad-constant-negative", "Pad", {"x": rand(2, 3, 5)}, {"p": i64(0, 1, -1, 1, 2, 2), "v": np.array(1.5, np.float32)})
    one("Pad-reflect", "Pad", {"x": rand(1, 2, 4, 5)}, {"p": i64(0, 0, 2, 1, 0, 0, 3, 4)}, mode="reflect")
    one("Pad-edge-int64", "Pad", {"x": ints(3, 4)}, {"p": i64(1, 0, 2, 3)}, mode="edge")
    one("Pad-wrap-axes", "Pad", {"x": rand(2, 3, 5)}, {"p": i64(2, 0, 1, 4), "v": np.array(0, np.float32), "a": i64(-1, 1)},
        mode="wrap", opset=19)
    one("CumSum-last", "CumSum", {"x": rand(3, 13)}, {"a": np.array(-1, np.int64)})
    one("CumSum-exclusive-reverse", "CumSum", {"x": rand(2, 5, 3)}, {"a": np.array(1, np.int32)}, exclusive=1, reverse=1)
    one("CumSum-int64", "CumSum", {"x": ints(4, 5)}, {"a": np.array(0, np.int64)})
    one("TopK-largest-last", "TopK", {"x": rand(3, 13)}, {"k": i64(4)}, outputs=["y", "i"])
    one("TopK-smallest-axis0", "TopK", {"x": rand(7, 5)}, {"k": i64(3)}, outputs=["y", "i"], axis=0, largest=0)
    one("TopK-int64-all", "TopK", {"x": np.array([[5, 1, 9, -3, 7]], np.int64)}, {"k": i64(5)}, outputs=["y", "i"])
    one("ArgMax-last-drop", "ArgMax", {"x": rand(3, 13)}, axis=-1, keepdims=0)
    ties = np.round(rand(3, 5, 4, lo=-1, hi=1))
    one("ArgMax-ties-first", "ArgMax", {"x": ties}, axis=1)
    one("ArgMin-ties-last", "ArgMin", {"x": ties}, axis=1, select_last_index=1)
    one("ArgMin-int64-axis0", "ArgMin", {"x": ints(5, 3)}, axis=0, keepdims=0)
    one("Hardmax-last", "Hardmax", {"x": rand(3, 13)})
    one("Hardmax-axis1-ties", "Hardmax", {"x": ties}, axis=1)
    one("Einsum-batched-matmul", "Einsum", {"a": rand(2, 3, 5), "b": rand(2, 5, 4)}, equation="bij,bjk->bik")
    one("Einsum-transpose-sum", "Einsum", {"a": rand(3, 5, 4)}, equation="ijk->kj")
    one("Einsum-dot", "Einsum", {"a": rand(13), "b": rand(13)}, equation="i,i")

    # normalisations and local responses
    img = rand(2, 3, 5, 7)
    one("BatchNormalization", "BatchNormalization", {"x": img}, {"s": rand(3), "b": rand(3), "m": rand(3),
                                                                  "v": rand(3, lo=0.1, hi=2)}, epsilon=1e-3)
    one("BatchNormalization-rank2", "BatchNormalization", {"x": rand(4, 13)}, {"s": rand(13), "b": rand(13), "m": rand(13),
                                                                                "v": rand(13, lo=0.1, hi=2)})
    one("InstanceNormalization", "InstanceNormalization", {"x": img}, {"s": rand(3), "b": rand(3)}, epsilon=1e-4)
    one("GroupNormalization-opset21", "GroupNormalization", {"x": rand(2, 4, 3, 5)}, {"s": rand(4), "b": rand(4)},
        num_groups=2, opset=21)
    one("GroupNormalization-opset18", "GroupNormalization", {"x": rand(2, 6, 7)}, {"s": rand(3), "b": rand(3)}, num_groups=3)
    one("MeanVarianceNormalization", "MeanVarianceNormalization", {"x": img})
    one("MeanVarianceNormalization-axes", "MeanVarianceNormalization", {"x": img}, axes=[1, 3])
    one("LRN", "LRN", {"x": img}, size=3, alpha=2e-3, beta=0.8, bias=1.5)
    one("LRN-even-size", "LRN", {"x": rand(1, 6, 3, 3)}, size=4, alpha=0.01, beta=0.75, oracle=_lrn_even_oracle)
    one("LpPool-p2-pads", "LpPool", {"x": img}, kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1])
    one("LpPool-p1", "LpPool", {"x": rand(1, 2, 9)}, kernel_shape=[3], p=1)
    one("LayerNormalization-stats-outputs", "LayerNormalization", {"x": rand(3, 13)}, {"s": rand(13)},
        outputs=["y", "mean", "inv"])
    chain("Gelu-pattern-opset18", [_node("Div", ["x", "r2"], ["d"]), _node("Erf", ["d"], ["e"]),
                                   _node("Add", ["e", "one"], ["a"]), _node("Mul", ["x", "a"], ["m"]),
                                   _node("Mul", ["m", "half"])],
          {"x": rand(3, 13, lo=-4, hi=4)}, {"r2": np.array(np.sqrt(2.0), np.float32), "one": np.array(1.0, np.float32),
                                            "half": np.array(0.5, np.float32)}, fused="ai.tether:Gelu")

    # NonMaxSuppression: corner and center boxes, per-class selection
    boxes = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9], [0, 10, 1, 11], [0, 10.1, 1, 11.1],
                       [0, 100, 1, 101]]], np.float32)
    scores = np.array([[[0.9, 0.75, 0.6, 0.95, 0.5, 0.3], [0.1, 0.2, 0.8, 0.05, 0.9, 0.4]]], np.float32)
    nms = {"m": i64(3), "iou": np.array([0.5], np.float32), "st": np.array([0.15], np.float32)}
    one("NonMaxSuppression-corners", "NonMaxSuppression", {"b": boxes, "s": scores}, nms)
    centers = np.concatenate([boxes[..., :2] + 0.5, np.ones_like(boxes[..., :2])], -1)
    one("NonMaxSuppression-centers", "NonMaxSuppression", {"b": centers, "s": scores}, nms, center_point_box=1)

    # control flow: the subgraphs read the outer scope
    body_then = helper.make_graph([_node("Add", ["x", "one"], ["t"])], "then", [], [onnx.ValueInfoProto(name="t")])
    body_else = helper.make_graph([_node("Mul", ["x", "x"], ["e"])], "else", [], [onnx.ValueInfoProto(name="e")])
    for flag in (True, False):
        chain(f"If-{str(flag).lower()}", [helper.make_node("If", ["c"], ["y"], then_branch=body_then, else_branch=body_else)],
              {"c": np.array(flag), "x": rand(3, 5)}, {"one": np.array(1.0, np.float32)})
    loop_body = helper.make_graph(
        [_node("Add", ["v_in", "x"], ["v_out"]), _node("Identity", ["cond_in"], ["cond_out"]),
         _node("Mul", ["v_out", "v_out"], ["sq"])], "body",
        [helper.make_tensor_value_info("iter", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("v_out", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("sq", TensorProto.FLOAT, None)])
    chain("Loop-carried-and-scanned", [helper.make_node("Loop", ["n", "go", "v0"], ["y", "ys"], body=loop_body)],
          {"x": rand(2, 3), "v0": rand(2, 3)}, {"n": np.array(4, np.int64), "go": np.array(True)}, outputs=["y", "ys"])
    scan_body = helper.make_graph(
        [_node("Add", ["acc_in", "row"], ["acc_out"]), _node("Identity", ["acc_out"], ["out"])], "scan",
        [helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [5]), helper.make_tensor_value_info("row", TensorProto.FLOAT, [5])],
        [helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [5]), helper.make_tensor_value_info("out", TensorProto.FLOAT, [5])])
    chain("Scan-running-sum", [helper.make_node("Scan", ["a0", "x"], ["y", "ys"], body=scan_body, num_scan_inputs=1)],
          {"a0": rand(5), "x": rand(7, 5)}, outputs=["y", "ys"])


def _lrn_even_oracle(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """ONNX LRN with size 4 (onnxruntime takes odd sizes only): the window of channel c runs
    from c - floor((size - 1) / 2) to c + ceil((size - 1) / 2)."""
    x = feeds["x"].astype(np.float64)
    size, alpha, beta, bias = 4, 0.01, 0.75, 1.0
    sq = np.zeros_like(x)
    for c in range(x.shape[1]):
        lo, hi = max(0, c - (size - 1) // 2), min(x.shape[1] - 1, c + -(-(size - 1) // 2))
        sq[:, c] = (x[:, lo:hi + 1] ** 2).sum(axis=1)
    return [(x / (bias + alpha / size * sq) ** beta).astype(np.float32)]


def _attention_oracle(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray, scale: float) -> np.ndarray:
    """Attention over 4-D grouped heads in float64: softmax((q k^T) scale + mask) v."""
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k.astype(np.float64), group, axis=1), np.repeat(v.astype(np.float64), group, axis=1)
    s = q.astype(np.float64) @ k.transpose(0, 1, 3, 2) * scale + mask
    e = np.exp(s - s.max(-1, keepdims=True))
    return ((e / e.sum(-1, keepdims=True)) @ v).astype(np.float32)


def _qlinear_add_oracle(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """com.microsoft QLinearAdd as DequantizeLinear -> Add -> QuantizeLinear (float32, ties to
    even): onnxruntime's own kernel rounds otherwise and lands one step away on some elements."""
    a = (feeds["a"].astype(np.float32) - np.float32(7)) * np.float32(0.037)
    b = (feeds["b"].astype(np.float32) - np.float32(200)) * np.float32(0.021)
    return [np.clip(np.rint((a + b) / np.float32(0.05)) + 1, 0, 255).astype(np.uint8)]


def _sequence_cases(t: _Table) -> None:
    """RNN, GRU and LSTM: both directions, biases, initial states, sequence lengths."""
    rand, one = t.rand, t.one
    seq, batch, inp, hid = 5, 3, 4, 6
    x = rand(seq, batch, inp)
    one("RNN-reverse-tanh", "RNN", {"x": x}, {"w": rand(1, hid, inp), "r": rand(1, hid, hid, lo=-0.5, hi=0.5),
                                             "b": rand(1, 2 * hid)}, hidden_size=hid, direction="reverse", outputs=["y", "h"])
    one("RNN-bidirectional-relu-initial", "RNN", {"x": x, "h0": rand(2, batch, hid)},
        {"w": rand(2, hid, inp), "r": rand(2, hid, hid, lo=-0.3, hi=0.3), "b": rand(2, 2 * hid)},
        inputs=["x", "w", "r", "b", "", "h0"], hidden_size=hid, direction="bidirectional", activations=["Relu", "Relu"],
        outputs=["y", "h"])
    one("GRU-forward", "GRU", {"x": x}, {"w": rand(1, 3 * hid, inp), "r": rand(1, 3 * hid, hid), "b": rand(1, 6 * hid)},
        hidden_size=hid, outputs=["y", "h"])
    one("GRU-bidirectional-linear-before-reset-lens", "GRU", {"x": x, "h0": rand(2, batch, hid)},
        {"w": rand(2, 3 * hid, inp), "r": rand(2, 3 * hid, hid), "b": rand(2, 6 * hid), "lens": np.array([5, 2, 4], np.int32)},
        inputs=["x", "w", "r", "b", "lens", "h0"], hidden_size=hid, direction="bidirectional", linear_before_reset=1,
        outputs=["y", "h"])
    one("LSTM-forward-states", "LSTM", {"x": x, "h0": rand(1, batch, hid), "c0": rand(1, batch, hid)},
        {"w": rand(1, 4 * hid, inp), "r": rand(1, 4 * hid, hid), "b": rand(1, 8 * hid)},
        inputs=["x", "w", "r", "b", "", "h0", "c0"], hidden_size=hid, outputs=["y", "h", "c"])
    # layout = 1 (batch first): onnxruntime runs the layout 0 node between Transposes
    feeds = {"x": rand(batch, seq, inp)}
    consts = {"w": rand(2, 4 * hid, inp), "r": rand(2, 4 * hid, hid), "b": rand(2, 8 * hid), "p": rand(2, 3 * hid)}
    lstm = {"hidden_size": hid, "direction": "bidirectional"}
    model = _graph([_node("LSTM", ["x", "w", "r", "b", "", "", "", "p"], ["y", "h", "c"], layout=1, **lstm)], feeds, consts,
                   ["y", "h", "c"])
    ort_model = _graph([_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
                        _node("LSTM", ["xt", "w", "r", "b", "", "", "", "p"], ["yt", "ht", "ct"], **lstm),
                        _node("Transpose", ["yt"], ["y"], perm=[2, 0, 1, 3]), _node("Transpose", ["ht"], ["h"], perm=[1, 0, 2]),
                        _node("Transpose", ["ct"], ["c"], perm=[1, 0, 2])], feeds, consts, ["y", "h", "c"])
    t.cases.append(OpCase("LSTM-bidirectional-peepholes-batch-first", model, feeds, ort_model=ort_model))


def _quantized_cases(t: _Table) -> None:
    """Quantize, dequantize and the integer products, with per-tensor and per-axis parameters;
    the ai.tether forms through the QDQ chains the passes fuse."""
    rand, ints, one, chain = t.rand, t.ints, t.one, t.chain
    u8 = lambda *v: np.array(v, np.uint8)  # noqa: E731
    i8 = lambda *v: np.array(v, np.int8)  # noqa: E731
    f32 = lambda *v: np.array(v, np.float32)  # noqa: E731
    one("QuantizeLinear-uint8", "QuantizeLinear", {"x": rand(3, 13, lo=-8, hi=8)}, {"s": f32(0.05), "z": u8(128)})
    one("QuantizeLinear-int8-per-axis", "QuantizeLinear", {"x": rand(2, 3, 5, lo=-3, hi=3)},
        {"s": f32(0.01, 0.02, 0.05), "z": i8(0, -5, 3)}, axis=1)
    one("QuantizeLinear-no-zero-point", "QuantizeLinear", {"x": rand(13, lo=-1, hi=3)}, {"s": f32(0.02)})
    one("DequantizeLinear-int8", "DequantizeLinear", {"x": ints(3, 13, lo=-128, hi=127, dtype=np.int8)},
        {"s": f32(0.07), "z": i8(-3)})
    one("DequantizeLinear-uint8-per-axis", "DequantizeLinear", {"x": ints(2, 3, 5, lo=0, hi=255, dtype=np.uint8)},
        {"s": f32(0.1, 0.2, 0.3), "z": u8(0, 128, 255)}, axis=1)
    one("DequantizeLinear-int32", "DequantizeLinear", {"x": ints(13, lo=-5000, hi=5000, dtype=np.int32)}, {"s": f32(0.001)})
    one("DynamicQuantizeLinear", "DynamicQuantizeLinear", {"x": rand(3, 13, lo=-2, hi=5)}, outputs=["y", "s", "z"])
    # uint8 x int8 operands below 128 on one side: no product pair can saturate int16 on any CPU
    a_q, w_q = ints(3, 13, lo=0, hi=127, dtype=np.uint8), ints(13, 5, lo=-128, hi=127, dtype=np.int8)
    one("MatMulInteger-zero-points", "MatMulInteger", {"a": a_q}, {"b": w_q, "az": u8(131), "bz": i8(-2)})
    one("MatMulInteger-batched-no-zp", "MatMulInteger", {"a": ints(2, 3, 13, lo=0, hi=255, dtype=np.uint8)},
        {"b": ints(13, 7, lo=0, hi=255, dtype=np.uint8)})
    # B computed at run time, with batch dims; A's zero point one per row (onnxruntime takes one
    # value only: numpy's sums are the oracle there)
    one("MatMulInteger-b-at-run-time-batched", "MatMulInteger",
        {"a": ints(2, 3, 13, lo=0, hi=127, dtype=np.uint8), "b": ints(2, 13, 5, lo=-128, hi=127, dtype=np.int8)},
        {"az": u8(3), "bz": i8(-2)})
    az_rows = u8(131, 0, 255)
    one("MatMulInteger-per-row-a-zero-point", "MatMulInteger", {"a": ints(2, 3, 13, lo=0, hi=255, dtype=np.uint8)},
        {"b": w_q, "az": az_rows}, oracle=lambda f: [np.matmul(
            f["a"].astype(np.int64) - az_rows.astype(np.int64).reshape(-1, 1), w_q.astype(np.int64)).astype(np.int32)])
    one("ConvInteger-pads", "ConvInteger", {"x": ints(1, 3, 7, 7, lo=0, hi=255, dtype=np.uint8)},
        {"w": ints(4, 3, 3, 3, lo=0, hi=255, dtype=np.uint8), "xz": u8(120)}, pads=[1, 1, 1, 1])
    # no zero points: the padding is x's zero, 0 (not 128, the middle of uint8)
    one("ConvInteger-pads-no-zp", "ConvInteger", {"x": ints(1, 3, 7, 7, lo=0, hi=255, dtype=np.uint8)},
        {"w": ints(4, 3, 3, 3, lo=0, hi=255, dtype=np.uint8)}, pads=[1, 1, 1, 1])
    qconv = {"xs": f32(0.05), "xz": u8(128), "w": ints(4, 3, 3, 3, lo=-127, hi=127, dtype=np.int8),
             "ws": f32(0.01, 0.02, 0.005, 0.03), "wz": np.zeros(4, np.int8), "ys": f32(0.4), "yz": u8(100),
             "b": ints(4, lo=-300, hi=300, dtype=np.int32)}
    x_q = ints(1, 3, 9, 9, lo=0, hi=127, dtype=np.uint8)
    one("QLinearConv-per-channel", "QLinearConv", {"x": x_q}, qconv, pads=[1, 1, 1, 1], strides=[2, 1])
    qmm = {"as": f32(0.03), "az": u8(120), "b": w_q, "bs": f32(0.02), "bz": i8(0), "ys": f32(0.5), "yz": u8(128)}
    one("QLinearMatMul-uint8-int8", "QLinearMatMul", {"a": a_q}, qmm)
    one("QLinearMatMul-b-at-run-time", "QLinearMatMul", {"a": ints(3, 2, 13, lo=0, hi=127, dtype=np.uint8), "b": w_q},
        {k: v for k, v in qmm.items() if k != "b"}, inputs=["a", "as", "az", "b", "bs", "bz", "ys", "yz"])
    # onnxruntime's QOperator contrib ops, which compile writes as DequantizeLinear -> op ->
    # QuantizeLinear (their definition), each case's output dequantized: onnxruntime computes
    # Sigmoid and Softmax through approximate tables and rounds its own way, so the two are one
    # step apart at most, the outputs spanning the 8-bit range (one step 1/127 of the largest).
    step = 1.01 / 127
    s0 = lambda v: np.array(v, np.float32)  # noqa: E731  (onnxruntime takes scalar parameters only)
    z0 = lambda v, t: np.array(v, t)  # noqa: E731

    def qop(case_id: str, op: str, feeds: dict[str, np.ndarray], consts: dict[str, np.ndarray], inputs: list[str],
            y: tuple[str, str], **attrs: object) -> None:
        node = _node(op, inputs, ["q"], **attrs)
        node.domain = "com.microsoft"
        t.chain(case_id, [node, _node("DequantizeLinear", ["q", *y])], feeds, consts, rtol=step)

    unary = ["x", "xs", "xz", "ys", "yz"]
    x_u8, x_i8 = ints(2, 3, 7, lo=0, hi=255, dtype=np.uint8), ints(2, 3, 7, lo=-128, hi=127, dtype=np.int8)
    qop("QLinearSigmoid-uint8", "QLinearSigmoid", {"x": x_u8},
        {"xs": s0(0.05), "xz": z0(128, np.uint8), "ys": s0(1 / 256), "yz": z0(0, np.uint8)}, unary, ("ys", "yz"))
    qop("QLinearSigmoid-int8", "QLinearSigmoid", {"x": x_i8},
        {"xs": s0(0.06), "xz": z0(-3, np.int8), "ys": s0(1 / 255), "yz": z0(-128, np.int8)}, unary, ("ys", "yz"))
    qop("QLinearLeakyRelu-int8", "QLinearLeakyRelu", {"x": x_i8},
        {"xs": s0(0.1), "xz": z0(5, np.int8), "ys": s0(0.08), "yz": z0(-20, np.int8)}, unary, ("ys", "yz"), alpha=0.1)
    qop("QLinearMul-uint8-broadcast", "QLinearMul",
        {"a": ints(2, 3, 5, lo=0, hi=255, dtype=np.uint8), "b": ints(3, 1, lo=0, hi=255, dtype=np.uint8)},
        {"as": s0(0.02), "az": z0(100, np.uint8), "bs": s0(0.03), "bz": z0(128, np.uint8), "cs": s0(0.01), "cz": z0(120, np.uint8)},
        ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ("cs", "cz"))
    qop("QLinearConcat-uint8", "QLinearConcat",
        {"a": ints(2, 2, 3, lo=0, hi=255, dtype=np.uint8), "b": ints(2, 4, 3, lo=0, hi=255, dtype=np.uint8),
         "c": ints(2, 1, 3, lo=0, hi=255, dtype=np.uint8)},
        {"ys": s0(0.05), "yz": z0(128, np.uint8), "as": s0(0.1), "az": z0(0, np.uint8), "bs": s0(0.02), "bz": z0(200, np.uint8),
         "cs": s0(0.05), "cz": z0(128, np.uint8)},
        ["ys", "yz", "a", "as", "az", "b", "bs", "bz", "c", "cs", "cz"], ("ys", "yz"), axis=1)
    pool_q = {"xs": s0(0.1), "xz": z0(10, np.uint8), "ys": s0(0.06), "yz": z0(5, np.uint8)}
    qop("QLinearAveragePool-pads-ceil", "QLinearAveragePool", {"x": ints(1, 3, 7, 7, lo=0, hi=255, dtype=np.uint8)}, pool_q,
        unary, ("ys", "yz"), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
    qop("QLinearAveragePool-channels-last-count-pad", "QLinearAveragePool",
        {"x": ints(1, 6, 6, 3, lo=0, hi=255, dtype=np.uint8)}, pool_q, unary, ("ys", "yz"), kernel_shape=[2, 2],
        pads=[1, 1, 0, 0], count_include_pad=1, channels_last=1)
    soft_q = {"xs": s0(0.08), "xz": z0(128, np.uint8), "ys": s0(1 / 256), "yz": z0(0, np.uint8)}
    # (its `opset` attribute: the opset of the Softmax it replaced; before 13 the dims from axis
    # on are normalised together)
    qop("QLinearSoftmax-last-axis", "QLinearSoftmax", {"x": ints(2, 3, 10, lo=0, hi=255, dtype=np.uint8)}, soft_q,
        unary, ("ys", "yz"), axis=-1, opset=13)
    qop("QLinearSoftmax-opset-12-axis-1", "QLinearSoftmax", {"x": ints(2, 3, 4, lo=0, hi=255, dtype=np.uint8)}, soft_q,
        unary, ("ys", "yz"), axis=1, opset=12)
    # A unary op between per-tensor DequantizeLinear and QuantizeLinear: one table lookup
    # (ai.tether QLinearLookup), the output dequantized (onnxruntime's Sigmoid and HardSwish
    # round apart from tether's by one step at most)
    for act, x_t, y_t, ys in (("Sigmoid", np.uint8, np.uint8, 1 / 256), ("HardSwish", np.int8, np.int8, 0.03)):
        lo, hi = (0, 255) if x_t == np.uint8 else (-128, 127)
        t.chain(f"QLinearLookup-from-QDQ-{act.lower()}",
                [_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]), _node(act, ["xf"], ["f"]),
                 _node("QuantizeLinear", ["f", "ys", "yz"], ["q"]), _node("DequantizeLinear", ["q", "ys", "yz"])],
                {"x": ints(3, 5, 7, lo=lo, hi=hi, dtype=x_t)},
                {"xs": s0(0.05), "xz": z0(lo + 100, x_t), "ys": s0(ys), "yz": z0(0 if y_t == np.uint8 else -100, y_t)},
                fused="ai.tether:QLinearLookup", rtol=step)
    # A Mul of two dequantized tensors that broadcast (a gate), quantized: ai.tether QLinearMul
    t.chain("QLinearMul-from-QDQ-broadcast",
            [_node("DequantizeLinear", ["a", "as", "az"], ["af"]), _node("DequantizeLinear", ["b", "bs", "bz"], ["bf"]),
             _node("Mul", ["af", "bf"], ["m"]), _node("QuantizeLinear", ["m", "ys", "yz"], ["q"]),
             _node("DequantizeLinear", ["q", "ys", "yz"])],
            {"a": ints(2, 3, 4, 5, lo=0, hi=255, dtype=np.uint8), "b": ints(2, 3, 1, 1, lo=0, hi=255, dtype=np.uint8)},
            {"as": s0(0.03), "az": z0(128, np.uint8), "bs": s0(0.02), "bz": z0(100, np.uint8), "ys": s0(0.02),
             "yz": z0(128, np.uint8)}, fused="ai.tether:QLinearMul", rtol=step)
    # What the passes fuse: DequantizeLinear -> float op -> QuantizeLinear.
    # (with Relu: the ai.tether form, whose activation narrows the output clamp)
    chain("QLinearConv-from-QDQ-relu", [_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
                                   _node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
                                   _node("Conv", ["xf", "wf"], ["c"], pads=[1, 1, 1, 1]), _node("Relu", ["c"], ["r"]),
                                   _node("QuantizeLinear", ["r", "ys", "yz"])],
          {"x": x_q}, {k: qconv[k] for k in ("xs", "xz", "w", "ws", "wz", "ys", "yz")}, fused="ai.tether:QLinearConv")
    chain("QLinearMatMul-from-QDQ-relu", [_node("DequantizeLinear", ["a", "as", "az"], ["af"]),
                                     _node("DequantizeLinear", ["b", "bs", "bz"], ["bf"]),
                                     _node("MatMul", ["af", "bf"], ["m"]), _node("Relu", ["m"], ["r"]),
                                     _node("QuantizeLinear", ["r", "ys", "yz"])],
          {"a": a_q}, qmm, fused="ai.tether:QLinearMatMul")
    qa, qb = ints(2, 5, 7, lo=0, hi=255, dtype=np.uint8), ints(2, 5, 7, lo=0, hi=255, dtype=np.uint8)
    qadd = {"sa": f32(0.037), "za": u8(7), "sb": f32(0.021), "zb": u8(200), "sy": f32(0.05), "zy": u8(1)}
    chain("QLinearAdd-from-QDQ", [_node("DequantizeLinear", ["a", "sa", "za"], ["af"]),
                                  _node("DequantizeLinear", ["b", "sb", "zb"], ["bf"]),
                                  _node("Add", ["af", "bf"], ["s"]), _node("QuantizeLinear", ["s", "sy", "zy"])],
          {"a": qa, "b": qb}, qadd, fused="ai.tether:QLinearAdd")
    chain("MatMulIntegerToFloat-from-dynamic-quantization",
          [_node("MatMulInteger", ["a", "w", "az", "wz"], ["i"]), _node("Cast", ["i"], ["f"], to=TensorProto.FLOAT),
           _node("Mul", ["f", "s"], ["m"]), _node("Add", ["m", "bias"])],
          {"a": a_q}, {"w": w_q, "az": u8(131), "wz": i8(0), "s": f32(0.0123), "bias": rand(5)},
          fused="ai.tether:MatMulIntegerToFloat")
    # the same after a grouped ConvInteger, the scale one per output channel, then Relu
    chain("ConvIntegerToFloat-from-dynamic-quantization-grouped-relu",
          [_node("ConvInteger", ["x", "w", "xz", "wz"], ["i"], group=2, pads=[1, 1, 1, 1], strides=[1, 2]),
           _node("Cast", ["i"], ["f"], to=TensorProto.FLOAT), _node("Mul", ["f", "s"], ["m"]),
           _node("Add", ["m", "bias"], ["a"]), _node("Relu", ["a"])],
          {"x": ints(2, 4, 7, 6, lo=0, hi=255, dtype=np.uint8)},
          {"w": ints(6, 2, 3, 3, lo=0, hi=255, dtype=np.uint8), "xz": u8(131), "wz": u8(120),
           "s": rand(1, 6, 1, 1, lo=1e-3, hi=1e-2), "bias": rand(6, 1, 1)},
          fused="ai.tether:ConvIntegerToFloat")

    # onnxruntime's contrib forms (QOperator format)
    one("com.microsoft-QLinearAdd-broadcast", "QLinearAdd", {"a": qa, "b": qb[:1, :, :1]},
        {k: v.reshape(()) for k, v in qadd.items()},
        inputs=["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], domain="com.microsoft", oracle=_qlinear_add_oracle)
    one("com.microsoft-QLinearGlobalAveragePool", "QLinearGlobalAveragePool", {"x": ints(2, 3, 5, 7, lo=0, hi=255, dtype=np.uint8)},
        {"xs": np.float32(0.1), "xz": np.uint8(128), "ys": np.float32(0.05), "yz": np.uint8(120)}, domain="com.microsoft",
        channels_last=0)
    one("com.microsoft-QGemm-transB-bias", "QGemm", {"a": a_q},
        {"as": f32(0.03), "az": u8(120), "b": ints(5, 13, lo=-127, hi=127, dtype=np.int8), "bs": f32(0.02), "bz": i8(0),
         "c": ints(5, lo=-500, hi=500, dtype=np.int32), "ys": f32(0.6), "yz": u8(128)},
        domain="com.microsoft", transB=1)
    one("com.microsoft-QGemm-float-output", "QGemm", {"a": a_q},
        {"as": f32(0.03), "az": u8(120), "b": w_q, "bs": f32(0.02), "bz": i8(0)}, domain="com.microsoft")
    k, n, block = 40, 5, 16
    blocks = -(-k // block)
    one("com.microsoft-MatMulNBits-4bit", "MatMulNBits", {"a": rand(3, k)},
        {"b": ints(n, blocks, block // 2, lo=0, hi=255, dtype=np.uint8), "s": rand(n * blocks, lo=0.01, hi=0.1),
         "z": ints(n, (blocks + 1) // 2, lo=0, hi=255, dtype=np.uint8)},
        domain="com.microsoft", K=k, N=n, bits=4, block_size=block, rtol=2e-5)


def _transformer_cases(t: _Table) -> None:
    """Attention, rotary embeddings and the normalisations of transformer exports."""
    rand, one = t.rand, t.one
    one("SimplifiedLayerNormalization-last", "SimplifiedLayerNormalization", {"x": rand(2, 3, 13)}, {"s": rand(13)},
        axis=-1, epsilon=1e-5)
    one("com.microsoft-SkipLayerNormalization-bias", "SkipLayerNormalization", {"x": rand(2, 3, 13), "k": rand(2, 3, 13)},
        {"g": rand(13), "b": rand(13), "bias": rand(13)}, domain="com.microsoft", epsilon=1e-5)
    one("com.microsoft-SkipSimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization",
        {"x": rand(2, 3, 13), "k": rand(2, 3, 13)}, {"g": rand(13)}, domain="com.microsoft", epsilon=1e-5)
    angles = t.rng.uniform(0, 6, (12, 8))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    pos = t.rng.integers(0, 12, (2, 5)).astype(np.int64)
    one("com.microsoft-RotaryEmbedding-interleaved", "RotaryEmbedding", {"x": rand(2, 5, 3 * 16)},
        {"p": pos, "c": cos, "s": sin}, domain="com.microsoft", interleaved=1)
    one("RotaryEmbedding-opset23-4d", "RotaryEmbedding", {"x": rand(2, 3, 5, 16)}, {"c": cos, "s": sin, "p": pos}, opset=23)
    one("RotaryEmbedding-opset23-3d-partial", "RotaryEmbedding", {"x": rand(2, 5, 2 * 20)}, {"c": cos[:, :4], "s": sin[:, :4],
                                                                                           "p": pos},
        opset=23, num_heads=2, rotary_embedding_dim=8)
    one("Attention-opset23-gqa-mask", "Attention", {"q": rand(2, 4, 5, 8), "k": rand(2, 2, 7, 8), "v": rand(2, 2, 7, 8)},
        {"m": rand(5, 7)}, opset=23)
    t.chain("Attention-pattern-grouped", [
        _node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), _node("MatMul", ["q", "kt"], ["s"]),
        _node("Mul", ["s", "c"], ["sc"]), _node("Add", ["sc", "m"], ["sm"]), _node("Softmax", ["sm"], ["p"], axis=-1),
        _node("MatMul", ["p", "v"])],
        {"q": rand(2, 4, 5, 8), "k": rand(2, 4, 7, 8), "v": rand(2, 4, 7, 8)},
        {"c": np.array(8 ** -0.5, np.float32), "m": rand(2, 1, 5, 7)}, fused="ai.tether:Attention", backends=("cpu",),
        why_only="the attention fusion is the CPU engine's: other backends run the chain as written")
    one("Attention-opset23-causal", "Attention", {"q": rand(1, 2, 6, 8), "k": rand(1, 2, 6, 8), "v": rand(1, 2, 6, 8)},
        opset=23, is_causal=1)
    # ai.tether's form, as compile fuses it: grouped heads, a float mask with masked keys (no row
    # fully masked), the scale an attribute
    att_mask = rand(1, 1, 5, 7)
    att_mask[..., 1::3] = -np.inf
    one("ai.tether-Attention-grouped-mask", "Attention", {"q": rand(2, 4, 5, 8), "k": rand(2, 2, 7, 8),
                                                          "v": rand(2, 2, 7, 8)},
        {"m": att_mask}, domain="ai.tether", scale=0.3, nan_when_fully_masked=1,
        oracle=lambda f, m=att_mask: [_attention_oracle(f["q"], f["k"], f["v"], m, 0.3)])
    b, s, heads, kv_heads, h = 2, 3, 4, 2, 8
    one("com.microsoft-GroupQueryAttention", "GroupQueryAttention",
        {"q": rand(b, s, heads * h), "k": rand(b, s, kv_heads * h), "v": rand(b, s, kv_heads * h),
         "lens": np.full(b, s - 1, np.int32), "total": np.array(s, np.int32)},
        inputs=["q", "k", "v", "", "", "lens", "total"], outputs=["y", "pk", "pv"], domain="com.microsoft",
        num_heads=heads, kv_num_heads=kv_heads)


# ---- the per-ISA cases: Conv, Gemm, MatMul and pooling over block edges ------------------------------
# (in tether: their ai.tether forms where `ort_model` holds the ONNX one; compared within 2e-5)

ISA_RTOL = 2e-5

CONV_CASES = [
    # (batch, cin, cout, spatial, kernel, strides, pads, dilations, group)
    (1, 3, 5, (13, 11), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    (2, 4, 6, (13, 13), (3, 3), (2, 2), (0, 1, 1, 0), (1, 1), 2),
    (1, 8, 8, (9, 7), (3, 3), (1, 2), (1, 1, 1, 1), (2, 1), 8),
    (1, 6, 12, (127, 3), (5, 1), (3, 1), (2, 0, 2, 0), (1, 1), 3),
    (3, 16, 33, (7, 7), (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    (1, 3, 13, (29, 31), (7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1),
    (1, 2, 3, (17,), (4,), (2,), (1, 2), (1,), 1),
    (1, 2, 4, (5, 6, 7), (3, 3, 3), (1, 2, 1), (1, 1, 1, 1, 1, 1), (1, 1, 1), 1),
    (1, 13, 13, (1, 1), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 13),
    # depthwise, channels last (output width < 32): channel counts off the 16- and 64-blocks
    (2, 70, 70, (10, 9), (3, 3), (2, 1), (0, 1, 2, 1), (1, 1), 70),
    (1, 130, 130, (6, 6), (5, 5), (1, 1), (2, 2, 2, 2), (2, 2), 130),
    (1, 32, 32, (8, 8), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 32),  # whole 16 x 16 transpose blocks only
    # depthwise, row by row (output width >= 32)
    (1, 20, 20, (5, 40), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 20),
    # depthwise, row by row with column strides 2 and 3 (the padded rows split into phases)
    (2, 6, 6, (9, 75), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 6),
    (1, 5, 5, (6, 100), (3, 5), (1, 3), (0, 2, 1, 1), (1, 2), 5),
    # depthwise rows past 64 outputs (blocks of 64, then a ragged 2- or 1-vector end)
    (2, 3, 3, (6, 150), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 3),
    (1, 4, 4, (8, 151), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 4),
    # batches sharing the weights in one product: several panels per image, two K blocks
    (3, 40, 70, (20, 30), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    (5, 300, 24, (7, 7), (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    # direct convolution on phase planes: strides 2 and 3 with dilation and uneven pads; more
    # output channels than one block of rows
    (2, 5, 30, (17, 19), (3, 3), (2, 3), (0, 1, 2, 1), (2, 1), 1),
    (1, 8, 300, (9, 9), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
]
GEMM_SIZES = [1, 3, 13, 127]


def conv_model(batch, cin, cout, spatial, kernel, strides, pads, dilations, group, rng):
    w = rng.standard_normal((cout, cin // group, *kernel)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=list(kernel), strides=list(strides),
                            pads=list(pads), dilations=list(dilations), group=group)
    g = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, cin, *spatial])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    x = rng.standard_normal((batch, cin, *spatial)).astype(np.float32)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=10).SerializeToString(), {"x": x}


def conv_add_models(batch, cin, cout, spatial, kernel, strides, pads, dilations, group, rng, with_bias):
    """(onnxruntime model: Conv -> Add(residual r) -> Relu, tether model: one FusedConv with r as
    its summand, feeds)."""
    w = rng.standard_normal((cout, cin // group, *kernel)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    attrs = {"kernel_shape": list(kernel), "strides": list(strides), "pads": list(pads), "dilations": list(dilations),
             "group": group}
    x = rng.standard_normal((batch, cin, *spatial)).astype(np.float32)
    k = len(spatial)
    out_shape = (batch, cout, *[(spatial[i] + pads[i] + pads[i + k] - (kernel[i] - 1) * dilations[i] - 1) // strides[i] + 1
                                for i in range(k)])
    r = rng.standard_normal(out_shape).astype(np.float32)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape)),
              helper.make_tensor_value_info("r", TensorProto.FLOAT, list(out_shape))]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    init = [numpy_helper.from_array(w, "w")] + ([numpy_helper.from_array(b, "b")] if with_bias else [])
    conv_in = ["x", "w", "b"] if with_bias else ["x", "w"]
    ref_nodes = [helper.make_node("Conv", conv_in, ["z"], **attrs), helper.make_node("Add", ["r", "z"], ["s"]),
                 helper.make_node("Relu", ["s"], ["y"])]
    fused_node = helper.make_node("FusedConv", ["x", "w", "b" if with_bias else "", "r"], ["y"], domain="ai.tether",
                                  activation="Relu", **attrs)
    opsets = [helper.make_opsetid("", 20), helper.make_opsetid("ai.tether", 1)]
    ref = helper.make_model(helper.make_graph(ref_nodes, "ref", inputs, outputs, init), opset_imports=opsets[:1],
                            ir_version=10)
    fused = helper.make_model(helper.make_graph([fused_node], "fused", inputs, outputs, init), opset_imports=opsets,
                              ir_version=10)
    return ref.SerializeToString(), {"x": x, "r": r}, fused.SerializeToString()


def channels_last(blob: bytes, activation: str | None = None) -> bytes:
    """The tether form of a one-node Conv (or Conv -> Add(r) -> Relu) model, or of a one-node
    pooling model, channels last: Transposes of x (and r) to [N, H, W, C], the ai.tether node
    with channels_last = 1, and a Transpose of its output back to [N, C, H, W]."""
    model = onnx.load_from_string(blob)
    g = model.graph
    op = g.node[0]
    inputs = [i.name for i in g.input]
    nodes = [helper.make_node("Transpose", [n], [n + "_nhwc"], perm=[0, 2, 3, 1]) for n in inputs]
    attrs = {a.name: helper.get_attribute_value(a) for a in op.attribute}
    if op.op_type == "Conv":
        conv_in = [i + "_nhwc" if i in inputs else i for i in op.input]
        if len(g.node) > 1:  # the residual case: the summand r, then Relu
            conv_in = (conv_in + [""] * 3)[:3] + ["r_nhwc"]
            activation = "Relu"
        extra = {"activation": activation} if activation else {}
        if activation == "LeakyRelu":
            extra["activation_params"] = [0.1]
        nodes.append(helper.make_node("FusedConv", conv_in, ["y_nhwc"], domain="ai.tether", channels_last=1,
                                      **attrs, **extra))
    elif op.op_type == "ConvTranspose":
        nodes.append(helper.make_node("ConvTranspose", ["x_nhwc", *op.input[1:]], ["y_nhwc"], domain="ai.tether",
                                      channels_last=1, **attrs))
    else:
        nodes.append(helper.make_node(op.op_type, ["x_nhwc"], ["y_nhwc"], domain="ai.tether", channels_last=1, **attrs))
    nodes.append(helper.make_node("Transpose", ["y_nhwc"], ["y"], perm=[0, 3, 1, 2]))
    graph = helper.make_graph(nodes, "channels_last", list(g.input), list(g.output), list(g.initializer))
    opsets = [helper.make_opsetid("", 20), helper.make_opsetid("ai.tether", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


def with_activation(blob: bytes, activation: str) -> bytes:
    """The one-node Conv model followed by the ONNX form of `activation` (what FusedConv's
    activation attribute means)."""
    model = onnx.load_from_string(blob)
    conv = model.graph.node[0]
    conv.output[0] = "z"
    if activation == "SiLU":
        extra = [helper.make_node("Sigmoid", ["z"], ["s"]), helper.make_node("Mul", ["z", "s"], ["y"])]
    elif activation == "LeakyRelu":
        extra = [helper.make_node("LeakyRelu", ["z"], ["y"], alpha=0.1)]
    else:
        extra = [helper.make_node(activation, ["z"], ["y"])]
    model.graph.node.extend(extra)
    return model.SerializeToString()


# The channels-last kernels' cases: 2-D convolutions of every group kind (CONV_CASES' 2-D ones and
# these), each with an activation its epilogue applies in registers (Relu) or after the tile.
CHANNELS_LAST_CASES = [
    # (batch, cin, cout, spatial, kernel, strides, pads, dilations, group)
    (1, 16, 24, (9, 9), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 4),         # grouped
    (2, 12, 6, (10, 7), (3, 3), (2, 2), (2, 2, 2, 2), (2, 2), 3),         # grouped, strided and dilated
    (1, 4, 40, (20, 20), (3, 3), (1, 1), (3, 3, 3, 3), (3, 3), 1),        # dilation: taps wholly in the padding skipped
    (1, 24, 24, (5, 5), (3, 3), (1, 1), (4, 4, 4, 4), (4, 4), 24),        # depthwise, most taps outside
    (1, 33, 70, (15, 29), (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),       # 1x1: one run of pixels, ragged panels
    (2, 17, 17, (10, 10), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), 17),      # depthwise 5x5, channels off the blocks
    (1, 6, 70, (9, 9), (7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1),          # 7x7 stride 2: merged kernel rows
    (1, 3, 13, (1, 31), (1, 5), (1, 2), (0, 2, 0, 1), (1, 1), 1),         # one row, uneven column pads
    (3, 5, 9, (6, 6), (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 1),           # strided 1x1 (not one run)
    (1, 64, 512, (7, 7), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),        # large weights: panels outermost
]
CHANNELS_LAST_ACTIVATIONS = ["Relu", "SiLU", "HardSwish", "LeakyRelu", "Tanh"]


def gemm_model(m, k, n, trans_b, const_b, rng):
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])]
    feeds = {"a": rng.standard_normal((m, k)).astype(np.float32)}
    init = [numpy_helper.from_array(c, "c")]
    if const_b:
        init.append(numpy_helper.from_array(b, "b"))
    else:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, list(b.shape)))
        feeds["b"] = b
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=int(trans_b))
    g = helper.make_graph([node], "gemm", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=10).SerializeToString(), feeds


def matmul_model(a_shape, b_shape, const_b, rng):
    b = rng.standard_normal(b_shape).astype(np.float32)
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a_shape))]
    feeds = {"a": rng.standard_normal(a_shape).astype(np.float32)}
    init = []
    if const_b:
        init.append(numpy_helper.from_array(b, "b"))
    else:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, list(b_shape)))
        feeds["b"] = b
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "mm", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=10).SerializeToString(), feeds


POOL_CASES = [
    # (op, spatial, kernel, strides, pads, ceil_mode, count_include_pad, auto_pad)
    ("MaxPool", (13, 11), (3, 3), (2, 2), (1, 1, 1, 1), 0, 0, "NOTSET"),
    ("MaxPool", (112, 112), (3, 3), (2, 2), (1, 1, 1, 1), 0, 0, "NOTSET"),
    ("MaxPool", (13, 13), (2, 3), (2, 1), (0, 0, 0, 0), 1, 0, "NOTSET"),
    ("MaxPool", (7, 9), (3, 3), (2, 2), None, 0, 0, "SAME_UPPER"),
    ("AveragePool", (13, 11), (3, 3), (2, 2), (1, 1, 1, 1), 0, 0, "NOTSET"),
    ("AveragePool", (13, 11), (3, 3), (2, 2), (1, 0, 2, 1), 0, 1, "NOTSET"),
    ("AveragePool", (9, 9), (4, 4), (3, 3), (0, 0, 0, 0), 1, 1, "NOTSET"),
    ("AveragePool", (7, 8), (3, 2), (1, 1), None, 0, 0, "SAME_LOWER"),
]


def pool_model(op, spatial, kernel, strides, pads, ceil_mode, include_pad, auto_pad, rng):
    attrs = {"kernel_shape": list(kernel), "strides": list(strides), "ceil_mode": ceil_mode, "auto_pad": auto_pad}
    if pads is not None:
        attrs["pads"] = list(pads)
    if op == "AveragePool":
        attrs["count_include_pad"] = include_pad
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "pool",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, *spatial])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    x = rng.standard_normal((2, 3, *spatial)).astype(np.float32)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=10).SerializeToString(), {"x": x}


def runtime_weights(blob: bytes, rng) -> tuple[bytes, dict]:
    """The one-node Conv model with its weights as a graph input (a GEMM whose A, the weights,
    is read in place, with a per-row bias), and feeds for them."""
    model = onnx.load_from_string(blob)
    w = next(i for i in model.graph.initializer if i.name == "w")
    model.graph.initializer.remove(w)
    model.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w.dims)))
    return model.SerializeToString(), {"w": rng.standard_normal(tuple(w.dims)).astype(np.float32)}


# ConvTranspose channels last: kernel equal to the stride. (batch, cin, cout, spatial, kernel, bias)
CONV_TRANSPOSE_CASES = [(1, 8, 4, (5, 7), (2, 2), True), (2, 3, 33, (4, 3), (3, 2), False), (1, 70, 16, (13, 1), (2, 2), True)]


def conv_transpose_model(batch, cin, cout, spatial, kernel, bias, rng):
    inits = [numpy_helper.from_array(rng.standard_normal((cin, cout, *kernel)).astype(np.float32), "w")]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b"))
    node = helper.make_node("ConvTranspose", ["x", "w", "b"] if bias else ["x", "w"], ["y"], kernel_shape=list(kernel),
                            strides=list(kernel))
    g = helper.make_graph([node], "convt", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, cin, *spatial])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    x = rng.standard_normal((batch, cin, *spatial)).astype(np.float32)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=10).SerializeToString(), {"x": x}


def global_pool_model(op, rng):
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "pool",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 70, 5, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    x = rng.standard_normal((3, 70, 5, 7)).astype(np.float32)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=10).SerializeToString(), {"x": x}


def _isa_case(name: str, blob: bytes, feeds: dict, tether_blob: bytes = b"", **kw: object) -> OpCase:
    return OpCase(name, tether_blob or blob, feeds, ort_model=blob if tether_blob else b"", rtol=ISA_RTOL, **kw)


def _isa_cases() -> Iterator[OpCase]:
    rng = np.random.default_rng(0)
    for i, c in enumerate(POOL_CASES):
        yield _isa_case(f"pool{i}_{c[0]}", *pool_model(*c, rng))
    for i, c in enumerate(CONV_CASES):
        yield _isa_case(f"conv{i}", *conv_model(*c, rng))
    for i, c in enumerate(CONV_CASES):
        yield _isa_case(f"conv{i}_residual_relu", *conv_add_models(*c, rng, with_bias=i % 2 == 0))
    for i, c in enumerate(CONV_CASES[::3]):
        blob, feeds = conv_model(*c, rng)
        blob, w = runtime_weights(blob, rng)
        yield _isa_case(f"conv{i}_runtime_weights", blob, {**feeds, **w})
    for m, k, n in itertools.product(GEMM_SIZES, repeat=3):
        yield _isa_case(f"gemm_{m}x{k}x{n}", *gemm_model(m, k, n, trans_b=(m + n) % 2 == 0, const_b=k % 2 == 1, rng=rng))
    # Products large enough to split into a grid of blocks across threads, with K past one
    # K block and N past one N block (the last blocks ragged).
    # Rows alone in their tile (m = 1, and 15 = 14 + 1) run up to four panels at once: N
    # past one N block, leaving a ragged group of panels at its end.
    for m, k, n in [(200, 600, 1100), (37, 300, 2100), (1, 513, 70), (1, 300, 1100), (15, 40, 200), (7, 17, 130)]:
        yield _isa_case(f"gemm_{m}x{k}x{n}", *gemm_model(m, k, n, trans_b=False, const_b=m != 37, rng=rng))
    for a_shape, b_shape in [((13,), (13, 3)), ((2, 3, 13, 127), (127, 5)), ((3, 1, 7, 13), (4, 13, 9)), ((127, 13), (13,)),
                             ((5, 37, 300), (5, 300, 70))]:
        for const_b in (True, False):
            yield _isa_case(f"matmul_{a_shape}_{b_shape}_{const_b}", *matmul_model(a_shape, b_shape, const_b, rng))


def cpu_layout_cases() -> Iterator[OpCase]:
    """The channels-last forms the CPU's layout pass makes (ai.tether FusedConv, pools and
    ConvTranspose with channels_last = 1, between Transposes): only the CPU runs this layout."""
    rng = np.random.default_rng(1)
    only = {"backends": ("cpu",), "why_only": "channels_last = 1 is the CPU engine's layout"}
    two_d = [c for c in CONV_CASES if len(c[3]) == 2] + CHANNELS_LAST_CASES
    for i, c in enumerate(two_d):
        act = CHANNELS_LAST_ACTIVATIONS[i % len(CHANNELS_LAST_ACTIVATIONS)]
        blob, feeds = conv_model(*c, rng)
        yield _isa_case(f"conv{i}_channels_last_{act}", with_activation(blob, act), feeds, channels_last(blob, act), **only)
        ref, feeds, _ = conv_add_models(*c, rng, with_bias=i % 2 == 1)
        yield _isa_case(f"conv{i}_channels_last_residual_relu", ref, feeds, channels_last(ref), **only)
    for i, c in enumerate(POOL_CASES):
        blob, feeds = pool_model(*c, rng)
        yield _isa_case(f"pool{i}_{c[0]}_channels_last", blob, feeds, channels_last(blob), **only)
    for i, c in enumerate(CONV_TRANSPOSE_CASES):
        blob, feeds = conv_transpose_model(*c, rng)
        yield _isa_case(f"conv_transpose{i}_channels_last", blob, feeds, channels_last(blob), **only)
    for op in ("GlobalAveragePool", "GlobalMaxPool"):
        blob, feeds = global_pool_model(op, rng)
        yield _isa_case(f"{op}_channels_last", blob, feeds, channels_last(blob), **only)


def _worst_error(got: np.ndarray, want: np.ndarray) -> float:
    if got.shape != want.shape or got.dtype != want.dtype:
        return float("inf")
    if not np.issubdtype(want.dtype, np.floating):
        return 0.0 if np.array_equal(got, want) else float("inf")
    if not np.array_equal(np.isnan(got), np.isnan(want)):
        return float("inf")
    ok = ~np.isnan(want)
    scale = max(float(np.abs(want[ok]).max(initial=0.0)), 1e-30)
    return float(np.abs(got[ok].astype(np.float64) - want[ok]).max(initial=0.0)) / scale


def main() -> int:
    """Runs every case with a per-ISA kernel on the CPU engine (under the TETHER_ISA the caller
    set) against its oracle; prints the ISA, the chosen GEMM kernel and each failure."""
    import tether as tt

    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    bad, count = {}, 0
    for case in (c for c in table() if c.isa):
        count += 1
        # unoptimized: each kernel as the case names it, not rewritten by the layout pass
        sess = tt.compile(tt.load(case.model), threads=threads, optimize=False)
        got = sess.run(case.feeds)
        for out, want in zip(sess.outputs, case.expected(), strict=True):
            err = _worst_error(got[out.name], want)
            if err > case.rtol:
                bad[f"{case.id}:{out.name}"] = err
    info = tt.cpu_info()
    print(json.dumps({"kernel": info["gemm_kernel"], "isa": info["isa"], "cases": count, "bad": bad}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
