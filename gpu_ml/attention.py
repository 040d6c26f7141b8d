"""PyTorch-side helpers of the attention lessons: the causal mask, the input check of a reference attention, and
SDPA with grouped K/V heads on every GPU."""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from gpu_ml.env import capability


@lru_cache(maxsize=8)
def causal_mask(n: int, device: str) -> torch.Tensor:
    """[n, n] bool, True above the diagonal (key j > query i is masked out); cached per shape, like a model buffer."""
    i = torch.arange(n, device=device)
    return i[None, :] > i[:, None]


def check_qkv(q, k, v, causal: bool = False) -> None:
    """Refuse what attention over the last two dims cannot take: q [..., Nq, d], k [..., Nk, d], v [..., Nk, dv]
    with the same leading dims, one floating dtype and one device; causal (mask at the top left) needs Nq = Nk."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point() or t.dtype != q.dtype:
            raise TypeError(f"q, k, v must share one floating dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
        if t.device != q.device:
            raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    shapes = (f"shapes must be q [..., Nq, d], k [..., Nk, d], v [..., Nk, dv]; got "
              f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if min(q.dim(), k.dim(), v.dim()) < 2:
        raise ValueError(f"each must be [..., tokens, features]: {shapes}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k need the same head dim: {shapes}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v need the same number of tokens: {shapes}")
    if not q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        raise ValueError(f"q, k and v need the same leading (batch, head) dims: {shapes}")
    if causal and q.shape[-2] != k.shape[-2]:
        raise ValueError(f"causal attention here needs as many queries as keys, got {q.shape[-2]} and {k.shape[-2]}")


def gqa_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Fused attention where groups of query heads share a K/V head: q [B, H, T, d], k and v [B, G, S, d], G dividing H.

    SDPA's FlashAttention backend (with `enable_gqa`) on compute capability 8.0+; below it (a T4) the memory-efficient
    backend, which has no GQA, through `grouped_sdpa`. On a CPU the math backend: plain matmuls, which every torch
    version's FLOP counter sees.
    """
    if not q.is_cuda:
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    if capability() >= (8, 0):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        return grouped_sdpa(q, k, v, causal)


def fused_attention_name() -> str:
    """The fused backend `gqa_sdpa` takes on this GPU, for labels: FlashAttention-2 from 8.0, else memory-efficient."""
    cap = capability()
    return "FlashAttention-2" if cap is None or cap >= (8, 0) else "memory-efficient attention"


def grouped_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """SDPA over grouped K/V heads without `enable_gqa`, for a backend that lacks it. Without a mask the r = H / G query
    heads of a group become r * T rows over their K/V head, which is read once, as GQA does; a causal mask needs
    each query row's own position, so there each K/V head is repeated for its r query heads (a copy)."""
    B, H, T, d = q.shape
    if k.dim() != 4 or not k.shape[1] or H % k.shape[1]:
        raise ValueError(f"grouped_sdpa(): q's {H} heads must be a multiple of k's, got q {tuple(q.shape)} and k "
                         f"{tuple(k.shape)}")
    r = H // k.shape[1]
    if causal:
        return F.scaled_dot_product_attention(q, k.repeat_interleave(r, dim=1), v.repeat_interleave(r, dim=1),
                                              is_causal=True)
    return F.scaled_dot_product_attention(q.reshape(B, H // r, r * T, d), k, v).reshape(B, H, T, v.shape[-1])
