"""Exercises of triton/06-parallel-algorithms: the order-preserving int32 keys of float32 values (NaN last), and
segment sums read off one inclusive scan."""

from __future__ import annotations

import torch

from gpu_ml.exercises.core import Cases, Exercise
from gpu_ml.validate import kernel_device

_NB = "triton/06-parallel-algorithms/01_scan_histogram_sort.ipynb"


def _key_cases() -> Cases:
    """Signed zeros, both infinities, NaN of both signs, subnormals, the largest floats, and random values."""
    g = torch.Generator().manual_seed(0)
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), -float("nan"), 1e-45, -1e-45,
                            3.4e38, -3.4e38, 1.0, -1.0])
    return {name: (x.to(kernel_device()),) for name, x in {
        "special values": special, "random": torch.randn(1000, generator=g) * 1e3, "one value": torch.tensor([-2.5])
    }.items()}


def _key_reference(x: torch.Tensor) -> torch.Tensor:
    """The keys of the lesson's `sortable`, exactly."""
    bits = torch.where(x.isnan(), float("nan"), x).view(torch.int32)
    return torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


def _segment_cases() -> Cases:
    """Several segments, one segment, segments of length 1, an int32 vector."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(50, generator=g, dtype=torch.float64)
    xi = torch.randint(-9, 10, (12,), generator=g)
    cases = {"five segments": (x.cumsum(0), torch.tensor([3, 10, 11, 30, 50])),
             "one segment": (x.cumsum(0), torch.tensor([50])),
             "segments of one": (xi.cumsum(0), torch.arange(1, 13))}
    return {name: tuple(t.to(kernel_device()) for t in args) for name, args in cases.items()}


def _segment_reference(y: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    totals = y[ends - 1]
    return torch.cat([totals[:1], totals[1:] - totals[:-1]])


EXERCISES = [
    Exercise("sortable_keys", _NB, "sortable_keys", _key_cases, reference=_key_reference,
             call=lambda fn, x: fn(x), atol=0, rtol=0),
    Exercise("segment_sums", _NB, "segment_sums", _segment_cases, reference=_segment_reference,
             call=lambda fn, *args: fn(*args), atol=1e-12, rtol=0),
]
