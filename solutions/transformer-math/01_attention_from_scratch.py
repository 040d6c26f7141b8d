"""Solutions to the exercises of transformer-math/01_attention_from_scratch.ipynb (graded by gpu_ml.exercises)."""

import torch


# Exercise 1: Var(q.k) = sum of d independent products q_i k_i, each of variance E[q_i^2] E[k_i^2].
def score_variance(sigma_q, sigma_k, d):
    return d * sigma_q**2 * sigma_k**2


# Exercise 2: the four products of the backward (dV, dP, dQ, dK) plus the recomputed S = QK^T, 2 nq nk d each.
def sdpa_backward_flops(B, H, nq, nk, d):
    return 5 * 2 * B * H * nq * nk * d


# Exercise 3: the table of section 9. The bool mask is one N x N tensor shared by every head: N^2 bytes, once.
def naive_attention_bytes(B, H, N, d, e, causal):
    total = e * B * H * (4 * N * N + 6 * N * d)
    if causal:
        total += 2 * e * B * H * N * N + N * N  # masked_fill_ reads and writes S, and reads the mask
    return total


# Exercise 4: query i is token nk - nq + i, so it sees keys j <= i + (nk - nq): the mask is aligned bottom-right,
# tril with diagonal nk - nq (tril(0) would be PyTorch's is_causal, aligned top-left).
def causal_attention(q, k, v):
    nq, nk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    s = (q.float() @ k.float().transpose(-2, -1)) * d**-0.5
    allowed = torch.ones(nq, nk, dtype=torch.bool, device=q.device).tril(diagonal=nk - nq)
    s = s.masked_fill(~allowed, float("-inf"))
    return (torch.softmax(s, dim=-1) @ v.float()).to(q.dtype)
