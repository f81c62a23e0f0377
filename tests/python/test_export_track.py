"""tether.track around a real training loop on scikit-learn's digits."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import tether as tt
import torch
from sklearn.datasets import load_digits
from tether.parity import TetherRunner, TorchRunner
from tether.testing import assert_parity


def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    d = load_digits()
    x = torch.from_numpy((d.images / 16.0).astype(np.float32)).unsqueeze(1)
    return x, torch.from_numpy(d.target.astype(np.int64))


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.Dropout(0.1), torch.nn.Linear(8 * 64, 10))


def test_track_exports_at_checkpoints_and_at_the_end_and_each_matches_the_module_then(tmp_path: Path) -> None:
    x, y = _digits()
    net = _net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    snapshots = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a tracked module training is expected, not warned
        with tt.track(net, x[:8], tmp_path / "digits.onnx", dynamic={"input": {0: "batch"}}) as t:
            for epoch in range(2):
                net.train()
                for i in range(0, 512, 64):
                    opt.zero_grad()
                    torch.nn.functional.cross_entropy(net(x[i:i + 64]), y[i:i + 64]).backward()
                    opt.step()
                res = t.checkpoint(f"epoch{epoch}")
                assert res is not None and res.ok
                snapshots.append({k: v.clone() for k, v in net.state_dict().items()})
    assert net.training  # training mode survives every export
    assert [r.path.name for r in t.results] == ["digits.epoch0.onnx", "digits.epoch1.onnx", "digits.onnx"]
    assert t.result is not None and t.result.ok and t.result.golden_path is not None
    # Each checkpoint file holds the weights of its epoch: compare with a module loaded from them.
    feeds = {"input": x[100:140].numpy()}
    for res, state in zip(t.results[:2], snapshots, strict=True):
        frozen = _net()
        frozen.load_state_dict(state)
        assert_parity(TorchRunner(frozen.eval(), ["input"]), TetherRunner(res.path), feeds)
    rep = tt.compare(TorchRunner(net.eval(), ["input"]), TetherRunner(t.result.path), feeds)
    assert rep.ok
    assert not tt.compare(TorchRunner(net.eval(), ["input"]), TetherRunner(t.results[0].path), feeds).ok


@torch.library.custom_op("tethertest::shuffle", mutates_args=())
def _shuffle(x: torch.Tensor) -> torch.Tensor:
    return x.flip(-1)


@_shuffle.register_fake
def _shuffle_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class _Unexportable(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _shuffle(self.fc(x))


def test_a_failing_checkpoint_warns_and_training_goes_on_but_the_final_export_raises(tmp_path: Path) -> None:
    tracker = tt.track(_Unexportable(), torch.randn(2, 4), tmp_path / "u.onnx")
    with pytest.raises(tt.export.ExportError, match="tethertest::shuffle"):
        with tracker as t:
            with pytest.warns(UserWarning, match="checkpoint 'checkpoint1' failed"):
                assert t.checkpoint() is None
            assert len(t.errors) == 1
    assert tracker.results == []


def test_nothing_is_exported_when_the_training_block_raises(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="diverged"):
        with tt.track(_net(), torch.zeros(2, 1, 8, 8), tmp_path / "n.onnx"):
            raise RuntimeError("loss diverged")
    assert not (tmp_path / "n.onnx").exists()
