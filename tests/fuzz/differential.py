"""Differential fuzzing of the CPU engine against onnxruntime.

Each seed makes one small model and its inputs: a node test of the `onnx` package for an op
both engines run, mutated (new input values with NaN, infinities and large numbers now and
then; one input's dims changed; one integer or string attribute changed), or, one seed in
four, a node of a random op with random dims, dtypes and attributes from the op's schema.
Both engines run it. Where both succeed, the outputs must agree: same dtypes and shapes,
integers and booleans equal, floats within tolerance with NaN in the same places; where they
do not, the ONNX reference implementation decides (onnxruntime departs from the operators'
definitions in a few places, e.g. NaN in an attention mask where causality hides the key). tether
failing with a typed error where onnxruntime runs is counted (it may be a missing feature);
a tether crash, an InternalError or a disagreement is a finding.

    python tests/fuzz/differential.py SECONDS [FIRST_SEED]   # batches in child processes
    python tests/fuzz/differential.py --seed N               # one case, printed

`tests/python/test_differential.py` runs a fixed sample of seeds in `make test`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
import time
import warnings
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, defs, helper

OPSET = 18
# Ops whose result is random, or whose definition leaves the answer to the implementation.
SKIP_OPS = {
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli", "Multinomial", "Dropout",
    "Constant",
}
INTERESTING_INTS = [0, 1, 2, 3, -1, -2, 5, 7, 100, 2**31, -(2**31), 2**40, -(2**63), 2**63 - 1]
DTYPES = {"tensor(float)": TensorProto.FLOAT, "tensor(int64)": TensorProto.INT64, "tensor(int32)": TensorProto.INT32,
          "tensor(bool)": TensorProto.BOOL, "tensor(uint8)": TensorProto.UINT8, "tensor(int8)": TensorProto.INT8,
          "tensor(double)": TensorProto.DOUBLE, "tensor(float16)": TensorProto.FLOAT16}
STRINGS = {"mode": ["constant", "reflect", "edge", "wrap", "nearest", "linear", "cubic", "DCR", "CRD"],
           "auto_pad": ["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"],
           "coordinate_transformation_mode": ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"],
           "nearest_mode": ["round_prefer_floor", "floor", "ceil", "round_prefer_ceil"],
           "reduction": ["none", "add", "mul", "max", "min"], "direction": ["forward", "reverse", "bidirectional"],
           "approximate": ["none", "tanh"]}


@dataclasses.dataclass
class Case:
    label: str          # the template's name, or "random:<op>"
    model: bytes
    feeds: dict[str, np.ndarray]
    threads: int
    optimize: bool


@dataclasses.dataclass
class Outcome:
    # "match", "both_fail", "tether_fails", "ort_fails", "ort_differs" (tether agrees with the
    # ONNX reference where onnxruntime does not), "mismatch", "internal"
    kind: str
    detail: str = ""


@functools.lru_cache(maxsize=1)
def _supported() -> tuple[frozenset[str], list[Any]]:
    import tether as tt
    from onnx.backend.test.case.node import collect_testcases

    ops = frozenset(op for dom, op in tt.supported_ops("cpu") if dom in ("", "ai.onnx")) - SKIP_OPS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    templates = []
    for c in sorted(cases, key=lambda c: c.name):
        nodes = c.model.graph.node
        if "_expanded" in c.name or not c.data_sets or len(nodes) != 1 or nodes[0].domain not in ("", "ai.onnx"):
            continue
        if nodes[0].op_type not in ops or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                                              for a in nodes[0].attribute):
            continue
        feeds = c.data_sets[0][0]
        if len(feeds) != len(c.model.graph.input) or any(not isinstance(v, np.ndarray) or v.dtype.kind in "OUS"
                                                         or v.size > 4096 for v in feeds):
            continue
        templates.append(c)
    return ops, templates


def _values(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind == "f":
        a = rng.standard_normal(shape) * 3
        # Not in float16: tether computes float16 ops in float32, so where an intermediate
        # would round to 0 or overflow in float16, inf and NaN rightly come out differently.
        if a.size and dtype != np.float16 and rng.random() < 0.15:
            # (Not 1e30: kernels that square or sum in float64 rightly give a number where
            # float32 arithmetic overflows.)
            a.flat[rng.integers(a.size)] = rng.choice([np.nan, np.inf, -np.inf, 0.0])
        return a.astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -3), min(info.max, 6), size=shape, endpoint=True).astype(dtype)


def _mutated(rng: np.random.Generator) -> Case:
    _, templates = _supported()
    t = templates[int(rng.integers(len(templates)))]
    model = onnx.ModelProto()
    model.CopyFrom(t.model)
    feeds = {vi.name: np.array(v) for vi, v in zip(model.graph.input, t.data_sets[0][0], strict=True)}
    node = model.graph.node[0]
    floats = [n for n, v in feeds.items() if v.dtype.kind == "f"]
    for n in floats:
        if rng.random() < 0.8:
            feeds[n] = _values(rng, feeds[n].dtype, feeds[n].shape)
    if floats and rng.random() < 0.4:
        n = floats[int(rng.integers(len(floats)))]
        shape = list(feeds[n].shape)
        if shape:
            shape[int(rng.integers(len(shape)))] = int(rng.choice([0, 1, 2, 3, 5, 7]))
            feeds[n] = _values(rng, feeds[n].dtype, tuple(shape))
    ints = [a for a in node.attribute if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS)
            or (a.type == onnx.AttributeProto.STRING and a.name in STRINGS)]
    if ints and rng.random() < 0.4:
        a = ints[int(rng.integers(len(ints)))]
        if a.type == onnx.AttributeProto.INT:
            a.i = int(a.i + rng.choice([-1, 1])) if rng.random() < 0.8 else int(rng.choice(INTERESTING_INTS))
        elif a.type == onnx.AttributeProto.INTS and len(a.ints):
            k = int(rng.integers(len(a.ints)))
            a.ints[k] = int(a.ints[k] + rng.choice([-1, 1]))
        elif a.type == onnx.AttributeProto.STRING:
            a.s = str(rng.choice(STRINGS[a.name])).encode()
    # Inputs keep their names and dtypes; their shapes are left to inference.
    for vi in model.graph.input:
        vi.type.tensor_type.ClearField("shape")
    for vi in model.graph.output:
        vi.type.tensor_type.ClearField("shape")
    return Case(t.name, model.SerializeToString(), feeds, 1 + int(rng.integers(2)), bool(rng.random() < 0.75))


def _random(rng: np.random.Generator) -> Case:
    ops, _ = _supported()
    # Ops of the default domain that ONNX itself does not define (onnxruntime's contrib ops
    # such as SimplifiedLayerNormalization) have no schema to draw inputs from.
    op = str(rng.choice(sorted(o for o in ops if defs.has(o))))
    schema = defs.get_schema(op, max(OPSET, defs.get_schema(op).since_version))
    inputs, feeds, infos = [], {}, []
    for k, formal in enumerate(schema.inputs):
        option = formal.option
        if option == defs.OpSchema.FormalParameterOption.Optional and rng.random() < 0.4:
            inputs.append("")
            continue
        allowed = [t.allowed_type_strs for t in schema.type_constraints if t.type_param_str == formal.type_str]
        types = [t for t in (allowed[0] if allowed else [formal.type_str]) if t in DTYPES] or ["tensor(float)"]
        dt = TensorProto.FLOAT if "tensor(float)" in types and rng.random() < 0.7 else DTYPES[str(rng.choice(types))]
        count = int(rng.integers(1, 4)) if option == defs.OpSchema.FormalParameterOption.Variadic else 1
        for j in range(count):
            name = f"i{k}_{j}"
            shape = tuple(int(rng.choice([0, 1, 1, 2, 3, 4, 5])) for _ in range(int(rng.integers(0, 5))))
            feeds[name] = _values(rng, helper.tensor_dtype_to_np_dtype(dt), shape)
            inputs.append(name)
            infos.append(helper.make_tensor_value_info(name, dt, None))
    attrs: dict[str, Any] = {}
    kinds = defs.OpSchema.AttrType
    for name, a in schema.attributes.items():
        if not (a.required or rng.random() < 0.5):
            continue
        if a.type == kinds.INT:
            attrs[name] = int(rng.choice(INTERESTING_INTS)) if rng.random() < 0.2 else int(rng.integers(-2, 4))
        elif a.type == kinds.INTS:
            attrs[name] = [int(rng.integers(-2, 4)) for _ in range(int(rng.integers(1, 5)))]
        elif a.type == kinds.FLOAT:
            attrs[name] = float(rng.choice([0.0, 1.0, -1.0, 0.5, 2.0, 1e-5]))
        elif a.type == kinds.STRING and name in STRINGS:
            attrs[name] = str(rng.choice(STRINGS[name]))
    node = helper.make_node(op, inputs, ["y"], **attrs)
    graph = helper.make_graph([node], "g", infos, [helper.make_empty_tensor_value_info("y")])
    opset = max(OPSET, schema.since_version)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return Case(f"random:{op}", model.SerializeToString(), feeds, 1 + int(rng.integers(2)), bool(rng.random() < 0.75))


def case(seed: int) -> Case:
    """The model and inputs of `seed`: a mutated node test, or (one in four) a random node."""
    rng = np.random.default_rng(seed)
    c = _random(rng) if rng.random() < 0.25 else _mutated(rng)
    if onnx.load_from_string(c.model).graph.node[0].op_type in ("Cast", "CastLike"):
        # A float outside the target integer type's range has no defined conversion.
        c.feeds = {n: np.clip(np.nan_to_num(np.abs(v)), 0, 100).astype(v.dtype) if v.dtype.kind == "f" else v
                   for n, v in c.feeds.items()}
    return c


def _agree(name: str, want: np.ndarray, got: np.ndarray) -> str:
    if want.dtype != got.dtype or want.shape != got.shape:
        return f"{name}: onnxruntime gives {want.dtype}{list(want.shape)}, tether {got.dtype}{list(got.shape)}"
    if want.dtype.kind not in "fc":
        bad = want != got
        return f"{name}: {int(bad.sum())} of {want.size} values differ" if bad.any() else ""
    w, g = want.astype(np.float64), got.astype(np.float64)
    if not np.array_equal(np.isnan(w), np.isnan(g)):
        return f"{name}: NaN at different places"
    finite = ~np.isnan(w)
    # float16: tether computes in float32 and rounds once; onnxruntime rounds on the way too.
    tol = 1e-2 if want.dtype == np.float16 else 1e-4
    close = np.isclose(g[finite], w[finite], rtol=tol, atol=tol)
    if not close.all():
        k = int(np.argmax(~close))
        return (f"{name}: {int((~close).sum())} of {int(finite.sum())} values differ, e.g. "
                f"{w[finite][k]!r} (onnxruntime) vs {g[finite][k]!r}")
    return ""


# Ops on which onnxruntime itself has crashed the process for some inputs (LayerNormalization
# with a scale of higher rank than the normalized dims: a segmentation fault in 1.32): their
# cases run onnxruntime in a child process, where a crash reads as onnxruntime failing.
ISOLATED_OPS = {"LayerNormalization", "SimplifiedLayerNormalization"}


def _onnxruntime_in_child(c: Case) -> tuple[list[np.ndarray] | None, str]:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        np.savez(os.path.join(folder, "feeds.npz"), **c.feeds)
        with open(os.path.join(folder, "model.onnx"), "wb") as f:
            f.write(c.model)
        code = ("import sys, numpy as np, onnxruntime as ort\n"
                "o = ort.SessionOptions(); o.intra_op_num_threads = 1\n"
                "feeds = dict(np.load(sys.argv[1] + '/feeds.npz'))\n"
                "try:\n"
                "    out = ort.InferenceSession(sys.argv[1] + '/model.onnx', o, providers=['CPUExecutionProvider'])"
                ".run(None, feeds)\n"
                "except Exception as e:\n"
                "    print(f'{type(e).__name__}: {e}'); sys.exit(3)\n"
                "np.savez(sys.argv[1] + '/out.npz', *out)\n")
        p = subprocess.run([sys.executable, "-c", code, folder], capture_output=True, text=True, timeout=120)
        if p.returncode == 3:
            return None, p.stdout.strip()
        if p.returncode != 0:
            return None, f"onnxruntime crashed (exit {p.returncode})"
        with np.load(os.path.join(folder, "out.npz")) as out:
            return [out[f"arr_{k}"] for k in range(len(out.files))], ""


def run_onnxruntime(c: Case) -> tuple[list[np.ndarray] | None, str]:
    """onnxruntime's outputs for the case, or None and its error."""
    import onnxruntime as ort

    if onnx.load_from_string(c.model).graph.node[0].op_type in ISOLATED_OPS:
        return _onnxruntime_in_child(c)
    try:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        return ort.InferenceSession(c.model, options, providers=["CPUExecutionProvider"]).run(None, c.feeds), ""
    except Exception as e:  # noqa: BLE001 - any onnxruntime failure means "not comparable"
        return None, f"{type(e).__name__}: {e}"


def run(c: Case, reference: tuple[list[np.ndarray] | None, str] | None = None) -> Outcome:
    """Runs the case in both engines (onnxruntime's answer may be given) and compares."""
    import tether as tt

    want, ort_error = reference if reference is not None else run_onnxruntime(c)
    try:
        got = list(tt.compile(tt.load(c.model), threads=c.threads, optimize=c.optimize,
                              max_memory=1 << 30).run(c.feeds).values())
    except tt.InternalError as e:
        return Outcome("internal", str(e))
    except tt.Error as e:
        return Outcome("both_fail" if want is None else "tether_fails", f"{type(e).__name__}: {e}")
    if want is None:
        return Outcome("ort_fails", ort_error)
    problems = _disagreements(want, got)
    if not problems:
        return Outcome("match")
    # Where onnxruntime departs from the operator's definition, the ONNX reference decides.
    try:
        from onnx.reference import ReferenceEvaluator

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = [np.asarray(r) for r in ReferenceEvaluator(c.model).run(None, c.feeds)]
        # The Python reference keeps reduced dims for any keepdims but 0, where ONNX's shape
        # inference (and tether, and onnxruntime) keep them only for 1: the values decide.
        ref = [r.reshape(g.shape) if r.shape != g.shape and r.size == g.size else r for r, g in zip(ref, got, strict=False)]
        if not _disagreements(ref, got):
            return Outcome("ort_differs", "; ".join(problems))
        # Likewise for flags set to neither 0 nor 1: the Python reference takes any nonzero
        # value as true, onnxruntime and tether only 1. Asked with the flags as 0 and 1, it
        # decides the rest (the mean of nothing: NaN, where onnxruntime gives 0).
        flagged = _flags_as_bits(c.model)
        if flagged is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = [np.asarray(r) for r in ReferenceEvaluator(flagged).run(None, c.feeds)]
            if not _disagreements(ref, got):
                return Outcome("ort_differs", "; ".join(problems) + " (flags read as 0 or 1)")
    except Exception:  # noqa: BLE001,S110 - no reference answer: the disagreement stands
        pass
    return Outcome("mismatch", "; ".join(problems))


FLAGS = {"keepdims", "noop_with_empty_axes", "select_last_index", "exclusive", "reverse", "ceil_mode",
         "count_include_pad", "transA", "transB", "is_causal", "center_point_box", "sorted", "largest"}


def _flags_as_bits(model: bytes) -> bytes | None:
    """The model with every flag attribute of value other than 0 or 1 set to 1 if it was 1 (so
    none) and 0 otherwise, as onnxruntime and tether read it; None when no flag needs it."""
    m = onnx.load_from_string(model)
    changed = False
    for node in m.graph.node:
        for a in node.attribute:
            if a.name in FLAGS and a.type == onnx.AttributeProto.INT and a.i not in (0, 1):
                a.i = 0
                changed = True
    return m.SerializeToString() if changed else None


def _disagreements(want: list[np.ndarray], got: list[np.ndarray]) -> list[str]:
    problems = [p for p in (_agree(f"output {k}", w, g) for k, (w, g) in enumerate(zip(want, got, strict=False))) if p]
    if len(want) != len(got):
        problems.append(f"{len(want)} outputs expected, {len(got)} from tether")
    return problems


def _child(first: int, count: int) -> None:
    for seed in range(first, first + count):
        print(json.dumps({"start": seed}), flush=True)
        c = case(seed)
        reference = run_onnxruntime(c)
        print(json.dumps({"onnxruntime_done": seed}), flush=True)  # a crash after this is tether's
        out = run(c, reference)
        print(json.dumps({"seed": seed, "label": c.label, "kind": out.kind, "detail": out.detail[:400]}), flush=True)


def main(argv: list[str]) -> None:
    if argv[0] == "--seed":
        c = case(int(argv[1]))
        print(c.label, "threads", c.threads, "optimize", c.optimize)
        print(onnx.load_from_string(c.model).graph.node[0])
        for n, v in c.feeds.items():
            print(n, v.dtype, v.shape, v.ravel()[:8])
        print(run(c))
        return
    if argv[0] == "--child":
        _child(int(argv[1]), int(argv[2]))
        return
    seconds, seed = float(argv[0]), int(argv[1]) if len(argv) > 1 else 0
    counts: dict[str, int] = {}
    findings = []
    end = time.time() + seconds
    while time.time() < end:
        p = subprocess.run([sys.executable, __file__, "--child", str(seed), "100"], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONWARNINGS="ignore"))
        last, ort_done = seed, False
        for line in p.stdout.splitlines():
            r = json.loads(line)
            if "start" in r:
                last, ort_done = r["start"], False
                continue
            if "onnxruntime_done" in r:
                ort_done = True
                continue
            counts[r["kind"]] = counts.get(r["kind"], 0) + 1
            if r["kind"] in ("mismatch", "internal"):
                findings.append(r)
                print(json.dumps(r), flush=True)
        if p.returncode != 0:
            if ort_done:
                findings.append({"seed": last, "kind": "crash", "detail": p.stderr[-400:]})
                print(json.dumps(findings[-1]), flush=True)
            else:  # onnxruntime died on the case: not tether's finding
                counts["onnxruntime_crash"] = counts.get("onnxruntime_crash", 0) + 1
            seed = last + 1
        else:
            seed += 100
    print(json.dumps({"executed": sum(counts.values()), "counts": counts, "findings": len(findings), "next_seed": seed}))


if __name__ == "__main__":
    main(sys.argv[1:])
