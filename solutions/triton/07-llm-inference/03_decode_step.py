"""Solutions to the exercises of triton/07-llm-inference/03_decode_step.ipynb (graded by gpu_ml.exercises)."""

import torch


# Exercise 1: the same angles as the rotation (one float32 product per pair), applied with the opposite sign: a
# rotation by -a is cos(a) on the diagonal and the sine terms swapped in sign.
def rope_inverse(x, positions, inv_freq):
    angle = positions.float()[:, None] * inv_freq[None, :]
    cos, sin = angle.cos()[:, None, :], angle.sin()[:, None, :]
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat([x1 * cos + x2 * sin, x2 * cos - x1 * sin], dim=-1)


# Exercise 2: per layer, the weights are layer_params() values and one sequence's cache ctx * 2 * G * d values (the
# bytes per value cancel); the cache reads of B sequences reach the weights' at B = ceil(weights / per sequence).
def cache_takeover_batch(cfg, ctx):
    per_sequence = ctx * 2 * cfg.n_kv_heads * cfg.head_dim
    return max(1, -(-cfg.layer_params() // per_sequence))
