"""Exercises of cuda/06-parallel-algorithms 04 (bitonic sort and Morton order): the bitonic network of one warp in
shuffles (CUDA, graded like cudalings on a GPU), the network in PyTorch and the decoding of 3-D Morton codes (Python,
graded on the CPU)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from gpu_ml.cudalings import Cudaling, checked_call, guarded_buffer, inside_guard, seeded_rng
from gpu_ml.exercises.core import Cases, CudaExercise, Exercise

BITONIC = "cuda/06-parallel-algorithms/04_bitonic_sort_and_morton_order.ipynb"
INT_MIN, INT_MAX = -(2**31), 2**31 - 1


# ----------------------------------------------------------------------------- 6.4: warp_sort32


def _warp_sort_cases(device: str) -> Cases:
    g = seeded_rng()

    def ints(n: int, low: int = -1000, high: int = 1000) -> torch.Tensor:
        return torch.randint(low, high, (n,), generator=g, dtype=torch.int32)

    extremes = ints(96)
    extremes[::5], extremes[2::7] = INT_MIN, INT_MAX
    runs = torch.cat([torch.arange(64, dtype=torch.int32), torch.arange(64, 0, -1, dtype=torch.int32)])
    cases = {"n=1": torch.tensor([5], dtype=torch.int32),
             "n=31 (one warp, not full)": ints(31),
             "n=32": ints(32),
             "n=33 (a second warp of one)": ints(33),
             "n=96 with INT_MIN and INT_MAX": extremes,
             "n=128: sorted, then reversed runs": runs,
             "n=1000, few distinct values (ties)": ints(1000, 0, 3),
             "n=100003, the whole int32 range": ints(100_003, INT_MIN, INT_MAX)}
    return {name: (x.to(device),) for name, x in cases.items()}


def _warp_sort_run(fn: Callable, x: torch.Tensor):
    y = guarded_buffer(x.numel(), x.device.type, torch.int32)
    checked_call(fn, x, y, x.numel())
    return inside_guard(y, x.numel(), "y")


def _warp_sort_reference(x: torch.Tensor) -> torch.Tensor:
    """Every 32 consecutive values sorted; the last group padded with INT_MAX, which sorts last and is cut off."""
    groups = F.pad(x.long(), (0, -x.numel() % 32), value=INT_MAX).view(-1, 32)
    return groups.sort(dim=1).values.flatten()[: x.numel()].to(torch.int32)


# ----------------------------------------------------------------------------- 6.4: bitonic_sort_torch (Python, CPU)


def _network_cases() -> Cases:
    g = torch.Generator().manual_seed(0)
    ties = torch.randint(-3, 4, (16, 64), generator=g).float()
    ordered = torch.stack([torch.arange(256.0), torch.arange(256.0).flip(0), torch.full((256,), 2.5)])
    return {"1 x 1": (torch.tensor([[3.0]]),),
            "5 x 2": (torch.randn(5, 2, generator=g),),
            "3 x 8": (torch.randn(3, 8, generator=g),),
            "16 x 64, many ties": (ties,),
            "3 x 256: sorted, reversed, all equal": (ordered,),
            "4 x 1024": (torch.randn(4, 1024, generator=g) * 100,),
            "2 x 4096": (torch.randn(2, 4096, generator=g),)}


# ----------------------------------------------------------------------------- 6.4: morton3_decode (Python, CPU)


def _morton3_cases() -> Cases:
    g = torch.Generator().manual_seed(0)
    return {"every code below 2^15": (torch.arange(2**15, dtype=torch.int64),),
            "100000 random 30-bit codes": (torch.randint(0, 2**30, (100_000,), generator=g, dtype=torch.int64),),
            "extremes, shape (2, 3)": (torch.tensor([[0, 2**30 - 1, 0x09249249], [0x12492492, 0x24924924, 7]]),)}


def _morton3_reference(code: torch.Tensor):
    """The bits of x, y, z gathered one by one: bit 3b + axis of the code is bit b of the axis's coordinate."""
    return tuple(sum(((code >> (3 * b + axis)) & 1) << b for b in range(10)) for axis in range(3))


EXERCISES: list[Exercise] = [
    Exercise("bitonic_sort_torch", BITONIC, "bitonic_sort_torch", _network_cases,
             reference=lambda x: torch.sort(x, dim=-1).values, call=lambda fn, x: fn(x.clone()), atol=0, rtol=0),
    Exercise("morton3_decode", BITONIC, "morton3_decode", _morton3_cases, reference=_morton3_reference,
             call=lambda fn, code: tuple(fn(code.clone())), atol=0, rtol=0),
]
CUDA_EXERCISES: list[CudaExercise] = [
    CudaExercise(BITONIC, Cudaling("warp_sort32", ("int*", "int*", "int"), _warp_sort_cases, _warp_sort_run,
                                   _warp_sort_reference, atol=0.0, rtol=0.0)),
]
