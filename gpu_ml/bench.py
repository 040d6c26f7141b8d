"""GPU timing on top of `triton.testing.do_bench`, throughput units and a size sweep with a plot."""

from __future__ import annotations

import atexit
import contextlib
import functools
import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TypeVar

from gpu_ml.env import has_gpu

K = TypeVar("K")
SHARED_GPU_LOCK = "GPU_ML_GPU_LOCK"  # a lock file, set by `gpu-ml test` when notebooks share one GPU
PAUSE = signal.SIGUSR2  # what a measurement sends the other notebooks on its GPU: let go of it for a while (_pause)
_lock = {"path": None, "fd": None, "turn": None, "held": None, "busy": False}  # this process's lock file (see
# claim_gpu_lock), its open file and turnstile (take_in_turn), what it holds (None, "shared", "exclusive"), and
# whether hold_gpu or _pause is changing that now
_alone = {"depth": 0, "seconds": 0.0, "count": 0, "waited": 0.0}  # how deep in gpu_alone blocks this process is,
# and of the outermost ones: their total time, how many, and how long they waited for the lock
_waits = {"waited": 0.0, "paused": 0.0}  # seconds this process waited for the lock, and was paused by others
_children: set[int] = set()  # the process groups of the programs run_child runs now beside other notebooks
CHILD_GRACE_S = 0.1  # after stopping them (_pause), how long their kernels already queued may take to finish


def claim_gpu_lock() -> bool:
    """Keep the lock file named in GPU_ML_GPU_LOCK to this process and take the variable out of its environment, so
    that the processes it starts (a profiled workload, a compiler) neither wait for a lock this process holds nor
    take it: they run inside this process's cell. Called in the main thread, it also lets another notebook's
    measurement pause this process (its id in the folder `<lock>.pids`, PAUSE handled by _pause), and makes Triton's
    own timings (`triton.testing.do_bench` and `do_bench_cudagraph`, which Triton's autotuner calls) take the GPU
    alone. True when there was a lock file to keep."""
    path = os.environ.pop(SHARED_GPU_LOCK, None)
    if path and not _lock["path"]:
        _lock["path"] = path
        if threading.current_thread() is threading.main_thread():  # signal handlers are set there only
            signal.signal(PAUSE, _pause)
            os.makedirs(f"{path}.pids", exist_ok=True)
            me = os.path.join(f"{path}.pids", _process_id(os.getpid()))
            open(me, "w").close()
            atexit.register(lambda: os.path.exists(me) and os.remove(me))
        _time_triton_alone()
    return bool(_lock["path"])


def sharing_gpu() -> bool:
    """Whether this process shares its GPU with other notebooks (`gpu-ml test`: claim_gpu_lock kept a lock file)."""
    return bool(_lock["path"])


def _process_id(pid: int) -> str:
    """"pid-start": the pid and, on Linux, when the process started (so that a pid reused by another process after
    a notebook died is not taken for it); "pid-" elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f"{pid}-{f.read().rsplit(')', 1)[1].split()[19]}"  # field 22, starttime
    except (OSError, IndexError):
        return f"{pid}-"


def _nudge_others(path: str) -> None:
    """Send PAUSE to the other notebooks on the GPU of lock file `path` that registered (claim_gpu_lock) and still
    run: each one lets go of its shared hold at once instead of at the end of its cell. Only where the start times
    tell a live notebook from a reused pid (Linux): elsewhere a measurement waits for the cells to end."""
    folder = f"{path}.pids"
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            pid = int(name.split("-")[0])
            if pid != os.getpid() and not name.endswith("-") and _process_id(pid) == name:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, PAUSE)


def _pause(signum: int, frame: object) -> None:
    """PAUSE from another notebook's measurement, which holds the turnstile: in the middle of a cell that holds the
    lock shared, wait for this process's queued kernels, let go, and wait to hold it shared again (behind the
    measurement), then carry on. Not while hold_gpu runs here (it is letting go or waiting anyway), nor while a CUDA
    graph is being captured (no wait for the GPU is allowed then) or torch.compile traces: the measurement sends
    PAUSE again meanwhile."""
    if _lock["busy"] or _lock["held"] != "shared":
        return
    torch = sys.modules.get("torch")
    if torch is not None and (torch.compiler.is_compiling() or torch.cuda.is_available()
                              and torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()):
        return
    _lock["busy"] = True
    stopped = list(_children)
    try:
        before = time.perf_counter()
        _signal_groups(stopped, signal.SIGSTOP)
        finish_queued_work()
        if stopped:  # their queued kernels cannot be waited for from here
            time.sleep(CHILD_GRACE_S)
        take_in_turn(_lock["fd"], _lock["turn"], None)
        take_in_turn(_lock["fd"], _lock["turn"], "shared")
        _waits["paused"] += time.perf_counter() - before
    finally:
        _signal_groups(stopped, signal.SIGCONT)
        _lock["busy"] = False


def _signal_groups(groups: list[int], signum: int) -> None:
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signum)


def run_child(command: Sequence[str], *, timeout: float, alone: bool) -> subprocess.CompletedProcess:
    """Run `command`, its output captured as text; subprocess.TimeoutExpired after `timeout` s (its whole process
    group killed). Where `gpu-ml test` runs notebooks side by side on one GPU, another notebook's measurement could
    not pause another process by itself: with `alone` (a program that may time itself) it runs with the GPU to this
    process (gpu_alone); otherwise beside the others, in a process group of its own that _pause stops (SIGSTOP) and
    resumes with this process (a test's program, which times nothing). A program that SIGCONT could upset (a wait
    that fails with EINTR, signal(7)) runs alone."""
    if alone or not sharing_gpu():
        with gpu_alone() if alone else contextlib.nullcontext():
            return subprocess.run(list(command), capture_output=True, text=True, timeout=timeout)
    with subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        _children.add(proc.pid)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _signal_groups([proc.pid], signal.SIGKILL)
            proc.communicate()
            raise
        finally:
            _children.discard(proc.pid)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _time_triton_alone() -> None:
    """Wrap `triton.testing.do_bench` and `do_bench_cudagraph` in gpu_alone (once): the timings of a notebook that
    calls them itself, and of Triton's autotuner, are measurements too. Each wrapper calls `fn` once before, outside
    the block, as bench() does."""
    try:
        import triton.testing
    except ImportError:
        return
    for name in ("do_bench", "do_bench_cudagraph"):
        original = getattr(triton.testing, name)
        if getattr(original, "alone", False):
            continue

        @functools.wraps(original)
        def timed(fn, *args, _original=original, **kwargs):
            fn()  # compiles a kernel not compiled yet (an autotuner's next config) outside the GPU-alone block
            with gpu_alone():
                return _original(fn, *args, **kwargs)

        timed.alone = True
        setattr(triton.testing, name, timed)


def take_in_turn(fd: int, turn: int, mode: str | None, nudge: Callable[[], None] | None = None) -> None:
    """flock the lock file `fd` in `mode` ("shared", "exclusive" or None: let go) behind the turnstile file `turn`:
    an exclusive holder takes the turnstile first and keeps it until it lets go, and a shared one passes through it,
    so that a measurement waiting for the cells running now keeps new ones from starting (flock alone would let
    shared holders in ahead of it for ever). While an exclusive one waits for the shared holders, it calls `nudge`
    every 10 ms (the measurement asks them to pause). Whatever `fd` held is let go first: never wait holding it."""
    import fcntl  # POSIX only, as `gpu-ml test` is; imported here so that gpu_ml loads everywhere

    fcntl.flock(fd, fcntl.LOCK_UN)
    fcntl.flock(turn, fcntl.LOCK_UN)  # held only by an exclusive holder; a no-op otherwise
    if mode is None:
        return
    fcntl.flock(turn, fcntl.LOCK_EX)
    if mode == "shared":
        fcntl.flock(fd, fcntl.LOCK_SH)
        fcntl.flock(turn, fcntl.LOCK_UN)
        return
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if nudge is not None:
                nudge()
            time.sleep(0.01)


def finish_queued_work() -> None:
    """Wait until the kernels this process has queued have run: a cell returns while its launches may still be
    running, and they would run beside the measurement of a notebook that takes the GPU next. A CUDA error found
    here is left for the notebook's next CUDA call to raise, in its own cell."""
    torch = sys.modules.get("torch")  # never imported here: a process without torch has queued nothing
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        with contextlib.suppress(RuntimeError):
            torch.cuda.synchronize()


def hold_gpu(mode: str | None) -> None:
    """Take the shared-GPU lock in `mode` ("shared": other notebooks may run cells too; "exclusive": none may;
    None: release it), waiting as long as needed (take_in_turn; an exclusive hold pauses the other notebooks'
    cells, _nudge_others); a shared hold is let go only once this process's queued GPU work has run
    (finish_queued_work). Nothing happens unless GPU_ML_GPU_LOCK names a lock file."""
    if mode not in (None, "shared", "exclusive"):
        raise ValueError(f"mode must be None, 'shared' or 'exclusive', got {mode!r}")
    path = _lock["path"] or os.environ.get(SHARED_GPU_LOCK)
    if not path or mode == _lock["held"]:
        return
    if _lock["fd"] is None:
        _lock["fd"] = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        _lock["turn"] = os.open(f"{path}.turn", os.O_RDWR | os.O_CREAT, 0o644)
    _lock["busy"] = True
    try:
        if _lock["held"] == "shared":
            finish_queued_work()  # before another notebook's measurement may start
        _lock["held"] = None
        before = time.perf_counter()
        take_in_turn(_lock["fd"], _lock["turn"], mode, functools.partial(_nudge_others, path))
        _waits["waited"] += time.perf_counter() - before
        _lock["held"] = mode
    finally:
        _lock["busy"] = False


@contextlib.contextmanager
def gpu_alone() -> Iterator[None]:
    """Have the GPU to this process alone while the block runs (a measurement): when `gpu-ml test` runs notebooks
    side by side on one GPU, pause the cells the others run (and the test files beside them) and keep them waiting
    until the block ends, then go back to what this process held. Nothing happens otherwise; nested blocks are
    free. The time inside the outermost blocks, waits for the lock left out, adds up in seconds_alone(); how many
    there were and their waits, in measurements()."""
    before, waited = _lock["held"], _waits["waited"]
    hold_gpu("exclusive")
    start = time.perf_counter()
    if not _alone["depth"]:
        _alone["count"] += 1
        _alone["waited"] += _waits["waited"] - waited  # a part of lock_seconds()'s
    _alone["depth"] += 1
    try:
        yield
    finally:
        _alone["depth"] -= 1
        if not _alone["depth"]:
            _alone["seconds"] += time.perf_counter() - start
        hold_gpu(before)


def lock_seconds() -> tuple[float, float]:
    """Seconds this process waited for the shared-GPU lock (a cell's start, a measurement's), and was paused by
    other notebooks' measurements (_pause): where a notebook's time went when `gpu-ml test` ran notebooks side by
    side on one GPU; (0, 0) otherwise."""
    return _waits["waited"], _waits["paused"]


def measurements() -> tuple[int, float]:
    """How many gpu_alone blocks (outermost) this process ran, and the seconds they waited for the shared-GPU lock:
    while the other notebooks on the GPU came to a pause (none without `gpu-ml test` sharing a GPU)."""
    return _alone["count"], _alone["waited"]


def seconds_alone() -> float:
    """Seconds this process spent in gpu_alone blocks (measurements, profiles, CUDA programs), nested ones once:
    what it holds the GPU alone for, pausing the others, when `gpu-ml test` runs notebooks side by side."""
    return _alone["seconds"]


def require_gpu(what: str) -> None:
    """Raise, naming `what`, unless a CUDA GPU is present (the message tells a notebook author what to do)."""
    if not has_gpu():
        raise RuntimeError(f"{what} needs a CUDA GPU; tag this notebook cell `gpu` so CPU runs skip it")


def bench(fn: Callable[[], object], *, cudagraph: bool = False, warmup: int = 25, rep: int | None = None) -> float:
    """Median time of `fn()` in milliseconds on the GPU.

    Uses `triton.testing.do_bench`, which warms up, flushes the L2 cache before every call and
    times with CUDA events for about `rep` ms (default 50, half of Triton's). `cudagraph=True` replays `fn` from a
    CUDA graph (`do_bench_cudagraph`), which removes the Python launch overhead from the figure:
    it captures `rep` ms of calls (default 10, half of Triton's) and replays them ten times. Half of Triton's
    defaults still times dozens of calls of the slowest kernel timed here (an 8192^3 matmul, about 1.6 ms on an
    H200). `fn` is called once first, outside the timing. Where `gpu-ml test` runs notebooks side by side on one GPU,
    it measures with the GPU to itself (`gpu_alone`).
    """
    require_gpu("bench()")
    fn()  # the first call may compile (Triton's JIT, a new shape): not while other notebooks wait (gpu_alone)
    with gpu_alone():
        return _timed(fn, cudagraph=cudagraph, warmup=warmup, rep=rep)


def _timed(fn: Callable[[], object], *, cudagraph: bool = False, warmup: int = 25, rep: int | None = None) -> float:
    """bench()'s timing of `fn`, already called once, inside the caller's gpu_alone block."""
    import triton.testing

    # Triton's own, not the wrappers _time_triton_alone puts in their place: the first call and gpu_alone are ours
    do_bench, do_bench_cudagraph = (getattr(f, "__wrapped__", f) for f in (triton.testing.do_bench,
                                                                          triton.testing.do_bench_cudagraph))
    if cudagraph:
        return float(do_bench_cudagraph(fn, rep=rep or 10, return_mode="median"))
    return float(do_bench(fn, warmup=warmup, rep=rep or 50, return_mode="median"))


def bench_each(fns: Mapping[K, Callable[[], object]], **options: object) -> dict[K, float]:
    """`bench` of every function of `fns` with the same `options` (cudagraph, warmup, rep): {key: ms}, in the
    order given. Each is called once first (compilation), then all are timed in one `gpu_alone` block: one hand-over
    of a GPU that `gpu-ml test` shares, not one per function."""
    require_gpu("bench_each()")
    if not fns:
        return {}  # nothing to time: no hand-over of the GPU
    for fn in fns.values():
        fn()
    with gpu_alone():
        return {key: _timed(fn, **options) for key, fn in fns.items()}


def bench_pair(baseline: Callable[[], object], ours: Callable[[], object], *, rounds: int = 3,
               cudagraph: bool = True) -> tuple[float, float]:
    """Median times in ms of `baseline` and `ours` over `rounds` alternating `bench` calls.

    Alternating makes a drift of the GPU's clock between measurements affect both sides alike, and
    the median of the rounds keeps one noisy measurement from deciding a ratio near 1. Both are called once first;
    then all rounds run in one `gpu_alone` block (one hand-over of a shared GPU, not one per `bench` call).
    """
    require_gpu("bench_pair()")
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    baseline()
    ours()
    base_ms, ours_ms = [], []
    with gpu_alone():
        for _ in range(rounds):
            base_ms.append(_timed(baseline, cudagraph=cudagraph))
            ours_ms.append(_timed(ours, cudagraph=cudagraph))
    return statistics.median(base_ms), statistics.median(ours_ms)


def tflops(flops: float, ms: float) -> float:
    """TFLOP/s for `flops` floating-point operations done in `ms` milliseconds."""
    if not ms > 0:
        raise ValueError(f"tflops(): a time must be positive, got {ms} ms")
    return flops / (ms * 1e-3) / 1e12


def gbps(nbytes: float, ms: float) -> float:
    """GB/s (10^9 bytes per second) for `nbytes` moved in `ms` milliseconds."""
    if not ms > 0:
        raise ValueError(f"gbps(): a time must be positive, got {ms} ms")
    return nbytes / (ms * 1e-3) / 1e9


def geomean(values: Sequence[float]) -> float:
    """Geometric mean, the right average for ratios."""
    if not values or not all(v > 0 for v in values):  # `not v > 0` also catches NaN
        raise ValueError(f"geomean needs positive values, got {list(values)}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def sweep(
    sizes: Sequence[int],
    providers: dict[str, Callable[[int], Callable[[], object]]],
    metric: Callable[[int, float], float],
    *,
    baseline: str,
    unit: str,
    xlabel: str = "size",
    title: str = "",
    cudagraph: bool = False,
    logx: bool = True,
    ax=None,
) -> dict[str, list[float]]:
    """Benchmark every provider at every size, plot `metric` against size and print ratios.

    `providers` maps a name to `make(size) -> fn`, where `fn()` runs the work once;
    `metric(size, ms)` turns a time into the plotted unit (use `tflops` or `gbps`); higher is
    better. Prints one table row per size and, for each provider, its geometric-mean ratio to
    `baseline`. Returns {provider: [metric per size]}.

    Every `fn` is made and called once first (compilation), then made again and timed: all the timings in one
    `gpu_alone` block, one hand-over of a GPU that `gpu-ml test` shares, not one per `bench` call. So `make` is
    called twice per size: cheap where it keeps the inputs of the size it made last, as the notebooks' do.
    """
    require_gpu("sweep()")
    if baseline not in providers:
        raise ValueError(f"baseline {baseline!r} is not one of the providers {list(providers)}")
    for size in sizes:
        for make in providers.values():
            make(size)()
    results: dict[str, list[float]] = {name: [] for name in providers}
    header = f"{xlabel:>12} " + " ".join(f"{name:>14}" for name in providers)
    print(f"{header}   ({unit})")
    with gpu_alone():
        for size in sizes:
            row = []
            for name, make in providers.items():
                value = metric(size, _timed(make(size), cudagraph=cudagraph))
                results[name].append(value)
                row.append(f"{value:14.1f}")
            print(f"{size:>12} " + " ".join(row))
    for name in providers:
        if name != baseline:
            ratio = geomean([v / b for v, b in zip(results[name], results[baseline], strict=True)])
            print(f"{name} / {baseline}: {ratio:.3f}x (geometric mean over {len(sizes)} sizes)")
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    for name, values in results.items():
        ax.plot(sizes, values, marker="o", label=name)
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(unit)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return results
