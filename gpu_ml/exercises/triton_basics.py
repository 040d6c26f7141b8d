"""Exercises of triton/01-basics and triton/02-matrix-ops."""

from __future__ import annotations

from collections.abc import Callable

import torch

from gpu_ml.exercises.core import Cases, Exercise, must_raise
from gpu_ml.validate import kernel_device


def _vectors() -> Cases:
    g = torch.Generator().manual_seed(0)
    return {f"n={n}": (torch.randn(n, generator=g).to(kernel_device()), torch.randn(n, generator=g).to(kernel_device()))
            for n in (1, 1000, 5000)}


def _in_place(fn: Callable, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Call fn(x, y) on a copy of x and return that copy: what an in-place add left in it. fn must return x itself,
    as PyTorch's in-place ops do."""
    mine = x.clone()
    if fn(mine, y) is not mine:
        raise AssertionError("add_(x, y) must return x itself, the tensor it changed in place (as torch's x.add_(y))")
    return mine


def _rows() -> Cases:
    """Rows whose length is not a power of two (so the one block per row has masked lanes): all negative (a fill of 0
    wins a max), all positive (a fill of 0 wins a min), mixed; values near +-1 so that a row's product stays finite."""
    g = torch.Generator().manual_seed(0)

    def near_one(m: int, n: int) -> torch.Tensor:
        return 0.8 + 0.4 * torch.rand(m, n, generator=g)

    signs = torch.where(torch.rand(5, 7, generator=g) < 0.5, -1.0, 1.0)
    cases = {"1 element": -near_one(1, 1), "3 x 100, all negative": -near_one(3, 100),
             "4 x 100, all positive": near_one(4, 100), "5 x 7, mixed signs": signs * near_one(5, 7)}
    return {name: (x.to(kernel_device()),) for name, x in cases.items()}


def _silu_mul_cases() -> Cases:
    g = torch.Generator().manual_seed(0)
    cases = {f"n={n}": (4 * torch.randn(n, generator=g), torch.randn(n, generator=g)) for n in (1, 1000, 4097)}
    cases["n=3000, float16"] = tuple((s * torch.randn(3000, generator=g)).half() for s in (4, 1))
    return {name: tuple(t.to(kernel_device()) for t in args) for name, args in cases.items()}


def _refuses_mismatched_shapes(fn: Callable, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """fn(x, y), after checking that fn refuses a y one element short (a wrapper that launches anyway reads past it)."""
    out = fn(x, y)
    try:
        fn(x, y[:-1])
    except ValueError:
        return out
    raise AssertionError("silu_mul(x, y[:-1]) did not raise ValueError: the wrapper must refuse shapes that differ "
                         "before it launches")


def _reverse_with_guards(kernel: Callable, x: torch.Tensor, block: int = 64) -> torch.Tensor:
    """Launch kernel(x, y, n, BLOCK=block) with x between bands of NaN (a read past either end poisons y) and y
    between guard bands (a write past either end is caught): what a missing or wrong mask looks like."""
    n = x.numel()
    x_buffer = torch.full((n + 2 * block,), float("nan"), device=x.device)
    x_buffer[block : block + n] = x
    canary = -12345.0
    y_buffer = torch.full((n + 2 * block,), canary, device=x.device)
    kernel[(-(-n // block),)](x_buffer[block : block + n], y_buffer[block : block + n], n, BLOCK=block)
    before, past = int((y_buffer[:block] != canary).sum()), int((y_buffer[block + n :] != canary).sum())
    if before or past:
        raise AssertionError(f"the kernel wrote {past} elements past the end of y and {before} before its start "
                             f"(n={n}, BLOCK={block})")
    return y_buffer[block : block + n]


def _checks_on_host(fn: Callable, x: torch.Tensor, alpha: float) -> torch.Tensor:
    """fn(x, alpha), after checking that fn refuses a list, a 2-D tensor and a non-contiguous 1-D one."""
    out = fn(x, alpha)
    must_raise(fn, (x.tolist(), alpha), TypeError, "safe_scale(a list)")
    must_raise(fn, (x.new_ones(4, 3), alpha), ValueError, "safe_scale(a 2-D tensor)")
    must_raise(fn, (x.new_ones(8)[::2], alpha), ValueError, "safe_scale(a non-contiguous 1-D tensor, x[::2])")
    return out


_SIZES_FOR_THE_BUG = (1, 255, 256, 257, 512, 1000, 1024)


def _bias_relu_cases() -> Cases:
    """M != N (a bias broadcast along the wrong axis shows), sizes not multiples of 32, K = 0 (the bias alone) and K
    over two blocks (a bias added inside the K loop shows)."""
    g = torch.Generator().manual_seed(0)
    cases = {}
    for m, n, k in ((1, 1, 1), (5, 7, 3), (70, 45, 33), (33, 100, 70), (4, 5, 0)):
        a, b, bias = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g), torch.randn(n, generator=g)
        cases[f"{m}x{n}x{k}"] = tuple(t.to(kernel_device()) for t in (a, b, bias))
    return cases


def _intensity_cases() -> Cases:
    return {f"{bm}x{bn} tile, BLOCK_K={bk}, {size}-byte elements": (bm, bn, bk, size)
            for bm, bn, bk, size in ((128, 256, 64, 2), (1, 1, 64, 2), (64, 64, 32, 4), (16, 128, 32, 2))}



def _fp16_matmul_cases(shapes: tuple, bias: bool = False) -> Cases:
    g = torch.Generator().manual_seed(0)
    cases = {}
    for m, n, k in shapes:
        args = [torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)] + ([torch.randn(n, generator=g)]
                                                                                    if bias else [])
        cases[f"{m}x{n}x{k}, float16"] = tuple(t.half().to(kernel_device()) for t in args)
    return cases


EXERCISES = [
    Exercise("axpy", "triton/01-basics/01_vector_add.ipynb", "axpy",
             lambda: {name: (2.5, x, y) for name, (x, y) in _vectors().items()},
             reference=lambda a, x, y: a * x + y, call=lambda fn, *args: fn(*args)),
    Exercise("add_in_place", "triton/01-basics/01_vector_add.ipynb", "add_", _vectors,
             reference=lambda x, y: x + y, call=_in_place),
    Exercise("fill_values", "triton/01-basics/02_memory_and_fusion.ipynb", "row_reductions", _rows,
             reference=lambda x: (x.sum(1), x.amax(1), x.amin(1), x.prod(1)), call=lambda fn, *args: fn(*args)),
    Exercise("silu_mul", "triton/01-basics/02_memory_and_fusion.ipynb", "silu_mul", _silu_mul_cases,
             reference=lambda x, y: torch.nn.functional.silu(x.float()) * y.float(), call=_refuses_mismatched_shapes),
    Exercise("reverse", "triton/01-basics/03_debugging.ipynb", "reverse_kernel",
             lambda: {f"n={n}": (torch.randn(n, generator=torch.Generator().manual_seed(n)).to(kernel_device()),)
                      for n in (1, 7, 64, 300)},
             reference=lambda x: torch.flip(x, [0]), call=_reverse_with_guards),
    Exercise("safe_scale", "triton/01-basics/03_debugging.ipynb", "safe_scale",
             lambda: {f"n={n}": (torch.randn(n, generator=torch.Generator().manual_seed(n)).to(kernel_device()), 3.0)
                      for n in (1, 1000, 4099)},
             reference=lambda x, alpha: alpha * x, call=_checks_on_host),
    Exercise("exposes_bug", "triton/01-basics/03_debugging.ipynb", "exposes_bug",
             lambda: {f"block={block}, n in {_SIZES_FOR_THE_BUG}": (block,) for block in (256, 64)},
             reference=lambda block: torch.tensor([n % block != 0 for n in _SIZES_FOR_THE_BUG]),
             call=lambda fn, block: torch.tensor([bool(fn(n, block)) for n in _SIZES_FOR_THE_BUG])),
    Exercise("bias_relu_epilogue", "triton/02-matrix-ops/01_matmul_from_scratch.ipynb", "matmul_bias_relu",
             _bias_relu_cases, reference=lambda a, b, bias: torch.relu(a @ b + bias),
             call=lambda fn, *args: fn(*args), atol=1e-4, rtol=1e-4),
    Exercise("tile_intensity", "triton/02-matrix-ops/01_matmul_from_scratch.ipynb", "tile_intensity",
             _intensity_cases, reference=lambda bm, bn, bk, size: torch.tensor(2 * bm * bn / (size * (bm + bn)),
                                                                                dtype=torch.float64),
             call=lambda fn, *args: torch.tensor(float(fn(*args)), dtype=torch.float64), rtol=1e-9),
    # K not a multiple of the 2 x 32 a split covers (a missing K mask shows), K = 1 (one split has nothing to add).
    Exercise("split_k", "triton/02-matrix-ops/02_fast_matmul.ipynb", "matmul_split_k",
             lambda: _fp16_matmul_cases(((1, 1, 1), (5, 7, 100), (70, 45, 129), (33, 64, 64))),
             reference=lambda a, b: a.float() @ b.float(), call=lambda fn, *args: fn(*args)),
    # TMA descriptors need rows of a multiple of 16 bytes: N and K multiples of 8, M anything; M != N.
    Exercise("tma_epilogue", "triton/02-matrix-ops/02_fast_matmul.ipynb", "matmul_persistent_epilogue",
             lambda: _fp16_matmul_cases(((1, 8, 8), (100, 72, 40), (300, 136, 256)), bias=True),
             reference=lambda a, b, bias: torch.relu(a.float() @ b.float() + bias.float()),
             call=lambda fn, *args: fn(*args)),
]
