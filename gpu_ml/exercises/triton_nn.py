"""Exercises of triton/03-nn-components 01-03 (activations, softmax, linear layer)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from gpu_ml.exercises.core import Cases, Exercise
from gpu_ml.validate import kernel_device

ACTIVATIONS_NB = "triton/03-nn-components/01_activations.ipynb"
SOFTMAX_NB = "triton/03-nn-components/02_softmax.ipynb"
LINEAR_NB = "triton/03-nn-components/03_linear_layer.ipynb"


def _on_device(cases: dict[str, tuple]) -> Cases:
    return {name: tuple(t.to(kernel_device()) if isinstance(t, torch.Tensor) else t for t in args)
            for name, args in cases.items()}


def _quietly(fn: Callable, *args):
    """fn(*args) with NumPy's warnings off: the interpreter runs on NumPy, which warns about exp(-inf + inf) and
    0 * inf where a GPU computes them silently (and where the reference has NaN or inf too)."""
    with np.errstate(all="ignore"):
        return fn(*args)


# --- 01_activations -----------------------------------------------------------------------------------------

# Extreme inputs: a textbook sigma'(a) = e^-a / (1 + e^-a)^2 is inf / inf = NaN for a < -89 in fp32.
_EXTREMES = [-1e30, -1e4, -100.0, -20.0, -5.0, -1.0, -1e-4, -0.0, 0.0, 1e-4, 1.0, 5.0, 20.0, 100.0, 1e4, 1e30]


def _activation_cases() -> Cases:
    """Sizes around the 1024-element block (1, under, over, not a multiple), exact zeros (the slope at 0 is 0,
    as in torch), fp16 (computed in fp32, rounded once), and extreme values where a naive sigmoid overflows."""
    g = torch.Generator().manual_seed(0)
    cases = {f"n={n}": (3 * torch.randn(n, generator=g), torch.randn(n, generator=g)) for n in (1, 1000, 4099)}
    cases["zeros and signs"] = (torch.tensor([-2.0, -0.0, 0.0, 1e-4, -1e-4, 3.0]), torch.randn(6, generator=g))
    cases["n=3000, float16"] = tuple(t.half() for t in (3 * torch.randn(3000, generator=g), torch.randn(3000,
                                                                                                       generator=g)))
    x = torch.tensor(_EXTREMES)
    cases[f"extremes {_EXTREMES[0]:g} .. {_EXTREMES[-1]:g}, dy = 1"] = (x, torch.ones_like(x))
    return _on_device(cases)


def _relu2_reference(x: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r = F.relu(x.double())
    return r * r, dy.double() * 2 * r


def _gelu_sigmoid_reference(x: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x * sigma(1.702 x) and dy * (sigma + 1.702 x sigma (1 - sigma)), in float64 (nothing overflows there)."""
    x64 = x.double()
    s = torch.sigmoid(1.702 * x64)
    return x64 * s, dy.double() * (s + 1.702 * x64 * s * (1 - s))


def _dtype_cases() -> Cases:
    return {str(d).removeprefix("torch."): (d,) for d in (torch.float32, torch.float16, torch.bfloat16)}


EXERCISES = [
    Exercise("relu2", ACTIVATIONS_NB, "relu2", _activation_cases, reference=_relu2_reference,
             call=lambda fn, *args: _quietly(fn, *args)),
    Exercise("gelu_sigmoid", ACTIVATIONS_NB, "gelu_sigmoid", _activation_cases, reference=_gelu_sigmoid_reference,
             call=lambda fn, *args: _quietly(fn, *args)),
    Exercise("training_step_bytes", ACTIVATIONS_NB, "training_step_bytes", _dtype_cases,
             reference=lambda dtype: torch.tensor(5.0 * torch.tensor([], dtype=dtype).element_size(),
                                                  dtype=torch.float64),
             call=lambda fn, dtype: torch.tensor(float(fn(dtype)), dtype=torch.float64), rtol=0.0, atol=0.0),
]


# --- 02_softmax ---------------------------------------------------------------------------------------------

def _softmax_rows(seed: int = 0) -> dict[str, torch.Tensor]:
    """Rows that break softmaxes: 1 element, widths below one block and not powers of two, +-1e4 (exp overflows
    without the max, and log(softmax) is log(0) = -inf), -inf entries (row 0: one finite entry; row 1: all -inf
    but its tail), fp16, and a row stride that is not the width."""
    g = torch.Generator().manual_seed(seed)
    masked = torch.randn(5, 1000, generator=g)
    masked[:, ::3] = float("-inf")
    masked[0, :] = float("-inf")
    masked[0, 700] = 2.0
    masked[1, :300] = float("-inf")  # the first blocks of row 1 hold nothing but -inf
    return {"1 x 1": torch.randn(1, 1, generator=g), "7 x 3": torch.randn(7, 3, generator=g),
            "5 x 1000": torch.randn(5, 1000, generator=g), "3 x 1025": torch.randn(3, 1025, generator=g),
            "uniform in +-1e4": torch.rand(4, 500, generator=g) * 2e4 - 1e4,
            "increasing rows (the max changes in every block)": torch.linspace(-50, 50, 2000).reshape(2, 1000),
            "-inf entries": masked, "5 x 1000, float16": torch.randn(5, 1000, generator=g).half(),
            "x[:, 7:1007] of 1100 columns": torch.randn(3, 1100, generator=g)[:, 7:1007]}


def _softmax_cases() -> Cases:
    return _on_device({name: (x,) for name, x in _softmax_rows().items()})


def _causal_cases() -> Cases:
    """Square inputs: n = 1 (row 0 keeps only its diagonal: output 1), n not a power of two, +-1e4, fp16, and
    -inf entries below the diagonal (the diagonal stays finite, so no row is all -inf)."""
    g = torch.Generator().manual_seed(1)
    cases = {f"{n} x {n}": torch.randn(n, n, generator=g) for n in (1, 3, 100, 257)}
    cases["64 x 64, uniform in +-1e4"] = torch.rand(64, 64, generator=g) * 2e4 - 1e4
    cases["65 x 65, float16"] = torch.randn(65, 65, generator=g).half()
    x = torch.randn(50, 50, generator=g)
    i, j = torch.meshgrid(torch.arange(50), torch.arange(50), indexing="ij")
    x[(j < i) & ((i + j) % 3 == 0)] = float("-inf")
    cases["50 x 50, -inf below the diagonal"] = x
    return _on_device({name: (x,) for name, x in cases.items()})


def _causal_reference(x: torch.Tensor) -> torch.Tensor:
    future = torch.triu(torch.ones(x.shape, dtype=torch.bool, device=x.device), diagonal=1)
    return torch.softmax(x.float().masked_fill(future, float("-inf")), dim=-1)


EXERCISES += [
    Exercise("log_softmax", SOFTMAX_NB, "log_softmax", _softmax_cases,
             reference=lambda x: torch.log_softmax(x.float(), dim=-1), call=lambda fn, x: _quietly(fn, x)),
    Exercise("causal_softmax", SOFTMAX_NB, "causal_softmax", _causal_cases, reference=_causal_reference,
             call=lambda fn, x: _quietly(fn, x)),
    Exercise("softmax_lanes", SOFTMAX_NB, "softmax_lanes", _softmax_cases,
             reference=lambda x: torch.softmax(x.float(), dim=-1), call=lambda fn, x: _quietly(fn, x)),
]


# --- 03_linear_layer ----------------------------------------------------------------------------------------

_LINEAR_SHAPES = ((1, 3, 5), (37, 100, 50), (33, 129, 65))  # (M, K, N): none a multiple of a tile


def _silu_layer_cases() -> Cases:
    """Shapes that are no multiple of any tile, fp16, and pre-activations from -1e4 to 1e4 (x = 1, W = the values,
    b = 0), where SiLU's slope is 0 and 1 but y is as far from z as it gets."""
    g = torch.Generator().manual_seed(0)
    cases = {}
    for dtype, shapes in ((torch.float32, _LINEAR_SHAPES), (torch.float16, ((37, 100, 50),))):
        for m, k, n in shapes:
            args = (torch.randn(m, k, generator=g), torch.randn(n, k, generator=g) / k**0.5,
                    torch.randn(n, generator=g), torch.randn(m, n, generator=g))
            cases[f"{m}x{k}->{n}, {str(dtype).removeprefix('torch.')}"] = tuple(t.to(dtype) for t in args)
    extreme = torch.tensor([-1e4, -100, -20, -5, -1.5, -1, -1e-4, 0, 1e-4, 1, 5, 20, 100, 1e4])
    cases["extreme z, -1e4 .. 1e4"] = (torch.ones(2, 1), extreme[:, None], torch.zeros(14), torch.ones(2, 14))
    return _on_device(cases)


def _silu_layer_reference(x, weight, bias, dy):
    """y, dX, dW, db of silu(x @ W.T + b) by torch autograd, in the inputs' dtype (as the lesson's twin layers)."""
    x, weight, bias = (t.detach().clone().requires_grad_() for t in (x, weight, bias))
    y = F.silu(F.linear(x, weight, bias))
    y.backward(dy)
    return y.detach(), x.grad, weight.grad, bias.grad


def _dx_cases() -> Cases:
    """dX = (dY * act'(z)) @ W for relu and gelu_tanh: N (the reduction) and K not multiples of the 32-wide blocks,
    one row, fp16, and a dY expanded from one value (strides (0, 0)), as autograd hands it for y.sum()."""
    g = torch.Generator().manual_seed(0)
    cases = {}
    for activation in ("relu", "gelu_tanh"):
        for dtype, shapes in ((torch.float32, _LINEAR_SHAPES), (torch.float16, ((37, 100, 50),))):
            for m, k, n in shapes:
                args = (torch.randn(m, n, generator=g), 3 * torch.randn(m, n, generator=g),
                        torch.randn(n, k, generator=g) / n**0.5)
                cases[f"{activation}, {m}x{k}->{n}, {str(dtype).removeprefix('torch.')}"] = (
                    *(t.to(dtype) for t in args), activation)
    z, w = 3 * torch.randn(33, 65, generator=g), torch.randn(65, 129, generator=g) / 65**0.5
    cases["gelu_tanh, 33x129->65, dY expanded"] = (torch.ones(()).expand(33, 65), z, w, "gelu_tanh")
    return _on_device(cases)


def _dx_reference(dy, z, weight, activation):
    """The unfused path: dZ by torch autograd, stored in the inputs' dtype, then dZ @ W."""
    z = z.detach().clone().requires_grad_()
    act = F.relu(z) if activation == "relu" else F.gelu(z, approximate="tanh")
    (dz,) = torch.autograd.grad(act, z, dy)
    return dz @ weight


_MLPS = {"784-512-512-10, gelu gelu none, fp16, batch 128": (128, (784, 512, 512, 10), ("gelu_tanh", "gelu_tanh",
                                                                                           "none"), 2),
         "784-512-512-10, relu relu none, fp16, batch 128": (128, (784, 512, 512, 10), ("relu", "relu", "none"), 2),
         "100-300-200-7, gelu relu gelu, fp32, batch 1": (1, (100, 300, 200, 7), ("gelu_tanh", "relu", "gelu_tanh"), 4),
         "64-64, none, fp32, batch 32": (32, (64, 64), ("none",), 4)}


def _saved_z_reference(batch, widths, activations, element_bytes):
    total = sum(batch * n * element_bytes for n, a in zip(widths[1:], activations, strict=True) if a == "gelu_tanh")
    return torch.tensor(float(total), dtype=torch.float64)


EXERCISES += [
    Exercise("silu_layer", LINEAR_NB, "silu_linear_grads", _silu_layer_cases, reference=_silu_layer_reference,
             call=lambda fn, *args: _quietly(fn, *args)),
    Exercise("dx_prologue", LINEAR_NB, "linear_dx_fused", _dx_cases, reference=_dx_reference,
             call=lambda fn, *args: _quietly(fn, *args)),
    Exercise("saved_z_bytes", LINEAR_NB, "saved_z_bytes", lambda: _MLPS, reference=_saved_z_reference,
             call=lambda fn, *args: torch.tensor(float(fn(*args)), dtype=torch.float64), atol=0.0, rtol=0.0),
]
