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
    return cli.main(["inspect", str(path), "--shapes"])


if __name__ == "__main__":
    sys.exit(main())
