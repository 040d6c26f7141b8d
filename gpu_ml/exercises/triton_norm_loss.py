"""Exercises of triton/03-nn-components 04-05 (LayerNorm, cross-entropy)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from gpu_ml.exercises.core import Cases, Exercise
from gpu_ml.validate import kernel_device

LAYERNORM_NB = "triton/03-nn-components/04_layernorm.ipynb"
CROSS_ENTROPY_NB = "triton/03-nn-components/05_cross_entropy.ipynb"


def _on_device(cases: dict[str, tuple]) -> Cases:
    return {name: tuple(t.to(kernel_device()) if isinstance(t, torch.Tensor) else t for t in args)
            for name, args in cases.items()}


def _quietly(fn: Callable, *args):
    """fn(*args) with NumPy's warnings off: the interpreter runs on NumPy, which warns about exp(-inf + inf) where a
    GPU computes it silently (a wrong attempt then shows as NaN, which the grader reports)."""
    with np.errstate(all="ignore"):
        return fn(*args)


# ---- LayerNorm (04_layernorm) ----

def _norm_inputs(g: torch.Generator, m: int, n: int, dtype=torch.float32, offset: float = 0.0):
    x = offset + torch.randn(m, n, generator=g)
    w = 1 + 0.5 * torch.randn(n, generator=g)
    b = 0.5 * torch.randn(n, generator=g)
    return tuple(t.to(dtype) for t in (x, w, b))


def _add_layer_norm_cases() -> Cases:
    """A row of 1 element (y = b), rows not a power of two (masked lanes: 1000, 1025 just past 1024), fp16."""
    g = torch.Generator().manual_seed(0)
    cases = {}
    for m, n, dtype in ((1, 1, torch.float32), (3, 1000, torch.float32), (7, 1025, torch.float32),
                        (4, 3000, torch.float16)):
        x, w, b = _norm_inputs(g, m, n, dtype)
        r = torch.randn(m, n, generator=g).to(dtype)
        cases[f"{m} x {n}, {str(dtype)[6:]}"] = (x, r, w, b)
    return _on_device(cases)


def _add_layer_norm_reference(x, r, w, b):
    h = x + r  # in x's dtype, as the kernel stores it
    return h, F.layer_norm(h.float(), (x.shape[1],), w.float(), b.float(), eps=1e-5)


def _wide_cases() -> Cases:
    """Rows in chunks of 1024: 1 element, one partial chunk, 5 chunks with a mean of 100 (the one-pass E[x^2] -
    E[x]^2 loses the variance, masked lanes that hold x - mean spoil it), rows over the lesson's 64 KB limit, fp16."""
    g = torch.Generator().manual_seed(0)
    cases = {}
    for m, n, dtype, offset in ((1, 1, torch.float32, 0.0), (3, 1000, torch.float32, 0.0),
                                (2, 5000, torch.float32, 100.0), (2, 20000, torch.float32, 100.0),
                                (3, 3000, torch.float16, 0.0)):
        name = f"{m} x {n}, {str(dtype)[6:]}" + (f", mean {offset:g}" if offset else "")
        cases[name] = _norm_inputs(g, m, n, dtype, offset)
    return _on_device(cases)


def _nd_cases() -> Cases:
    """Leading shapes: 3-D, 1-D (one row), a transposed (non-contiguous) 3-D view, no rows at all, fp16."""
    g = torch.Generator().manual_seed(0)
    cases = {}
    for name, shape, dtype in (("(2, 3, 5, 33)", (2, 3, 5, 33), torch.float32), ("(100,)", (100,), torch.float32),
                               ("(4, 0, 8)", (4, 0, 8), torch.float32), ("(2, 7, 300), float16", (2, 7, 300),
                                                                         torch.float16)):
        n = shape[-1]
        x = torch.randn(*shape, generator=g).to(dtype)
        _, w, b = _norm_inputs(g, 1, n, dtype)
        cases[name] = (x, w, b, torch.randn(*shape, generator=g).to(dtype))
    x = torch.randn(5, 3, 40, generator=g)
    _, w, b = _norm_inputs(g, 1, 40)
    cases["(3, 5, 40) transposed from (5, 3, 40): not contiguous"] = (x.transpose(0, 1), w, b,
                                                                     torch.randn(3, 5, 40, generator=g))
    return _on_device(cases)


def _norm_with_grads(fn: Callable, x, w, b, dy):
    """y = fn(x, w, b) and the gradients of (y * dy).sum() with respect to x, w, b."""
    xi, wi, bi = (t.detach().clone().requires_grad_() for t in (x, w, b))  # clone keeps x's strides
    y = fn(xi, wi, bi)
    y.backward(dy)
    for name, t in (("x", xi), ("weight", wi), ("bias", bi)):
        if t.grad is None:
            raise AssertionError(f"no gradient reached {name}: the result must stay connected to the inputs")
    return y, xi.grad, wi.grad, bi.grad


def _nd_reference(x, w, b, dy):
    return _norm_with_grads(lambda x, w, b: F.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float()).to(x.dtype),
                            x, w, b, dy)


# ---- cross-entropy (05_cross_entropy) ----

def _lse_cases() -> Cases:
    """(x, BLOCK_V): a single element, a partial last block, a maximum that rises block after block, -inf over a whole
    first block / the last block / every other class / a whole row, +-1e4 (exp overflows unless shifted), fp16."""
    g = torch.Generator().manual_seed(0)
    rising = torch.randn(2, 500, generator=g) + torch.linspace(0, 50, 500)
    masked = 3 * torch.randn(4, 300, generator=g)
    masked[0, :64] = float("-inf")
    masked[1, 290:] = float("-inf")
    masked[2, ::2] = float("-inf")
    masked[3] = float("-inf")
    extreme = torch.randint(0, 2, (3, 1000), generator=g) * 2e4 - 1e4
    extreme[0] = 1e4
    cases = {"1 x 1": (torch.randn(1, 1, generator=g), 16),
             "3 x 1000, BLOCK_V=64": (3 * torch.randn(3, 1000, generator=g), 64),
             "2 x 500 rising, BLOCK_V=64": (rising, 64),
             "4 x 300 with -inf (first block, last block, every other, whole row), BLOCK_V=64": (masked, 64),
             "3 x 1000 of +-1e4, float16, BLOCK_V=128": (extreme.half(), 128)}
    return _on_device(cases)


def _targets(g: torch.Generator, rows: int, v: int, ignore_every: int = 0) -> torch.Tensor:
    t = torch.randint(0, v, (rows,), generator=g)
    if ignore_every:
        t[::ignore_every] = -100
    return t


def _smoothing_cases() -> Cases:
    """V = 1; V not a multiple of the block of 256 (masked lanes, which hold -inf, must not enter sum(x)); ignored rows;
    fp16; +-1e4 logits."""
    g = torch.Generator().manual_seed(0)
    cases = {}
    for rows, v, dtype, eps, ignore in ((1, 1, torch.float32, 0.1, 0), (3, 10, torch.float32, 0.1, 0),
                                        (33, 1000, torch.float32, 0.2, 4), (5, 300, torch.float16, 0.1, 0)):
        x = (3 * torch.randn(rows, v, generator=g)).to(dtype)
        cases[f"{rows} x {v}, {str(dtype)[6:]}, eps={eps}" + (f", 1 row in {ignore} ignored" if ignore else "")] = (
            x, _targets(g, rows, v, ignore), eps)
    x = torch.randint(0, 2, (4, 700), generator=g) * 2e4 - 1e4
    cases["4 x 700 of +-1e4, eps=0.1"] = (x, _targets(g, 4, 700), 0.1)
    return _on_device(cases)


def _smoothing_reference(x, t, eps):
    xr = x.detach().float().clone().requires_grad_()
    loss = F.cross_entropy(xr, t, label_smoothing=eps)
    loss.backward()
    return loss.detach(), xr.grad.to(x.dtype)


def _reduction_cases() -> Cases:
    """(x, t, reduction, dloss): one value per row for "none", one for all for "sum"; V = 1, ignored rows, fp16."""
    g = torch.Generator().manual_seed(0)
    cases = {}
    for rows, v, dtype, reduction, ignore in ((1, 1, torch.float32, "none", 0), (3, 10, torch.float32, "sum", 2),
                                              (37, 500, torch.float32, "none", 3), (4, 1000, torch.float16, "sum", 0),
                                              (6, 300, torch.float16, "none", 4)):
        x = (3 * torch.randn(rows, v, generator=g)).to(dtype)
        dloss = torch.rand(rows, generator=g) + 0.5 if reduction == "none" else torch.tensor(2.5)
        name = f"{rows} x {v}, {str(dtype)[6:]}, reduction={reduction!r}" + (
            f", 1 row in {ignore} ignored" if ignore else "")
        cases[name] = (x, _targets(g, rows, v, ignore), reduction, dloss)
    return _on_device(cases)


def _loss_with_grad(fn: Callable, x, t, reduction, dloss):
    """loss = fn(x, t, reduction) and the gradient of (loss * dloss).sum() with respect to x."""
    xi = x.detach().clone().requires_grad_()
    loss = fn(xi, t, reduction)
    (loss * dloss).sum().backward()
    if xi.grad is None:
        raise AssertionError("no gradient reached the logits")
    return loss, xi.grad


def _reduction_reference(x, t, reduction, dloss):
    loss, grad = _loss_with_grad(lambda x, t, r: F.cross_entropy(x.float(), t, reduction=r), x, t, reduction, dloss)
    return loss.detach(), grad.to(x.dtype)


EXERCISES = [
    Exercise("add_layer_norm", LAYERNORM_NB, "add_layer_norm", _add_layer_norm_cases,
             reference=_add_layer_norm_reference, call=lambda fn, *args: fn(*args)),
    # fp32 within the lesson's 1e-4: the mean-100 rows lose about 1e-5 on the GPU; a one-pass variance, 2e-3.
    Exercise("layer_norm_wide", LAYERNORM_NB, "layer_norm_wide", _wide_cases,
             reference=lambda x, w, b: F.layer_norm(x.double(), (x.shape[1],), w.double(), b.double(), eps=1e-5),
             call=lambda fn, *args: fn(*args), atol={torch.float32: 1e-4}, rtol={torch.float32: 1e-4}),
    Exercise("layer_norm_nd", LAYERNORM_NB, "layer_norm_nd", _nd_cases, reference=_nd_reference,
             call=_norm_with_grads),
    Exercise("ce_logsumexp", CROSS_ENTROPY_NB, "logsumexp_rows", _lse_cases,
             reference=lambda x, block: torch.logsumexp(x.float(), dim=1),
             call=lambda fn, *args: _quietly(fn, *args)),
    Exercise("ce_label_smoothing", CROSS_ENTROPY_NB, "cross_entropy_smooth", _smoothing_cases,
             reference=_smoothing_reference, call=lambda fn, *args: _quietly(fn, *args)),
    Exercise("ce_reduction", CROSS_ENTROPY_NB, "cross_entropy_reduction", _reduction_cases,
             reference=_reduction_reference, call=lambda fn, *args: _quietly(_loss_with_grad, fn, *args)),
]
