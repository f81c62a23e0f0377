"""The ``tether`` command line: a thin layer over the Python API.

Example:
    $ tether inspect model.onnx
    $ tether inspect model.onnx --json
    $ tether run model.onnx --inputs x.npz --threads 2 --repeat 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence

import numpy as np

import tether


def _inspect(args: argparse.Namespace) -> int:
    model = tether.load(args.model)
    summary = model.summary()
    if args.json:
        print(json.dumps(summary.to_dict(), indent=2))
        return 0
    print(summary)
    if args.shapes:
        report = model.infer_shapes()
        print()
        print("values (after shape inference)")
        for info in model.value_types().values():
            print(f"  {info}")
        if report["ops_without_inference"]:
            print(f"  ops without shape inference: {', '.join(report['ops_without_inference'])}")
    return 0


def _random_inputs(sess: tether.Session, dims: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    """Inputs drawn from the model's input specs: symbolic dims from ``dims`` (default 1)."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for info in sess.inputs:
        if info.shape is None:
            raise tether.ArgumentError(f"input '{info.name}' has no known rank; pass --inputs")
        shape = []
        for d in info.shape:
            if isinstance(d, int):
                shape.append(d)
            elif isinstance(d, str) and d in dims:
                shape.append(dims[d])
            else:
                shape.append(1)
        if info.dtype.startswith("float"):
            feeds[info.name] = rng.standard_normal(shape).astype(info.dtype)
        elif info.dtype == "bool":
            feeds[info.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            feeds[info.name] = rng.integers(0, 10, size=shape).astype(info.dtype)
    return feeds


def _run(args: argparse.Namespace) -> int:
    sess = tether.compile(args.model, device=args.device, threads=args.threads)
    if args.inputs:
        with np.load(args.inputs) as data:
            feeds = {name: data[name] for name in data.files}
    else:
        dims = {}
        for item in args.dim:
            name, _, value = item.partition("=")
            dims[name] = int(value)
        feeds = _random_inputs(sess, dims, args.seed)
    outputs = sess.run(feeds)  # the first run plans memory for these shapes
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        sess.run(feeds)
        times.append(time.perf_counter() - start)
    np.set_printoptions(precision=5, threshold=12, edgeitems=3)
    for name, value in outputs.items():
        print(f"{name}: {value.dtype}{list(value.shape)}")
        if value.size and np.issubdtype(value.dtype, np.number):
            print(f"  min {value.min():.6g}  max {value.max():.6g}  mean {value.mean():.6g}")
        print(f"  {value}")
    if times:
        print(f"latency: median {statistics.median(times) * 1e3:.3f} ms over {len(times)} runs "
              f"({sess.threads} threads, {sess.device})")
    if args.save:
        np.savez(args.save, **outputs)  # type: ignore[arg-type]  # numpy stubs mis-type savez keywords
        print(f"outputs saved to {args.save}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tether", description="Carry models to deployment and prove parity.")
    parser.add_argument("--version", action="version", version=f"tether {tether.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    inspect = sub.add_parser("inspect", help="print a model's inputs, outputs, ops and parameters")
    inspect.add_argument("model", help="an ONNX file")
    inspect.add_argument("--json", action="store_true", help="print the summary as JSON")
    inspect.add_argument("--shapes", action="store_true", help="also infer and list every value's shape")
    inspect.set_defaults(run=_inspect)
    run = sub.add_parser("run", help="run a model with tether's engine, print its outputs and latency")
    run.add_argument("model", help="an ONNX file")
    run.add_argument("--inputs", help=".npz file with one array per input name (default: random inputs)")
    run.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                     help="size of a symbolic dim for random inputs (default 1); repeatable")
    run.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    run.add_argument("--device", default="cpu")
    run.add_argument("--threads", type=int, default=None, help="threads per run (default: physical cores)")
    run.add_argument("--repeat", type=int, default=10, help="timed runs after the first (0: none)")
    run.add_argument("--save", help="write the outputs to this .npz file")
    run.set_defaults(run=_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status (0 success, 2 bad model or usage).

    Example:
        >>> main(["inspect", "model.onnx"])    # doctest: +SKIP
        0
    """
    args = _parser().parse_args(argv)
    try:
        return int(args.run(args))
    except tether.Error as e:
        print(f"tether: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
