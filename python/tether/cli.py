"""The ``tether`` command line: a thin layer over the Python API.

Example:
    $ tether inspect model.onnx
    $ tether inspect model.onnx --json
    $ tether run model.onnx --inputs x.npz --threads 2 --repeat 20
    $ tether compare model.onnx --against onnxruntime --layerwise --html report.html
    $ tether compare model.onnx --against cpu --device vulkan --layerwise
    $ tether compare edited.onnx --against original.onnx --runner onnxruntime --json -
    $ tether debug reduce model.int8.onnx --against model.onnx --profile int8 -o small.onnx
    $ tether debug int8 model.onnx model.int8.onnx --data val.npz --html int8_debug.html
    $ tether bench model.onnx --threads 4 --batch 8 --against onnxruntime,openvino --json bench.json
    $ tether edit model.onnx -o fixed.onnx --input x:1,3,224,224 --simplify
    $ tether quantize model.onnx --data calib.npz --method entropy -o model.int8.onnx --html int8.html
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import numpy as np

import tether
from tether._regular_file import open_regular
from tether.parity import (
    PROFILES,
    GoldenError,
    GoldenRunner,
    OnnxRuntimeRunner,
    Runner,
    TetherRunner,
    Tolerance,
    check_feeds,
    compare,
    generate_inputs,
    iter_feeds,
)
from tether.parity._inputs import int_ranges_option


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


def _dims(items: Sequence[str], inputs: object = None) -> dict[str, int]:
    dims = {}
    for item in items:
        name, _, value = item.partition("=")
        if not name or not value.lstrip("-").isdigit():
            raise tether.ArgumentError(f"--dim {item!r}: expected NAME=SIZE")
        dims[name] = int(value)
    if dims and inputs is not None:
        raise tether.ArgumentError("--dim sizes the generated inputs; it does not apply to inputs that are given "
                                   "(--inputs or a golden bundle's samples)")
    return dims


def _int_ranges(items: Sequence[str], specs: Sequence[Any], inputs: object) -> dict[str, tuple[int, int]]:
    if items and inputs is not None:
        raise tether.ArgumentError("--int-range bounds the generated inputs; it does not apply to inputs that are "
                                   "given (--inputs or a golden bundle's samples)")
    return int_ranges_option(items, specs)


def _run(args: argparse.Namespace) -> int:
    model = tether.load(args.model)
    sess = tether.compile(model, device=args.device, threads=args.threads)
    runner = TetherRunner(sess)
    dims = _dims(args.dim, args.inputs)
    ranges = _int_ranges(args.int_range, runner.input_specs(), args.inputs)
    if args.inputs:
        feeds = next(iter_feeds(args.inputs, runner.input_specs()))
        check_feeds(feeds, runner.input_specs(), args.inputs)
    else:
        feeds = generate_inputs(runner.input_specs(), seed=args.seed, dims=dims, ranges=ranges, model=model)[0]
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


_ENGINES = ("tether", "onnxruntime")


def _engine(engine: str, model: str, args: argparse.Namespace, name: str) -> TetherRunner | OnnxRuntimeRunner:
    if engine == "tether":
        return TetherRunner(model, name, device=args.device, threads=args.threads, optimize=not args.no_optimize)
    return OnnxRuntimeRunner(model, name, threads=args.threads)


def _reference(args: argparse.Namespace) -> tuple[Runner, bool]:
    """The runner ``--against`` names, and whether it is a golden bundle."""
    against = args.against
    if against == "cpu":  # tether's CPU engine on the same file: the reference for --device vulkan
        return TetherRunner(args.model, "tether cpu", device="cpu", threads=args.threads,
                            optimize=not args.no_optimize), False
    if against in _ENGINES:
        return _engine(against, args.model, args, against), False
    if os.path.isdir(against):
        return GoldenRunner(against), True
    if os.path.isfile(against):
        return _engine(args.reference_runner, against, args,
                       f"{args.reference_runner}: {os.path.basename(against)}"), False
    if os.sep in against or "." in against or (os.altsep and os.altsep in against):
        raise tether.ArgumentError(f"--against '{against}': no such file or directory")
    raise tether.ArgumentError(f"--against '{against}': not a runner, a file or a folder; use 'onnxruntime', "
                               "'tether', 'cpu', an ONNX file or a golden bundle folder")


def _output_map(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        ref, sep, cand = item.partition("=")
        if not sep or not ref or not cand:
            raise tether.ArgumentError(f"--output-map {item!r}: expected REFERENCE_NAME=CANDIDATE_NAME")
        out[ref] = cand
    return out


def _compare(args: argparse.Namespace) -> int:
    tol: Tolerance | None = None  # each output by its dtype
    if args.profile or args.atol is not None or args.rtol is not None or args.rule:
        base = Tolerance.profile(args.profile or "fp32")
        tol = Tolerance(args.atol if args.atol is not None else base.atol,
                        args.rtol if args.rtol is not None else base.rtol, args.rule or base.rule)
    if args.json == "-" and args.html == "-":
        raise tether.ArgumentError("--json - and --html - both ask for standard output; send one to a file")
    if not os.path.isfile(args.model):
        raise tether.ArgumentError(f"model '{args.model}': no such file" if not os.path.exists(args.model)
                                   else f"model '{args.model}' is not a file")
    reference, golden = _reference(args)
    two_files = os.path.isfile(args.against) and args.against not in _ENGINES
    name = f"{args.runner}: {os.path.basename(args.model)}" if two_files else args.runner
    if name == reference.name:
        name += " (candidate)"
    candidate = _engine(args.runner, args.model, args, name)
    dims = _dims(args.dim, args.inputs if args.inputs else (True if golden else None))
    ranges = _int_ranges(args.int_range, reference.input_specs() or candidate.input_specs(),
                         args.inputs if args.inputs else (True if golden else None))
    inputs: object = args.inputs
    report = compare(reference, candidate, inputs, tolerance=tol, layerwise=args.layerwise, seed=args.seed,
                     ranges=ranges, dims=dims, model=candidate.model, output_map=_output_map(args.output_map))
    to_stdout = "-" in (args.json, args.html)
    # A report on standard output stays parseable: the table goes to standard error then.
    text = sys.stderr if to_stdout else sys.stdout
    print(report.table(), file=text)
    for kind, dest, render in (("HTML", args.html, report.to_html), ("JSON", args.json, report.to_json)):
        if not dest:
            continue
        if dest == "-":
            sys.stdout.write(render().rstrip("\n") + "\n")
        else:
            render(dest)
            print(f"{kind} report written to {dest}", file=text)
    return 0 if report.ok else 1


def _ncnn_ranges(path: str, model: str) -> dict[str, tuple[float, float, str]]:
    """The input ranges of an ncnn table as tensor ranges: each layer (an ONNX node name of the
    prepared model) gives its first input ``±127 / scale``; a tensor read by several layers takes
    the widest."""
    _, inputs = tether.quantize.read_ncnn_table(path)
    first_input = {n.name: n.inputs[0] for n in tether.quantize.prepare(tether.load(model)).nodes if n.inputs}
    unknown = sorted(set(inputs) - set(first_input))
    if unknown:
        raise tether.ArgumentError(f"--ranges '{path}': {len(unknown)} layers of the ncnn table are not nodes of "
                                   f"'{model}': {unknown[:10]}")
    out: dict[str, tuple[float, float, str]] = {}
    for layer, scale in inputs.items():
        t = 127.0 / scale
        tensor = first_input[layer]
        if tensor not in out or t > out[tensor][1]:
            out[tensor] = (-t, t, "ncnn-table")
    return out


def _ranges_file(path: str, model: str) -> dict[str, Any]:
    """Ranges by tensor from a TensorRT cache, an ncnn table or a JSON object of ``[lo, hi]``."""
    with open_regular(path, what="--ranges") as f:
        head = f.read(4)
    if path.lower().endswith(".json"):
        try:
            with open(path, encoding="utf-8") as f:
                ranges = json.load(f)
        except (ValueError, UnicodeDecodeError) as e:
            raise tether.ArgumentError(f"--ranges '{path}' is not JSON: {e}") from None
        if not isinstance(ranges, dict):
            raise tether.ArgumentError(f"--ranges '{path}': expected a JSON object of tensor: [lo, hi]")
        return {k: tuple(v) if isinstance(v, list) else v for k, v in ranges.items()}
    if head == b"TRT-":
        return tether.quantize.read_tensorrt_cache(path)
    try:
        return _ncnn_ranges(path, model)
    except tether.ParseError as e:
        raise tether.ParseError(f"--ranges: not a TensorRT cache (no 'TRT-' header), not .json, and {e}") from None


def _quantize(args: argparse.Namespace) -> int:
    if args.html and args.eval_samples <= 0:
        raise tether.ArgumentError("--html needs evaluation samples (--eval-samples > 0)")
    ranges = _ranges_file(args.ranges, args.model) if args.ranges else None
    with open_regular(args.data, what="--data") as f:
        try:
            npz = np.load(f, allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:
            raise tether.ArgumentError(f"--data '{args.data}' is not an .npz file of arrays: {e}") from None
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise tether.ArgumentError(f"--data '{args.data}' is not an .npz file of arrays: it holds one array")
        with npz:
            data = {k: npz[k] for k in npz.files if k != args.labels_key}
            labels = npz[args.labels_key] if args.labels_key in npz.files else None
    if args.max_accuracy_drop is not None and labels is None:
        raise tether.ArgumentError(f"--max-accuracy-drop needs labels: store them in the .npz under "
                                   f"'{args.labels_key}' (or name the key with --labels-key)")
    res = tether.quantize.static(
        args.model, data, method=args.method, percentile=args.percentile, profile=args.profile,
        per_channel=not args.per_tensor, activation_type=args.activation_type, reduce_range=args.reduce_range or None,
        exclude_nodes=args.exclude, batch_size=args.batch_size, threads=args.threads,
        skip_nonfinite=args.skip_nonfinite, labels=labels, max_accuracy_drop=args.max_accuracy_drop,
        min_sqnr_db=args.min_sqnr, eval_samples=args.eval_samples, runner=args.runner, ranges=ranges,
        algorithms=args.algorithm)
    with warnings.catch_warnings():  # the line below says it in the command's words
        warnings.simplefilter("ignore", UserWarning)
        res.save(args.output)
    print(res.report.table() if res.report is not None else res.summary.table())
    if res.quantized:
        print(f"quantized model written to {args.output}")
    else:
        print(f"nothing quantized: the float model written to {args.output} (see the report above)")
    if args.html and res.report is not None:
        res.report.to_html(args.html)
        print(f"HTML report written to {args.html}")
    if args.trt_cache:
        res.write_tensorrt_cache(args.trt_cache)
        print(f"TensorRT calibration cache written to {args.trt_cache}")
    if args.ncnn_table:
        res.write_ncnn_table(args.ncnn_table)
        print(f"ncnn table written to {args.ncnn_table}")
    return 0 if res.summary.budget_met is not False else 1


def _named_arrays(items: Sequence[str]) -> dict[str, np.ndarray]:
    """``--input NAME=FILE.npy`` options as arrays by input name."""
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise tether.ArgumentError(f"--input {item!r}: expected NAME=FILE.npy")
        if name in out:
            raise tether.ArgumentError(f"--input {item!r}: input '{name}' is given twice")
        with open_regular(path, what=f"--input {name}") as f:
            try:
                out[name] = np.load(f, allow_pickle=False)
            except (OSError, ValueError, EOFError) as e:
                raise tether.ArgumentError(f"--input {name}: '{path}' is not a .npy array: {e}") from None
        if not isinstance(out[name], np.ndarray):
            raise tether.ArgumentError(f"--input {name}: '{path}' is an .npz archive; give one .npy array per input")
    return out


def _debug_reduce(args: argparse.Namespace) -> int:
    if not os.path.isfile(args.model):
        raise tether.ArgumentError(f"model '{args.model}': no such file" if not os.path.exists(args.model)
                                   else f"model '{args.model}' is not a file")
    if args.input and args.inputs:
        raise tether.ArgumentError("--input and --inputs both give the inputs; use one")
    tol: Tolerance | None = None  # by each value's dtype
    if args.profile or args.atol is not None or args.rtol is not None:
        base = Tolerance.profile(args.profile or "fp32")
        tol = Tolerance(args.atol if args.atol is not None else base.atol,
                        args.rtol if args.rtol is not None else base.rtol, base.rule)
    inputs: object = _named_arrays(args.input) if args.input else args.inputs
    result = tether.parity.reduce(args.model, inputs, against=args.against, device=args.device, runner=args.runner,
                                  tolerance=tol, output=args.output, golden=args.golden, threads=args.threads,
                                  seed=args.seed)
    print(result)
    return 0 if result.model_path else 1


def _debug_parser(sub: Any) -> None:
    debug = sub.add_parser("debug", help="tools for a model that fails: 'reduce' cuts it to the smallest failing part")
    tools = debug.add_subparsers(dest="tool", required=True)
    red = tools.add_parser("reduce", help="cut a model that fails a comparison down to the smallest subgraph that "
                           "still fails; write it with a golden bundle of its inputs and the reference's outputs; "
                           "exit 1 when the model does not fail")
    red.add_argument("model", help="an ONNX file: the candidate, run by --runner")
    red.add_argument("--against", default="onnxruntime", help="the reference: 'onnxruntime' (default) running the "
                     "same file, another ONNX file run by onnxruntime (the float model of an INT8 one), or a golden "
                     "bundle folder")
    red.add_argument("-o", "--output", help="the reduced model (default: MODEL.reduced.onnx beside the model)")
    red.add_argument("--golden", help="the reduced model's golden bundle folder (default: the output's name with "
                     ".golden)")
    red.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                     help="one input's array; repeatable (default: random inputs, or the golden bundle's)")
    red.add_argument("--inputs", help=".npz file with one array per input name")
    red.add_argument("--runner", choices=_ENGINES, default="tether", help="what runs the model (default tether)")
    red.add_argument("--profile", choices=sorted(PROFILES),
                     help="tolerance profile (default: by each value's dtype; 'int8' for an INT8 model)")
    red.add_argument("--atol", type=float, help="absolute tolerance (overrides the profile)")
    red.add_argument("--rtol", type=float, help="relative tolerance (overrides the profile)")
    red.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    red.add_argument("--device", default="cpu")
    red.add_argument("--threads", type=int, default=None)
    red.set_defaults(run=_debug_reduce)
    from tether.quantize._debug_cli import add_parser as add_int8_debug

    add_int8_debug(tools)


def _ops_config(args: argparse.Namespace) -> int:
    from tether._ops_config import run_ops_config

    return run_ops_config(args)


def _ops_config_parser(sub: Any) -> None:
    oc = sub.add_parser("ops-config", help="list the ops whose CPU kernels running these models needs, for a "
                        "reduced deployment build (-DTETHER_DEPLOY_OPS, docs/building.md)")
    oc.add_argument("models", nargs="+", metavar="MODEL", help="ONNX files the deployment will run")
    oc.add_argument("-o", "--output", help="where to write the list (default: standard output)")
    oc.add_argument("--no-optimize", action="store_true", help="the deployment compiles with optimize=False: list "
                    "the ops as written, without the graph passes")
    oc.set_defaults(run=_ops_config)


def _edit(args: argparse.Namespace) -> int:
    from tether.edit._cli import run_edit

    return run_edit(args)


def _edit_parser(sub: Any) -> None:
    ed = sub.add_parser("edit", help="fix input dims, extract a subgraph, rename inputs and outputs, convert the "
                        "opset or simplify; checked by parity against the original; exit 1 when the check fails")
    ed.add_argument("model", help="an ONNX file (only read)")
    ed.add_argument("-o", "--output", required=True, help="where to write the edited model")
    ed.add_argument("--input", action="append", default=[], metavar="NAME:D1,D2,...",
                    help="fix an input's shape (a size or a symbol per dim); repeatable")
    ed.add_argument("--extract-inputs", metavar="A,B", help="the subgraph's inputs: values of the graph")
    ed.add_argument("--extract-outputs", metavar="C,D", help="the subgraph's outputs: values of the graph")
    ed.add_argument("--rename", action="append", default=[], metavar="OLD=NEW",
                    help="rename a graph input or output; repeatable")
    ed.add_argument("--opset", type=int, help="convert to this version of the default ONNX operator set")
    ed.add_argument("--simplify", action="store_true", help="fold constants, drop dead nodes, infer shapes")
    ed.add_argument("--no-check", action="store_true", help="write without the parity check")
    ed.add_argument("--runner", choices=_ENGINES, default="tether", help="what runs both models for the check")
    ed.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                    help="size of a symbolic dim left in the inputs, for the check (default 1); repeatable")
    ed.add_argument("--seed", type=int, default=0, help="seed of the check's random inputs")
    ed.add_argument("--device", default="cpu")
    ed.add_argument("--threads", type=int, default=None)
    ed.set_defaults(run=_edit)


def _bench(args: argparse.Namespace) -> int:
    res = tether.bench(args.model, device=args.device, threads=args.threads, batch=args.batch, precision=args.precision,
                       inputs=args.inputs, dims=_dims(args.dim, args.inputs), seed=args.seed, warmup=args.warmup,
                       iterations=args.iterations, seconds=args.time, against=args.against, profile=args.profile)
    text = sys.stderr if args.json == "-" else sys.stdout  # JSON on standard output stays parseable
    print(res, file=text)
    if args.json == "-":
        sys.stdout.write(res.to_json() + "\n")
    elif args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(res.to_json() + "\n")
        print(f"JSON written to {args.json}", file=text)
    return 0


def _bench_parser(sub: Any) -> None:
    b = sub.add_parser("bench", help="latency percentiles, throughput, cold start, memory and top kernels of a model "
                       "in tether, beside onnxruntime and OpenVINO (when installed) in interleaved rounds")
    b.add_argument("model", help="an ONNX file")
    b.add_argument("--device", default="cpu", help="tether's device: cpu, vulkan or vulkan:N (peers run on the CPU)")
    b.add_argument("--threads", type=int, default=None, help="threads per run, for every engine (default: physical "
                   "cores)")
    b.add_argument("--batch", type=int, help="size of dim 0 of every input (a symbolic dim; a static one must "
                   "equal it)")
    b.add_argument("--precision", choices=["fp32", "fp16"], default="fp32", help="fp16: float16 tensors on Vulkan")
    b.add_argument("--inputs", help=".npz file with one array per input name (default: random inputs)")
    b.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                   help="size of another symbolic dim for random inputs (default 1); repeatable")
    b.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    b.add_argument("--warmup", type=int, default=5, help="untimed runs per engine after the first (default 5)")
    b.add_argument("--iterations", type=int, help="timed runs per engine")
    b.add_argument("--time", type=float, help="seconds of timed runs per engine (default 3, unless --iterations)")
    b.add_argument("--against", default="", metavar="PEERS", help="peers measured alike, comma-separated: "
                   "onnxruntime, openvino (each only when installed)")
    b.add_argument("--json", help="write the results as JSON here ('-': standard output, the table then goes to "
                   "standard error)")
    b.add_argument("--profile", action="store_true", help="also list each engine's 10 slowest kernels")
    b.set_defaults(run=_bench)


_INT_RANGE_HELP = ("random integers from [LO, HI) for every integer input, or for input NAME; repeatable (default "
                   "[0, 10), or the rows of the data an index input reads through Gather)")


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
                     help="size of a symbolic dim of the model for random inputs (default 1); repeatable")
    run.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    run.add_argument("--int-range", action="append", default=[], metavar="[NAME=]LO:HI", help=_INT_RANGE_HELP)
    run.add_argument("--device", default="cpu")
    run.add_argument("--threads", type=int, default=None, help="threads per run (default: physical cores)")
    run.add_argument("--repeat", type=int, default=10, help="timed runs after the first (0: none)")
    run.add_argument("--save", help="write the outputs to this .npz file")
    run.set_defaults(run=_run)
    cmp = sub.add_parser("compare", help="compare a model run by one engine with another engine, another ONNX file "
                         "or a golden bundle; exit 1 on a parity failure")
    cmp.add_argument("model", help="an ONNX file: the candidate, run by --runner")
    cmp.add_argument("--against", default="onnxruntime", help="the reference: 'onnxruntime' (default), 'tether' (on "
                     "--device) or 'cpu' (tether's CPU engine) running the same file, another ONNX file (run by "
                     "--reference-runner), or a golden bundle folder")
    cmp.add_argument("--runner", choices=_ENGINES, default="tether", help="what runs the model (default tether)")
    cmp.add_argument("--reference-runner", choices=_ENGINES, default="onnxruntime",
                     help="what runs the --against ONNX file (default onnxruntime)")
    cmp.add_argument("--inputs", help=".npz file with one array per input name (default: random inputs, or the "
                     "golden bundle's)")
    cmp.add_argument("--output-map", action="append", default=[], metavar="REF=CAND",
                     help="the candidate's name for a reference output, when they differ; repeatable")
    cmp.add_argument("--layerwise", action="store_true", help="compare every intermediate value and name the first "
                     "node that diverges")
    cmp.add_argument("--html", help="write the HTML report here ('-': standard output)")
    cmp.add_argument("--json", help="write the JSON report here ('-': standard output, the table then goes to "
                     "standard error)")
    cmp.add_argument("--profile", choices=sorted(PROFILES),
                     help="tolerance profile for every output (default: by each output's dtype)")
    cmp.add_argument("--atol", type=float, help="absolute tolerance (overrides the profile)")
    cmp.add_argument("--rtol", type=float, help="relative tolerance (overrides the profile)")
    cmp.add_argument("--rule", choices=["numpy", "either"], help="numpy: |c-r| <= atol + rtol*|r|; either: "
                     "|c-r| <= atol or |c-r|/|r| <= rtol")
    cmp.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                     help="size of a symbolic dim of the model for random inputs (default 1); repeatable")
    cmp.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    cmp.add_argument("--int-range", action="append", default=[], metavar="[NAME=]LO:HI", help=_INT_RANGE_HELP)
    cmp.add_argument("--device", default="cpu")
    cmp.add_argument("--threads", type=int, default=None)
    cmp.add_argument("--no-optimize", action="store_true", help="compile without tether's graph passes")
    cmp.set_defaults(run=_compare)
    _debug_parser(sub)
    _bench_parser(sub)
    _edit_parser(sub)
    _ops_config_parser(sub)
    q = sub.add_parser("quantize", help="calibrate INT8 from an .npz of samples and write a QDQ model; exit 1 when a "
                       "budget is not met")
    q.add_argument("model", help="a float ONNX file (only read)")
    q.add_argument("--data", required=True, help=".npz with one array per input name, samples along axis 0")
    q.add_argument("-o", "--output", required=True, help="where to write the QDQ model")
    q.add_argument("--method", choices=["minmax", "percentile", "entropy", "mse", "sqnr"],
                   help="range method (default: the profile's)")
    q.add_argument("--percentile", type=float, default=99.999)
    q.add_argument("--profile", default="onnxruntime", choices=["onnxruntime", "tensorrt", "ncnn"])
    q.add_argument("--per-tensor", action="store_true", help="one weight scale per tensor (default: per channel)")
    q.add_argument("--activation-type", choices=["int8", "uint8"])
    q.add_argument("--reduce-range", action="store_true", help="7-bit values (CPUs whose int8 products saturate)")
    q.add_argument("--exclude", action="append", default=[], metavar="NODE", help="keep this node in float; repeatable")
    q.add_argument("--batch-size", type=int, default=None, help="samples per calibration batch (default: the batch "
                   "size the model fixes, else 32)")
    q.add_argument("--skip-nonfinite", action="store_true", help="leave out samples with NaN or infinity")
    q.add_argument("--labels-key", default="labels", help="the .npz key holding one label per sample (default "
                   "'labels'); not fed to the model")
    q.add_argument("--max-accuracy-drop", type=float, help="keep sensitive layers in float until the top-1 accuracy "
                   "drop is at most this (needs labels)")
    q.add_argument("--min-sqnr", type=float, help="keep sensitive layers in float until every output's SQNR (dB) is "
                   "at least this")
    q.add_argument("--eval-samples", type=int, default=128, help="samples the report compares on (0: no report)")
    q.add_argument("--runner", choices=["tether", "onnxruntime"], default="tether",
                   help="what runs the quantized model for the report and the budget")
    q.add_argument("--threads", type=int, default=None)
    q.add_argument("--html", help="write the HTML report here")
    q.add_argument("--trt-cache", help="write TensorRT's calibration cache here")
    q.add_argument("--ncnn-table", help="write ncnn's int8 table here")
    q.add_argument("--ranges", help="use these activation ranges instead of calibrated ones: a TensorRT calibration "
                   "cache, an ncnn int8 table (layers named by ONNX node) or a .json object of tensor: [lo, hi]")
    q.add_argument("--algorithm", action="append", default=[], choices=list(tether.quantize.ALGORITHMS),
                   help="an accuracy-recovering rewrite before calibration; repeatable")
    q.set_defaults(run=_quantize)
    return parser


#: Numeric options by destination: what is allowed, and the test. Checked before any work, so
#: that a value the API would take literally (a negative budget, a NaN) is a usage error.
_NUMBERS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "seed": ("an integer >= 0", lambda v: v >= 0),
    "threads": ("an integer >= 0 (0: one per physical core)", lambda v: v >= 0),
    "repeat": ("an integer >= 0", lambda v: v >= 0),
    "atol": ("a finite number >= 0", lambda v: 0 <= v < math.inf),
    "rtol": ("a finite number >= 0", lambda v: 0 <= v < math.inf),
    "percentile": ("a number in (0, 100]", lambda v: 0 < v <= 100),
    "batch_size": ("an integer >= 1", lambda v: v >= 1),
    "max_accuracy_drop": ("a number from 0 to 1 (a share of the samples)", lambda v: 0 <= v <= 1),
    "min_sqnr": ("a finite number of dB", math.isfinite),
    "eval_samples": ("an integer >= 0", lambda v: v >= 0),
    "batch": ("an integer >= 1", lambda v: v >= 1),
    "warmup": ("an integer >= 0", lambda v: v >= 0),
    "iterations": ("an integer >= 1", lambda v: v >= 1),
    "time": ("a finite number of seconds > 0", lambda v: 0 < v < math.inf),
}

#: Options naming a file the command writes, by destination ("-": standard output).
_WRITTEN = {"save": "--save", "output": "-o", "html": "--html", "json": "--json", "trt_cache": "--trt-cache",
            "ncnn_table": "--ncnn-table"}


def _option(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _check_numbers(args: argparse.Namespace) -> None:
    for dest, (allowed, ok) in _NUMBERS.items():
        value = getattr(args, dest, None)
        if value is not None and not ok(value):
            raise tether.ArgumentError(f"{_option(dest)} {value}: expected {allowed}")


def _check_written(args: argparse.Namespace) -> None:
    """Refuses a file to write that is a folder, or whose folder is missing or read-only, before
    anything is loaded or computed: a late failure would leave half of the outputs written."""
    for dest, option in _WRITTEN.items():
        path = getattr(args, dest, None)
        if not isinstance(path, str) or not path or path == "-":  # inspect's --json is a flag
            continue
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path):
            raise tether.ArgumentError(f"{option} '{path}' is a folder; name a file to write")
        # The OS's words, as a failed write would have said them, but before the work.
        if not os.path.isdir(folder):
            raise tether.ArgumentError(f"{option} '{path}': folder '{os.path.dirname(path) or folder}': "
                                       f"{os.strerror(errno.ENOENT)}")
        # A read-only file system refuses even root, who passes every permission check.
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
        if read_only or not os.access(folder, os.W_OK | os.X_OK):
            raise tether.ArgumentError(f"{option} '{path}': folder '{os.path.dirname(path) or folder}': "
                                       f"{os.strerror(errno.EROFS if read_only else errno.EACCES)}")


class _ClosedReaderSafe:
    """A text stream whose reader may stop early (``tether inspect m.onnx | head -1``): once a
    write meets a closed pipe, the rest of the output goes to the null device, quietly, and the
    command finishes its work (files it was asked to write included) with its usual status."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def _drop(self) -> None:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, self._stream.fileno())
        finally:
            os.close(null)

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._drop()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._drop()
            self._stream.flush()  # what was buffered goes to the null device

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status (0 success, 1 parity failure, 2 bad model
    or usage).

    Example:
        >>> main(["inspect", "model.onnx"])    # doctest: +SKIP
        0
    """
    args = _parser().parse_args(argv)
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (_ClosedReaderSafe(s) for s in streams)  # type: ignore[assignment]
    try:
        _check_numbers(args)
        _check_written(args)
        return int(args.run(args))
    except (tether.Error, GoldenError) as e:
        print(f"tether: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a report or output file that cannot be written
        print(f"tether: error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 2
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = streams


if __name__ == "__main__":
    sys.exit(main())
