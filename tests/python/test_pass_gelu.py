"""passes::fuse_gelu: GELU spelled out in elementary ops (as exporters before opset 20 and
GPT-2's own activation write it) becomes one Gelu node, in every order the factors may come,
and computes what onnxruntime computes on the original graph; near misses stay as they are."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import tether as tt
from _vulkan import assert_close, requires_vulkan
from onnx import helper
from test_passes import check_parity, make_model, op_counts, rnd, saved_nodes


def _c(name: str, value: float) -> dict:
    return {name: np.array(value, np.float32)}


def _inner_tanh(x: str, cube: str, coef: float = 0.044715) -> tuple[list, dict, str]:
    """sqrt(2/pi) * (x + coef * x^3) with x^3 as Pow(x, 3) or x * (x * x); returns its nodes."""
    nodes, inits = [], {**_c("k3", 3.0), **_c("kc", coef), **_c("ks", math.sqrt(2 / math.pi))}
    if cube == "pow":
        nodes.append(helper.make_node("Pow", [x, "k3"], ["cube"], name="pow"))
    else:
        nodes += [helper.make_node("Mul", [x, x], ["sq"], name="sq"), helper.make_node("Mul", ["sq", x], ["cube"], name="cube")]
    nodes += [helper.make_node("Mul", ["kc", "cube"], ["term"], name="term"),
              helper.make_node("Add", [x, "term"], ["inner"], name="inner"),
              helper.make_node("Mul", ["inner", "ks"], ["arg"], name="scale"),
              helper.make_node("Tanh", ["arg"], ["f"], name="tanh")]
    return nodes, inits, "f"


def _inner_erf(x: str, form: str) -> tuple[list, dict, str]:
    if form == "div":
        nodes, inits = [helper.make_node("Div", [x, "kr"], ["arg"], name="scale")], _c("kr", math.sqrt(2))
    else:
        nodes, inits = [helper.make_node("Mul", ["kr", x], ["arg"], name="scale")], _c("kr", 1 / math.sqrt(2))
    return nodes + [helper.make_node("Erf", ["arg"], ["f"], name="erf")], inits, "f"


def _gelu(kind: str, order: str, x: str = "x", out: str = "y") -> tuple[list, dict]:
    """The nodes of one spelled-out GELU of `x` (kind: tanh-pow, tanh-cube, erf-div, erf-mul)
    with its outer product in `order`: (x*h)*s, (x*s)*h, x*(h*s), (s*h)*x."""
    family, form = kind.split("-")
    nodes, inits, f = _inner_tanh(x, form) if family == "tanh" else _inner_erf(x, form)
    inits = {**inits, **_c("one", 1.0), **_c("half", 0.5)}
    nodes.append(helper.make_node("Add", ["one", f], ["s"], name="plus"))
    if order == "(x*h)*s":
        nodes += [helper.make_node("Mul", [x, "half"], ["p"], name="p"), helper.make_node("Mul", ["p", "s"], [out], name="out")]
    elif order == "(x*s)*h":
        nodes += [helper.make_node("Mul", ["s", x], ["p"], name="p"), helper.make_node("Mul", ["half", "p"], [out], name="out")]
    elif order == "x*(h*s)":
        nodes += [helper.make_node("Mul", ["half", "s"], ["p"], name="p"), helper.make_node("Mul", [x, "p"], [out], name="out")]
    else:
        nodes += [helper.make_node("Mul", ["s", "half"], ["p"], name="p"), helper.make_node("Mul", ["p", x], [out], name="out")]
    return nodes, inits


KINDS = ["tanh-pow", "tanh-cube", "erf-div", "erf-mul"]
ORDERS = ["(x*h)*s", "(x*s)*h", "x*(h*s)", "(s*h)*x"]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("opset", [17, 20])
def test_a_spelled_out_gelu_becomes_one_gelu_node(kind, order, opset):
    rng = np.random.default_rng(7)
    nodes, inits = _gelu(kind, order)
    proto = make_model(nodes, {"x": (3, 50)}, ["y"], inits, opset=opset)
    x = rnd(rng, 3, 50) * 3
    opt = check_parity(proto, {"x": x})
    assert op_counts(opt) == Counter({"Gelu": 1})
    node = saved_nodes(opt)["out"]
    want_domain = "" if opset >= 20 else "ai.tether"
    approx = helper.get_attribute_value(next(a for a in node.attribute if a.name == "approximate")).decode()
    assert (node.domain, node.op_type, approx, list(node.input), list(node.output)) == (
        want_domain, "Gelu", "tanh" if kind.startswith("tanh") else "none", ["x"], ["y"])


@pytest.mark.parametrize("opset", [17, 20])
def test_a_gelu_after_a_matmul_fuses_into_it_as_its_activation(opset):
    rng = np.random.default_rng(8)
    nodes, inits = _gelu("tanh-pow", "(x*h)*s", x="m")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm")] + nodes
    proto = make_model(nodes, {"x": (4, 32)}, ["y"], {**inits, "w": rnd(rng, 32, 40)}, opset=opset)
    opt = check_parity(proto, {"x": rnd(rng, 4, 32)})
    assert op_counts(opt) == Counter({"FusedMatMul": 1})
    assert opt.nodes[0].attributes["activation"] == "GeluTanh"


def test_gpt2_style_gelus_in_a_chain_each_fuse_and_a_session_runs_them():
    rng = np.random.default_rng(9)
    nodes, inits = [], {}
    for k in range(3):
        part, part_inits = _gelu(KINDS[k], ORDERS[k], x=f"x{k}", out=f"x{k + 1}")
        nodes += [helper.make_node(n.op_type, list(n.input), list(n.output), name=f"{n.name}{k}") for n in part]
        # unique value names per copy: rename the pattern's internal values
        rename = {v: f"{v}{k}" for n in part for v in n.output if v != f"x{k + 1}"}
        rename.update({c: f"{c}{k}" for c in part_inits})
        for n in nodes[-len(part):]:
            n.input[:] = [rename.get(i, i) for i in n.input]
            n.output[:] = [rename.get(o, o) for o in n.output]
        inits.update({f"{c}{k}": v for c, v in part_inits.items()})
    proto = make_model(nodes, {"x0": (2, 64)}, ["x3"], inits, opset=17)
    opt = check_parity(proto, {"x0": rnd(rng, 2, 64)})
    assert op_counts(opt) == Counter({"Gelu": 3})


@pytest.mark.parametrize("case", ["wrong_coefficient", "intermediate_read_twice", "not_half", "x_differs",
                                  "intermediate_is_output"])
def test_near_misses_are_left_as_they_are(case):
    rng = np.random.default_rng(10)
    outputs = ["y"]
    if case == "wrong_coefficient":
        nodes, inits = _gelu("tanh-pow", "(x*h)*s")
        inits["kc"] = np.array(0.04, np.float32)
    elif case == "intermediate_read_twice":
        nodes, inits = _gelu("erf-div", "(x*h)*s")
        nodes.append(helper.make_node("Neg", ["f"], ["z"], name="other"))
        outputs = ["y", "z"]
    elif case == "not_half":
        nodes, inits = _gelu("erf-mul", "x*(h*s)")
        inits["half"] = np.array(0.25, np.float32)
    elif case == "x_differs":
        nodes, inits = _gelu("erf-div", "(x*h)*s")
        nodes = [helper.make_node("Neg", ["x"], ["nx"], name="neg")] + nodes
        nodes[1].input[0] = "nx"  # Erf reads -x, the half reads x
    else:
        nodes, inits = _gelu("tanh-cube", "(s*h)*x")
        outputs = ["y", "inner"]
    proto = make_model(nodes, {"x": (3, 20)}, outputs, inits, opset=17)
    opt = check_parity(proto, {"x": rnd(rng, 3, 20)})
    assert "Gelu" not in op_counts(opt)


def test_the_pass_is_reported():
    nodes, inits = _gelu("erf-div", "(x*h)*s")
    sess = tt.compile(tt.load(make_model(nodes, {"x": (2, 8)}, ["y"], inits, opset=17).SerializeToString()))
    assert "pass fuse_gelu: 1 GELU patterns fused" in sess.report


@requires_vulkan
@pytest.mark.usefixtures("vulkan_validation")
@pytest.mark.parametrize("opset", [17, 20])
def test_the_vulkan_engine_runs_the_fused_gelu_itself(opset):
    # Before opset 20 the node is ai.tether's Gelu; strict=True fails if Vulkan lacks it.
    rng = np.random.default_rng(11)
    nodes, inits = _gelu("tanh-pow", "(x*h)*s")
    blob = make_model(nodes + [helper.make_node("Neg", ["y"], ["z"], name="neg")], {"x": (3, 70)}, ["z"], inits,
                      opset=opset).SerializeToString()
    x = rnd(rng, 3, 70) * 3
    got = tt.compile(blob, device="vulkan", strict=True).run({"x": x})["z"]
    assert_close(got, tt.compile(blob, optimize=False).run({"x": x})["z"], rtol=1e-5)
