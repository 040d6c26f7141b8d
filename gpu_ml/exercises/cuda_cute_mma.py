"""Exercises of cuda/07-cutlass-cute 03 (CuTe MMA atoms and a GEMM): which lane and register of an mma.sync hold an
element of A, B or C, the same map written as CuTe's thread-value layout, and the plan of a pipelined GEMM (blocks,
k-tiles, shared memory, blocks per SM). All are graded on any machine: the first two against the fragment tables of
the PTX ISA (which the notebook checks CuTe's MMA atoms against), the third against its formulas."""

from __future__ import annotations

import pycute as pc
import torch

from gpu_ml.exercises.core import Cases, Exercise

_NB = "cuda/07-cutlass-cute/03_cute_mma_and_gemm.ipynb"


def ptx_fragment(k: int, operand: str) -> dict[tuple[int, int], tuple[int, int]]:
    """{(lane, value): (row, column)} of mma.m16n8k{k} (k = 8 or 16) with .f16/.bf16 inputs and .f32 accumulators,
    from the PTX ISA's tables (groupID g = lane / 4, threadID_in_group t = lane % 4): A is 16 x k (row m, column
    k), B is k x 8 (row k, column n), C is 16 x 8. Value i is the register's element index (a0, a1, ...)."""
    values = {"A": k // 2, "B": k // 4, "C": 4}[operand]
    table = {}
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(values):
            if operand == "A":  # row g, +8 for a2, a3 (and a6, a7); column 2t + (i & 1), +8 for a4..a7
                table[lane, i] = (g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2))
            elif operand == "B":  # row 2t + (i & 1), +8 for b2, b3; column g
                table[lane, i] = (2 * t + (i & 1) + 8 * (i >> 1), g)
            else:  # row g, +8 for c2, c3; column 2t + (i & 1)
                table[lane, i] = (g + 8 * (i >> 1), 2 * t + (i & 1))
    return table


def _shape_of(k: int, operand: str) -> tuple[int, int]:
    return {"A": (16, k), "B": (k, 8), "C": (16, 8)}[operand]


def _fragment_cases() -> Cases:
    return {f"m16n8k{k} {operand}": (k, operand) for k in (16, 8) for operand in "ABC"}


def _owner_reference(k: int, operand: str) -> torch.Tensor:
    """[row, column] -> (lane, value): the inverse of the PTX table."""
    rows, cols = _shape_of(k, operand)
    out = torch.full((rows, cols, 2), -1, dtype=torch.int64)
    for (lane, i), (r, c) in ptx_fragment(k, operand).items():
        out[r, c] = torch.tensor([lane, i])
    return out


def _tv_reference(k: int, operand: str) -> torch.Tensor:
    """[lane + 32 value] -> the element's offset in CuTe's column-major order: A (m, k) -> m + 16 k, B (k, n) ->
    n + 8 k (CuTe keeps B as N x K), C (m, n) -> m + 16 n."""
    table = ptx_fragment(k, operand)
    values = len(table) // 32
    offset = {"A": lambda r, c: r + 16 * c, "B": lambda r, c: c + 8 * r, "C": lambda r, c: r + 16 * c}[operand]
    return torch.tensor([offset(*table[lane, i]) for i in range(values) for lane in range(32)], dtype=torch.int64)


def _tv_call(fn, k: int, operand: str) -> torch.Tensor:
    """The offsets of the attempt's layout (shape, stride) for every 1-D index: thread fastest, then value."""
    shape, stride = fn(k, operand)
    layout = pc.Layout(shape, stride)
    return torch.tensor([layout(i) for i in range(pc.size(layout))], dtype=torch.int64)


def _plan_cases() -> Cases:
    # (M, N, K, (BM, BN, BK), stages, bytes per element, shared memory per SM in bytes)
    h200 = 228 * 1024
    return {"the 128x256 kernel at 4096, H200": (4096, 4096, 4096, (128, 256, 32), 4, 2, h200),
            "the 128x128 kernel at 4096, H200": (4096, 4096, 4096, (128, 128, 64), 3, 2, h200),
            "the 128x128 kernel, A100 (164 KiB)": (1152, 640, 4160, (128, 128, 64), 3, 2, 164 * 1024),
            "fp32 tiles, 5 stages, L4 (100 KiB)": (512, 256, 1024, (64, 64, 32), 5, 4, 100 * 1024),
            "one tile, two stages": (128, 128, 32, (128, 128, 32), 2, 2, h200),
            "too big for one block per SM": (256, 256, 256, (256, 256, 64), 4, 2, 228 * 1024)}


def _plan_reference(M, N, K, tile, stages, elem_bytes, smem_per_sm) -> torch.Tensor:
    """(blocks, k-tiles per block, shared memory per block, blocks per SM by shared memory): every stage holds a
    BM x BK tile of A and a BN x BK tile of B; each resident block also takes the 1 KiB CUDA reserves per block."""
    bm, bn, bk = tile
    smem = stages * (bm + bn) * bk * elem_bytes
    return torch.tensor([(M // bm) * (N // bn), K // bk, smem, smem_per_sm // (smem + 1024)], dtype=torch.int64)


EXERCISES = [
    Exercise("mma_owner", _NB, "mma_owner", _fragment_cases, reference=_owner_reference,
             call=lambda fn, *args: torch.tensor(fn(*args), dtype=torch.int64), atol=0, rtol=0),
    Exercise("mma_tv_layout", _NB, "mma_tv_layout", _fragment_cases, reference=_tv_reference, call=_tv_call,
             atol=0, rtol=0),
    Exercise("gemm_plan", _NB, "gemm_plan", _plan_cases, reference=_plan_reference,
             call=lambda fn, *args: torch.tensor(fn(*args), dtype=torch.int64), atol=0, rtol=0),
]
