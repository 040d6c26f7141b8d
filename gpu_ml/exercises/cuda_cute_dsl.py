"""Exercises of cuda/07-cutlass-cute 06 (CuTe-DSL): a TV layout and a tiling as the DSL builds them, and the plan of
the Hopper GEMM's wgmma and pipeline stages. Graded on any machine: the layouts' references come from the DSL itself
(`cutlass.cute`, imported only when a layout exercise is graded), compared offset by offset with pycute."""

from __future__ import annotations

from collections.abc import Callable

import torch

from gpu_ml.exercises.core import Cases, Exercise
from gpu_ml.exercises.cuda_cute import _enumerated, _offsets

_NB = "cuda/07-cutlass-cute/06_cute_dsl.ipynb"


def _dsl_layout(build: Callable) -> torch.Tensor:
    """The offsets of the layout that `build(cute)` returns while the DSL traces a function (on any machine)."""
    import ast

    import cutlass.cute as cute

    printed = []

    @cute.jit
    def trace():  # a new function for every layout: traced (and its host code run) once
        printed.append(str(build(cute)))

    trace()
    shape, stride = printed[0].split(":")
    return _offsets(ast.literal_eval(shape), ast.literal_eval(stride))


def _tv_cases() -> Cases:
    return {"4x32 threads, 4x8 values": ((4, 32), (4, 8)), "4x32 threads, 4x4 values (fp32)": ((4, 32), (4, 4)),
            "8x16 threads, 1x8 values": ((8, 16), (1, 8)), "32x4 threads, 2x2 values": ((32, 4), (2, 2)),
            "1x32 threads, 1x1 value": ((1, 32), (1, 1)), "2x64 threads, 3x8 values": ((2, 64), (3, 8))}


def _tv_reference(thread_shape, value_shape) -> torch.Tensor:
    def build(cute):
        threads = cute.make_ordered_layout(thread_shape, order=(1, 0))
        values = cute.make_ordered_layout(value_shape, order=(1, 0))
        return cute.make_layout_tv(threads, values)[1]

    return _dsl_layout(build)


def _plan_cases() -> Cases:
    return {"128x256x64, 2 warpgroups": (128, 256, 64, 2), "128x128x64, 1 warpgroup": (128, 128, 64, 1),
            "64x256x64, 1 warpgroup": (64, 256, 64, 1), "256x128x32, 2 warpgroups": (256, 128, 32, 2),
            "64x64x16, 1 warpgroup": (64, 64, 16, 1)}


def _plan_reference(BM: int, BN: int, BK: int, warpgroups: int) -> torch.Tensor:
    per_warpgroup = BM // warpgroups // 64 * (BK // 16)
    return torch.tensor([per_warpgroup, BM * BN // (128 * warpgroups), (BM + BN) * BK * 2], dtype=torch.int64)


def _tiles_cases() -> Cases:
    return {"12 x 16 in 4 x 8": (12, 16, 4, 8), "16 x 256 in 16 x 256": (16, 256, 16, 256),
            "64 x 512 in 16 x 256": (64, 512, 16, 256), "6 x 10 in 3 x 5": (6, 10, 3, 5),
            "8 x 8 in 1 x 1": (8, 8, 1, 1)}


def _tiles_reference(rows: int, cols: int, tile_rows: int, tile_cols: int) -> torch.Tensor:
    return _dsl_layout(lambda cute: cute.zipped_divide(cute.make_layout((rows, cols), stride=(cols, 1)),
                                                       (tile_rows, tile_cols)))


EXERCISES = [
    Exercise("tv_layout", _NB, "tv_layout", _tv_cases, reference=_tv_reference, call=_enumerated, atol=0, rtol=0),
    Exercise("wgmma_plan", _NB, "wgmma_plan", _plan_cases, reference=_plan_reference,
             call=lambda fn, *args: torch.tensor(fn(*args), dtype=torch.int64), atol=0, rtol=0),
    Exercise("row_major_tiles", _NB, "row_major_tiles", _tiles_cases, reference=_tiles_reference, call=_enumerated,
             atol=0, rtol=0),
]
