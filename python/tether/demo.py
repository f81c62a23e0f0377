"""The main job of ``make demo``: train a small CNN on scikit-learn's digits with torch, export
it with tether, run it in tether and onnxruntime, and print the accuracy and parity tables.

Run it with ``python -m tether.demo [output folder]``.

Example:
    $ python -m tether.demo out
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


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
            self.head = nn.Linear(16 * 4, 10)

        def forward(self, image: torch.Tensor) -> torch.Tensor:
            x = self.stem(image)
            x = x + self.block(x)
            x = nn.functional.adaptive_avg_pool2d(x, 2).flatten(1)
            return self.head(x)

    torch.manual_seed(0)
    return DigitsNet().eval()


def load_data(seed: int = 0) -> tuple[Any, Any, Any, Any]:
    """scikit-learn's digits (1797 real 8x8 images of handwritten digits) as float32 images in
    [0, 1] of shape (N, 1, 8, 8) and int64 labels, split 75/25 into train and test.

    Example:
        >>> x_train, y_train, x_test, y_test = load_data()   # doctest: +SKIP
        >>> x_test.shape                                      # doctest: +SKIP
        (450, 1, 8, 8)
    """
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    x_train, x_test, y_train, y_test = train_test_split(x, d.target.astype(np.int64), test_size=0.25,
                                                        random_state=seed, stratify=d.target)
    return x_train, y_train, x_test, y_test


def train(net: Any, x: Any, y: Any, epochs: int = 12, seed: int = 0) -> Any:
    """Trains ``net`` with Adam and cross-entropy in mini-batches of 64; returns it in eval mode.

    Example:
        >>> net = train(build_network(), x_train, y_train)   # doctest: +SKIP
    """
    import torch

    torch.manual_seed(seed)
    xs, ys = torch.from_numpy(x), torch.from_numpy(y)
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    net.train()
    for _ in range(epochs):
        order = torch.randperm(len(xs))
        for i in range(0, len(xs), 64):
            idx = order[i:i + 64]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(xs[idx]), ys[idx]).backward()
            opt.step()
    return net.eval()


def main(argv: list[str] | None = None) -> int:
    """Trains, exports to ``<folder>/digits.onnx`` (with its golden bundle), and prints the
    accuracy of torch, tether and onnxruntime on the test split and the parity tables."""
    import numpy as np
    import torch

    import tether as tt
    from tether import cli
    from tether.parity import OnnxRuntimeRunner, Runner, TetherRunner, TorchRunner

    out = Path((argv or sys.argv[1:] or ["out"])[0])
    out.mkdir(parents=True, exist_ok=True)
    x_train, y_train, x_test, y_test = load_data()
    net = train(build_network(), x_train, y_train)

    res = tt.export.torch(net, torch.from_numpy(x_test[:8]), out / "digits.onnx", dynamic={"image": {0: "batch"}},
                          output_names=["logits"])
    print(res, end="\n\n")
    cli.main(["inspect", str(res.path)])
    print()
    sess = tt.compile(res.path)
    runners: dict[str, Runner] = {"torch": TorchRunner(net, ["image"], ["logits"]), "tether": TetherRunner(sess),
                                  "onnxruntime": OnnxRuntimeRunner(res.path)}
    for name, runner in runners.items():
        logits = runner.run({"image": x_test})
        accuracy = float(np.mean(np.argmax(logits["logits"], axis=1) == y_test))
        print(f"test accuracy, {name:<12} {accuracy:.2%} ({len(y_test)} real images)")
    batches = [x_test[i:i + 50] for i in range(0, len(x_test), 50)]
    print()
    print(tt.compare(runners["torch"], runners["tether"], batches, labels=y_test).table(), end="\n\n")
    report = tt.compare(runners["onnxruntime"], TetherRunner(res.path), x_test[:50], layerwise=True)
    print(report.table())
    report.to_html(out / "parity.html")
    print(f"\nHTML report: {out / 'parity.html'}")
    return 0 if res.ok and report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
