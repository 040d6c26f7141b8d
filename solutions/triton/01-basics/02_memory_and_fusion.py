"""Solutions to the exercises of triton/01-basics/02_memory_and_fusion.ipynb (graded by gpu_ml.exercises)."""

import torch
import triton.language as tl

import triton

# Exercise 1: each fill is the identity of its reduction, the v with reduce(v, a) = a for every a.
SUM_FILL = 0.0
MAX_FILL = float("-inf")
MIN_FILL = float("inf")
PROD_FILL = 1.0


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def row_reductions_kernel(x_ptr, sum_ptr, max_ptr, min_ptr, prod_ptr, N, stride_m, BLOCK_N: tl.constexpr,
                          SUM_FILL: tl.constexpr, MAX_FILL: tl.constexpr, MIN_FILL: tl.constexpr,
                          PROD_FILL: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)  # one block covers the row; lanes from N to BLOCK_N are masked
    ptrs = x_ptr + row * stride_m + cols
    mask = cols < N
    tl.store(sum_ptr + row, tl.sum(tl.load(ptrs, mask=mask, other=SUM_FILL), axis=0))
    tl.store(max_ptr + row, tl.max(tl.load(ptrs, mask=mask, other=MAX_FILL), axis=0))
    tl.store(min_ptr + row, tl.min(tl.load(ptrs, mask=mask, other=MIN_FILL), axis=0))
    tl.store(prod_ptr + row, tl.reduce(tl.load(ptrs, mask=mask, other=PROD_FILL), 0, _mul))


def row_reductions(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    M, N = x.shape
    outs = tuple(torch.full((M,), float("nan"), device=x.device) for _ in range(4))
    row_reductions_kernel[(M,)](x, *outs, N, x.stride(0), BLOCK_N=triton.next_power_of_2(N), SUM_FILL=SUM_FILL,
                                MAX_FILL=MAX_FILL, MIN_FILL=MIN_FILL, PROD_FILL=PROD_FILL)
    return outs


# Exercise 2 (prose): eager torch.sigmoid(x) * x * y is 3 kernels, sigmoid (read 4, write 4), mul (read 8,
# write 4), mul (read 8, write 4): 32 bytes per fp32 element. One fused kernel reads x and y and writes the
# result: 12 bytes, 2.67x less traffic.


# Exercise 3: x * sigmoid(x) * y in one kernel, computed in fp32 and cast once on the store.
@triton.jit
def silu_mul_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    out = x / (1.0 + tl.exp(-x)) * y  # x * sigmoid(x) * y
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


def silu_mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # In the notebook: validate("silu_mul", contiguous=True, x=x, y=y). Standalone, the same checks by hand:
    if x.shape != y.shape:
        raise ValueError(f"silu_mul(): shapes differ: x {tuple(x.shape)} vs y {tuple(y.shape)}")
    if x.dtype != y.dtype or x.dtype not in (torch.float32, torch.float16):
        raise TypeError(f"silu_mul(): x and y must both be float32 or both float16, got {x.dtype} and {y.dtype}")
    if not (x.is_contiguous() and y.is_contiguous()):
        raise ValueError("silu_mul(): x and y must be contiguous")
    out = torch.full_like(x, float("nan"))
    n = x.numel()
    if n:
        silu_mul_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK_SIZE=1024)
    return out
