"""Solutions to the exercises of triton/01-basics/03_debugging.ipynb (graded by gpu_ml.exercises)."""

import torch
import triton.language as tl

import triton


# Exercise 1: output element i holds x[n - 1 - i]; the buggy kernel read x[n - i], one past the end for i = 0
# (an interpreted copy printing n - offs shows it: program 0 loads from n, n - 1, ...).
@triton.jit
def reverse_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + (n - 1 - offs), mask=mask)
    tl.store(y_ptr + offs, x, mask=mask)


# Exercise 2: refuse on the host what scale_kernel cannot handle, then launch it.
@triton.jit
def scale_kernel(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, alpha * tl.load(x_ptr + offs, mask=mask), mask=mask)


def safe_scale(x, alpha, block=128):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"safe_scale(): x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 1:
        raise ValueError(f"safe_scale(): x must be 1-D, got shape {tuple(x.shape)}")
    if not x.is_contiguous():
        raise ValueError(f"safe_scale(): x must be contiguous, got stride {x.stride()}: call .contiguous() first")
    y = torch.empty_like(x)
    if x.numel():
        scale_kernel[(triton.cdiv(x.numel(), block),)](x, y, x.numel(), alpha, BLOCK=block)
    return y


# Exercise 3: without a mask the last block reads past the end exactly when it is partial, that is when n is not
# a multiple of the block (with NaN after the tensor, those reads poison the sum).
def exposes_bug(n, block):
    return n % block != 0
