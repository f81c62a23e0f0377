"""Full-size benchmark networks defined with torch.nn (random weights): ResNet-50,
MobileNetV2 and a BERT-base encoder, whose architectures follow the published papers; and
timm's EfficientNet-B0 (not in DEFAULT: for the QOperator rows)."""

from __future__ import annotations

import torch
from torch import nn


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * 4
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout),
        )
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.down is None else self.down(x)
        return torch.relu(self.body(x) + identity)


class ResNet50(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1))
        layers, cin = [], 64
        for width, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
            for i in range(blocks):
                layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * 4
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.layers(self.stem(x)), 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True)]
        layers += [
            nn.Conv2d(hidden, hidden, 3, stride=stride, padding=1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
            nn.ReLU6(inplace=True), nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout),
        ]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        setting = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                   (6, 320, 1, 1)]
        layers: list[nn.Module] = [nn.Conv2d(3, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32),
                                   nn.ReLU6(inplace=True)]
        cin = 32
        for t, c, n, s in setting:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += [nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(1280, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).mean(dim=(2, 3)))


class BertBase(nn.Module):
    """BERT-base encoder: token, position and segment-free embeddings, 12 post-norm layers of
    hidden 768, 12 heads, feed-forward 3072 with GELU."""

    def __init__(self, vocab: int = 30522, hidden: int = 768, layers: int = 12, heads: int = 12,
                 seq: int = 512) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, hidden)
        self.positions = nn.Embedding(seq, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        layer = nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        return self.encoder(self.norm(self.tokens(ids) + self.positions(pos)))


# name -> (factory, example input, dtype of the input)
def EfficientNetB0() -> nn.Module:  # noqa: N802 (named as the other nets' classes)
    """timm's EfficientNet-B0 (random weights): SiLU and squeeze-and-excitation, the gates
    a quantized model writes as QLinearSigmoid and QLinearMul in onnxruntime's QOperator format."""
    from _zoo_models import import_timm

    return import_timm().create_model("efficientnet_b0", pretrained=False)


NETS = {
    "resnet50": (ResNet50, (1, 3, 224, 224), "float32"),
    "mobilenetv2": (MobileNetV2, (1, 3, 224, 224), "float32"),
    "bert_base_seq128": (BertBase, (1, 128), "int64"),
    "efficientnet_b0": (EfficientNetB0, (1, 3, 224, 224), "float32"),
}

# The nets a bench runs unless told otherwise.
DEFAULT = ("resnet50", "mobilenetv2", "bert_base_seq128")
