"""tether's shape and type inference, op by op, against onnxruntime's actual output shapes.

Each case is a small ONNX graph. Two oracles (see _shape_oracle.py):
  A. static input shapes: tether's inferred dtype and shape equal onnxruntime's output;
  B. batch dims declared as the symbol N: tether's dims with N = 1 and N = 5 substituted
     equal onnxruntime's shapes at those batch sizes, and no dim is left unknown unless the
     case says why (sizes that depend on data).
Contradictions must raise tether.ShapeError naming the node, where onnx's strict shape
inference rejects the model too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
import tether as tt
from _shape_oracle import (
    BATCHES,
    I8,
    I32,
    I64,
    U8,
    UNKNOWN_DIMS,
    B,
    Case,
    D,
    F,
    H,
    S,
    build,
    check_static,
    check_symbolic,
    const,
    make_feeds,
    node,
    rand,
    run_ort,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

_CASE_KEYS = {"opset", "sym", "feeds", "allow_unknown", "static_unknown", "batches", "oracle"}
INT_MAX = np.iinfo(np.int64).max


def one(cid: str, op: str, ins: list[str], inputs: dict[str, tuple[int, list[int]]],
        outs: tuple[str, ...] = ("y",), inits: dict[str, np.ndarray] | None = None,
        **kw: Any) -> Case:
    """A single-node case; keyword arguments are node attributes, except Case fields."""
    case_kw = {k: kw.pop(k) for k in list(kw) if k in _CASE_KEYS}
    n = node(op, ins, list(outs), **kw)
    return Case(cid, [n], inputs, [o for o in outs if o], inits or {}, **case_kw)


CASES: list[Case] = []


def add(*cases: Case) -> None:
    CASES.extend(cases)


# ---- elementwise ---------------------------------------------------------------------------

X3 = {"x": (F, [3, 13])}
X4 = {"x": (F, [2, 3, 13, 7])}
for op, attrs in [
    ("Relu", {}), ("LeakyRelu", {"alpha": 0.2}), ("Sigmoid", {}), ("Tanh", {}), ("HardSigmoid", {}),
    ("HardSwish", {}), ("Gelu", {}), ("Softplus", {}), ("Softsign", {}), ("Elu", {}), ("Selu", {}),
    ("Celu", {}), ("Mish", {}), ("ThresholdedRelu", {}), ("Shrink", {}), ("Sqrt", {}), ("Exp", {}),
    ("Log", {}), ("Neg", {}), ("Abs", {}), ("Reciprocal", {}), ("Erf", {}), ("Floor", {}),
    ("Ceil", {}), ("Round", {}), ("Sign", {}), ("Sin", {}), ("Cos", {}), ("Tan", {}), ("Asin", {}),
    ("Acos", {}), ("Atan", {}), ("Sinh", {}), ("Cosh", {}), ("Asinh", {}), ("Acosh", {}),
    ("Atanh", {}), ("Softmax", {"axis": -1}), ("LogSoftmax", {"axis": 0}), ("Hardmax", {}),
    ("LpNormalization", {"axis": -1}),
]:
    add(one(f"{op}", op, ["x"], X3, **attrs))
add(
    one("Softmax/4d", "Softmax", ["x"], X4, axis=1),
    one("Swish", "Swish", ["x"], X4, alpha=0.5, opset=24),
    one("MeanVarianceNormalization", "MeanVarianceNormalization", ["x"], X4),
    one("Clip/min_max", "Clip", ["x", "lo", "hi"], X4,
        inits={"lo": const(-0.5, np.float32), "hi": const(0.5, np.float32)}),
    one("Clip/none", "Clip", ["x"], X3),
    one("Trilu/upper", "Trilu", ["x", "k"], X4, inits={"k": const(1)}),
    one("Trilu/lower", "Trilu", ["x"], X3, upper=0),
    one("CumSum/neg_axis", "CumSum", ["x", "a"], X4, inits={"a": const(-2)}, reverse=1),
    one("BitwiseNot", "BitwiseNot", ["x"], {"x": (I32, [3, 13])}),
    one("ReverseSequence", "ReverseSequence", ["x", "len"], {"x": (F, [7, 3, 5])},
        inits={"len": const([1, 7, 3])}, batch_axis=1, time_axis=0, sym={"x": 2}),
)

BINARY_SHAPES = [
    ("same", [3, 13], [3, 13]),
    ("row", [3, 13], [13]),
    ("col", [3, 1, 13], [4, 1]),
    ("scalar", [2, 3], []),
    ("ones", [1, 1, 127], [3, 1, 1]),
    ("left_short", [13], [2, 3, 13]),
]


def batch_axes(shapes: dict[str, list[int]]) -> dict[str, int]:
    """Inputs whose leading broadcast axis gets the symbol N: every input with a dim other
    than 1 there (they must agree), or the first input when all are 1."""
    rank = max(len(s) for s in shapes.values())
    if rank == 0:
        return {}
    at = {n: 0 for n, s in shapes.items() if len(s) == rank and s[0] != 1}
    return at or {n: 0 for n, s in shapes.items() if len(s) == rank}


for op in ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean"]:
    for tag, a, b in BINARY_SHAPES:
        add(one(f"{op}/{tag}", op, ["a", "b"], {"a": (F, a), "b": (F, b)},
                sym=batch_axes({"a": a, "b": b})))
for op in ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]:
    add(one(f"{op}/col", op, ["a", "b"], {"a": (F, [3, 1, 13]), "b": (F, [4, 1])}))
for op in ["And", "Or", "Xor"]:
    add(one(f"{op}/row", op, ["a", "b"], {"a": (B, [3, 13]), "b": (B, [13])}))
for op in ["BitwiseAnd", "BitwiseOr", "BitwiseXor"]:
    add(one(f"{op}/row", op, ["a", "b"], {"a": (I32, [3, 13]), "b": (I32, [1, 13])}))
add(
    one("Mod/int", "Mod", ["a", "b"], {"a": (I64, [3, 13])}, inits={"b": const([3])}),
    one("Mod/fmod", "Mod", ["a", "b"], {"a": (F, [3, 13]), "b": (F, [3, 1])}, fmod=1,
        sym={"a": 0, "b": 0}),
    one("BitShift", "BitShift", ["a", "b"], {"a": (U8, [3, 13]), "b": (U8, [13])},
        direction="LEFT"),
    one("Sum/three", "Sum", ["a", "b", "c"], {"a": (F, [3, 1, 1]), "b": (F, [1, 4, 1]),
                                              "c": (F, [13])}),
    one("Max/three", "Max", ["a", "b", "c"], {"a": (F, [3, 1]), "b": (F, [4]), "c": (F, [])}),
    one("Mean/one", "Mean", ["a"], {"a": (F, [3, 13])}),
    one("Add/both_batch", "Add", ["a", "b"], {"a": (F, [5, 3]), "b": (F, [5, 1])},
        sym={"a": 0, "b": 0}),
    one("Add/batch_vs_1", "Add", ["a", "b"], {"a": (F, [5, 1, 13]), "b": (F, [1, 3, 1])}),
    one("Mul/int64", "Mul", ["a", "b"], {"a": (I64, [3, 13]), "b": (I64, [])}),
    one("Div/int32", "Div", ["a", "b"], {"a": (I32, [3, 13])}, inits={"b": const(2, np.int32)}),
    one("Not", "Not", ["x"], {"x": (B, [3, 13])}),
    one("IsNaN", "IsNaN", ["x"], X3),
    one("IsInf", "IsInf", ["x"], X4),
    one("Where/broadcast", "Where", ["c", "a", "b"],
        {"c": (B, [5, 1, 13]), "a": (I64, [3, 1]), "b": (I64, [13])}),
    one("Where/cond_small", "Where", ["c", "a", "b"], {"c": (B, [13]), "a": (F, [4, 3, 13]),
                                                       "b": (F, [1])}, sym={"a": 0}),
    one("PRelu/channel", "PRelu", ["x", "s"], X4, inits={"s": rand(3, 1, 1)}),
    one("PRelu/scalar", "PRelu", ["x", "s"], X3, inits={"s": rand(1)}),
    one("Cast/int64", "Cast", ["x"], X3, to=I64),
    one("Cast/float16", "Cast", ["x"], X4, to=H),
    one("Cast/bool", "Cast", ["x"], X3, to=B),
    one("Cast/double_from_int", "Cast", ["x"], {"x": (I32, [3])}, to=D),
    one("CastLike", "CastLike", ["x", "t"], X3, inits={"t": const([1], np.float16)}),
    one("Identity", "Identity", ["x"], X4),
    one("Dropout/mask", "Dropout", ["x"], X4, outs=("y", "mask")),
    one("Dropout/ratio", "Dropout", ["x", "r"], X3, inits={"r": const(0.3, np.float32)}),
)

# ---- matrix products -----------------------------------------------------------------------

add(
    one("MatMul/2d", "MatMul", ["a", "b"], {"a": (F, [3, 13]), "b": (F, [13, 127])}),
    one("MatMul/batch", "MatMul", ["a", "b"], {"a": (F, [2, 3, 4]), "b": (F, [4, 5])}),
    one("MatMul/batch_broadcast", "MatMul", ["a", "b"],
        {"a": (F, [2, 1, 3, 4]), "b": (F, [5, 4, 6])}),
    one("MatMul/batch_broadcast_b", "MatMul", ["a", "b"], {"a": (F, [3, 4]), "b": (F, [2, 4, 6])},
        sym={"b": 0}),
    one("MatMul/vec_left", "MatMul", ["a", "b"], {"a": (F, [4]), "b": (F, [2, 4, 5])},
        sym={"b": 0}),
    one("MatMul/vec_right", "MatMul", ["a", "b"], {"a": (F, [2, 3, 4]), "b": (F, [4])}),
    one("MatMul/vec_vec", "MatMul", ["a", "b"], {"a": (F, [13]), "b": (F, [13])}, sym={}),
    one("MatMul/ones", "MatMul", ["a", "b"], {"a": (F, [1, 13, 127]), "b": (F, [127, 1])}),
    one("MatMul/both_batch", "MatMul", ["a", "b"], {"a": (F, [4, 3, 8]), "b": (F, [4, 8, 3])},
        sym={"a": 0, "b": 0}),
    one("MatMul/double", "MatMul", ["a", "b"], {"a": (D, [3, 2]), "b": (D, [2, 3])}),
    one("MatMulInteger", "MatMulInteger", ["a", "b"], {"a": (U8, [2, 3, 4]), "b": (U8, [4, 5])}),
    one("MatMulInteger/zp", "MatMulInteger", ["a", "b", "za", "zb"],
        {"a": (U8, [3, 4]), "b": (I8, [4, 5])},
        inits={"za": const(3, np.uint8), "zb": const([1, 2, 3, 4, 5], np.int8)}),
    one("Gemm/plain", "Gemm", ["a", "b"], {"a": (F, [3, 13]), "b": (F, [13, 4])}),
    one("Gemm/transA", "Gemm", ["a", "b", "c"], {"a": (F, [13, 3]), "b": (F, [13, 4])},
        inits={"c": rand(4)}, transA=1, sym={"a": 1}),
    one("Gemm/transB", "Gemm", ["a", "b", "c"], {"a": (F, [3, 13]), "b": (F, [4, 13])},
        inits={"c": rand(3, 1)}, transB=1, sym={}),
    one("Gemm/transAB_scalar_c", "Gemm", ["a", "b", "c"], {"a": (F, [13, 3]), "b": (F, [4, 13])},
        inits={"c": rand(1)}, transA=1, transB=1, alpha=0.5, sym={"a": 1}),
    one("Gemm/full_c", "Gemm", ["a", "b", "c"], {"a": (F, [7, 2]), "b": (F, [2, 4])},
        inits={"c": rand(7, 4)}, sym={}),
    one("Gemm/opset11_no_c", "Gemm", ["a", "b"], {"a": (F, [3, 5]), "b": (F, [5, 2])}, opset=11),
)
EINSUMS = [
    ("bij,bjk->bik", {"a": (F, [2, 3, 4]), "b": (F, [2, 4, 5])}, {"a": 0, "b": 0}),
    ("bhqd,bhkd->bhqk", {"a": (F, [2, 4, 7, 8]), "b": (F, [2, 4, 9, 8])}, {"a": 0, "b": 0}),
    ("...ij,...jk", {"a": (F, [2, 1, 3, 4]), "b": (F, [1, 5, 4, 6])}, None),
    ("...ij,...jk->...ik", {"a": (F, [1, 3, 4]), "b": (F, [2, 4, 6])}, {"b": 0}),
    ("ij,jk", {"a": (F, [3, 4]), "b": (F, [4, 5])}, None),
    ("ba,ca", {"a": (F, [3, 4]), "b": (F, [5, 4])}, None),
    ("i,i", {"a": (F, [13]), "b": (F, [13])}, {"a": 0, "b": 0}),
    ("i,j->ij", {"a": (F, [3]), "b": (F, [4])}, None),
    ("bij->bji", {"a": (F, [2, 3, 4])}, None),
    ("ii->i", {"a": (F, [3, 3])}, {}),
    ("bnd,dh->bnh", {"a": (F, [2, 7, 8]), "b": (F, [8, 3])}, None),
    ("b i d, b j d -> b i j", {"a": (F, [2, 3, 4]), "b": (F, [2, 5, 4])}, {"a": 0, "b": 0}),
    ("...d,...d->...", {"a": (F, [2, 3, 4]), "b": (F, [1, 3, 4])}, None),
]
for eq, ins, sym in EINSUMS:
    add(one(f"Einsum/{eq.replace(' ', '')}", "Einsum", list(ins), ins, equation=eq, sym=sym))

# ---- convolution and pooling ---------------------------------------------------------------

W = {"w": rand(4, 3, 3, 3)}
XC = {"x": (F, [2, 3, 13, 13])}
add(
    one("Conv/plain", "Conv", ["x", "w"], XC, inits=W),
    one("Conv/pads_strides", "Conv", ["x", "w", "b"], XC, inits={**W, "b": rand(4)},
        pads=[1, 0, 2, 1], strides=[2, 3]),
    one("Conv/dilations", "Conv", ["x", "w"], XC, inits=W, dilations=[2, 3], kernel_shape=[3, 3]),
    one("Conv/same_upper_s2", "Conv", ["x", "w"], XC, inits=W, auto_pad="SAME_UPPER",
        strides=[2, 2]),
    one("Conv/same_lower_s3", "Conv", ["x", "w"], {"x": (F, [1, 3, 127, 13])}, inits=W,
        auto_pad="SAME_LOWER", strides=[3, 2]),
    one("Conv/same_upper_dil", "Conv", ["x", "w"], XC, inits=W, auto_pad="SAME_UPPER",
        dilations=[2, 2], strides=[2, 1], oracle="onnx", sym={}),
    one("Conv/valid", "Conv", ["x", "w"], XC, inits=W, auto_pad="VALID", strides=[2, 2]),
    one("Conv/depthwise", "Conv", ["x", "w"], {"x": (F, [2, 6, 13, 7])},
        inits={"w": rand(6, 1, 3, 3)}, group=6, pads=[1, 1, 1, 1]),
    one("Conv/groups", "Conv", ["x", "w"], {"x": (F, [2, 6, 13, 7])},
        inits={"w": rand(4, 3, 1, 1)}, group=2),
    one("Conv/1d", "Conv", ["x", "w"], {"x": (F, [3, 2, 127])}, inits={"w": rand(5, 2, 7)},
        strides=[4], pads=[3, 3]),
    one("Conv/3d", "Conv", ["x", "w"], {"x": (F, [1, 2, 5, 7, 9])},
        inits={"w": rand(3, 2, 3, 3, 3)}, strides=[1, 2, 2], pads=[1, 1, 1, 1, 1, 1]),
    one("Conv/weight_input", "Conv", ["x", "w"], {"x": (F, [2, 3, 13, 13]),
                                                   "w": (F, [4, 3, 3, 3])}),
    one("ConvTranspose/plain", "ConvTranspose", ["x", "w"], {"x": (F, [2, 3, 7, 5])},
        inits={"w": rand(3, 4, 3, 3)}),
    one("ConvTranspose/stride_outpad", "ConvTranspose", ["x", "w"], {"x": (F, [2, 3, 7, 5])},
        inits={"w": rand(3, 4, 3, 3)}, strides=[2, 3], output_padding=[1, 2], pads=[1, 1, 0, 1]),
    one("ConvTranspose/groups_dil", "ConvTranspose", ["x", "w", "b"], {"x": (F, [2, 4, 7, 5])},
        inits={"w": rand(4, 3, 3, 2), "b": rand(6)}, group=2, dilations=[2, 1]),
    one("ConvTranspose/same_upper", "ConvTranspose", ["x", "w"], {"x": (F, [2, 3, 7, 5])},
        inits={"w": rand(3, 4, 3, 3)}, strides=[2, 2], auto_pad="SAME_UPPER"),
    one("ConvTranspose/same_lower", "ConvTranspose", ["x", "w"], {"x": (F, [2, 3, 7, 5])},
        inits={"w": rand(3, 4, 4, 4)}, strides=[2, 3], auto_pad="SAME_LOWER"),
    one("ConvTranspose/output_shape", "ConvTranspose", ["x", "w"], {"x": (F, [2, 3, 7, 5])},
        inits={"w": rand(3, 4, 3, 3)}, strides=[2, 2], output_shape=[15, 12]),
    one("ConvTranspose/1d", "ConvTranspose", ["x", "w"], {"x": (F, [2, 3, 13])},
        inits={"w": rand(3, 2, 4)}, strides=[4], pads=[1, 2]),
    one("ConvInteger", "ConvInteger", ["x", "w"], {"x": (U8, [2, 3, 13, 13])},
        inits={"w": np.ones((4, 3, 3, 3), np.uint8)}, pads=[1, 1, 1, 1], opset=10),
    one("QLinearConv", "QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"],
        {"x": (U8, [2, 3, 13, 13])},
        inits={"xs": const(0.1, np.float32), "xz": const(3, np.uint8),
               "w": np.ones((4, 3, 3, 3), np.uint8), "ws": const(0.2, np.float32),
               "wz": const(0, np.uint8), "ys": const(0.3, np.float32), "yz": const(5, np.uint8)},
        strides=[2, 2]),
)
XP = {"x": (F, [2, 3, 13, 127])}
add(
    one("MaxPool/k3s2p1", "MaxPool", ["x"], XP, kernel_shape=[3, 3], strides=[2, 2],
        pads=[1, 1, 1, 1]),
    one("MaxPool/ceil", "MaxPool", ["x"], XP, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    one("MaxPool/ceil_pads", "MaxPool", ["x"], {"x": (F, [1, 2, 12, 13])}, kernel_shape=[2, 3],
        strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
    one("MaxPool/ceil_drop_last", "MaxPool", ["x"], {"x": (F, [1, 2, 5, 6])},
        kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 0, 0], ceil_mode=1),
    one("MaxPool/dilations_ceil", "MaxPool", ["x"], XP, kernel_shape=[3, 2], dilations=[2, 3],
        strides=[3, 2], ceil_mode=1),
    one("MaxPool/indices", "MaxPool", ["x"], XP, outs=("y", "idx"), kernel_shape=[2, 2],
        strides=[2, 2]),
    one("MaxPool/same_upper", "MaxPool", ["x"], XP, kernel_shape=[3, 3], strides=[2, 3],
        auto_pad="SAME_UPPER"),
    one("MaxPool/same_lower", "MaxPool", ["x"], XP, kernel_shape=[4, 4], strides=[2, 2],
        auto_pad="SAME_LOWER"),
    one("MaxPool/valid", "MaxPool", ["x"], XP, kernel_shape=[3, 3], strides=[2, 2],
        auto_pad="VALID"),
    one("MaxPool/1d", "MaxPool", ["x"], {"x": (F, [2, 3, 127])}, kernel_shape=[5], strides=[3]),
    one("MaxPool/3d", "MaxPool", ["x"], {"x": (F, [1, 2, 5, 7, 9])}, kernel_shape=[2, 2, 2],
        strides=[2, 2, 2], ceil_mode=1),
    one("AveragePool/pads", "AveragePool", ["x"], XP, kernel_shape=[3, 3], strides=[2, 2],
        pads=[1, 1, 1, 1], count_include_pad=1),
    one("AveragePool/ceil", "AveragePool", ["x"], XP, kernel_shape=[3, 3], strides=[2, 2],
        ceil_mode=1),
    one("AveragePool/ceil_pads", "AveragePool", ["x"], {"x": (F, [1, 2, 12, 13])},
        kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
    one("AveragePool/same_upper", "AveragePool", ["x"], XP, kernel_shape=[2, 2], strides=[2, 2],
        auto_pad="SAME_UPPER"),
    one("AveragePool/same_lower", "AveragePool", ["x"], XP, kernel_shape=[3, 3],
        auto_pad="SAME_LOWER"),
    one("AveragePool/dilations", "AveragePool", ["x"], XP, kernel_shape=[2, 2],
        dilations=[2, 2], opset=19),
    one("LpPool", "LpPool", ["x"], XP, kernel_shape=[3, 3], strides=[2, 2], p=2),
    one("GlobalAveragePool", "GlobalAveragePool", ["x"], XP),
    one("GlobalMaxPool/3d", "GlobalMaxPool", ["x"], {"x": (F, [2, 3, 4, 5, 6])}),
    one("GlobalLpPool/1d", "GlobalLpPool", ["x"], {"x": (F, [2, 3, 13])}),
)

# ---- normalisation, resizing, recurrent, quantization --------------------------------------

C3 = {k: rand(3, seed=i) for i, k in enumerate(["s", "b", "m"])}
add(
    one("BatchNormalization", "BatchNormalization", ["x", "s", "b", "m", "v"], X4,
        inits={**C3, "v": np.abs(rand(3)) + 1}),
    one("LayerNormalization/last", "LayerNormalization", ["x", "s", "b"], X4,
        outs=("y", "mean", "inv"), inits={"s": rand(7), "b": rand(7)}),
    one("LayerNormalization/axis1", "LayerNormalization", ["x", "s"], X4,
        outs=("y", "mean", "inv"), inits={"s": rand(3, 13, 7)}, axis=1),
    one("InstanceNormalization", "InstanceNormalization", ["x", "s", "b"], X4,
        inits={"s": C3["s"], "b": C3["b"]}),
    one("GroupNormalization", "GroupNormalization", ["x", "s", "b"], {"x": (F, [2, 6, 5, 3])},
        inits={"s": rand(6), "b": rand(6)}, num_groups=3, opset=21),
    one("LRN", "LRN", ["x"], X4, size=3),
    one("RMSNormalization", "RMSNormalization", ["x", "s"], X4, inits={"s": rand(7)}, opset=23),
)
XR = {"x": (F, [2, 3, 13, 7])}
EMPTY_F = np.zeros((0,), np.float32)
add(
    one("Resize/scales_up", "Resize", ["x", "", "sc"], XR,
        inits={"sc": const([1, 1, 2, 3], np.float32)}, mode="nearest"),
    one("Resize/scales_down_odd", "Resize", ["x", "", "sc"], XR,
        inits={"sc": const([1, 1, 0.5, 0.6], np.float32)}, mode="linear"),
    one("Resize/scales_symbolic_height", "Resize", ["x", "", "sc"], XR,
        inits={"sc": const([1, 1, 2, 0.5], np.float32)}, sym={"x": 2}),
    one("Resize/sizes", "Resize", ["x", "", "", "sz"], XR, inits={"sz": const([2, 3, 5, 11])},
        sym={}),
    one("Resize/sizes_keep_batch", "Resize", ["x", "", "", "sz"], XR,
        inits={"sz": const([5, 3, 5, 11])}, batches=(5,)),
    one("Resize/axes_sizes", "Resize", ["x", "", "", "sz"], XR, inits={"sz": const([9, 4])},
        axes=[2, -1], mode="cubic"),
    one("Resize/axes_scales", "Resize", ["x", "", "sc"], XR,
        inits={"sc": const([2.5], np.float32)}, axes=[3]),
    one("Resize/not_larger", "Resize", ["x", "", "", "sz"], XR, inits={"sz": const([20, 20])},
        axes=[2, 3], keep_aspect_ratio_policy="not_larger"),
    one("Resize/not_smaller", "Resize", ["x", "", "", "sz"], XR, inits={"sz": const([20, 20])},
        axes=[2, 3], keep_aspect_ratio_policy="not_smaller"),
    one("Resize/opset11_sizes", "Resize", ["x", "roi", "sc", "sz"], XR,
        inits={"roi": EMPTY_F, "sc": EMPTY_F, "sz": const([2, 3, 26, 3])}, opset=11, sym={}),
    one("Resize/opset11_scales", "Resize", ["x", "roi", "sc"], XR,
        inits={"roi": EMPTY_F, "sc": const([1, 1, 2, 2], np.float32)}, opset=11),
    one("Resize/opset10", "Resize", ["x", "sc"], XR,
        inits={"sc": const([1, 1, 2, 0.5], np.float32)}, opset=10),
    one("Upsample/opset9", "Upsample", ["x", "sc"], XR,
        inits={"sc": const([1, 1, 2, 3], np.float32)}, opset=9),
    one("Upsample/opset7_attr", "Upsample", ["x"], XR, scales=[1.0, 1.0, 2.0, 2.0], opset=7),
    one("DepthToSpace/DCR", "DepthToSpace", ["x"], {"x": (F, [2, 12, 5, 3])}, blocksize=2),
    one("DepthToSpace/CRD", "DepthToSpace", ["x"], {"x": (F, [2, 18, 5, 3])}, blocksize=3,
        mode="CRD"),
    one("SpaceToDepth", "SpaceToDepth", ["x"], {"x": (F, [2, 3, 6, 4])}, blocksize=2),
)


def recurrent(op: str, gates: int, layout: int, direction: str, outs: tuple[str, ...],
              bias: bool = True) -> Case:
    dirs = 2 if direction == "bidirectional" else 1
    hidden, feat, seq, batch = 5, 3, 7, 4
    x = [batch, seq, feat] if layout else [seq, batch, feat]
    inits = {"W": rand(dirs, gates * hidden, feat), "R": rand(dirs, gates * hidden, hidden)}
    ins = ["x", "W", "R"]
    if bias:
        inits["B"] = rand(dirs, 2 * gates * hidden)
        ins.append("B")
    # onnxruntime's CPU kernels do not take layout=1: onnx's inference is the oracle there.
    return one(f"{op}/layout{layout}_{direction}_{len([o for o in outs if o])}out", op, ins,
               {"x": (F, x)}, outs=outs, inits=inits, hidden_size=hidden, direction=direction,
               layout=layout, sym={} if layout else {"x": 1}, oracle="onnx" if layout else "ort")


add(
    recurrent("LSTM", 4, 0, "forward", ("y", "yh", "yc")),
    recurrent("LSTM", 4, 1, "bidirectional", ("y", "yh", "yc")),
    recurrent("LSTM", 4, 0, "reverse", ("", "yh")),
    recurrent("GRU", 3, 0, "bidirectional", ("y", "yh")),
    recurrent("GRU", 3, 1, "forward", ("y", "yh"), bias=False),
    recurrent("RNN", 1, 1, "bidirectional", ("y", "yh")),
    recurrent("RNN", 1, 0, "forward", ("y",)),
)

add(
    one("QuantizeLinear/uint8", "QuantizeLinear", ["x", "s", "z"], X4,
        inits={"s": const(0.1, np.float32), "z": const(128, np.uint8)}),
    one("QuantizeLinear/int8_axis", "QuantizeLinear", ["x", "s", "z"], X4,
        inits={"s": const([0.1, 0.2, 0.3], np.float32), "z": const([1, 2, 3], np.int8)}, axis=1),
    one("QuantizeLinear/no_zp", "QuantizeLinear", ["x", "s"], X3,
        inits={"s": const(0.1, np.float32)}),
    one("QuantizeLinear/output_dtype", "QuantizeLinear", ["x", "s"], X3,
        inits={"s": const(0.1, np.float32)}, output_dtype=I8, opset=21),
    one("DequantizeLinear", "DequantizeLinear", ["x", "s", "z"], {"x": (U8, [3, 13])},
        inits={"s": const(0.1, np.float32), "z": const(2, np.uint8)}),
    one("DequantizeLinear/int32", "DequantizeLinear", ["x", "s"], {"x": (I32, [3, 13])},
        inits={"s": const(0.1, np.float32)}),
    one("DynamicQuantizeLinear", "DynamicQuantizeLinear", ["x"], X3, outs=("y", "s", "z")),
    one("QuantizeLinear/blocked", "QuantizeLinear", ["x", "s", "z"], X3,
        inits={"s": np.full((3, 5), 0.1, np.float32), "z": np.zeros((3, 5), np.int8)}, axis=1, block_size=3,
        opset=21, sym={}),  # the scale's dim 0 is x's: a symbolic batch would contradict it
    one("DequantizeLinear/per_axis_last", "DequantizeLinear", ["x", "s", "z"], {"x": (I8, [2, 3, 13])},
        inits={"s": np.full(13, 0.1, np.float32), "z": np.zeros(13, np.int8)}, axis=-1),
)

# ---- shape ops -----------------------------------------------------------------------------

X = {"x": (F, [2, 3, 4, 5])}
add(
    one("Shape", "Shape", ["x"], X),
    one("Shape/start_end", "Shape", ["x"], X, start=1, end=-1),
    one("Shape/start_neg", "Shape", ["x"], X, start=-2),
    one("Shape/clamped", "Shape", ["x"], X, start=-9, end=10),
    one("Size", "Size", ["x"], X),
    one("Reshape/zero_and_minus1", "Reshape", ["x", "s"], X, inits={"s": const([0, -1, 5])}),
    one("Reshape/minus1_first", "Reshape", ["x", "s"], X, inits={"s": const([-1, 20])}),
    one("Reshape/flatten_all", "Reshape", ["x", "s"], X, inits={"s": const([-1])}),
    one("Reshape/keep_two", "Reshape", ["x", "s"], X, inits={"s": const([0, 0, -1])}),
    one("Reshape/allowzero_empty", "Reshape", ["x", "s"], {"x": (F, [0, 3, 4])},
        inits={"s": const([3, 0, 4])}, allowzero=1, sym={}),
    one("Reshape/allowzero_plain", "Reshape", ["x", "s"], X, inits={"s": const([6, 20])},
        allowzero=1, sym={}),
    one("Reshape/opset5", "Reshape", ["x", "s"], X, inits={"s": const([0, 12, -1])}, opset=5),
    one("Flatten/axis1", "Flatten", ["x"], X),
    one("Flatten/axis0", "Flatten", ["x"], X, axis=0),
    one("Flatten/axis_rank", "Flatten", ["x"], X, axis=4),
    one("Flatten/axis_neg", "Flatten", ["x"], X, axis=-1),
    one("Flatten/axis2", "Flatten", ["x"], X, axis=2),
    one("Transpose/default", "Transpose", ["x"], X),
    one("Transpose/perm", "Transpose", ["x"], X, perm=[0, 2, 3, 1]),
    one("Squeeze/axes_input", "Squeeze", ["x", "a"], {"x": (F, [3, 1, 13, 1])},
        inits={"a": const([-1, 1])}),
    one("Squeeze/no_axes", "Squeeze", ["x"], {"x": (F, [3, 1, 13, 1])}, sym={}),
    one("Squeeze/opset11_attr", "Squeeze", ["x"], {"x": (F, [3, 1, 13, 1])}, axes=[1, -1],
        opset=11),
    one("Unsqueeze/axes_input", "Unsqueeze", ["x", "a"], {"x": (F, [3, 13])},
        inits={"a": const([0, -1])}),
    one("Unsqueeze/middle", "Unsqueeze", ["x", "a"], {"x": (F, [3, 13])},
        inits={"a": const([3, 1])}),
    one("Unsqueeze/opset11_attr", "Unsqueeze", ["x"], {"x": (F, [3, 13])}, axes=[1, -1],
        opset=11),
    one("Unsqueeze/scalar", "Unsqueeze", ["x", "a"], {"x": (F, [])}, inits={"a": const([0])},
        sym={}),
    one("Concat/axis_neg", "Concat", ["a", "b", "c"],
        {"a": (F, [2, 3, 4]), "b": (F, [2, 3, 1]), "c": (F, [2, 3, 13])}, axis=-1,
        sym={"a": 0, "b": 0, "c": 0}),
    one("Concat/batch_axis", "Concat", ["a", "b"], {"a": (F, [2, 3]), "b": (F, [2, 3])},
        axis=0, sym={"a": 0, "b": 0}),
    one("Concat/batch_axis_mixed", "Concat", ["a", "b"], {"a": (F, [2, 3]), "b": (F, [4, 3])},
        axis=0, allow_unknown={"y": "N + 4 is a sum; tether's dims are monomials"}),
    one("Concat/symbol_meets_known", "Concat", ["a", "b"], {"a": (F, [5, 3]), "b": (F, [5, 4])},
        axis=1, batches=(5,)),
    one("Concat/one", "Concat", ["a"], {"a": (F, [2, 3])}, axis=1),
    one("Split/sizes_input", "Split", ["x", "s"], {"x": (F, [2, 13, 4])}, outs=("p", "q", "r"),
        inits={"s": const([3, 4, 6])}, axis=1),
    one("Split/opset17_equal", "Split", ["x"], {"x": (F, [2, 12, 4])}, outs=("p", "q", "r"),
        axis=-2, opset=17),
    one("Split/num_outputs_uneven", "Split", ["x"], {"x": (F, [2, 13, 4])},
        outs=("p", "q", "r", "t"), axis=1, num_outputs=4),
    one("Split/num_outputs_even", "Split", ["x"], {"x": (F, [2, 3, 12])}, outs=("p", "q", "r"),
        axis=-1, num_outputs=3),
    one("Split/batch_num_outputs", "Split", ["x"], {"x": (F, [6, 3])}, outs=("p", "q"),
        num_outputs=2, sym={}),
    one("Split/opset11_attr", "Split", ["x"], {"x": (F, [2, 13, 4])}, outs=("p", "q"),
        axis=1, split=[6, 7], opset=11),
    one("Split/opset11_equal", "Split", ["x"], {"x": (F, [2, 12, 4])}, outs=("p", "q"),
        axis=1, opset=11),
    one("Split/opset13_equal", "Split", ["x"], {"x": (F, [2, 12, 4])}, outs=("p", "q", "r", "t"),
        axis=1, opset=13),
)
add(
    one("Slice/opset9_attrs", "Slice", ["x"], X, starts=[1, -3], ends=[3, 100], axes=[1, 3],
        opset=9),
    one("Slice/opset9_no_axes", "Slice", ["x"], X, starts=[0, 1], ends=[1, 1000], opset=9,
        sym={"x": 2}),
    one("Slice/basic", "Slice", ["x", "s", "e"], X, inits={"s": const([0, 1]),
                                                           "e": const([1, 3])}, sym={}),
    one("Slice/axes_steps", "Slice", ["x", "s", "e", "a", "t"], X,
        inits={"s": const([1, 4]), "e": const([INT_MAX, 0]), "a": const([1, -1]),
               "t": const([2, -2])}),
    one("Slice/negative_step_all", "Slice", ["x", "s", "e", "a", "t"], X,
        inits={"s": const([-1]), "e": const([-INT_MAX]), "a": const([2]), "t": const([-1])}),
    one("Slice/clamped", "Slice", ["x", "s", "e", "a"], X,
        inits={"s": const([-100, 2]), "e": const([100, 1]), "a": const([3, 2])}),
    one("Slice/int32", "Slice", ["x", "s", "e", "a", "t"], X,
        inits={"s": const([1], np.int32), "e": const([13], np.int32), "a": const([2], np.int32),
               "t": const([3], np.int32)}),
    one("Slice/batch_whole", "Slice", ["x", "s", "e", "a"], X,
        inits={"s": const([0, 1]), "e": const([INT_MAX, 3]), "a": const([0, 1])}),
    one("Slice/flip_batch", "Slice", ["x", "s", "e", "a", "t"], X,
        inits={"s": const([-1]), "e": const([-INT_MAX]), "a": const([0]), "t": const([-1])}),
    one("Slice/whole_from_min", "Slice", ["x", "s", "e"], X,
        inits={"s": const([-INT_MAX]), "e": const([INT_MAX])}),
    one("Slice/batch_from_1", "Slice", ["x", "s", "e", "a"], X,
        inits={"s": const([1]), "e": const([INT_MAX]), "a": const([0])}, sym={}),
    one("Gather/axis0", "Gather", ["x", "i"], X, inits={"i": const([1, 0, 1])}, sym={"x": 1}),
    one("Gather/axis_neg", "Gather", ["x", "i"], X, inits={"i": const([[-1, 0], [2, 3]])},
        axis=-1),
    one("Gather/scalar_index", "Gather", ["x", "i"], X, inits={"i": const(-2)}, axis=1),
    one("Gather/int32_index", "Gather", ["x", "i"], X, inits={"i": const([2], np.int32)}, axis=2),
    one("Gather/embedding", "Gather", ["e", "i"], {"i": (I64, [2, 7])},
        inits={"e": rand(13, 4)}),
    one("GatherElements", "GatherElements", ["x", "i"], {"x": (F, [3, 13])},
        inits={"i": const([[0, 2], [1, 1], [12, 0]])}, axis=1, sym={}),
    one("GatherND", "GatherND", ["x", "i"], {"x": (F, [2, 3, 4])},
        inits={"i": const([[0, 1], [1, 2]])}, sym={}),
    one("GatherND/batch_dims", "GatherND", ["x", "i"], {"x": (F, [2, 3, 4])},
        inits={"i": const([[[1]], [[2]]])}, batch_dims=1, sym={}),
    one("ScatterND", "ScatterND", ["x", "i", "u"], {"x": (F, [4, 3])},
        inits={"i": const([[1], [3]]), "u": rand(2, 3)}, sym={}),
    one("Scatter/opset10", "Scatter", ["x", "i", "u"], {"x": (F, [4, 3])},
        inits={"i": const([[1, 0, 2]]), "u": rand(1, 3)}, axis=0, opset=10, sym={}),
    one("ScatterElements", "ScatterElements", ["x", "i", "u"], {"x": (F, [4, 3])},
        inits={"i": const([[1, 0, 2]]), "u": rand(1, 3)}, axis=0, sym={}),
    one("Expand/rank_up", "Expand", ["x", "s"], {"x": (F, [3, 1])},
        inits={"s": const([2, 1, 13])}, sym={}),
    one("Expand/shorter_shape", "Expand", ["x", "s"], {"x": (F, [2, 3, 1])},
        inits={"s": const([1, 13])}),
    one("Expand/ones", "Expand", ["x", "s"], {"x": (F, [2, 1, 4])},
        inits={"s": const([1, 1, 1, 1])}),
    one("Tile", "Tile", ["x", "r"], {"x": (F, [2, 3, 1])}, inits={"r": const([1, 2, 13])}),
    one("Tile/batch", "Tile", ["x", "r"], {"x": (F, [2, 3])}, inits={"r": const([3, 1])}),
    one("Pad/constant", "Pad", ["x", "p"], X, inits={"p": const([0, 1, 2, 0, 0, 2, 1, 3])}),
    one("Pad/negative", "Pad", ["x", "p", "v"], X,
        inits={"p": const([0, 0, -1, 1, 0, -1, 0, 2]), "v": const(1.5, np.float32)}),
    one("Pad/axes", "Pad", ["x", "p", "", "a"], X, inits={"p": const([1, 2, 2, 1]),
                                                          "a": const([-1, 1])}, mode="reflect"),
    one("Pad/batch", "Pad", ["x", "p"], {"x": (F, [2, 3])}, inits={"p": const([1, 0, 2, 0])},
        mode="edge", allow_unknown={"y": "N + 3 is a sum; tether's dims are monomials"}),
    one("Pad/opset10_attr", "Pad", ["x"], X, pads=[0, 0, 1, 2, 0, 0, 3, 4], opset=10),
    one("Pad/opset2_attr", "Pad", ["x"], X, pads=[0, 1, 1, 2, 0, 1, 3, 4], opset=2),
    one("TopK/last", "TopK", ["x", "k"], X, outs=("v", "i"), inits={"k": const([3])}),
    one("TopK/axis1", "TopK", ["x", "k"], X, outs=("v", "i"), inits={"k": const([2])}, axis=1,
        largest=0),
    one("TopK/opset9_attr", "TopK", ["x"], X, outs=("v", "i"), k=4, axis=-2, opset=9),
    one("NonZero", "NonZero", ["x"], {"x": (B, [3, 13])},
        allow_unknown={"y": "the count of non-zeros depends on data"},
        static_unknown={"y": "the count of non-zeros depends on data"}),
    one("OneHot/last", "OneHot", ["i", "d", "v"], {"i": (I64, [3, 4])},
        inits={"d": const(13), "v": const([0, 1], np.float32)}),
    one("OneHot/axis0", "OneHot", ["i", "d", "v"], {"i": (I64, [3, 4])},
        inits={"d": const([5.0], np.float32), "v": const([0, 1], np.float32)}, axis=0),
)

# ---- detection, sampling, signal, attention: rules added with these tests ------------------

Q8 = {"as": const(0.1, np.float32), "az": const(1, np.uint8), "b": np.ones((4, 5), np.uint8),
      "bs": const(0.1, np.float32), "bz": const(1, np.uint8), "ys": const(0.1, np.float32)}
DATA = "the count depends on the data"
add(
    one("QLinearMatMul/uint8", "QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
        {"a": (U8, [2, 3, 4])}, inits={**Q8, "yz": const(1, np.uint8)}),
    one("QLinearMatMul/int8", "QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
        {"a": (I8, [3, 4])}, inits={**Q8, "az": const(1, np.int8), "b": np.ones((4, 5), np.int8),
                                    "bz": const(1, np.int8), "yz": const(1, np.int8)}),
    one("Det", "Det", ["x"], {"x": (F, [2, 3, 3])}),
    one("Det/single", "Det", ["x"], {"x": (F, [3, 3])}, sym={}),
    one("GridSample", "GridSample", ["x", "g"], {"x": (F, [2, 3, 13, 7]), "g": (F, [2, 5, 6, 2])},
        sym={"x": 0, "g": 0}),
    one("GridSample/3d", "GridSample", ["x", "g"], {"x": (F, [1, 2, 4, 5, 6]),
                                                    "g": (F, [1, 3, 2, 7, 3])}, opset=20,
        sym={"x": 0, "g": 0}),
    one("AffineGrid", "AffineGrid", ["t", "s"], {"t": (F, [2, 2, 3])},
        inits={"s": const([2, 3, 5, 7])}, sym={}),
    one("RoiAlign", "RoiAlign", ["x", "r", "b"], {"x": (F, [2, 3, 13, 7])},
        inits={"r": np.array([[0, 0, 3, 3]] * 4, np.float32), "b": const([0, 1, 1, 0])},
        output_height=3, output_width=2, sym={}),
    one("RoiAlign/rois_input", "RoiAlign", ["x", "r", "b"], {"r": (F, [4, 4]), "b": (I64, [4])},
        inits={"x": rand(2, 3, 13, 7)}, sym={"r": 0, "b": 0},
        feeds=lambda s: {"r": np.tile(np.float32([1, 0, 4, 5]), (s["r"][0], 1)),
                         "b": np.zeros(s["b"], np.int64)}),
    one("MaxRoiPool", "MaxRoiPool", ["x", "r"], {"x": (F, [2, 3, 13, 7])},
        inits={"r": np.array([[0, 1, 1, 5, 5], [1, 0, 0, 3, 2]], np.float32)},
        pooled_shape=[2, 3], sym={}),
    one("NonMaxSuppression", "NonMaxSuppression", ["b", "s", "m"],
        {"b": (F, [2, 7, 4]), "s": (F, [2, 3, 7])}, inits={"m": const([2])},
        sym={"b": 0, "s": 0}, allow_unknown={"y": DATA}, static_unknown={"y": DATA}),
    one("Unique/flat", "Unique", ["x"], {"x": (I64, [3, 13])}, outs=("y", "i", "inv", "c"),
        allow_unknown={o: DATA for o in "y i c".split()},
        static_unknown={o: DATA for o in "y i c".split()}),
    one("Unique/axis", "Unique", ["x"], {"x": (I64, [3, 4])}, outs=("y", "i", "inv", "c"),
        axis=-1, allow_unknown={o: DATA for o in "y i c".split()},
        static_unknown={o: DATA for o in "y i c".split()}),
    one("Compress/axis", "Compress", ["x", "c"], {"x": (F, [3, 4])},
        inits={"c": np.array([1, 0, 1, 1], bool)}, axis=-1),
    one("Compress/short_condition", "Compress", ["x", "c"], {"x": (F, [5, 4])},
        inits={"c": np.array([0, 1, 1], bool)}, axis=0, sym={}),
    one("Compress/flat", "Compress", ["x", "c"], {"x": (F, [2, 3])},
        inits={"c": np.array([1, 0, 1, 1, 0], bool)}, sym={}),
    one("Compress/computed_condition", "Compress", ["x", "c"], {"x": (F, [3, 4]), "c": (B, [4])},
        axis=1, sym={"x": 0}, allow_unknown={"y": DATA}, static_unknown={"y": DATA}),
    one("MaxUnpool", "MaxUnpool", ["x", "i"], {"x": (F, [1, 1, 2, 2])},
        inits={"i": const([[[[0, 3], [10, 15]]]])}, kernel_shape=[2, 2], strides=[2, 2], sym={}),
    one("MaxUnpool/pads", "MaxUnpool", ["x", "i"], {"x": (F, [1, 1, 3, 2])},
        inits={"i": const([[[[0, 3], [10, 15], [17, 2]]]])}, kernel_shape=[3, 2],
        strides=[2, 2], pads=[1, 0, 0, 1], sym={}),
    one("MaxUnpool/output_shape", "MaxUnpool", ["x", "i", "o"], {"x": (F, [1, 1, 2, 2])},
        inits={"i": const([[[[0, 3], [10, 15]]]]), "o": const([1, 1, 5, 5])},
        kernel_shape=[2, 2], strides=[2, 2], sym={}),
    one("Col2Im", "Col2Im", ["x", "i", "b"], {"x": (F, [2, 12, 30])},
        inits={"i": const([6, 7]), "b": const([2, 2])}),
    one("CenterCropPad", "CenterCropPad", ["x", "s"], {"x": (F, [2, 5, 7])},
        inits={"s": const([3, 9])}, axes=[1, -1]),
    one("CenterCropPad/all_axes", "CenterCropPad", ["x", "s"], {"x": (F, [2, 5, 7])},
        inits={"s": const([2, 6, 4])}, sym={}),
    one("Attention/4d", "Attention", ["q", "k", "v"],
        {"q": (F, [2, 4, 5, 8]), "k": (F, [2, 2, 7, 8]), "v": (F, [2, 2, 7, 6])},
        outs=("y", "pk", "pv"), opset=23, sym={"q": 0, "k": 0, "v": 0}),
    one("Attention/3d_gqa", "Attention", ["q", "k", "v"],
        {"q": (F, [2, 5, 32]), "k": (F, [2, 7, 16]), "v": (F, [2, 7, 12])}, q_num_heads=4,
        kv_num_heads=2, opset=23, sym={"q": 0, "k": 0, "v": 0}),
    one("Attention/past", "Attention", ["q", "k", "v", "", "pk_in", "pv_in"],
        {"q": (F, [2, 4, 1, 8]), "k": (F, [2, 4, 1, 8]), "v": (F, [2, 4, 1, 8]),
         "pk_in": (F, [2, 4, 6, 8]), "pv_in": (F, [2, 4, 6, 8])},
        outs=("y", "pk", "pv", "qk"), opset=23,
        sym={n: 0 for n in ["q", "k", "v", "pk_in", "pv_in"]}),
    one("RotaryEmbedding", "RotaryEmbedding", ["x", "c", "s", "p"], {"x": (F, [2, 4, 5, 8])},
        inits={"c": rand(10, 4), "s": rand(10, 4), "p": const([[0, 1, 2, 3, 4]] * 2)}, opset=23,
        sym={}),
    one("HannWindow", "HannWindow", ["n"], {}, inits={"n": const(13)}, sym={}),
    one("HammingWindow/double", "HammingWindow", ["n"], {}, inits={"n": const(7, np.int32)},
        output_datatype=D, sym={}),
    one("BlackmanWindow", "BlackmanWindow", ["n"], {}, inits={"n": const(1)}, periodic=0, sym={}),
    one("MelWeightMatrix", "MelWeightMatrix", ["n", "d", "r", "lo", "hi"], {},
        inits={"n": const(8), "d": const(18), "r": const(8000), "lo": const(0., np.float32),
               "hi": const(4000., np.float32)}, sym={}),
    one("DFT/onesided_length", "DFT", ["x", "l", "a"], {"x": (F, [2, 13, 1])},
        inits={"l": const(16), "a": const(1)}, onesided=1),
    one("DFT/complex_default_axis", "DFT", ["x"], {"x": (F, [2, 13, 2])}),
    one("DFT/inverse_neg_axis", "DFT", ["x", "", "a"], {"x": (F, [3, 5, 7, 2])},
        inits={"a": const(-3)}, inverse=1),
    one("DFT/opset17_attr", "DFT", ["x"], {"x": (F, [2, 13, 1])}, axis=1, onesided=1, opset=17),
    one("STFT", "STFT", ["x", "st", "w"], {"x": (F, [2, 64, 1])},
        inits={"st": const(8), "w": rand(16)}),
    one("STFT/frame_length", "STFT", ["x", "st", "", "fl"], {"x": (F, [2, 61, 1])},
        inits={"st": const(5), "fl": const(13)}),
    # onnxruntime applies onesided to a complex signal; the spec says a complex input has
    # no onesided output, and onnx's inference gives all 12 bins.
    one("STFT/complex_signal", "STFT", ["x", "st", "", "fl"], {"x": (F, [2, 61, 2])},
        inits={"st": const(5), "fl": const(12)}, oracle="onnx", sym={}),
    one("Multinomial", "Multinomial", ["x"], {"x": (F, [3, 5])}, sample_size=7),
    one("Multinomial/int64", "Multinomial", ["x"], {"x": (F, [3, 5])}, dtype=I64),
    one("NegativeLogLikelihoodLoss/none", "NegativeLogLikelihoodLoss", ["x", "t"],
        {"x": (F, [3, 5, 2])}, inits={"t": const([[0, 1], [2, 3], [4, 0]])}, reduction="none",
        sym={}),
    one("NegativeLogLikelihoodLoss/mean", "NegativeLogLikelihoodLoss", ["x", "t", "w"],
        {"x": (F, [3, 5])}, inits={"t": const([0, 1, 4]), "w": rand(5)}, sym={}),
    one("SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLoss", ["x", "t"], {"x": (F, [3, 5])},
        outs=("y", "lp"), inits={"t": const([0, 1, 2])}, sym={}),
    one("DeformConv", "DeformConv", ["x", "w", "off"], {"x": (F, [2, 3, 13, 13])},
        inits={"w": rand(4, 3, 3, 3), "off": rand(2, 18, 6, 6)}, strides=[2, 2], sym={}),
    one("CumProd", "CumProd", ["x", "a"], {"x": (F, [3, 5])}, inits={"a": const(-1)}, opset=26),
    one("TensorScatter", "TensorScatter", ["c", "u"], {"c": (F, [2, 3, 8, 4]),
                                                       "u": (F, [2, 3, 1, 4])},
        opset=24, sym={"c": 0, "u": 0}),
    one("StringConcat", "StringConcat", ["a", "b"], {"a": (S, [3, 1]), "b": (S, [4])}),
    one("RegexFullMatch", "RegexFullMatch", ["a"], {"a": (S, [3, 4])}, pattern="a.*"),
    one("SoftmaxCrossEntropyLoss/none", "SoftmaxCrossEntropyLoss", ["x", "t"],
        {"x": (F, [3, 5, 2]), "t": (I64, [3, 2])}, outs=("y", "lp"), reduction="none",
        sym={"x": 0, "t": 0}),
)

# ---- reductions ----------------------------------------------------------------------------

XRd = {"x": (F, [2, 3, 13, 1])}
for op in ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
           "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]:
    add(one(f"{op}/axes_input", op, ["x", "a"], XRd, inits={"a": const([-2, 1])}, opset=18),
        one(f"{op}/axes_attr", op, ["x"], XRd, axes=[1, -1], keepdims=0,
            opset=11 if op == "ReduceSum" else 17))
add(
    one("ReduceSum/opset11_attr", "ReduceSum", ["x"], XRd, axes=[-1, 2], opset=11),
    one("ReduceSum/all", "ReduceSum", ["x"], XRd, keepdims=0, sym={}),
    one("ReduceSum/all_keep", "ReduceSum", ["x"], XRd),
    one("ReduceSum/noop", "ReduceSum", ["x"], XRd, noop_with_empty_axes=1),
    one("ReduceSum/empty_axes_input", "ReduceSum", ["x", "a"], XRd,
        inits={"a": np.zeros((0,), np.int64)}, keepdims=0, sym={}),
    one("ReduceMean/batch", "ReduceMean", ["x", "a"], XRd, inits={"a": const([0])}, keepdims=0),
    one("ArgMax/keep", "ArgMax", ["x"], XRd, axis=-2),
    one("ArgMax/drop", "ArgMax", ["x"], XRd, axis=1, keepdims=0, select_last_index=1),
    one("ArgMin/default", "ArgMin", ["x"], XRd),
)

# ---- constants, generators, control flow ---------------------------------------------------


def graph_case(cid: str, nodes: list[onnx.NodeProto], inputs: dict[str, tuple[int, list[int]]],
               outputs: list[str], **kw: Any) -> Case:
    inits = kw.pop("inits", {})
    return Case(cid, nodes, inputs, outputs, inits, **kw)


def branch(name: str, shape: list[int], value: float) -> onnx.GraphProto:
    t = helper.make_tensor("v", F, shape, [value] * int(np.prod(shape)))
    return helper.make_graph([node("Constant", [], ["o"], name=f"{name}_c", value=t)], name, [],
                             [helper.make_tensor_value_info("o", F, shape)])


LOOP_BODY = helper.make_graph(
    [node("Identity", ["c_in"], ["c_out"], name="body_cond"),
     node("Add", ["acc_in", "one"], ["acc_out"], name="body_add"),
     node("Identity", ["acc_out"], ["scan"], name="body_scan")],
    "body",
    [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("c_in", B, []),
     helper.make_tensor_value_info("acc_in", F, [3, 2])],
    [helper.make_tensor_value_info("c_out", B, []),
     helper.make_tensor_value_info("acc_out", F, [3, 2]),
     helper.make_tensor_value_info("scan", F, [3, 2])],
    [onnx.numpy_helper.from_array(np.ones((3, 2), np.float32), "one")],
)

add(
    graph_case("Constant/value", [node("Constant", [], ["c"], value=onnx.numpy_helper.from_array(
        rand(3, 13))), node("Add", ["x", "c"], ["y"])], X3, ["c", "y"], sym={}),
    graph_case("Constant/value_ints", [node("Constant", [], ["y"], value_ints=[1, 2, 3])], {},
               ["y"], sym={}),
    graph_case("Constant/value_float", [node("Constant", [], ["y"], value_float=2.0)], {}, ["y"],
               sym={}),
    graph_case("Constant/value_int", [node("Constant", [], ["y"], value_int=2)], {}, ["y"], sym={}),
    one("ConstantOfShape/const", "ConstantOfShape", ["s"], {}, inits={"s": const([3, 1, 13])},
        value=helper.make_tensor("v", I32, [1], [7]), sym={}),
    one("ConstantOfShape/default", "ConstantOfShape", ["s"], {}, inits={"s": const([2, 5])},
        sym={}),
    one("Range/int", "Range", ["a", "b", "c"], {}, inits={"a": const(1), "b": const(13),
                                                         "c": const(3)}, sym={}),
    one("Range/float_neg", "Range", ["a", "b", "c"], {},
        inits={"a": const(5, np.float32), "b": const(-2.5, np.float32),
               "c": const(-1.5, np.float32)}, sym={}),
    one("Range/empty", "Range", ["a", "b", "c"], {},
        inits={"a": const(5), "b": const(2), "c": const(1)}, sym={}),
    one("EyeLike", "EyeLike", ["x"], {"x": (F, [3, 13])}, k=1, sym={}),
    one("EyeLike/dtype", "EyeLike", ["x"], {"x": (F, [4, 4])}, dtype=I64, sym={}),
    one("RandomNormal", "RandomNormal", [], {}, shape=[3, 13], sym={}),
    one("RandomUniform/double", "RandomUniform", [], {}, shape=[2, 1, 3], dtype=D, sym={}),
    one("RandomNormalLike", "RandomNormalLike", ["x"], X4),
    one("RandomUniformLike/dtype", "RandomUniformLike", ["x"], X3, dtype=D),
    one("Bernoulli", "Bernoulli", ["x"], X3),
    one("If/same", "If", ["c"], {"c": (B, [])}, then_branch=branch("t", [3, 2], 1.0),
        else_branch=branch("e", [3, 2], 2.0), sym={}, feeds=lambda s: {"c": np.array(True)}),
    one("If/differ", "If", ["c"], {"c": (B, [])}, then_branch=branch("t", [3, 2], 1.0),
        else_branch=branch("e", [3, 5], 2.0), sym={}, feeds=lambda s: {"c": np.array(False)},
        static_unknown={"y": "the branches give 2 and 5 columns: which one runs is data"}),
    one("Loop/scan", "Loop", ["m", "", "a"], {"a": (F, [3, 2])}, outs=("acc", "scans"),
        inits={"m": const(4)}, body=LOOP_BODY, sym={},
        static_unknown={"scans": "the trip count is data (the loop may stop early)"}),
)

# ---- shape values: Shape -> Gather -> Unsqueeze -> Concat -> Reshape and friends -----------

XS = {"x": (F, [5, 3, 4])}


def chain(cid: str, nodes: list[onnx.NodeProto], inits: dict[str, np.ndarray],
          inputs: dict[str, tuple[int, list[int]]] | None = None,
          outputs: tuple[str, ...] = ("y",), **kw: Any) -> Case:
    return Case(f"values/{cid}", nodes, inputs or XS, list(outputs), inits, **kw)


add(
    chain("gather_unsqueeze_concat_reshape", [
        node("Shape", ["x"], ["s"]),
        node("Gather", ["s", "i0"], ["n"], axis=0),
        node("Unsqueeze", ["n", "ax"], ["n1"]),
        node("Concat", ["n1", "rest"], ["t"], axis=0),
        node("Reshape", ["x", "t"], ["y"]),
    ], {"i0": const(0), "ax": const([0]), "rest": const([-1])}),
    chain("gather_product_reshape", [
        node("Shape", ["x"], ["s"]),
        node("Gather", ["s", "i0"], ["n"], axis=0),
        node("Gather", ["s", "i1"], ["c"], axis=0),
        node("Gather", ["s", "i2"], ["w"], axis=0),
        node("Mul", ["c", "w"], ["cw"]),
        node("Unsqueeze", ["n", "ax"], ["n1"]),
        node("Unsqueeze", ["cw", "ax"], ["cw1"]),
        node("Concat", ["n1", "cw1"], ["t"], axis=0),
        node("Reshape", ["x", "t"], ["y"]),
    ], {"i0": const(0), "i1": const(1), "i2": const(2), "ax": const([0])}),
    chain("batch_times_const", [
        node("Shape", ["x"], ["s"]),
        node("Gather", ["s", "i0"], ["n"], axis=0),
        node("Mul", ["n", "two"], ["n2"]),
        node("Unsqueeze", ["n2", "ax"], ["n21"]),
        node("Concat", ["n21", "six"], ["t"], axis=0),
        node("Reshape", ["x", "t"], ["y"]),
    ], {"i0": const(0), "two": const(2), "ax": const([0]), "six": const([6])}),
    chain("slice_concat", [
        node("Shape", ["x"], ["s"]),
        node("Slice", ["s", "st", "en"], ["head"]),
        node("Concat", ["head", "rest"], ["t"], axis=0),
        node("Reshape", ["x", "t"], ["y"]),
    ], {"st": const([0]), "en": const([1]), "rest": const([-1])}),
    chain("slice_tail_negative", [
        node("Shape", ["x"], ["s"]),
        node("Slice", ["s", "st", "en"], ["tail"]),
        node("Concat", ["m1", "tail"], ["t"], axis=0),
        node("Reshape", ["x", "t"], ["y"]),
    ], {"st": const([-2]), "en": const([INT_MAX]), "m1": const([-1])}),
    chain("shape_start_end", [
        node("Shape", ["x"], ["s"], start=0, end=1),
        node("Concat", ["s", "rest"], ["t"], axis=0),
        node("Reshape", ["x", "t"], ["y"]),
    ], {"rest": const([4, 3])}),
    chain("size_div", [
        node("Size", ["x"], ["n"]),
        node("Div", ["n", "twelve"], ["b"]),
        node("Unsqueeze", ["b", "ax"], ["b1"]),
        node("Concat", ["b1", "rest"], ["t"], axis=0),
        node("Reshape", ["x", "t"], ["y"]),
    ], {"twelve": const(12), "ax": const([0]), "rest": const([2, 6])}),
    chain("cast_roundtrip", [
        node("Shape", ["x"], ["s"]),
        node("Cast", ["s"], ["s32"], name="to32", to=I32),
        node("Cast", ["s32"], ["s64"], name="to64", to=I64),
        node("Reshape", ["x", "s64"], ["y"]),
    ], {}),
    chain("shape_output_itself", [node("Shape", ["x"], ["y"])], {}),
    chain("size_output_itself", [node("Size", ["x"], ["y"])], {}),
    chain("constant_of_shape", [
        node("Shape", ["x"], ["s"]),
        node("ConstantOfShape", ["s"], ["y"], value=helper.make_tensor("v", I64, [1], [1])),
    ], {}),
    chain("expand_to_computed", [
        node("Shape", ["x"], ["s"]),
        node("Gather", ["s", "i0"], ["n"], axis=0),
        node("Unsqueeze", ["n", "ax"], ["n1"]),
        node("Concat", ["n1", "four"], ["t"], axis=0),
        node("Expand", ["row", "t"], ["y"]),
    ], {"i0": const(0), "ax": const([0]), "four": const([1, 4]), "row": rand(3, 1)}),
    chain("expand_to_shape", [
        node("Shape", ["x"], ["s"]),
        node("Expand", ["col", "s"], ["y"]),
    ], {"col": rand(3, 1)}),
    chain("div_sub_add", [
        node("Shape", ["x"], ["s"]),
        node("Gather", ["s", "i12"], ["cw"], axis=0),
        node("Sub", ["cw", "one"], ["cw_m1"]),
        node("Add", ["cw_m1", "one"], ["cw2"]),
        node("Div", ["cw2", "two"], ["half"]),
        node("Concat", ["m1", "half", "two1"], ["t"], axis=0),
        node("Reshape", ["x", "t"], ["y"]),
    ], {"i12": const([2]), "one": const([1]), "two": const([2]), "m1": const([-1]),
        "two1": const([2])}),
    chain("squeeze_scalar", [
        node("Shape", ["x"], ["s"]),
        node("Slice", ["s", "st", "en"], ["n1"]),
        node("Squeeze", ["n1", "ax"], ["n"]),
        node("Unsqueeze", ["n", "ax"], ["n2"]),
        node("Concat", ["n2", "rest"], ["t"], axis=0),
        node("Reshape", ["x", "t"], ["y"]),
    ], {"st": const([0]), "en": const([1]), "ax": const([0]), "rest": const([12])}),
    chain("range_positions", [
        node("Shape", ["x"], ["s"]),
        node("Gather", ["s", "i0"], ["n"], axis=0),
        node("Range", ["zero", "n", "one"], ["y"]),
    ], {"i0": const(0), "zero": const(0), "one": const(1)}),
    chain("max_of_values", [
        node("Shape", ["x"], ["s"]),
        node("Max", ["s", "ones"], ["t"]),
        node("Reshape", ["x", "t"], ["y"]),
    ], {"ones": const([1, 1, 1])}, allow_unknown={"y": "max(N, 1) is N only when N >= 1"}),
    chain("torch_attention_heads", [
        node("Shape", ["x"], ["s"]),
        node("Gather", ["s", "i0"], ["b"], axis=0),
        node("Gather", ["s", "i1"], ["t"], axis=0),
        node("Unsqueeze", ["b", "ax"], ["b1"]),
        node("Unsqueeze", ["t", "ax"], ["t1"]),
        node("Concat", ["b1", "t1", "heads"], ["target"], axis=0),
        node("Reshape", ["x", "target"], ["r"]),
        node("Transpose", ["r"], ["y"], perm=[0, 2, 1, 3]),
    ], {"i0": const(0), "i1": const(1), "ax": const([0]), "heads": const([2, 2])}),
    chain("torchscript_expand_minus_one", [
        # x.expand(b, -1, -1) as the TorchScript exporter writes it.
        node("Shape", ["x"], ["s"]),
        node("Gather", ["s", "i0"], ["b"], axis=0),
        node("Unsqueeze", ["b", "ax"], ["b1"]),
        node("Concat", ["b1", "m1", "m1"], ["target"], axis=0),
        node("Shape", ["target"], ["len"]),
        node("ConstantOfShape", ["len"], ["ones"], value=helper.make_tensor("v", I64, [1], [1])),
        node("Mul", ["ones", "minus"], ["neg"]),
        node("Equal", ["target", "neg"], ["is_neg"]),
        node("Where", ["is_neg", "ones", "target"], ["fixed"]),
        node("Expand", ["p", "fixed"], ["y"]),
    ], {"i0": const(0), "ax": const([0]), "m1": const([-1]), "minus": const(-1),
        "p": rand(1, 3, 4)}),
    chain("mul_per_entry", [
        node("Shape", ["x"], ["s"]),
        node("Mul", ["s", "k"], ["t"]),
        node("ConstantOfShape", ["t"], ["y"]),
    ], {"k": const([1, 2, 1])}),
    chain("pads_from_shape", [
        node("Shape", ["x"], ["s"]),
        node("Gather", ["s", "i2"], ["w"], axis=0),
        node("Div", ["w", "two"], ["half"]),
        node("Concat", ["zeros", "half", "zeros", "one"], ["pads"], axis=0),
        node("Pad", ["x", "pads"], ["y"]),
    ], {"i2": const([2]), "two": const([2]), "zeros": const([0, 0]), "one": const([1])}),
    chain("constant_node_target", [
        node("Constant", [], ["t"], value_ints=[0, -1]),
        node("Reshape", ["x", "t"], ["y"]),
    ], {}),
    chain("shape_of_matmul", [
        node("MatMul", ["x", "w"], ["m"]),
        node("Shape", ["m"], ["s"]),
        node("Gather", ["s", "i"], ["last"], axis=0),
        node("Reshape", ["m", "sh"], ["y"]),
    ], {"w": rand(4, 6), "i": const([-1]), "sh": const([-1, 6])}, outputs=("y", "last")),
)


# ---- a transformer block with batch N and sequence S both symbolic -------------------------

NS = {"x": {0: "N", 1: "S"}}


def heads(src: str, dst: str, perm: list[int]) -> list[onnx.NodeProto]:
    """[N, S, 8] -> [N, S, 2, 4] through a Shape-computed target, then transposed."""
    return [node("Reshape", [src, "split_target"], [f"{dst}_r"]),
            node("Transpose", [f"{dst}_r"], [dst], perm=perm)]


add(Case("block/attention_ns", [
    node("Shape", ["x"], ["s"]),
    node("Gather", ["s", "i0"], ["b"], axis=0),
    node("Gather", ["s", "i1"], ["t"], axis=0),
    node("Unsqueeze", ["b", "ax0"], ["b1"]),
    node("Unsqueeze", ["t", "ax0"], ["t1"]),
    node("Concat", ["b1", "t1", "hd"], ["split_target"], axis=0),
    node("MatMul", ["x", "wq"], ["q"]),
    node("MatMul", ["x", "wk"], ["k"]),
    node("MatMul", ["x", "wv"], ["v"]),
    *heads("q", "qh", [0, 2, 1, 3]),
    *heads("k", "kt", [0, 2, 3, 1]),
    *heads("v", "vh", [0, 2, 1, 3]),
    node("MatMul", ["qh", "kt"], ["scores"]),
    node("Range", ["zero", "t", "one"], ["pos"]),
    node("Unsqueeze", ["pos", "ax0"], ["row"]),
    node("Unsqueeze", ["pos", "ax1"], ["col"]),
    node("Greater", ["row", "col"], ["future"]),
    node("Where", ["future", "ninf", "fzero"], ["mask"]),
    node("Add", ["scores", "mask"], ["masked"]),
    node("Softmax", ["masked"], ["probs"], axis=-1),
    node("Einsum", ["probs", "vh"], ["ctx"], equation="bhqk,bhkd->bhqd"),
    node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
    node("Reshape", ["ctx_t", "merge"], ["merged"]),
    node("LayerNormalization", ["merged", "g"], ["y"], axis=-1),
    node("Flatten", ["y"], ["rows"], axis=2),
    node("Gemm", ["rows", "wo"], ["proj"], transB=1),
    node("Concat", ["b1", "t1", "m1"], ["back_target"], axis=0),
    node("Reshape", ["proj", "back_target"], ["out"]),
], {"x": (F, [2, 7, 8])}, ["scores", "mask", "probs", "y", "rows", "out"],
    {"i0": const(0), "i1": const(1), "ax0": const([0]), "ax1": const([1]), "hd": const([2, 4]),
     "wq": rand(8, 8, seed=1), "wk": rand(8, 8, seed=2), "wv": rand(8, 8, seed=3),
     "zero": const(0), "one": const(1), "ninf": const(-1e9, np.float32),
     "fzero": const(0, np.float32), "merge": const([0, 0, -1]), "g": rand(8),
     "wo": rand(6, 8), "m1": const([-1])}, sym=NS))
add(
    one("MatMul/ns", "MatMul", ["a", "b"], {"a": (F, [2, 7, 8]), "b": (F, [8, 3])},
        sym={"a": {0: "N", 1: "S"}}),
    one("Einsum/ns_scores", "Einsum", ["a", "b"], {"a": (F, [2, 4, 7, 8]), "b": (F, [2, 4, 7, 8])},
        equation="bhqd,bhkd->bhqk", sym={"a": {0: "N", 2: "S"}, "b": {0: "N", 2: "S"}}),
    one("Reshape/ns_merge", "Reshape", ["x", "s"], {"x": (F, [2, 7, 8])},
        inits={"s": const([-1, 8])}, sym=NS),
    one("Flatten/ns", "Flatten", ["x"], {"x": (F, [2, 7, 8])}, axis=2, sym=NS),
    one("Transpose/ns", "Transpose", ["x"], {"x": (F, [2, 7, 8])}, perm=[1, 0, 2], sym=NS),
    one("Gather/ns_last_token", "Gather", ["x", "i"], {"x": (F, [2, 7, 8])},
        inits={"i": const(-1)}, axis=1, sym=NS),
    one("Conv/ns_1d_same", "Conv", ["x", "w"], {"x": (F, [2, 3, 13])},
        inits={"w": rand(4, 3, 5)}, auto_pad="SAME_UPPER", sym={"x": {0: "N", 2: "S"}}),
    one("Conv/ns_1d_pads", "Conv", ["x", "w"], {"x": (F, [2, 3, 13])},
        inits={"w": rand(4, 3, 5)}, pads=[2, 2], sym={"x": {0: "N", 2: "S"}}),
    one("MaxPool/ns_same_k3", "MaxPool", ["x"], {"x": (F, [2, 3, 13])}, kernel_shape=[3],
        pads=[1, 1], sym={"x": {0: "N", 2: "S"}}),
    one("ConvTranspose/ns_spatial", "ConvTranspose", ["x", "w"], {"x": (F, [2, 3, 13])},
        inits={"w": rand(3, 2, 3)}, pads=[1, 1], sym={"x": {0: "N", 2: "S"}}),
    one("ConvTranspose/ns_stride2_k4", "ConvTranspose", ["x", "w"], {"x": (F, [2, 3, 13])},
        inits={"w": rand(3, 2, 4)}, strides=[2], pads=[1, 1], sym={"x": {0: "N", 2: "S"}}),
    one("ConvTranspose/ns_same", "ConvTranspose", ["x", "w"], {"x": (F, [2, 3, 13])},
        inits={"w": rand(3, 2, 3)}, strides=[3], auto_pad="SAME_UPPER",
        sym={"x": {0: "N", 2: "S"}}),
    one("LSTM/ns", "LSTM", ["x", "W", "R"], {"x": (F, [7, 2, 3])}, outs=("y", "yh"),
        inits={"W": rand(1, 20, 3), "R": rand(1, 20, 5)}, hidden_size=5,
        sym={"x": {0: "S", 1: "N"}}),
)


# ---- the tests -----------------------------------------------------------------------------

IDS = [c.id for c in CASES]
assert len(IDS) == len(set(IDS)), "case ids must be unique"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_inferred_type_matches_onnxruntime_on_static_shapes(case: Case) -> None:
    check_static(case)


SYM_CASES = [c for c in CASES if c.inputs and c.sym_axes()]


@pytest.mark.parametrize("case", SYM_CASES, ids=[c.id for c in SYM_CASES])
def test_symbolic_batch_substituted_matches_onnxruntime(case: Case) -> None:
    check_symbolic(case)


def test_report_unknown_dims(capsys: pytest.CaptureFixture[str]) -> None:
    """Not an oracle check: lists the cases whose inferred shapes keep unknown dims (it runs
    after the symbolic cases) so that weak rules stay visible in the test output."""
    with capsys.disabled():
        for cid, outs in sorted(UNKNOWN_DIMS.items()):
            for name, (static, varying) in outs.items():
                print(f"\nunknown dims: {cid} {name}: {static} where onnxruntime's dim is static, "
                      f"{varying} where it varies with N", end="")
        if UNKNOWN_DIMS:
            print()


# ---- random shapes (hypothesis) ------------------------------------------------------------

FUZZ = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
SIZES = st.sampled_from([1, 2, 3, 13])


@st.composite
def broadcastable(draw: Any) -> tuple[str, list[list[int]]]:
    """An op and 2-3 input shapes that broadcast: each takes a suffix of one output shape
    with some dims replaced by 1."""
    out = draw(st.lists(SIZES, min_size=0, max_size=4))
    op = draw(st.sampled_from(["Add", "Mul", "Max", "Where", "Equal", "Sum"]))
    count = 3 if op in ("Where", "Sum") else 2
    shapes = []
    for _ in range(count):
        drop = draw(st.integers(0, len(out)))
        shapes.append([1 if draw(st.booleans()) else d for d in out[drop:]])
    return op, shapes


@FUZZ
@given(broadcastable())
def test_broadcast_matches_onnxruntime_on_random_shapes(drawn: tuple[str, list[list[int]]]) -> None:
    op, shapes = drawn
    names = ["c", "a", "b"][: len(shapes)] if op == "Where" else ["a", "b", "c"][: len(shapes)]
    types = {"c": B} if op == "Where" else {}
    inputs = {n: (types.get(n, F), s) for n, s in zip(names, shapes, strict=True)}
    case = Case(f"fuzz/{op}{shapes}", [node(op, names, ["y"])], inputs, ["y"],
                sym=batch_axes(dict(zip(names, shapes, strict=True))))
    check_static(case)
    if case.sym_axes():
        check_symbolic(case)


@FUZZ
@given(st.lists(SIZES, min_size=1, max_size=4), st.data())
def test_reduce_matches_onnxruntime_on_random_axes(shape: list[int], data: Any) -> None:
    rank = len(shape)
    axes = data.draw(st.lists(st.integers(-rank, rank - 1), max_size=rank,
                              unique_by=lambda a: a % rank))
    keep = data.draw(st.sampled_from([0, 1]))
    op, opset = data.draw(st.sampled_from([("ReduceSum", 13), ("ReduceMean", 18),
                                           ("ReduceMax", 11), ("ReduceL2", 18)]))
    uses_input = opset >= 18 or (op == "ReduceSum" and opset >= 13)
    if uses_input:
        n = node(op, ["x", "a"] if axes else ["x"], ["y"], keepdims=keep)
        inits = {"a": const(axes)} if axes else {}
    else:
        n = node(op, ["x"], ["y"], keepdims=keep, **({"axes": axes} if axes else {}))
        inits = {}
    case = Case(f"fuzz/{op}{shape}{axes}", [n], {"x": (F, shape)}, ["y"], inits, opset=opset)
    check_static(case)
    check_symbolic(case)


@FUZZ
@given(st.integers(1, 13), st.data())
def test_slice_matches_onnxruntime_on_random_bounds(size: int, data: Any) -> None:
    bound = st.integers(-20, 20) | st.sampled_from([INT_MAX, -INT_MAX])
    start, end = data.draw(bound), data.draw(bound)
    step = data.draw(st.sampled_from([1, 2, 3, -1, -2, -5]))
    # onnxruntime reads end = INT_MAX with a negative step as "through index 0"; the spec
    # (and onnx's reference and shape inference) clamp it to size - 1, an empty slice.
    deviates = end == INT_MAX and step < 0
    case = Case(f"fuzz/Slice[{size}][{start}:{end}:{step}]",
                [node("Slice", ["x", "s", "e", "a", "t"], ["y"])], {"x": (F, [2, size, 3])}, ["y"],
                {"s": const([start]), "e": const([end]), "a": const([1]), "t": const([step])},
                oracle="onnx" if deviates else "ort")
    check_static(case)
    if not deviates:
        check_symbolic(case)


@FUZZ
@given(st.data())
def test_pool_and_conv_windows_match_onnxruntime(data: Any) -> None:
    op = data.draw(st.sampled_from(["MaxPool", "AveragePool", "Conv"]))
    size = data.draw(st.integers(3, 14))
    kernel = data.draw(st.integers(1, 3))
    stride = data.draw(st.integers(1, 3))
    dil = data.draw(st.integers(1, 2)) if op != "AveragePool" else 1
    auto_pad = data.draw(st.sampled_from(["NOTSET", "NOTSET", "VALID", "SAME_UPPER",
                                          "SAME_LOWER"]))
    if op == "Conv" and auto_pad.startswith("SAME"):
        dil = 1  # onnxruntime's Conv rejects dilations with SAME padding
    pads = [0, 0]
    if auto_pad == "NOTSET":
        pads = [data.draw(st.integers(0, kernel - 1)) for _ in range(2)]
    attrs: dict[str, Any] = {"strides": [stride], "auto_pad": auto_pad, "dilations": [dil]}
    if auto_pad == "NOTSET":
        attrs["pads"] = pads
    if op != "Conv":
        attrs["kernel_shape"] = [kernel]
        attrs["ceil_mode"] = data.draw(st.sampled_from([0, 1]))
    span = dil * (kernel - 1) + 1
    if span > size + sum(pads):
        return  # the window does not fit: covered by the contradiction tests
    if auto_pad.startswith("SAME") and (-(-size // stride) - 1) * stride + span < size:
        return  # SAME would need negative padding, which onnxruntime rejects
    inits = {"w": rand(2, 3, kernel)} if op == "Conv" else {}
    ins = ["x", "w"] if op == "Conv" else ["x"]
    # onnxruntime's MaxPool sizes SAME padding without the dilation (7 wide, kernel 3,
    # dilation 2 gives 5, not the spec's ceil(7 / 1) = 7): onnx's inference is the oracle there.
    deviates = auto_pad.startswith("SAME") and dil > 1
    case = Case(f"fuzz/{op}{size}{attrs}", [node(op, ins, ["y"], **attrs)],
                {"x": (F, [2, 3, size])}, ["y"], inits, oracle="onnx" if deviates else "ort")
    check_static(case)
    if not deviates:
        check_symbolic(case)


# ---- contradictions ------------------------------------------------------------------------


def bad(cid: str, nodes: list[onnx.NodeProto], inputs: dict[str, tuple[int, list[int]]],
        inits: dict[str, np.ndarray] | None = None, opset: int = 20) -> Case:
    return Case(cid, nodes, inputs, [nodes[-1].output[0]], inits or {}, opset=opset)


BAD = [
    bad("matmul_inner", [node("MatMul", ["a", "b"], ["y"], name="bad_mm")],
        {"a": (F, [2, 3]), "b": (F, [4, 5])}),
    bad("matmul_batch", [node("MatMul", ["a", "b"], ["y"], name="bad_mm_batch")],
        {"a": (F, [2, 3, 4]), "b": (F, [3, 4, 5])}),
    bad("add_3_vs_4", [node("Add", ["a", "b"], ["y"], name="bad_add")],
        {"a": (F, [3]), "b": (F, [4])}),
    bad("where_broadcast", [node("Where", ["c", "a", "b"], ["y"], name="bad_where")],
        {"c": (B, [2, 3]), "a": (F, [3]), "b": (F, [5, 2])}),
    bad("conv_channels", [node("Conv", ["x", "w"], ["y"], name="bad_conv")],
        {"x": (F, [1, 3, 8, 8])}, {"w": rand(4, 5, 3, 3)}),
    bad("conv_group_channels", [node("Conv", ["x", "w"], ["y"], name="bad_gconv", group=2)],
        {"x": (F, [1, 6, 8, 8])}, {"w": rand(4, 2, 3, 3)}),
    bad("conv_window_too_big", [node("Conv", ["x", "w"], ["y"], name="bad_window")],
        {"x": (F, [1, 3, 2, 8])}, {"w": rand(4, 3, 3, 3)}),
    bad("reshape_12_into_5", [node("Reshape", ["x", "s"], ["y"], name="bad_reshape")],
        {"x": (F, [3, 4])}, {"s": const([5, -1])}),
    bad("reshape_count", [node("Reshape", ["x", "s"], ["y"], name="bad_reshape_n")],
        {"x": (F, [3, 4])}, {"s": const([2, 5])}),
    bad("gemm_inner", [node("Gemm", ["a", "b"], ["y"], name="bad_gemm", transB=1)],
        {"a": (F, [2, 3]), "b": (F, [3, 4])}),
    bad("concat_dims", [node("Concat", ["a", "b"], ["y"], name="bad_concat", axis=0)],
        {"a": (F, [2, 3]), "b": (F, [2, 4])}),
    bad("concat_one_vs_three", [node("Concat", ["a", "b"], ["y"], name="bad_concat_1", axis=0)],
        {"a": (F, [2, 1]), "b": (F, [2, 3])}),
    bad("concat_ranks", [node("Concat", ["a", "b"], ["y"], name="bad_concat_rank", axis=0)],
        {"a": (F, [2, 3]), "b": (F, [2])}),
    bad("split_sizes", [node("Split", ["x", "s"], ["p", "q"], name="bad_split", axis=1)],
        {"x": (F, [2, 13])}, {"s": const([6, 6])}),
    bad("squeeze_not_one", [node("Squeeze", ["x", "a"], ["y"], name="bad_squeeze")],
        {"x": (F, [2, 3])}, {"a": const([1])}),
    bad("transpose_perm", [node("Transpose", ["x"], ["y"], name="bad_perm", perm=[0, 0])],
        {"x": (F, [2, 3])}),
    bad("gather_axis", [node("Gather", ["x", "i"], ["y"], name="bad_gather", axis=2)],
        {"x": (F, [2, 3])}, {"i": const([0])}),
    bad("einsum_labels", [node("Einsum", ["a", "b"], ["y"], name="bad_einsum",
                                equation="ij,jk->ik")], {"a": (F, [2, 3]), "b": (F, [4, 5])}),
    bad("expand_shape", [node("Expand", ["x", "s"], ["y"], name="bad_expand")],
        {"x": (F, [2, 3])}, {"s": const([2, 4])}),
    bad("tile_repeats", [node("Tile", ["x", "r"], ["y"], name="bad_tile")],
        {"x": (F, [2, 3])}, {"r": const([2])}),
    bad("unsqueeze_axis", [node("Unsqueeze", ["x", "a"], ["y"], name="bad_unsqueeze")],
        {"x": (F, [2, 3])}, {"a": const([3])}),
    bad("reduce_axis", [node("ReduceSum", ["x", "a"], ["y"], name="bad_reduce")],
        {"x": (F, [2, 3])}, {"a": const([2])}),
    bad("depth_to_space", [node("DepthToSpace", ["x"], ["y"], name="bad_d2s", blocksize=2)],
        {"x": (F, [1, 6, 2, 2])}),
    bad("topk_k_too_big", [node("TopK", ["x", "k"], ["y", "i"], name="bad_topk_big")],
        {"x": (F, [3, 4])}, {"k": const([5])}),
    bad("conv_transpose_channels", [node("ConvTranspose", ["x", "w"], ["y"], name="bad_convt")],
        {"x": (F, [1, 3, 5, 5])}, {"w": rand(4, 2, 3, 3)}),
    bad("topk_negative_k", [node("TopK", ["x"], ["y", "i"], name="bad_topk", k=-1)],
        {"x": (F, [3, 4])}, opset=9),
    bad("random_negative_shape", [node("RandomNormal", [], ["y"], name="bad_random",
                                       shape=[-1, 3])], {}),
    bad("split_negative", [node("Split", ["x", "s"], ["p", "q"], name="bad_split_neg", axis=1)],
        {"x": (F, [2, 4])}, {"s": const([6, -2])}),
    bad("det_not_square", [node("Det", ["x"], ["y"], name="bad_det")], {"x": (F, [2, 3, 4])}),
    bad("grid_sample_coords", [node("GridSample", ["x", "g"], ["y"], name="bad_grid")],
        {"x": (F, [1, 3, 4, 4]), "g": (F, [1, 2, 2, 3])}),
    bad("attention_heads", [node("Attention", ["q", "k", "v"], ["y"], name="bad_attention",
                                 q_num_heads=5, kv_num_heads=2)],
        {"q": (F, [2, 5, 32]), "k": (F, [2, 7, 16]), "v": (F, [2, 7, 12])}, opset=23),
    bad("quantize_axis_length", [node("QuantizeLinear", ["x", "s"], ["y"], name="bad_q_axis", axis=0)],
        {"x": (F, [3, 4])}, {"s": np.ones(4, np.float32)}, opset=21),
    bad("dequantize_blocked_shape", [node("DequantizeLinear", ["x", "s"], ["y"], name="bad_dq_block", axis=1,
                                          block_size=2)],
        {"x": (U8, [3, 5])}, {"s": np.ones((3, 2), np.float32)}, opset=21),
    bad("shape_chain_reshape", [
        node("Shape", ["x"], ["s"], name="shape"),
        node("Gather", ["s", "i"], ["n"], name="gather", axis=0),
        node("Concat", ["n", "k"], ["t"], name="concat", axis=0),
        node("Reshape", ["x", "t"], ["y"], name="bad_chain_reshape"),
    ], {"x": (F, [6, 4])}, {"i": const([1]), "k": const([5])}),
]


def rejected_by_oracle(case: Case, model: bytes) -> str:
    """Why onnx's strict inference or onnxruntime (loading or running) rejects the model;
    "" when both accept it."""
    try:
        onnx.shape_inference.infer_shapes(onnx.load_from_string(model), strict_mode=True,
                                          data_prop=True)
    except onnx.shape_inference.InferenceError as e:
        return f"onnx: {e}"
    try:
        shapes = {n: tuple(s) for n, (_, s) in case.inputs.items()}
        run_ort(model, make_feeds(case, shapes), case.outputs)
    except Exception as e:  # onnxruntime raises its own Fail / InvalidArgument / ... classes
        return f"onnxruntime: {e}"
    return ""


@pytest.mark.parametrize("case", BAD, ids=[c.id for c in BAD])
def test_contradiction_raises_shape_error_naming_the_node(case: Case) -> None:
    model = build(case, {n: list(s) for n, (_, s) in case.inputs.items()})
    assert rejected_by_oracle(case, model), "the oracles accept this model"
    bad_node = case.nodes[-1]
    with pytest.raises(tt.ShapeError, match=f"{bad_node.op_type} '{bad_node.name}'"):
        tt.load(model).infer_shapes()


@pytest.mark.parametrize(
    ("declared", "why"),
    [([2, 3], "dim 1 differs"), ([2, 4, 1], "ranks differ"), (None, "element types differ")],
)
def test_declared_output_contradicting_inference_raises(declared: list[int] | None,
                                                        why: str) -> None:
    case = Case("declared", [node("MatMul", ["a", "b"], ["y"], name="mm")],
                {"a": (F, [2, 5]), "b": (F, [5, 4])}, ["y"])
    vi = (helper.make_tensor_value_info("y", F, declared) if declared is not None
          else helper.make_tensor_value_info("y", I64, [2, 4]))
    model = build(case, {"a": [2, 5], "b": [5, 4]}, declared={"y": vi})
    with pytest.raises(onnx.shape_inference.InferenceError):
        onnx.shape_inference.infer_shapes(onnx.load_from_string(model), strict_mode=True)
    with pytest.raises(tt.ShapeError, match=f"MatMul 'mm'.*'y'.*{why}"):
        tt.load(model).infer_shapes()


def test_declared_output_agreeing_with_inference_is_refined() -> None:
    """A declared [?, 4] output keeps its dims and gains the inferred one (onnxruntime runs it)."""
    case = Case("declared_ok", [node("MatMul", ["a", "b"], ["y"], name="mm")],
                {"a": (F, [2, 5]), "b": (F, [5, 4])}, ["y"])
    model = build(case, {"a": [2, 5], "b": [5, 4]},
                  declared={"y": helper.make_tensor_value_info("y", F, [None, 4])})
    m = tt.load(model)
    m.infer_shapes()
    got = run_ort(model, make_feeds(case, {"a": (2, 5), "b": (5, 4)}), ["y"])["y"]
    assert m.value_types()["y"].shape == got.shape


@FUZZ
@given(st.lists(SIZES, min_size=1, max_size=4), st.data())
def test_reshape_matches_onnxruntime_on_random_targets(shape: list[int], data: Any) -> None:
    """Targets regroup the input's dims, with some entries as 0 (copy) or -1 (infer)."""
    total = int(np.prod(shape))
    target = data.draw(st.permutations(shape)) if data.draw(st.booleans()) else [total]
    target = [d for d in target]
    if len(target) > 1 and data.draw(st.booleans()):
        target = [target[0] * target[1], *target[2:]]
    k = data.draw(st.integers(0, len(target) - 1))
    target[k] = -1
    for i in range(min(len(target), len(shape))):
        if i != k and target[i] == shape[i] and data.draw(st.booleans()):
            target[i] = 0
    case = Case(f"fuzz/Reshape{shape}->{target}", [node("Reshape", ["x", "s"], ["y"])],
                {"x": (F, shape)}, ["y"], {"s": const(target)})
    check_static(case)

    def valid_at(n: int) -> bool:  # does the target still fit with dim 0 = n?
        dims = [n, *shape[1:]]
        fixed = [dims[i] if t == 0 else t for i, t in enumerate(target) if t != -1]
        return int(np.prod(dims)) % max(int(np.prod(fixed)), 1) == 0

    if all(valid_at(n) for n in BATCHES):
        check_symbolic(case)


@FUZZ
@given(st.lists(SIZES, min_size=1, max_size=4), st.data())
def test_gather_unsqueeze_transpose_match_onnxruntime(shape: list[int], data: Any) -> None:
    rank = len(shape)
    axis = data.draw(st.integers(-rank, rank - 1))
    idx_shape = data.draw(st.lists(st.integers(1, 3), max_size=2))
    n = shape[axis]
    idx = np.random.default_rng(0).integers(-n, n, size=idx_shape)
    un = data.draw(st.lists(st.integers(-(rank + idx.ndim), rank + idx.ndim - 1), max_size=2,
                            unique_by=lambda a: a % (rank - 1 + idx.ndim + 2)))
    out_rank = rank - 1 + idx.ndim + len(un)
    if out_rank == 0 or len({a % out_rank for a in un}) != len(un):
        return
    perm = data.draw(st.permutations(range(out_rank)))
    nodes = [node("Gather", ["x", "i"], ["g"], axis=axis),
             node("Unsqueeze", ["g", "a"], ["u"]),
             node("Transpose", ["u"], ["y"], perm=list(perm))]
    case = Case(f"fuzz/Gather{shape}{axis}{idx_shape}{un}{perm}", nodes, {"x": (F, shape)},
                ["g", "u", "y"], {"i": idx.astype(np.int64), "a": const(un)},
                sym={} if axis % rank == 0 else None)
    check_static(case)
    if case.sym_axes():
        check_symbolic(case)


@FUZZ
@given(st.lists(SIZES, min_size=1, max_size=3), st.data())
def test_pad_and_split_match_onnxruntime(shape: list[int], data: Any) -> None:
    rank = len(shape)
    pads = [data.draw(st.integers(-min(d, 1), 3)) for d in shape]
    pads += [data.draw(st.integers(-(d + pads[i] - 1 if d + pads[i] > 1 else 0), 2))
             for i, d in enumerate(shape)]
    padded = [d + pads[i] + pads[i + rank] for i, d in enumerate(shape)]
    axis = data.draw(st.integers(-rank, rank - 1))
    parts = data.draw(st.integers(1, 3))
    nodes = [node("Pad", ["x", "p"], ["p_out"]),
             node("Split", ["p_out"], [f"s{k}" for k in range(parts)], axis=axis,
                  num_outputs=parts)]
    chunk = -(-padded[axis] // parts)
    if (parts - 1) * chunk >= padded[axis]:
        return  # a last part of size 0: onnx's inference allows it, onnxruntime does not
    case = Case(f"fuzz/PadSplit{shape}{pads}{axis}{parts}", nodes, {"x": (F, shape)},
                ["p_out"] + [f"s{k}" for k in range(parts)], {"p": const(pads)},
                sym={"x": {k: "N" for k in range(rank) if pads[k] == pads[k + rank] == 0
                           and k != axis % rank}} or {})
    check_static(case)
    if case.sym_axes()["x"]:
        check_symbolic(case)
