"""tether.distributed on a local 2-CPU Ray cluster: calibration and parity sweeps over a
ray.data.Dataset equal the single-process calls; bad columns, NaN rows and dead workers."""

from __future__ import annotations

import numpy as np
import pytest
import ray
import ray.data
import tether as tt
from _builder_models import residual_cnn


def _cnn() -> tt.Model:
    return residual_cnn(10)


N = 300


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((N, 3, 10, 10)) * rng.uniform(0.2, 3.0, (N, 1, 1, 1))).astype(np.float32)
    y = np.argmax(tt.compile(_cnn(), threads=1)(x), axis=1)  # what the float model says
    return x, y


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("dist") / "cnn.onnx"
    _cnn().save(str(path))
    return str(path)


def _dataset(x: np.ndarray, y: np.ndarray | None = None) -> ray.data.Dataset:
    rows = [{"x": x[i]} if y is None else {"x": x[i], "label": int(y[i])} for i in range(len(x))]
    return ray.data.from_items(rows, override_num_blocks=3)


def _same_quantization(a: tt.quantize.QuantizeResult, b: tt.quantize.QuantizeResult) -> None:
    assert a.ranges == b.ranges
    assert sorted(a.scales) == sorted(b.scales)
    for k, q in a.scales.items():
        assert np.array_equal(q.scale, b.scales[k].scale) and np.array_equal(q.zero_point, b.scales[k].zero_point), k
    assert a.model.to_bytes() == b.model.to_bytes()


def test_calibrate_on_ray_gives_the_single_process_scales_model_and_report(cluster, data, model_path) -> None:
    x, y = data
    local = tt.quantize.static(model_path, x, method="entropy", labels=y, batch_size=32)
    dist = tt.distributed.calibrate(model_path, _dataset(x, y), method="entropy", labels_column="label",
                                    batch_size=64, concurrency=2)
    assert dist.summary.samples == local.summary.samples == N
    _same_quantization(local, dist)
    assert local.report is not None and dist.report is not None
    for a, b in zip(local.report.outputs, dist.report.outputs, strict=True):
        assert a.metrics.to_dict() == b.metrics.to_dict()
    assert [s.to_dict() for s in local.report.slices or []] == [s.to_dict() for s in dist.report.slices or []]


def test_compare_on_ray_gives_the_single_process_report_per_label(cluster, data, model_path, tmp_path) -> None:
    x, y = data
    q = tt.quantize.static(model_path, x[:64], method="minmax", eval_samples=0)
    qpath = str(tmp_path / "cnn.int8.onnx")
    q.save(qpath)
    local = tt.compare(tt.parity.TetherRunner(model_path), tt.parity.TetherRunner(qpath, "int8"),
                       [x[i:i + 50] for i in range(0, N, 50)], labels=y, tolerance="int8")
    dist = tt.distributed.compare(model_path, qpath, _dataset(x, y), labels_column="label", tolerance="int8",
                                  batch_size=40, concurrency=2)
    for a, b in zip(local.outputs, dist.outputs, strict=True):
        assert a.metrics.to_dict() == b.metrics.to_dict()
        assert b.metrics.shape == (N, 5)
    assert dist.models == local.models  # the files each side ran, with their SHA-256
    assert [s.to_dict() for s in local.slices or []] == [s.to_dict() for s in dist.slices or []]
    assert "top1" in dist.table() or dist.slices


def test_a_worker_that_dies_is_retried_and_its_batch_counted_once(cluster, data, model_path, tmp_path) -> None:
    x, _ = data
    local = tt.quantize.static(model_path, x, method="minmax", eval_samples=0)
    dist = tt.distributed.calibrate(model_path, _dataset(x), method="minmax", eval_samples=0, batch_size=50,
                                    concurrency=1, _fail_once=str(tmp_path / "died"))
    assert (tmp_path / "died").exists()  # a worker process did die
    assert dist.summary.samples == N and dist.summary.batches == 6
    _same_quantization(local, dist)


def test_columns_that_do_not_match_the_model_raise_before_any_worker_starts(cluster, data, model_path) -> None:
    x, _ = data
    wrong = ray.data.from_items([{"image": x[i]} for i in range(4)])
    with pytest.raises(tt.ArgumentError, match="the dataset has no column 'x'.*rename_columns"):
        tt.distributed.calibrate(model_path, wrong)
    with pytest.raises(tt.ArgumentError, match="no column 'label'"):
        tt.distributed.compare(model_path, model_path, _dataset(x[:4]), labels_column="label")
    doubles = ray.data.from_items([{"x": x[i].astype(np.float64)} for i in range(4)])
    with pytest.raises(tt.ArgumentError, match="input 'x'"):
        tt.distributed.calibrate(model_path, doubles)


def test_a_nan_row_raises_the_local_calibration_error_naming_its_dataset_row(cluster, data, model_path) -> None:
    x, _ = data
    bad = x.copy()
    bad[137, 1, 2, 3] = np.nan
    with pytest.raises(tt.CalibrationError) as local:
        tt.quantize.static(model_path, bad, eval_samples=0, batch_size=32)
    with pytest.raises(tt.CalibrationError) as dist:
        tt.distributed.calibrate(model_path, _dataset(bad), eval_samples=0, batch_size=64)
    assert "calibration sample 137 " in str(local.value)
    assert str(dist.value).startswith("calibration sample 137 (dataset row 137; row ")
    assert str(local.value).split("): ", 1)[1] == str(dist.value).split("): ", 1)[1]
    bad[201, 0, 0, 0] = np.inf
    skipped = tt.quantize.static(model_path, bad, method="minmax", eval_samples=0, batch_size=32, skip_nonfinite=True)
    dist_skipped = tt.distributed.calibrate(model_path, _dataset(bad), method="minmax", eval_samples=0, batch_size=64,
                                            skip_nonfinite=True)
    assert dist_skipped.summary.skipped == skipped.summary.skipped == [137, 201]  # rows of the whole dataset
    _same_quantization(skipped, dist_skipped)


@ray.remote(max_restarts=1)
class _Restartable:
    def __init__(self, blob: object) -> None:
        self.size = len(blob)  # type: ignore[arg-type]

    def ping(self) -> int:
        return self.size


def test_jobs_log_no_error_level_ray_line_on_success(cluster, data, model_path, capfd) -> None:
    """Ray logs "constructor arguments in the object store and max_restarts > 0" at error level,
    once per process, for the first restartable actor given an argument by reference, as Ray
    Data's actor pools are; tether's jobs create none. The actor made at the end proves the line
    would have been seen: nothing in this process had logged it before."""
    x, y = data
    tt.distributed.calibrate(model_path, _dataset(x[:64]), method="minmax", eval_samples=0, batch_size=32)
    tt.distributed.compare(model_path, model_path, _dataset(x[:64], y[:64]), labels_column="label", batch_size=32)
    assert "constructor arguments in the object store" not in capfd.readouterr().err
    actor = _Restartable.remote(ray.put(b"x" * 200_000))
    assert ray.get(actor.ping.remote()) == 200_000
    ray.kill(actor)
    assert "constructor arguments in the object store" in capfd.readouterr().err
