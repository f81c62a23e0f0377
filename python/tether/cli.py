"""The ``tether`` command line: a thin layer over the Python API.

Example:
    $ tether inspect model.onnx
    $ tether inspect model.onnx --json
    $ tether run model.onnx --inputs x.npz --threads 2 --repeat 20
    $ tether compare model.onnx --against onnxruntime --layerwise --html report.html
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence

import numpy as np

import tether
from tether.parity import (
    PROFILES,
    GoldenError,
    GoldenRunner,
    OnnxRuntimeRunner,
    TetherRunner,
    Tolerance,
    compare,
    generate_inputs,
    iter_feeds,
)


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


def _dims(items: Sequence[str]) -> dict[str, int]:
    dims = {}
    for item in items:
        name, _, value = item.partition("=")
        if not value.lstrip("-").isdigit():
            raise tether.ArgumentError(f"--dim {item!r}: expected NAME=SIZE")
        dims[name] = int(value)
    return dims


def _run(args: argparse.Namespace) -> int:
    sess = tether.compile(args.model, device=args.device, threads=args.threads)
    runner = TetherRunner(sess)
    if args.inputs:
        feeds = next(iter_feeds(args.inputs, runner.input_specs()))
    else:
        feeds = generate_inputs(runner.input_specs(), seed=args.seed, dims=_dims(args.dim))[0]
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


def _compare(args: argparse.Namespace) -> int:
    tol: Tolerance | None = None  # each output by its dtype
    if args.profile or args.atol is not None or args.rtol is not None or args.rule:
        base = Tolerance.profile(args.profile or "fp32")
        tol = Tolerance(args.atol if args.atol is not None else base.atol,
                        args.rtol if args.rtol is not None else base.rtol, args.rule or base.rule)
    candidate = TetherRunner(args.model, device=args.device, threads=args.threads, optimize=not args.no_optimize)
    inputs: object = args.inputs
    if args.against == "onnxruntime":
        reference: object = OnnxRuntimeRunner(args.model, threads=args.threads)
    elif os.path.isdir(args.against):
        golden = GoldenRunner(args.against)
        reference = golden
        inputs = inputs or golden.samples()
    else:
        raise tether.ArgumentError(f"--against {args.against!r}: use 'onnxruntime' or a golden bundle folder")
    report = compare(reference, candidate, inputs, tolerance=tol, layerwise=args.layerwise, seed=args.seed,
                     dims=_dims(args.dim), model=candidate.model)
    print(report.table())
    if args.html:
        report.to_html(args.html)
        print(f"HTML report written to {args.html}")
    if args.json:
        report.to_json(args.json)
        print(f"JSON report written to {args.json}")
    return 0 if report.ok else 1


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
    cmp = sub.add_parser("compare", help="compare tether's engine with onnxruntime or a golden bundle; exit 1 on a "
                         "parity failure")
    cmp.add_argument("model", help="an ONNX file, run by tether")
    cmp.add_argument("--against", default="onnxruntime", help="'onnxruntime' (default) or a golden bundle folder")
    cmp.add_argument("--inputs", help=".npz file with one array per input name (default: random inputs, or the "
                     "golden bundle's)")
    cmp.add_argument("--layerwise", action="store_true", help="compare every intermediate value and name the first "
                     "node that diverges")
    cmp.add_argument("--html", help="write the HTML report here")
    cmp.add_argument("--json", help="write the JSON report here")
    cmp.add_argument("--profile", choices=sorted(PROFILES),
                     help="tolerance profile for every output (default: by each output's dtype)")
    cmp.add_argument("--atol", type=float, help="absolute tolerance (overrides the profile)")
    cmp.add_argument("--rtol", type=float, help="relative tolerance (overrides the profile)")
    cmp.add_argument("--rule", choices=["numpy", "either"], help="numpy: |c-r| <= atol + rtol*|r|; either: "
                     "|c-r| <= atol or |c-r|/|r| <= rtol")
    cmp.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                     help="size of a symbolic dim for random inputs (default 1); repeatable")
    cmp.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    cmp.add_argument("--device", default="cpu")
    cmp.add_argument("--threads", type=int, default=None)
    cmp.add_argument("--no-optimize", action="store_true", help="compile without the graph passes")
    cmp.set_defaults(run=_compare)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status (0 success, 1 parity failure, 2 bad model
    or usage).

    Example:
        >>> main(["inspect", "model.onnx"])    # doctest: +SKIP
        0
    """
    args = _parser().parse_args(argv)
    try:
        return int(args.run(args))
    except (tether.Error, GoldenError) as e:
        print(f"tether: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
