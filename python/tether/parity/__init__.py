"""tether.parity: compare any two runners, find the layer that diverged, show it.

Example:
    >>> import tether as tt
    >>> from tether.parity import OnnxRuntimeRunner, TetherRunner, compare
    >>> rep = compare(OnnxRuntimeRunner("m.onnx"), TetherRunner("m.onnx"), layerwise=True)  # doctest: +SKIP
    >>> print(rep.table())                                      # doctest: +SKIP
    >>> rep.to_html("parity.html")                              # doctest: +SKIP
"""

from tether.parity._compare import bisect, compare, layerwise_compare, report_from_state
from tether.parity._golden import (
    GoldenBundle,
    GoldenError,
    GoldenRunner,
    load_golden,
    model_sha256,
    read_onnx_test_dir,
    save_golden,
    write_onnx_test_dir,
)
from tether.parity._inputs import check_dims, check_feeds, generate_inputs, iter_feeds, load_npz
from tether.parity._litert import LiteRTRunner
from tether.parity._metrics import PROFILES, Metrics, Tolerance, compare_arrays
from tether.parity._reduce import ReduceResult, reduce
from tether.parity._report import BisectResult, LayerResult, OutputResult, ParityReport, SliceResult
from tether.parity._runners import CallableRunner, OnnxRuntimeRunner, TetherRunner, TorchRunner, as_runner
from tether.parity._state import ParityState
from tether.parity._types import InputSpec, Runner

__all__ = [
    "PROFILES",
    "BisectResult",
    "CallableRunner",
    "GoldenBundle",
    "GoldenError",
    "GoldenRunner",
    "InputSpec",
    "LayerResult",
    "LiteRTRunner",
    "Metrics",
    "OnnxRuntimeRunner",
    "OutputResult",
    "ParityReport",
    "ParityState",
    "ReduceResult",
    "Runner",
    "SliceResult",
    "TetherRunner",
    "Tolerance",
    "TorchRunner",
    "as_runner",
    "bisect",
    "check_dims",
    "check_feeds",
    "compare",
    "compare_arrays",
    "generate_inputs",
    "iter_feeds",
    "layerwise_compare",
    "load_golden",
    "load_npz",
    "model_sha256",
    "read_onnx_test_dir",
    "reduce",
    "report_from_state",
    "save_golden",
    "write_onnx_test_dir",
]
