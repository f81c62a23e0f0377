"""INT8 accuracy where plain post-training quantization fails: tether's algorithms against
onnxruntime's quantize_static and NNCF, on the same models, calibration batches and test data.

Two models are trained here, in seconds, on scikit-learn's 8x8 digits (1,200 for training, the
other 597 held out; calibration takes the first 256 training digits, in 8 batches of 32, the
same for every tool):

- ``depthwise``: a MobileNet-style network (stem conv, two depthwise-separable blocks with
  BatchNormalization and ReLU, global average pooling, a linear head). After training, channel
  ``i`` of each depthwise BatchNormalization is scaled by ``k_i = exp(u)``, ``u`` uniform in
  [-3, 3], and input channel ``i`` of the next pointwise conv by ``1 / k_i``: the same function
  (ReLU is positively homogeneous), with the per-channel spread that folding BatchNormalization
  leaves in trained MobileNets, where per-tensor INT8 fails.
- ``transformer``: the 8 rows of a digit as 8 tokens, two pre-norm encoder layers (width 32,
  2 heads, MLP 64), mean pooling, a linear head. After training, 3 of the 32 channels of every
  LayerNormalization get their gain and bias scaled by 60 and the matching input rows of the
  projections that read them by 1/60: the same function, with the activation outliers that
  LLM.int8 and SmoothQuant describe.

Every quantized model is run by onnxruntime (CPU, default session options: on x86-64 without
VNNI its int8 products saturate) and by tether on the 597 held-out digits: top-1 accuracy and the
SQNR of the logits against the float model's. Rows: tether (plain, each algorithm,
combinations), onnxruntime's quantize_static (QDQ, int8, per tensor and per channel, MinMax,
Entropy and Percentile, and its SmoothQuant option), NNCF's ``quantize`` on the ONNX model
(default, without bias correction, full bias correction, the transformer preset with
SmoothQuant). A configuration that does not run keeps its error in the table.

onnxruntime's SmoothQuant option imports neural-compressor 2.x, whose requirements pin numpy
below 2; to run those rows without touching the environment's packages, put it beside them:
``pip install --no-deps --target DIR neural-compressor==2.6 Deprecated prettytable py-cpuinfo
schema "setuptools<81" opencv-python-headless pycocotools`` and run with ``PYTHONPATH=DIR``.
NNCF: ``pip install nncf``.

Usage:
    python bench/int8_accuracy.py [--models depthwise,transformer] [--markdown out.md] [--epochs 40]
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

CALIB_SAMPLES, CALIB_BATCH, TRAIN = 256, 32, 1200


def digits(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test): scikit-learn's digits in [0, 1], shape (N, 1, 8, 8)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    order = np.random.default_rng(seed).permutation(len(d.target))
    x = (d.images[order, None] / 16.0).astype(np.float32)
    y = d.target[order].astype(np.int64)
    return x[:TRAIN], y[:TRAIN], x[TRAIN:], y[TRAIN:]


def calibration_batches(x_train: np.ndarray) -> list[np.ndarray]:
    """The batches every tool calibrates on."""
    return [x_train[i:i + CALIB_BATCH] for i in range(0, CALIB_SAMPLES, CALIB_BATCH)]


def _depthwise_net() -> Any:
    from torch import nn

    def block(cin: int, cout: int, stride: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin), nn.ReLU(),
                nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

    return nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                         *block(16, 32, 1), *block(32, 64, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


class _Encoder:
    """Built lazily so that importing this file does not import torch."""

    @staticmethod
    def make() -> Any:
        import torch
        from torch import nn

        class Layer(nn.Module):
            def __init__(self, d: int = 32, heads: int = 2, hidden: int = 64) -> None:
                super().__init__()
                self.heads = heads
                self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
                self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
                self.fc1, self.fc2 = nn.Linear(d, hidden), nn.Linear(hidden, d)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                b, t, d = x.shape
                h = self.ln1(x)

                def split(z: torch.Tensor) -> torch.Tensor:
                    return z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)

                q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
                a = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
                x = x + self.o((a @ v).transpose(1, 2).reshape(b, t, d))
                return x + self.fc2(torch.relu(self.fc1(self.ln2(x))))

        class Net(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.embed = nn.Linear(8, 32)
                self.pos = nn.Parameter(torch.zeros(8, 32))
                self.layers = nn.ModuleList([Layer(), Layer()])
                self.norm = nn.LayerNorm(32)
                self.head = nn.Linear(32, 10)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                h = self.embed(x.reshape(x.shape[0], 8, 8)) + self.pos
                for layer in self.layers:
                    h = layer(h)
                return self.head(self.norm(h).mean(dim=1))

        return Net()


def _train(net: Any, x: np.ndarray, y: np.ndarray, epochs: int, seed: int) -> Any:
    import torch

    torch.manual_seed(seed)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs)
    gen = torch.Generator().manual_seed(seed)
    net.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(xt), generator=gen).split(64):
            loss = torch.nn.functional.cross_entropy(net(xt[idx]), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()
    return net.eval()


def _spread_depthwise(net: Any, seed: int, spread: float = 3.0) -> None:
    """Scales each depthwise BatchNorm's channel i by k_i and the next pointwise conv's input
    channel i by 1 / k_i: the same function through the ReLU between them."""
    import torch
    from torch import nn

    rng = np.random.default_rng(seed)
    mods = list(net)
    with torch.no_grad():
        for i, m in enumerate(mods):
            if isinstance(m, nn.Conv2d) and m.groups > 1:
                bn, pw = mods[i + 1], mods[i + 3]
                k = torch.from_numpy(np.exp(rng.uniform(-spread, spread, m.out_channels))).float()
                bn.weight.mul_(k)
                bn.bias.mul_(k)
                pw.weight.div_(k[None, :, None, None])


def _add_outliers(net: Any, seed: int, channels: int = 3, factor: float = 60.0) -> None:
    """Scales a few channels of every LayerNorm by ``factor`` and the matching input rows of the
    Linear layers reading it by 1 / factor: the same function, with activation outliers."""
    import torch

    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for layer in net.layers:
            for ln, readers in ((layer.ln1, (layer.q, layer.k, layer.v)), (layer.ln2, (layer.fc1,))):
                c = torch.from_numpy(rng.choice(ln.weight.numel(), channels, replace=False))
                ln.weight[c] *= factor
                ln.bias[c] *= factor
                for lin in readers:
                    lin.weight[:, c] /= factor


def build(name: str, path: Path, epochs: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Trains model ``name`` ('depthwise' or 'transformer') on the digits, writes its ONNX model
    (input 'x', output 'logits', dynamic batch) to ``path`` and returns the data split."""
    import tether as tt
    import torch

    x_train, y_train, x_test, y_test = digits(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same weights whatever the core count
    torch.manual_seed(seed)  # the initial weights
    try:
        if name == "depthwise":
            net = _train(_depthwise_net(), x_train, y_train, epochs, seed)
            _spread_depthwise(net, seed)
        elif name == "transformer":
            net = _train(_Encoder.make(), x_train, y_train, epochs, seed)
            _add_outliers(net, seed)
        else:
            raise ValueError(f"unknown model {name!r}")
    finally:
        torch.set_num_threads(threads)
    tt.export.torch(net, (torch.from_numpy(x_test[:8]),), path, dynamic={"x": {0: "batch"}},
                    input_names=["x"], output_names=["logits"], exporter="torchscript", golden=False)
    return x_train, y_train, x_test, y_test


def evaluate(model: Any, x_test: np.ndarray, y_test: np.ndarray, ref: np.ndarray | None,
             runner: str = "onnxruntime") -> tuple[float, float]:
    """(top-1 accuracy, SQNR of the logits against ``ref`` in dB) of a model (bytes or an
    onnx.ModelProto) run by ``runner``: "onnxruntime" (CPU, its integer kernels) or "tether"."""
    data = model if isinstance(model, bytes) else model.SerializeToString()
    if runner == "tether":
        import tether as tt

        out = next(iter(tt.compile(data, threads=2).run({"x": x_test}).values()))
    else:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 2
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        out = sess.run(None, {sess.get_inputs()[0].name: x_test})[0]
    out = np.asarray(out, dtype=np.float64)
    acc = float(np.mean(out.argmax(1) == y_test))
    if ref is None:
        return acc, float("inf")
    return acc, float(10 * np.log10(np.sum(ref ** 2) / max(np.sum((out - ref) ** 2), 1e-300)))


def tether_configs(name: str) -> list[tuple[str, dict[str, Any]]]:
    """(label, keyword arguments of tt.quantize.static) rows for tether."""
    rows: list[tuple[str, dict[str, Any]]] = []
    main = ("cross_layer_equalization",) if name == "depthwise" else ("smooth_quant",)
    for pc in (False, True):
        g = "per channel" if pc else "per tensor"
        for method in ("minmax", "entropy"):
            rows.append((f"plain, {g}, {method}", {"per_channel": pc, "method": method}))
        for algos in (("cross_layer_equalization",), ("smooth_quant",), ("bias_correction",), ("adaround",),
                      main + ("bias_correction",), main + ("adaround", "bias_correction")):
            if name == "transformer" and "cross_layer_equalization" in algos:
                continue  # no convolution chains
            rows.append((f"{' + '.join(algos)}, {g}, minmax", {"per_channel": pc, "method": "minmax",
                                                               "algorithms": list(algos)}))
        rows.append((f"{' + '.join(main)}, {g}, minmax, reduce_range", {
            "per_channel": pc, "method": "minmax", "algorithms": list(main), "reduce_range": True}))
    return rows


def run_tether(path: Path, batches: list[np.ndarray], kwargs: dict[str, Any]) -> bytes:
    import tether as tt

    extra = {"smooth_quant_alpha": "search"} if "smooth_quant" in kwargs.get("algorithms", ()) else {}
    res = tt.quantize.static(str(path), batches, eval_samples=0, progress=False, **extra, **kwargs)
    return res.model.to_bytes()


class _Reader:
    """onnxruntime's CalibrationDataReader over the shared batches."""

    def __init__(self, batches: list[np.ndarray]) -> None:
        self.batches = batches
        self.it = iter(self)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:  # what SmoothQuant reads
        return iter([{"x": b} for b in self.batches])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.it, None)

    def rewind(self) -> None:
        self.it = iter(self)


def ort_configs() -> list[tuple[str, dict[str, Any]]]:
    from onnxruntime.quantization import CalibrationMethod

    rows = []
    for pc in (False, True):
        g = "per channel" if pc else "per tensor"
        for method in (CalibrationMethod.MinMax, CalibrationMethod.Entropy, CalibrationMethod.Percentile):
            rows.append((f"QDQ, {g}, {method.name}", {"per_channel": pc, "calibrate_method": method}))
        rows.append((f"QDQ, {g}, MinMax, reduce_range", {"per_channel": pc, "reduce_range": True}))
        rows.append((f"QDQ, {g}, MinMax, SmoothQuant 0.5", {
            "per_channel": pc, "calibrate_method": CalibrationMethod.MinMax,
            "extra_options": {"SmoothQuant": True, "SmoothQuantAlpha": 0.5}}))
    return rows


def run_ort(path: Path, batches: list[np.ndarray], kwargs: dict[str, Any]) -> bytes:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "q.onnx"
        quantize_static(str(path), str(out), _Reader(batches), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, **kwargs)
        return out.read_bytes()


def nncf_configs(name: str) -> list[tuple[str, dict[str, Any]]]:
    rows: list[tuple[str, dict[str, Any]]] = [("default (fast bias correction)", {}),
                                              ("no bias correction", {"no_bias_correction": True}),
                                              ("full bias correction", {"fast_bias_correction": False})]
    if name == "transformer":
        rows.append(("model_type=TRANSFORMER (SmoothQuant)", {"transformer": True}))
    return rows


def run_nncf(path: Path, batches: list[np.ndarray], kwargs: dict[str, Any]) -> bytes:
    import nncf
    import onnx
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters

    samples = [{"x": s[None]} for b in batches for s in b]  # NNCF's ONNX backend counts items
    adv = AdvancedQuantizationParameters(disable_bias_correction=bool(kwargs.get("no_bias_correction")))
    q = nncf.quantize(onnx.load(str(path)), nncf.Dataset(samples), subset_size=len(samples),
                      fast_bias_correction=kwargs.get("fast_bias_correction", True),
                      model_type=nncf.ModelType.TRANSFORMER if kwargs.get("transformer") else None,
                      advanced_parameters=adv)
    return q.SerializeToString()


def _row(rows: list[list[str]], model: str, tool: str, label: str, fn: Callable[[], bytes],
         x_test: np.ndarray, y_test: np.ndarray, ref: np.ndarray) -> None:
    t0 = time.perf_counter()
    try:
        q = fn()
        seconds = f"{time.perf_counter() - t0:.1f}"
        cells = []
        for runner in ("onnxruntime", "tether"):
            try:
                acc, sqnr = evaluate(q, x_test, y_test, ref, runner)
                cells += [f"{100 * acc:.2f} %", f"{sqnr:.1f} dB"]
            except Exception as e:  # noqa: BLE001 - the other runner's numbers still count
                cells += [f"fails: {type(e).__name__}: {str(e)[:90]}", ""]
    except Exception as e:  # noqa: BLE001 - a tool that fails keeps its error in the table
        msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        cells, seconds = [f"fails: {type(e).__name__}: {msg[:90]}", "", "", ""], ""
        if os.environ.get("TETHER_BENCH_TRACE"):
            traceback.print_exc()
    rows.append([model, tool, label, *cells, seconds])
    print("| " + " | ".join(rows[-1]) + " |", flush=True)


def machine() -> str:
    cpu, isa = platform.processor() or platform.machine(), ""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read().splitlines()
        cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
        flags = set(next(line.split(":", 1)[1].split() for line in info if line.startswith("flags")))
        # Without VNNI, onnxruntime's int8 products go through vpmaddubsw, whose pair sums saturate.
        isa = ", " + "/".join(f for f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni") if f in flags)
    except (OSError, StopIteration):
        pass
    return f"{cpu}{isa}, {os.cpu_count()} logical cores, load average {os.getloadavg()[0]:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="depthwise,transformer")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--tools", default="tether,onnxruntime,nncf")
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args(argv)
    import onnxruntime

    versions = [f"onnxruntime {onnxruntime.__version__}"]
    for package in ("nncf", "neural_compressor"):
        try:
            versions.append(f"{package} {__import__(package).__version__}")
        except ImportError:
            versions.append(f"{package} not installed")
    head = ["model", "tool", "configuration", "accuracy (onnxruntime)", "SQNR (onnxruntime)", "accuracy (tether)",
            "SQNR (tether)", "quantize s"]
    print(f"machine: {machine()}; {', '.join(versions)}")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    rows: list[list[str]] = []
    tools = args.tools.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            path = Path(tmp) / f"{name}.onnx"
            x_train, _, x_test, y_test = build(name, path, args.epochs)
            batches = calibration_batches(x_train)
            ref_acc, _ = evaluate(path.read_bytes(), x_test, y_test, None)
            import onnxruntime as ort
            ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
                None, {"x": x_test})[0].astype(np.float64)
            rows.append([name, "float", "float32", f"{100 * ref_acc:.2f} %", "", "", "", ""])
            print("| " + " | ".join(rows[-1]) + " |", flush=True)
            plans = [("tether", tether_configs(name), run_tether), ("onnxruntime", ort_configs(), run_ort),
                     ("nncf", nncf_configs(name), run_nncf)]
            for tool, configs, fn in plans:
                if tool not in tools:
                    continue
                for label, kw in configs:
                    _row(rows, name, tool, label, functools.partial(fn, path, batches, kw), x_test, y_test, ref)
    if args.markdown:
        lines = [f"Machine: {machine()}; {', '.join(versions)}.", "",
                 "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        args.markdown.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
