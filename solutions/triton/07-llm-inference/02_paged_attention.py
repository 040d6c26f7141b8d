"""Solutions to the exercises of triton/07-llm-inference/02_paged_attention.ipynb (graded by gpu_ml.exercises)."""

import torch


# Exercise 1: every position's block (through the table) and row (inside the block), then one indexing of the pool
# with both: advanced indexing on the first two dimensions keeps [G, d] of each token.
def gather_sequence(k_pool, block_table, length):
    positions = torch.arange(length, device=k_pool.device)
    page = k_pool.shape[1]
    return k_pool[block_table[positions // page], positions % page]


# Exercise 2: the log-sum-exp merge with the larger lse subtracted first (every exponent <= 0); an empty part has
# lse = -inf and weight exp(-inf) = 0.
def merge_two_splits(o1, lse1, o2, lse2):
    m = torch.maximum(lse1, lse2)
    w1, w2 = torch.exp(lse1 - m), torch.exp(lse2 - m)
    return (w1[:, None] * o1 + w2[:, None] * o2) / (w1 + w2)[:, None]
