"""The shared table of op cases every backend runs (tests/python/test_vulkan_ops.py): small
graphs of awkward sizes (1, 3, 13, 127), broadcasting, padding, strides, dilations and groups,
with their inputs. Each backend's result is compared with an independent oracle: the CPU
engine's with onnxruntime's, every other backend's with the CPU engine's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

RTOL = 1e-4  # float32: the largest error allowed, relative to the reference's largest magnitude


@dataclass(frozen=True)
class OpCase:
    id: str
    model: bytes
    feeds: dict[str, np.ndarray] = field(hash=False)
    fused: str = ""    # the fused op the graph passes must make of it ("ai.tether:FusedConv")
    ort: bool = True   # onnxruntime runs it (the CPU engine's oracle)
    rtol: float = RTOL


def _graph(nodes: Sequence[onnx.NodeProto], feeds: dict[str, np.ndarray], consts: dict[str, np.ndarray] | None = None,
           outputs: Sequence[str] = ("y",), opset: int = 18) -> bytes:
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in feeds.items()]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in (consts or {}).items()]
    g = helper.make_graph(list(nodes), "case", inputs, [onnx.ValueInfoProto(name=o) for o in outputs], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10).SerializeToString()


def _node(op: str, inputs: Sequence[str], outputs: Sequence[str] = ("y",), **attrs: object) -> onnx.NodeProto:
    return helper.make_node(op, list(inputs), list(outputs), name=f"the_{op.lower()}", **attrs)


def op_cases() -> list[OpCase]:
    rng = np.random.default_rng(2024)

    def rand(*shape: int, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
        return rng.uniform(lo, hi, shape).astype(np.float32)

    cases: list[OpCase] = []

    def one(case_id: str, op: str, feeds: dict[str, np.ndarray], consts: dict[str, np.ndarray] | None = None,
            inputs: Sequence[str] | None = None, opset: int = 18, outputs: Sequence[str] = ("y",), ort: bool = True,
            **attrs: object) -> None:
        names = list(inputs) if inputs is not None else [*feeds, *(consts or {})]
        model = _graph([_node(op, names, outputs, **attrs)], feeds, consts, outputs, opset)
        cases.append(OpCase(case_id, model, feeds, ort=ort))

    def chain(case_id: str, nodes: Sequence[onnx.NodeProto], feeds: dict[str, np.ndarray],
              consts: dict[str, np.ndarray] | None = None, fused: str = "", opset: int = 18,
              outputs: Sequence[str] = ("y",)) -> None:
        cases.append(OpCase(case_id, _graph(nodes, feeds, consts, outputs, opset), feeds, fused=fused))

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
    return cases
