"""Triton puzzles (`triton/00-puzzles`): each puzzle's spec, PyTorch reference, cases and launcher, and its grader.

A learner writes a `@triton.jit` kernel with the signature the notebook gives. `grade_puzzle(name, kernel)`
launches it on every case with the puzzle's fixed block sizes and compares what it wrote with the reference
(float64) through `gpu_ml.grading.grade`: PASS, or the case and first wrong element, printed and returned.

Every tensor a kernel sees lies in the middle of a guard band as long as itself plus `GUARD` elements on each side:
+inf, -inf and NaN in turn around a floating input (`gpu_ml.grading.guard_band`; 255 for bytes), OUTPUT_GUARD around
an output, and outputs start as NaN. A kernel that stores nothing fails on its values; one that writes outside an
output (a store without a mask, also of what it loaded past an input) or into an input raises `OutOfBounds`, which the
grader reports. Reads are not checked, but a load past the end of an input spoils the result where it is stored,
also through a max or a comparison. The kernel must be a Triton kernel (`KernelInterface`): an object that computes
on the host is refused.
"""

from __future__ import annotations

import linecache
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from gpu_ml.grading import Verdict, grade, guard_band, marked_cells
from gpu_ml.validate import kernel_device

Cases = dict[str, tuple]
GUARD = 1024  # guard elements on each side of a tensor, beyond its own length


class OutOfBounds(AssertionError):
    """A kernel wrote outside its output, or into one of its inputs."""


@dataclass(frozen=True)
class Puzzle:
    """One puzzle: its spec, the reference it is graded against, its cases and how its kernel is launched."""

    name: str
    title: str
    spec: str  # one line of math or pseudo-code
    reference: Callable[..., torch.Tensor | tuple[torch.Tensor, ...]]  # float64 PyTorch on a case's args
    cases: Callable[[], Cases]  # case name -> args, on kernel_device()
    launch: Callable[..., torch.Tensor | tuple[torch.Tensor, ...]]  # launch(kernel, *args) -> outputs
    atol: float = 1e-4
    rtol: float = 1e-4

    @property
    def kernel_name(self) -> str:
        """The name of the kernel the notebook's stub defines: `<name>_kernel`."""
        return f"{self.name}_kernel"


# --- memory with guard bands ----------------------------------------------------------------------------


OUTPUT_GUARD = {True: -12345.0, False: 77}  # an output's guard band (floating, integer): no value a kernel computes


class Memory:
    """The tensors of one launch, each in a guard band; `check()` raises `OutOfBounds` for a stray write."""

    def __init__(self) -> None:
        self._watched: list[tuple[str, torch.Tensor, torch.Tensor, tuple[int, int] | None]] = []

    @staticmethod
    def _place(shape: tuple[int, ...], dtype: torch.dtype, pitch: int | None,
               guard: float | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The tensor's place in a buffer of NaN (255 for integers); its guard band filled with `guard` if given."""
        n = math.prod(shape) if pitch is None else shape[0] * pitch
        pad = n + GUARD
        fill = float("nan") if dtype.is_floating_point else 255
        base = torch.full((n + 2 * pad,), fill, dtype=dtype, device=kernel_device())
        if guard is not None:
            base[:pad] = base[pad + n :] = guard
        body = base[pad : pad + n]
        view = body.view(shape) if pitch is None else body.view(shape[0], pitch)[:, : shape[1]]
        return base, view, pad

    def input(self, name: str, t: torch.Tensor, *, pitch: int | None = None) -> torch.Tensor:
        """A copy of `t` in a guard band (2-D rows `pitch` elements apart if given); the kernel may only read it.
        Floating ones sit between gpu_ml.grading's bands of inf, -inf and NaN, also between rows."""
        base, view, pad = self._place(tuple(t.shape), t.dtype, pitch)
        if t.dtype.is_floating_point:
            band = guard_band(pad, t.dtype, base.device)
            base[:pad], base[base.numel() - pad :] = band.flip(0), band
            if pitch is not None and pitch > t.shape[1]:
                base[pad : base.numel() - pad].view(t.shape[0], pitch)[:, t.shape[1] :] = band[: pitch - t.shape[1]]
        view.copy_(t)
        self._watched.append((name, base, base.clone(), None))
        return view

    def output(self, name: str, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """A contiguous output filled with NaN, in a guard band: the kernel may write only inside it. The band holds
        OUTPUT_GUARD, not NaN: an unmasked lane that loads the inputs' NaN band and stores NaN changes it too."""
        base, view, pad = self._place(tuple(shape), dtype, None, OUTPUT_GUARD[dtype.is_floating_point])
        self._watched.append((name, base, base.clone(), (pad, pad + view.numel())))
        return view

    def check(self) -> None:
        """Raise `OutOfBounds` if any guard band or input changed during the launch."""
        for name, base, before, inside in self._watched:
            changed = (base.view(torch.uint8) != before.view(torch.uint8)).view(base.numel(), -1).any(dim=1)
            if inside is None:
                if changed.any():
                    raise OutOfBounds(f"the kernel wrote {int(changed.sum())} element(s) into its input {name}")
                continue
            start, end = inside
            below, above = int(changed[:start].sum()), int(changed[end:].sum())
            if below or above:
                raise OutOfBounds(f"the kernel wrote outside {name}: {above} element(s) past its end, {below} before "
                                  "its start (a store without a mask, or a wrong offset?)")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _randn(*shape: int, seed: int, scale: float = 1.0, shift: float = 0.0,
           dtype: torch.dtype = torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (shift + scale * torch.randn(shape, generator=g)).to(dtype).to(kernel_device())


def _bytes(*shape: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, shape, generator=g, dtype=torch.uint8).to(kernel_device())


def _with_neg_inf(x: torch.Tensor, every: int) -> torch.Tensor:
    """`x` with every `every`-th element (row-major) set to -inf."""
    x = x.clone()
    x.view(-1)[::every] = float("-inf")
    return x


def _f64(*ts: torch.Tensor) -> list[torch.Tensor]:
    return [t.double() for t in ts]


# --- 1-D: masks and grids --------------------------------------------------------------------------------


def _add_constant_cases() -> Cases:
    return {"N=20 (less than a block)": (_randn(20, seed=1),), "N=32 (one full block)": (_randn(32, seed=2),),
            "N=1": (_randn(1, seed=3),)}


def _add_constant_launch(kernel, x: torch.Tensor) -> torch.Tensor:
    mem = Memory()
    xg, z = mem.input("x", x), mem.output("z", x.shape)
    kernel[(1,)](xg, z, x.numel(), B=32)
    mem.check()
    return z


def _vectors_cases() -> Cases:
    return {f"N={n}": (_randn(n, seed=n), _randn(n, seed=n + 1000)) for n in (1, 32, 100, 257)}


def _add_vectors_launch(kernel, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    mem = Memory()
    xg, yg, z = mem.input("x", x), mem.input("y", y), mem.output("z", x.shape)
    kernel[(_cdiv(x.numel(), 32),)](xg, yg, z, x.numel(), B=32)
    mem.check()
    return z


# --- 2-D: broadcasting, tiles, strides -----------------------------------------------------------------


def _outer_cases(shapes: tuple[tuple[int, int], ...]) -> Cases:
    return {f"M={m}, N={n}": (_randn(m, seed=m), _randn(n, seed=n + 1000)) for m, n in shapes}


def _outer_add_launch(kernel, x: torch.Tensor, y: torch.Tensor, *, bm: int = 16, bn: int = 32,
                      tiled: bool = False) -> torch.Tensor:
    mem = Memory()
    m, n = x.numel(), y.numel()
    xg, yg, z = mem.input("x", x), mem.input("y", y), mem.output("z", (m, n))
    grid = (_cdiv(m, bm), _cdiv(n, bn)) if tiled else (1,)
    kernel[grid](xg, yg, z, m, n, BM=bm, BN=bn)
    mem.check()
    return z


def _outer_add_blocks_launch(kernel, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return _outer_add_launch(kernel, x, y, bm=8, bn=16, tiled=True)


TILE_SHAPES = ((1, 1), (20, 37), (8, 16), (33, 5))


def _matrix_pair_cases() -> Cases:
    return {f"M={m}, N={n}": (_randn(m, n, seed=m * n), _randn(m, n, seed=m * n + 1)) for m, n in TILE_SHAPES}


def _add_matrices_launch(kernel, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    mem = Memory()
    m, n = x.shape
    xg, yg, z = mem.input("x", x, pitch=n + 7), mem.input("y", y), mem.output("z", (m, n))
    kernel[(_cdiv(m, 8), _cdiv(n, 16))](xg, yg, z, m, n, xg.stride(0), yg.stride(0), z.stride(0), BM=8, BN=16)
    mem.check()
    return z


def _mul_relu_cases() -> Cases:
    cases = {}
    for m, n in TILE_SHAPES:
        x = _randn(m, n, seed=m * n)
        x.view(-1)[::5] = 0.0  # relu'(0) = 0: the backward must test x * y > 0, not >= 0
        y = _randn(n, seed=n + 1000)
        y[0] = 0.0
        cases[f"M={m}, N={n}"] = (x, y)
    return cases


def _mul_relu_launch(kernel, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    mem = Memory()
    m, n = x.shape
    xg, yg, z = mem.input("x", x), mem.input("y", y), mem.output("z", (m, n))
    kernel[(_cdiv(m, 8), _cdiv(n, 16))](xg, yg, z, m, n, BM=8, BN=16)
    mem.check()
    return z


def _mul_relu_backward_cases() -> Cases:
    return {name: (x, y, _randn(*x.shape, seed=x.numel() + 7)) for name, (x, y) in _mul_relu_cases().items()}


def _mul_relu_backward_ref(x: torch.Tensor, y: torch.Tensor, dz: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, y, dz = _f64(x, y, dz)  # what autograd gives for relu(x * y[None, :]), written out (relu'(0) = 0)
    g = torch.where(x * y[None, :] > 0, dz, 0.0)
    return g * y[None, :], (g * x).sum(dim=0)


def _mul_relu_backward_launch(kernel, x: torch.Tensor, y: torch.Tensor, dz: torch.Tensor):
    mem = Memory()
    m, n = x.shape
    xg, yg, dzg = mem.input("x", x), mem.input("y", y), mem.input("dz", dz)
    dx, dy = mem.output("dx", (m, n)), mem.output("dy", (n,))
    kernel[(_cdiv(n, 16),)](xg, yg, dzg, dx, dy, m, n, BM=8, BN=16)
    mem.check()
    return dx, dy


# --- reductions along rows -------------------------------------------------------------------------------


def _rows_launch(block: int) -> Callable[..., torch.Tensor]:
    """A launcher for kernel(x_ptr, z_ptr, M, N, B): one program per row of x [M, N]; z is [M] or [M, N]."""

    def launch(kernel, x: torch.Tensor, *, per_row: bool = False) -> torch.Tensor:
        mem = Memory()
        m, n = x.shape
        xg, z = mem.input("x", x), mem.output("z", (m,) if per_row else (m, n))
        kernel[(m,)](xg, z, m, n, B=block)
        mem.check()
        return z

    return launch


def _per_row(block: int) -> Callable[..., torch.Tensor]:
    launch = _rows_launch(block)
    return lambda kernel, x: launch(kernel, x, per_row=True)


def _row_sum_cases() -> Cases:
    return {f"M={m}, N={n}": (_randn(m, n, seed=m + n),) for m, n in ((1, 1), (3, 200), (5, 32), (4, 33))}


def _row_max_cases() -> Cases:
    some_inf = _with_neg_inf(_randn(3, 40, seed=5), every=3)
    some_inf[1] = float("-inf")  # a row of -inf only: its max is -inf
    return {"M=1, N=1": (_randn(1, 1, seed=1),), "M=3, N=200": (_randn(3, 200, seed=2),),
            "M=4, N=33, all negative": (_randn(4, 33, seed=3, shift=-10.0),), "M=3, N=40, with -inf": (some_inf,)}


def _cumsum_cases() -> Cases:
    return {f"M={m}, N={n}": (_randn(m, n, seed=m + n),) for m, n in ((1, 1), (3, 100), (2, 32), (4, 7))}


def _softmax_cases() -> Cases:
    return {"M=1, N=1": (_randn(1, 1, seed=1),), "M=4, N=37": (_randn(4, 37, seed=2, scale=3.0),),
            "M=2, N=64, values near +-1e4": (_randn(2, 64, seed=3, scale=1e4),),
            "M=3, N=10, some -inf": (_with_neg_inf(_randn(3, 10, seed=4), every=4),)}


def _layernorm_cases() -> Cases:
    def case(m: int, n: int, shift: float) -> tuple:
        return (_randn(m, n, seed=m * n, scale=2.0, shift=shift), _randn(n, seed=n, shift=1.0), _randn(n, seed=n + 1))

    return {"M=1, N=1": case(1, 1, 0.0), "M=4, N=37, mean 3": case(4, 37, 3.0), "M=2, N=64": case(2, 64, 0.0),
            "M=3, N=50, mean 5": case(3, 50, 5.0)}


def _layernorm_ref(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x.double(), (x.shape[1],), w.double(), b.double(), eps=1e-5)


def _layernorm_launch(kernel, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    mem = Memory()
    m, n = x.shape
    xg, wg, bg, z = mem.input("x", x), mem.input("w", w), mem.input("b", b), mem.output("z", (m, n))
    kernel[(m,)](xg, wg, bg, z, m, n, 1e-5, B=64)
    mem.check()
    return z


def _leading_neg_inf(m: int, n: int, k: int, seed: int) -> torch.Tensor:
    """Rows whose first `k` elements are -inf: with blocks of 16 and k > 16 a whole first block is -inf."""
    x = _randn(m, n, seed=seed, scale=2.0)
    x[:, :k] = float("-inf")
    return x


def _long_row_cases(all_neg_inf: bool) -> Cases:
    cases = {"M=1, N=1": (_randn(1, 1, seed=1),), "M=3, N=100": (_randn(3, 100, seed=2, scale=5.0),),
             "M=2, N=50, first 20 are -inf": (_leading_neg_inf(2, 50, 20, seed=3),),
             "M=2, N=33, values near +-1e4": (_randn(2, 33, seed=4, scale=1e4),)}
    if all_neg_inf:
        cases["M=1, N=40, all -inf"] = (torch.full((1, 40), float("-inf"), device=kernel_device()),)
    return cases


# --- attention, convolution ------------------------------------------------------------------------------


def _attention_scalar_cases() -> Cases:
    return {f"T={t}": (_randn(t, seed=t, scale=2.0), _randn(t, seed=t + 1, scale=2.0), _randn(t, seed=t + 2))
            for t in (1, 37, 16, 100)}


def _attention_scalar_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    q, k, v = _f64(q, k, v)
    return torch.softmax(q[:, None] * k[None, :], dim=1) @ v


def _attention_scalar_launch(kernel, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    mem = Memory()
    t = q.numel()
    qg, kg, vg, z = mem.input("q", q), mem.input("k", k), mem.input("v", v), mem.output("z", (t,))
    kernel[(_cdiv(t, 16),)](qg, kg, vg, z, t, BQ=16, BK=16)
    mem.check()
    return z


def _conv2d_cases() -> Cases:
    return {f"H={h}, W={w}, kernel {kh}x{kw}": (_randn(h, w, seed=h * w), _randn(kh, kw, seed=kh * kw))
            for h, w, kh, kw in ((1, 1, 3, 4), (20, 13, 3, 4), (16, 16, 2, 2), (9, 30, 1, 5))}


def _conv2d_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    kh, kw = w.shape
    padded = F.pad(x.double(), (0, kw - 1, 0, kh - 1))  # zeros past the right and bottom edges
    return F.conv2d(padded[None, None], w.double()[None, None])[0, 0]


def _conv2d_launch(kernel, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    mem = Memory()
    (h, wd), (kh, kw) = x.shape, w.shape
    xg, wg, z = mem.input("x", x), mem.input("w", w), mem.output("z", (h, wd))
    kernel[(_cdiv(h, 8), _cdiv(wd, 16))](xg, wg, z, h, wd, KH=kh, KW=kw, BH=8, BW=16)
    mem.check()
    return z


# --- matrix-vector, quantized weights ----------------------------------------------------------------------


def _matvec_cases() -> Cases:
    return {f"M={m}, K={k}": (_randn(m, k, seed=m * k), _randn(k, seed=k)) for m, k in ((1, 1), (37, 100), (16, 32),
                                                                                         (5, 70))}


def _matvec_launch(kernel, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    mem = Memory()
    m, k = a.shape
    ag, xg, z = mem.input("a", a), mem.input("x", x), mem.output("z", (m,))
    kernel[(_cdiv(m, 16),)](ag, xg, z, m, k, BM=16, BK=32)
    mem.check()
    return z


GROUP = 16  # columns that share one scale in the int4 puzzles


def _int4_weights(m: int, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed int4 weights q [M, N/2] (uint8: column 2p in the low nibble of byte p, 2p+1 in the high one) and
    their scales s [M, N/GROUP]."""
    return _bytes(m, n // 2, seed=seed), _randn(m, n // GROUP, seed=seed + 1, scale=0.1).abs()


def _dequantize_ref(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    nibbles = torch.stack((q & 0xF, q >> 4), dim=-1).reshape(q.shape[0], -1)
    return (nibbles.double() - 8) * s.double().repeat_interleave(GROUP, dim=1)


def _dequantize_cases() -> Cases:
    return {f"M={m}, N={n}": _int4_weights(m, n, seed=m * n) for m, n in ((1, 16), (13, 48), (8, 32), (3, 80))}


def _dequantize_launch(kernel, q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    mem = Memory()
    m, n = q.shape[0], 2 * q.shape[1]
    qg, sg, z = mem.input("q", q), mem.input("s", s), mem.output("z", (m, n))
    kernel[(_cdiv(m, 8), _cdiv(n, 32))](qg, sg, z, m, n, G=GROUP, BM=8, BN=32)
    mem.check()
    return z


def _int4_matvec_cases() -> Cases:
    return {f"M={m}, N={n}": (*_int4_weights(m, n, seed=m * n), _randn(n, seed=n))
            for m, n in ((1, 16), (37, 96), (16, 32), (5, 48))}


def _int4_matvec_ref(q: torch.Tensor, s: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return _dequantize_ref(q, s) @ x.double()


def _int4_matvec_launch(kernel, q: torch.Tensor, s: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    mem = Memory()
    m, n = q.shape[0], 2 * q.shape[1]
    qg, sg, xg, z = mem.input("q", q), mem.input("s", s), mem.input("x", x), mem.output("z", (m,))
    kernel[(_cdiv(m, 16),)](qg, sg, xg, z, m, n, G=GROUP, BM=16, BN=32)
    mem.check()
    return z


# --- matmul (fp16 inputs, fp32 outputs: what tl.dot is built for) ----------------------------------------------

MATMUL_SHAPES = ((1, 1, 1), (37, 20, 50), (32, 16, 48), (16, 45, 7))  # M, N, K


def _matmul_cases() -> Cases:
    return {f"M={m}, N={n}, K={k}": (_randn(m, k, seed=m * k, dtype=torch.float16),
                                     _randn(k, n, seed=k * n + 1, dtype=torch.float16)) for m, n, k in MATMUL_SHAPES}


def _matmul_ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.double() @ b.double()


def _matmul_launch(kernel, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    mem = Memory()
    (m, k), n = a.shape, b.shape[1]
    ag, bg, c = mem.input("a", a), mem.input("b", b), mem.output("c", (m, n))
    args = (ag, bg) if bias is None else (ag, bg, mem.input("bias", bias))
    kernel[(_cdiv(m, 16), _cdiv(n, 16))](*args, c, m, n, k, BM=16, BN=16, BK=16)
    mem.check()
    return c


def _batched_matmul_cases() -> Cases:
    return {f"L={n_b}, M={m}, N={n}, K={k}": (_randn(n_b, m, k, seed=m * k, dtype=torch.float16),
                                             _randn(n_b, k, n, seed=k * n + 1, dtype=torch.float16))
            for n_b, m, n, k in ((1, 1, 1, 1), (3, 20, 17, 33), (2, 16, 16, 16), (4, 5, 40, 9))}


def _batched_matmul_launch(kernel, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    mem = Memory()
    (n_b, m, k), n = a.shape, b.shape[2]
    ag, bg, c = mem.input("a", a), mem.input("b", b), mem.output("c", (n_b, m, n))
    kernel[(_cdiv(m, 16), _cdiv(n, 16), n_b)](ag, bg, c, m, n, k, BM=16, BN=16, BK=16)
    mem.check()
    return c


def _matmul_bias_relu_cases() -> Cases:
    return {name: (a, b, _randn(b.shape[1], seed=b.shape[1] + 5)) for name, (a, b) in _matmul_cases().items()}


def _matmul_bias_relu_ref(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.relu(a.double() @ b.double() + bias.double())


# --- FlashAttention forward -----------------------------------------------------------------------------


def _flash_cases() -> Cases:
    def case(t: int, d: int, causal: bool) -> tuple:
        return (*(_randn(t, d, seed=t * d + i, dtype=torch.float16) for i in range(3)), causal)

    return {"T=1, d=16": case(1, 16, False), "T=37, d=16": case(37, 16, False),
            "T=37, d=16, causal": case(37, 16, True), "T=64, d=32, causal": case(64, 32, True),
            "T=20, d=32": case(20, 32, False)}


def _flash_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    q, k, v = _f64(q, k, v)
    s = q @ k.T * q.shape[1] ** -0.5
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=1) @ v


def _flash_launch(kernel, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    mem = Memory()
    t, d = q.shape
    qg, kg, vg, o = mem.input("q", q), mem.input("k", k), mem.input("v", v), mem.output("o", (t, d))
    kernel[(_cdiv(t, 16),)](qg, kg, vg, o, t, d**-0.5, D=d, CAUSAL=causal, BQ=16, BK=16)
    mem.check()
    return o


# --- the puzzles, easiest first --------------------------------------------------------------------------

_ALL = (
    Puzzle("add_constant", "Add a constant", "z[i] = x[i] + 10, i < N <= B, one program",
           lambda x: x.double() + 10, _add_constant_cases, _add_constant_launch),
    Puzzle("add_vectors", "Add two vectors", "z[i] = x[i] + y[i], i < N, blocks of B",
           lambda x, y: x.double() + y.double(), _vectors_cases, _add_vectors_launch),
    Puzzle("outer_add", "Outer sum (broadcast)", "z[i, j] = x[i] + y[j], i < M <= BM, j < N <= BN, one program",
           lambda x, y: x.double()[:, None] + y.double()[None, :],
           lambda: _outer_cases(((1, 1), (5, 20), (16, 32), (13, 7))), _outer_add_launch),
    Puzzle("outer_add_blocks", "Outer sum over a 2-D grid", "z[i, j] = x[i] + y[j], tiles of BM x BN",
           lambda x, y: x.double()[:, None] + y.double()[None, :], lambda: _outer_cases(TILE_SHAPES),
           _outer_add_blocks_launch),
    Puzzle("add_matrices", "Add matrices with row strides", "z[i, j] = x[i, j] + y[i, j], x rows stride_x apart",
           lambda x, y: x.double() + y.double(), _matrix_pair_cases, _add_matrices_launch),
    Puzzle("mul_relu", "Fused multiply + ReLU", "z[i, j] = relu(x[i, j] * y[j])",
           lambda x, y: torch.relu(x.double() * y.double()), _mul_relu_cases, _mul_relu_launch),
    Puzzle("mul_relu_backward", "Backward of multiply + ReLU",
           "dx[i, j] = dz[i, j] * y[j] * (x[i, j] y[j] > 0);  dy[j] = sum_i dz[i, j] * x[i, j] * (x[i, j] y[j] > 0)",
           _mul_relu_backward_ref, _mul_relu_backward_cases, _mul_relu_backward_launch),
    Puzzle("row_sum", "Sum of long rows", "z[i] = sum_j x[i, j], N > B: a loop over blocks",
           lambda x: x.double().sum(dim=1), _row_sum_cases, _per_row(32)),
    Puzzle("row_max", "Max of long rows", "z[i] = max_j x[i, j], -inf included",
           lambda x: x.double().amax(dim=1), _row_max_cases, _per_row(32)),
    Puzzle("cumsum", "Cumulative sum of long rows", "z[i, j] = sum_{k <= j} x[i, k], with a carry between blocks",
           lambda x: x.double().cumsum(dim=1), _cumsum_cases, _rows_launch(32)),
    Puzzle("softmax", "Softmax of a row", "z[i, j] = exp(x[i, j] - max_k x[i, k]) / sum_k exp(x[i, k] - max_k x[i, k])",
           lambda x: torch.softmax(x.double(), dim=1), _softmax_cases, _rows_launch(64)),
    Puzzle("layernorm", "LayerNorm forward", "z[i, :] = (x[i, :] - mean) / sqrt(var + eps) * w + b, biased var",
           _layernorm_ref, _layernorm_cases, _layernorm_launch),
    Puzzle("logsumexp", "Online logsumexp in one pass",
           "z[i] = log sum_j exp(x[i, j]) in one pass: m' = max(m, max(blk)), d' = d exp(m - m') + sum exp(blk - m')",
           lambda x: torch.logsumexp(x.double(), dim=1), lambda: _long_row_cases(True), _per_row(16)),
    Puzzle("softmax_long", "Softmax of long rows",
           "softmax(x[i, :]), N > B: (m, d) online in pass 1, exp(x - m) / d in pass 2",
           lambda x: torch.softmax(x.double(), dim=1), lambda: _long_row_cases(False), _rows_launch(16)),
    Puzzle("attention_scalar", "Scalar attention, FlashAttention style",
           "z[i] = sum_j softmax_j(q[i] k[j]) v[j], keys in blocks with an online softmax",
           _attention_scalar_ref, _attention_scalar_cases, _attention_scalar_launch),
    Puzzle("conv2d", "2-D convolution (stencil)", "z[i, j] = sum_{a < KH, b < KW} w[a, b] x[i + a, j + b], 0 outside x",
           _conv2d_ref, _conv2d_cases, _conv2d_launch),
    Puzzle("matvec", "Matrix-vector product", "z[i] = sum_k a[i, k] x[k], K > BK: a loop over blocks",
           lambda a, x: a.double() @ x.double(), _matvec_cases, _matvec_launch),
    Puzzle("dequantize_int4", "Dequantize packed int4",
           "z[i, j] = (nibble j of q[i, :] - 8) * s[i, j // G]; byte p holds j = 2p (low) and 2p + 1 (high)",
           _dequantize_ref, _dequantize_cases, _dequantize_launch),
    Puzzle("int4_matvec", "Matrix-vector with int4 weights", "z[i] = sum_j dequantize(q, s)[i, j] x[j]",
           _int4_matvec_ref, _int4_matvec_cases, _int4_matvec_launch),
    Puzzle("matmul", "Tiled matmul", "c[i, j] = sum_k a[i, k] b[k, j], tiles of BM x BN, a loop over K in BK",
           _matmul_ref, _matmul_cases, _matmul_launch),
    Puzzle("batched_matmul", "Batched matmul", "c[l, i, j] = sum_k a[l, i, k] b[l, k, j], the batch on grid axis 2",
           _matmul_ref, _batched_matmul_cases, _batched_matmul_launch),
    Puzzle("matmul_bias_relu", "Matmul with a fused bias + ReLU", "c[i, j] = relu(sum_k a[i, k] b[k, j] + bias[j])",
           _matmul_bias_relu_ref, _matmul_bias_relu_cases, _matmul_launch),
    Puzzle("flash_attention", "FlashAttention forward",
           "o = softmax(q k^T / sqrt(D) [causal: -inf above the diagonal]) v, one head, online softmax over keys",
           _flash_ref, _flash_cases, _flash_launch, atol=5e-3, rtol=5e-3),
)
PUZZLES: dict[str, Puzzle] = {p.name: p for p in _ALL}


# --- grading ---------------------------------------------------------------------------------------------


def grade_puzzle(name: str, kernel: object, quiet: bool = False) -> Verdict:
    """Launch `kernel` on every case of puzzle `name` and grade it against the reference: PASS, or the case and
    first wrong element (or what the launch raised), printed unless `quiet` and returned, never raised."""
    if name not in PUZZLES:
        raise KeyError(f"no puzzle {name!r}; the puzzles are {', '.join(PUZZLES)}")
    puzzle = PUZZLES[name]

    def launch(*args: torch.Tensor) -> torch.Tensor:
        from triton.runtime import KernelInterface  # here: Triton is imported after setup() chose the interpreter

        if not isinstance(kernel, KernelInterface):  # a host function would pass without being a kernel
            raise TypeError(f"the attempt is a {type(kernel).__name__}, not a @triton.jit kernel")
        return puzzle.launch(kernel, *args)

    with np.errstate(all="ignore"):  # the interpreter's NumPy would warn where a GPU quietly gives inf or NaN
        return grade(name, launch, puzzle.reference, puzzle.cases(), atol=puzzle.atol, rtol=puzzle.rtol, quiet=quiet)


def show_puzzle(name: str, kernel: object, case: str | None = None) -> list:
    """Draw which elements `kernel` reads and writes on one case of puzzle `name` (default: its first),
    program by program, with any out-of-bounds access flagged (`gpu_ml.memviz`, in Triton's interpreter).

    Each launch of the puzzle's launcher is traced instead of run; returns the traces.
    """
    import matplotlib.pyplot as plt

    from gpu_ml import memviz

    if name not in PUZZLES:
        raise KeyError(f"no puzzle {name!r}; the puzzles are {', '.join(PUZZLES)}")
    puzzle = PUZZLES[name]
    cases = puzzle.cases()
    case = next(iter(cases)) if case is None else case
    traces = []

    class Traced:  # stands in for the kernel: `kernel[grid](...)` records a trace and writes nothing
        def __getitem__(self, grid):
            return lambda *args, **kwargs: traces.append(memviz.trace(kernel, tuple(grid), *args, **kwargs))

    with np.errstate(all="ignore"):
        puzzle.launch(Traced(), *cases[case])
    for t in traces:
        print(f"{name}, case {case!r}: {t.summary()}")
        memviz.draw(t)
    plt.show()
    return traces


def progress(namespace: Mapping[str, object]) -> list[Verdict]:
    """Grade quietly every puzzle whose kernel (`<name>_kernel`) is in `namespace`; print a line each and the count."""
    verdicts = []
    for i, puzzle in enumerate(PUZZLES.values(), 1):
        kernel = namespace.get(puzzle.kernel_name)
        verdict = grade_puzzle(puzzle.name, kernel, quiet=True) if kernel is not None else None
        print(f"{i:2d}. {'solved' if verdict else 'to do ':6} {puzzle.name}")
        if verdict is not None:
            verdicts.append(verdict)
    print(f"{sum(map(bool, verdicts))} of {len(PUZZLES)} puzzles solved")
    return verdicts


# --- reading the puzzles' cells from a notebook -------------------------------------------------------------


def notebook_cells(path: str | Path) -> dict[str, str]:
    """name -> source of every code cell of the notebook at `path` whose first line is `# puzzle: NAME`."""
    return marked_cells(path, "# puzzle:")


def kernel_from_cell(name: str, source: str) -> object:
    """Run a puzzle cell's source with torch, triton and tl imported, as the notebook does, and return its kernel.

    The source is registered with `linecache` so that Triton (compiler or interpreter) can read it back.
    """
    import triton.language as tl

    import triton

    filename = f"<puzzle {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace = {"torch": torch, "triton": triton, "tl": tl}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[PUZZLES[name].kernel_name]


def grade_notebook(path: str | Path) -> list[tuple[Puzzle, Verdict]]:
    """Grade, quietly, every puzzle cell of a learner's notebook at `path` (as saved): a cell that does not run
    (a syntax error, say) counts as not solved, with what it raised."""
    results = []
    cells = notebook_cells(path)
    for name, puzzle in PUZZLES.items():
        if name not in cells:
            results.append((puzzle, Verdict(name, False, f"{name}: no '# puzzle: {name}' cell in {path}")))
            continue
        try:
            kernel = kernel_from_cell(name, cells[name])
        except Exception as exc:  # the learner's cell: explained, not raised
            results.append((puzzle, Verdict(name, False, f"{name}: the cell raised {type(exc).__name__}: {exc}")))
            continue
        results.append((puzzle, grade_puzzle(name, kernel, quiet=True)))
    return results
