"""Solutions to the exercises of triton/02-matrix-ops/02_fast_matmul.ipynb (graded by gpu_ml.exercises)."""

import torch
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

import triton


# Exercise 1: split-K. Program (pid_m, pid_n, pid_k) sums its share of the K blocks of one tile and adds it into
# the zeroed fp32 buffer with tl.atomic_add; the wrapper casts once at the end. The K mask covers the last block.
@triton.jit
def matmul_split_k_kernel(a_ptr, b_ptr, c32_ptr, M, N, K,
                          stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SPLIT_K: tl.constexpr):
    pid_m, pid_n, pid_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    blocks_per_split = tl.cdiv(tl.cdiv(K, BK), SPLIT_K)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in range(pid_k * blocks_per_split, (pid_k + 1) * blocks_per_split):
        rk = kb * BK + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.atomic_add(c32_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc,
                  mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul_split_k(a, b, split_k=2, BM=32, BN=32, BK=32):
    (M, K), N = a.shape, b.shape[1]
    c32 = torch.zeros(M, N, device=a.device, dtype=torch.float32)  # the atomic adds need zeros to start from
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN), split_k)
    matmul_split_k_kernel[grid](a, b, c32, M, N, K, *a.stride(), *b.stride(), *c32.stride(),
                                BM=BM, BN=BN, BK=BK, SPLIT_K=split_k)
    return c32.to(a.dtype)


# Exercise 2: the persistent TMA kernel with the epilogue of matmul_grouped_kernel, applied to the fp32
# accumulator before the descriptor store (which clips the rows and columns past M and N).
@triton.jit
def matmul_persistent_epilogue_kernel(a_desc, b_desc, c_desc, bias_ptr, M, N, K,
                                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, NUM_SMS: tl.constexpr,
                                      HAS_BIAS: tl.constexpr, RELU: tl.constexpr):
    num_pid_m, num_pid_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, NUM_SMS):
        pid_m, pid_n = tile // num_pid_n, tile % num_pid_n
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(tl.cdiv(K, BK)):
            acc = tl.dot(a_desc.load([pid_m * BM, k * BK]), b_desc.load([k * BK, pid_n * BN]), acc)
        if HAS_BIAS:
            rn = pid_n * BN + tl.arange(0, BN)
            acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
        if RELU:
            acc = tl.maximum(acc, 0.0)
        c_desc.store([pid_m * BM, pid_n * BN], acc.to(c_desc.dtype))


def matmul_persistent_epilogue(a, b, bias, relu=True, BM=64, BN=64, BK=32):
    (M, K), N = a.shape, b.shape[1]
    c = torch.full((M, N), float("nan"), device=a.device, dtype=a.dtype)
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count if a.is_cuda else 4
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    matmul_persistent_epilogue_kernel[(min(sms, tiles),)](
        TensorDescriptor.from_tensor(a, [BM, BK]), TensorDescriptor.from_tensor(b, [BK, BN]),
        TensorDescriptor.from_tensor(c, [BM, BN]), bias, M, N, K, BM=BM, BN=BN, BK=BK, NUM_SMS=min(sms, tiles),
        HAS_BIAS=True, RELU=relu)
    return c
