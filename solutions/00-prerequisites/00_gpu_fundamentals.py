"""Solutions to the exercises of 00-prerequisites/00_gpu_fundamentals.ipynb (graded by gpu_ml.exercises)."""

import torch
import triton.language as tl

import triton


# Exercise 1: 2mnk FLOPs (a multiply and an add per term) for A (m x k), B (k x n) read and C (m x n) written once.
# n = m = k gives n / 3 in 2-byte elements; m = 1 (one row) gives about 1 FLOP per byte: the weight dominates.
def matmul_intensity(m, n, k, element_bytes):
    return 2 * m * n * k / (element_bytes * (m * k + k * n + m * n))


# Exercise 2: a kernel takes at least as long as its FLOPs at the peak and as its bytes at the bandwidth, whichever
# is longer (units: TFLOP/s = 1e12 FLOP/s, GB/s = 1e9 bytes/s; the answer in ms).
def roofline_ms(flops, nbytes, peak_tflops, bandwidth_gbs):
    return max(flops / (peak_tflops * 1e12), nbytes / (bandwidth_gbs * 1e9)) * 1e3


# Exercise 3: read_sum_kernel with a maximum: the running value starts at -inf (0 would beat an all-negative x), masked
# lanes load -inf, and a program whose first block is past the end stores -inf, which the host's max ignores.
@triton.jit
def read_max_kernel(x_ptr, partial_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    acc = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    for start in range(pid * BLOCK, n, step):
        offs = start + tl.arange(0, BLOCK)
        acc = tl.maximum(acc, tl.load(x_ptr + offs, mask=offs < n, other=float("-inf")))
    tl.store(partial_ptr + pid, tl.max(acc, axis=0))


def read_max(x, block=128, programs=4):
    partial = torch.full((programs,), float("nan"), device=x.device, dtype=torch.float32)
    read_max_kernel[(programs,)](x, partial, x.numel(), BLOCK=block)
    return partial.max()
