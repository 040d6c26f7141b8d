"""Notebooks sharing one GPU under `gpu-ml test --workers N`: measurements and `#| gpu` cells take the GPU alone
(gpu_ml.bench.hold_gpu / gpu_alone, the notebook hooks of gpu_ml.notebook, gpu_ml.suite.sharing_gpus)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import threading
import time
import types

import pytest

from gpu_ml import notebook, suite
from gpu_ml.results import project_root

ROOT = project_root()

bench = importlib.import_module("gpu_ml.bench")  # the module: `gpu_ml.bench` the attribute is the function

HOLD = """
import sys, time
from gpu_ml.bench import hold_gpu
hold_gpu(sys.argv[1])
open(sys.argv[2], "w").close()  # holding now
time.sleep(float(sys.argv[3]))
hold_gpu(None)
print(time.time())
"""


@pytest.fixture(autouse=True)
def _outer_lock_put_aside(request):
    """Under `gpu-ml test`, conftest.py holds the suite's lock shared for this file (it runs beside notebooks that
    share the GPU); these tests take lock files of their own in its place. Meanwhile the suite's lock is let go, or
    held alone for a test that uses the GPU (none of the suite's measurements could pause it)."""
    outer = dict(bench._lock)
    if outer["path"]:
        bench.hold_gpu("exclusive" if request.node.get_closest_marker("gpu") else None)
        outer = dict(bench._lock)
        bench._lock.update(path=None, fd=None, turn=None, held=None, busy=False)
    yield
    if outer["path"]:
        bench._lock.update(outer)
        bench.hold_gpu("shared")


@pytest.fixture
def lock_file(tmp_path, monkeypatch):
    """GPU_ML_GPU_LOCK set for this process and its children; this process's lock state reset afterwards."""
    path = tmp_path / "gpu.lock"
    monkeypatch.setenv(bench.SHARED_GPU_LOCK, str(path))
    yield path
    bench.hold_gpu(None)
    for fd in (bench._lock["fd"], bench._lock["turn"]):
        if fd is not None:
            os.close(fd)
    bench._lock.update(path=None, fd=None, turn=None, held=None, busy=False)


def _holder(mode: str, seconds: float, tmp_path) -> tuple[subprocess.Popen, float]:
    """A child process that takes the lock in `mode` for `seconds`; returns once it holds it."""
    ready = tmp_path / f"ready-{mode}"
    return _started(ready, HOLD, mode, str(ready), str(seconds)), time.time()


def _started(ready, code: str, *args: str) -> subprocess.Popen:
    """`python -c code *args`, once it has created the file `ready` (within 60 s, else the test fails)."""
    child = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not ready.exists():
        assert child.poll() is None and time.time() < deadline, f"the child never created {ready.name}"
        time.sleep(0.01)
    return child


def test_without_the_variable_nothing_is_locked(monkeypatch):
    monkeypatch.delenv(bench.SHARED_GPU_LOCK, raising=False)
    with bench.gpu_alone():
        bench.hold_gpu("shared")
    assert bench._lock == {"path": None, "fd": None, "turn": None, "held": None, "busy": False}
    with pytest.raises(ValueError, match="mode must be"):
        bench.hold_gpu("mine")


def test_a_measurement_waits_for_another_notebooks_running_cell(lock_file, tmp_path):
    child, _ = _holder("shared", 1.0, tmp_path)  # another notebook, in the middle of a cell
    with bench.gpu_alone():
        entered = time.time()
    released = float(child.communicate()[0])
    assert entered >= released - 0.05  # not before the other cell ended


def test_other_notebooks_wait_while_a_measurement_runs(lock_file, tmp_path):
    bench.hold_gpu("shared")  # this notebook runs a cell too: cells side by side
    child, _ = _holder("shared", 0.1, tmp_path)
    child.communicate()
    with bench.gpu_alone():
        assert bench._lock["held"] == "exclusive"
        with bench.gpu_alone():  # nested: nothing more to take
            pass
        ready = tmp_path / "ready-shared"
        ready.unlink()
        start = time.time()
        child = subprocess.Popen([sys.executable, "-c", HOLD, "shared", str(ready), "0"], stdout=subprocess.PIPE,
                                 text=True)
        time.sleep(1.0)
        assert not ready.exists(), "another notebook's cell started during a measurement"
    assert bench._lock["held"] == "shared"  # back to what the cell held
    child.communicate()
    assert ready.exists() and time.time() - start >= 1.0


def test_every_cell_holds_the_lock_shared(lock_file):
    for cell in ("#| gpu\nbench(f)", "x = 1"):  # a `#| gpu` cell too: only measurements have the GPU alone
        notebook._hold_for_cell(types.SimpleNamespace(raw_cell=cell))
        assert bench._lock["held"] == "shared"
        notebook._release_after_cell(None)
        assert bench._lock["held"] is None


PAUSED = """
import importlib, json, sys, time
bench = importlib.import_module("gpu_ml.bench")
assert bench.claim_gpu_lock()
bench.hold_gpu("shared")  # a cell that runs for 3 s
open(sys.argv[1], "w").close()
stamps, end = [], time.time() + 3.0
while time.time() < end:
    stamps.append(time.time())
    time.sleep(0.001)
bench.hold_gpu(None)
print(json.dumps([stamps, *bench.lock_seconds()]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pausing needs /proc (Linux)")
def test_a_measurement_pauses_the_cells_running_in_other_notebooks(lock_file, tmp_path):
    """A notebook that claimed the lock (as setup() does) lets go in the middle of its cell when a measurement
    elsewhere asks (PAUSE), waits without running until the measurement ends, and then carries on."""
    ready = tmp_path / "ready"
    child = _started(ready, PAUSED, str(ready))
    asked = time.time()
    with bench.gpu_alone():
        entered = time.time()
        time.sleep(0.5)
        left = time.time()
    stamps, waited, paused = json.loads(child.communicate()[0])
    assert entered - asked < 1.0  # not at the end of the other cell, 3 s in
    assert not [t for t in stamps if entered < t < left], "the paused cell ran during the measurement"
    assert [t for t in stamps if t > left], "the paused cell never carried on"
    assert paused >= 0.4 and waited < 0.4


CHILD_PAUSED = """
import importlib, json, sys
bench = importlib.import_module("gpu_ml.bench")
assert bench.claim_gpu_lock()
bench.hold_gpu("shared")  # a test, which runs a program for 3 s (a CUDA program, say)
program = ("import sys, time\\nopen(sys.argv[1], 'w').close()\\nend = time.time() + 3\\n"
           "while time.time() < end:\\n    print(time.time(), flush=True)\\n    time.sleep(0.001)")
done = bench.run_child([sys.executable, "-c", program, sys.argv[1]], timeout=60, alone=False)
bench.hold_gpu(None)
print(json.dumps([[float(t) for t in done.stdout.split()], *bench.lock_seconds()]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pausing needs /proc (Linux)")
def test_a_measurement_pauses_the_programs_a_paused_process_runs(lock_file, tmp_path):
    """run_child(alone=False): the program a test runs (a CUDA program, say) is stopped with the test's process
    while a measurement elsewhere runs, and carries on afterwards."""
    ready = tmp_path / "ready"
    child = _started(ready, CHILD_PAUSED, str(ready))
    time.sleep(0.2)
    with bench.gpu_alone():
        entered = time.time()
        time.sleep(0.5)
        left = time.time()
    stamps, waited, paused = json.loads(child.communicate()[0])
    assert child.returncode == 0
    assert not [t for t in stamps if entered < t < left], "the program ran during the measurement"
    assert [t for t in stamps if t > left], "the program never carried on"
    assert paused >= 0.4


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")
def test_run_child_kills_the_whole_process_group_after_its_timeout(lock_file, tmp_path):
    """A program that started one of its own (as compute-sanitizer starts the sanitized one) is killed with it."""
    assert bench.claim_gpu_lock()
    bench.hold_gpu("shared")
    pid_file = tmp_path / "grandchild"
    program = ("import subprocess, sys, time\np = subprocess.Popen([sys.executable, '-c', 'import time; "
               f"time.sleep(60)'])\nopen({str(pid_file)!r}, 'w').write(str(p.pid))\ntime.sleep(60)")
    with pytest.raises(subprocess.TimeoutExpired):
        bench.run_child([sys.executable, "-c", program], timeout=2, alone=False)
    grandchild = int(pid_file.read_text())
    deadline = time.time() + 10
    while _alive(grandchild) and time.time() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)
    assert not bench._children


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie (not yet reaped by init) is dead
    except FileNotFoundError:
        return False


def test_run_child_without_a_shared_gpu_just_runs(monkeypatch):
    monkeypatch.delenv(bench.SHARED_GPU_LOCK, raising=False)
    for alone in (True, False):
        done = bench.run_child([sys.executable, "-c", "print('hi')"], timeout=60, alone=alone)
        assert (done.returncode, done.stdout) == (0, "hi\n")


def test_claiming_the_lock_makes_tritons_timings_measurements(lock_file, monkeypatch):
    """Triton's do_bench and do_bench_cudagraph (its autotuner calls the first) run with the GPU alone, once wrapped."""
    testing = pytest.importorskip("triton.testing")
    held = []
    for name in ("do_bench", "do_bench_cudagraph"):
        monkeypatch.setattr(testing, name, lambda *args, **kwargs: held.append(bench._lock["held"]) or 1.0)
    assert bench.claim_gpu_lock()
    calls = []
    assert testing.do_bench(lambda: calls.append(bench._lock["held"])) == 1.0  # called once before, not alone
    assert testing.do_bench_cudagraph(print) == 1.0
    assert calls == [None] and held == ["exclusive", "exclusive"] and bench._lock["held"] is None
    wrapped = testing.do_bench
    bench._time_triton_alone()  # again: nothing more
    assert testing.do_bench is wrapped and not getattr(wrapped.__wrapped__, "alone", False)


def test_bench_calls_tritons_own_timing_once_not_its_wrapper(lock_file, monkeypatch):
    """bench() warms up and takes the GPU alone itself: with the lock claimed (Triton's timings wrapped), `fn` is
    still called once before the timing, not twice."""
    testing = pytest.importorskip("triton.testing")
    timed = []
    for name in ("do_bench", "do_bench_cudagraph"):
        monkeypatch.setattr(testing, name, lambda fn, **kwargs: timed.append(bench._lock["held"]) or 1.0)
    monkeypatch.setattr(bench, "require_gpu", lambda what: None)
    assert bench.claim_gpu_lock() and testing.do_bench.alone
    calls = []
    assert bench.bench(lambda: calls.append(1)) == bench.bench(lambda: calls.append(1), cudagraph=True) == 1.0
    assert calls == [1, 1] and timed == ["exclusive", "exclusive"]


def test_a_shared_hold_is_let_go_only_after_the_queued_gpu_work(lock_file, monkeypatch):
    """A cell returns while its kernels may still run: letting go of a shared hold waits for them (else they would
    run beside the next notebook's measurement); an exclusive hold and a process without CUDA wait for nothing, and
    a CUDA error raised by the wait does not keep the lock."""
    calls = []

    def synchronize():
        calls.append(bench._lock["held"])  # still held while waiting
        if len(calls) == 2:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    cuda = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True, synchronize=synchronize)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    bench.hold_gpu("shared")
    bench.hold_gpu(None)
    assert calls == ["shared"]
    bench.hold_gpu("shared")
    with bench.gpu_alone():  # shared -> exclusive: the wait raises, the measurement still gets the GPU
        assert bench._lock["held"] == "exclusive"
    assert calls == ["shared", "shared"] and bench._lock["held"] == "shared"
    bench.hold_gpu(None)
    bench.hold_gpu("exclusive")
    bench.hold_gpu(None)
    assert len(calls) == 3 and bench._lock["held"] is None
    cuda.is_initialized = lambda: False  # CUDA never used in this process: nothing to wait for
    bench.hold_gpu("shared")
    bench.hold_gpu(None)
    assert len(calls) == 3


@pytest.mark.gpu
def test_kernels_queued_in_a_shared_cell_have_run_when_it_lets_go(lock_file):
    import torch

    bench.hold_gpu("shared")
    torch.cuda._sleep(2_000_000_000)  # about a second of spinning on the GPU, queued
    assert not torch.cuda.current_stream().query()
    bench.hold_gpu(None)
    assert torch.cuda.current_stream().query()


def test_sharing_gpus_names_a_lock_file_only_while_active(monkeypatch):
    monkeypatch.delenv(bench.SHARED_GPU_LOCK, raising=False)
    with suite.sharing_gpus(False):
        assert bench.SHARED_GPU_LOCK not in os.environ
    with suite.sharing_gpus(True):
        path = os.environ[bench.SHARED_GPU_LOCK]
        assert os.path.isdir(os.path.dirname(path))
    assert bench.SHARED_GPU_LOCK not in os.environ and not os.path.exists(os.path.dirname(path))


def test_a_notebook_kernel_holds_the_lock_by_cell(tmp_path, monkeypatch):
    """In a real kernel (gpu-ml execute, as `gpu-ml test --save` runs it): after setup(), each cell runs holding the
    lock, shared for an ordinary cell and exclusive for a `#| gpu` one (which skips itself here, on a CPU)."""
    import nbformat
    from test_harness import _notebook

    from gpu_ml import cli

    monkeypatch.setenv("GPU_ML_FORCE_CPU", "1")
    monkeypatch.setenv(bench.SHARED_GPU_LOCK, str(tmp_path / "gpu.lock"))
    nb = _notebook(tmp_path / "shared.ipynb",
                   ("from gpu_ml import setup\nenv = setup(quiet=True)", []),
                   ("import importlib\nprint(importlib.import_module('gpu_ml.bench')._lock['held'])", []),
                   ("#| gpu\nraise RuntimeError('a GPU cell ran on a CPU')", ["gpu"]))
    cli.main(["execute", str(nb)])
    saved = nbformat.read(nb, as_version=4)
    assert saved.cells[1].outputs[0]["text"] == "shared\n"
    meta = saved.metadata["gpu_ml"]
    assert meta["side_by_side"] and meta["lock_wait_s"] >= 0 and meta["paused_s"] >= 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pausing needs /proc (Linux)")
def test_a_notebook_kernel_is_paused_in_the_middle_of_a_cell(tmp_path, monkeypatch):
    """Two real kernels (gpu-ml execute): a measurement in one starts within a second while the other runs a cell of
    Python work (until the measurement has ended, however slowly the kernels start), which stops for the measurement
    and then finishes."""
    from test_harness import _notebook

    monkeypatch.setenv("GPU_ML_FORCE_CPU", "1")
    monkeypatch.setenv(bench.SHARED_GPU_LOCK, str(tmp_path / "gpu.lock"))
    busy, measured = tmp_path / "busy", tmp_path / "measured"
    setup = ("from gpu_ml import setup\nenv = setup(quiet=True)", [])
    long_cell = (f"import os, time\nopen({str(busy)!r}, 'w').close()\nstamps, end = [], time.time() + 120\n"
                 f"while time.time() < end and not os.path.exists({str(measured)!r}):\n    stamps.append(time.time())\n"
                 "    time.sleep(0.001)\nfor _ in range(10):\n    stamps.append(time.time())", [])
    measuring = (f"import os, time\nfrom gpu_ml.bench import gpu_alone\nwhile not os.path.exists({str(busy)!r}):\n"
                 "    time.sleep(0.01)\ntime.sleep(0.5)\nasked = time.time()\nwith gpu_alone():\n"
                 "    entered = time.time()\n    time.sleep(1.0)\n    left = time.time()\n"
                 f"open({str(measured)!r}, 'w').close()", [])
    report = (f"import json\nopen({str(tmp_path)!r} + '/' + NAME, 'w').write(json.dumps(REPORT))", [])
    a = _notebook(tmp_path / "a.ipynb", setup, ("NAME = 'a'", []), long_cell,
                  (report[0].replace("REPORT", "stamps"), []))
    b = _notebook(tmp_path / "b.ipynb", setup, ("NAME = 'b'", []), measuring,
                  (report[0].replace("REPORT", "[asked, entered, left]"), []))
    runs = [subprocess.Popen([sys.executable, "-m", "gpu_ml.cli", "execute", str(nb)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for nb in (a, b)]
    for run in runs:
        output = run.communicate(timeout=300)[0]
        assert run.returncode == 0, output[-3000:]
    stamps = json.loads((tmp_path / "a").read_text())
    asked, entered, left = json.loads((tmp_path / "b").read_text())
    meta = {nb.stem: json.loads(nb.read_text())["metadata"]["gpu_ml"] for nb in (a, b)}
    assert (meta["a"]["measurements"], meta["b"]["measurements"]) == (0, 1)
    assert 0 <= meta["b"]["measurement_wait_s"] <= meta["b"]["lock_wait_s"] and meta["a"]["paused_s"] >= 0.5
    assert entered - asked < 1.0  # not when the long cell ended
    assert not [t for t in stamps if entered < t < left], "the long cell ran during the measurement"
    assert stamps[-1] > left  # and carried on after it


def test_a_kernel_claims_the_lock_so_that_the_processes_it_starts_neither_wait_nor_take_it(lock_file, tmp_path):
    """A `#| gpu` cell that profiles a workload in a child process holds the lock exclusively: the child must not
    wait for it (it would wait for ever), so the variable is taken out of the kernel's environment."""
    assert bench.claim_gpu_lock() and bench.SHARED_GPU_LOCK not in os.environ
    with bench.gpu_alone():
        assert bench._lock["held"] == "exclusive"
        child = subprocess.run([sys.executable, "-c", HOLD, "exclusive", str(tmp_path / "ready"), "0"],
                               capture_output=True, text=True, timeout=60)
        assert child.returncode == 0 and (tmp_path / "ready").exists()  # it ran, holding nothing
    assert bench._lock["path"] == str(lock_file) and bench.claim_gpu_lock()  # kept: claiming again changes nothing


def test_lock_seconds_count_the_waits(lock_file, tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "_waits", {"waited": 0.0, "paused": 0.0})
    monkeypatch.setattr(bench, "_alone", {"depth": 0, "seconds": 0.0, "count": 0, "waited": 0.0})
    child, _ = _holder("shared", 0.5, tmp_path)  # another notebook's cell: the measurement waits for it
    with bench.gpu_alone():
        with bench.gpu_alone():  # nested: counted once
            pass
    child.communicate()
    waited, paused = bench.lock_seconds()
    assert 0.2 <= waited <= 5 and paused == 0
    count, measurement_waited = bench.measurements()
    assert count == 1 and 0.2 <= measurement_waited <= waited
    with bench.gpu_alone():  # nothing to wait for now
        pass
    assert bench.measurements()[0] == 2


def test_a_waiting_measurement_keeps_new_cells_from_starting(lock_file, tmp_path):
    go = tmp_path / "go"  # a third notebook, started now, starts a cell when told
    wait = f"import os, time, gpu_ml.bench\nwhile not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
    late = subprocess.Popen([sys.executable, "-c", wait + HOLD, "shared", str(tmp_path / "ready-late"), "0"],
                            stdout=subprocess.PIPE, text=True)
    child, _ = _holder("shared", 1.0, tmp_path)  # another notebook's cell, running
    times = {}

    def measure():
        with bench.gpu_alone():
            times["in"] = time.time()
            time.sleep(0.5)
            times["out"] = time.time()

    measuring = threading.Thread(target=measure)
    measuring.start()
    time.sleep(0.3)  # the measurement waits for the running cell; now the third notebook starts its cell
    go.touch()
    measuring.join()
    started_late = float(late.communicate()[0])
    assert times["in"] >= float(child.communicate()[0]) - 0.05  # after the running cell
    assert started_late >= times["out"] - 0.05  # the late cell waited behind the measurement, not beside the first
