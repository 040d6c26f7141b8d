"""Exercises of cuda/07-cutlass-cute 01 (CuTe layouts): the layout function, GQA's head grouping and a tiling of a
row-major matrix, each graded on any machine by enumerating layouts with pycute (NVIDIA's Python model of CuTe's
layout algebra, shipped with CUTLASS)."""

from __future__ import annotations

from collections.abc import Callable

import pycute as pc
import torch

from gpu_ml.exercises.core import Cases, Exercise

_NB = "cuda/07-cutlass-cute/01_cute_layouts.ipynb"


def _offsets(shape, stride) -> torch.Tensor:
    """The offsets of the layout shape:stride for every 1-D index, by pycute."""
    layout = pc.Layout(shape, stride)
    return torch.tensor([layout(i) for i in range(pc.size(layout))], dtype=torch.int64)


def _enumerated(make: Callable, *args) -> torch.Tensor:
    """The offsets of the layout (shape, stride) that the attempt returns for `args`."""
    shape, stride = make(*args)
    return _offsets(shape, stride)


def _layout_cases() -> Cases:
    return {"4 x 8 column-major": ((4, 8), (1, 4)), "4 x 8 row-major": ((4, 8), (8, 1)),
            "nested (2,(2,2)):(4,(2,1))": ((2, (2, 2)), (4, (2, 1))), "rank 1, 7:3": (7, 3),
            "a stride of 0": ((4, 8), (0, 1)), "modes of size 1": ((1, (3, 1), 2), (5, (1, 9), 3)),
            "depth 3": ((2, ((2, 3), 2)), (1, ((12, 2), 6)))}


def _gqa_cases() -> Cases:
    return {"GQA 32 / 8": (32, 8), "MHA 12 / 12": (12, 12), "MQA 16 / 1": (16, 1), "GQA 64 / 8": (64, 8),
            "GQA 6 / 2": (6, 2)}


def _gqa_reference(q_heads: int, kv_heads: int) -> torch.Tensor:
    return torch.arange(kv_heads).repeat_interleave(q_heads // kv_heads)


def _tiled_cases() -> Cases:
    return {"16 x 16 in 4 x 4": (16, 16, 4, 4), "8 x 12 in 2 x 3": (8, 12, 2, 3), "6 x 10 in 6 x 5": (6, 10, 6, 5),
            "one tile": (4, 4, 4, 4), "tiles of one element": (3, 5, 1, 1)}


def _tiled_reference(rows: int, cols: int, tile_rows: int, tile_cols: int) -> torch.Tensor:
    """Offset of ((r, s), (tr, tc)) = (tr * tile_rows + r) * cols + tc * tile_cols + s, in CuTe's index order."""
    tiles_r, tiles_c = rows // tile_rows, cols // tile_cols
    return torch.tensor([(tr * tile_rows + r) * cols + tc * tile_cols + s
                         for tc in range(tiles_c) for tr in range(tiles_r)  # the last mode varies slowest
                         for s in range(tile_cols) for r in range(tile_rows)], dtype=torch.int64)


EXERCISES = [
    Exercise("layout_offsets", _NB, "layout_offsets", _layout_cases, reference=_offsets,
             call=lambda fn, shape, stride: torch.tensor(fn(shape, stride), dtype=torch.int64), atol=0, rtol=0),
    Exercise("gqa_layout", _NB, "gqa_layout", _gqa_cases, reference=_gqa_reference, call=_enumerated,
             atol=0, rtol=0),
    Exercise("tiled_layout", _NB, "tiled_layout", _tiled_cases, reference=_tiled_reference, call=_enumerated,
             atol=0, rtol=0),
]
