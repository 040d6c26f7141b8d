"""Exercises of triton/04-mnist-classifier and triton/05-flash-attention."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from gpu_ml.exercises.core import Cases, Exercise
from gpu_ml.validate import kernel_device

MNIST = "triton/04-mnist-classifier/01_mnist_mlp.ipynb"
FORWARD = "triton/05-flash-attention/01_flash_attention_forward.ipynb"
BACKWARD = "triton/05-flash-attention/02_flash_attention_backward.ipynb"


# --- MNIST: Adam over the flat buffers, and a dW/db kernel that accumulates -----------------------------------------

def _adam_cases() -> Cases:
    """A flat buffer of 1 element, one not a multiple of the block, and gradients of 1e-8 (where eps sits in the
    update decides the step); three steps each, so the bias corrections 1 - beta^t change from step to step."""
    g = torch.Generator().manual_seed(0)
    cases = {}
    for name, n, scale in (("n=1", 1, 1.0), ("n=1000", 1000, 1.0), ("n=4099", 4099, 1.0),
                           ("n=300, gradients of 1e-8", 300, 1e-8)):
        p = torch.randn(n, generator=g)
        grads = torch.stack([scale * torch.randn(n, generator=g) for _ in range(3)])
        cases[name] = (p.to(kernel_device()), grads.to(kernel_device()))
    return cases


ADAM = {"lr": 0.01, "betas": (0.9, 0.999), "eps": 1e-8}


def _adam_reference(p: torch.Tensor, grads: torch.Tensor) -> torch.Tensor:
    """What torch.optim.Adam leaves in p after one step per gradient."""
    p = p.clone().requires_grad_()
    opt = torch.optim.Adam([p], **ADAM)
    for g in grads:
        p.grad = g.clone()
        opt.step()
    return p.detach()


def _adam_attempt(fn: Callable, p: torch.Tensor, grads: torch.Tensor) -> torch.Tensor:
    """fn(p, g, m, v, step, lr, beta1, beta2, eps) once per gradient (step = 1, 2, 3), in place; returns p."""
    p, m, v = p.clone(), torch.zeros_like(p), torch.zeros_like(p)
    for step, g in enumerate(grads, start=1):
        fn(p, g.clone(), m, v, step, ADAM["lr"], *ADAM["betas"], ADAM["eps"])
    return p


def _dw_cases() -> Cases:
    """(x, dy, y, dw, db): y a ReLU output (zeros where the unit was off), dw and db already holding a gradient (an
    overwrite loses it). 1 x 1 x 1; K spanning several 32-row tiles (db added by every tile row counts it several
    times); sizes that are multiples of no block; the MNIST head (batch 64, 512 -> 10)."""
    g = torch.Generator().manual_seed(0)
    cases = {}
    for b, k, n in ((1, 1, 1), (37, 100, 65), (64, 512, 10), (5, 33, 40)):
        x = torch.randn(b, k, generator=g)
        dy = torch.randn(b, n, generator=g)
        y = torch.relu(torch.randn(b, n, generator=g))
        dw, db = torch.randn(k, n, generator=g), torch.randn(n, generator=g)
        cases[f"batch {b}, {k} -> {n}"] = tuple(t.to(kernel_device()) for t in (x, dy, y, dw, db))
    return cases


def _dw_reference(x, dy, y, dw, db):
    dz = (dy * (y > 0)).double()
    return dw.double() + x.double().T @ dz, db.double() + dz.sum(0)


def _dw_attempt(fn: Callable, x, dy, y, dw, db):
    """fn(x, dy, y, dw, db) on copies of dw and db; returns what it left in them."""
    dw, db = dw.clone(), db.clone()
    fn(x, dy, y, dw, db)
    return dw, db


# --- FlashAttention: tiny fp16 heads of 16 (the interpreter is slow) ------------------------------------------------

def _qkv(g: torch.Generator, b: int, hq: int, hkv: int, nq: int, nk: int, d: int = 16, q_scale: float = 1.0):
    q = (q_scale * torch.randn(b, hq, nq, d, generator=g)).half()
    k, v = (torch.randn(b, hkv, nk, d, generator=g).half() for _ in range(2))
    return tuple(t.to(kernel_device()) for t in (q, k, v))


def _sdpa(q, k, v, allowed=None, causal=False):
    """SDPA in fp32 from the half-precision inputs (rows with no allowed key give 0)."""
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=allowed, is_causal=causal,
                                          enable_gqa=True)


def _window_mask(nq: int, nk: int, window: int, device) -> torch.Tensor:
    i, j = torch.arange(nq, device=device)[:, None], torch.arange(nk, device=device)[None, :]
    return (j <= i) & (j > i - window)


def _window_cases() -> Cases:
    """(q, k, v, window): window 1 (only the diagonal), windows shorter than, equal to and longer than a 16-key block
    (the loop must start later, and the blocks that cross the window's left edge need the mask), a window as long as
    the sequence (plain causal), 1 token, and a window longer than the sequence."""
    g = torch.Generator().manual_seed(0)
    cases = {}
    for n, window in ((1, 1), (17, 1), (70, 24), (70, 16), (70, 5), (70, 70), (40, 100)):
        cases[f"N={n}, window {window}"] = (*_qkv(g, 1, 2, 2, n, n), window)
    return cases


def _lower_right_cases() -> Cases:
    """(q, k, v): chunked prefill (20 new queries on 90 keys), Nq = Nk (the usual causal), one decode query, and more
    queries than keys, where the first Nq - Nk rows see no key at all: their output must be 0, not NaN."""
    g = torch.Generator().manual_seed(0)
    return {f"Nq={nq}, Nk={nk}": _qkv(g, 1, 2, 2, nq, nk)
            for nq, nk in ((20, 90), (17, 17), (1, 70), (70, 17), (17, 1), (1, 1))}


def _lower_right_reference(q, k, v):
    nq, nk = q.shape[2], k.shape[2]
    i, j = torch.arange(nq, device=q.device)[:, None], torch.arange(nk, device=q.device)[None, :]
    return _sdpa(q, k, v, allowed=j <= i + nk - nq)


def _split_cases() -> Cases:
    """(q, k, v, splits): one decode query over 70 keys in 3 chunks, 17 keys in 4 (a short last chunk), 1 key in 1,
    GQA (4 query heads on 2 KV heads), two queries, and queries scaled by 100: log-sum-exps near 250, where
    exp(lse) overflows fp32 (a merge must subtract the largest first)."""
    g = torch.Generator().manual_seed(0)
    cases = {}
    for name, (b, hq, hkv, nq, nk, splits, q_scale) in {
        "Nk=70, 3 splits": (2, 2, 2, 1, 70, 3, 1.0), "Nk=17, 4 splits": (1, 2, 2, 1, 17, 4, 1.0),
        "Nk=1, 1 split": (1, 2, 2, 1, 1, 1, 1.0), "GQA 4/2, Nk=33, 2 splits": (1, 4, 2, 1, 33, 2, 1.0),
        "Nq=2, Nk=50, 5 splits": (1, 2, 2, 2, 50, 5, 1.0), "Nk=70, 3 splits, q x 100": (1, 2, 2, 1, 70, 3, 100.0),
    }.items():
        cases[name] = (*_qkv(g, b, hq, hkv, nq, nk, q_scale=q_scale), splits)
    return cases


def _grad_cases(gqa: bool) -> Cases:
    """(q, k, v, do, causal): lengths 1, 17 and 70 (ragged against 16-row tiles), causal and not, Nq != Nk both ways
    (causal with Nk > Nq: the keys past the last query get no gradient at all), and with `gqa` 4 query heads on 2."""
    g = torch.Generator().manual_seed(0)
    shapes = [(1, 1, False), (17, 17, True), (70, 70, False), (70, 70, True), (17, 70, True), (70, 17, False)]
    cases = {}
    for nq, nk, causal in shapes:
        q, k, v = _qkv(g, 1, 2, 2, nq, nk)
        cases[f"Nq={nq}, Nk={nk}, causal={causal}"] = (q, k, v, torch.randn(q.shape, generator=g).half().to(q.device),
                                                       causal)
    if gqa:
        for causal in (False, True):
            q, k, v = _qkv(g, 2, 4, 2, 33, 33)
            cases[f"GQA 4/2, N=33, causal={causal}"] = (
                q, k, v, torch.randn(q.shape, generator=g).half().to(q.device), causal)
    return cases


def _sdpa_grads(q, k, v, do, causal):
    leaves = [t.float().requires_grad_() for t in (q, k, v)]
    F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=True).backward(do.float())
    return tuple(t.grad for t in leaves)


def _backward_attempt(fn: Callable, q, k, v, do, causal):
    """fn(do, q, k, v, o, lse, causal) with o and lse from the course's forward kernel."""
    from gpu_ml.kernels.triton.flash_attention import flash_attention_forward  # imports triton: only when graded

    o, lse = flash_attention_forward(q, k, v, causal)
    return fn(do, q, k, v, o, lse, causal)


EXERCISES = [
    Exercise("adam", MNIST, "adam_step", _adam_cases, reference=_adam_reference, call=_adam_attempt),
    Exercise("dw_accumulate", MNIST, "linear_grads_", _dw_cases, reference=_dw_reference, call=_dw_attempt,
             atol=1e-4, rtol=1e-4),
    Exercise("sliding_window", FORWARD, "sliding_window_attention", _window_cases,
             reference=lambda q, k, v, w: _sdpa(q, k, v, allowed=_window_mask(q.shape[2], k.shape[2], w, q.device)),
             call=lambda fn, *args: fn(*args)),
    Exercise("causal_lower_right", FORWARD, "causal_lower_right_attention", _lower_right_cases,
             reference=_lower_right_reference, call=lambda fn, *args: fn(*args)),
    Exercise("split_k_decode", FORWARD, "split_k_attention", _split_cases,
             reference=lambda q, k, v, splits: _sdpa(q, k, v), call=lambda fn, *args: fn(*args)),
    Exercise("attention_dq", BACKWARD, "compact_dq", lambda: _grad_cases(gqa=False),
             reference=lambda *args: _sdpa_grads(*args)[0], call=_backward_attempt),
    Exercise("attention_dkdv", BACKWARD, "compact_dkdv", lambda: _grad_cases(gqa=True),
             reference=lambda *args: _sdpa_grads(*args)[1:], call=_backward_attempt),
]
