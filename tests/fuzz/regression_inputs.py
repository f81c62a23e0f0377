"""Builds the inputs of tests/cpp/fuzz_regressions_test.cc: one small ONNX model per bug that
fuzzing tests/fuzz/load_fuzzer.cc (or reviewing what it found) turned up, each cut down to
the few fields that trigger it. Prints the byte arrays the test file holds:

    python3 tests/fuzz/regression_inputs.py > arrays.inc     # replaces the arrays in the test
    python3 tests/fuzz/regression_inputs.py --files DIR      # one file per input, for load_fuzzer

Needs `onnx` and `numpy`. The models are not checked: most are invalid on purpose. Models
nested too deeply to keep as arrays are built by the test itself.
"""

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

I64MAX = 2**63 - 1
I64MIN = -2**63

def m(nodes, inputs, outputs, inits=(), vi=(), opset=20, name="g"):
    g = h.make_graph(nodes, name, inputs, outputs, list(inits))
    g.value_info.extend(vi)
    mod = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=10)
    mod.ClearField("producer_name")
    return mod.SerializeToString()

def ti(name, dt, shape): return h.make_tensor_value_info(name, dt, shape)
def i64(name, vals): return nh.from_array(np.array(vals, dtype=np.int64), name)
def f32(name, vals): return nh.from_array(np.array(vals, dtype=np.float32), name)
F, I = TP.FLOAT, TP.INT64
C = {}

C["resize_nan_scale"] = m([h.make_node("Resize", ["x", "", "s"], ["y"])], [ti("x", F, [1, 1, 2, 2])], [ti("y", F, None)],
                          [f32("s", [1, 1, float("nan"), 1])])
C["resize_negative_scale"] = m([h.make_node("Resize", ["x", "", "s"], ["y"])], [ti("x", F, [1, 1, 2, 2])], [ti("y", F, None)],
                               [f32("s", [1, 1, -2, 1])])
C["resize_huge_scale"] = m([h.make_node("Resize", ["x", "", "s"], ["y"])], [ti("x", F, [1, 1, 2, 2])], [ti("y", F, None)],
                           [f32("s", [1, 1, 1e30, 1])])
C["slice_declared_longer_than_initializer"] = m(
    [h.make_node("Slice", ["c", "st", "en"], ["y"])], [], [ti("y", I, None)],
    [i64("c", [1, 2, 3]), i64("st", [0]), i64("en", [100])], vi=[ti("c", I, [100])])
C["slice_empty_starts_on_tracked_value"] = m(
    [h.make_node("Shape", ["x"], ["s"]), h.make_node("Slice", ["s", "st", "en"], ["y"])],
    [ti("x", F, [2, 3])], [ti("y", I, None)], [i64("st", np.zeros(0)), i64("en", np.zeros(0))])
C["slice_step_int64_min"] = m([h.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], [ti("x", F, [5])], [ti("y", F, None)],
                              [i64("st", [4]), i64("en", [0]), i64("ax", [0]), i64("sp", [I64MIN])])
C["slice_step_int64_max"] = m([h.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], [ti("x", F, [5])], [ti("y", F, None)],
                              [i64("st", [0]), i64("en", [5]), i64("ax", [0]), i64("sp", [I64MAX])])
C["slice_negative_step_on_empty_dim"] = m([h.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], [ti("x", F, [0])],
                                          [ti("y", F, None)], [i64("st", [0]), i64("en", [-10]), i64("ax", [0]), i64("sp", [-1])])
C["split_without_outputs"] = m([h.make_node("Split", ["x"], [], axis=0)], [ti("x", F, [4])], [ti("x", F, [4])])
C["split_negative_size"] = m([h.make_node("Split", ["x", "sp"], ["a", "b"], axis=0)], [ti("x", F, [2])], [ti("a", F, None)],
                             [i64("sp", [-1, 3])])
C["gather_nd_negative_batch_dims"] = m([h.make_node("GatherND", ["x", "i"], ["y"], batch_dims=-5)],
                                       [ti("x", F, [2, 3]), ti("i", I, [2, 1])], [ti("y", F, None)])
C["reshape_shape_input_of_huge_length"] = m([h.make_node("Reshape", ["x", "s"], ["y"])],
                                            [ti("x", F, [2]), ti("s", I, [10**15])], [ti("y", F, None)])
C["constant_of_shape_input_of_huge_length"] = m([h.make_node("ConstantOfShape", ["s"], ["y"])], [ti("s", I, [10**15])],
                                                [ti("y", F, None)])
C["expand_shape_input_of_huge_length"] = m([h.make_node("Expand", ["x", "s"], ["y"])], [ti("x", F, [2]), ti("s", I, [10**15])],
                                           [ti("y", F, None)])
C["tile_negative_repeats"] = m([h.make_node("Tile", ["x", "r"], ["y"])], [ti("x", F, [2])], [ti("y", F, None)], [i64("r", [-1])])
C["topk_negative_k"] = m([h.make_node("TopK", ["x"], ["v", "i"], k=-4)], [ti("x", F, [8])], [ti("v", F, None)], opset=1)
C["random_normal_negative_shape"] = m([h.make_node("RandomNormal", [], ["y"], shape=[2, -1])], [], [ti("y", F, None)])
C["conv_transpose_negative_output_shape"] = m([h.make_node("ConvTranspose", ["x", "w"], ["y"], output_shape=[-3])],
                                              [ti("x", F, [1, 1, 4]), ti("w", F, [1, 1, 3])], [ti("y", F, None)])
C["conv_transpose_negative_group"] = m([h.make_node("ConvTranspose", ["x", "w"], ["y"], group=-2)],
                                       [ti("x", F, [1, 1, 4]), ti("w", F, [1, 1, 3])], [ti("y", F, None)])
C["conv_kernel_shape_zero"] = m([h.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[0])],
                                [ti("x", F, [1, 1, 4]), ti("w", F, [1, 1, 3])], [ti("y", F, None)])
C["conv_dilation_overflow"] = m([h.make_node("Conv", ["x", "w"], ["y"], dilations=[2**62])],
                                [ti("x", F, [1, 1, 4]), ti("w", F, [1, 1, 3])], [ti("y", F, None)])
C["conv_group_overflow"] = m([h.make_node("Conv", ["x", "w"], ["y"], group=2**62)],
                             [ti("x", F, [1, 8, 4]), ti("w", F, [1, 4, 3])], [ti("y", F, None)])
C["conv_pads_overflow"] = m([h.make_node("Conv", ["x", "w"], ["y"], pads=[I64MAX, I64MAX])],
                            [ti("x", F, [1, 1, 4]), ti("w", F, [1, 1, 3])], [ti("y", F, None)])
C["pad_overflow"] = m([h.make_node("Pad", ["x", "p"], ["y"])], [ti("x", F, [4])], [ti("y", F, None)], [i64("p", [I64MAX, 1])])
C["range_nan_delta"] = m([h.make_node("Range", ["a", "b", "d"], ["y"])], [], [ti("y", F, None)],
                         [f32("a", 0.0), f32("b", 10.0), f32("d", float("nan"))])
C["range_int64_full_span"] = m([h.make_node("Range", ["a", "b", "d"], ["y"])], [], [ti("y", I, None)],
                               [i64("a", I64MIN), i64("b", I64MAX), i64("d", 1)])
C["range_int64_exact_length"] = m([h.make_node("Range", ["a", "b", "d"], ["y"])], [], [ti("y", I, None)],
                                  [i64("a", 0), i64("b", 2**62 + 1), i64("d", 1)])
C["one_hot_float_depth_huge"] = m([h.make_node("OneHot", ["i", "d", "v"], ["y"])], [ti("i", I, [3]), ti("v", F, [2])],
                                  [ti("y", F, None)], [f32("d", 1e30)])
C["einsum_two_ellipses_in_one_term"] = m([h.make_node("Einsum", ["x"], ["y"], equation="......")], [ti("x", F, [2, 3])],
                                         [ti("y", F, None)])
# Shape(x) -> Mul(s, s) squared again and again: the symbolic dim's degree doubles per node.
sq = [h.make_node("Shape", ["x"], ["m0"])] + [h.make_node("Mul", [f"m{k}", f"m{k}"], [f"m{k+1}"]) for k in range(40)]
sq += [h.make_node("ConstantOfShape", ["m2"], ["c2"]), h.make_node("ConstantOfShape", ["m40"], ["c40"])]
C["mul_squaring_symbolic_shape_value"] = m(sq, [ti("x", F, ["N"])], [ti("c2", F, None), ti("c40", F, None)])
C["add_tracked_values_overflow"] = m([h.make_node("Add", ["a", "b"], ["y"]), h.make_node("ConstantOfShape", ["y"], ["c"])], [],
                                     [ti("c", F, None)], [i64("a", [I64MAX]), i64("b", [1])])
C["div_tracked_int64_min_by_minus_one"] = m([h.make_node("Div", ["a", "b"], ["y"]), h.make_node("ConstantOfShape", ["y"], ["c"])],
                                            [], [ti("c", F, None)], [i64("a", [I64MIN]), i64("b", [-1])])
names = [f"a{k}" for k in range(10)]
C["concat_symbolic_coefficient_overflow"] = m([h.make_node("Concat", names, ["y"], axis=0)],
                                              [ti(n, F, ["999999999999999999*n"]) for n in names], [ti("y", F, None)])
t = onnx.TensorProto(); t.name = "w"; t.data_type = TP.INT4; t.dims.extend([I64MAX])
C["int4_initializer_of_int64_max_elements"] = m([], [], [ti("w", TP.INT4, None)], [t])
C["layer_norm_stash_type_not_a_dtype"] = m([h.make_node("LayerNormalization", ["x", "s"], ["y", "mean"], stash_type=99)],
                                           [ti("x", F, [2, 3]), ti("s", F, [3])], [ti("y", F, None), ti("mean", F, None)])
C["cast_to_wraps_to_float"] = m([h.make_node("Cast", ["x"], ["y"], to=2**32 + 1)], [ti("x", I, [2])], [ti("y", F, None)])
sp = h.make_sparse_tensor(f32("sv", [1.0]), i64("si", [7]), [2, 2])
g_sp = h.make_graph([], "g", [], [ti("sv", F, None)]); g_sp.sparse_initializer.extend([sp])
mod = h.make_model(g_sp, opset_imports=[h.make_opsetid("", 20)], ir_version=10); mod.ClearField("producer_name")
C["sparse_index_outside_dense_dims"] = mod.SerializeToString()
C["initializer_declared_with_other_dtype"] = m([], [], [ti("c", F, [3])], [i64("c", [1, 2, 3])])
t = onnx.TensorProto(); t.name = "e"; t.data_type = TP.FLOAT; t.dims.extend([0]); t.int32_data.extend([1])
C["empty_float_tensor_with_int32_data"] = m([], [], [ti("e", F, None)], [t])
C["einsum_ellipsis_in_output"] = m([h.make_node("Einsum", ["x"], ["y"], equation="...ij->...ji")], [ti("x", F, [5, 2, 3])],
                                   [ti("y", F, None)])
# Shape of a scalar is an empty tracked value; Mul broadcast it against one entry and read
# entry 0 of the empty side.
C["mul_empty_tracked_value_by_one_entry"] = m(
    [h.make_node("Shape", ["x"], ["s"]), h.make_node("Mul", ["s", "one"], ["y"]),
     h.make_node("ConstantOfShape", ["y"], ["c"])], [ti("x", F, [])], [ti("c", F, None)], [i64("one", [1])])

# Kinds that say one thing while the fields or the reader say another. Not bugs when
# found; kept because the brief of the fuzzing work named them as contracts to hold.
empty_graph = onnx.AttributeProto(name="then_branch", type=onnx.AttributeProto.GRAPH)
if_node = h.make_node("If", ["c"], ["y"])
if_node.attribute.extend([empty_graph, onnx.AttributeProto(name="else_branch", type=onnx.AttributeProto.GRAPH)])
C["if_graph_attributes_that_hold_nothing"] = m([if_node], [ti("c", TP.BOOL, [])], [ti("y", F, None)])
C["conv_kernel_shape_of_kind_int"] = m([h.make_node("Conv", ["x", "w"], ["y"], kernel_shape=3)],
                                       [ti("x", F, [1, 1, 4]), ti("w", F, [1, 1, 3])], [ti("y", F, None)])


def camel(name):
    return "k" + "".join(part.capitalize() for part in name.split("_"))


def cpp_array(name, data):
    body = ", ".join(f"0x{b:02x}" for b in data)
    lines = []
    while body:
        cut = body[:110].rfind(",") + 1 if len(body) > 110 else len(body)
        lines.append("    " + body[:cut].strip())
        body = body[cut:]
    return f"// {name}\nconst std::vector<uint8_t> {camel(name)} = {{\n" + "\n".join(lines) + "};\n"


def main(argv):
    if len(argv) == 3 and argv[1] == "--files":
        out = Path(argv[2])
        out.mkdir(parents=True, exist_ok=True)
        for name, data in C.items():
            (out / name).write_bytes(data)
        return
    for name, data in C.items():
        print(cpp_array(name, data))


if __name__ == "__main__":
    main(sys.argv)
