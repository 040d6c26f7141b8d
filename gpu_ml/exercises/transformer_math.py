"""Exercises of transformer-math/01-05: formulas (FLOPs, bytes, KV-cache sizes, intensities, critical batch sizes)
graded on several shapes against the lessons' own counts, and PyTorch functions (a bottom-right causal mask, the
merge of two online-softmax states, P from the saved log-sum-exp, ragged GQA decode) graded against torch."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import sdpa_backward_flop_count

from gpu_ml import hardware
from gpu_ml.exercises.core import Cases, Exercise, must_raise
from gpu_ml.models import LLAMA3_8B, LLAMA3_70B, ModelConfig
from gpu_ml.validate import kernel_device

_NB = "transformer-math/"
# Llama-3.1-405B's public shape (not in gpu_ml.models: no lesson runs it).
LLAMA3_405B = ModelConfig("Llama-3-405B", n_layers=126, d_model=16384, n_heads=128, n_kv_heads=8, head_dim=128,
                          d_ff=53248, vocab=128256)
_MHA_8B = dataclasses.replace(LLAMA3_8B, name="Llama-3-8B as MHA", n_kv_heads=LLAMA3_8B.n_heads)
_H200 = hardware.GPUS["H200"]


def _number(fn: Callable, *args) -> torch.Tensor:
    """What a formula returned, as a float64 scalar tensor (exact for integers below 2**53)."""
    return torch.tensor(float(fn(*args)), dtype=torch.float64)


def _scalar(value: float) -> torch.Tensor:
    return torch.tensor(float(value), dtype=torch.float64)


def _on_device(cases: dict[str, tuple]) -> Cases:
    return {name: tuple(a.to(kernel_device()) if isinstance(a, torch.Tensor) else a for a in args)
            for name, args in cases.items()}


# ---------------------------------------------------------------- 01: attention from scratch

def _sdpa_backward_flops(B: int, H: int, nq: int, nk: int, d: int) -> torch.Tensor:
    """What PyTorch's FlopCounterMode counts for a flash SDPA backward at this shape: its own rule,
    `sdpa_backward_flop_count` (running the CPU kernel under the counter would count 0 in torch 2.11,
    which does not register that kernel's backward)."""
    q, kv = (B, H, nq, d), (B, H, nk, d)
    return _scalar(sdpa_backward_flop_count(q, q, kv, kv))


def _naive_attention_bytes(B: int, H: int, N: int, d: int, e: int, causal: bool) -> torch.Tensor:
    """01's table: e BH (4N^2 + 6Nd), + 2 e BH N^2 and the N^2-byte bool mask (shared by all heads) when causal."""
    total = e * B * H * (4 * N * N + 6 * N * d)
    return _scalar(total + (2 * e * B * H * N * N + N * N if causal else 0))


def _causal_cases() -> Cases:
    """nq < nk (a prefill chunk after cached tokens, a decode step: a top-left mask shows), nq = nk, 1 token, fp16."""
    g = torch.Generator().manual_seed(0)
    cases = {}
    for B, H, nq, nk, d, dtype in ((1, 1, 1, 1, 8, torch.float32), (2, 3, 7, 7, 16, torch.float32),
                                   (2, 3, 1, 9, 16, torch.float32), (1, 2, 5, 23, 8, torch.float32),
                                   (2, 2, 6, 33, 32, torch.float16)):
        q, k, v = (torch.randn(B, H, n, d, generator=g).to(dtype) for n in (nq, nk, nk))
        cases[f"B={B} H={H} nq={nq} nk={nk} d={d}, {str(dtype).removeprefix('torch.')}"] = (q, k, v)
    return _on_device(cases)


def _causal_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    nq, nk = q.shape[-2], k.shape[-2]
    allowed = torch.ones(nq, nk, dtype=torch.bool, device=q.device).tril(diagonal=nk - nq)
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=allowed)


# ---------------------------------------------------------------- 02: KV cache and the memory wall

_MEMORY = 141_000_000_000  # bytes of an H200 (datasheet: 141 GB)


def _sequences_that_fit(cfg: ModelConfig, ctx: int, memory: int, weight_bytes: int, kv_bytes: int) -> torch.Tensor:
    room = memory - weight_bytes * cfg.params()
    return _scalar(max(0, room // (ctx * cfg.kv_bytes_per_token(kv_bytes))))


def _decode_cost(cfg: ModelConfig, batch: int, ctx: int, s: int = 2) -> tuple[int, int]:
    """02's decode_cost for one layer: (FLOPs, bytes)."""
    flops = 2 * batch * (cfg.layer_params() - 2 * cfg.d_model) + 4 * batch * cfg.n_heads * ctx * cfg.head_dim
    return flops, s * cfg.layer_params() + 2 * batch * ctx * cfg.n_kv_heads * cfg.head_dim * s


def _decode_tokens_per_s(cfg: ModelConfig, batch: int, ctx: int, bandwidth_gbs: float,
                         peak_tflops: float) -> torch.Tensor:
    flops, nbytes = _decode_cost(cfg, batch, ctx)
    flops = cfg.n_layers * flops + 2 * batch * cfg.vocab * cfg.d_model  # + the LM head
    nbytes = cfg.n_layers * nbytes + 2 * cfg.vocab * cfg.d_model
    return _scalar(batch / max(nbytes / (bandwidth_gbs * 1e9), flops / (peak_tflops * 1e12)))


# ---------------------------------------------------------------- 03: online softmax and FlashAttention IO

def _stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(max, sum of exp(x - max)) over the last dim; (-inf, 0) for a row that is all -inf."""
    m = x.amax(dim=-1)
    m_safe = torch.where(m == float("-inf"), 0.0, m)
    return m, torch.exp(x - m_safe[..., None]).sum(dim=-1)


def _merge_cases() -> Cases:
    """Rows split in two parts of unequal length. Ordinary rows first, then the cases of the lesson: +-1e4 (exp
    overflows without the max), one part all -inf (a masked block), then both parts all -inf (a fully masked row,
    where e^(-inf - (-inf)) is NaN)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 50, generator=g, dtype=torch.float64) * 3
    big = torch.where(torch.rand(4, 50, generator=g) < 0.5, -1e4, 1e4).double() * torch.rand(4, 50, generator=g)
    masked = torch.randn(4, 50, generator=g, dtype=torch.float64)
    masked[0, :20] = float("-inf")  # first part all -inf
    masked[1, 20:] = float("-inf")  # second part all -inf
    masked[2, ::3] = float("-inf")  # scattered
    fully = masked.clone()
    fully[3] = float("-inf")  # a row with nothing allowed at all
    cases = {"N(0, 3^2), parts of 20 and 30": (x[:, :20], x[:, 20:]),
             "+-1e4, parts of 1 and 49": (big[:, :1], big[:, 1:]),
             "one part all -inf": (masked[:, :20], masked[:, 20:]),
             "a row all -inf (both parts)": (fully[:, :20], fully[:, 20:])}
    return _on_device(cases)


def _merge_call(fn: Callable, xa: torch.Tensor, xb: torch.Tensor):
    a, b = _stats(xa), _stats(xb)
    m, ell = fn(a, b)
    # check() takes any finite value for an expected -inf (its rtol * inf), so the -inf of the max is checked here
    empty = torch.isneginf(a[0]) & torch.isneginf(b[0])
    if not torch.equal(torch.isneginf(m), empty):
        raise AssertionError("the merged max must be -inf exactly where both states are (-inf, 0) (rows "
                             f"{empty.nonzero().flatten().tolist()}), got {m.tolist()}")
    return m, ell


def _tile_traffic(n: int, d: int, e: int, sram_bytes: int) -> torch.Tensor:
    br = sram_bytes // (4 * d * e)
    return torch.tensor([br, e * (2 * n * d + 2 * n * d * math.ceil(n / br))], dtype=torch.float64)


def _p_cases() -> Cases:
    """Scores of 40 x 40 heads; scores ~ N(0, 40^2) (exp overflows fp32 above 88); a causal mask (-inf)."""
    g = torch.Generator().manual_seed(0)
    s = torch.randn(2, 3, 40, 40, generator=g)
    wide = torch.randn(2, 3, 40, 40, generator=g) * 40
    causal = torch.randn(1, 2, 17, 17, generator=g, dtype=torch.float64).masked_fill(
        torch.ones(17, 17, dtype=torch.bool).triu(1), float("-inf"))
    cases = {"N(0, 1) scores, fp32": s, "N(0, 40^2) scores, fp32": wide,
             "causal (-inf above the diagonal), fp64": causal}
    return _on_device({name: (t, torch.logsumexp(t, dim=-1)) for name, t in cases.items()})


# ---------------------------------------------------------------- 04: MHA, MQA, GQA

def _kv_head_call(fn: Callable, n_heads: int, n_kv_heads: int) -> torch.Tensor:
    heads = torch.as_tensor(fn(n_heads, n_kv_heads)).to(torch.int64)
    must_raise(fn, (6, 4), ValueError, "kv_head_of(6, 4): 6 query heads cannot be split into 4 groups")
    return heads


def _gqa_decode_cases() -> Cases:
    """Ragged batches: sequence b holds lengths[b] tokens, and the cache past them holds stale values of 1e4 (read
    them and the output is wrong). G between 1 and H (a mapping h % G shows), G = H (MHA), G = 1 (MQA), fp16."""
    g = torch.Generator().manual_seed(0)
    cases = {}
    for B, H, G, S, d, lengths, dtype in ((3, 8, 2, 12, 16, [1, 12, 5], torch.float32),
                                          (2, 4, 4, 9, 8, [9, 3], torch.float32),
                                          (2, 6, 1, 7, 8, [2, 7], torch.float32),
                                          (4, 8, 4, 20, 32, [20, 1, 13, 8], torch.float16)):
        q = torch.randn(B, H, 1, d, generator=g)
        k, v = torch.randn(B, G, S, d, generator=g), torch.randn(B, G, S, d, generator=g)
        for b, n in enumerate(lengths):
            k[b, :, n:], v[b, :, n:] = 1e4, -1e4  # stale cache slots
        args = (q.to(dtype), k.to(dtype), v.to(dtype), torch.tensor(lengths))
        cases[f"B={B} H={H} G={G} S={S} d={d} lengths={lengths}, {str(dtype).removeprefix('torch.')}"] = args
    return _on_device(cases)


def _gqa_decode_reference(q, k, v, lengths) -> torch.Tensor:
    return torch.cat([F.scaled_dot_product_attention(q[b:b + 1].float(), k[b:b + 1, :, :n].float(),
                                                     v[b:b + 1, :, :n].float(), enable_gqa=True)
                      for b, n in enumerate(lengths.tolist())])


def _prefill_intensity(T: int, H: int, G: int, head_dim: int, s: int) -> torch.Tensor:
    return _scalar(2 * T * T * H * head_dim / (s * (2 * T * H * head_dim + 2 * T * G * head_dim)))


# ---------------------------------------------------------------- 05: roofline, prefill vs decode

def _never_or_rows(m: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(whether m is inf, m or 0): check() cannot tell a finite value from an expected inf (rtol * inf), so the
    "never reaches the ridge" answer is graded as a flag of its own."""
    return torch.tensor(float(math.isinf(m)), dtype=torch.float64), _scalar(0.0 if math.isinf(m) else m)


def _critical_batch(ridge: float, K: int, N: int, s: int) -> tuple[torch.Tensor, torch.Tensor]:
    """2 M K N = ridge * s (MK + KN + MN), solved for M; inf when the shape never reaches the ridge."""
    denominator = 2 * K * N - ridge * s * (K + N)
    return _never_or_rows(math.inf if denominator <= 0 else ridge * s * K * N / denominator)


def _intensity_limit(cfg: ModelConfig, ctx: int, s: int) -> torch.Tensor:
    """Decode step of one layer: (2B P' + 4BHS d_h) / (sP + 2sBGS d_h) as B -> infinity."""
    p_matmul = cfg.layer_params() - 2 * cfg.d_model
    return _scalar((2 * p_matmul + 4 * cfg.n_heads * ctx * cfg.head_dim)
                   / (2 * s * cfg.n_kv_heads * ctx * cfg.head_dim))


_RIDGE_BF16, _RIDGE_FP8 = _H200.ridge("bf16"), _H200.ridge("fp8")

EXERCISES = [
    # 01: sigma_q != sigma_k (sigma_q * sigma_k instead of their squares shows) and d from 1 to 128.
    Exercise("score_variance", _NB + "01_attention_from_scratch.ipynb", "score_variance",
             lambda: {f"sigma_q={sq}, sigma_k={sk}, d={d}": (sq, sk, d)
                      for sq, sk, d in ((2.0, 0.5, 64), (1.0, 1.0, 128), (3.0, 1.0, 1), (0.1, 7.0, 10))},
             reference=lambda sq, sk, d: _scalar(sq**2 * sk**2 * d), call=_number, atol=0, rtol=1e-9),
    # nq != nk (an N^2 shows), one token, several heads and batches; graded against FlopCounterMode's own rule.
    Exercise("sdpa_backward_flops", _NB + "01_attention_from_scratch.ipynb", "sdpa_backward_flops",
             lambda: {f"B={B} H={H} nq={nq} nk={nk} d={d}": (B, H, nq, nk, d)
                      for B, H, nq, nk, d in ((2, 3, 64, 64, 32), (1, 2, 5, 23, 8), (1, 1, 1, 1, 4), (2, 1, 7, 3, 16))},
             reference=_sdpa_backward_flops, call=_number, atol=0, rtol=0),
    # causal and not, 2- and 4-byte elements, B*H > 1 (a mask counted once per head shows), N = 1.
    Exercise("naive_attention_bytes", _NB + "01_attention_from_scratch.ipynb", "naive_attention_bytes",
             lambda: {f"B={B} H={H} N={N} d={d} e={e} causal={c}": (B, H, N, d, e, c)
                      for B, H, N, d, e, c in ((2, 3, 50, 16, 4, False), (2, 3, 50, 16, 2, True), (1, 1, 1, 8, 2, True),
                                               (1, 64, 32768, 128, 2, True), (4, 16, 4096, 128, 2, False))},
             reference=_naive_attention_bytes, call=_number, atol=0, rtol=0),
    Exercise("causal_attention", _NB + "01_attention_from_scratch.ipynb", "causal_attention", _causal_cases,
             reference=_causal_reference, call=lambda fn, *args: fn(*args), atol=1e-5, rtol=1e-5),
    # 02: weights that do not fit (0, not a negative count), an fp8 cache, fp8 weights, one-token contexts.
    Exercise("sequences_that_fit", _NB + "02_kv_cache_and_memory_wall.ipynb", "sequences_that_fit",
             lambda: {f"{cfg.name}, {ctx} tokens, weights {w} B, cache {kv} B": (cfg, ctx, _MEMORY, w, kv)
                      for cfg, ctx, w, kv in ((LLAMA3_8B, 8192, 2, 2), (LLAMA3_8B, 8192, 2, 1), (LLAMA3_8B, 1, 2, 2),
                                              (LLAMA3_70B, 8192, 2, 2), (LLAMA3_70B, 32768, 1, 1),
                                              (LLAMA3_405B, 8192, 1, 1))},
             reference=_sequences_that_fit, call=_number, atol=0, rtol=0),
    # GQA shapes (n_heads instead of n_kv_heads shows), MHA, batch 1 to 128.
    Exercise("bytes_per_step", _NB + "02_kv_cache_and_memory_wall.ipynb", "bytes_per_step",
             lambda: {f"{cfg.name}, batch {b}, {ctx} tokens": (cfg, b, ctx)
                      for cfg, b, ctx in ((LLAMA3_70B, 8, 8192), (LLAMA3_8B, 3, 1000), (_MHA_8B, 1, 1),
                                          (LLAMA3_8B, 128, 32768))},
             reference=lambda cfg, b, ctx: _scalar(_decode_cost(cfg, b, ctx)[1]), call=_number, atol=0, rtol=0),
    # a batch of 4096 with a short context is compute-bound: a bound from bytes alone shows.
    Exercise("decode_tokens_per_s", _NB + "02_kv_cache_and_memory_wall.ipynb", "decode_tokens_per_s",
             lambda: {f"{cfg.name}, batch {b}, {ctx} tokens, {bw} GB/s, {peak} TFLOP/s": (cfg, b, ctx, bw, peak)
                      for cfg, b, ctx, bw, peak in ((LLAMA3_8B, 1, 1024, 4800, 989.5), (LLAMA3_8B, 32, 8192, 4246, 699),
                                                    (LLAMA3_70B, 8, 8192, 4800, 989.5),
                                                    (LLAMA3_8B, 4096, 16, 4800, 989.5))},
             reference=_decode_tokens_per_s, call=_number, atol=0, rtol=1e-9),
    # 03: the lesson's merge, which gives NaN when both states are (-inf, 0), is the stub.
    Exercise("merge_states", _NB + "03_online_softmax_and_flash_attention_io.ipynb", "merge", _merge_cases,
             reference=lambda xa, xb: _stats(torch.cat([xa, xb], dim=-1)), call=_merge_call),
    # n not a multiple of B_r (floor instead of ceil shows), n < B_r (one block), fp32 and 64 KB (B_r = 32).
    Exercise("tile_traffic", _NB + "03_online_softmax_and_flash_attention_io.ipynb", "tile_traffic",
             lambda: {f"n={n} d={d} e={e} M={m // 1024} KB": (n, d, e, m)
                      for n, d, e, m in ((8192, 64, 2, 227 * 1024), (1000, 128, 2, 227 * 1024),
                                         (100, 128, 2, 227 * 1024), (4096, 128, 4, 64 * 1024))},
             reference=_tile_traffic, call=lambda fn, *args: torch.tensor([float(x) for x in fn(*args)],
                                                                          dtype=torch.float64), atol=0, rtol=0),
    Exercise("p_from_lse", _NB + "03_online_softmax_and_flash_attention_io.ipynb", "p_from_lse", _p_cases,
             reference=lambda s, lse: torch.softmax(s, dim=-1), call=lambda fn, *args: fn(*args), atol=1e-6, rtol=1e-4),
    # 04: MHA (identity), MQA (all 0), groups of 4 and 8, H = 6; and H % G != 0 must raise ValueError.
    Exercise("kv_head_of", _NB + "04_mha_mqa_gqa.ipynb", "kv_head_of",
             lambda: {f"H={H}, G={G}": (H, G) for H, G in ((32, 8), (8, 8), (8, 1), (6, 3), (64, 8), (1, 1))},
             reference=lambda H, G: torch.arange(H) // (H // G), call=_kv_head_call),
    Exercise("gqa_decode", _NB + "04_mha_mqa_gqa.ipynb", "gqa_decode", _gqa_decode_cases,
             reference=_gqa_decode_reference, call=lambda fn, *args: fn(*args), atol=1e-5, rtol=1e-4),
    Exercise("prefill_intensity", _NB + "04_mha_mqa_gqa.ipynb", "prefill_intensity",
             lambda: {f"T={T} H={H} G={G} d_h={hd} s={s}": (T, H, G, hd, s)
                      for T, H, G, hd, s in ((1, 32, 8, 128, 2), (4096, 32, 8, 128, 2), (100, 64, 1, 128, 2),
                                             (77, 8, 8, 64, 1), (4096, 64, 8, 128, 1))},
             reference=_prefill_intensity, call=_number, atol=0, rtol=1e-9),
    # 05: s = 1 (fp8: forgetting the element size shows) and a shape too small ever to reach the ridge (inf; graded
    # as output 0, 1.0 where M* is inf, and output 1, M* or 0 there).
    Exercise("critical_batch", _NB + "05_roofline_prefill_vs_decode.ipynb", "critical_batch",
             lambda: {f"ridge {r:.1f}, K={K}, N={N}, s={s}": (r, K, N, s)
                      for r, K, N, s in ((_RIDGE_BF16, 4096, 4096, 2), (_RIDGE_BF16, 4096, 28672, 2),
                                         (_RIDGE_BF16, 14336, 4096, 2), (_RIDGE_FP8, 8192, 8192, 1),
                                         (_RIDGE_BF16, 256, 256, 2))},
             reference=_critical_batch, call=lambda fn, *args: _never_or_rows(float(fn(*args))), atol=0, rtol=1e-9),
    Exercise("decode_intensity_limit", _NB + "05_roofline_prefill_vs_decode.ipynb", "decode_intensity_limit",
             lambda: {f"{cfg.name}, S={S}, s={s}": (cfg, S, s)
                      for cfg, S, s in ((LLAMA3_8B, 32768, 2), (LLAMA3_8B, 1024, 2), (LLAMA3_70B, 8192, 2),
                                        (LLAMA3_8B, 32768, 1), (_MHA_8B, 8192, 2))},
             reference=_intensity_limit, call=_number, atol=0, rtol=1e-9),
]
