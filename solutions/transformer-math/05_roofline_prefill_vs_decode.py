"""Solutions to the exercises of transformer-math/05_roofline_prefill_vs_decode.ipynb (graded by gpu_ml.exercises)."""

import math


# Exercise 1: 2 M K N = ridge * s (MK + KN + MN)  =>  M (2KN - ridge s (K + N)) = ridge s K N. When the bracket is
# not positive, even M -> infinity gives an intensity 2KN / (s (K + N)) below the ridge.
def critical_batch(ridge, K, N, s):
    denominator = 2 * K * N - ridge * s * (K + N)
    return math.inf if denominator <= 0 else ridge * s * K * N / denominator


# Exercise 2: keep the terms proportional to B: (2B P' + 4BHS d_h) / (sP + 2sBGS d_h) -> (2P' + 4HS d_h) / (2sGS d_h),
# with P' the matmul weights (the layer's parameters without its two norm vectors).
def decode_intensity_limit(cfg, ctx, s):
    p_matmul = cfg.layer_params() - 2 * cfg.d_model
    return (2 * p_matmul + 4 * cfg.n_heads * ctx * cfg.head_dim) / (2 * s * cfg.n_kv_heads * ctx * cfg.head_dim)
