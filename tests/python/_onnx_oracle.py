"""Independent views of ONNX files through the `onnx` package, used as test oracles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper


def _attr(a: onnx.AttributeProto) -> Any:
    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, onnx.TensorProto):
        return ("tensor", numpy_helper.to_array(v).tobytes(), tuple(v.dims), v.data_type)
    if isinstance(v, onnx.GraphProto):
        return ("graph", structure_of_graph(v))
    if isinstance(v, list) and v and isinstance(v[0], onnx.GraphProto):
        return ("graphs", [structure_of_graph(g) for g in v])
    if isinstance(v, list):
        return list(v)
    return v


def _type(t: onnx.TypeProto) -> Any:
    return onnx.helper.printable_type(t)


def structure_of_graph(g: onnx.GraphProto) -> dict[str, Any]:
    """Everything that defines a graph's function, as comparable plain data."""
    return {
        "inputs": [(v.name, _type(v.type)) for v in g.input],
        "outputs": [(v.name, _type(v.type)) for v in g.output],
        "nodes": [
            (n.op_type, n.domain, n.name, list(n.input), list(n.output), {a.name: _attr(a) for a in n.attribute})
            for n in g.node
        ],
        "initializers": {
            t.name: (t.data_type, tuple(t.dims), numpy_helper.to_array(t).tobytes()) for t in g.initializer
        },
        "value_info": {v.name: _type(v.type) for v in g.value_info},
    }


def structure(path: Path | str) -> dict[str, Any]:
    """The model's graph, opsets and metadata read by the onnx package (external data loaded)."""
    m = onnx.load(str(path))
    return {
        "ir_version": m.ir_version,
        "opset": sorted((o.domain, o.version) for o in m.opset_import),
        "producer": (m.producer_name, m.producer_version),
        "metadata": [(p.key, p.value) for p in m.metadata_props],
        "graph": structure_of_graph(m.graph),
        "functions": [(f.domain, f.name, len(f.node)) for f in m.functions],
    }


def run_ort(model: Path | str | bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Outputs of onnxruntime's CPU provider on one thread, for a model file or model bytes."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    source = model if isinstance(model, bytes) else str(model)
    sess = ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)
