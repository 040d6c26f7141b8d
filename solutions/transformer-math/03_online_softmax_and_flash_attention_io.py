"""Solutions to the exercises of transformer-math/03_online_softmax_and_flash_attention_io.ipynb (graded by
gpu_ml.exercises)."""

import math

import torch


# Exercise 1: where both maxima are -inf, subtract 0 instead of m (as online_stats does): e^(-inf - 0) = 0, so
# the merged state of two empty states is (-inf, 0) instead of NaN.
def merge(a, b):
    (ma, la), (mb, lb) = a, b
    m = torch.maximum(ma, mb)
    m_safe = torch.where(m == float("-inf"), 0.0, m)
    return m, la * torch.exp(ma - m_safe) + lb * torch.exp(mb - m_safe)


# Exercise 2: four B_r x d tiles fit in M bytes; every query block streams all of K and V (ceil: the last block
# may be partial).
def tile_traffic(n, d, e, sram_bytes):
    block_rows = sram_bytes // (4 * d * e)
    return block_rows, e * (2 * n * d + 2 * n * d * math.ceil(n / block_rows))


# Exercise 3: e^(S - m) / l = e^(S - m - log l) = e^(S - L). One exponential whose argument is <= 0: no overflow.
def p_from_lse(s, lse):
    return torch.exp(s - lse[..., None])
