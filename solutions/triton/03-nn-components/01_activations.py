"""Solutions to the exercises of triton/03-nn-components/01_activations.ipynb (graded by gpu_ml.exercises)."""

import torch
import triton.language as tl

import triton
from gpu_ml.kernels.triton.activations import sigmoid_parts


# Exercise 1: squared ReLU. r = max(x, 0) is computed once; the forward writes r * r, the backward dy * 2r.
# tl.where(x > 0, x, 0) gives 0 at x = 0, so the slope there is 0, as in torch.
@triton.jit
def relu2_fwd_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)  # fp32 math whatever the storage dtype
    r = tl.where(x > 0.0, x, 0.0)
    tl.store(y_ptr + offs, (r * r).to(y_ptr.dtype.element_ty), mask=mask)  # round once, on the store


@triton.jit
def relu2_bwd_kernel(x_ptr, dy_ptr, dx_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=mask).to(tl.float32)
    r = tl.where(x > 0.0, x, 0.0)
    tl.store(dx_ptr + offs, (2.0 * r * dy).to(dx_ptr.dtype.element_ty), mask=mask)


def relu2(x: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y, dx = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
    n = x.numel()
    if n:
        grid = (triton.cdiv(n, 1024),)
        relu2_fwd_kernel[grid](x, y, n, BLOCK_SIZE=1024)
        relu2_bwd_kernel[grid](x, dy, dx, n, BLOCK_SIZE=1024)
    return y, dx


# Exercise 2: sigmoid GELU, f(x) = x * sigma(1.702 x), f'(x) = sigma(1.702 x) + 1.702 x sigma'(1.702 x).
# sigmoid_parts builds both from exp(-|a|), so x = -1e4 gives 0, not exp(17020) / (1 + exp(17020))^2 = NaN.
@triton.jit
def gelu_sigmoid_fwd_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    s, _ = sigmoid_parts(1.702 * x)
    tl.store(y_ptr + offs, (x * s).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def gelu_sigmoid_bwd_kernel(x_ptr, dy_ptr, dx_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=mask).to(tl.float32)
    a = 1.702 * x
    s, ds = sigmoid_parts(a)
    tl.store(dx_ptr + offs, (dy * (s + a * ds)).to(dx_ptr.dtype.element_ty), mask=mask)  # chain rule: 1.702


def gelu_sigmoid(x: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y, dx = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
    n = x.numel()
    if n:
        grid = (triton.cdiv(n, 1024),)
        gelu_sigmoid_fwd_kernel[grid](x, y, n, BLOCK_SIZE=1024)
        gelu_sigmoid_bwd_kernel[grid](x, dy, dx, n, BLOCK_SIZE=1024)
    return y, dx


# Exercise 3: the forward reads x and writes y (2 passes), the backward reads x and dy and writes dx (3 passes).
def training_step_bytes(dtype: torch.dtype) -> int:
    return (2 + 3) * torch.tensor([], dtype=dtype).element_size()
