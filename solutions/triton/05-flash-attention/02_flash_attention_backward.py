"""Solutions to the exercises of triton/05-flash-attention/02_flash_attention_backward.ipynb (graded by
gpu_ml.exercises)."""

import torch
import triton.language as tl

import triton
from gpu_ml.kernels.triton.flash_attention import LOG2E


# Exercise 1: dQ of one query block. P is rebuilt from the scores and the saved log-sum-exp (both in base 2 here:
# qk_scale holds log2(e) and lse was multiplied by it), then masked where the forward masked (keys past NK, keys past
# the diagonal): there exp2 of a finite score minus lse is not 0 by itself. dS = P * (dO V^T - D), dQ += dS K.
@triton.jit
def dq_kernel(Q, K, V, DO, LSE, Delta, DQ, NQ, NK, qk_scale, sm_scale, CAUSAL,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < NQ
    rows = bh * NQ * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    q = tl.load(Q + rows, mask=row_ok[:, None], other=0.0)
    do = tl.load(DO + rows, mask=row_ok[:, None], other=0.0)
    lse = tl.load(LSE + bh * NQ + offs_m, mask=row_ok, other=0.0) * 1.4426950408889634
    delta = tl.load(Delta + bh * NQ + offs_m, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    hi = NK
    if CAUSAL:
        hi = tl.minimum(NK, (pid_m + 1) * BLOCK_M)
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv = bh * NK * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
        k = tl.load(K + kv, mask=offs_n[:, None] < NK, other=0.0)
        v = tl.load(V + kv, mask=offs_n[:, None] < NK, other=0.0)
        p = tl.math.exp2(tl.dot(q, tl.trans(k)) * qk_scale - lse[:, None])
        keep = (offs_n[None, :] < NK) & ((offs_n[None, :] <= offs_m[:, None]) | (CAUSAL == 0))
        p = tl.where(keep, p, 0.0)
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)
    tl.store(DQ + rows, (dq * sm_scale).to(DQ.dtype.element_ty), mask=row_ok[:, None])


def compact_dq(do, q, k, v, o, lse, causal):
    b, h, nq, d = q.shape
    q, k, v, do = (t.contiguous() for t in (q, k, v, do))
    delta = (o.float() * do.float()).sum(-1)  # D = rowsum(dO * O)
    dq = torch.empty_like(q)
    dq_kernel[(triton.cdiv(nq, 16), b * h)](q, k, v, do, lse.contiguous(), delta, dq, nq, k.shape[2],
                                            d**-0.5 * LOG2E, d**-0.5, int(causal), HEAD_DIM=d, BLOCK_M=16,
                                            BLOCK_N=16)
    return dq


# Exercise 2: dK and dV of one key block of one KV head, summed over the GROUP query heads that read it (GQA) and
# over the query blocks that see it. The tiles are transposed (keys as rows) so the accumulators need no transpose.
# Query rows past NQ load lse = 0, so their P^T would be exp2(score), not 0: the mask must drop them too. Causal with
# NK > NQ: keys past the last query are seen by no row, the loop is empty and their gradients are 0.
@triton.jit
def dkdv_kernel(Q, K, V, DO, LSE, Delta, DK, DV, NQ, NK, GROUP, qk_scale, sm_scale, CAUSAL,
                HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_n, bhk = tl.program_id(0), tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    kv = bhk * NK * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    k = tl.load(K + kv, mask=offs_n[:, None] < NK, other=0.0)
    v = tl.load(V + kv, mask=offs_n[:, None] < NK, other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    lo = 0
    if CAUSAL:  # query rows before this block's first key see none of it
        lo = pid_n * BLOCK_N // BLOCK_M * BLOCK_M
    for g in range(GROUP):
        bh = bhk * GROUP + g  # query head g of this KV head's group: b * Hq + hk * GROUP + g
        for start_m in range(lo, NQ, BLOCK_M):
            offs_m = start_m + tl.arange(0, BLOCK_M)
            row_ok = offs_m < NQ
            rows = bh * NQ * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
            q = tl.load(Q + rows, mask=row_ok[:, None], other=0.0)
            do = tl.load(DO + rows, mask=row_ok[:, None], other=0.0)
            lse = tl.load(LSE + bh * NQ + offs_m, mask=row_ok, other=0.0) * 1.4426950408889634
            delta = tl.load(Delta + bh * NQ + offs_m, mask=row_ok, other=0.0)
            pT = tl.math.exp2(tl.dot(k, tl.trans(q)) * qk_scale - lse[None, :])  # [BLOCK_N, BLOCK_M]
            keep = row_ok[None, :] & ((offs_m[None, :] >= offs_n[:, None]) | (CAUSAL == 0))
            pT = tl.where(keep, pT, 0.0)
            dv = tl.dot(pT.to(do.dtype), do, dv)
            dsT = pT * (tl.dot(v, tl.trans(do)) - delta[None, :])
            dk = tl.dot(dsT.to(q.dtype), q, dk)
    tl.store(DK + kv, (dk * sm_scale).to(DK.dtype.element_ty), mask=offs_n[:, None] < NK)
    tl.store(DV + kv, dv.to(DV.dtype.element_ty), mask=offs_n[:, None] < NK)


def compact_dkdv(do, q, k, v, o, lse, causal):
    b, hq, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    q, k, v, do = (t.contiguous() for t in (q, k, v, do))
    delta = (o.float() * do.float()).sum(-1)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    dkdv_kernel[(triton.cdiv(nk, 16), b * hkv)](q, k, v, do, lse.contiguous(), delta, dk, dv, nq, nk, hq // hkv,
                                                d**-0.5 * LOG2E, d**-0.5, int(causal), HEAD_DIM=d, BLOCK_M=16,
                                                BLOCK_N=16)
    return dk, dv
