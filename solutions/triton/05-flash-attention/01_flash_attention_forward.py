"""Solutions to the exercises of triton/05-flash-attention/01_flash_attention_forward.ipynb (graded by
gpu_ml.exercises)."""

import torch
import triton.language as tl

import triton
from gpu_ml.kernels.triton.flash_attention import LOG2E, flash_attention_forward


# Exercise 1: sliding window. Query i sees keys i - WINDOW < j <= i. The block's first row, m0, sees nothing before
# m0 - WINDOW + 1, so the loop starts at the key block holding that key; the blocks that cross the left edge are
# masked like the diagonal ones. The first block a program visits may hold no key of a later row's window: that row's
# maximum is still -inf after it, and exp2(-inf - (-inf)) is NaN, so a maximum of -inf is replaced by 0 (its p are
# then exp2(-inf) = 0, and alpha = 0 wipes nothing). Every row sees itself in a later block.
@triton.jit
def window_attn_kernel(Q, K, V, Out, NQ, NK, qk_scale, WINDOW,
                       HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + bh * NQ * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_m[:, None] < NQ,
                other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    lo = tl.maximum(pid_m * BLOCK_M - WINDOW + 1, 0) // BLOCK_N * BLOCK_N  # the block of the first key in the window
    hi = tl.minimum(NK, (pid_m + 1) * BLOCK_M)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_ok = offs_n[:, None] < NK
        k = tl.load(K + bh * NK * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=kv_ok, other=0.0)
        v = tl.load(V + bh * NK * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=kv_ok, other=0.0)
        keep = ((offs_n[None, :] < NK) & (offs_n[None, :] <= offs_m[:, None])
                & (offs_n[None, :] > offs_m[:, None] - WINDOW))
        s = tl.where(keep, tl.dot(q, tl.trans(k)) * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_new = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen no key yet
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    tl.store(Out + bh * NQ * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :], out.to(Out.dtype.element_ty),
             mask=offs_m[:, None] < NQ)


def sliding_window_attention(q, k, v, window):
    b, h, nq, d = q.shape
    nk = k.shape[2]
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = torch.empty_like(q)
    window_attn_kernel[(triton.cdiv(nq, 16), b * h)](q, k, v, o, nq, nk, d**-0.5 * LOG2E, window,
                                                     HEAD_DIM=d, BLOCK_M=16, BLOCK_N=16)
    return o


# Exercise 2: causal aligned at the bottom right. Query i is at position i + OFFSET, OFFSET = NK - NQ, so it sees keys
# j <= i + OFFSET: the loop bound and the mask both move by OFFSET. With NQ > NK the first NQ - NK rows see no key:
# their maximum stays -inf, and exp2(-inf - (-inf)) would be NaN, so a row maximum of -inf is replaced by 0 (its p
# are then exp2(-inf) = 0) and a row sum of 0 gives an output of 0, as FlashAttention and SDPA do.
@triton.jit
def lower_right_attn_kernel(Q, K, V, Out, NQ, NK, qk_scale,
                            HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    offset = NK - NQ
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + bh * NQ * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_m[:, None] < NQ,
                other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    hi = tl.maximum(tl.minimum(NK, (pid_m + 1) * BLOCK_M + offset), 0)  # no key after the last row's position
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_ok = offs_n[:, None] < NK
        k = tl.load(K + bh * NK * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=kv_ok, other=0.0)
        v = tl.load(V + bh * NK * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=kv_ok, other=0.0)
        keep = (offs_n[None, :] < NK) & (offs_n[None, :] <= offs_m[:, None] + offset)
        s = tl.where(keep, tl.dot(q, tl.trans(k)) * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_new = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen no key yet
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # rows with no key: acc = 0, so 0
    tl.store(Out + bh * NQ * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :], out.to(Out.dtype.element_ty),
             mask=offs_m[:, None] < NQ)


def causal_lower_right_attention(q, k, v):
    b, h, nq, d = q.shape
    nk = k.shape[2]
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = torch.empty_like(q)
    lower_right_attn_kernel[(triton.cdiv(nq, 16), b * h)](q, k, v, o, nq, nk, d**-0.5 * LOG2E,
                                                          HEAD_DIM=d, BLOCK_M=16, BLOCK_N=16)
    return o


# Exercise 3: split-K decoding. Each chunk's forward gives its output o_s (normalized over the chunk) and its
# log-sum-exp L_s; the whole row's is L = logsumexp_s(L_s), and O = sum_s exp(L_s - L) o_s. Subtracting L (the
# largest L_s first, inside torch.logsumexp) keeps every exponential <= 1, however large the scores.
def split_k_attention(q, k, v, splits):
    size = triton.cdiv(k.shape[2], splits)
    parts = [flash_attention_forward(q, k[:, :, s:s + size], v[:, :, s:s + size])
             for s in range(0, k.shape[2], size)]
    lse = torch.stack([lse_s for _, lse_s in parts])  # [S, B, H, Nq]
    total = torch.logsumexp(lse, dim=0)
    weights = torch.exp(lse - total)[..., None]  # [S, B, H, Nq, 1]
    out = (weights * torch.stack([o_s.float() for o_s, _ in parts])).sum(0)
    return out.to(q.dtype)
