"""``tether edit``: the command's work, over the tether.edit calls."""

from __future__ import annotations

import argparse
import os

from tether._model import Model, load
from tether._native import core as _core
from tether.edit._check import check
from tether.edit._edits import convert_opset, fix_inputs, rename
from tether.edit._extract import extract
from tether.edit._simplify import simplify


def _shape_option(item: str) -> tuple[str, list[int | str]]:
    name, sep, dims = item.rpartition(":")
    if not sep or not name or not dims:
        raise _core.ArgumentError(f"--input {item!r}: expected NAME:D1,D2,... (a size or a symbol per dim)")
    out: list[int | str] = []
    for d in dims.split(","):
        d = d.strip()
        if not d:
            raise _core.ArgumentError(f"--input {item!r}: an empty dim")
        out.append(int(d) if d.lstrip("-").isdigit() else d)
    return name, out


def _pairs(items: list[str], option: str, sep: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, found, value = item.partition(sep)
        if not found or not key or not value:
            raise _core.ArgumentError(f"{option} {item!r}: expected OLD{sep}NEW")
        if key in out:
            raise _core.ArgumentError(f"{option} {item!r}: '{key}' is given twice")
        out[key] = value
    return out


def _list(text: str | None) -> list[str]:
    return [n.strip() for n in (text or "").split(",") if n.strip()]


def _check_paths(model: str, output: str) -> None:
    if not os.path.isfile(model):
        raise _core.ArgumentError(f"model '{model}': no such file" if not os.path.exists(model)
                                  else f"model '{model}' is not a file")
    same = os.path.abspath(output) == os.path.abspath(model) or \
        (os.path.exists(output) and os.path.samefile(output, model))
    if same:
        raise _core.ArgumentError(f"-o '{output}' is the model being edited; write the edited model to another file")


def _edits(args: argparse.Namespace, model: Model) -> tuple[Model, dict[str, str], list[str]]:
    """Applies the requested edits in a fixed order; returns the model, the renames and a log."""
    shapes = dict(_shape_option(i) for i in args.input)
    if len(shapes) != len(args.input):
        raise _core.ArgumentError("--input: an input is given twice")
    renames = _pairs(args.rename, "--rename", "=")
    ins, outs = _list(args.extract_inputs), _list(args.extract_outputs)
    if bool(ins) != bool(outs):
        raise _core.ArgumentError("--extract-inputs and --extract-outputs go together: name both ends of the subgraph")
    if not (shapes or ins or renames or args.opset is not None or args.simplify):
        raise _core.ArgumentError("nothing to edit: give --input, --extract-inputs/--extract-outputs, --rename, "
                                  "--opset or --simplify")
    log = []
    if shapes:
        model = fix_inputs(model, shapes)
        log.append("fixed inputs: " + ", ".join(str(v) for v in model.inputs if v.name in shapes))
    if ins:
        before = len(model.nodes)
        model = extract(model, ins, outs)
        log.append(f"extracted {len(model.nodes)} of {before} nodes: {', '.join(ins)} -> {', '.join(outs)}")
    if renames:
        model = rename(model, renames)
        log.append("renamed: " + ", ".join(f"{a} -> {b}" for a, b in renames.items()))
    if args.opset is not None:
        before_opset = model.opset.get("ai.onnx")
        model = convert_opset(model, args.opset)
        log.append(f"opset: {before_opset} -> {args.opset} (onnx.version_converter)")
    if args.simplify:
        before = len(model.nodes)
        model = simplify(model)
        log.append(f"simplified: {before} -> {len(model.nodes)} nodes")
    return model, renames, log


def run_edit(args: argparse.Namespace) -> int:
    """Edits, checks by parity and writes: 0 when written, 1 when the check fails (nothing is
    written then), bad input raises a tether error (the command line's exit 2)."""
    _check_paths(args.model, args.output)
    original = load(args.model)
    edited, renames, log = _edits(args, original)
    for line in log:
        print(line)
    if args.no_check:
        print("parity check skipped (--no-check)")
    else:
        dims: dict[str, int] = {}
        for item in args.dim:
            name, _, size = item.partition("=")
            if not name or not size.isdigit():
                raise _core.ArgumentError(f"--dim {item!r}: expected NAME=SIZE")
            dims[name] = int(size)
        try:
            report = check(original, edited, renames=renames, runner=args.runner, device=args.device,
                           threads=args.threads, seed=args.seed, dims=dims)
        except _core.UnsupportedError as e:
            reason = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
            raise _core.UnsupportedError(f"the parity check cannot run on {args.runner}: {reason} (check with "
                                         "--runner onnxruntime, or skip it with --no-check)") from None
        print(report.table())
        if not report.ok:
            print(f"the edited model does not compute what '{args.model}' does: not written (--no-check writes it "
                  "without the check)")
            return 1
    files = edited.save(args.output)
    print("written: " + ", ".join(str(f) for f in files))
    return 0
