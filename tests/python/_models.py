"""Test architectures defined with torch.nn (random weights): the real-model set."""

from __future__ import annotations

import torch
from torch import nn


class ResidualBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


class ResNetStyle(nn.Module):
    """Conv stem, BatchNorm, residual adds, a strided stage, global pooling, classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2))
        self.stage1 = nn.Sequential(ResidualBlock(16), ResidualBlock(16))
        self.down = nn.Sequential(nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.stage2 = ResidualBlock(32)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stage2(self.down(self.stage1(self.stem(x))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.body = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride=stride, padding=1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.use_res else y


class MobileNetV2Style(nn.Module):
    """Depthwise separable inverted residuals with ReLU6."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
        self.blocks = nn.Sequential(
            InvertedResidual(16, 16, 1, 1), InvertedResidual(16, 24, 2, 6), InvertedResidual(24, 24, 1, 6),
            InvertedResidual(24, 32, 2, 6),
        )
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.head(x.mean(dim=(2, 3)))


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.GELU(), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TransformerEncoderNet(nn.Module):
    """nn.TransformerEncoder over token embeddings, mean-pooled into a classifier."""

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x).mean(dim=1))


class ViTStyle(nn.Module):
    """Patch embedding, class token, learned positions, pre-norm encoder blocks with GELU."""

    def __init__(self, dim: int = 32, heads: int = 4, depth: int = 2) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, kernel_size=4, stride=4)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, 1 + 16, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.patch(x).flatten(2).transpose(1, 2)
        p = torch.cat([self.cls.expand(x.shape[0], -1, -1), p], dim=1) + self.pos
        return self.head(self.norm(self.encoder(p))[:, 0])


class LSTMClassifier(nn.Module):
    """Token embedding, a bidirectional two-layer LSTM, a classifier on the last step."""

    VOCAB = 100

    def __init__(self, dim: int = 16, hidden: int = 24, classes: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(self.VOCAB, dim)
        self.lstm = nn.LSTM(dim, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embed(ids))
        return self.fc(out[:, -1])


def _conv_bn_relu(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class UNetStyle(nn.Module):
    """Two down stages (Conv+BN+ReLU, MaxPool), a bottleneck, one up stage by ConvTranspose2d
    and one by bilinear interpolation (Resize), skip connections concatenated."""

    def __init__(self) -> None:
        super().__init__()
        self.down1 = _conv_bn_relu(3, 8)
        self.down2 = _conv_bn_relu(8, 16)
        self.pool = nn.MaxPool2d(2)
        self.bottleneck = _conv_bn_relu(16, 32)
        self.up2 = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.dec2 = _conv_bn_relu(32, 16)
        self.dec1 = _conv_bn_relu(16 + 8, 8)
        self.head = nn.Conv2d(8, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s1 = self.down1(x)
        s2 = self.down2(self.pool(s1))
        m = self.bottleneck(self.pool(s2))
        d2 = self.dec2(torch.cat([self.up2(m), s2], dim=1))
        u1 = nn.functional.interpolate(d2, scale_factor=2, mode="bilinear", align_corners=False)
        return self.head(self.dec1(torch.cat([u1, s1], dim=1)))


# name -> (factory, example input shape with the batch first)
MODELS: dict[str, tuple[type[nn.Module], tuple[int, ...]]] = {
    "resnet": (ResNetStyle, (2, 3, 32, 32)),
    "mobilenetv2": (MobileNetV2Style, (2, 3, 32, 32)),
    "mlp": (MLP, (2, 64)),
    "transformer": (TransformerEncoderNet, (2, 7, 32)),
    "vit": (ViTStyle, (2, 3, 16, 16)),
    "lstm": (LSTMClassifier, (2, 9)),
    "unet": (UNetStyle, (2, 3, 16, 16)),
}

# Models whose input is int64 token ids rather than float32 features: name -> vocabulary size.
TOKEN_VOCAB: dict[str, int] = {"lstm": LSTMClassifier.VOCAB}


def build(name: str) -> nn.Module:
    torch.manual_seed(0)
    module = MODELS[name][0]().eval()
    # Non-trivial BatchNorm statistics, so that folding or dropping them would show.
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return module
