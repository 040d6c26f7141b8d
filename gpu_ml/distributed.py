"""Start `p` processes with `torch.distributed` initialised, run one function in each, collect what each returns.

`launch(fn, p, *args)` is what the multi-GPU lessons call from a notebook: `fn(*args)` runs in ranks 0 .. p-1 of a
fresh process group ("gloo" on the CPU, "nccl" with `gpus=True`, rank r on GPU r), and the list of their return
values comes back, indexed by rank. A rank that raises, dies or does not finish within `timeout` seconds makes
`launch` stop every rank and raise RuntimeError naming that rank, with its traceback (or, on a timeout, the stack
where it was waiting): a broken collective never hangs the notebook.

On Linux the CPU ranks are forked, which takes a fraction of a second and runs any function, one defined in a
notebook cell too; NCCL ranks are spawned (fresh interpreters, as CUDA needs after the parent has used it: a few
seconds each), so their function must be importable, from a module of `gpu_ml` for example. NVLink multicast is
kept off in every rank (NCCL_NVLS_ENABLE=0 and the like), as the multi-GPU machines' notes ask.
"""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing as mp
import os
import pickle
import queue
import signal
import socket
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from gpu_ml.bench import gpu_alone

# Set in every rank: no NVLink multicast (NVLS) in NCCL, PyTorch's symmetric memory or NVSHMEM.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
_FORK_WARNING = r".*multi-threaded, use of fork\(\) may lead to deadlocks"  # Python 3.12+, in a Jupyter kernel
_AUTOGRAD_FORK = "Autograd-and-Fork"  # in the error of a backward pass in a rank forked after one in the parent
_AUTOGRAD_FORK_HINT = ("This process ran a backward pass before the launch, on a machine with a GPU: autograd's "
                       "threads do not survive fork, so forked ranks cannot run one. Run that backward inside a rank "
                       "(launch(fn, 1, ...)), or pass start_method='spawn' with a function importable from a module.")


def gpu_count() -> int:
    """CUDA devices torch sees (0 without CUDA, or when GPU_ML_FORCE_CPU=1)."""
    from gpu_ml.env import has_gpu

    if not has_gpu():
        return 0
    import torch

    return torch.cuda.device_count()


def need_gpus(p: int) -> bool:
    """True when this machine has at least `p` GPUs; otherwise print why a cell skips itself and return False."""
    have = gpu_count()
    if have >= p:
        return True
    print(f"skipped: this cell needs {p} CUDA GPUs (one process per GPU, NCCL) and this machine has {have}. "
          "The notebook goes on without it; every algorithm above ran on the CPU with gloo.")
    return False


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it), for rank 0's rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _to_cpu(value: Any) -> Any:
    """Tensors (also in lists, tuples and dicts) moved to the CPU, so the parent never touches a rank's GPU."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple takes its fields as arguments
        return type(value)(*(_to_cpu(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    return value


def _worker(fn: Callable, rank: int, p: int, backend: str, port: int, args: tuple, timeout: float,
            threads: int | None, results: Any, stacks: str) -> None:
    """One rank: join the process group, run fn(*args), put (rank, ok, pickled result or traceback, when) on
    `results`, `when` being time.monotonic() as the result was made or the exception caught (one clock for all the
    ranks of a machine)."""
    os.environ.update(NO_MULTICAST, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(p), LOCAL_RANK=str(rank))
    if hasattr(signal, "SIGUSR1"):  # on a timeout the parent asks each rank for its stack (faulthandler)
        faulthandler.register(signal.SIGUSR1, file=open(Path(stacks) / f"rank{rank}.txt", "w"), all_threads=False)
    import torch
    import torch.distributed as dist

    try:
        if threads is not None:
            torch.set_num_threads(threads)  # p ranks share the machine's cores
        device_id = None
        if backend == "nccl":
            torch.cuda.set_device(rank)
            device_id = torch.device("cuda", rank)
        # The group's own timeout comes later than launch's, so that launch reports a hang, with the stacks.
        dist.init_process_group(backend, rank=rank, world_size=p, timeout=timedelta(seconds=timeout + 60),
                                device_id=device_id)
        dist.barrier()  # every rank is in; NCCL's communicator is up before any point-to-point call
        payload = pickle.dumps(_to_cpu(fn(*args)))
        results.put((rank, True, payload, time.monotonic()))
    except BaseException:  # noqa: BLE001 - whatever it was, the parent gets it with the rank's traceback
        when = time.monotonic()  # before this rank leaves the group, which makes its peers fail after it
        results.put((rank, False, traceback.format_exc(), when))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _stop(procs: list, grace: float) -> None:
    """Give the ranks `grace` seconds to exit, terminate those still running, then kill what ignores that."""
    end = time.monotonic() + grace
    for proc in procs:
        proc.join(timeout=max(0.0, end - time.monotonic()))
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(timeout=3)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=3)


def _stacks(procs: list, ranks: list[int], folder: Path) -> str:
    """The Python stack of each rank in `ranks` (they are stuck), asked for with SIGUSR1."""
    if not hasattr(signal, "SIGUSR1"):
        return ""
    for r in ranks:
        if procs[r].is_alive():
            os.kill(procs[r].pid, signal.SIGUSR1)
    time.sleep(0.5)
    parts = []
    for r in ranks:
        path = folder / f"rank{r}.txt"
        text = path.read_text().strip() if path.exists() else ""
        parts.append(f"--- rank {r} was waiting in:\n{text or '(no stack: not in Python code)'}")
    return "\n".join(parts)


def launch(fn: Callable, p: int, *args: Any, gpus: bool = False, timeout: float = 120.0,
           threads: int | None = 1, start_method: str | None = None) -> list:
    """Run fn(*args) in `p` ranks of a new process group and return their results, result[r] from rank r.

    gpus=False: backend "gloo", tensors on the CPU, ranks forked (Linux) so `fn` may be defined anywhere.
    gpus=True: backend "nccl", rank r on GPU r (`torch.cuda.set_device(r)`), ranks spawned: `fn` must be importable.
    Raises ValueError for a bad `p`, RuntimeError before starting anything when `gpus` asks for more GPUs than there
    are, and RuntimeError naming the rank and its traceback when a rank fails, dies or is still running after
    `timeout` seconds (then with every unfinished rank's stack); all ranks are stopped first. `threads`: torch's
    intra-op threads per rank (None leaves torch's default). `start_method` ("fork" or "spawn") overrides the choice
    above. Return values are pickled; tensors come back on the CPU.
    """
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise ValueError(f"p must be a positive int (the number of ranks), got {p!r}")
    if not 0 < timeout < float("inf"):  # also NaN: each rank would die in timedelta(seconds=timeout)
        raise ValueError(f"timeout must be a positive, finite number of seconds, got {timeout!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    if gpus:
        have = gpu_count()
        if have < p:
            raise RuntimeError(f"gpus=True with p={p} needs {p} CUDA GPUs (one per rank, NCCL); this machine has "
                               f"{have}. Run with gpus=False (gloo on the CPU), or on a machine with {p} GPUs.")
    backend = "nccl" if gpus else "gloo"
    if start_method is None:
        fork = not gpus and "fork" in mp.get_all_start_methods() and sys.platform == "linux"
        start_method = "fork" if fork else "spawn"
    if start_method not in ("fork", "spawn"):
        raise ValueError(f"start_method must be 'fork' or 'spawn', got {start_method!r}")
    ctx = mp.get_context(start_method)
    results = ctx.Queue()
    port = free_port()
    # ranks on GPUs are other processes, which another notebook's measurement could not pause under `gpu-ml test`:
    # they run (and time their collectives) with the GPU to this notebook alone (gpu_ml.bench.gpu_alone)
    with gpu_alone() if gpus else contextlib.nullcontext():
        with tempfile.TemporaryDirectory(prefix="gpu_ml_ranks_") as stacks:
            procs = [ctx.Process(target=_worker, name=f"rank{r}", daemon=True,
                                 args=(fn, r, p, backend, port, args, timeout, threads, results, stacks))
                     for r in range(p)]
            grace = 0.0  # after a failure: stop the ranks at once
            try:
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message=_FORK_WARNING, category=DeprecationWarning)
                    for proc in procs:
                        proc.start()
                out = _collect(procs, results, p, timeout, Path(stacks))
                grace = 5.0  # all reported: let them leave the process group
                return out
            finally:
                _stop(procs, grace)


def _collect(procs: list, results: Any, p: int, timeout: float, stacks: Path) -> list:
    """Wait for every rank's report; raise RuntimeError at the first failure, death or the deadline."""
    done: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    while len(done) < p:
        try:
            rank, ok, payload, when = results.get(timeout=0.05)
        except queue.Empty:
            if any(proc.exitcode is not None for r, proc in enumerate(procs) if r not in done):
                _failed(procs, results, p, done, {})  # a rank died without reporting (after a last look)
            if time.monotonic() > deadline:
                late = [r for r in range(p) if r not in done]
                raise RuntimeError(f"rank{'s' if len(late) > 1 else ''} {', '.join(map(str, late))} of {p} did not "
                                   f"finish within {timeout:g} s (a collective waiting for a message that never "
                                   f"comes?); all ranks stopped.\n{_stacks(procs, late, stacks)}") from None
            continue
        if not ok:
            _failed(procs, results, p, done, {rank: (when, payload)})
        done[rank] = pickle.loads(payload)
    return [done[r] for r in range(p)]


def _failed(procs: list, results: Any, p: int, done: dict, errors: dict[int, tuple[float, str]]) -> None:
    """Raise RuntimeError for the first failure: a rank that died without reporting, or else the traceback caught
    first (`errors`: rank -> (when, traceback)). Reports that come within half a second are read too: a rank's
    failure usually makes its peers fail after it (a connection closed), and their reports may arrive first; they
    are listed, not mistaken for the cause."""
    end = time.monotonic() + (0.5 if errors else 1.0)
    while True:  # the last look comes after `end`, however long this process was stopped before it (a pause)
        try:
            rank, ok, payload, when = results.get(timeout=0.05)
        except queue.Empty:
            if time.monotonic() >= end:
                break
            continue
        if ok:
            done[rank] = pickle.loads(payload)
        else:
            errors.setdefault(rank, (when, payload))
    dead = [r for r, proc in enumerate(procs) if r not in done and r not in errors and proc.exitcode is not None]
    if not dead and not errors:
        return  # it had reported after all
    errors = dict(sorted(errors.items(), key=lambda item: item[1][0]))  # the first caught first
    echoes = [f"rank {r} failed too: {tb.strip().splitlines()[-1] if tb.strip() else ''}"
              for r, (_, tb) in errors.items()]
    if dead:
        r = dead[0]
        head = (f"rank {r} of {p} exited with code {procs[r].exitcode} without returning (killed, out of memory, "
                "os._exit?); all ranks stopped.")
    else:
        r, (_, tb) = next(iter(errors.items()))
        head, echoes = f"rank {r} of {p} failed; all ranks stopped. Its traceback:\n{tb}", echoes[1:]
        if _AUTOGRAD_FORK in tb:
            echoes.append(_AUTOGRAD_FORK_HINT)
    raise RuntimeError("\n".join([head, *echoes]))
