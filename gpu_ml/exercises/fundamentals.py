"""Exercises of 00-prerequisites/00_gpu_fundamentals: the intensity of a matmul of any shape, the roofline time of a
kernel, and a grid-stride Triton kernel (a maximum, in the interpreter on a CPU)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from gpu_ml import hardware
from gpu_ml.exercises.core import Cases, Exercise
from gpu_ml.validate import kernel_device

_NB = "00-prerequisites/00_gpu_fundamentals.ipynb"
_H200 = hardware.GPUS["H200"]


def _number(fn: Callable, *args) -> torch.Tensor:
    return torch.tensor(float(fn(*args)), dtype=torch.float64)


def _intensity(m: int, n: int, k: int, e: int) -> torch.Tensor:
    """(m x k) @ (k x n): 2mnk FLOPs over A and B read and C written once, e bytes per element."""
    return torch.tensor(2 * m * n * k / (e * (m * k + k * n + m * n)), dtype=torch.float64)


def _roofline_ms(flops: float, nbytes: float, peak_tflops: float, bandwidth_gbs: float) -> torch.Tensor:
    return torch.tensor(max(flops / (peak_tflops * 1e12), nbytes / (bandwidth_gbs * 1e9)) * 1e3, dtype=torch.float64)


_PAST_THE_END = 1e30  # what a load without its mask finds after x: it would win the maximum


def _max_cases() -> Cases:
    """Lengths not a multiple of the block, more blocks than programs (the grid-stride loop), fewer blocks than
    programs (a program with nothing to read), one element, all negative (a fill or start of 0 wins), and x followed
    in memory by 1e30 (an unmasked load reads it)."""
    g = torch.Generator().manual_seed(0)
    cases = {}
    for n, block, programs, sign in ((1, 128, 4, -1), (1000, 128, 3, -1), (5000, 256, 4, 0), (100, 64, 8, 0),
                                     (4096, 128, 5, -1)):
        x = torch.randn(n, generator=g)
        x = -x.abs() - 0.5 if sign < 0 else x
        buffer = torch.full((n + block,), _PAST_THE_END)
        buffer[:n] = x
        label = "all negative" if sign < 0 else "mixed signs"
        cases[f"n={n}, BLOCK={block}, {programs} programs, {label}"] = (buffer.to(kernel_device())[:n], block, programs)
    return cases


EXERCISES = [
    # square (n/3 for 2-byte elements), one row (a matrix-vector product, about 1 FLOP/byte), M != N != K, fp32.
    Exercise("matmul_intensity", _NB, "matmul_intensity",
             lambda: {f"{m}x{n}x{k}, {e}-byte elements": (m, n, k, e)
                      for m, n, k, e in ((1024, 1024, 1024, 2), (8192, 8192, 8192, 2), (1, 4096, 4096, 2),
                                         (64, 28672, 4096, 2), (100, 30, 7, 4))},
             reference=_intensity, call=_number, atol=0, rtol=1e-9),
    # memory-bound (a softmax, a copy with no FLOPs), compute-bound (a big matmul), the measured peaks.
    Exercise("roofline_ms", _NB, "roofline_ms",
             lambda: {f"{what}: {f:.3g} FLOPs, {b:.3g} bytes, {p} TFLOP/s, {bw} GB/s": (f, b, p, bw)
                      for what, f, b, p, bw in (
                          ("fp32 softmax 4096 x 4096", 5 * 4096**2, 2 * 4 * 4096**2, _H200.peak("fp32"),
                           _H200.bandwidth_gbs),
                          ("bf16 matmul 8192^3", 2 * 8192**3, 3 * 2 * 8192**2, _H200.peak("bf16"), _H200.bandwidth_gbs),
                          ("1 GiB copy", 0, 2 * 2**30, _H200.peak("bf16"), 4246),
                          ("bf16 matmul 1024^3, measured peaks", 2 * 1024**3, 3 * 2 * 1024**2, 699, 4246))},
             reference=_roofline_ms, call=_number, atol=0, rtol=1e-9),
    Exercise("read_max", _NB, "read_max", _max_cases, reference=lambda x, block, programs: x.max(),
             call=lambda fn, *args: fn(*args)),
]
