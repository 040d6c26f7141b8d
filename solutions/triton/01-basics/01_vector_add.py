"""Solutions to the exercises of triton/01-basics/01_vector_add.ipynb (graded by gpu_ml.exercises)."""

import torch
import triton.language as tl

import triton


# Exercise 1: out = a * x + y. The scalar `a` is a kernel argument like `n`.
@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, a, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, a * x + y, mask=mask)


def axpy(a: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.full_like(x, float("nan"))
    n = x.numel()
    if n:
        axpy_kernel[(triton.cdiv(n, 1024),)](x, y, out, a, n, BLOCK_SIZE=1024)
    return out


# Exercise 2: x += y. The output pointer is x itself: each element is read, then written by the same lane,
# so no other program can see it half-updated. It still moves 3 elements per element (read x and y, write x).
@triton.jit
def add_in_place_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(x_ptr + offsets, x + y, mask=mask)


def add_(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    n = x.numel()
    if n:
        add_in_place_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK_SIZE=1024)
    return x
