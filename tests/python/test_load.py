"""Load and concurrency: one session from many threads, many sessions at once, compiling while
running, an interrupted run, and memory that stays flat over many runs and compile cycles.

Each result is compared with serial runs of the same session (bit for bit) or with numpy.
Counts: `make test` runs a tenth of the full load; TETHER_LOAD_FULL=1 runs all of it
(8 threads x 1,000 runs, 20,000 runs, 2,000 load/compile/drop cycles).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
import tether as tt
from _vulkan import requires_vulkan
from onnx import TensorProto, helper, numpy_helper

pytestmark = pytest.mark.load

FULL = os.environ.get("TETHER_LOAD_FULL") == "1"


def count(full: int) -> int:
    """`full` under TETHER_LOAD_FULL=1, a tenth of it otherwise."""
    return full if FULL else max(1, full // 10)


def cnn(width: int = 8, seed: int = 0) -> bytes:
    """Conv-Relu-Conv-Relu-GlobalAveragePool-Flatten-Gemm-Softmax on [N, 3, 16, 16]."""
    rng = np.random.default_rng(seed)

    def init(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["g"], transB=1),
        helper.make_node("Softmax", ["g"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        [init("w1", width, 3, 3, 3), init("b1", width), init("w2", width, width, 3, 3), init("b2", width),
         init("wf", 10, width), init("bf", 10)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()


def inputs(k: int, seed: int = 1, batch: int = 2) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((batch, 3, 16, 16)).astype(np.float32) for _ in range(k)]


def hammer(sess: tt.Session, xs: list[np.ndarray], want: list[np.ndarray], runs: int, errors: list) -> None:
    """Runs `sess` `runs` times over xs in turn; appends the first mismatch or exception."""
    try:
        for i in range(runs):
            j = i % len(xs)
            got = sess.run({"x": xs[j]})["y"]
            if not np.array_equal(got, want[j]):
                errors.append(f"run {i}: output differs from the serial run's")
                return
    except Exception as e:  # noqa: BLE001 - reported by the test
        errors.append(repr(e))


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("threads", [1, 2])
def test_one_session_from_eight_threads_is_bit_identical_to_serial_runs(threads):
    sess = tt.compile(cnn(), threads=threads)
    xs = inputs(8)
    want = [sess.run({"x": x})["y"] for x in xs]
    errors: list[str] = []
    workers = [threading.Thread(target=hammer, args=(sess, xs[k:] + xs[:k], want[k:] + want[:k], count(1000), errors))
               for k in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    # A batch size not seen before, while the other shapes' plans are kept.
    x = inputs(1, seed=9, batch=5)[0]
    np.testing.assert_array_equal(sess.run({"x": x})["y"][:2], sess.run({"x": x[:2]})["y"])


def test_several_sessions_run_in_parallel_each_as_it_runs_alone():
    models = [cnn(width=w, seed=w) for w in (4, 8, 12, 16)]
    sessions = [tt.compile(m, threads=1) for m in models]
    xs = inputs(4)
    wants = [[s.run({"x": x})["y"] for x in xs] for s in sessions]
    errors: list[str] = []
    workers = [threading.Thread(target=hammer, args=(s, xs, w, count(500), errors)) for s, w in zip(sessions, wants,
                                                                                                       strict=True)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []


def test_compiling_and_dropping_sessions_while_another_thread_runs():
    sess = tt.compile(cnn(), threads=2)
    xs = inputs(4)
    want = [sess.run({"x": x})["y"] for x in xs]
    errors: list[str] = []
    runner = threading.Thread(target=hammer, args=(sess, xs, want, count(2000), errors))
    runner.start()
    blob = cnn(width=6, seed=3)
    reference = None
    while runner.is_alive():
        other = tt.compile(tt.load(blob), threads=1)
        y = other.run({"x": xs[0]})["y"]
        if reference is None:
            reference = y
        np.testing.assert_array_equal(y, reference)
        del other
    runner.join()
    assert errors == []
    assert reference is not None


def deep(layers: int, width: int = 32) -> bytes:
    """`layers` 3x3 convolutions with Relu, width channels, on [N, width, 32, 32]."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for k in range(layers):
        inits.append(numpy_helper.from_array((rng.standard_normal((width, width, 3, 3)) * 0.06).astype(np.float32), f"w{k}"))
        nodes += [helper.make_node("Conv", [prev, f"w{k}"], [f"c{k}"], pads=[1, 1, 1, 1], name=f"conv{k}"),
                  helper.make_node("Relu", [f"c{k}"], [f"r{k}"], name=f"relu{k}")]
        prev = f"r{k}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    graph = helper.make_graph(nodes, "deep", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()


@pytest.fixture
def sigint_raises():
    """Python's own SIGINT handler (KeyboardInterrupt) for the test's length. A job started in
    the background of a script (`make test &`, `nohup`) inherits SIGINT ignored, and Python
    then installs no handler of its own; the test installs it and puts back what was there."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can only be installed from the main thread")
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def interrupt_part_way(sess: tt.Session, feeds: dict[str, np.ndarray]) -> None:
    """Times a second run of a profiled session that has run once, then sends SIGINT a tenth of
    the way into a third: the run raises KeyboardInterrupt part way, as its profile shows (the
    first entries ran three times, the last ones twice)."""
    start = time.monotonic()
    sess.run(feeds)
    one_run = time.monotonic() - start
    assert one_run > 0.2, f"a run takes {one_run:.3f} s: too short to interrupt in the middle"
    timer = threading.Timer(one_run / 10, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            sess.run(feeds)
    finally:
        timer.cancel()
    runs = [p["runs"] for p in sess.profile()]
    assert runs[0] == 3 and runs[-1] == 2, runs


@pytest.mark.usefixtures("sigint_raises")
def test_ctrl_c_stops_a_long_run_between_kernels_and_the_session_stays_usable():
    sess = tt.compile(deep(64), threads=2, profile=True)
    x = np.random.default_rng(1).standard_normal((64, 32, 32, 32)).astype(np.float32)
    want = sess.run({"x": x})["y"]
    interrupt_part_way(sess, {"x": x})
    np.testing.assert_array_equal(sess.run({"x": x})["y"], want)
    # Runs on other threads see no signal and are not polled.
    errors: list[str] = []
    hammer(sess, [x], [want], 2, errors)
    assert errors == []


@pytest.mark.usefixtures("sigint_raises")
def test_ctrl_c_between_short_runs_leaves_the_session_usable():
    sess = tt.compile(cnn(), threads=2)
    x = inputs(1, batch=4)[0]
    want = sess.run({"x": x})["y"]
    timer = threading.Timer(0.1, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                np.testing.assert_array_equal(sess.run({"x": x})["y"], want)
    finally:
        timer.cancel()
    np.testing.assert_array_equal(sess.run({"x": x})["y"], want)


def test_many_runs_do_not_grow_memory():
    sess = tt.compile(cnn(), threads=2)
    xs = inputs(2) + inputs(2, seed=5, batch=3)
    want = [sess.run({"x": x})["y"] for x in xs]
    runs = count(20000)
    errors: list[str] = []
    hammer(sess, xs, want, runs // 10, errors)  # warm-up: every plan made, allocator settled
    before = rss()
    hammer(sess, xs, want, runs, errors)
    growth = rss() - before
    assert errors == []
    assert growth < 4 << 20, f"RSS grew by {growth} bytes over {runs} runs"


def test_load_compile_drop_cycles_do_not_grow_memory():
    blob = cnn(width=16)
    x = inputs(1)[0]
    want = tt.compile(tt.load(blob), threads=1).run({"x": x})["y"]
    cycles = count(2000)

    def cycle():
        sess = tt.compile(tt.load(blob), threads=1)
        np.testing.assert_array_equal(sess.run({"x": x})["y"], want)

    for _ in range(max(20, cycles // 10)):
        cycle()
    before = rss()
    for _ in range(cycles):
        cycle()
    growth = rss() - before
    assert growth < 8 << 20, f"RSS grew by {growth} bytes over {cycles} load/compile/drop cycles"


def test_plans_for_thousands_of_input_sizes_do_not_grow_memory():
    """A session planning for every length from 1 to N, twice: plans stay within the cache's
    bound and the second pass adds no memory (arenas of many sizes are mapped pages, given back
    when a plan is dropped, not heap blocks left fragmented)."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "x"], ["s"]),
                           helper.make_node("Mul", ["s", "r"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    sess = tt.compile(tt.load(helper.make_model(g).SerializeToString()), threads=1)
    lengths = range(1, count(5000) + 1)
    width = 1_280_000 // len(lengths)  # the largest input 5 MB either way
    for n in lengths:
        sess.run({"x": np.ones((n, width), np.float32)})
    before = rss()
    for n in lengths:
        x = np.full((n, width), 1.5, np.float32)
        y = sess.run({"x": x})["y"]
        if n % 97 == 0:
            np.testing.assert_array_equal(y, (np.maximum(x, 0) + x) * np.maximum(x, 0))
    growth = rss() - before
    assert sess.memory()["plans"] <= 16
    assert growth < 32 << 20, f"RSS grew by {growth} bytes over a second pass of {len(lengths)} input sizes"


def vulkan_and_cpu_chain(layers: int, width: int = 16) -> bytes:
    """Atan (a CPU node in a Vulkan session: Vulkan has no kernel for it) then a padded 3x3
    convolution with Relu (Vulkan), `layers` times: a run alternates between the backends, a
    stretch of Vulkan kernels per layer."""
    rng = np.random.default_rng(3)
    nodes, inits, prev = [], [], "x"
    for k in range(layers):
        w = (rng.standard_normal((width, width, 3, 3)) / np.sqrt(9 * width)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{k}"))
        nodes += [helper.make_node("Atan", [prev], [f"p{k}"]),
                  helper.make_node("Conv", [f"p{k}", f"w{k}"], [f"c{k}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{k}"], [f"r{k}"])]
        prev = f"r{k}"
    graph = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width, 32, 32])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()


@requires_vulkan
@pytest.mark.usefixtures("sigint_raises")
def test_ctrl_c_stops_a_vulkan_run_between_stretches_and_the_session_stays_usable():
    sess = tt.compile(vulkan_and_cpu_chain(48), device="vulkan", threads=1, profile=True)
    x = np.random.default_rng(1).standard_normal((8, 16, 32, 32)).astype(np.float32)
    want = sess.run({"x": x})
    name = sess.outputs[0].name
    interrupt_part_way(sess, {"x": x})
    np.testing.assert_array_equal(sess.run({"x": x})[name], want[name])
    cpu = tt.compile(vulkan_and_cpu_chain(48), threads=1).run({"x": x})[name]
    np.testing.assert_allclose(want[name], cpu, rtol=1e-4, atol=1e-4 * float(np.abs(cpu).max()))
