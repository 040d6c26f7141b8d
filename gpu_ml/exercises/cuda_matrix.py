"""Exercises of cuda/02-matrix-ops: CUDA ones (graded like cudalings, on a GPU) and Python ones.

The CUDA cases share one rule: outputs start as NaN and are followed by GUARD more (gpu_ml.cudalings), so an output
a kernel never writes and a store past the end are both caught; inputs are copied into buffers with slack behind
them, so that a kernel which reads a little too far (a stub, a missing bound) reads harmless numbers instead of
faulting and breaking the GPU context of the process.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from gpu_ml.cudalings import (
    NAN,
    Cases,
    Cudaling,
    checked_call,
    error_name,
    guarded_buffer,
    inside_guard,
    randn_on,
    seeded_rng,
)
from gpu_ml.exercises.core import CudaExercise, Exercise

NAIVE = "cuda/02-matrix-ops/01_matmul_naive_to_shared.ipynb"
REGISTERS = "cuda/02-matrix-ops/02_matmul_register_tiling.ipynb"
TENSOR_CORES = "cuda/02-matrix-ops/03_tensor_cores.ipynb"
SLACK = 4096  # elements behind each input


def _padded(x: torch.Tensor) -> torch.Tensor:
    """x (contiguous) at the start of a buffer with SLACK more elements behind it (zeros)."""
    buf = torch.zeros(x.numel() + SLACK, dtype=x.dtype, device=x.device)
    buf[: x.numel()] = x.flatten()
    return buf


def _pairs(shapes: list[tuple[int, int, int]], device: str, *, nt: bool = False,
           dtype: torch.dtype = torch.float32) -> Cases:
    """'M x N x K' -> (a of M x K, b of K x N, or of N x K when nt) with normal values."""
    g = seeded_rng()
    return {f"M, N, K = {m}, {n}, {k}": (randn_on(g, m, k, device=device, dtype=dtype),
                                         randn_on(g, *((n, k) if nt else (k, n)), device=device, dtype=dtype))
            for m, n, k in shapes}


def _matmul(fn: Callable, a: torch.Tensor, b: torch.Tensor, n: int, *extra) -> torch.Tensor:
    """Call fn(a, b, c, M, N, K, *extra) on padded copies of a and b and return c (M x N), guards checked."""
    m, k = a.shape
    c = guarded_buffer(m * n, a.device.type)
    checked_call(fn, _padded(a), _padded(b), c, m, n, k, *extra)
    return inside_guard(c, m * n, "C").view(m, n)


# ----------------------------------------------------------------------------- 01_matmul_naive_to_shared

def _sgemm_32x8_cases(device: str) -> Cases:
    # not multiples of 32 or 8; one row and one column (a kernel that maps threadIdx.x to rows leaves most of C
    # unwritten there); K below a warp; K = 0 (every output is an empty sum: 0)
    return _pairs([(1, 1, 1), (17, 33, 65), (1, 300, 70), (300, 1, 70), (64, 64, 3), (127, 129, 131), (9, 100, 0)],
                  device)


def _sgemm_32x8_run(fn: Callable, a: torch.Tensor, b: torch.Tensor):
    return _matmul(fn, a, b, b.shape[1])


def _sgemm_nt_cases(device: str) -> Cases:
    return _pairs([(1, 1, 1), (17, 33, 65), (1, 100, 40), (100, 1, 40), (64, 96, 32), (127, 129, 131)], device,
                  nt=True)


NT_SMEM = 32 * 32 * 4 + 32 * 33 * 4  # As[32][32] and the padded Bs[32][33]


def _sgemm_nt_run(fn: Callable, a: torch.Tensor, b: torch.Tensor):
    smem = guarded_buffer(1, a.device.type, torch.int32)
    c = _matmul(fn, a, b, b.shape[0], smem)
    nbytes = int(inside_guard(smem, 1, "smem_bytes")[0])
    if nbytes < NT_SMEM:
        raise AssertionError(f"the kernel's shared memory is {nbytes} bytes: the values are right, but the inner loop "
                             f"reads a column of Bs, a 32-way bank conflict; pad it to Bs[32][33] ({NT_SMEM} bytes "
                             "with As[32][32])")
    return c


def _double_degree_cases() -> Cases:
    return {f"pad={p}": (p,) for p in (0, 1, 2, 3, 4, 16, 31)}


def _degree_call(fn: Callable, *args) -> torch.Tensor:
    value = fn(*args)
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"returned {value!r}, not an int")
    return torch.tensor([value])


def _passes_4b(words: list[int]) -> int:
    """The notebooks' conflict_degree: the most distinct 4-byte words that fall in one bank."""
    per_bank: dict[int, set[int]] = {}
    for w in words:
        per_bank.setdefault(w % 32, set()).add(w)
    return max(len(s) for s in per_bank.values())


def _double_degree_ref(pad: int) -> torch.Tensor:
    # half-warp: lanes 0-15 read tile[lane][3] of double tile[32][32 + pad]; each double is words 2e and 2e + 1
    return torch.tensor([_passes_4b([2 * (lane * (32 + pad) + 3) + h for lane in range(16) for h in (0, 1)])])


# ----------------------------------------------------------------------------- 02_matmul_register_tiling

def _thread_tile_cases(device: str) -> Cases:
    # smaller than one 64 x 64 block tile, not multiples of 64 or of BK = 8, one row, one column, several K tiles
    return _pairs([(1, 1, 1), (17, 33, 65), (64, 64, 8), (65, 129, 9), (1, 200, 24), (200, 1, 24), (130, 70, 3)],
                  device)


def _thread_tile_run(fn: Callable, a: torch.Tensor, b: torch.Tensor):
    return _matmul(fn, a, b, b.shape[1])


VEC_TILE = (64, 64, 8)  # sgemm_vec_tile's BM, BN, BK
_VEC_REFUSED = [(100, 64, 8), (64, 96, 8), (64, 64, 4)]


def _vec_cases(device: str) -> Cases:
    cases = _pairs([(64, 64, 8), (128, 64, 24), (64, 192, 16), (192, 128, 64)], device)
    for (m, n, k), args in zip(_VEC_REFUSED, _pairs(_VEC_REFUSED, device).values(), strict=True):
        what = "M" if m % 64 else "N" if n % 64 else "K"
        cases[f"M, N, K = {m}, {n}, {k}: {what} not a multiple of its tile, refused"] = args
    return cases


def _refused(m: int, n: int, k: int) -> bool:
    bm, bn, bk = VEC_TILE
    return bool(m % bm or n % bn or k % bk)


def _vec_run(fn: Callable, a: torch.Tensor, b: torch.Tensor):
    (m, k), n = a.shape, b.shape[1]
    if not _refused(m, n, k):
        return _matmul(fn, a, b, n)
    c = guarded_buffer(m * n, a.device.type)
    rc = fn(_padded(a), _padded(b), c, m, n, k)
    if rc != 1:
        raise AssertionError(f"sgemm_vec_tile returned {rc} ({error_name(rc)}) for M, N, K = {m}, {n}, {k}: "
                             "shapes that are not whole tiles must be refused with cudaErrorInvalidValue (1), "
                             "before any launch")
    return inside_guard(c, m * n, "C").view(m, n)


def _vec_ref(a: torch.Tensor, b: torch.Tensor):
    (m, k), n = a.shape, b.shape[1]
    if _refused(m, n, k):
        return torch.full((m, n), NAN, dtype=torch.float64, device=a.device)  # refused: C untouched
    return a.double() @ b.double()


def _v5_degree_cases() -> Cases:
    return {f"TN={tn}": (tn,) for tn in (1, 2, 4, 8, 16, 32)}


def _v5_degree_ref(tn: int) -> torch.Tensor:
    # a warp reads Bs[k][tcol] with tcol = TN * (t % 16): scalar 4-byte reads
    return torch.tensor([_passes_4b([tn * (t % 16) for t in range(32)])])


# ----------------------------------------------------------------------------- 03_tensor_cores

def _mma_cases(device: str) -> Cases:
    # the smallest problem (one instruction), then several warps and several K steps, rectangular throughout so that
    # a transposed fragment or swapped halves give wrong values
    return _pairs([(16, 8, 16), (16, 24, 48), (48, 16, 32), (32, 64, 128), (80, 40, 16)], device,
                  dtype=torch.float16)


def _mma_run(fn: Callable, a: torch.Tensor, b: torch.Tensor):
    return _matmul(fn, a, b, b.shape[1])


def _swizzle_cases() -> Cases:
    return {f"rows of {c} chunks ({16 * c} bytes); the output: passes of the worst 8-row read": (c,)
            for c in (1, 2, 4, 8, 16, 32)}


def _swizzle_call(fn: Callable, chunks: int) -> torch.Tensor:
    """(is each row a permutation of its chunks, worst passes of an 8-row ldmatrix read) over 64 rows."""
    rows = 64
    place = [[fn(r, c, chunks) for c in range(chunks)] for r in range(rows)]
    for r, row in enumerate(place):
        if sorted(row) != list(range(chunks)):
            raise AssertionError(f"row {r} puts its chunks at {row}: every chunk needs a place of its own in its "
                                 f"row, 0 .. {chunks - 1}")
    worst = 1
    for r0 in range(0, rows, 8):
        for c in range(chunks):
            groups: dict[int, set[int]] = {}
            for r in range(r0, r0 + 8):  # ldmatrix: chunk c of 8 consecutive rows
                chunk = r * chunks + place[r][c]  # 16-byte chunk index in the tile
                groups.setdefault(chunk % 8, set()).add(chunk)
            worst = max(worst, max(len(s) for s in groups.values()))
    return torch.tensor([worst])


# ----------------------------------------------------------------------------- the exercises

EXERCISES: list[Exercise] = [
    Exercise("double_column_degree", NAIVE, "double_column_degree", _double_degree_cases, _double_degree_ref,
             _degree_call),
    Exercise("v5_read_degree", REGISTERS, "v5_read_degree", _v5_degree_cases, _v5_degree_ref, _degree_call),
    Exercise("swizzle", TENSOR_CORES, "swizzle", _swizzle_cases, lambda chunks: torch.tensor([1]), _swizzle_call),
]

_SGEMM = ("float*", "float*", "float*", "int", "int", "int")
CUDA_EXERCISES: list[CudaExercise] = [
    CudaExercise(NAIVE, Cudaling("sgemm_32x8", _SGEMM, _sgemm_32x8_cases, _sgemm_32x8_run,
                                 lambda a, b: a.double() @ b.double(), atol=1e-4, rtol=1e-4)),
    CudaExercise(NAIVE, Cudaling("sgemm_nt_shared", (*_SGEMM, "int*"), _sgemm_nt_cases, _sgemm_nt_run,
                                 lambda a, b: a.double() @ b.double().t(), atol=1e-4, rtol=1e-4)),
    CudaExercise(REGISTERS, Cudaling("sgemm_thread_tile", _SGEMM, _thread_tile_cases, _thread_tile_run,
                                     lambda a, b: a.double() @ b.double(), atol=1e-4, rtol=1e-4)),
    CudaExercise(REGISTERS, Cudaling("sgemm_vec_tile", _SGEMM, _vec_cases, _vec_run, _vec_ref, atol=1e-4,
                                     rtol=1e-4)),
    CudaExercise(TENSOR_CORES, Cudaling("mma_fragments", ("half*", "half*", "float*", "int", "int", "int"),
                                        _mma_cases, _mma_run, lambda a, b: a.double() @ b.double(),
                                        capability=(8, 0), arch="sm_80", atol=1e-3, rtol=1e-3)),
]
