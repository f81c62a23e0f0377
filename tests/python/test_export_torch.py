"""tether.export.torch: real models exported with a dynamic batch and verified, fixed dims
caught, unsupported ops named with their module path, golden bundles and external data."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import onnx
import pytest
import tether as tt
import torch
from _models import MODELS, TOKEN_VOCAB, build
from tether.parity import GoldenRunner, OnnxRuntimeRunner, TetherRunner, TorchRunner, load_golden
from tether.testing import assert_parity


def _arg_name(module: torch.nn.Module) -> str:
    return next(iter(inspect.signature(module.forward).parameters))


def _example(name: str, batch: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    shape = (batch, *MODELS[name][1][1:])
    if name in TOKEN_VOCAB:
        return torch.randint(0, TOKEN_VOCAB[name], shape, generator=g)
    return torch.randn(shape, generator=g)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_real_models_export_with_dynamic_batch_and_pass_parity_at_batch_1_and_5(name: str, tmp_path: Path) -> None:
    module = build(name)
    arg = _arg_name(module)
    res = tt.export.torch(module, (_example(name, 2),), tmp_path / f"{name}.onnx", dynamic={arg: {0: "batch"}})
    assert res.ok and res.exporter == "torch.onnx.export(dynamo=True)", str(res)
    assert res.dynamic_report is not None and res.dynamic_report.input_shapes[arg][0] == 3
    assert tt.load(res.path).inputs[0].shape[0] == "batch"
    for batch in (1, 5):
        x = _example(name, batch, seed=batch).numpy()
        # The module is the oracle; the file runs in tether and in onnxruntime.
        assert_parity(TorchRunner(module, [arg]), TetherRunner(res.path), {arg: x})
        assert_parity(TorchRunner(module, [arg]), OnnxRuntimeRunner(res.path), {arg: x})


def test_golden_bundle_beside_the_model_holds_the_modules_outputs(tmp_path: Path) -> None:
    module = build("mlp")
    x = _example("mlp", 4)
    res = tt.export.torch(module, x, tmp_path / "mlp.onnx", dynamic={_arg_name(module): {0: "batch"}})
    assert res.golden_path == tmp_path / "mlp.golden"
    bundle = load_golden(res.golden_path)
    inputs, outputs = bundle.samples[0]
    with torch.no_grad():
        want = module(x).numpy()
    assert np.array_equal(inputs[_arg_name(module)], x.numpy())
    assert np.array_equal(next(iter(outputs.values())), want)
    assert bundle.metadata["model_sha256"] == tt.parity.model_sha256(res.path)
    assert bundle.metadata["producer"].startswith("torch ")
    rep = tt.compare(GoldenRunner(bundle), TetherRunner(res.path), GoldenRunner(bundle).samples())
    assert rep.ok


def test_torch_dim_objects_are_accepted_like_names(tmp_path: Path) -> None:
    module = build("transformer")
    seq = torch.export.Dim("seq", min=2, max=64)
    res = tt.export.torch(module, _example("transformer", 2), tmp_path / "t.onnx",
                          dynamic={_arg_name(module): {0: torch.export.Dim("batch"), 1: seq}})
    assert res.ok
    shape = tt.load(res.path).inputs[0].shape
    assert isinstance(shape[0], str) and isinstance(shape[1], str)
    assert res.dynamic_report is not None and res.dynamic_report.input_shapes[_arg_name(module)][:2] == (3, 8)


class _BakedBatch(torch.nn.Module):
    """Takes the batch as a Python int: exporters fix it into the graph."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = int(x.shape[0])
        return self.fc(x).reshape(n, 3) + torch.arange(n, dtype=torch.float32).reshape(n, 1)


def test_a_dynamic_dim_the_exporter_fixed_in_the_inputs_is_caught(tmp_path: Path) -> None:
    with pytest.raises(tt.export.ExportError, match=r"not dynamic where asked: dim 0 \('batch'\) of input 'x' is fixed "
                                                    r"to 3"):
        tt.export.torch(_BakedBatch().eval(), torch.randn(3, 4), tmp_path / "baked.onnx", dynamic={"x": {0: "batch"}})


def test_a_graph_that_declares_a_symbolic_dim_but_fixes_it_inside_is_caught(tmp_path: Path) -> None:
    # The TorchScript exporter keeps the declared input dim symbolic and bakes the Python int
    # into the graph's Reshape and Range: the file is right at batch 3 only.
    with pytest.raises(tt.export.ExportError, match=r"(does not run with|differs from the module at) batch=4") as info:
        tt.export.torch(_BakedBatch().eval(), torch.randn(3, 4), tmp_path / "baked.onnx", dynamic={"x": {0: "batch"}},
                        exporter="torchscript")
    result = info.value.result  # type: ignore[attr-defined]
    assert result.report is not None and result.report.ok  # right at the example's size
    assert result.generated_report is not None and result.generated_report.ok  # and on other values
    assert "batch=4" in result.failure and not result.path.exists()
    assert any(w.startswith("TracerWarning at test_export_torch.py:") for w in result.warnings)


class _FixedRows(torch.nn.Module):
    """Runs only with 3 rows in torch itself."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(3, -1) * 2


def test_a_module_that_cannot_run_at_the_second_size_only_warns(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match="the module itself does not run with batch=4"):
        res = tt.export.torch(_FixedRows().eval(), torch.randn(3, 2, 2), tmp_path / "r.onnx",
                              dynamic={"x": {0: "batch"}}, exporter="torchscript")
    assert res.ok and res.dynamic_report is None


@torch.library.custom_op("tethertest::wobble", mutates_args=())
def _wobble(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_wobble.register_fake
def _wobble_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class _Inner(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _wobble(x)


class _Outer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.block = torch.nn.Sequential(torch.nn.ReLU(), _Inner())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(self.fc(x))


def test_an_op_without_onnx_translation_is_named_with_its_module_path(tmp_path: Path) -> None:
    with pytest.raises(tt.export.ExportError,
                       match=r"no ONNX translation for the torch op 'tethertest::wobble', called in module 'block.1'"):
        tt.export.torch(_Outer().eval(), torch.randn(2, 4), tmp_path / "custom.onnx")
    assert not (tmp_path / "custom.onnx").exists()


def test_training_mode_is_warned_exported_in_eval_and_restored(tmp_path: Path) -> None:
    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5), torch.nn.BatchNorm1d(8))
    module.train()
    with pytest.warns(UserWarning, match="was in training mode"):
        res = tt.export.torch(module, torch.randn(4, 8), tmp_path / "m.onnx")
    assert module.training and all(m.training for m in module.modules())
    # Eval semantics in the file: Dropout is gone and BatchNorm uses running statistics, so
    # the file matches the module in eval mode (the oracle), run twice to show it is deterministic.
    module.eval()
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    assert_parity(TorchRunner(module, ["input"]), TetherRunner(res.path), {"input": x})
    assert not [n for n in tt.load(res.path).nodes if n.op_type == "Dropout"]


def test_external_data_forced_and_auto(tmp_path: Path) -> None:
    module = build("resnet")
    x = _example("resnet", 2)
    forced = tt.export.torch(module, x, tmp_path / "a" / "r.onnx", external_data=True)
    assert forced.external_data is not None and forced.external_data.exists() and forced.ok
    assert onnx.external_data_helper.uses_external_data(
        next(i for i in onnx.load(str(forced.path), load_external_data=False).graph.initializer if i.dims))
    auto = tt.export.torch(module, x, tmp_path / "b" / "r.onnx")  # far below 2 GiB: one file
    assert auto.external_data is None and sorted(p.name for p in (tmp_path / "b").iterdir()) == ["r.golden", "r.onnx"]


def test_bad_arguments_are_argument_errors(tmp_path: Path) -> None:
    module = build("mlp")
    with pytest.raises(tt.ArgumentError, match=r"dynamic names \['inputs'\], which are not inputs of forward\(\); "
                                               rf"its inputs are \['{_arg_name(module)}'\]"):
        tt.export.torch(module, _example("mlp", 2), tmp_path / "m.onnx", dynamic={"inputs": {0: "batch"}})
    with pytest.raises(tt.ArgumentError, match="example_inputs must be a torch.Tensor"):
        tt.export.torch(module, np.zeros((2, 64), np.float32), tmp_path / "m.onnx")
    with pytest.raises(tt.ArgumentError, match=f"dynamic dim 3 of input '{_arg_name(module)}': the example has rank 2"):
        tt.export.torch(module, _example("mlp", 2), tmp_path / "m.onnx", dynamic={_arg_name(module): {3: "batch"}})
    with pytest.raises(tt.ArgumentError, match="external_data must be True, False or 'auto'"):
        tt.export.torch(module, _example("mlp", 2), tmp_path / "m.onnx", external_data="sometimes")  # type: ignore[arg-type]


class _BigEmbedding(torch.nn.Module):
    """2.3 GB of weights: past what one protobuf message can hold."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(140_000, 4096)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.emb(ids).sum(-1)


@pytest.mark.large
def test_weights_past_2gib_go_to_external_data_on_their_own(tmp_path: Path) -> None:
    with torch.no_grad():
        module = _BigEmbedding().eval()
    ids = torch.tensor([[0, 139_999, 70_000], [5, 6, 7]])
    res = tt.export.torch(module, ids, tmp_path / "big.onnx")  # external_data="auto"
    assert res.ok and res.external_data == tmp_path / "big.onnx.data"
    assert res.external_data.stat().st_size >= 140_000 * 4096 * 4
    assert (tmp_path / "big.onnx").stat().st_size < 1 << 20
    weight = next(i for i in onnx.load(str(res.path), load_external_data=False).graph.initializer if i.dims)
    assert onnx.external_data_helper.uses_external_data(weight)
    with torch.no_grad():
        want = module(ids).numpy()  # the oracle, on rows from both ends of the table
    got = TetherRunner(res.path).run({"ids": ids.numpy()})
    np.testing.assert_allclose(next(iter(got.values())), want, rtol=1e-5, atol=1e-4)
