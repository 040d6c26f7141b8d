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

