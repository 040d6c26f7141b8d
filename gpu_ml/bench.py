"""GPU timing on top of `triton.testing.do_bench`, throughput units and a size sweep with a plot."""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence

from gpu_ml.env import has_gpu

SHARED_GPU_LOCK = "GPU_ML_GPU_LOCK"  # a lock file, set by `gpu-ml test` when notebooks share one GPU
_lock = {"path": None, "fd": None, "turn": None, "held": None}  # this process's lock file (see claim_gpu_lock), its
# open file and turnstile (take_in_turn), and what it holds (None, "shared", "exclusive")
_alone = {"depth": 0, "seconds": 0.0}  # how deep in gpu_alone blocks this process is, and their total time
_waits = {"waited": 0.0, "exclusive": 0.0, "since": 0.0}  # seconds waited for the lock and held exclusively, and
# when the exclusive hold began


def claim_gpu_lock() -> bool:
    """Keep the lock file named in GPU_ML_GPU_LOCK to this process and take the variable out of its environment, so
    that the processes it starts (a profiled workload, a compiler) neither wait for a lock this process holds nor
    take it: they run inside this process's cell. True when there was a lock file to keep."""
    path = os.environ.pop(SHARED_GPU_LOCK, None)
    if path:
        _lock["path"] = path
    return bool(_lock["path"])


def take_in_turn(fd: int, turn: int, mode: str | None) -> None:
    """flock the lock file `fd` in `mode` ("shared", "exclusive" or None: let go) behind the turnstile file `turn`:
    an exclusive holder takes the turnstile first and keeps it until it lets go, and a shared one passes through it,
    so that a measurement waiting for the cells running now keeps new ones from starting (flock alone would let
    shared holders in ahead of it for ever). Whatever `fd` held is let go first: never wait holding it."""
    import fcntl  # POSIX only, as `gpu-ml test` is; imported here so that gpu_ml loads everywhere

    fcntl.flock(fd, fcntl.LOCK_UN)
    fcntl.flock(turn, fcntl.LOCK_UN)  # held only by an exclusive holder; a no-op otherwise
    if mode is None:
        return
    fcntl.flock(turn, fcntl.LOCK_EX)
    fcntl.flock(fd, fcntl.LOCK_EX if mode == "exclusive" else fcntl.LOCK_SH)
    if mode == "shared":
        fcntl.flock(turn, fcntl.LOCK_UN)


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
    None: release it), waiting as long as needed (take_in_turn); a shared hold is let go only once this process's
    queued GPU work has run (finish_queued_work). Nothing happens unless GPU_ML_GPU_LOCK names a lock file."""
    if mode not in (None, "shared", "exclusive"):
        raise ValueError(f"mode must be None, 'shared' or 'exclusive', got {mode!r}")
    path = _lock["path"] or os.environ.get(SHARED_GPU_LOCK)
    if not path or mode == _lock["held"]:
        return
    if _lock["fd"] is None:
        _lock["fd"] = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        _lock["turn"] = os.open(f"{path}.turn", os.O_RDWR | os.O_CREAT, 0o644)
    if _lock["held"] == "shared":
        finish_queued_work()  # before another notebook's measurement may start
    now = time.perf_counter()
    if _lock["held"] == "exclusive":
        _waits["exclusive"] += now - _waits["since"]
    _lock["held"] = None
    take_in_turn(_lock["fd"], _lock["turn"], mode)
    _lock["held"] = mode
    _waits["since"] = time.perf_counter()
    _waits["waited"] += _waits["since"] - now


@contextlib.contextmanager
def gpu_alone() -> Iterator[None]:
    """Have the GPU to this process alone while the block runs (a measurement): when `gpu-ml test` runs notebooks
    side by side on one GPU, wait until no other notebook runs a cell and keep them waiting until the block ends,
    then go back to what this process held. Nothing happens otherwise; nested blocks are free. The time inside
    the outermost blocks, waits for the lock left out, adds up in seconds_alone()."""
    before = _lock["held"]
    hold_gpu("exclusive")
    start = time.perf_counter()
    _alone["depth"] += 1
    try:
        yield
    finally:
        _alone["depth"] -= 1
        if not _alone["depth"]:
            _alone["seconds"] += time.perf_counter() - start
        hold_gpu(before)


def lock_seconds() -> tuple[float, float]:
    """Seconds this process waited for the shared-GPU lock, and held it exclusively (`#| gpu` cells, measurements):
    where a notebook's time went when `gpu-ml test` ran notebooks side by side on one GPU; (0, 0) otherwise."""
    return _waits["waited"], _waits["exclusive"]


def seconds_alone() -> float:
    """Seconds this process spent in gpu_alone blocks (measurements, profiles, CUDA programs), nested ones once:
    what it would hold the GPU alone for beyond its `#| gpu` cells when `gpu-ml test` runs notebooks side by side."""
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
    defaults is still dozens of calls of the slowest kernel timed here (an 8192^3 matmul takes about 1.6 ms on an
    H200); the suite's time is mostly measurement (`gpu-ml test`). Where `gpu-ml test` runs
    notebooks side by side on one GPU, it measures with the GPU to itself (`gpu_alone`).
    """
    require_gpu("bench()")
    import triton.testing

    with gpu_alone():
        if cudagraph:
            return float(triton.testing.do_bench_cudagraph(fn, rep=rep or 10, return_mode="median"))
        return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep or 50, return_mode="median"))


def bench_pair(baseline: Callable[[], object], ours: Callable[[], object], *, rounds: int = 3,
               cudagraph: bool = True) -> tuple[float, float]:
    """Median times in ms of `baseline` and `ours` over `rounds` alternating `bench` calls.

    Alternating makes a drift of the GPU's clock between measurements affect both sides alike, and
    the median of the rounds keeps one noisy measurement from deciding a ratio near 1.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    base_ms, ours_ms = [], []
    for _ in range(rounds):
        base_ms.append(bench(baseline, cudagraph=cudagraph))
        ours_ms.append(bench(ours, cudagraph=cudagraph))
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
    """
    require_gpu("sweep()")
    if baseline not in providers:
        raise ValueError(f"baseline {baseline!r} is not one of the providers {list(providers)}")
    results: dict[str, list[float]] = {name: [] for name in providers}
    header = f"{xlabel:>12} " + " ".join(f"{name:>14}" for name in providers)
    print(f"{header}   ({unit})")
    for size in sizes:
        row = []
        for name, make in providers.items():
            value = metric(size, bench(make(size), cudagraph=cudagraph))
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
