"""Launching a Triton kernel with less host time per call, for loops whose speed the host sets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # not imported here: on a CPU, Triton must be imported after gpu_ml.setup()
    from triton.runtime.jit import JITFunction


class Launcher:
    """`Launcher(kernel)(grid, *args, **constexprs)` does what `kernel[grid](*args, **constexprs)` does,
    with less host time per call.

    A launch through `kernel[grid]` binds the arguments, works out what Triton specializes the
    compiled code on (whether each integer is 1 or a multiple of 16, each pointer's 16-byte
    alignment, the dtypes), and looks the compiled kernel up by that, in Python, on every call.
    Here the first call for a key launches through `kernel[grid]` and keeps the compiled kernel it
    returns; later calls with the same key launch that one directly. The key holds every integer,
    bool and constexpr as it is, the type of every float, and each tensor's dtype, device and 16-byte
    alignment: two calls with one key get the same specialization, so they may share the compiled
    code. Under Triton's interpreter there is no compiled kernel and every call goes through
    `kernel[grid]`. What the plain path checks on every call and this one does not: that the
    globals the kernel reads have not changed since it was compiled (make a new Launcher then).
    """

    def __init__(self, kernel: JITFunction):
        self.kernel = kernel
        self.compiled: dict[tuple, object] = {}

    def __call__(self, grid: Sequence[int], *args, **constexprs) -> None:
        if constexprs:  # positional, in the kernel's parameter order: what the compiled kernel takes
            names = self.kernel.arg_names[len(args):]
            if len(constexprs) != len(names) or not all(name in constexprs for name in names):
                raise TypeError(f"{self.kernel.__name__}: keyword arguments {sorted(constexprs)} must be exactly "
                                f"the parameters after the positional ones, {list(names)}")
            args += tuple([constexprs[name] for name in names])
        # One pass, ints (most of the arguments: sizes, strides, flags) tested first: this runs on every launch.
        key = tuple([a if a.__class__ is int else
                     (a.dtype, a.get_device(), not a.data_ptr() & 15) if isinstance(a, torch.Tensor) else
                     float if isinstance(a, float) else a for a in args])
        compiled = self.compiled.get(key)
        if compiled is not None:
            compiled[(*grid, 1, 1)[:3]](*args)  # a compiled kernel takes a 3-D grid
            return
        compiled = self.kernel[tuple(grid)](*args)
        if hasattr(compiled, "launch_metadata"):  # a compiled kernel (the interpreter returns none)
            self.compiled[key] = compiled
