"""Exercises of cuda/06-parallel-algorithms 02 (compaction and histogram): a warp-aggregated histogram with votes
alone and a stable one-block compaction with ballots (CUDA, graded like cudalings on a GPU), and the expected number
of atomics a warp-aggregated histogram issues per warp (Python, graded on the CPU)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from gpu_ml.cudalings import Cudaling, checked_call, guarded_buffer, inside_guard, randn_on, seeded_rng
from gpu_ml.exercises.core import Cases, CudaExercise, Exercise

COMPACTION = "cuda/06-parallel-algorithms/02_compaction_and_histogram.ipynb"


# ----------------------------------------------------------------------------- 6.2: histogram_ballot


def _zipf(bins: int, s: float) -> torch.Tensor:
    """The probabilities of bins 0 .. bins - 1 under Zipf's law with exponent s: P(b) proportional to (b + 1)^-s."""
    p = torch.arange(1, bins + 1, dtype=torch.float64) ** -s
    return p / p.sum()


def _ballot_cases(device: str) -> Cases:
    g = seeded_rng()

    def ints(n: int, low: int, high: int) -> torch.Tensor:
        return torch.randint(low, high, (n,), generator=g, dtype=torch.int32)

    zipf = torch.searchsorted(_zipf(256, 1.0).cumsum(0), torch.rand(100_000, generator=g, dtype=torch.float64))
    cases = {"n=1, 4 bins": (torch.tensor([3], dtype=torch.int32), 4),
             "n=33 (a warp and one lane), 5 bins": (ints(33, 0, 5), 5),
             "n=100003, 256 bins": (ints(100_003, 0, 256), 256),
             "n=100000, all keys 7": (torch.full((100_000,), 7, dtype=torch.int32), 256),
             "n=100000, Zipf s = 1 over 256 bins": (zipf.clamp(max=255).to(torch.int32), 256),
             "n=5000, 1 bin": (torch.zeros(5000, dtype=torch.int32), 1),
             "n=20011, keys from -50 to 349, 300 bins (outside: skipped)": (ints(20_011, -50, 350), 300)}
    return {name: (keys.to(device), bins) for name, (keys, bins) in cases.items()}


def _ballot_run(fn: Callable, keys: torch.Tensor, bins: int):
    hist = guarded_buffer(bins, keys.device.type, torch.int32)
    checked_call(fn, keys, hist, keys.numel(), bins)
    return inside_guard(hist, bins, "hist")


def _ballot_reference(keys: torch.Tensor, bins: int) -> torch.Tensor:
    inside = keys[(keys >= 0) & (keys < bins)]
    return torch.bincount(inside.long(), minlength=bins).int()


# ----------------------------------------------------------------------------- 6.2: compact_block


def _block_cases(device: str) -> Cases:
    g = seeded_rng()
    special = torch.tensor([1.0, float("nan"), -0.0, 0.0, float("inf"), -float("inf"), 2.0, float("nan"), 0.5])
    cases = {"n=1, kept": (torch.tensor([0.5]), 0.0),
             "n=1000, t=0": (randn_on(g, 1000, device="cpu"), 0.0),
             "n=1024 (one step), t=0.5": (randn_on(g, 1024, device="cpu"), 0.5),
             "n=100003, t=-1": (randn_on(g, 100_003, device="cpu"), -1.0),
             "n=4099, all kept": (randn_on(g, 4099, device="cpu").abs() + 0.1, 0.0),
             "n=777, none kept": (-randn_on(g, 777, device="cpu").abs(), 0.0),
             "NaN, infinities and -0.0, t=0": (special, 0.0)}
    return {name: (x.to(device), t) for name, (x, t) in cases.items()}


def _block_run(fn: Callable, x: torch.Tensor, t: float):
    out, count = guarded_buffer(x.numel(), x.device.type), guarded_buffer(1, x.device.type, torch.int32)
    checked_call(fn, x, out, count, x.numel(), t)
    kept, expected = int(inside_guard(count, 1, "count")[0]), int((x > t).sum())
    if kept != expected:
        raise AssertionError(f"count is {kept}, but {expected} of the {x.numel()} elements are greater than {t}")
    return inside_guard(out, x.numel())[:kept]  # compared in order: the compaction must be stable


# ----------------------------------------------------------------------------- 6.2: expected_atomics_per_warp (CPU)


def _atomics_cases() -> Cases:
    one = torch.zeros(256, dtype=torch.float64)
    one[7] = 1.0
    return {"uniform over 256 bins, 32 lanes": (torch.full((256,), 1 / 256, dtype=torch.float64), 32),
            "Zipf s = 1 over 256 bins, 32 lanes": (_zipf(256, 1.0), 32),
            "Zipf s = 2 over 256 bins, 32 lanes": (_zipf(256, 2.0), 32),
            "all keys in bin 7, 32 lanes": (one, 32),
            "uniform over 256 bins, 1 lane": (torch.full((256,), 1 / 256, dtype=torch.float64), 1),
            "Zipf s = 1 over 4096 bins, 1024 lanes (a block)": (_zipf(4096, 1.0), 1024)}


def _atomics_reference(p: torch.Tensor, lanes: int) -> torch.Tensor:
    """E[distinct keys] = sum over bins of P(the bin occurs among the draws) = sum(1 - (1 - p)^lanes)."""
    return (1 - (1 - p) ** lanes).sum()


EXERCISES: list[Exercise] = [
    Exercise("expected_atomics_per_warp", COMPACTION, "expected_atomics_per_warp", _atomics_cases,
             reference=_atomics_reference,
             call=lambda fn, p, lanes: torch.as_tensor(fn(p, lanes), dtype=torch.float64),
             atol=1e-9, rtol=1e-9),
]
CUDA_EXERCISES: list[CudaExercise] = [
    CudaExercise(COMPACTION, Cudaling("histogram_ballot", ("int*", "int*", "int", "int"), _ballot_cases, _ballot_run,
                                      _ballot_reference, atol=0.0, rtol=0.0)),
    CudaExercise(COMPACTION, Cudaling("compact_block", ("float*", "float*", "int*", "int", "float"), _block_cases,
                                      _block_run, lambda x, t: x[x > t], atol=0.0, rtol=0.0)),
]
