"""Exercises of cuda/01-basics: CUDA ones (graded like cudalings, on a GPU) and Python ones."""

from __future__ import annotations

from collections.abc import Callable

import torch

from gpu_ml.cudalings import Cases, Cudaling, checked_call, guarded_buffer, inside_guard, randn_on, seeded_rng
from gpu_ml.exercises.core import CudaExercise, Exercise

HELLO = "cuda/01-basics/01_hello_cuda.ipynb"
MEMORY = "cuda/01-basics/02_memory_management.ipynb"
COALESCING = "cuda/01-basics/03_coalescing_and_occupancy.ipynb"

# ----------------------------------------------------------------------------- 01_hello_cuda


def _saxpy_cases(device: str) -> Cases:
    """(n, blocks, threads): one element; grids far too small (each thread loops); more threads than elements;
    odd block sizes; a covering grid. y is updated in place, so an element done twice (a stride of blockDim.x
    alone, or a loop that ignores blockIdx) comes out wrong, not just repeated."""
    g = seeded_rng()
    shapes = [(1, 1, 32), (1000, 1, 32), (1000, 8, 1024), (4099, 3, 96), (100_003, 7, 96), (100_003, 391, 256)]
    return {f"n={n}, {b} block(s) of {t}": (randn_on(g, n, device=device), randn_on(g, n, device=device), b, t)
            for n, b, t in shapes}


def _saxpy_run(fn: Callable, x: torch.Tensor, y: torch.Tensor, blocks: int, threads: int):
    n = x.numel()
    buf = guarded_buffer(n, x.device.type)
    buf[:n] = y  # updated in place, in a copy: y itself stays for the reference
    checked_call(fn, 2.5, x, buf, n, blocks, threads)
    return inside_guard(buf, n, "y")


# Shapes (depth, rows, cols) with one side of 1, odd sizes, and several blocks of 8 x 8 x 4 along every axis.
_SHAPES_3D = [(1, 1, 1), (1, 1, 100), (1, 100, 1), (100, 1, 1), (3, 17, 19), (13, 17, 19), (9, 5, 2)]
_EXTRA_3D = 4096  # more guard elements: an unguarded z (or y) overhang lands further past the end than GUARD


def _index_3d_cases(device: str) -> Cases:
    return {f"{d} x {r} x {c}": (d, r, c, device) for d, r, c in _SHAPES_3D}


def _index_3d_run(fn: Callable, depth: int, rows: int, cols: int, device: str):
    n = depth * rows * cols
    outs = [guarded_buffer(n, device, torch.int32, guard=_EXTRA_3D) for _ in range(3)]
    checked_call(fn, *outs, depth, rows, cols)
    return tuple(inside_guard(buf, n, name).view(depth, rows, cols)
                 for buf, name in zip(outs, ("depth_of", "row_of", "col_of"), strict=True))


def _index_3d_ref(depth: int, rows: int, cols: int, device: str):
    axes = [torch.arange(k, dtype=torch.int32, device=device) for k in (depth, rows, cols)]
    return tuple(t.contiguous() for t in torch.meshgrid(*axes, indexing="ij"))


# ----------------------------------------------------------------------------- 02_memory_management


def _table_lookup_cases(device: str) -> Cases:
    """(idx, table_size): the host builds table[k] = 1 + k / 4 and the kernel gathers table[idx[i]]. Random indices
    reach the last three quarters of the table, which a copy of table_size bytes (not floats) leaves unwritten."""
    g = seeded_rng()

    def ints(n: int, size: int) -> torch.Tensor:
        return torch.randint(0, size, (n,), generator=g, dtype=torch.int32).to(device)

    return {"n=1, a table of 1": (ints(1, 1), 1), "n=1000, a table of 10": (ints(1000, 10), 10),
            "n=3000, every entry once, backwards": (torch.arange(2999, -1, -1, dtype=torch.int32).to(device), 3000),
            "n=5000, a table of 100000": (ints(5000, 100_000), 100_000),
            "n=100003, a table of 4099": (ints(100_003, 4099), 4099)}


def _table_lookup_run(fn: Callable, idx: torch.Tensor, table_size: int):
    out = guarded_buffer(idx.numel(), idx.device.type)
    checked_call(fn, idx, out, idx.numel(), table_size)
    return inside_guard(out, idx.numel())


def _staged_upload_cases(device: str) -> Cases:
    """(n, chunk): a last chunk shorter than the others, chunks that divide n, a chunk of one float, a chunk larger
    than n, one element."""
    return {f"n={n}, chunks of {c}": (n, c, device)
            for n, c in [(1, 1024), (1000, 256), (1024, 256), (5, 1), (3000, 10_000), (100_003, 4096)]}


def _staged_upload_run(fn: Callable, n: int, chunk: int, device: str):
    dst = guarded_buffer(n, device)
    checked_call(fn, dst, n, chunk)
    return inside_guard(dst, n, "dst")


def _managed_scale_cases(device: str) -> Cases:
    return {f"n={n}": (n, device) for n in (1, 1000, 4097, 100_003)}


def _managed_scale_run(fn: Callable, n: int, device: str):
    out = guarded_buffer(n, device)
    checked_call(fn, out, n, -0.75)
    return inside_guard(out, n)


# ----------------------------------------------------------------------------- 03_coalescing_and_occupancy


def _warp_sectors_cases() -> Cases:
    """(index, elem_bytes): rows of 32 element indices, one warp's load each. Coalesced floats (4 sectors), strides
    of 2, 8 and 32 floats, a start one float past a sector boundary (5 sectors, not 4), one address for all (1),
    fp16 and float4 elements (2 and 16 sectors for 32 consecutive elements), a shuffle inside 128 bytes (still 4),
    and random gathers."""
    g = torch.Generator().manual_seed(0)
    t = torch.arange(32)
    floats = torch.stack([t, 2 * t, 8 * t, 32 * t, t + 1, torch.zeros(32, dtype=torch.int64), t.flip(0),
                          torch.randperm(32, generator=g), 3 * t + 5])
    cases = {"float32: coalesced, strides 2, 8, 32, offset by 1, one address, reversed, shuffled, stride 3 + 5":
             (floats, 4),
             "float16: coalesced, stride 2, offset by 15": (torch.stack([t, 2 * t, t + 15]), 2),
             "float4 (16 bytes): coalesced, stride 2": (torch.stack([t, 2 * t]), 16),
             "int8: coalesced, stride 32, stride 33": (torch.stack([t, 32 * t, 33 * t]), 1),
             "float32, 100 warps of random gathers from 4096 floats": (torch.randint(0, 4096, (100, 32), generator=g),
                                                                       4)}
    return cases  # on the CPU, also on a GPU machine: this is arithmetic on addresses


def _warp_sectors_ref(index: torch.Tensor, elem_bytes: int) -> torch.Tensor:
    sectors = (index.long() * elem_bytes // 32).sort(dim=1).values
    return 1 + (sectors[:, 1:] != sectors[:, :-1]).sum(1)


def _warp_sectors_call(fn: Callable, index: torch.Tensor, elem_bytes: int) -> torch.Tensor:
    got = torch.as_tensor(fn(index.clone(), elem_bytes))
    if got.shape != (index.shape[0],):
        raise ValueError(f"returned shape {tuple(got.shape)}, expected ({index.shape[0]},): one count per warp (row)")
    return got.to(device=index.device, dtype=torch.int64)


def _transpose_batched_cases(device: str) -> Cases:
    g = seeded_rng()
    return {f"{b} x {r} x {c}": (randn_on(g, b, r, c, device=device),)
            for b, r, c in [(1, 1, 1), (2, 1, 100), (3, 100, 1), (2, 31, 33), (5, 33, 65), (4, 100, 257)]}


def _transpose_batched_run(fn: Callable, x: torch.Tensor):
    batch, rows, cols = x.shape
    out = guarded_buffer(x.numel(), x.device.type)
    checked_call(fn, x, out, batch, rows, cols)
    return inside_guard(out, x.numel()).view(batch, cols, rows)


def _copy_occupancy_cases(device: str) -> Cases:
    """Up to 2^22 + 3 floats: more than the one-wave grid of any GPU covers with one thread per element."""
    g = seeded_rng()
    return {f"n={n}": (randn_on(g, n, device=device),) for n in (1, 1000, 100_003, 2**22 + 3)}


def _copy_occupancy_run(fn: Callable, x: torch.Tensor):
    n = x.numel()
    out, config = guarded_buffer(n, x.device.type), guarded_buffer(2, x.device.type, torch.int32)
    checked_call(fn, x, out, n, config)
    block, grid = inside_guard(config, 2, "config").tolist()
    if not (32 <= block <= 1024 and block % 32 == 0):
        raise AssertionError(f"config[0] is {block}: write the block size that cudaOccupancyMaxPotentialBlockSize "
                             "suggested (a multiple of 32, at most 1024)")
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 1
    if grid < 1 or grid % sms:
        raise AssertionError(f"config[1] is {grid}: write the minimum grid that cudaOccupancyMaxPotentialBlockSize "
                             f"returned (a whole number of blocks on each of the {sms} SMs)")
    return inside_guard(out, n)


EXERCISES: list[Exercise] = [
    Exercise("warp_sectors", COALESCING, "warp_sectors", _warp_sectors_cases, reference=_warp_sectors_ref,
             call=_warp_sectors_call),
]
CUDA_EXERCISES: list[CudaExercise] = [
    CudaExercise(HELLO, Cudaling("saxpy", ("float", "float*", "float*", "long long", "int", "int"), _saxpy_cases,
                                 _saxpy_run, lambda x, y, blocks, threads: 2.5 * x.double() + y.double())),
    CudaExercise(HELLO, Cudaling("index_3d", ("int*", "int*", "int*", "int", "int", "int"), _index_3d_cases,
                                 _index_3d_run, _index_3d_ref)),
    CudaExercise(MEMORY, Cudaling("table_lookup", ("int*", "float*", "int", "int"), _table_lookup_cases,
                                  _table_lookup_run, lambda idx, size: 1 + 0.25 * idx.double())),
    CudaExercise(MEMORY, Cudaling("staged_upload", ("float*", "int", "int"), _staged_upload_cases,
                                  _staged_upload_run,
                                  lambda n, chunk, device: 0.5 * torch.arange(n, dtype=torch.float64, device=device))),
    CudaExercise(MEMORY, Cudaling("managed_scale", ("float*", "int", "float"), _managed_scale_cases,
                                  _managed_scale_run,
                                  lambda n, device: 1 - 0.75 * torch.arange(n, dtype=torch.float64, device=device))),
    CudaExercise(COALESCING, Cudaling("transpose_batched", ("float*", "float*", "int", "int", "int"),
                                      _transpose_batched_cases, _transpose_batched_run, lambda x: x.transpose(1, 2))),
    CudaExercise(COALESCING, Cudaling("copy_occupancy", ("float*", "float*", "int", "int*"), _copy_occupancy_cases,
                                      _copy_occupancy_run, lambda x: x)),
]
