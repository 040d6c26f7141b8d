"""Exercises of cuda/07-cutlass-cute 04 (swizzling and pipelines): the banks a lane's access touches, CuTe's
`Swizzle<B, M, S>` applied to a row-major tile, and a swizzle that makes a column read conflict-free. All are graded
on any machine: against pycute's Swizzle and the bank model of the notebook's section 1 (which its GPU cells compare
with Nsight Compute's counts)."""

from __future__ import annotations

from collections import Counter

import pycute as pc
import torch

from gpu_ml.exercises.core import Cases, Exercise

_NB = "cuda/07-cutlass-cute/04_swizzling_and_pipelines.ipynb"
LANES = range(32)


def _banks_cases() -> Cases:
    # (tile shape, tile stride in elements, each lane's (row, column), bytes per element, bytes per lane's access)
    return {"float 32 x 32 row-major, a row (32-bit)": ((32, 32), (32, 1), [(0, i) for i in LANES], 4, 4),
            "float 32 x 32 row-major, a column (32-bit)": ((32, 32), (32, 1), [(i, 0) for i in LANES], 4, 4),
            "float 32 x 33 (padded rows), a column": ((32, 32), (33, 1), [(i, 5) for i in LANES], 4, 4),
            "float 32 x 32 column-major, every lane (3, 7)": ((32, 32), (1, 32), [(3, 7)] * 32, 4, 4),
            "half 64 x 64, 16-byte column read": ((64, 64), (64, 1), [(i % 8, 8 * (i // 8)) for i in LANES], 2, 16),
            "half 64 x 64 rows of 72, 16-byte column read": ((64, 64), (72, 1),
                                                              [(i % 8, 8 * (i // 8)) for i in LANES], 2, 16),
            "double 16 x 16, 8-byte, two rows": ((16, 16), (16, 1), [(i // 16, i % 16) for i in LANES], 8, 8),
            "half 16 x 64 column-major, 2-byte, a column": ((16, 64), (1, 16), [(i % 16, i // 16) for i in LANES],
                                                            2, 2)}


def _banks_reference(shape, stride, coords, elem_bytes, width) -> torch.Tensor:
    """[lane, k]: the k-th 32-bit bank lane's access touches, in address order; the access starts at byte
    elem_bytes * layout(row, column) and is `width` bytes long (aligned: it covers max(1, width / 4) words)."""
    layout = pc.Layout(shape, stride)
    words = max(1, width // 4)
    return torch.tensor([[(elem_bytes * layout(c) // 4 + k) % 32 for k in range(words)] for c in coords],
                        dtype=torch.int64)


def _offset_cases() -> Cases:
    # (B, M, S, rows, elements per row) of composition(Swizzle<B, M, S>, (rows, row_elems):(row_elems, 1))
    return {"Swizzle<3,3,3>, fp16 rows of 64 (128 bytes)": (3, 3, 3, 16, 64),
            "Swizzle<2,3,3>, fp16 rows of 32 (64 bytes)": (2, 3, 3, 16, 32),
            "Swizzle<3,2,3>, fp32 rows of 32": (3, 2, 3, 16, 32),
            "Swizzle<3,4,3>, bytes, rows of 128 (TMA's 128-byte mode)": (3, 4, 3, 8, 128),
            "Swizzle<3,3,4>, fp16 rows of 128 (256 bytes)": (3, 3, 4, 16, 128),
            "Swizzle<1,2,5>, rows of 16": (1, 2, 5, 8, 16),
            "Swizzle<2,0,-3> (YYY below ZZZ), rows of 8": (2, 0, -3, 4, 8),
            "Swizzle<0,4,3> (no bits: the identity)": (0, 4, 3, 4, 32)}


def _offset_reference(bits, base, shift, rows, row_elems) -> torch.Tensor:
    """[row, column] -> pycute's composition of Swizzle(bits, base, shift) with the row-major layout."""
    layout = pc.ComposedLayout(pc.Swizzle(bits, base, shift), 0, pc.Layout((rows, row_elems), (row_elems, 1)))
    return torch.tensor([[layout(r, c) for c in range(row_elems)] for r in range(rows)], dtype=torch.int64)


def _offset_call(fn, bits, base, shift, rows, row_elems) -> torch.Tensor:
    return torch.tensor([[fn(bits, base, shift, r, c, row_elems) for c in range(row_elems)] for r in range(rows)],
                        dtype=torch.int64)


def _wavefronts(addresses: list[int], width: int) -> int:
    """Wavefronts of one warp instruction in the notebook's model: lanes in phases of at most 128 bytes (32 lanes for
    4-byte accesses, 16 for 8, 8 for 16); per phase, the most distinct 32-bit words any one bank must deliver."""
    lanes = 32 if width <= 4 else 128 // width
    total = 0
    for first in range(0, len(addresses), lanes):
        words = {w for a in addresses[first:first + lanes] for w in range(a // 4, (a + width - 1) // 4 + 1)}
        total += max(Counter(w % 32 for w in words).values())
    return total


def _design_cases() -> Cases:
    # (bytes per row, bytes per element) of a row-major tile of 64 rows
    return {"fp16, rows of 128 bytes": (128, 2), "fp16, rows of 64 bytes": (64, 2), "fp16, rows of 32 bytes": (32, 2),
            "fp16, rows of 256 bytes": (256, 2), "fp32, rows of 128 bytes": (128, 4),
            "fp32, rows of 512 bytes": (512, 4), "int8, rows of 64 bytes": (64, 1)}


def _design_reference(row_bytes, elem_bytes) -> torch.Tensor:
    """What a good swizzle achieves: [permutes the tile, keeps 16-byte chunks whole, wavefronts of the worst 8-row
    column read (one phase), wavefronts of the worst 128 contiguous bytes written]."""
    return torch.tensor([1, 1, 1, 1], dtype=torch.int64)


def _design_call(fn, row_bytes, elem_bytes) -> torch.Tensor:
    """The same four facts for the attempt's (B, M, S), composed with the row-major tile of 64 rows."""
    bits, base, shift = fn(row_bytes, elem_bytes)
    swizzle = pc.Swizzle(int(bits), int(base), int(shift))
    row_elems, chunk = row_bytes // elem_bytes, 16 // elem_bytes
    size = 64 * row_elems
    permutes = sorted(swizzle(o) for o in range(size)) == list(range(size))
    whole = all(swizzle(o + j) == swizzle(o) + j for o in range(0, size, chunk) for j in range(chunk))
    reads = [[elem_bytes * swizzle((r0 + r) * row_elems + c) for r in range(8)]  # 8 lanes: one column, 8 rows
             for r0 in range(0, 64, 8) for c in range(0, row_elems, chunk)]
    writes = [[elem_bytes * swizzle(o + j * chunk) for j in range(8)]  # 8 lanes: 128 bytes in a row
              for o in range(0, size, 8 * chunk)]
    worst_read = max(_wavefronts(a, 16) for a in reads)
    worst_write = max(_wavefronts(a, 16) for a in writes)
    return torch.tensor([int(permutes), int(whole), worst_read, worst_write], dtype=torch.int64)


EXERCISES = [
    Exercise("lane_banks", _NB, "lane_banks", _banks_cases, reference=_banks_reference,
             call=lambda fn, *args: torch.tensor(fn(*args), dtype=torch.int64), atol=0, rtol=0),
    Exercise("swizzled_offset", _NB, "swizzled_offset", _offset_cases, reference=_offset_reference,
             call=_offset_call, atol=0, rtol=0),
    Exercise("swizzle_for", _NB, "swizzle_for", _design_cases, reference=_design_reference, call=_design_call,
             atol=0, rtol=0),
]
