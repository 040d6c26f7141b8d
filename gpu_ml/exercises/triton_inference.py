"""Exercises of triton/07-llm-inference: the slot of each token in a paged KV cache and the blocks a batch that
shares a prompt holds (graded against the lesson's own PagedKVCache, gpu_ml.kernels.triton.paged_kv); gathering a
sequence from the pool, and merging two flash-decoding splits by their log-sum-exp; undoing RoPE, and the batch at
which a layer's KV-cache reads overtake its weight reads."""

from __future__ import annotations

import torch

from gpu_ml.exercises.core import Cases, Exercise
from gpu_ml.validate import kernel_device

_NB = "triton/07-llm-inference/01_paged_kv_cache.ipynb"
_NB2 = "triton/07-llm-inference/02_paged_attention.ipynb"
_NB3 = "triton/07-llm-inference/03_decode_step.ipynb"


def _slot_cases() -> Cases:
    """Non-adjacent blocks, positions in and out of order, one block, a position at a block's last slot."""
    g = torch.Generator().manual_seed(0)
    table = torch.tensor([7, 2, 9, 0, 5])
    return {name: (t.to(kernel_device()), p.to(kernel_device()), bs) for name, (t, p, bs) in {
        "block 4, every position": (table, torch.arange(20), 4),
        "block 16, shuffled positions": (table, torch.randperm(80, generator=g), 16),
        "one block": (torch.tensor([3]), torch.arange(8), 8),
        "last slots": (table, torch.tensor([3, 7, 11, 15, 19]), 4),
    }.items()}


def _slot_reference(block_table: torch.Tensor, positions: torch.Tensor, block_size: int) -> torch.Tensor:
    return block_table[positions // block_size] * block_size + positions % block_size


def _shared_prefix_blocks(prefix_len: int, lengths: tuple[int, ...], block_size: int) -> torch.Tensor:
    """Run it: a prompt of prefix_len tokens, forked once per request, the prompt freed, then every request
    written up to its length; the blocks the pool holds at the end."""
    from gpu_ml.kernels.triton.paged_kv import PagedKVCache

    most = -(-prefix_len // block_size) + sum(-(-n // block_size) for n in lengths)  # never more held at once
    cache = PagedKVCache(most + 1, block_size, 1, 1, dtype=torch.float32)
    cache.add("prompt")
    cache.append("prompt", torch.zeros(prefix_len, 1, 1), torch.zeros(prefix_len, 1, 1))
    for i in range(len(lengths)):
        cache.fork("prompt", i)
    cache.free_sequence("prompt")
    for i, n in enumerate(lengths):
        cache.append(i, torch.zeros(n - prefix_len, 1, 1), torch.zeros(n - prefix_len, 1, 1))
    return torch.tensor(float(cache.blocks_in_use()), dtype=torch.float64)


def _gather_cases() -> Cases:
    """Pages of 4 and 5 (not dividing the length), shuffled blocks, one token, a length ending on a page boundary."""
    g = torch.Generator().manual_seed(1)
    pool4, pool5 = torch.randn(9, 4, 2, 3, generator=g), torch.randn(7, 5, 1, 4, generator=g)
    cases = {"page 4, 10 tokens": (pool4, torch.tensor([6, 0, 3]), 10),
             "page 4, 1 token": (pool4, torch.tensor([8]), 1),
             "page 4, 12 tokens": (pool4, torch.tensor([2, 7, 1]), 12),
             "page 5, 13 tokens": (pool5, torch.tensor([4, 6, 0]), 13)}
    return {name: (p.to(kernel_device()), t.to(kernel_device()), n) for name, (p, t, n) in cases.items()}


def _gather_reference(k_pool: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    positions = torch.arange(length, device=k_pool.device)
    return k_pool[block_table[positions // k_pool.shape[1]], positions % k_pool.shape[1]]


def _merge_cases() -> Cases:
    """Comparable parts, one part dominating (lse 80 apart: exp would overflow without the shift), an empty part."""
    g = torch.Generator().manual_seed(2)
    o1, o2 = torch.randn(3, 8, generator=g), torch.randn(3, 8, generator=g)
    inf = float("-inf")
    cases = {"close": (torch.tensor([0.5, 2.0, -1.0]), torch.tensor([0.7, 1.0, -3.0])),
             "far apart": (torch.tensor([100.0, 20.0, 0.0]), torch.tensor([20.0, 100.0, 90.0])),
             "an empty part": (torch.tensor([inf, 3.0, 1.0]), torch.tensor([2.0, inf, 1.0]))}
    return {name: tuple(t.to(kernel_device()) for t in (o1, l1, o2, l2)) for name, (l1, l2) in cases.items()}


def _merge_reference(o1, lse1, o2, lse2) -> torch.Tensor:
    lse = torch.logaddexp(lse1.double(), lse2.double())
    w1, w2 = torch.exp(lse1.double() - lse)[:, None], torch.exp(lse2.double() - lse)[:, None]
    return (w1 * o1.double() + w2 * o2.double()).float()


def _rope_cases() -> Cases:
    """Position 0 (no rotation), small and large positions (32k: angles of thousands of radians), d = 2 and 64."""
    from gpu_ml.kernels.triton.decode import rope_frequencies

    g = torch.Generator().manual_seed(3)
    cases = {}
    for name, positions, d in (("position 0", [0, 0], 8), ("d = 2", [1, 5, 9], 2),
                               ("positions up to 32767, d = 64", [3, 1000, 32767], 64)):
        x = torch.randn(len(positions), 3, d, generator=g)
        cases[name] = (x, torch.tensor(positions), rope_frequencies(d))
    return {name: tuple(t.to(kernel_device()) for t in args) for name, args in cases.items()}


def _rope_inverse_reference(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    angle = (positions.float()[:, None] * inv_freq[None, :]).double()[:, None, :]  # the float32 angle, as rotated
    x1, x2 = x[..., : x.shape[-1] // 2].double(), x[..., x.shape[-1] // 2 :].double()
    return torch.cat([x1 * angle.cos() + x2 * angle.sin(), x2 * angle.cos() - x1 * angle.sin()], dim=-1).float()


def _takeover_reference(cfg, ctx: int) -> torch.Tensor:
    per_sequence = ctx * 2 * cfg.n_kv_heads * cfg.head_dim
    return torch.tensor(float(max(1, -(-cfg.layer_params() // per_sequence))), dtype=torch.float64)


def _takeover_cases():
    from gpu_ml.models import LLAMA3_8B, LLAMA3_70B, ModelConfig

    tiny = ModelConfig("tiny", n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=160, vocab=0)
    return {f"{cfg.name}, ctx {ctx}": (cfg, ctx) for cfg, ctx in (
        (LLAMA3_8B, 1024), (LLAMA3_8B, 32768), (LLAMA3_70B, 8192), (tiny, 1), (tiny, 10**6))}


EXERCISES = [
    Exercise("slot_mapping", _NB, "slot_mapping", _slot_cases, reference=_slot_reference,
             call=lambda fn, *args: fn(*args), atol=0, rtol=0),
    # A prompt that fills whole blocks, one that ends inside a block (copy on write), a request that never writes
    # past the prompt (it keeps sharing the prompt's last block), no prompt at all.
    Exercise("shared_prefix_blocks", _NB, "shared_prefix_blocks",
             lambda: {f"prefix={p} lengths={ls} block={bs}": (p, ls, bs) for p, ls, bs in (
                 (32, (40, 33, 100), 16), (10, (11, 30, 64, 17), 4), (10, (10, 12), 4), (0, (5, 9, 16), 8),
                 (100, (100, 100), 16))},
             reference=_shared_prefix_blocks,
             call=lambda fn, *args: torch.tensor(float(fn(*args)), dtype=torch.float64), atol=0, rtol=0),
    Exercise("gather_sequence", _NB2, "gather_sequence", _gather_cases, reference=_gather_reference,
             call=lambda fn, *args: fn(*args), atol=0, rtol=0),
    Exercise("merge_two_splits", _NB2, "merge_two_splits", _merge_cases, reference=_merge_reference,
             call=lambda fn, *args: fn(*args), atol=1e-6, rtol=1e-5),
    Exercise("rope_inverse", _NB3, "rope_inverse", _rope_cases, reference=_rope_inverse_reference,
             call=lambda fn, *args: fn(*args), atol=1e-5, rtol=1e-5),
    Exercise("cache_takeover_batch", _NB3, "cache_takeover_batch", _takeover_cases, reference=_takeover_reference,
             call=lambda fn, *args: torch.tensor(float(fn(*args)), dtype=torch.float64), atol=0, rtol=0),
]
