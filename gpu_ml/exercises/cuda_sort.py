"""Exercises of cuda/06-parallel-algorithms 03 (radix sort): the order key of float16 keys and an int64 sort from two
stable 32-bit key-value sorts (Python, graded on the CPU), and the stable rank of a key among its warp's peers with
`__match_any_sync` (CUDA, graded like cudalings on a GPU)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from gpu_ml.cudalings import Cudaling, checked_call, guarded_buffer, inside_guard, seeded_rng
from gpu_ml.exercises.core import Cases, CudaExercise, Exercise

SORT = "cuda/06-parallel-algorithms/03_radix_sort.ipynb"


# ----------------------------------------------------------------------------- 6.3: half_order_key (Python, on CPU)


def _half_cases() -> Cases:
    g = torch.Generator().manual_seed(0)
    nan, inf = float("nan"), float("inf")
    special = torch.tensor([0.0, -0.0, nan, 1.0, -nan, -1.0, inf, -0.0, 0.0, -inf, 6e-8, -6e-8, 65504.0, -65504.0,
                            nan], dtype=torch.float16)
    payloads = torch.tensor([0x7C01, -1, 0x7E00, -512, 0x7C00, -1024], dtype=torch.int16).view(torch.float16)
    mixed = (torch.randn(3000, generator=g) * 100).half()
    mixed[::7] = special.repeat(3000 // 7 // special.numel() + 1)[: mixed[::7].numel()]
    return {"special values": (special,),
            "NaNs of several payloads and signs, infinities": (payloads,),
            "3000 values with specials every 7th": (mixed,),
            "zeros of both signs only": (torch.tensor([0.0, -0.0, -0.0, 0.0, -0.0], dtype=torch.float16),),
            "one value": (torch.tensor([-2.5], dtype=torch.float16),),
            "few distinct (many ties)": (torch.tensor([1.0, -1.0, 0.5])[torch.randint(0, 3, (500,), generator=g)]
                                         .half(),)}


def _sorted_by(keys: object, x: torch.Tensor, bits: int) -> torch.Tensor:
    """The permutation a stable sort of the learner's keys gives, once they are checked to be keys of `bits` bits."""
    if not isinstance(keys, torch.Tensor) or keys.dtype not in (torch.int64, torch.int32):
        raise AssertionError(f"the keys must be an int64 (or int32) tensor, got {getattr(keys, 'dtype', type(keys))}")
    if keys.shape != x.shape:
        raise AssertionError(f"one key per element: shape {tuple(x.shape)}, got {tuple(keys.shape)}")
    if keys.numel() and (keys.min() < 0 or keys.max() >= 2**bits):
        raise AssertionError(f"the keys must lie in [0, 2^{bits}), got {keys.min().item()} .. {keys.max().item()}")
    return torch.sort(keys.long(), stable=True).indices


# ----------------------------------------------------------------------------- 6.3: sort_int64_by_halves (Python)


def _int64_cases() -> Cases:
    g = torch.Generator().manual_seed(1)
    full = torch.randint(-(2**63), 2**63 - 1, (2000,), generator=g, dtype=torch.int64)
    near = torch.randint(-5, 6, (1000,), generator=g, dtype=torch.int64)  # around 0: the high half is 0 or -1
    same_high = (7 << 32) + torch.randint(0, 2**32, (777,), generator=g, dtype=torch.int64)
    same_low = (torch.randint(-(2**31), 2**31, (777,), generator=g, dtype=torch.int64) << 32) + 12345
    return {"full int64 range": (full,),
            "small values around 0 (many ties)": (near,),
            "one high half, many low halves": (same_high,),
            "many high halves, one low half": (same_low,),
            "the extremes": (torch.tensor([2**63 - 1, -(2**63), 0, -1, 2**32, -(2**32), 2**31, -(2**31), 0]),),
            "one value": (torch.tensor([-3]),)}


def sort_pairs32(keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A stable sort of keys in [0, 2^32) held in int64, moving values alongside: (keys, values) sorted by key.
    What the exercise may call: the CPU stand-in for the lesson's radix_sort(keys, values)."""
    if not isinstance(keys, torch.Tensor) or keys.dtype != torch.int64 or keys.dim() != 1:
        raise ValueError("sort_pairs(): keys must be a 1-D int64 tensor holding 32-bit unsigned keys")
    if keys.numel() and (keys.min() < 0 or keys.max() >= 2**32):
        raise ValueError(f"sort_pairs(): keys must lie in [0, 2^32), got {keys.min().item()} .. {keys.max().item()}")
    if not isinstance(values, torch.Tensor) or values.shape != keys.shape:
        raise ValueError("sort_pairs(): one value per key")
    order = torch.sort(keys, stable=True).indices
    return keys[order], values[order]


def _int64_call(fn: Callable, x: torch.Tensor) -> torch.Tensor:
    order = fn(x, sort_pairs32)
    if not isinstance(order, torch.Tensor) or order.shape != x.shape:
        raise AssertionError(f"return the permutation: a tensor of shape {tuple(x.shape)}")
    return order.long()


# ----------------------------------------------------------------------------- 6.3: warp_digit_rank (CUDA)


def _rank_cases(device: str) -> Cases:
    g = seeded_rng()

    def digits(n: int, values: int) -> torch.Tensor:
        return torch.randint(0, values, (n,), generator=g, dtype=torch.int32).to(device)

    return {"n=1": (digits(1, 256),),
            "n=31 (one warp, not full), 4 digits": (digits(31, 4),),
            "n=1000, 256 digits": (digits(1000, 256),),
            "n=100003, 4 digits (many peers)": (digits(100_003, 4),),
            "n=4100, all digits equal": (torch.full((4100,), 200, dtype=torch.int32, device=device),),
            "n=70001, 2 digits": (digits(70_001, 2),)}


def _rank_reference(digits: torch.Tensor) -> torch.Tensor:
    """rank[i] = the lanes before i in its warp (32 consecutive elements) holding the same digit."""
    n = digits.numel()
    warps = F.pad(digits.long(), (0, -n % 32), value=-1).view(-1, 32)
    same = warps[:, :, None] == warps[:, None, :]  # [warp, lane i, lane j]
    before = torch.ones(32, 32, dtype=torch.bool, device=digits.device).tril(-1)  # j < i
    return (same & before).sum(-1).flatten()[:n].int()


def _rank_run(fn: Callable, digits: torch.Tensor):
    rank = guarded_buffer(digits.numel(), digits.device.type, torch.int32)
    checked_call(fn, digits, rank, digits.numel())
    return inside_guard(rank, digits.numel(), "rank")


EXERCISES: list[Exercise] = [
    Exercise("half_order_key", SORT, "half_order_key", _half_cases,
             reference=lambda x: torch.sort(x, stable=True).indices,
             call=lambda fn, x: _sorted_by(fn(x), x, 16), atol=0, rtol=0),
    Exercise("sort_int64_by_halves", SORT, "sort_int64_by_halves", _int64_cases,
             reference=lambda x: torch.sort(x, stable=True).indices, call=_int64_call, atol=0, rtol=0),
]
CUDA_EXERCISES: list[CudaExercise] = [
    CudaExercise(SORT, Cudaling("warp_digit_rank", ("unsigned*", "int*", "int"), _rank_cases, _rank_run,
                                _rank_reference, atol=0.0, rtol=0.0)),
]
