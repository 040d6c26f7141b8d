"""Exercises of cuda/06-parallel-algorithms 01 (scan): a running maximum of rows with a block scan and a single-pass
scan whose look-back the learner writes (CUDA, graded like cudalings on a GPU), and the scatter offsets of a radix
sort pass as one exclusive scan in digit-major order (Python, graded on the CPU)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from gpu_ml.cudalings import Cudaling, checked_call, guarded_buffer, inside_guard, seeded_rng
from gpu_ml.exercises.core import Cases, CudaExercise, Exercise

SCAN = "cuda/06-parallel-algorithms/01_scan.ipynb"
LOOKBACK_TILE = 1024  # elements per tile of the lookback_scan stub (one per thread)


# ----------------------------------------------------------------------------- 6.1: row_cummax


def _cummax_cases(device: str) -> Cases:
    g = seeded_rng()
    masked = torch.randn(5, 777, generator=g)
    masked[:, ::3] = -torch.inf  # -inf must never win over a finite value before it
    masked[1] = -torch.inf  # a whole row of -inf: the maximum stays -inf
    cases = {"1 x 1": torch.tensor([[-2.0]]),
             "3 x 31": torch.randn(3, 31, generator=g),
             "4 x 1000, all negative": -1 - torch.rand(4, 1000, generator=g),
             "2 x 1024, decreasing (the maximum is the first)": torch.linspace(5, -5, 1024).repeat(2, 1),
             "5 x 777, -inf in places": masked,
             "64 x 513": torch.randn(64, 513, generator=g) * 100}
    return {name: (x.to(device),) for name, x in cases.items()}


def _cummax_run(fn: Callable, x: torch.Tensor):
    rows, cols = x.shape
    y = guarded_buffer(x.numel(), x.device.type)
    checked_call(fn, x, y, rows, cols)
    return inside_guard(y, x.numel(), "y").view(rows, cols)


# ----------------------------------------------------------------------------- 6.1: lookback_scan


def _lookback_cases(device: str) -> Cases:
    g = seeded_rng()

    def ints(n: int) -> torch.Tensor:
        return torch.randint(-100, 101, (n,), generator=g, dtype=torch.int32)

    cases = {"n=1": torch.tensor([7], dtype=torch.int32),
             "n=1000 (one tile, not full)": ints(1000),
             "n=1024 (one whole tile)": ints(1024),
             "n=1025 (two tiles)": ints(1025),
             "n=100003 (98 tiles)": ints(100_003),
             "n=2^22+3 (4097 tiles)": ints(2**22 + 3),
             "n=3000, every value 2^29 (the sums wrap around)": torch.full((3000,), 2**29, dtype=torch.int32)}
    return {name: (x.to(device),) for name, x in cases.items()}


def _lookback_run(fn: Callable, x: torch.Tensor):
    n, device = x.numel(), x.device.type
    tiles = -(-n // LOOKBACK_TILE)
    y = guarded_buffer(n, device, torch.int32)
    status = guarded_buffer(tiles + 1, device, torch.int64)
    checked_call(fn, x, y, status, n)
    inside_guard(status, tiles + 1, "status")
    return inside_guard(y, n, "y")


# ----------------------------------------------------------------------------- 6.1: radix_offsets (Python, on CPU)


def _offsets_cases() -> Cases:
    g = torch.Generator().manual_seed(0)
    one_digit = torch.zeros(5, 256, dtype=torch.int64)
    one_digit[:, 200] = 4096  # every key of every tile has digit 200
    return {"3 tiles x 4 digits": (torch.tensor([[1, 0, 2, 0], [0, 3, 1, 1], [2, 0, 0, 4]]),),
            "1 tile x 256 digits": (torch.randint(0, 20, (1, 256), generator=g),),
            "37 tiles x 16 digits": (torch.randint(0, 9, (37, 16), generator=g),),
            "5 tiles x 256 digits, all keys in digit 200": (one_digit,)}


def _offsets_reference(counts: torch.Tensor) -> torch.Tensor:
    """offsets[t, d] = (keys of every tile with a digit below d) + (keys of digit d in the tiles before t)."""
    flat = counts.T.reshape(-1)  # digit-major: digit 0 of every tile, then digit 1, ...
    return (flat.cumsum(0) - flat).view(counts.shape[1], counts.shape[0]).T


EXERCISES: list[Exercise] = [
    Exercise("radix_offsets", SCAN, "radix_offsets", _offsets_cases, reference=_offsets_reference,
             call=lambda fn, counts: fn(counts), atol=0, rtol=0),
]
CUDA_EXERCISES: list[CudaExercise] = [
    CudaExercise(SCAN, Cudaling("row_cummax", ("float*", "float*", "int", "int"), _cummax_cases, _cummax_run,
                                lambda x: torch.cummax(x, dim=1).values, atol=0.0, rtol=0.0)),
    CudaExercise(SCAN, Cudaling("lookback_scan", ("int*", "int*", "long long*", "int"), _lookback_cases,
                                _lookback_run, lambda x: x.cumsum(0, dtype=torch.int32), atol=0.0, rtol=0.0)),
]
