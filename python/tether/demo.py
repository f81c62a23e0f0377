"""The main job of ``make demo``: export a small torch network and inspect it with tether.

Run it with ``python -m tether.demo [output folder]``.

Example:
    $ python -m tether.demo out
"""

from __future__ import annotations

import sys
from pathlib import Path


def build_network():  # type: ignore[no-untyped-def]
    """A small CNN for 8x8 grey images (scikit-learn's digits): conv, batch norm, residual, linear.

    Example:
        >>> net = build_network()            # doctest: +SKIP
        >>> net(torch.zeros(1, 1, 8, 8)).shape   # doctest: +SKIP
        torch.Size([1, 10])
    """
    import torch
    from torch import nn

    class DigitsNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
            self.block = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
            self.head = nn.Linear(16, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.stem(x)
            x = x + self.block(x)
            x = nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
            return self.head(x)

    torch.manual_seed(0)
    return DigitsNet().eval()


def main(argv: list[str] | None = None) -> int:
    """Exports the demo network to ``<folder>/demo.onnx`` and prints ``tether inspect`` of it."""
    import warnings

    import torch

    from tether import cli

    out = Path((argv or sys.argv[1:] or ["out"])[0])
    out.mkdir(parents=True, exist_ok=True)
    path = out / "demo.onnx"
    net = build_network()
    example = torch.zeros(2, 1, 8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net,
            (example,),
            str(path),
            input_names=["image"],
            output_names=["logits"],
            dynamic_shapes=({0: torch.export.Dim("batch")},),
            dynamo=True,
            verbose=False,
        )
    print(f"exported {type(net).__name__} to {path}\n")
    status = cli.main(["inspect", str(path), "--shapes"])
    if status != 0:
        return status
    _run_in_tether(path, net)
    return 0


def _run_in_tether(path: Path, net) -> None:  # type: ignore[no-untyped-def]
    """Runs the exported model in tether's engine and compares it with torch and onnxruntime."""
    import time

    import numpy as np
    import torch

    import tether

    x = np.random.default_rng(0).standard_normal((4, 1, 8, 8)).astype(np.float32)
    sess = tether.compile(str(path), threads=1)
    ours = sess(x)
    start = time.perf_counter()
    for _ in range(20):
        sess(x)
    latency = (time.perf_counter() - start) / 20
    with torch.no_grad():
        ref = net(torch.from_numpy(x)).numpy()
    print(f"\ntether cpu ({tether.cpu_info()['isa']}), batch 4: {latency * 1e3:.3f} ms per run")
    print(f"  max |tether - torch|       = {np.abs(ours - ref).max():.2e}")
    try:
        import onnxruntime as ort
    except ImportError:
        return
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]
    print(f"  max |tether - onnxruntime| = {np.abs(ours - theirs).max():.2e}")


if __name__ == "__main__":
    sys.exit(main())
