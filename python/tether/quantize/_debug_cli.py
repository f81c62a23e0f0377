"""``tether debug int8``: the INT8 error each quantized node adds, from the command line."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from tether._native import core as _core
from tether._regular_file import open_regular


def add_parser(tools: Any) -> None:
    """Adds ``int8`` to the ``tether debug`` tools."""
    p = tools.add_parser("int8", help="per quantized node of an INT8 QDQ model: the error it adds (its inputs taken "
                         "from the float model) and the total at its output; the worst nodes named")
    p.add_argument("float_model", help="the float ONNX model the QDQ model was quantized from")
    p.add_argument("qdq_model", help="the QDQ ONNX model (QuantizeLinear / DequantizeLinear pairs)")
    p.add_argument("--data", required=True, help=".npz with one array per input name, samples along axis 0")
    p.add_argument("--batch-size", type=int, default=None, help="samples per run (default: the batch size the model "
                   "fixes, else 32)")
    p.add_argument("--html", help="write the HTML report here ('-': standard output)")
    p.add_argument("--json", help="write the JSON report here ('-': standard output, the table then goes to standard "
                   "error)")
    p.add_argument("--threads", type=int, default=None)
    p.set_defaults(run=run)


def _npz(path: str) -> dict[str, np.ndarray]:
    with open_regular(path, what="--data") as f:
        try:
            npz = np.load(f, allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:
            raise _core.ArgumentError(f"--data '{path}' is not an .npz file of arrays: {e}") from None
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise _core.ArgumentError(f"--data '{path}' is not an .npz file of arrays: it holds one array")
        with npz:
            return {k: npz[k] for k in npz.files}


def run(args: argparse.Namespace) -> int:
    """Prints the table (the worst nodes first line), writes ``--html`` / ``--json``; exit 0."""
    from tether.quantize._debug import debug

    rep = debug(args.float_model, args.qdq_model, _npz(args.data), batch_size=args.batch_size, threads=args.threads)
    text = sys.stderr if "-" in (args.html, args.json) else sys.stdout
    print(str(rep), file=text)
    for kind, dest, render in (("HTML", args.html, rep.to_html), ("JSON", args.json, rep.to_json)):
        if not dest:
            continue
        if dest == "-":
            sys.stdout.write(render().rstrip("\n") + "\n")
        else:
            render(dest)
            print(f"{kind} report written to {dest}", file=text)
    return 0
