"""Solutions to the exercises of triton/03-nn-components/03_linear_layer.ipynb (graded by gpu_ml.exercises)."""

import torch
import triton.language as tl

import triton
from gpu_ml.kernels.triton.activations import activation_bwd
from gpu_ml.kernels.triton.linear import activation_grad_kernel, launch, matmul


# Exercise 1: SiLU is not monotonic, so its slope cannot be read from y (y = -0.2 comes from two different z):
# the backward keeps z, which the forward kernel stores with z=... (STORE_Z), as for GELU.
def silu_linear_grads(x, weight, bias, dy):
    M, N = x.shape[0], weight.shape[0]
    y = torch.empty(M, N, device=x.device, dtype=x.dtype)
    z = torch.empty_like(y)
    launch(x, weight.T, y, bias=bias, activation="silu", z=z)  # y and z from one kernel
    dz = torch.empty_like(y)
    activation_grad_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 128))](
        dy, z, dz, M, N, *dy.stride(), *z.stride(), *dz.stride(), ACTIVATION="silu", BLOCK_M=32, BLOCK_N=128)
    dx = matmul(dz, weight)
    dw, db = matmul(dz.T, x, with_rowsum=True)
    return y, dx, dw, db


# Exercise 2: the prologue. Each A tile of dX = dZ @ W is built from the tiles of dY and z as it is loaded, so
# dZ is never written. Converted to W's dtype before tl.dot, as the unfused path stores it (fp16 in, fp16 dZ).
@triton.jit
def dx_fused_kernel(dy_ptr, z_ptr, w_ptr, dx_ptr, M, N, K,
                    stride_dym, stride_dyn, stride_zm, stride_zn, stride_wn, stride_wk, stride_dxm, stride_dxk,
                    ACTIVATION: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rk = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    rn = tl.arange(0, BLOCK_N)  # the reduction runs over N, the layer's outputs
    dy_ptrs = dy_ptr + rm[:, None] * stride_dym + rn[None, :] * stride_dyn
    z_ptrs = z_ptr + rm[:, None] * stride_zm + rn[None, :] * stride_zn
    w_ptrs = w_ptr + rn[:, None] * stride_wn + rk[None, :] * stride_wk
    acc = tl.zeros([BLOCK_M, BLOCK_K], dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):
        mask_a = (rm[:, None] < M) & (rn[None, :] < N - n0)
        dy = tl.load(dy_ptrs, mask=mask_a, other=0.0).to(tl.float32)
        z = tl.load(z_ptrs, mask=mask_a, other=0.0).to(tl.float32)
        dz = activation_bwd(z, dy, ACTIVATION).to(w_ptr.dtype.element_ty)  # 0 in masked lanes: dy = 0 there
        w = tl.load(w_ptrs, mask=(rn[:, None] < N - n0) & (rk[None, :] < K), other=0.0)
        acc = tl.dot(dz, w, acc, input_precision=INPUT_PRECISION)
        dy_ptrs += BLOCK_N * stride_dyn
        z_ptrs += BLOCK_N * stride_zn
        w_ptrs += BLOCK_N * stride_wn
    tl.store(dx_ptr + rm[:, None] * stride_dxm + rk[None, :] * stride_dxk, acc.to(dx_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rk[None, :] < K))


def linear_dx_fused(dy, z, weight, activation, block=32):
    (M, N), K = dy.shape, weight.shape[1]
    dx = torch.full((M, K), float("nan"), device=dy.device, dtype=dy.dtype)
    dx_fused_kernel[(triton.cdiv(M, block), triton.cdiv(K, block))](
        dy, z, weight, dx, M, N, K, *dy.stride(), *z.stride(), *weight.stride(), *dx.stride(),
        ACTIVATION=activation, INPUT_PRECISION="ieee" if dy.dtype == torch.float32 else "tf32",
        BLOCK_M=block, BLOCK_N=block, BLOCK_K=block)
    return dx


# Exercise 3: only GELU keeps z (M x N values per layer); ReLU keeps y, which exists anyway, and "none" nothing.
def saved_z_bytes(batch, widths, activations, element_bytes):
    return sum(batch * n_out * element_bytes
               for n_out, activation in zip(widths[1:], activations, strict=True) if activation == "gelu_tanh")
