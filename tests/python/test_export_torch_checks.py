"""tether.export.torch's checks and options: a failed export leaves nothing behind and says
what failed, a baked branch or baked values are caught (tracer warnings, generated inputs),
whole error messages, float64, a tolerance that holds for deep networks, input_names,
custom_translation_table and check_sizes."""

from __future__ import annotations

import copy
import inspect
import warnings
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tether as tt
import torch
from tether.export._torch_check import _generated
from tether.parity import Tolerance
from torch import nn


def _ort(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def _torch(module: nn.Module, *args: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module(*[torch.from_numpy(a) for a in args]).numpy()


class _Gate(nn.Module):
    """A Python branch on a tensor's value: dynamo refuses it, the tracer records one side."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 4)
        self.b = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) if x.mean() > 0 else self.b(x)


_BRANCH_LINE = inspect.getsourcelines(_Gate.forward)[1] + 1


def _gate() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return _Gate().eval(), torch.rand(4, 8) + 0.1


def test_a_branch_the_tracer_baked_fails_the_fallback_naming_the_line_and_leaves_nothing(tmp_path: Path) -> None:
    module, x = _gate()
    with pytest.raises(tt.export.ExportError) as info:
        tt.export.torch(module, x, tmp_path / "gate.onnx", dynamic={"x": {0: "batch"}})
    msg = str(info.value)
    assert "recorded only the branch the example took" in msg
    assert f"test_export_torch_checks.py:{_BRANCH_LINE} (`return self.a(x) if x.mean() > 0 else self.b(x)`)" in msg
    assert "GuardOnDataDependentSymNode" in msg and "allow_baked_branches=True" in msg
    result = info.value.result  # type: ignore[attr-defined]
    assert not result.ok and result.exporter == "torch.onnx.export(dynamo=False)"
    assert "because the dynamo exporter failed: GuardOnDataDependentSymNode" in result.exporter_reason
    assert sorted(tmp_path.iterdir()) == []


def test_generated_inputs_catch_a_baked_branch_the_user_allowed(tmp_path: Path) -> None:
    module, x = _gate()
    with pytest.raises(tt.export.ExportError, match="differs from the module on generated inputs of the example's "
                                                    "shapes .though it matched on the example.") as info:
        tt.export.torch(module, x, tmp_path / "gate.onnx", allow_baked_branches=True)
    result = info.value.result  # type: ignore[attr-defined]
    assert result.report.ok and not result.generated_report.ok
    assert "FAILED" in str(result) and "verified" not in str(result)


def test_with_the_checks_off_the_baked_file_is_written_and_torch_shows_it_is_wrong_elsewhere(tmp_path: Path) -> None:
    module, x = _gate()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = tt.export.torch(module, x, tmp_path / "gate.onnx", allow_baked_branches=True, generated_inputs=0)
    assert res.ok and res.generated_report is None
    assert res.exporter_reason.startswith("the TorchScript exporter, because the dynamo exporter failed")
    # The oracle: torch on an input with a negative mean takes the other branch; the file does not.
    neg = -np.random.default_rng(1).random((4, 8), dtype=np.float32)
    assert not np.allclose(_ort(res.path, {"x": neg})[0], _torch(module, neg), atol=1e-3)


class _Scaled(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x.abs().max().item()


def test_a_value_the_tracer_baked_is_caught_on_generated_inputs(tmp_path: Path) -> None:
    x = torch.rand(3, 5) + 1.0
    with pytest.raises(tt.export.ExportError, match=r"depends on input values the exporter fixed.*TracerWarning at "
                                                    r"test_export_torch_checks.py:\d+ \(`return x \* x.abs"):
        tt.export.torch(_Scaled().eval(), x, tmp_path / "s.onnx", exporter="torchscript")
    assert not (tmp_path / "s.onnx").exists()


class _Repeats(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(6):
            x = x + int(x.shape[1])
        return x


def test_a_tracer_warning_repeated_by_a_loop_is_listed_once(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as raw:
        warnings.simplefilter("always")
        torch.onnx.export(_Repeats(), (torch.rand(2, 3),), str(tmp_path / "raw.onnx"), dynamo=False)
    assert sum(issubclass(w.category, torch.jit.TracerWarning) for w in raw) == 6  # the tracer's own count
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = tt.export.torch(_Repeats(), torch.rand(2, 3), tmp_path / "r.onnx", exporter="torchscript")
    traced = [w for w in res.warnings if w.startswith("TracerWarning")]
    assert len(traced) == 1 and "test_export_torch_checks.py" in traced[0] and "Python integer" in traced[0]


class _BakedBatch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = int(x.shape[0])
        return self.fc(x).reshape(n, 3) + torch.arange(n, dtype=torch.float32).reshape(n, 1)


def test_a_failed_export_leaves_no_file_no_bundle_and_its_result_says_what_failed(tmp_path: Path) -> None:
    with pytest.raises(tt.export.ExportError) as info:
        tt.export.torch(_BakedBatch().eval(), torch.randn(3, 4), tmp_path / "baked.onnx",
                        dynamic={"x": {0: "batch"}}, exporter="torchscript")
    assert sorted(tmp_path.iterdir()) == []  # no model, no golden bundle, no staging folder
    result = info.value.result  # type: ignore[attr-defined]
    text = str(result)
    assert not result.ok and "batch=4" in result.failure
    assert text.startswith(f"export to {tmp_path / 'baked.onnx'} with torch.onnx.export(dynamo=False) FAILED: ")
    assert "nothing was written" in text and "verified" not in text
    assert result.golden_path is None and result.external_data is None


def test_a_failed_export_leaves_an_earlier_export_at_the_path_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    good = tt.export.torch(nn.Linear(4, 3).eval(), torch.randn(3, 4), path, dynamic={"input": {0: "batch"}})
    before = path.read_bytes(), (tmp_path / "m.golden" / "golden.json").read_bytes()
    with pytest.raises(tt.export.ExportError):
        tt.export.torch(_BakedBatch().eval(), torch.randn(3, 4), path, dynamic={"x": {0: "batch"}},
                        exporter="torchscript")
    assert (path.read_bytes(), (tmp_path / "m.golden" / "golden.json").read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.golden", "m.onnx"]
    assert tt.parity.model_sha256(path) == tt.parity.load_golden(good.golden_path).metadata["model_sha256"]


def test_a_float64_module_raises_export_error_naming_both_engines_and_leaves_nothing(tmp_path: Path) -> None:
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU()).double().eval()
    with pytest.raises(tt.export.ExportError) as info:
        tt.export.torch(net, torch.randn(2, 3, 8, 8, dtype=torch.float64), tmp_path / "f64.onnx")
    msg = str(info.value)
    assert "neither tether nor onnxruntime can run the exported model" in msg
    assert "Conv 'node_conv2d': input 0 is float64; supported: float32" in msg
    assert "NOT_IMPLEMENTED" in msg and "module.float()" in msg
    assert sorted(tmp_path.iterdir()) == []


class _Wide(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * 2 + 1)


def test_the_note_when_tether_lacks_a_kernel_names_every_node_and_why(tmp_path: Path) -> None:
    x = torch.randn(3, 4, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = tt.export.torch(_Wide(), x, tmp_path / "w.onnx")
    with pytest.raises(tt.UnsupportedError) as compiled:
        tt.compile(res.path)
    reasons = [line.strip() for line in str(compiled.value).splitlines()[1:]]
    note = next(w for w in res.warnings if w.startswith("tether cannot run the exported model"))
    assert reasons and all(r in note for r in reasons), (note, reasons)
    np.testing.assert_allclose(_ort(res.path, {"x": x.numpy()})[0], _torch(_Wide(), x.numpy()), rtol=1e-12)


class _Meta(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = _Gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gate(x)


def test_the_fallback_warning_gives_the_dynamo_exporters_cause_not_its_next_steps(tmp_path: Path) -> None:
    torch.manual_seed(0)
    with pytest.warns(UserWarning, match=r"the dynamo exporter failed \(GuardOnDataDependentSymNode: Could not guard on "
                                         r"data-dependent expression .* \(in forward, test_export_torch_checks.py:"
                                         rf"{_BRANCH_LINE}: "
                                         r"`return self.a\(x\) if x.mean\(\) > 0 else self.b\(x\)`\)\); the "
                                         r"TorchScript exporter was used"):
        tt.export.torch(_Meta().eval(), torch.rand(4, 8) + 0.1, tmp_path / "m.onnx", allow_baked_branches=True,
                        generated_inputs=0)


def _cbs(ci: int, co: int, stride: int = 1) -> nn.Module:
    return nn.Sequential(nn.Conv2d(ci, co, 3, stride, 1, bias=False), nn.BatchNorm2d(co), nn.SiLU())


class _Residual(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.a, self.b = _cbs(c, c), _cbs(c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.b(self.a(x))


class _DeepConv(nn.Module):
    """A YOLO-style backbone: strided conv-BN-SiLU stages with residual blocks, a 1x1 head of 85
    channels, BatchNorm scales above 1 so activations grow to thousands, as on raw pixels."""

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = [_cbs(3, 8, 2)]
        c = 8
        for _ in range(4):
            layers += [_cbs(c, 2 * c, 2), _Residual(2 * c), _Residual(2 * c)]
            c *= 2
        self.body = nn.Sequential(*layers)
        self.head = nn.Conv2d(c, 85, 1)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.data.uniform_(2.0, 4.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


@pytest.fixture(scope="module")
def deep() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return _DeepConv().eval(), torch.rand(2, 3, 64, 64) * 255


def test_a_deep_conv_net_passes_the_default_tolerance_and_its_error_is_float_rounding(
        deep: tuple[nn.Module, torch.Tensor], tmp_path: Path) -> None:
    module, x = deep
    res = tt.export.torch(module, x, tmp_path / "deep.onnx", dynamic={"x": {0: "batch"}})
    assert res.ok and res.dynamic_report is not None and res.generated_report is not None
    # The oracle: the module in float64. tether's float32 file is as close to it as torch's own float32 run.
    truth = _torch(module.double(), x.double().numpy())
    module.float()
    got = tt.compile(res.path).run({"x": x.numpy()})
    mine = np.abs(next(iter(got.values())) - truth).max()
    torch_own = np.abs(_torch(module, x.numpy()) - truth).max()
    peak = np.abs(truth).max()
    assert peak > 1000 and mine < 1e-6 * peak and mine < 10 * torch_own, (mine, torch_own, peak)
    assert res.report.outputs[0].metrics.tolerance.atol == pytest.approx(1e-5 * np.abs(_torch(module, x.numpy())).max())


def test_a_tight_tolerance_on_a_deep_net_is_reported_as_float_rounding_not_a_fixed_dim(
        deep: tuple[nn.Module, torch.Tensor], tmp_path: Path) -> None:
    module, x = deep
    with pytest.raises(tt.export.ExportError) as info:
        tt.export.torch(module, x, tmp_path / "deep.onnx", dynamic={"x": {0: "batch"}},
                        tolerance=Tolerance(atol=1e-5, rtol=1e-4))
    msg = str(info.value)
    assert "by float rounding only" in msg and "at SNR 1" in msg and "pass a looser one, e.g. tolerance=Tolerance(" in msg
    assert "dim was fixed" not in msg


class _Amplifies(nn.Module):
    """On normal inputs, a linear head. Inputs of a wider spread (the generated uniform ones)
    open a gate onto the difference of two nearly equal products, whose float32 value is mostly
    rounding: any two float32 engines disagree there, torch with itself in float64 included."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(2048, 8)
        self.a = nn.Linear(2048, 8, bias=False)
        self.b = nn.Linear(2048, 8, bias=False)
        with torch.no_grad():
            self.a.weight.normal_(0, 1000.0)
            self.b.weight.copy_(self.a.weight + torch.randn(8, 2048) * 1e-3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.relu((x * x).mean(-1, keepdim=True) - 2.0)
        return self.head(x) + gate * (self.a(x) - self.b(x))


def test_generated_inputs_that_amplify_rounding_warn_instead_of_refusing_a_faithful_file(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module, x = _Amplifies().eval(), torch.randn(4, 2048)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = tt.export.torch(module, x, tmp_path / "amp.onnx", dynamic={"x": {0: "batch"}})
    assert res.report.ok and not res.generated_report.ok  # far below the SNR a rounding error usually has
    assert res.ok and res.rounding_only == ["generated"] and "float rounding only" in str(res)
    assert any("from the module evaluated in float64" in w for w in res.warnings)
    # The oracle: the module in float64. On the generated inputs where the file misses the
    # tolerance, the file is about as far from it as torch's own float32 run.
    feeds = [f for f in _generated({"x": x.numpy()}, 3, 0) if ((f["x"] ** 2).mean(-1) > 2.5).any()]
    assert feeds
    sess = tt.compile(res.path)
    for f in feeds:
        truth = _torch(copy.deepcopy(module).double(), f["x"].astype(np.float64))
        mine = np.abs(next(iter(sess.run(f).values())) - truth).max()
        own = np.abs(_torch(module, f["x"]) - truth).max()
        assert own > 1e-3 and mine < 8 * own, (mine, own)


class _Pairs(nn.Module):
    """Needs an even batch: it mixes samples two by two."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, image: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        pairs = image.reshape(-1, 2, 8).sum(1)
        return self.fc(pairs) * scale.reshape(-1, 2).mean(1, keepdim=True)


def test_input_names_and_check_sizes_reach_the_file_and_the_second_size(tmp_path: Path) -> None:
    args = (torch.randn(2, 8), torch.rand(2))
    dynamic = {"img": {0: "batch"}, "s": {0: "batch"}}
    with pytest.warns(UserWarning, match="the module itself does not run with batch=3"):
        tt.export.torch(_Pairs().eval(), args, tmp_path / "odd.onnx", input_names=["img", "s"], dynamic=dynamic)
    module = _Pairs().eval()
    res = tt.export.torch(module, args, tmp_path / "p.onnx", input_names=["img", "s"], dynamic=dynamic,
                          check_sizes={"batch": 4})
    assert res.ok and res.dynamic_report is not None and res.dynamic_report.input_shapes["img"] == (4, 8)
    assert [i.name for i in tt.load(res.path).inputs] == ["img", "s"]
    rng = np.random.default_rng(3)
    img, s = rng.standard_normal((6, 8), dtype=np.float32), rng.random(6, dtype=np.float32)
    np.testing.assert_allclose(_ort(res.path, {"img": img, "s": s})[0], _torch(module, img, s), rtol=1e-5, atol=1e-6)


def test_bad_input_names_and_check_sizes_are_argument_errors(tmp_path: Path) -> None:
    args = (torch.randn(2, 8), torch.rand(2))
    with pytest.raises(tt.ArgumentError, match=r"input_names must be 2 non-empty strings, one per example input; got "
                                               r"\['img'\]"):
        tt.export.torch(_Pairs(), args, tmp_path / "p.onnx", input_names=["img"])
    with pytest.raises(tt.ArgumentError, match=r"check_sizes names \['btach'\], which are not dynamic dims; the "
                                               r"dynamic dims are \['batch'\]"):
        tt.export.torch(_Pairs(), args, tmp_path / "p.onnx", dynamic={"image": {0: "batch"}},
                        check_sizes={"btach": 4})
    with pytest.raises(tt.ArgumentError, match=r"check_sizes\['batch'\] = 2: give a size of at least 1 other than "
                                               r"the example's 2"):
        tt.export.torch(_Pairs(), args, tmp_path / "p.onnx", dynamic={"image": {0: "batch"}}, check_sizes={"batch": 2})
    with pytest.raises(tt.ArgumentError, match="custom_translation_table is for the dynamo exporter"):
        tt.export.torch(_Pairs(), args, tmp_path / "p.onnx", exporter="torchscript",
                        custom_translation_table={torch.ops.aten.relu.default: lambda x: x})
    assert sorted(tmp_path.iterdir()) == []


@torch.library.custom_op("tethertest::triple", mutates_args=())
def _triple(x: torch.Tensor) -> torch.Tensor:
    return x * 3


@_triple.register_fake
def _triple_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class _UsesTriple(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _triple(self.fc(x)) + 1


def test_custom_translation_table_exports_an_op_onnx_lacks(tmp_path: Path) -> None:
    from onnxscript import opset18 as op

    def triple(x):  # type: ignore[no-untyped-def]
        return op.Mul(x, op.Constant(value_float=3.0))

    module = _UsesTriple().eval()
    with pytest.raises(tt.export.ExportError, match="no ONNX translation for the torch op 'tethertest::triple'"):
        tt.export.torch(module, torch.randn(2, 4), tmp_path / "t.onnx", exporter="dynamo")
    res = tt.export.torch(module, torch.randn(2, 4), tmp_path / "t.onnx", dynamic={"x": {0: "batch"}},
                          custom_translation_table={torch.ops.tethertest.triple.default: triple})
    assert res.ok and res.exporter == "torch.onnx.export(dynamo=True)"
    x = np.random.default_rng(0).standard_normal((5, 4), dtype=np.float32)
    np.testing.assert_allclose(_ort(res.path, {"x": x})[0], _torch(module, x), rtol=1e-5, atol=1e-6)


class _TwoScales(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * 5000.0, x * 1e-3


def test_each_output_gets_atol_scaled_by_its_own_peak_and_the_golden_bundle_records_it(tmp_path: Path) -> None:
    x = torch.rand(3, 4) + 0.5
    res = tt.export.torch(_TwoScales().eval(), x, tmp_path / "two.onnx", output_names=["big", "small"], generated_inputs=0)
    big, small = (o.metrics.tolerance for o in res.report.outputs)
    peak = float(np.abs(x.numpy() * np.float32(5000.0)).max())  # numpy's own product is the oracle
    assert big.atol == pytest.approx(1e-5 * peak) and big.rtol == 1e-4
    assert small == Tolerance(atol=1e-5, rtol=1e-4)  # a peak below 1 keeps the profile's atol
    meta = tt.parity.load_golden(res.golden_path).metadata
    assert meta["output_tolerances"]["big"]["atol"] == pytest.approx(1e-5 * peak)
    assert meta["output_tolerances"]["small"]["atol"] == 1e-5
