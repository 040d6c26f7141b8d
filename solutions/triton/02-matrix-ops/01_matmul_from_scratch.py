"""Solutions to the exercises of triton/02-matrix-ops/01_matmul_from_scratch.ipynb (graded by gpu_ml.exercises)."""

import torch
import triton.language as tl

import triton


# Exercise 2: the tiled kernel with a fused epilogue. The bias is added once, after the K loop, to the fp32
# accumulator: one value per column of C, so it is loaded with the column indices rn and broadcast over rows.
@triton.jit
def matmul_bias_relu_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] + k0 < K), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] + k0 < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    bias = tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)
    acc = tl.maximum(acc + bias[None, :], 0.0)
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul_bias_relu(a, b, bias, block_m=32, block_n=32, block_k=32):
    (M, K), N = a.shape, b.shape[1]
    c = torch.full((M, N), float("nan"), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    matmul_bias_relu_kernel[grid](a, b, bias, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
                                  BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)
    return c


# Exercise 3: one K step does 2 * BM * BN * BK FLOPs and loads (BM + BN) * BK elements; BK cancels.
# A 128 x 256 fp16 tile: 2 * 128 * 256 / (2 * 384) = 85.3 FLOP/byte.
def tile_intensity(bm, bn, bk, element_bytes):
    return 2 * bm * bn * bk / (element_bytes * (bm + bn) * bk)
