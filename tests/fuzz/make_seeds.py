"""Writes the seed corpus for load_fuzzer: small valid ONNX models that cover what the loader
and shape inference read (control flow, every kind of tensor storage, symbolic dims, functions).

    python3 tests/fuzz/make_seeds.py tests/fuzz/seeds

Needs the `onnx` and `numpy` packages. Models are not checked with onnx.checker on purpose:
some seeds (an attribute of an unusual kind, odd opsets) are valid protobuf that tether must
read, even where the ONNX checker would complain.
"""

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def model(graph, opset=20, functions=(), ir_version=10):
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("local", 1)],
        functions=list(functions),
        ir_version=ir_version,
        producer_name="tether-fuzz-seeds",
    )


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def cnn():
    w = numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "w")
    b = numpy_helper.from_array(np.zeros(2, np.float32), "b")
    gw = numpy_helper.from_array(np.ones((4, 8), np.float32), "gw")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[1, 1],
                         kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "gw"], ["y"], transB=1, alpha=1.0),
    ]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", F, ["N", 1, 4, 4])],
                          [helper.make_tensor_value_info("y", F, ["N", 4])], [w, b, gw])
    return model(g)


def shape_chain():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax"], ["nu"]),
        helper.make_node("Concat", ["nu", "tail"], ["t"], axis=0),
        helper.make_node("Reshape", ["x", "t"], ["y"]),
        helper.make_node("Slice", ["s", "st", "en", "ax", "stp"], ["sl"]),
        helper.make_node("Mul", ["sl", "sl"], ["sq"]),
        helper.make_node("Expand", ["y", "t"], ["e"]),
        helper.make_node("Tile", ["x", "rep"], ["tl"]),
        helper.make_node("Range", ["r0", "r1", "r2"], ["rg"]),
        helper.make_node("ConstantOfShape", ["s"], ["cz"], value=helper.make_tensor("v", F, [1], [0.5])),
    ]
    inits = [ints("i0", 0), ints("ax", [0]), ints("tail", [-1]), ints("st", [1]), ints("en", [100]),
             ints("stp", [1]), ints("rep", [1, 2, 1]), ints("r0", 0), ints("r1", 10), ints("r2", 3)]
    g = helper.make_graph(nodes, "shapes", [helper.make_tensor_value_info("x", F, ["batch", "seq", 8])],
                          [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("sq", I64, None),
                           helper.make_tensor_value_info("e", F, None), helper.make_tensor_value_info("tl", F, None),
                           helper.make_tensor_value_info("rg", I64, None), helper.make_tensor_value_info("cz", F, None)],
                          inits)
    return model(g)


def if_model():
    then_g = helper.make_graph([helper.make_node("Add", ["x", "one"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", F, [2])],
                               [numpy_helper.from_array(np.ones(2, np.float32), "one")])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", F, [2])])
    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)]
    g = helper.make_graph(nodes, "if", [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                                        helper.make_tensor_value_info("x", F, [2])],
                          [helper.make_tensor_value_info("y", F, [2])])
    return model(g)


def loop_model():
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),
         helper.make_node("Unsqueeze", ["acc_out", "ax"], ["scan_out"])],
        "body",
        [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", F, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", F, [3]), helper.make_tensor_value_info("scan_out", F, [1, 3])],
        [ints("ax", [0])])
    nodes = [helper.make_node("Loop", ["trip", "cond", "acc0"], ["acc", "scans"], body=body)]
    g = helper.make_graph(nodes, "loop", [helper.make_tensor_value_info("trip", I64, []),
                                          helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                                          helper.make_tensor_value_info("acc0", F, [3]),
                                          helper.make_tensor_value_info("x", F, [3])],
                          [helper.make_tensor_value_info("acc", F, [3]),
                           helper.make_tensor_value_info("scans", F, None)])
    return model(g)


def dtypes():
    inits = [
        helper.make_tensor("f16", TensorProto.FLOAT16, [3], np.array([1, 2, 3], np.float16).view(np.uint16).tolist()),
        helper.make_tensor("f16raw", TensorProto.FLOAT16, [2], np.array([1, 2], np.float16).tobytes(), raw=True),
        helper.make_tensor("bf16", TensorProto.BFLOAT16, [2], [0x3f80, 0x4000]),
        helper.make_tensor("i4", TensorProto.INT4, [3], [1, -2, 3]),
        helper.make_tensor("u4", TensorProto.UINT4, [4], [1, 2, 3, 15]),
        helper.make_tensor("str", TensorProto.STRING, [2], [b"ab", b"cd"]),
        helper.make_tensor("b", TensorProto.BOOL, [3], [True, False, True]),
        helper.make_tensor("d", TensorProto.DOUBLE, [2], [1.5, 2.5]),
        helper.make_tensor("u64", TensorProto.UINT64, [2], [1, 2**63]),
        helper.make_tensor("u32", TensorProto.UINT32, [2], [1, 2**31]),
        helper.make_tensor("c64", TensorProto.COMPLEX64, [1], [complex(1.0, 2.0)]),
        helper.make_tensor("f8", TensorProto.FLOAT8E4M3FN, [2], [0x38, 0x40]),
        helper.make_tensor("i8raw", TensorProto.INT8, [4], np.array([1, -1, 2, -2], np.int8).tobytes(), raw=True),
        helper.make_tensor("i32", TensorProto.INT32, [2, 2], [1, 2, 3, 4]),
        helper.make_tensor("i64", I64, [2], [5, 6]),
        helper.make_tensor("empty", F, [0, 3], []),
        helper.make_tensor("scalar", F, [], [7.0]),
    ]
    # Types newer than some onnx releases know (int2, float6), written field by field.
    for name, code, count, values in (("i2", 26, 5, [0x1b, 0x02]), ("f6", 27, 5, [1, 2, 3, 63, 7]),
                                      ("c128", 15, 1, None)):
        t = TensorProto(name=name, data_type=code, dims=[count])
        if values is None:
            t.double_data.extend([1.0, -1.0])
        else:
            t.int32_data.extend(values)
        inits.append(t)
    outs = [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits]
    g = helper.make_graph([], "dtypes", [], outs, inits)
    return model(g)


def sparse_and_attrs():
    sp = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "sp"),
        numpy_helper.from_array(np.array([1, 5], np.int64), "sp_idx"), [2, 4])
    const = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.arange(6, dtype=np.int64).reshape(2, 3)))
    cs = helper.make_node("Constant", [], ["cs"], sparse_value=sp)
    custom = helper.make_node(
        "Custom", ["c"], ["z"], domain="custom.domain", f=1.5, i=3, s=b"text", floats=[1.0, 2.0], ints=[1, 2],
        strings=[b"a", b"b"], t=numpy_helper.from_array(np.ones(2, np.float32), "tt"),
        tp=helper.make_tensor_type_proto(F, [2, "n"]),
        tps=[helper.make_sequence_type_proto(helper.make_tensor_type_proto(I64, None)),
             helper.make_map_type_proto(I64, helper.make_tensor_type_proto(F, [1])),
             helper.make_optional_type_proto(helper.make_tensor_type_proto(F, []))])
    g = helper.make_graph([const, cs, custom], "attrs", [], [helper.make_tensor_value_info("z", F, None),
                                                          helper.make_tensor_value_info("cs", F, [2, 4])])
    g.sparse_initializer.extend([helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([3.0], np.float32), "spi"),
        numpy_helper.from_array(np.array([[0, 1]], np.int64), "spi_idx"), [2, 2])])
    g.value_info.extend([helper.make_tensor_value_info("c", I64, ["a", "2*a"])])
    return model(g)


def function_model():
    elu = helper.make_node("Elu", ["m"], ["y"])
    elu.attribute.append(helper.make_attribute_ref("alpha", onnx.AttributeProto.FLOAT))
    fn = helper.make_function(
        "local", "Scaled", ["x"], ["y"],
        [helper.make_node("Constant", [], ["k"], value_float=2.0),
         helper.make_node("Mul", ["x", "k"], ["m"]),
         elu],
        [helper.make_opsetid("", 20)], attributes=["alpha"])
    nodes = [helper.make_node("Scaled", ["x"], ["y"], domain="local", alpha=0.5)]
    g = helper.make_graph(nodes, "fn", [helper.make_tensor_value_info("x", F, ["B", 3])],
                          [helper.make_tensor_value_info("y", F, ["B", 3])])
    return model(g, functions=[fn])


def nn_mix():
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["t", "x"], ["mm"]),
        helper.make_node("ReduceMean", ["mm", "axes"], ["rm"], keepdims=1),
        helper.make_node("Softmax", ["rm"], ["sm"], axis=-1),
        helper.make_node("Split", ["x"], ["s0", "s1"], axis=2, num_outputs=2),
        helper.make_node("Pad", ["x", "pads"], ["pd"]),
        helper.make_node("TopK", ["x", "k"], ["tv", "ti"], axis=-1),
        helper.make_node("Einsum", ["x", "x"], ["es"], equation="bij,bkj->bik"),
        helper.make_node("Einsum", ["x"], ["et"], equation="...ij->...ji"),
        helper.make_node("LayerNormalization", ["x", "gamma"], ["ln"], axis=-1),
        helper.make_node("Resize", ["x4", "", "scales"], ["rs"]),
        helper.make_node("QuantizeLinear", ["x", "qs"], ["q"]),
        helper.make_node("ConvTranspose", ["x4", "wt"], ["ct"], strides=[2, 2]),
        helper.make_node("ArgMax", ["x"], ["am"], axis=1, keepdims=0),
        helper.make_node("Cast", ["x"], ["cx"], to=TensorProto.INT32),
        helper.make_node("Squeeze", ["rm", "axes"], ["sq"]),
        helper.make_node("GatherND", ["x", "gi"], ["gn"], batch_dims=0),
        helper.make_node("OneHot", ["gi", "depth", "ohv"], ["oh"], axis=-1),
        helper.make_node("DepthToSpace", ["x4", ], ["d2s"], blocksize=2),
        helper.make_node("LSTM", ["x", "lw", "lr"], ["ly", "lh", "lc"], hidden_size=2),
        helper.make_node("Where", ["cond", "x", "x"], ["wh"]),
    ]
    inits = [ints("axes", [1]), ints("pads", [0, 0, 1, 0, 0, 1]), ints("k", [2]),
             numpy_helper.from_array(np.ones(6, np.float32), "gamma"),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
             numpy_helper.from_array(np.array(0.1, np.float32), "qs"),
             numpy_helper.from_array(np.ones((4, 1, 3, 3), np.float32), "wt"),
             ints("gi", [[0, 1]]), ints("depth", 3), numpy_helper.from_array(np.array([0, 1], np.float32), "ohv"),
             numpy_helper.from_array(np.ones((1, 8, 6), np.float32), "lw"),
             numpy_helper.from_array(np.ones((1, 8, 2), np.float32), "lr")]
    g = helper.make_graph(nodes, "nn", [helper.make_tensor_value_info("x", F, ["B", 4, 6]),
                                        helper.make_tensor_value_info("x4", F, [1, 4, 2, 2]),
                                        helper.make_tensor_value_info("cond", TensorProto.BOOL, [1])],
                          [helper.make_tensor_value_info(n, F, None)
                           for n in ("sm", "pd", "es", "et", "ln", "rs", "ct", "sq")],
                          inits)
    return model(g)


# load_fuzzer keeps "w.bin" (4 KiB) and "sub/w.bin" (100 bytes) in the base_dir it loads with.
def external(location, offset, count):
    t = numpy_helper.from_array(np.ones(count, np.float32), "w")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.extend([onnx.StringStringEntryProto(key="location", value=location),
                            onnx.StringStringEntryProto(key="offset", value=str(offset)),
                            onnx.StringStringEntryProto(key="length", value=str(4 * count))])
    g = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "ext", [],
                          [helper.make_tensor_value_info("y", F, [count])], [t])
    return model(g)


def external_ref():
    return external("w.bin", 0, 4)


def external_unaligned():
    return external("sub/w.bin", 3, 20)


SEEDS = {
    "cnn": cnn, "shape_chain": shape_chain, "if": if_model, "loop": loop_model, "dtypes": dtypes,
    "sparse_attrs": sparse_and_attrs, "function": function_model, "nn_mix": nn_mix, "external_ref": external_ref,
    "external_unaligned": external_unaligned,
}


def main(out_dir):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, make in SEEDS.items():
        data = make().SerializeToString()
        (out / f"{name}.onnx").write_bytes(data)
        print(f"{name}.onnx: {len(data)} bytes")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "seeds")
