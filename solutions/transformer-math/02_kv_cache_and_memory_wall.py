"""Solutions to the exercises of transformer-math/02_kv_cache_and_memory_wall.ipynb (graded by gpu_ml.exercises)."""


# Exercise 1: what the weights leave, divided by the cache of one sequence; 0 (not a negative count) when the
# weights alone do not fit.
def sequences_that_fit(cfg, ctx, memory_bytes, weight_bytes, kv_bytes):
    room = memory_bytes - weight_bytes * cfg.params()
    per_sequence = ctx * 2 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * kv_bytes
    return max(0, room // per_sequence)


# Exercise 2: every weight of the layer once, and the K and V of the G cached heads of every sequence (bf16).
def bytes_per_step(cfg, batch, ctx):
    return 2 * cfg.layer_params() + 2 * batch * ctx * cfg.n_kv_heads * cfg.head_dim * 2


# Exercise 3: the roofline bound of a whole-model step (every layer and the LM head), whichever of bytes and
# FLOPs takes longer; batch tokens come out of each step.
def decode_tokens_per_s(cfg, batch, ctx, bandwidth_gbs, peak_tflops):
    layer_flops = 2 * batch * (cfg.layer_params() - 2 * cfg.d_model) + 4 * batch * cfg.n_heads * ctx * cfg.head_dim
    flops = cfg.n_layers * layer_flops + 2 * batch * cfg.vocab * cfg.d_model
    nbytes = cfg.n_layers * bytes_per_step(cfg, batch, ctx) + 2 * cfg.vocab * cfg.d_model
    seconds = max(nbytes / (bandwidth_gbs * 1e9), flops / (peak_tflops * 1e12))
    return batch / seconds
