"""PyTorch-side helpers of the attention lessons: the causal mask and the input check of a reference attention."""

from __future__ import annotations

from functools import lru_cache

import torch


@lru_cache(maxsize=8)
def causal_mask(n: int, device: str) -> torch.Tensor:
    """[n, n] bool, True above the diagonal (key j > query i is masked out); cached per shape, like a model buffer."""
    i = torch.arange(n, device=device)
    return i[None, :] > i[:, None]


def check_qkv(q, k, v, causal: bool = False) -> None:
    """Refuse what attention over the last two dims cannot take: q [..., Nq, d], k [..., Nk, d], v [..., Nk, dv]
    with the same leading dims and one floating dtype; causal (mask at the top left) needs Nq = Nk."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point() or t.dtype != q.dtype:
            raise TypeError(f"q, k, v must share one floating dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
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
