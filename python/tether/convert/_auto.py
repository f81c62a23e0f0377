"""Automatic mode: keep in float32 the nodes that overflow or lose the most until the outputs
meet a relative error budget on calibration batches.

Both models run on tether's CPU engine unoptimised, so every node's output can be read (a half
node computes in float32 and rounds its result, as docs/engine.md says). Each round converts
with the nodes kept so far, compares every node's output with the float32 run and keeps more:

1. every node whose float32 output exceeds float16's range (it would be inf), and every node
   whose half output is inf or NaN where float32 is finite while its inputs are not (where a
   non-finite value starts);
2. else, while the budget is missed, the node that adds the most error (its output's relative
   error less its inputs'), first among the half readers of nodes already kept for the budget:
   a single node kept between half ones gains nothing, its result is rounded at the Cast out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tether._model import Model
from tether._native import core as _core
from tether._session import compile
from tether.convert._graph import FLOAT16_MAX, node_label


def rel_error(ref: np.ndarray, got: np.ndarray) -> float:
    """Largest absolute difference over the reference's largest magnitude; inf where the
    reference is finite and the half result is not."""
    r, g = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    if r.shape != g.shape:
        return float("inf")
    fin = np.isfinite(r)
    if np.any(fin & ~np.isfinite(g)):
        return float("inf")
    if not fin.any():
        return 0.0
    scale = max(float(np.abs(r[fin]).max()), 1e-30)
    return float(np.abs(r[fin] - g[fin]).max() / scale)


def _capture(model: Model, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    sess = compile(model, "cpu", optimize=False)
    types = {i.name: i.dtype for i in sess.inputs}
    out = []
    for f in feeds:
        cast = {k: v.astype(_np_dtype(types[k])) if k in types and v.dtype == np.float32 else v
                for k, v in f.items()}
        _, values = sess._core.run_capture(cast, [])
        out.append(dict(values))
    return out


def _np_dtype(name: str) -> Any:
    if name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(name)


def _worst(ref: list[dict[str, np.ndarray]], got: list[dict[str, np.ndarray]], names: list[str]) -> dict[str, float]:
    return {n: max(rel_error(r[n], g[n]) for r, g in zip(ref, got, strict=True)) if all(n in g for g in got)
            else 0.0 for n in names}


def search(model: Model, proto: Any, convert: Callable[[dict[str, str]], Model], feeds: list[dict[str, np.ndarray]],
           max_error: float, to: int, kept: dict[str, str]) -> tuple[Model, float, float, list[str]]:
    """Grows ``kept`` (in place) until the budget holds; returns the model, the error with only
    the given ``kept``, the final error and notes."""
    nodes = list(proto.graph.node)
    labels = [node_label(n, i) for i, n in enumerate(nodes)]
    outputs = [o.name for o in proto.graph.output]
    values = [v for n in nodes for v in n.output if v]
    producer = {v: labels[i] for i, n in enumerate(nodes) for v in n.output if v}
    ref = _capture(model, feeds)
    before = max(_worst(ref, _capture(convert(kept), feeds), outputs).values(), default=0.0)
    if to == 10:
        for i, n in enumerate(nodes):
            for v in n.output:
                big = max((_finite_max(r[v]) for r in ref if v in r), default=0.0)
                if big > FLOAT16_MAX and labels[i] not in kept:
                    kept[labels[i]] = (f"overflow: output '{v}' reaches |x| = {big:.3g} in float32, "
                                       f"beyond float16's {FLOAT16_MAX:g}")
    budget_kept: list[str] = []
    notes: list[str] = []
    for _ in range(len(nodes) + 1):
        converted = convert(kept)
        got = _capture(converted, feeds)
        errs = _worst(ref, got, values)
        err = max(_worst(ref, got, outputs).values(), default=0.0)
        grown = _overflows(nodes, labels, errs, kept)
        if not grown and err <= max_error:
            return converted, before, err, notes
        if not grown:
            grown = _most_error(nodes, labels, errs, kept, budget_kept, producer)
        if not grown:
            notes.append(f"error budget not met: {err:.3g} > {max_error:.3g} with every candidate node kept")
            return converted, before, err, notes
    # Unreachable: each round keeps a node more or returns, and there are len(nodes) of them.
    raise _core.InternalError("tt.convert: the float32 search kept no node and did not end")


def _finite_max(a: np.ndarray) -> float:
    a = np.asarray(a, np.float64)
    fin = a[np.isfinite(a)]
    return float(np.abs(fin).max()) if fin.size else 0.0


def _overflows(nodes: list[Any], labels: list[str], errs: dict[str, float], kept: dict[str, str]) -> bool:
    grown = False
    for i, n in enumerate(nodes):
        if labels[i] in kept:
            continue
        bad = [v for v in n.output if v and errs.get(v) == float("inf")]
        if bad and not any(errs.get(v) == float("inf") for v in n.input if v):
            kept[labels[i]] = f"overflow: output '{bad[0]}' is inf or NaN in half precision where float32 is finite"
            grown = True
    return grown


def _most_error(nodes: list[Any], labels: list[str], errs: dict[str, float], kept: dict[str, str],
                budget_kept: list[str], producer: dict[str, str]) -> bool:
    def added(i: int) -> tuple[float, float]:
        e_out = max((errs.get(v, 0.0) for v in nodes[i].output if v), default=0.0)
        e_in = max((errs.get(v, 0.0) for v in nodes[i].input if v), default=0.0)
        return e_out - e_in, e_out

    free = [i for i in range(len(nodes)) if labels[i] not in kept]
    frontier = [i for i in free if any(producer.get(v) in budget_kept for v in nodes[i].input)]
    pool = [i for i in (frontier or free) if added(i)[1] > 0]
    if not pool:
        return False
    best = max(pool, key=lambda i: added(i))
    gain, e_out = added(best)
    if best in frontier:
        prev = producer[next(v for v in nodes[best].input if producer.get(v) in budget_kept)]
        kept[labels[best]] = (f"error budget: carries the float32 result of '{prev}' on "
                              f"(its half output's relative error is {e_out:.3g})")
    else:
        kept[labels[best]] = f"error budget: adds {gain:.3g} relative error (its output's is {e_out:.3g})"
    budget_kept.append(labels[best])
    return True
