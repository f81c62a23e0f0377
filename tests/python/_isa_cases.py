"""Conv, Gemm, MatMul and pooling cases with awkward sizes, checked against onnxruntime. Run as a
script (under a given TETHER_ISA) it prints one JSON line: the worst relative error per case
and the kernel tether chose. Residual cases run ai.tether FusedConv with a summand in tether
and Conv -> Add -> Relu in onnxruntime; channels-last cases run the ai.tether channels_last
form between Transposes in tether and the ONNX op in onnxruntime."""

from __future__ import annotations

import itertools
import json
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

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
    import onnx

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
    import onnx

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
    import onnx

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


def cases():
    rng = np.random.default_rng(0)
    for i, c in enumerate(POOL_CASES):
        yield f"pool{i}_{c[0]}", *pool_model(*c, rng)
    for i, c in enumerate(CONV_CASES):
        yield f"conv{i}", *conv_model(*c, rng)
    for i, c in enumerate(CONV_CASES):
        ref, feeds, fused = conv_add_models(*c, rng, with_bias=i % 2 == 0)
        yield f"conv{i}_residual_relu", ref, feeds, fused
    for i, c in enumerate(CONV_CASES[::3]):
        blob, feeds = conv_model(*c, rng)
        blob, w = runtime_weights(blob, rng)
        yield f"conv{i}_runtime_weights", blob, {**feeds, **w}
    two_d = [c for c in CONV_CASES if len(c[3]) == 2] + CHANNELS_LAST_CASES
    for i, c in enumerate(two_d):
        act = CHANNELS_LAST_ACTIVATIONS[i % len(CHANNELS_LAST_ACTIVATIONS)]
        blob, feeds = conv_model(*c, rng)
        yield f"conv{i}_channels_last_{act}", with_activation(blob, act), feeds, channels_last(blob, act)
        ref, feeds, _ = conv_add_models(*c, rng, with_bias=i % 2 == 1)
        yield f"conv{i}_channels_last_residual_relu", ref, feeds, channels_last(ref)
    for i, c in enumerate(POOL_CASES):
        blob, feeds = pool_model(*c, rng)
        yield f"pool{i}_{c[0]}_channels_last", blob, feeds, channels_last(blob)
    for i, c in enumerate(CONV_TRANSPOSE_CASES):
        blob, feeds = conv_transpose_model(*c, rng)
        yield f"conv_transpose{i}_channels_last", blob, feeds, channels_last(blob)
    for op in ("GlobalAveragePool", "GlobalMaxPool"):
        blob, feeds = global_pool_model(op, rng)
        yield f"{op}_channels_last", blob, feeds, channels_last(blob)
    for m, k, n in itertools.product(GEMM_SIZES, repeat=3):
        yield f"gemm_{m}x{k}x{n}", *gemm_model(m, k, n, trans_b=(m + n) % 2 == 0, const_b=k % 2 == 1, rng=rng)
    # Products large enough to split into a grid of blocks across threads, with K past one
    # K block and N past one N block (the last blocks ragged).
    # Rows alone in their tile (m = 1, and 15 = 14 + 1) run up to four panels at once: N
    # past one N block, leaving a ragged group of panels at its end.
    for m, k, n in [(200, 600, 1100), (37, 300, 2100), (1, 513, 70), (1, 300, 1100), (15, 40, 200), (7, 17, 130)]:
        yield f"gemm_{m}x{k}x{n}", *gemm_model(m, k, n, trans_b=False, const_b=m != 37, rng=rng)
    for a_shape, b_shape in [((13,), (13, 3)), ((2, 3, 13, 127), (127, 5)), ((3, 1, 7, 13), (4, 13, 9)), ((127, 13), (13,)),
                             ((5, 37, 300), (5, 300, 70))]:
        for const_b in (True, False):
            yield f"matmul_{a_shape}_{b_shape}_{const_b}", *matmul_model(a_shape, b_shape, const_b, rng)


def main() -> int:
    import onnxruntime as ort
    import tether as tt

    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    worst = {}
    for name, blob, feeds, *tether_blob in cases():
        ref = ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        got = tt.compile(tt.load(tether_blob[0] if tether_blob else blob), threads=threads, optimize=False).run(feeds)["y"]
        assert got.shape == ref.shape, (name, got.shape, ref.shape)
        worst[name] = float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))
    print(json.dumps({"kernel": tt.cpu_info()["gemm_kernel"], "isa": tt.cpu_info()["isa"], "worst": worst}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
