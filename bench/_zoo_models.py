"""The networks of `zoo.py`, built offline with random weights: timm image models and
transformers encoders from their configs (nothing is downloaded), and hand-written torch.nn nets
(a DeepLab-style segmenter, a YOLO-style detector, a UNet, a GRU tagger, an LSTM).

Every entry is a `Spec`: how to build the module (in eval mode, after torch.manual_seed(0)) and
its inputs. Wrappers give each exported graph one tensor input where the model allows it and
plain tensor outputs (a transformer's last_hidden_state, a detector's heads concatenated).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Input:
    name: str  # the forward parameter, and so the graph input's name
    shape: tuple[int, ...]  # at batch 1
    dtype: str = "float32"  # "float32": standard normal; "int64": token ids in [0, high)
    high: int = 0


@dataclass(frozen=True)
class Spec:
    name: str
    family: str  # "timm", "transformers" or "torch.nn"
    build: Callable[[], nn.Module]
    inputs: tuple[Input, ...]
    classifier: bool = False  # an image classifier: also measured at the larger --batches
    about: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


# ---- timm without torchvision -----------------------------------------------------------------


class _Placeholder(type):
    """A stand-in class for a torchvision name timm reads at import time; its attributes are
    more stand-ins (timm builds a dict keyed by InterpolationMode members)."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        sub = _Placeholder(name, (), {})
        setattr(cls, name, sub)
        return sub


class _PlaceholderModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _Placeholder(name, (), {})
        setattr(self, name, value)
        return value


class _TorchvisionStub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _PlaceholderModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []  # type: ignore[attr-defined]


def import_timm() -> Any:
    """timm, imported even where torchvision is absent. timm imports torchvision at import time
    (FrozenBatchNorm2d, its data transforms) though none of the models here use it, and
    installing torchvision from PyPI would replace the venv's CPU-only torch. So, only while
    timm is imported, torchvision's modules are placeholders; they leave sys.modules afterwards,
    and later imports of torchvision fail as they should."""
    if "timm" in sys.modules or importlib.util.find_spec("torchvision") is not None:
        import timm

        return timm
    stub = _TorchvisionStub()
    sys.meta_path.insert(0, stub)
    try:
        import timm
    finally:
        sys.meta_path.remove(stub)
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
    return timm


def _timm(name: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        return import_timm().create_model(name, pretrained=False)

    return build


# ---- transformers from configs ------------------------------------------------------------------


class LastHidden(nn.Module):
    """A transformers encoder called on token ids alone (no mask: every token attends), returning
    last_hidden_state."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids).last_hidden_state


class WhisperEncoderOnly(nn.Module):
    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, input_features: torch.Tensor) -> torch.Tensor:
        return self.encoder(input_features).last_hidden_state


def _hf(kind: str, **config: Any) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import transformers as tf

        # Eager attention: plain MatMul / Softmax in the graph, as every engine runs it.
        if kind == "bert":
            return LastHidden(tf.BertModel(tf.BertConfig(**config), add_pooling_layer=False))
        if kind == "distilbert":
            return LastHidden(tf.DistilBertModel(tf.DistilBertConfig(**config)))
        if kind == "gpt2":
            return LastHidden(tf.GPT2Model(tf.GPT2Config(**config)))
        if kind == "t5":
            return LastHidden(tf.T5EncoderModel(tf.T5Config(**config)))
        if kind == "whisper":
            return WhisperEncoderOnly(tf.WhisperModel(tf.WhisperConfig(**config)).get_encoder())
        raise ValueError(kind)

    return build


# ---- hand-written torch.nn ----------------------------------------------------------------------


def conv_bn(cin: int, cout: int, k: int = 3, stride: int = 1, dilation: int = 1, act: type = nn.ReLU) -> nn.Sequential:
    pad = dilation * (k - 1) // 2
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, pad, dilation=dilation, bias=False), nn.BatchNorm2d(cout),
                         act())


class DilatedResidual(nn.Module):
    def __init__(self, ch: int, dilation: int) -> None:
        super().__init__()
        self.a = conv_bn(ch, ch, 3, dilation=dilation)
        self.b = nn.Sequential(nn.Conv2d(ch, ch, 3, padding=dilation, dilation=dilation, bias=False),
                               nn.BatchNorm2d(ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.b(self.a(x)))


class ASPP(nn.Module):
    """Atrous spatial pyramid pooling: a 1x1 branch, three dilated 3x3 branches and an
    image-pooling branch, concatenated and projected."""

    def __init__(self, cin: int, ch: int, rates: tuple[int, ...] = (6, 12, 18)) -> None:
        super().__init__()
        self.branches = nn.ModuleList([conv_bn(cin, ch, 1)] + [conv_bn(cin, ch, 3, dilation=r) for r in rates])
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(cin, ch, 1, bias=False), nn.ReLU())
        self.project = conv_bn(ch * (len(rates) + 2), ch, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = [b(x) for b in self.branches]
        outs.append(F.interpolate(self.pool(x), size=x.shape[-2:], mode="bilinear", align_corners=False))
        return self.project(torch.cat(outs, 1))


class DeepLabStyle(nn.Module):
    """Output stride 8: a strided stem and two strided stages, then dilated residual blocks
    (rates 2 and 4) in place of further striding, ASPP, a 1x1 classifier and a bilinear resize
    back to the input's size."""

    def __init__(self, classes: int = 21) -> None:
        super().__init__()
        self.backbone = nn.Sequential(
            conv_bn(3, 32, 3, 2), conv_bn(32, 64, 3, 1),
            conv_bn(64, 128, 3, 2), DilatedResidual(128, 1),
            conv_bn(128, 256, 3, 2), DilatedResidual(256, 2), DilatedResidual(256, 4),
        )
        self.aspp = ASPP(256, 128)
        self.classifier = nn.Conv2d(128, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.classifier(self.aspp(self.backbone(x)))
        return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)


def cbs(cin: int, cout: int, k: int = 1, stride: int = 1) -> nn.Sequential:
    """Conv, BatchNorm, SiLU: the YOLO building block."""
    return conv_bn(cin, cout, k, stride, act=nn.SiLU)


class CSP(nn.Module):
    """A C2f-style block: split in two, a chain of bottlenecks on one half, every intermediate
    concatenated."""

    def __init__(self, cin: int, cout: int, n: int = 1, shortcut: bool = True) -> None:
        super().__init__()
        self.hidden = cout // 2
        self.first = cbs(cin, 2 * self.hidden)
        self.blocks = nn.ModuleList(nn.Sequential(cbs(self.hidden, self.hidden, 3), cbs(self.hidden, self.hidden, 3))
                                    for _ in range(n))
        self.shortcut = shortcut
        self.last = cbs((2 + n) * self.hidden, cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = list(self.first(x).split(self.hidden, 1))
        for block in self.blocks:
            y = block(parts[-1])
            parts.append(parts[-1] + y if self.shortcut else y)
        return self.last(torch.cat(parts, 1))


class SPPF(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.first = cbs(cin, cin // 2)
        self.pool = nn.MaxPool2d(5, 1, 2)
        self.last = cbs(cin // 2 * 4, cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.first(x)
        b = self.pool(a)
        c = self.pool(b)
        return self.last(torch.cat([a, b, c, self.pool(c)], 1))


class YoloStyle(nn.Module):
    """A small YOLOv8-like detector: CSP backbone to stride 32, SPPF, a top-down and bottom-up
    neck (nearest upsampling, concatenation, strided convs) and a head per scale (3 anchors x
    (4 box + 1 objectness + classes)). The heads are flattened and concatenated into one
    (batch, 3 * (5 + classes), boxes) output."""

    def __init__(self, classes: int = 80, w: int = 16) -> None:
        super().__init__()
        self.stem = nn.Sequential(cbs(3, w, 3, 2), cbs(w, 2 * w, 3, 2), CSP(2 * w, 2 * w, 1))
        self.p3 = nn.Sequential(cbs(2 * w, 4 * w, 3, 2), CSP(4 * w, 4 * w, 2))
        self.p4 = nn.Sequential(cbs(4 * w, 8 * w, 3, 2), CSP(8 * w, 8 * w, 2))
        self.p5 = nn.Sequential(cbs(8 * w, 16 * w, 3, 2), CSP(16 * w, 16 * w, 1), SPPF(16 * w, 16 * w))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.td4 = CSP(24 * w, 8 * w, 1, shortcut=False)
        self.td3 = CSP(12 * w, 4 * w, 1, shortcut=False)
        self.down3 = cbs(4 * w, 4 * w, 3, 2)
        self.bu4 = CSP(12 * w, 8 * w, 1, shortcut=False)
        self.down4 = cbs(8 * w, 8 * w, 3, 2)
        self.bu5 = CSP(24 * w, 16 * w, 1, shortcut=False)
        out = 3 * (5 + classes)
        self.heads = nn.ModuleList(nn.Sequential(cbs(c, c, 3), nn.Conv2d(c, out, 1)) for c in (4 * w, 8 * w, 16 * w))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c3 = self.p3(self.stem(x))
        c4 = self.p4(c3)
        c5 = self.p5(c4)
        t4 = self.td4(torch.cat([self.up(c5), c4], 1))
        t3 = self.td3(torch.cat([self.up(t4), c3], 1))
        b4 = self.bu4(torch.cat([self.down3(t3), t4], 1))
        b5 = self.bu5(torch.cat([self.down4(b4), c5], 1))
        outs = [head(f).flatten(2) for head, f in zip(self.heads, (t3, b4, b5), strict=True)]
        return torch.cat(outs, 2)


class UNet(nn.Module):
    """Four levels of two 3x3 convs (32 to 256 channels), max-pool down, ConvTranspose up,
    skip concatenations, a 1x1 classifier."""

    def __init__(self, cin: int = 3, classes: int = 2, w: int = 32) -> None:
        super().__init__()
        chans = [w, 2 * w, 4 * w, 8 * w]

        def double(a: int, b: int) -> nn.Sequential:
            return nn.Sequential(conv_bn(a, b), conv_bn(b, b))

        self.down = nn.ModuleList()
        prev = cin
        for c in chans:
            self.down.append(double(prev, c))
            prev = c
        self.bottom = double(chans[-1], 2 * chans[-1])
        self.ups = nn.ModuleList()
        self.up_convs = nn.ModuleList()
        prev = 2 * chans[-1]
        for c in reversed(chans):
            self.ups.append(nn.ConvTranspose2d(prev, c, 2, stride=2))
            self.up_convs.append(double(2 * c, c))
            prev = c
        self.out = nn.Conv2d(w, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.bottom(x)
        for up, conv, skip in zip(self.ups, self.up_convs, reversed(skips), strict=True):
            x = conv(torch.cat([up(x), skip], 1))
        return self.out(x)


class GRUTagger(nn.Module):
    """A sequence tagger: token embedding, 2-layer bidirectional GRU, per-token linear."""

    def __init__(self, vocab: int = 5000, dim: int = 128, hidden: int = 128, tags: int = 20) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.gru = nn.GRU(dim, hidden, num_layers=2, bidirectional=True, batch_first=True)
        self.out = nn.Linear(2 * hidden, tags)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        y, _ = self.gru(self.embed(input_ids))
        return self.out(y)


class LSTMFrames(nn.Module):
    """An acoustic-style model: 80 features per frame, 2-layer LSTM (256), per-frame linear."""

    def __init__(self, features: int = 80, hidden: int = 256, classes: int = 40) -> None:
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=2, batch_first=True)
        self.out = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(x)
        return self.out(y)


# ---- the zoo ------------------------------------------------------------------------------------

IMAGE = (Input("x", (1, 3, 224, 224)),)
SEQ = 128
BERT_VOCAB, GPT2_VOCAB, T5_VOCAB = 30522, 50257, 32128

SPECS: dict[str, Spec] = {s.name: s for s in [
    Spec("resnet50", "timm", _timm("resnet50"), IMAGE, True),
    Spec("mobilenetv3_large_100", "timm", _timm("mobilenetv3_large_100"), IMAGE, True),
    Spec("efficientnet_b0", "timm", _timm("efficientnet_b0"), IMAGE, True),
    Spec("convnext_tiny", "timm", _timm("convnext_tiny"), IMAGE, True),
    Spec("regnety_004", "timm", _timm("regnety_004"), IMAGE, True),
    Spec("deit_small_patch16_224", "timm", _timm("deit_small_patch16_224"), IMAGE, True),
    Spec("swin_tiny_patch4_window7_224", "timm", _timm("swin_tiny_patch4_window7_224"), IMAGE, True,
         "windowed attention, shifted windows"),
    Spec("bert_base", "transformers", _hf("bert", attn_implementation="eager"),
         (Input("input_ids", (1, SEQ), "int64", BERT_VOCAB),), about="BertConfig() defaults, seq 128"),
    Spec("distilbert", "transformers", _hf("distilbert", attn_implementation="eager"),
         (Input("input_ids", (1, SEQ), "int64", BERT_VOCAB),), about="DistilBertConfig() defaults, seq 128"),
    Spec("gpt2", "transformers", _hf("gpt2", use_cache=False, attn_implementation="eager"),
         (Input("input_ids", (1, SEQ), "int64", GPT2_VOCAB),), about="GPT2Config() defaults, no cache, seq 128"),
    Spec("whisper_tiny_encoder", "transformers",
         _hf("whisper", d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
             decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536, num_mel_bins=80,
             max_source_positions=1500, vocab_size=51865, attn_implementation="eager"),
         (Input("input_features", (1, 80, 3000)),), about="whisper-tiny's encoder (d 384, 4 layers), 80x3000"),
    Spec("t5_small_encoder", "transformers",
         _hf("t5", d_model=512, d_ff=2048, d_kv=64, num_layers=6, num_heads=8, vocab_size=T5_VOCAB,
             relative_attention_num_buckets=32, feed_forward_proj="relu", use_cache=False,
             attn_implementation="eager"),
         (Input("input_ids", (1, SEQ), "int64", T5_VOCAB),), about="t5-small's encoder, seq 128"),
    Spec("bert_tiny", "transformers",
         _hf("bert", hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256,
             vocab_size=1000, max_position_embeddings=64, attn_implementation="eager"),
         (Input("input_ids", (1, 32), "int64", 1000),), about="2 layers, hidden 64, seq 32"),
    Spec("deeplab", "torch.nn", DeepLabStyle, (Input("x", (1, 3, 256, 256)),),
         about="dilated convs, ASPP, bilinear resize; 256x256"),
    Spec("deeplab_64", "torch.nn", DeepLabStyle, (Input("x", (1, 3, 64, 64)),), about="the same at 64x64"),
    Spec("yolo", "torch.nn", YoloStyle, (Input("x", (1, 3, 320, 320)),), about="SiLU, nearest upsample, 3 heads; 320"),
    Spec("yolo_128", "torch.nn", YoloStyle, (Input("x", (1, 3, 128, 128)),), about="the same at 128x128"),
    Spec("unet", "torch.nn", UNet, (Input("x", (1, 3, 128, 128)),), about="ConvTranspose up, skip concats; 128"),
    Spec("gru_tagger", "torch.nn", GRUTagger, (Input("input_ids", (1, 64), "int64", 5000),),
         about="embedding, 2-layer bidirectional GRU, seq 64"),
    Spec("lstm", "torch.nn", LSTMFrames, (Input("x", (1, 100, 80)),), about="2-layer LSTM, 100 frames x 80"),
]}

# The full run: every family, one entry per architecture (the small variants are for --quick).
FULL = [n for n in SPECS if n not in ("bert_tiny", "deeplab_64", "yolo_128")]
QUICK = ["gru_tagger", "yolo_128", "deeplab_64", "bert_tiny"]


def build(name: str) -> nn.Module:
    """The module in eval mode, with random weights (seed 0). Its BatchNorm layers first take
    their running statistics from a few random inputs: with the default statistics (mean 0,
    variance 1) each layer shrinks the activations, and a deep CNN's outputs end up near zero
    (even denormal) and hardly dependent on the input, which would make the error column and
    the timings unlike a trained net's."""
    spec = SPECS[name]
    torch.manual_seed(0)
    net = spec.build()
    norms = [m for m in net.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if norms:
        for m in norms:
            m.momentum = None  # a cumulative average over the batches below
        net.train()
        with torch.no_grad():
            for _ in range(3):
                net(*example(spec, 4))
    return net.eval()


def example(spec: Spec, batch: int, seed: int | None = None) -> tuple[torch.Tensor, ...]:
    """Random inputs of the spec at `batch`: standard normal floats, uniform token ids."""
    gen = None if seed is None else torch.Generator().manual_seed(seed)
    out = []
    for i in spec.inputs:
        shape = (batch, *i.shape[1:])
        if i.dtype == "int64":
            out.append(torch.randint(0, i.high, shape, generator=gen))
        else:
            out.append(torch.randn(shape, generator=gen))
    return tuple(out)
