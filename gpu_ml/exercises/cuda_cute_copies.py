"""Exercises of cuda/07-cutlass-cute 02 (CuTe tensors and copies): the TV layout of a tiled copy, the owner of an
element under `local_partition`, and the pointer + layout that `local_tile` returns. All are graded on any machine,
against formulas the notebook checks against CuTe's C++ (pycute enumerates the layouts)."""

from __future__ import annotations

import itertools

import pycute as pc
import torch

from gpu_ml.exercises.core import Cases, Exercise

_NB = "cuda/07-cutlass-cute/02_cute_tensors_and_copies.ipynb"


def _tv_cases() -> Cases:
    # (thread shape, thread stride, value shape, value stride) of make_tiled_copy(atom, threads, values)
    return {"8 x 4 threads row-major, 1 x 4 values": ((8, 4), (4, 1), (1, 4), (1, 1)),
            "32 x 8 threads column-major, 4 x 1 values": ((32, 8), (1, 32), (4, 1), (1, 4)),
            "4 x 8 threads row-major, 2 x 2 values": ((4, 8), (8, 1), (2, 2), (1, 2)),
            "4 x 2 threads column-major, 2 x 3 values row-major": ((4, 2), (1, 4), (2, 3), (3, 1)),
            "3 x 5 threads row-major, 2 x 1 values": ((3, 5), (5, 1), (2, 1), (1, 2)),
            "16 x 16 threads row-major, 1 x 8 halves (cp.async)": ((16, 16), (16, 1), (1, 8), (1, 1))}


def _tv_reference(thr_shape, thr_stride, val_shape, val_stride) -> torch.Tensor:
    """[thread, value] -> (m, n): thread thr(tm, tn) owns the block of val_shape at (tm * VM, tn * VN), and value
    val(vm, vn) of it is its element (vm, vn). (The notebook checks this against CuTe's get_layoutS_TV.)"""
    thr, val = pc.Layout(thr_shape, thr_stride), pc.Layout(val_shape, val_stride)
    (tms, tns), (vms, vns) = thr_shape, val_shape
    out = torch.full((pc.size(thr), pc.size(val), 2), -1, dtype=torch.int64)
    for tm, tn, vm, vn in itertools.product(range(tms), range(tns), range(vms), range(vns)):
        out[thr((tm, tn)), val((vm, vn))] = torch.tensor([tm * vms + vm, tn * vns + vn])
    return out


def _owner_cases() -> Cases:
    # (thread shape, thread stride, rows, cols) of local_partition(tile of rows x cols, threads, t) for every t
    return {"2 x 4 threads row-major, 8 x 8 tile": ((2, 4), (4, 1), 8, 8),
            "4 x 2 threads column-major, 8 x 6 tile": ((4, 2), (1, 4), 8, 6),
            "32 x 8 threads column-major, 64 x 16 tile": ((32, 8), (1, 32), 64, 16),
            "1 x 32 threads (a warp along a row), 4 x 64 tile": ((1, 32), (32, 1), 4, 64),
            "3 x 3 threads row-major, 9 x 6 tile": ((3, 3), (3, 1), 9, 6)}


def _owner_reference(thr_shape, thr_stride, rows, cols) -> torch.Tensor:
    """Element (r, c) goes to thread thr(r mod TM, c mod TN): local_partition deals the tile out cyclically."""
    thr = pc.Layout(thr_shape, thr_stride)
    tms, tns = thr_shape
    return torch.tensor([[thr((r % tms, c % tns)) for c in range(cols)] for r in range(rows)], dtype=torch.int64)


def _tile_cases() -> Cases:
    # (matrix shape, matrix stride, tile shape, tile coordinate) of local_tile(matrix, tile, coordinate)
    return {"6 x 8 row-major, tiles of 2 x 4, tile (1, 1)": ((6, 8), (8, 1), (2, 4), (1, 1)),
            "6 x 8 row-major, tiles of 2 x 4, tile (2, 0)": ((6, 8), (8, 1), (2, 4), (2, 0)),
            "8 x 12 column-major, tiles of 4 x 3, tile (1, 3)": ((8, 12), (1, 8), (4, 3), (1, 3)),
            "a transposed view (10, 6):(1, 10), tiles of 5 x 2, tile (1, 2)": ((10, 6), (1, 10), (5, 2), (1, 2)),
            "every 3rd column (5, 4):(10, 3), tiles of 1 x 2, tile (4, 1)": ((5, 4), (10, 3), (1, 2), (4, 1)),
            "the whole matrix as one tile": ((4, 4), (4, 1), (4, 4), (0, 0))}


def _tile_reference(shape, stride, tile, coord) -> torch.Tensor:
    """Where each element of the tile lives, in CuTe's order: zipped_divide, then the tile at `coord`."""
    tiled = pc.zipped_divide(pc.Layout(shape, stride), tuple(pc.Layout(t, 1) for t in tile))
    inside = itertools.product(range(tile[1]), range(tile[0]))  # the first mode fastest
    return torch.tensor([tiled(((r, c), coord)) for c, r in inside], dtype=torch.int64)


def _tile_call(fn, shape, stride, tile, coord) -> torch.Tensor:
    """The offsets the attempt's (start, tile shape, tile stride) describe: start + the tile layout's offsets."""
    start, tile_shape, tile_stride = fn(shape, stride, tile, coord)
    layout = pc.Layout(tuple(tile_shape), tuple(tile_stride))
    return torch.tensor([start + layout(i) for i in range(pc.size(layout))], dtype=torch.int64)


EXERCISES = [
    Exercise("tv_coords", _NB, "tv_coords", _tv_cases, reference=_tv_reference,
             call=lambda fn, *args: torch.tensor(fn(*args), dtype=torch.int64), atol=0, rtol=0),
    Exercise("partition_owner", _NB, "partition_owner", _owner_cases, reference=_owner_reference,
             call=lambda fn, *args: torch.tensor(fn(*args), dtype=torch.int64), atol=0, rtol=0),
    Exercise("tile_view", _NB, "tile_view", _tile_cases, reference=_tile_reference, call=_tile_call,
             atol=0, rtol=0),
]
