"""Exercises of cuda/08-multi-gpu 01 (collectives from scratch): a recursive-doubling all-reduce and a pipelined
ring broadcast, each run in p processes with gloo (gpu_ml.distributed.launch) and graded against what
torch.distributed would give, and the alpha-beta model's crossover between the tree and the ring (no processes)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from gpu_ml.distributed import launch
from gpu_ml.exercises.core import Cases, Exercise

_NB = "cuda/08-multi-gpu/01_collectives_from_scratch.ipynb"
_TIMEOUT = 30.0  # a deadlocked attempt fails its case after this long instead of hanging the notebook


def _in_ranks(worker: Callable, p: int, *args) -> torch.Tensor:
    """Every rank's answer, stacked (row r from rank r). A stub's NotImplementedError in a rank is raised as such,
    so that the grader says "not solved yet" rather than print the rank's traceback."""
    try:
        return torch.stack(launch(worker, p, *args, timeout=_TIMEOUT))
    except RuntimeError as exc:
        if "NotImplementedError" in str(exc):
            raise NotImplementedError from exc
        raise


def _rank_input(rank: int, n: int) -> torch.Tensor:
    """Rank `rank`'s integer vector (different on every rank; integers add exactly in any order)."""
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randint(-1000, 1001, (n,), generator=g, dtype=torch.int64)


# ----------------------------------------------------------------------------- recursive_doubling_all_reduce


def _doubling_worker(fn: Callable, n: int) -> torch.Tensor:
    import torch.distributed as dist

    return fn(_rank_input(dist.get_rank(), n))


def _doubling_cases() -> Cases:
    return {"p=2, n=5": (2, 5), "p=4, n=1": (4, 1), "p=4, n=1001": (4, 1001), "p=8, n=37": (8, 37)}


def _doubling_reference(p: int, n: int) -> torch.Tensor:
    return sum(_rank_input(r, n) for r in range(p)).repeat(p, 1)


# ----------------------------------------------------------------------------- ring_broadcast


def _broadcast_worker(fn: Callable, n: int, root: int, pieces: int) -> torch.Tensor:
    import torch.distributed as dist

    rank = dist.get_rank()
    x = _rank_input(root, n) if rank == root else torch.full((n,), -1, dtype=torch.int64)
    return fn(x, root, pieces)


def _broadcast_cases() -> Cases:
    return {"p=2, n=10, root 0, 2 pieces": (2, 10, 0, 2), "p=3, n=1000, root 2, 4 pieces": (3, 1000, 2, 4),
            "p=5, n=7, root 3, 3 pieces": (5, 7, 3, 3), "p=4, n=2, root 1, 5 pieces (more pieces than elements)":
            (4, 2, 1, 5), "p=6, n=999, root 0, 1 piece": (6, 999, 0, 1)}


def _broadcast_reference(p: int, n: int, root: int, pieces: int) -> torch.Tensor:
    return _rank_input(root, n).repeat(p, 1)


# ----------------------------------------------------------------------------- crossover_bytes


def _crossover_cases() -> Cases:
    cases = {}
    for p in (2, 3, 4, 8, 64, 1000):
        cases[f"p={p}, alpha 5 us, 100 GB/s"] = (p, 5e-6, 1e-11)
    cases["p=16, alpha 100 us, 2 GB/s"] = (16, 1e-4, 5e-10)
    return cases


def _crossover_reference(p: int, alpha: float, beta: float) -> torch.Tensor:
    """Where 2(p-1)(alpha + n beta / p) = 2 L (alpha + n beta), L = ceil(log2 p): n = ((p-1) - L) alpha /
    ((L - (p-1)/p) beta), 0 for p = 2 and 3 (there the ring is never slower)."""
    rounds = math.ceil(math.log2(p))
    return torch.tensor(((p - 1) - rounds) * alpha / ((rounds - (p - 1) / p) * beta), dtype=torch.float64)


EXERCISES = [
    Exercise("recursive_doubling_all_reduce", _NB, "recursive_doubling_all_reduce", _doubling_cases,
             reference=_doubling_reference,
             call=lambda fn, p, n: _in_ranks(_doubling_worker, p, fn, n), atol=0, rtol=0),
    Exercise("ring_broadcast", _NB, "ring_broadcast", _broadcast_cases, reference=_broadcast_reference,
             call=lambda fn, p, n, root, pieces: _in_ranks(_broadcast_worker, p, fn, n, root, pieces),
             atol=0, rtol=0),
    Exercise("crossover_bytes", _NB, "crossover_bytes", _crossover_cases, reference=_crossover_reference,
             call=lambda fn, p, alpha, beta: torch.tensor(float(fn(p, alpha, beta)), dtype=torch.float64),
             atol=1e-6, rtol=1e-9),
]


# ----------------------------------------------------------------------------- 02: zero_sgd_step

_NB2 = "cuda/08-multi-gpu/02_nccl_and_parallelism.ipynb"


def _zero_inputs(rank: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    params = torch.linspace(-1, 1, n, dtype=torch.float64)  # the same on every rank
    grads = torch.randn(n, generator=torch.Generator().manual_seed(7 + rank), dtype=torch.float64)
    return params, grads


def _zero_worker(fn: Callable, n: int, lr: float) -> torch.Tensor:
    import torch.distributed as dist

    return fn(*_zero_inputs(dist.get_rank(), n), lr)


def _zero_cases() -> Cases:
    return {"p=2, n=10": (2, 10, 0.1), "p=3, n=1000": (3, 1000, 0.5), "p=4, n=3 (an empty chunk)": (4, 3, 1.0),
            "p=5, n=4097": (5, 4097, 0.01)}


def _zero_reference(p: int, n: int, lr: float) -> torch.Tensor:
    params = _zero_inputs(0, n)[0]
    mean = sum(_zero_inputs(r, n)[1] for r in range(p)) / p
    return (params - lr * mean).repeat(p, 1)


# ----------------------------------------------------------------------------- 02: column_parallel_gather


def _column_inputs(tokens: int, d: int, n_out: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(11)
    return (torch.randn(tokens, d, generator=g, dtype=torch.float64),
            torch.randn(d, n_out, generator=g, dtype=torch.float64))


def _column_worker(fn: Callable, tokens: int, d: int, n_out: int) -> torch.Tensor:
    import torch.distributed as dist

    rank, p = dist.get_rank(), dist.get_world_size()
    x, w = _column_inputs(tokens, d, n_out)
    cols = torch.tensor_split(torch.arange(n_out), p)[rank]
    return fn(x, w[:, cols].contiguous(), n_out)


def _column_cases() -> Cases:
    return {"p=2, 3 tokens, 4 -> 6": (2, 3, 4, 6), "p=3, 5 tokens, 8 -> 10": (3, 5, 8, 10),
            "p=4, 1 token, 16 -> 7": (4, 1, 16, 7), "p=4, 7 tokens, 5 -> 3 (a rank without columns)": (4, 7, 5, 3)}


def _column_reference(p: int, tokens: int, d: int, n_out: int) -> torch.Tensor:
    x, w = _column_inputs(tokens, d, n_out)
    return (x @ w).repeat(p, 1, 1)


EXERCISES += [
    Exercise("zero_sgd_step", _NB2, "zero_sgd_step", _zero_cases, reference=_zero_reference,
             call=lambda fn, p, n, lr: _in_ranks(_zero_worker, p, fn, n, lr)),
    Exercise("column_parallel_gather", _NB2, "column_parallel_gather", _column_cases, reference=_column_reference,
             call=lambda fn, p, tokens, d, n_out: _in_ranks(_column_worker, p, fn, tokens, d, n_out)),
]
