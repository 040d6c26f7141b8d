"""Solutions to the exercises of triton/03-nn-components/02_softmax.ipynb (graded by gpu_ml.exercises)."""

import torch
import triton.language as tl

import triton


# Exercise 1: log_softmax(x) = x - m - log(d). Never log(y): y underflows to 0 for x - m < -104 in fp32 and
# log(0) = -inf, where the true value is a finite -1e4. The exponentials are needed only for d.
@triton.jit
def log_softmax_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    d = tl.sum(tl.exp(x - m), axis=0)  # masked lanes: exp(-inf) = 0
    y = x - m - tl.log(d)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def log_softmax(x: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    y = torch.full((n_rows, n_cols), float("nan"), device=x.device, dtype=x.dtype)
    if y.numel():
        log_softmax_kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK_N=triton.next_power_of_2(n_cols))
    return y


# Exercise 2: causal softmax. Row i keeps columns j <= i: the mask is computed from the indices, nothing is read
# for it. The diagonal is always kept, so no row is all -inf and none gives NaN.
@triton.jit
def causal_softmax_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    x = tl.where(cols <= row, x, float("-inf"))  # the future: exp(-inf - m) = 0
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)  # zeros above the diagonal


def causal_softmax(x: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    y = torch.full((n_rows, n_cols), float("nan"), device=x.device, dtype=x.dtype)
    if y.numel():
        causal_softmax_kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0),
                                         BLOCK_N=triton.next_power_of_2(n_cols))
    return y


# Exercise 3: per-lane online statistics. Each lane keeps its own max and its own sum relative to it (no block
# reduction in the loop, but two exps per element); the lanes are combined once, each sum rescaled to the row max.
# A lane that has seen only -inf (the masked tail of a short row) keeps m = -inf, d = 0: its update must use
# 0 as the reference, or exp(-inf - (-inf)) = NaN poisons d and then the whole row.
@triton.jit
def softmax_lanes_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    m = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    d = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        ref = tl.where(m_new == float("-inf"), 0.0, m_new)
        d = d * tl.exp(m - ref) + tl.exp(x - ref)
        m = m_new
    m_row = tl.max(m, axis=0)
    d_row = tl.sum(d * tl.exp(m - m_row), axis=0)  # lanes with m = -inf add 0 * 0
    inv = 1.0 / d_row
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        tl.store(y_row + cols, (tl.exp(x - m_row) * inv).to(y_ptr.dtype.element_ty), mask=cols < n_cols)


def softmax_lanes(x: torch.Tensor, block: int = 64) -> torch.Tensor:
    n_rows, n_cols = x.shape
    y = torch.full((n_rows, n_cols), float("nan"), device=x.device, dtype=x.dtype)
    if y.numel():
        softmax_lanes_kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=block)
    return y
