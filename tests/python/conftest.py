"""Shared fixtures: torch models exported to ONNX once per test session; Vulkan validation."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from _models import MODELS, TOKEN_VOCAB, build

# Vulkan runs under the Khronos validation layer (synchronization checks included) in every
# test: set before tether first opens the Vulkan loader.
os.environ.setdefault("TETHER_VULKAN_VALIDATION", "1")
# Vulkan pipeline caches go to a folder of the test run's own, not the user's cache folder.
if "TETHER_CACHE_DIR" not in os.environ:
    os.environ["TETHER_CACHE_DIR"] = tempfile.mkdtemp(prefix="tether-test-cache-")
    atexit.register(shutil.rmtree, os.environ["TETHER_CACHE_DIR"], True)



def _exact_onnxruntime() -> None:
    """onnxruntime as an exact oracle on every x86-64 CPU. Without AVX-512 VNNI or AVX-VNNI, its
    uint8 x int8 products (MatMulInteger, QLinearConv, QLinearMatMul, QGemm) sum pairs in int16
    with saturation (vpmaddubsw) and give wrong integers for full-range inputs; its
    session.x64quantprecision option makes them exact. Every session the tests open, and every
    one tether's onnxruntime runners open inside a test, gets that option."""
    import onnxruntime as ort

    base = ort.InferenceSession
    if getattr(base, "_tether_exact", False):
        return

    class ExactInferenceSession(base):  # type: ignore[misc, valid-type]
        _tether_exact = True

        def __init__(self, path_or_bytes, sess_options=None, *args, **kwargs):
            so = sess_options if sess_options is not None else ort.SessionOptions()
            try:
                so.get_session_config_entry("session.x64quantprecision")
            except RuntimeError:  # not set: onnxruntime raises rather than return a default
                so.add_session_config_entry("session.x64quantprecision", "1")
            super().__init__(path_or_bytes, so, *args, **kwargs)

    ort.InferenceSession = ExactInferenceSession


_exact_onnxruntime()


def _ort_u8s8_is_exact() -> bool:
    """Whether onnxruntime's uint8 x int8 MatMulInteger is exact on this CPU: on x86-64 without
    VNNI it sums pairs of products in int16 with saturation, even with x64quantprecision."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2)
    a = rng.integers(0, 256, (2, 37, 70)).astype(np.uint8)
    b = rng.integers(-128, 128, (70, 45)).astype(np.int8)
    a_zp, b_zp = np.array(100, np.uint8), rng.integers(-128, 128, (45,)).astype(np.int8)
    consts = [numpy_helper.from_array(b, "b"), numpy_helper.from_array(b_zp, "bz")]
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])], "probe",
                              [helper.make_tensor_value_info("a", TensorProto.UINT8, [2, 37, 70]),
                               helper.make_tensor_value_info("az", TensorProto.UINT8, [])],
                              [helper.make_empty_tensor_value_info("y")], consts)
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    got = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"]).run(None, {"a": a, "az": a_zp})[0]
    return bool(np.array_equal(got, (a.astype(np.int64) - 100) @ (b.astype(np.int64) - b_zp.astype(np.int64))))


ORT_U8S8_EXACT = _ort_u8s8_is_exact()


@dataclass(frozen=True)
class Exported:
    name: str
    path: Path  # weights inside the file
    external_path: Path  # the same model with every tensor in external data
    input_name: str
    input_shape: tuple[int, ...]  # example shape, batch first
    module: object = None  # the torch module that was exported, in eval mode
    input_kind: str = "float"  # "float": standard normal float32; "tokens": int64 ids below `vocab`
    vocab: int = 0

    @property
    def input_dtype(self) -> str:
        return "int64" if self.input_kind == "tokens" else "float32"

    def inputs(self, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        shape = (batch, *self.input_shape[1:])
        if self.input_kind == "tokens":
            return {self.input_name: rng.integers(0, self.vocab, shape, dtype=np.int64)}
        return {self.input_name: rng.standard_normal(shape).astype(np.float32)}


def _export(name: str, folder: Path) -> Exported:
    import torch

    module = build(name)
    shape = MODELS[name][1]
    vocab = TOKEN_VOCAB.get(name, 0)
    example = torch.zeros(shape, dtype=torch.int64 if vocab else torch.float32)
    path = folder / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module, (example,), str(path), input_names=["x"], dynamo=True,
            dynamic_shapes=({0: torch.export.Dim("batch")},), verbose=False,
        )
    ext_dir = folder / "external"
    ext_dir.mkdir(exist_ok=True)
    ext_path = ext_dir / f"{name}.onnx"
    onnx.save(onnx.load(str(path)), str(ext_path), save_as_external_data=True, all_tensors_to_one_file=True,
              location=f"{name}.weights")
    return Exported(name, path, ext_path, "x", shape, module, "tokens" if vocab else "float", vocab)


@pytest.fixture(scope="session")
def exported_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Exported]:
    folder = tmp_path_factory.mktemp("exported")
    return {name: _export(name, folder) for name in MODELS}


@pytest.fixture(params=sorted(MODELS))
def exported(request: pytest.FixtureRequest, exported_models: dict[str, Exported]) -> Exported:
    return exported_models[request.param]


@pytest.fixture(scope="session")
def tiny_transformers(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The tiny transformers models of ``_tiny_transformers``, each exported with its KV cache by
    tt.export.transformers (its check by generation included) once per session, on first use:
    ``get(name) -> (model, result)``; the export and generation tests share them."""
    import _tiny_transformers as tiny
    import tether as tt

    done: dict[str, tuple[Any, Any]] = {}
    folder = tmp_path_factory.mktemp("transformers")

    def get(name: str) -> tuple[Any, Any]:
        if name not in done:
            model = tiny.BUILD[name]()
            done[name] = (model, tt.export.transformers(model, folder / f"{name}.onnx", task=tiny.TASK[name]))
        return done[name]

    return get


@pytest.fixture
def vulkan_validation() -> object:
    """Fails the test when Vulkan's validation layer reported anything while it ran."""
    from tether import _core

    _core._diagnostics()["vulkan"]  # what earlier tests left is theirs
    yield
    messages = _core._diagnostics()["vulkan"]["messages"]
    assert not messages, "Vulkan validation reported:\n" + "\n".join(messages)
