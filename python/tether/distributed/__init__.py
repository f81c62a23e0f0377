"""tether.distributed: calibration and parity sweeps over a whole ``ray.data.Dataset``.

Ray Data schedules the work: ``map_batches`` runs tasks, each Ray worker process compiles
the model once, and every batch becomes a state (calibration statistics, or
parity sums and counts) that the driver merges in dataset order. The merged state is the one
a single process would have built, so the results are the single-process ones:
:func:`calibrate` returns what :func:`tether.quantize.static` returns, :func:`compare` what
:func:`tether.compare` returns in dataset mode.

Needs Ray Data (``pip install 'tether[ray]'``); the rest of tether never imports Ray.

Example:
    >>> import ray, tether as tt
    >>> ds = ray.data.from_numpy(x_calib).rename_columns({"data": "x"})    # doctest: +SKIP
    >>> res = tt.distributed.calibrate("cnn.onnx", ds, method="entropy", concurrency=4)   # doctest: +SKIP
    >>> rep = tt.distributed.compare("cnn.onnx", res.model, ds_val, labels_column="label")  # doctest: +SKIP
"""

try:
    import ray  # noqa: F401
    import ray.data  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised in a subprocess without Ray
    raise ImportError("tether.distributed needs Ray Data, which is not installed: pip install 'tether[ray]' "
                      f"(it installs ray[data]); the import failed with: {e}") from e

from tether.distributed._calibrate import calibrate
from tether.distributed._compare import compare

__all__ = ["calibrate", "compare"]
