"""Solutions to the exercises of transformer-math/04_mha_mqa_gqa.ipynb (graded by gpu_ml.exercises)."""

import torch


# Exercise 1: groups of r = H / G consecutive query heads share a K/V head.
def kv_head_of(n_heads, n_kv_heads):
    if n_heads % n_kv_heads:
        raise ValueError(f"{n_heads} query heads cannot be split into {n_kv_heads} groups")
    return torch.arange(n_heads) // (n_heads // n_kv_heads)


# Exercise 2: the grouped reshape of gqa() (the r query heads of a group become r rows), with the cache slots past
# each sequence's length masked to -inf so that the stale values get weight 0.
def gqa_decode(q, k_cache, v_cache, lengths):
    B, H, _, d = q.shape
    G, S = k_cache.shape[1], k_cache.shape[2]
    qg = q.float().reshape(B, G, H // G, d)  # (B, G, r, d): query head h = g * r + i
    scores = qg @ k_cache.float().transpose(-2, -1) * d**-0.5  # (B, G, r, S)
    stale = torch.arange(S, device=q.device)[None, :] >= lengths.to(q.device)[:, None]  # (B, S)
    scores = scores.masked_fill(stale[:, None, None, :], float("-inf"))
    o = torch.softmax(scores, dim=-1) @ v_cache.float()  # (B, G, r, d)
    return o.reshape(B, H, 1, d).to(q.dtype)


# Exercise 3: F = 2 T^2 H d_h (half the square), bytes = s (2 T H d_h + 2 T G d_h): I = T H / (s (H + G)).
def prefill_intensity(T, n_heads, n_kv_heads, head_dim, s):
    return 2 * T * T * n_heads * head_dim / (s * (2 * T * n_heads * head_dim + 2 * T * n_kv_heads * head_dim))
