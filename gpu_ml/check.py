"""Compare a kernel's output with a reference and say how close they are."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

# Default tolerances by dtype: (atol, rtol). Half precision keeps ~3 decimal digits, bf16 ~2. Keyed by name, so
# that importing gpu_ml does not import torch (a `gpu-ml` command that runs a notebook leaves that to its kernel).
_TOLERANCES = {
    "torch.float16": (1e-2, 1e-2),
    "torch.bfloat16": (2e-2, 2e-2),
    "torch.float32": (1e-5, 1e-5),
    "torch.float64": (1e-10, 1e-8),
}


def check(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    atol: float | None = None,
    rtol: float | None = None,
    name: str = "result",
    quiet: bool = False,
) -> None:
    """Assert that `actual` matches `expected` within tolerance; print the max abs/rel error.

    Shapes must be equal; the dtype of `expected` picks default tolerances. On a mismatch it
    raises AssertionError naming the worst element, so a failing notebook cell says why. The
    relative error is taken over the elements whose |expected| is above atol.
    """
    import torch

    if not isinstance(actual, torch.Tensor) or not isinstance(expected, torch.Tensor):
        raise TypeError(f"check() compares tensors, got {type(actual).__name__} and {type(expected).__name__}")
    if actual.shape != expected.shape:
        raise AssertionError(f"{name}: shape {tuple(actual.shape)} != expected {tuple(expected.shape)}")
    if actual.is_complex() or expected.is_complex():  # real and imaginary parts, each by the rule below
        if not (actual.is_complex() and expected.is_complex()):
            raise TypeError(f"{name}: one of actual ({actual.dtype}) and expected ({expected.dtype}) is complex")
        return check(torch.view_as_real(actual), torch.view_as_real(expected), atol=atol, rtol=rtol, name=name,
                     quiet=quiet)
    default_atol, default_rtol = _TOLERANCES.get(str(expected.dtype), (0.0, 0.0))
    atol = default_atol if atol is None else atol
    rtol = default_rtol if rtol is None else rtol
    if not (atol >= 0 and rtol >= 0):  # also refuses NaN, which would let any value pass
        raise ValueError(f"{name}: tolerances must be >= 0, got atol={atol}, rtol={rtol}")
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    if a.numel() == 0:
        if not quiet:
            print(f"{name}: empty, shapes match")
        return
    nan_mismatch = torch.isnan(a) != torch.isnan(e)
    both_nan = torch.isnan(a) & torch.isnan(e)
    same_inf = torch.isinf(e) & (a == e)
    diff = (a - e).abs().masked_fill(both_nan | same_inf, 0.0).masked_fill(nan_mismatch, float("inf"))
    # The relative error is reported where it means something: where |expected| is above atol (near zero
    # it divides by almost nothing, and an error of 1e-7 on an expected 1e-30 would print as 1e+23).
    floor = max(atol, 1e-30)
    rel = (diff / e.abs().clamp_min(floor)).masked_fill((e.abs() <= floor) | (diff == 0), 0.0)
    max_abs = diff.max().item()
    max_rel = rel.max().item()
    bad = (diff > atol + rtol * e.abs()) | (torch.isinf(e) & (a != e)) | nan_mismatch  # rtol * inf or NaN: no bound
    if bad.any():
        n_bad = int(bad.sum())
        worst = int(torch.argmax(diff.masked_fill(~bad, -1.0)))
        index = tuple(int(i) for i in np.unravel_index(worst, tuple(a.shape)))
        raise AssertionError(
            f"{name}: {n_bad} of {a.numel()} elements differ (atol={atol:g}, rtol={rtol:g}); "
            f"worst at {index}: got {a.flatten()[worst].item():.6g}, expected {e.flatten()[worst].item():.6g}; "
            f"max abs err {max_abs:.3g}, max rel err {max_rel:.3g}"
        )
    if not quiet:
        exact = "exact" if max_abs == 0 else "close"
        print(f"{name}: {exact} ({a.numel()} elements), max abs err {max_abs:.3g}, max rel err {max_rel:.3g}")


def expect_raises(fn, error: type[BaseException], match: str) -> None:
    """Call `fn()` and assert it raises `error` with `match` in its message; print it.

    For notebook cells that show a wrapper refusing bad input: the cell fails if nothing, or
    something else, is raised. Returns nothing, so that a cell ending with it shows the message once.
    """
    try:
        fn()
    except error as exc:
        if match not in str(exc):
            raise AssertionError(f"{error.__name__} raised, but its message lacks {match!r}: {exc}") from exc
        print(f"{error.__name__}: {exc}")
        return
    raise AssertionError(f"expected {error.__name__} ({match!r}), but nothing was raised")
