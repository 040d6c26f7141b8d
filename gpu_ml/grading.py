"""One grader for exercises: PASS, or the first case and element where an attempt goes wrong.

A grader never raises for a wrong or crashing attempt: it prints its verdict and returns it, so that
"Run All" on a notebook whose exercises are not solved yet still runs to the end. The verdict is
falsy when the attempt failed, for tests (`assert grade(...)`, `assert not grade(...)`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from gpu_ml.check import check


@dataclass(frozen=True)
class Verdict:
    """The outcome of `grade`: passed or not, and the line it printed."""

    name: str
    passed: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed


def _outputs(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in value):
        return list(value)
    raise TypeError(f"returned {type(value).__name__}, not a tensor or a tuple of tensors")


Tolerance = float | Mapping[torch.dtype, float] | None
GUARD = 4096  # guard elements on each side of a floating input


def guard_band(n: int, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """What n guard elements after a floating input hold (flipped, before it): +inf first (the element `i <= n`
    reads), then -inf, then NaN, over and over. A read past an end poisons a sum, a max (fmaxf and tl.maximum drop
    NaN, not inf), a comparison x > t."""
    return torch.tensor((float("inf"), float("-inf"), float("nan")), dtype=dtype, device=device).repeat(n // 3 + 1)[:n]


def _guarded(t: object) -> object:
    """A contiguous floating tensor copied into the middle of a guard band (the same values, shape and dtype); any
    other argument (a view, integers, a leaf of autograd) as it is."""
    if not isinstance(t, torch.Tensor) or not t.is_floating_point() or not t.is_contiguous() or t.requires_grad:
        return t
    band = guard_band(GUARD, t.dtype, t.device)
    base = torch.cat([band.flip(0), t.flatten(), band])
    return base[GUARD : GUARD + t.numel()].view(t.shape)


def _unchanged(t: torch.Tensor, before: torch.Tensor) -> bool:
    same = t == before
    return bool((same | t.isnan() & before.isnan() if t.is_floating_point() else same).all())


def _least_precise(expected: torch.Tensor, args: tuple) -> torch.dtype | None:
    """The least precise floating dtype an attempt may return: the reference's, or the most precise floating input's
    where that is less precise (a reference may compute fp16 inputs in fp32); without floating inputs, the
    reference's unless it is float64 (an exact reference: then any)."""
    eps = lambda d: torch.finfo(d).eps  # noqa: E731
    inputs = [a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
    if not inputs:
        return None if expected.dtype == torch.float64 else expected.dtype
    return max(expected.dtype, min(inputs, key=eps), key=eps)


def grade(name: str, attempt: Callable, reference: Callable, cases: Mapping[str, tuple], *,
          atol: Tolerance = None, rtol: Tolerance = None, quiet: bool = False) -> Verdict:
    """Call `attempt(*args)` and `reference(*args)` on each case (name -> args) and compare what they return
    (a tensor or a tuple of tensors) with `check`'s rule and tolerances, stopping at the first difference.
    A tolerance may be given per dtype of the output ({torch.float32: 1e-4}); `check`'s default otherwise.

    Prints "PASS" with the number of cases, or "not solved yet" with the case, the output and the first
    wrong element, or what the attempt raised (NotImplementedError: the untouched stub). The attempt gets the floating
    inputs in guard bands of inf, -inf and NaN (a read past an end poisons its result), must leave its inputs as they
    were, and may not return a less precise floating dtype than the reference (whose looser tolerance would pass a
    wrong answer).
    """
    def verdict(passed: bool, message: str) -> Verdict:
        if not quiet:
            print(message)
        return Verdict(name, passed, message)

    if not cases:
        raise ValueError(f"grade({name!r}): no cases to grade")
    for case, args in cases.items():
        # The reference first, on copies: an attempt that works in place must not change what it is graded against.
        expected = _outputs(reference(*(a.clone() if isinstance(a, torch.Tensor) else a for a in args)))
        args = tuple(_guarded(a) for a in args)
        before = [a.clone() if isinstance(a, torch.Tensor) else None for a in args]
        try:
            got = _outputs(attempt(*args))
        except NotImplementedError:
            return verdict(False, f"{name}: not solved yet (the stub raises NotImplementedError)")
        except Exception as exc:  # a learner's crash is explained, not re-raised
            return verdict(False, f"{name}: not solved yet: on case {case!r} the attempt raised "
                                  f"{type(exc).__name__}: {exc}")
        if len(got) != len(expected):
            return verdict(False, f"{name}: not solved yet: on case {case!r} it returned {len(got)} tensors, "
                                  f"expected {len(expected)}")
        changed = [i for i, (a, b) in enumerate(zip(args, before, strict=True))
                   if b is not None and not _unchanged(a, b)]
        if changed:
            return verdict(False, f"{name}: not solved yet: on case {case!r} the attempt changed its input "
                                  f"{changed[0]} (counting from 0); only what it returns may differ")
        for k, (g, e) in enumerate(zip(got, expected, strict=True)):
            label = f"output {k}" if len(expected) > 1 else "the output"
            least = _least_precise(e, args) if g.is_floating_point() and e.is_floating_point() else None
            if least is not None and torch.finfo(g.dtype).eps > torch.finfo(least).eps:
                return verdict(False, f"{name}: not solved yet: case {case!r}, {label} has dtype {g.dtype}, less "
                                      f"precise than the {least} expected")
            try:
                check(g, e.to(g.dtype) if g.dtype != e.dtype and g.is_floating_point() else e,
                      atol=_for(atol, g.dtype), rtol=_for(rtol, g.dtype), name=label, quiet=True)
            except AssertionError as exc:
                return verdict(False, f"{name}: not solved yet: case {case!r}, {exc}")
    return verdict(True, f"{name}: PASS ({len(cases)} case{'s' if len(cases) != 1 else ''})")


def _for(tolerance: Tolerance, dtype: torch.dtype) -> float | None:
    return tolerance.get(dtype) if isinstance(tolerance, Mapping) else tolerance


def marked_cells(path: str | Path, marker: str) -> dict[str, str]:
    """name -> source of every code cell of the notebook at `path` whose first line is `<marker> NAME`
    (e.g. marker "# puzzle:"), in order: the cells a learner fills in, read from the saved notebook."""
    cells = {}
    for cell in json.loads(Path(path).read_text())["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        first = source.split("\n", 1)[0].strip()
        if cell["cell_type"] == "code" and first.startswith(marker):
            cells[first.removeprefix(marker).strip()] = source
    return cells
