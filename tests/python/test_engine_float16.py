"""float16 and bfloat16 models on the CPU engine: ops compute in float32 and store the model's
type; results match onnxruntime (which does the same for most ops on CPU) within half precision."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tether as tt
import torch
from onnx import TensorProto as P
from onnx import helper as h
from onnx import numpy_helper


class _Block(torch.nn.Module):
    """Conv + BatchNorm + SiLU, then a token mixer with LayerNorm, attention-style MatMuls,
    Softmax and GELU: the ops of common image and language models."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.norm = torch.nn.LayerNorm(16)
        self.qkv = torch.nn.Linear(16, 48)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.silu(self.bn(self.conv(x)))  # [b, 16, 8, 8]
        t = self.norm(y.flatten(2).transpose(1, 2))  # [b, 64, 16]
        q, k, v = self.qkv(t).chunk(3, dim=-1)
        a = torch.softmax(q @ k.transpose(1, 2) / 4.0, dim=-1) @ v
        return self.mlp((t + a).mean(dim=1))


def _to_half(model: onnx.ModelProto, dtype: int) -> onnx.ModelProto:
    """The model with float32 weights, inputs, outputs and casts turned to `dtype` (what
    float16 converters do to a float32 model)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    np_type = {P.FLOAT16: np.float16}.get(dtype)
    for i, t in enumerate(g.initializer):
        if t.data_type == P.FLOAT:
            a = numpy_helper.to_array(t)
            if np_type is not None:
                new = numpy_helper.from_array(a.astype(np_type), t.name)
            else:  # bfloat16: the top 16 bits, rounded to nearest even
                bits = a.astype(np.float32).view(np.uint32)
                bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
                new = h.make_tensor(t.name, P.BFLOAT16, a.shape, bits.tobytes(), raw=True)
            g.initializer[i].CopyFrom(new)
    for v in list(g.input) + list(g.output):
        if v.type.tensor_type.elem_type == P.FLOAT:
            v.type.tensor_type.elem_type = dtype
    del g.value_info[:]
    for n in g.node:
        for a in n.attribute:
            if n.op_type == "Cast" and a.name == "to" and a.i == P.FLOAT:
                a.i = dtype
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == P.FLOAT:
                arr = numpy_helper.to_array(a.t)
                a.t.CopyFrom(numpy_helper.from_array(arr.astype(np.float16), a.t.name))
    return m


@pytest.fixture(scope="module")
def block_fp32(tmp_path_factory) -> onnx.ModelProto:
    torch.manual_seed(0)
    m = _Block().eval()
    with torch.no_grad():  # non-trivial BatchNorm statistics
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
    path = tmp_path_factory.mktemp("fp16") / "block.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (torch.randn(1, 3, 16, 16),), str(path), dynamo=True, verbose=False)
    return onnx.load(str(path))


def test_float16_model_matches_onnxruntime_and_the_float32_model(block_fp32: onnx.ModelProto) -> None:
    half = _to_half(block_fp32, P.FLOAT16).SerializeToString()
    sess = tt.compile(tt.load(half))
    assert "computed in float32" in sess.report
    ref = ort.InferenceSession(half, providers=["CPUExecutionProvider"])
    full = ort.InferenceSession(block_fp32.SerializeToString(), providers=["CPUExecutionProvider"])
    name = ref.get_inputs()[0].name
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    got = list(sess.run({name: x.astype(np.float16)}).values())[0]
    assert got.dtype == np.float16
    want = ref.run(None, {name: x.astype(np.float16)})[0]
    exact = full.run(None, {name: x})[0]
    scale = float(np.abs(exact).max())
    # Both engines round to float16 along the way; each stays within a few float16 steps of
    # the float32 model, and tether is no farther from it than onnxruntime is (plus one step).
    err_tt = float(np.abs(got.astype(np.float32) - exact).max())
    err_ort = float(np.abs(want.astype(np.float32) - exact).max())
    assert err_tt <= 2e-2 * scale, (err_tt, scale)
    assert err_tt <= err_ort + 2.0 ** -10 * scale, (err_tt, err_ort)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=2e-2 * scale)


def test_bfloat16_elementwise_chain_matches_numpy() -> None:
    # bfloat16 Mul -> Add -> Tanh -> ReduceMean: each op computed in float32 and rounded to
    # bfloat16 in between, as numpy does below step by step.
    g = h.make_graph(
        [h.make_node("Mul", ["x", "x"], ["sq"]), h.make_node("Add", ["sq", "x"], ["s"]),
         h.make_node("Tanh", ["s"], ["t"]), h.make_node("ReduceMean", ["t"], ["y"], keepdims=0)],
        "g", [h.make_tensor_value_info("x", P.BFLOAT16, [4, 8])], [h.make_tensor_value_info("y", P.BFLOAT16, [])],
    )
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()
    sess = tt.compile(tt.load(model))

    def bf16(a: np.ndarray) -> np.ndarray:
        bits = a.astype(np.float32).view(np.uint32)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        return bits.astype(np.uint32).view(np.float32)

    x = bf16(np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32))
    want = bf16(np.mean(bf16(np.tanh(bf16(bf16(x * x) + x)))))
    got = sess.run({"x": x.astype(ml_dtypes.bfloat16)})["y"]
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2.0 ** -7)
