"""The ``tether`` command line: a thin layer over the Python API.

Example:
    $ tether inspect model.onnx
    $ tether inspect model.onnx --json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tether", description="Carry models to deployment and prove parity.")
    parser.add_argument("--version", action="version", version=f"tether {tether.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    inspect = sub.add_parser("inspect", help="print a model's inputs, outputs, ops and parameters")
    inspect.add_argument("model", help="an ONNX file")
    inspect.add_argument("--json", action="store_true", help="print the summary as JSON")
    inspect.add_argument("--shapes", action="store_true", help="also infer and list every value's shape")
    inspect.set_defaults(run=_inspect)
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
