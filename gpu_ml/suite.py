"""`gpu-ml test`: the whole suite (every notebook, every test file) spread over this machine's GPUs.

Each item runs in its own process: a notebook through pytest/nbval (or, with `save`, through
`gpu-ml execute`, which writes its outputs back), a test file through pytest. With one worker per GPU
(`CUDA_VISIBLE_DEVICES`), first the test files, several at once (they time nothing that a neighbour could disturb),
on the GPUs in turn, while every notebook's `%%cuda` cells are compiled into the build cache on the other cores;
then the notebooks, each as soon as its cells are built, whose benchmarks need a GPU to themselves. With more
workers than GPUs, notebooks share a GPU: their cells run side by side, and each measurement has the GPU to itself,
pausing the other notebooks' cells meanwhile (`sharing_gpus`, gpu_ml.bench.hold_gpu), and a notebook starts only
when its recorded peak of GPU memory fits beside those running there. With `tests_beside`, the test files run beside
the notebooks from the start instead of first, each holding the lock shared so that the measurements pause it too
(conftest.py; the processes a test starts are not paused, except CUDA programs: gpu_ml.bench.run_child), within the
same account of memory; on an H200 on 2026-12-04 that did not finish sooner than test files first. Test files that
never touch a GPU (`pytestmark = pytest.mark.cpu_only`) run beside the notebooks, without the lock, on the spare
cores.
Under GPU_ML_EMULATE, items the emulated record lacks are planned with their time and peak from this GPU's own
record (the peak at most the profile's memory).
Workers take the items longest first, from the times of the last run. `shard` runs one part
of the suite (i of n). Each item's time, result and CPU seconds are recorded in results/suite/<gpu>.json, which
the next run plans with.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from gpu_ml.bench import SHARED_GPU_LOCK
from gpu_ml.env import emulated
from gpu_ml.results import project_root, slug

TESTPATHS = ("00-prerequisites", "triton", "cuda", "transformer-math")  # notebooks; test files are under tests/
CPU_ONLY = "pytestmark = pytest.mark.cpu_only"  # the line that marks a test file as never touching a GPU
DEFAULT_SECONDS = 60.0  # the planning guess for an item without a recorded time
DEFAULT_PEAK_GIB = 16.0  # the guess for a notebook without a recorded peak of GPU memory, when notebooks share a GPU
DEFAULT_TEST_PEAK_GIB = 4.0  # the same for a test file beside them
RUN_FILE = "GPU_ML_RUN_FILE"  # where a test file run by gpu-ml test writes its peak of GPU memory and its seconds
# alone, waiting and paused (conftest.py), as JSON with the keys of the suite record
TEST_HOLDS_LOCK = "GPU_ML_TEST_HOLDS_LOCK"  # set for a test file's pytest given the lock: conftest.py holds it (not
# for a notebook's: there the notebook's kernel, a child of pytest, takes the lock)
MEMORY_SHARE = 0.85  # of a GPU's memory, what the peaks of the notebooks sharing it may add up to
Outcome = tuple[float, bool, str, float | None]  # seconds, passed, the end of its output, CPU seconds (wait_cpu)
_REPORTING = threading.Lock()


def collect(root: Path) -> list[str]:
    """Every notebook under TESTPATHS and every tests/test_*.py, as paths relative to `root`, sorted."""
    notebooks = [p for folder in TESTPATHS for p in (root / folder).rglob("*.ipynb")
                 if ".ipynb_checkpoints" not in p.parts]
    tests = sorted((root / "tests").glob("test_*.py"))
    return sorted(str(p.relative_to(root)) for p in [*notebooks, *tests])


def shard(items: list[str], index: int, count: int) -> list[str]:
    """Part `index` (1-based) of `count` of the sorted items: every count-th one, so parts differ little."""
    if not 1 <= index <= count:
        raise ValueError(f"shard {index}/{count}: need 1 <= i <= n")
    return sorted(items)[index - 1 :: count]


def order(items: list[str], seconds: dict[str, float]) -> list[str]:
    """The items longest first (times from `seconds`, else DEFAULT_SECONDS), in the order workers take them."""
    return sorted(items, key=lambda i: (-seconds.get(i, DEFAULT_SECONDS), i))


def command(item: str, save: bool) -> list[str]:
    """The command that runs one item: pytest, or `gpu-ml execute` for a notebook whose outputs are kept."""
    if save and item.endswith(".ipynb"):
        return [sys.executable, "-m", "gpu_ml.cli", "execute", item]
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", item]


def run_item(item: str, gpu: int | None, save: bool, timeout: float, root: Path, *, lock: bool | None = None,
             run_file: Path | None = None, threads: int | None = None) -> Outcome:
    """Run one item in a child process, on GPU `gpu` if given; a time-out counts as a failure. The shared-GPU lock
    (when notebooks share a GPU) is handed to it if `lock` (default: to a notebook, not to a test file); a test file
    writes its peak of GPU memory and lock seconds to `run_file` if given. `threads` sets OMP_NUM_THREADS (PyTorch's
    CPU threads) unless it is set already: items run side by side share the cores, as torchrun's ranks do."""
    env = dict(os.environ)
    if threads is not None:
        env.setdefault("OMP_NUM_THREADS", str(threads))
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        if SHARED_GPU_LOCK in env:  # one lock per GPU
            env[SHARED_GPU_LOCK] += f".{gpu}"
    if not (item.endswith(".ipynb") if lock is None else lock):
        env.pop(SHARED_GPU_LOCK, None)
    elif not item.endswith(".ipynb") and SHARED_GPU_LOCK in env:
        env[TEST_HOLDS_LOCK] = "1"
    if run_file is not None:
        env[RUN_FILE] = str(run_file)
    start = time.perf_counter()
    with tempfile.TemporaryFile() as log:  # a file, not a pipe: a process the child leaves behind cannot hold it
        child = subprocess.Popen(command(item, save), cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
        code, cpu = wait_cpu(child, timeout)
        log.seek(0)
        output = log.read().decode(errors="replace")
    if code is None:
        output = f"timed out after {timeout:.0f} s\n{output}"
    return time.perf_counter() - start, code == 0, output[-3000:], cpu


def wait_cpu(child: subprocess.Popen, timeout: float) -> tuple[int | None, float | None]:
    """Wait for `child`, killed after `timeout` seconds: its exit code (None when killed for time) and the CPU
    seconds (user + system) it and the processes it waited for used, from os.wait4 (None where there is none)."""
    if not hasattr(os, "wait4"):
        try:
            return child.wait(timeout), None
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            return None, None
    deadline, timed_out = time.monotonic() + timeout, False
    while not (done := os.wait4(child.pid, os.WNOHANG))[0]:
        if timed_out := time.monotonic() > deadline:
            child.kill()
            done = os.wait4(child.pid, 0)
            break
        time.sleep(0.05)
    _, status, usage = done
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    return None if timed_out else child.returncode, usage.ru_utime + usage.ru_stime


def children_cpu() -> float | None:
    """CPU seconds (user + system) of this process's children that ended and were waited for; None where the
    resource module is missing (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class GpuMemory:
    """The GiB of recorded peaks of the items running on each GPU, shared by the runs side by side there (run's
    `memory`), and the run whose next item waits for memory on each."""

    def __init__(self, gpus: int, capacity: float) -> None:
        self.capacity = capacity
        self.in_use = [0.0] * max(1, gpus)
        self.running = [0] * max(1, gpus)
        self.waiting: list[object | None] = [None] * max(1, gpus)
        self.state = threading.Condition()


def run(items: list[str], runner: Callable[[str, int | None], Outcome], gpus: int, workers: int,
        ended: Callable[[str, Outcome], None] | None = None, *, peaks: dict[str, float] | None = None,
        capacity: float = math.inf, built: dict[str, threading.Event] | None = None,
        memory: GpuMemory | None = None) -> dict[str, Outcome]:
    """Run `items` on `workers` threads (worker w on GPU w mod `gpus` when there are several GPUs), each taking the
    first item of the list still to run when it is free; every item's outcome, printed as it ends and handed to
    `ended` (one call at a time). An item in `built` waits until its event is set (its `%%cuda` cells are in the
    build cache) and the items behind it go first. With `peaks` (GiB of GPU memory per item, from its last saved run;
    DEFAULT_PEAK_GIB when unknown), the first item that may start waits until its peak fits in `capacity` GiB beside
    the peaks of the items running on its GPU, or nothing runs there, and no item behind it starts on that GPU
    meanwhile: notebooks that share a GPU never ask for more memory together than it has, and a large one is not
    kept waiting by smaller ones for ever. Runs side by side on the same GPUs share a `memory` (else the run has its
    own, of `capacity` GiB): while the next item of one waits for memory on a GPU, the others start nothing there."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    outcomes: dict[str, Outcome] = {}
    pending = list(items)
    memory = memory or GpuMemory(gpus, capacity)
    state, me = memory.state, object()

    def next_item(slot: int) -> tuple[str, float] | None:  # called holding `state`
        for item in pending:
            if built is not None and item in built and not built[item].is_set():
                continue
            known = (peaks or {}).get(item)
            need = 0.0 if peaks is None else DEFAULT_PEAK_GIB if known is None else known
            if memory.running[slot] and memory.in_use[slot] + need > memory.capacity:
                memory.waiting[slot] = memory.waiting[slot] or me
                return None
            return (item, need) if memory.waiting[slot] in (None, me) else None
        return None

    def work(w: int) -> None:
        gpu = w % gpus if gpus > 1 else None
        slot = gpu or 0
        while True:
            with state:
                while pending and (chosen := next_item(slot)) is None:
                    state.wait(0.2)  # woken when an item ends; a build that ends is seen within 0.2 s
                if not pending:
                    return
                item, need = chosen
                pending.remove(item)
                memory.waiting = [None if w is me else w for w in memory.waiting]
                memory.in_use[slot] += need
                memory.running[slot] += 1
            try:
                outcome = runner(item, gpu)
            finally:
                with state:
                    memory.in_use[slot] -= need
                    memory.running[slot] -= 1
                    state.notify_all()
            with _REPORTING:  # one item's lines at a time, also across runs side by side
                outcomes[item] = outcome
                cpu = "" if outcome[3] is None else f" (CPU {outcome[3]:7.1f} s)"
                print(f"{'ok  ' if outcome[1] else 'FAIL'} {outcome[0]:7.1f} s{cpu}  worker {w}  {item}", flush=True)
                if ended is not None:
                    ended(item, outcome)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(min(workers, len(items)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


@contextlib.contextmanager
def sharing_gpus(active: bool) -> Iterator[None]:
    """While active, children find a lock file in GPU_ML_GPU_LOCK: notebooks that share a GPU then run their cells
    side by side, and every measurement with the GPU to themselves (gpu_ml.bench)."""
    if not active:
        yield
        return
    with tempfile.TemporaryDirectory() as tmp:
        os.environ[SHARED_GPU_LOCK] = str(Path(tmp) / "gpu.lock")
        try:
            yield
        finally:
            del os.environ[SHARED_GPU_LOCK]


def record_path(root: Path, gpu_name: str) -> Path:
    """Where the suite's times and results on `gpu_name` are kept."""
    return root / "results" / "suite" / f"{slug(gpu_name)}.json"  # not results/*.json: the table


def build_cuda_cells(notebooks: list[str], root: Path, processes: int,
                     done: Callable[[str], None] | None = None) -> str:
    """Compile the `%%cuda` cells of `notebooks` into the build cache (gpu_ml.cuda.build_notebook), `processes`
    notebooks at a time in the order given, each in a fresh process as its run will be, at a lower CPU priority
    (nice 10) than the tests and notebooks beside it; `done(notebook)` once each is built (at once for one without
    `%%cuda` cells). A line that says what was built."""
    from concurrent.futures import ThreadPoolExecutor

    with_cuda = [nb for nb in notebooks if "%%cuda" in (root / nb).read_text()]
    for nb in notebooks:
        if nb not in with_cuda and done is not None:
            done(nb)
    code = "import os, sys; os.nice(10); from gpu_ml.cuda import build_notebook; print(build_notebook(sys.argv[1])[0])"

    def one(notebook: str) -> int:
        try:
            out = subprocess.run([sys.executable, "-c", code, notebook], cwd=root, capture_output=True, text=True)
        finally:
            if done is not None:
                done(notebook)
        return int(out.stdout.split()[-1]) if out.returncode == 0 and out.stdout.split() else 0

    start = time.perf_counter()
    with ThreadPoolExecutor(max(1, processes)) as pool:
        cells = sum(pool.map(one, with_cuda))
    return f"built {cells} %%cuda cells of {len(with_cuda)} notebooks in {time.perf_counter() - start:.0f} s"


def main(only: list[str] | None = None, *, shard_spec: str | None = None, workers: int | None = None,
         test_workers: int | None = None, save: bool = False, timeout: float = 1800.0, tests_beside: bool = False,
         root: Path | None = None,
         runner: Callable[[str, int | None], Outcome] | None = None,
         prebuild: Callable[[list[str], Callable[[str], None]], str] | None = None) -> int:
    """Collect (or take `only`, checked against what is collected), shard, order, run, report and record; 0 when
    every item passed. The test files run `test_workers` at a time (default: 8, at most one per core) while
    `prebuild` (default, when a GPU is present and there are test files or several notebooks: build_cuda_cells, on
    the other cores, or on every core without test files to run first) compiles the notebooks' CUDA cells, the
    longest notebook's first; then the notebooks run `workers` at a time (default: one per GPU), each as soon as its
    cells are built. With `tests_beside`, when notebooks share a GPU, the test files run beside them instead of
    first: each holds the lock shared for its whole run, so that the notebooks' measurements pause it (conftest.py),
    and the recorded peaks of GPU memory of both (a test file's from RUN_FILE) must fit together."""
    import torch

    root = project_root(root)
    gpu_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    profile = emulated()
    if save and profile is not None:
        raise ValueError("--save under GPU_ML_EMULATE would write an emulated run's outputs into the notebooks; "
                         "run it without --save")
    gpu_name = ("cpu" if not gpu_count else f"{profile[0]} (emulated)" if profile is not None  # its own record
                else torch.cuda.get_device_name(0))
    items = collect(root)
    if only:
        unknown = sorted(set(only) - set(items))
        if unknown:
            raise ValueError(f"not notebooks or test files of the suite: {', '.join(unknown)}")
        items = sorted(set(only))
    if shard_spec:
        index, slash, count = shard_spec.partition("/")
        if not (slash and index.strip().isdigit() and count.strip().isdigit()):
            raise ValueError(f"shard {shard_spec!r}: give it as I/N, e.g. 2/4 (part 2 of 4)")
        items = shard(items, int(index), int(count))
    for name, value in (("workers", workers), ("test_workers", test_workers)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    cores = os.cpu_count() or 1
    workers = workers or max(1, gpu_count)
    test_workers = test_workers or min(8, cores)
    tests = [i for i in items if not i.endswith(".ipynb")]
    notebooks = [i for i in items if i.endswith(".ipynb")]
    sharing = bool(gpu_count) and workers > gpu_count
    beside = [t for t in tests if notebooks and CPU_ONLY in (root / t).read_text()]  # they never touch a GPU
    tests = [t for t in tests if t not in beside]
    together = tests_beside and sharing and bool(notebooks)  # the GPU test files beside them, paused by measurements
    # One notebook builds its own cells. For several, one build of all of them beats each building its own in turn,
    # and no build then runs inside a cell that another notebook's measurement waits for (a cold sm_80 build took 4
    # notebooks 260-300 s that way); notebooks without CUDA cells, and those built, run meanwhile.
    if prebuild is None and gpu_count and (tests or len(notebooks) > 1):
        processes = max(1, cores - test_workers) if tests else cores

        def prebuild(notebooks: list[str], done: Callable[[str], None]) -> str:
            return build_cuda_cells(notebooks, root, processes, done)
    path = record_path(root, gpu_name)
    record = json.loads(path.read_text()) if path.exists() else {}  # other keys (a "note") are kept as they are
    previous = record.get("items", {})
    native = {}  # under emulation, this GPU's own record: the times and peaks an emulated run has not recorded
    if profile is not None and gpu_count:
        own = record_path(root, torch.cuda.get_device_name(0))
        native = json.loads(own.read_text())["items"] if own.exists() else {}
    seconds = {k: v["seconds"] for k, v in (native | previous).items()}
    print(f"{len(tests)} test files on {test_workers} worker(s), {'beside' if together else 'then'} "
          f"{len(notebooks)} notebooks on {workers} worker(s) beside {len(beside)} CPU-only test files ({gpu_name})"
          f"{'; notebooks share a GPU, measuring with it to themselves' if sharing else ''}"
          f"{'; notebook outputs saved' if save else ''}", flush=True)
    run_dir = tempfile.TemporaryDirectory() if together else None  # where each test file writes its peak and waits

    def run_file(item: str) -> Path | None:
        return Path(run_dir.name) / slug(item) if run_dir is not None and item in tests else None

    def threads(item: str) -> int:  # each item's share of the cores (PyTorch's threads would each take them all)
        return max(1, cores // (workers if item.endswith(".ipynb") else test_workers))

    runner = runner or (lambda item, gpu: run_item(item, gpu, save, timeout, root, run_file=run_file(item),
                                                   lock=item.endswith(".ipynb") or together and item in tests,
                                                   threads=threads(item)))
    start, cpu_start = time.perf_counter(), children_cpu()

    record_lock = threading.Lock()  # the CPU-only tests and the notebooks end items at the same time

    def ended(item: str, outcome: Outcome) -> None:  # recorded as it ends: a run cut short keeps what it finished
        seconds_taken, ok, output, cpu = outcome
        with record_lock:
            previous[item] = previous.get(item, {}) | {"seconds": round(seconds_taken, 1), "passed": ok}
            if cpu is not None:
                previous[item]["cpu_s"] = round(cpu, 1)
            if save and ok and item.endswith(".ipynb"):  # gpu-ml execute wrote these into the notebook
                meta = json.loads((root / item).read_text())["metadata"].get("gpu_ml", {})
                previous[item] |= {key: meta.get(key) for key in ("peak_gpu_memory_gib", "gpu_alone_s", "lock_wait_s",
                                                                   "paused_s", "measurements", "measurement_wait_s")
                                   if key in meta}
            if (written := run_file(item)) is not None and written.exists():  # the test file's, from conftest.py
                previous[item] |= json.loads(written.read_text())
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record | {"gpu": gpu_name, "date": datetime.date.today().isoformat(),
                                                 "workers": workers, "test_workers": test_workers,
                                                 "wall_s": round(time.perf_counter() - start, 1),
                                                 "items": dict(sorted(previous.items()))}, indent=1) + "\n")
        if not ok:
            print(f"\n--- {item} failed; the end of its output:\n{output}\n", flush=True)

    notebooks = order(notebooks, seconds)  # also the order of the build
    built = {nb: threading.Event() for nb in notebooks} if prebuild else {}

    def build() -> None:
        try:
            print(prebuild(notebooks, lambda nb: built[nb].set()), flush=True)
        except Exception as error:  # the notebooks build their own cells then
            print(f"building the CUDA cells failed: {error!r}", flush=True)
        finally:
            for event in built.values():
                event.set()

    builder = threading.Thread(target=build) if prebuild and notebooks else None
    if builder:
        builder.start()
    outcomes = run(order(tests, seconds), runner, gpu_count, test_workers, ended) if tests and not together else {}
    if notebooks:
        side: dict[str, Outcome] = {}
        peaks = None
        if sharing:  # no emulated run saves a peak: the GPU's own, at most the profile's
            known = native if profile is not None else previous
            recorded = {i: known.get(i, {}).get("peak_gpu_memory_gib") for i in notebooks + tests}
            peaks = {i: (DEFAULT_TEST_PEAK_GIB if i in tests else DEFAULT_PEAK_GIB) if peak is None else peak
                     for i, peak in recorded.items()}
            if profile is not None:
                peaks = {i: min(profile[2], peak) for i, peak in peaks.items()}
        memory = GpuMemory(gpu_count, MEMORY_SHARE * torch.cuda.mem_get_info(0)[1] / 2**30 if sharing else math.inf)
        pools = [threading.Thread(target=lambda: side.update(run(order(beside, seconds), runner, 0, test_workers,
                                                                 ended)))]
        if together:
            pools.append(threading.Thread(target=lambda: side.update(
                run(order(tests, seconds), runner, gpu_count, test_workers, ended, peaks=peaks, memory=memory))))
        with sharing_gpus(sharing):
            for pool in pools:
                pool.start()
            outcomes |= run(notebooks, runner, gpu_count, workers, ended, peaks=peaks, built=built, memory=memory)
            for pool in pools:
                pool.join()
        outcomes |= side
        if run_dir is not None:
            run_dir.cleanup()
    if builder:
        builder.join()
    wall = time.perf_counter() - start
    failed = [item for item, outcome in outcomes.items() if not outcome[1]]
    cpu_end = children_cpu()
    cpu = (f", {(cpu_end - cpu_start) / 60:.1f} min of CPU time: {(cpu_end - cpu_start) / wall if wall else 0:.1f} of "
           f"{cores} cores busy on average" if cpu_end is not None else "")  # the items', the builds', their children's
    print(f"\n{len(items) - len(failed)} of {len(items)} passed in {wall / 60:.1f} min of wall time "
          f"({sum(o[0] for o in outcomes.values()) / 60:.1f} min of item time{cpu})"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0
