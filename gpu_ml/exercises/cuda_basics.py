"""Exercises of cuda/01-basics: CUDA ones (graded like cudalings, on a GPU) and Python ones."""

from __future__ import annotations

from collections.abc import Callable

import torch

from gpu_ml.cudalings import Cases, Cudaling, _buffer, _call, _inside, _randn, _rng
from gpu_ml.exercises.core import CudaExercise, Exercise

HELLO = "cuda/01-basics/01_hello_cuda.ipynb"

# ----------------------------------------------------------------------------- 01_hello_cuda


def _saxpy_cases(device: str) -> Cases:
    """(n, blocks, threads): one element; grids far too small (each thread loops); more threads than elements;
    odd block sizes; a covering grid. y is updated in place, so an element done twice (a stride of blockDim.x
    alone, or a loop that ignores blockIdx) comes out wrong, not just repeated."""
    g = _rng()
    shapes = [(1, 1, 32), (1000, 1, 32), (1000, 8, 1024), (4099, 3, 96), (100_003, 7, 96), (100_003, 391, 256)]
    return {f"n={n}, {b} block(s) of {t}": (_randn(g, n, device=device), _randn(g, n, device=device), b, t)
            for n, b, t in shapes}


def _saxpy_run(fn: Callable, x: torch.Tensor, y: torch.Tensor, blocks: int, threads: int):
    n = x.numel()
    buf = _buffer(n, x.device.type)
    buf[:n] = y  # updated in place, in a copy: y itself stays for the reference
    _call(fn, 2.5, x, buf, n, blocks, threads)
    return _inside(buf, n, "y")


# Shapes (depth, rows, cols) with one side of 1, odd sizes, and several blocks of 8 x 8 x 4 along every axis.
_SHAPES_3D = [(1, 1, 1), (1, 1, 100), (1, 100, 1), (100, 1, 1), (3, 17, 19), (13, 17, 19), (9, 5, 2)]
_EXTRA_3D = 4096  # more guard elements: an unguarded z (or y) overhang lands further past the end than GUARD


def _index_3d_cases(device: str) -> Cases:
    return {f"{d} x {r} x {c}": (d, r, c, device) for d, r, c in _SHAPES_3D}


def _index_3d_run(fn: Callable, depth: int, rows: int, cols: int, device: str):
    n = depth * rows * cols
    outs = [_buffer(n + _EXTRA_3D, device, torch.int32) for _ in range(3)]
    _call(fn, *outs, depth, rows, cols)
    return tuple(_inside(buf, n, name).view(depth, rows, cols)
                 for buf, name in zip(outs, ("depth_of", "row_of", "col_of"), strict=True))


def _index_3d_ref(depth: int, rows: int, cols: int, device: str):
    axes = [torch.arange(k, dtype=torch.int32, device=device) for k in (depth, rows, cols)]
    return tuple(t.contiguous() for t in torch.meshgrid(*axes, indexing="ij"))


EXERCISES: list[Exercise] = []
CUDA_EXERCISES: list[CudaExercise] = [
    CudaExercise(HELLO, Cudaling("saxpy", ("float", "float*", "float*", "long long", "int", "int"), _saxpy_cases,
                                 _saxpy_run, lambda x, y, blocks, threads: 2.5 * x.double() + y.double())),
    CudaExercise(HELLO, Cudaling("index_3d", ("int*", "int*", "int*", "int", "int", "int"), _index_3d_cases,
                                 _index_3d_run, _index_3d_ref)),
]
