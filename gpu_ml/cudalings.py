"""Cudalings: the small graded CUDA exercises of cuda/00-cudalings, rustlings-style.

Each exercise is a `%%cuda` cell whose `extern "C" int NAME(...)` host function launches the learner's kernel and
returns 0 (or a CUDA error code). A `Cudaling` says how to call that function on its cases and what PyTorch
computes instead; `grade_cudaling(NAME, fn)` runs them through `gpu_ml.grading.grade` on a GPU. Without one it
says the cell compiled and that grading needs a CUDA GPU, and returns a falsy verdict: it never raises.

Every output the kernel writes starts as NaN (-1 for integers) and is followed by a guard band of GUARD elements, or
as many as the output has if more, holding OUTPUT_GUARD: a store past the end of an output, from a thread that should
have had nothing to do, is reported as such, also when what it stores is the inf or NaN it read past an input's end
(gpu_ml.grading puts the inputs in guard bands of those).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from gpu_ml.cuda import CudaError
from gpu_ml.env import capability, has_gpu
from gpu_ml.grading import Verdict, grade

GUARD = 1024  # elements behind each output that must stay as they were (a block hangs over the end by < 1024)
OUTPUT_GUARD = {True: -12345.0, False: -123456789}  # what they hold (floating, integer): no value a kernel computes
NAN = float("nan")
# The CUDA errors an exercise's launch most often returns (the rest are named by number).
_ERRORS = {1: "cudaErrorInvalidValue", 2: "cudaErrorMemoryAllocation", 9: "cudaErrorInvalidConfiguration",
           98: "cudaErrorInvalidDeviceFunction", 209: "cudaErrorNoKernelImageForDevice",
           700: "cudaErrorIllegalAddress", 701: "cudaErrorLaunchOutOfResources", 716: "cudaErrorMisalignedAddress",
           719: "cudaErrorLaunchFailure"}
# Words of the faults after which CUDA refuses every later call in the process.
_STICKY = ("illegal", "misaligned", "unspecified launch failure", "device-side assert", "timed out", "stack error")

Cases = dict[str, tuple]


@dataclass(frozen=True)
class Cudaling:
    """One exercise: the host function's parameters, its cases, how to call it, and PyTorch's answer."""

    name: str
    params: tuple[str, ...]  # C parameter types as `%%cuda` reads them (qualifiers dropped), e.g. "float*", "int"
    cases: Callable[[str], Cases]  # device -> {case name: arguments}
    run: Callable[..., Any]  # (fn, *arguments) -> output tensor(s), after calling fn on fresh outputs
    reference: Callable[..., Any]  # (*arguments) -> what run should return
    capability: tuple[int, int] = (0, 0)  # the oldest GPU the exercise runs on
    arch: str | None = None  # the cell's `%%cuda --arch` (None: this machine's default)
    atol: float | None = None
    rtol: float | None = None


# ----------------------------------------------------------------------------- helpers


def seeded_rng() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def randn_on(g: torch.Generator, *shape: int, device: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)


def guarded_buffer(n: int, device: str, dtype: torch.dtype = torch.float32, guard: int = GUARD) -> torch.Tensor:
    """n output elements of NaN (integers: -1), then max(guard, n) of OUTPUT_GUARD (a 2-D grid that hangs over by
    whole rows reaches far past the end); the kernel gets the start of it."""
    buf = torch.full((n + max(guard, n),), OUTPUT_GUARD[dtype.is_floating_point], dtype=dtype, device=device)
    buf[:n] = NAN if dtype.is_floating_point else -1
    return buf


def inside_guard(buf: torch.Tensor, n: int, arg: str = "out") -> torch.Tensor:
    """buf[:n], once the elements behind them are checked untouched (still OUTPUT_GUARD)."""
    tail = buf[n:]
    changed = tail != torch.full((), OUTPUT_GUARD[tail.is_floating_point()], dtype=tail.dtype, device=tail.device)
    if changed.any():
        first = n + int(changed.nonzero()[0])
        raise AssertionError(f"{arg}[{first}] was written, but {arg} has {n} elements: a thread past the end "
                             "stored anyway (guard the store)")
    return buf[:n]


def error_name(rc: int) -> str:
    return _ERRORS.get(rc, f"CUDA error {rc}" if rc > 0 else "not a CUDA error code")


def checked_call(fn: Callable, *args: Any) -> None:
    """Call the host function and raise unless it returned 0."""
    rc = fn(*args)
    if rc != 0:
        raise RuntimeError(f"{getattr(fn, 'name', 'the host function')}() returned {rc} ({error_name(rc)}) "
                           "instead of 0: a launch or CUDA call failed")


def _chunks(x: torch.Tensor, size: int, pad: float) -> torch.Tensor:
    """x (1-D) padded with `pad` to a multiple of size, as rows of size."""
    return F.pad(x, (0, -x.numel() % size), value=pad).view(-1, size)


# ----------------------------------------------------------------------------- 1-4: indexing


def _whoami_cases(device: str) -> Cases:
    return {f"{b} block(s) of {t}": (b, t, device) for b, t in [(1, 32), (4, 64), (3, 96), (10, 1024)]}


def _whoami_run(fn: Callable, blocks: int, threads: int, device: str):
    n = blocks * threads
    block_of, thread_of = guarded_buffer(n, device, torch.int32), guarded_buffer(n, device, torch.int32)
    checked_call(fn, block_of, thread_of, blocks, threads)
    return inside_guard(block_of, n, "block_of"), inside_guard(thread_of, n, "thread_of")


def _whoami_ref(blocks: int, threads: int, device: str):
    i = torch.arange(blocks * threads, dtype=torch.int32, device=device)
    return i // threads, i % threads


def _add_cases(device: str) -> Cases:
    g = seeded_rng()
    return {f"n={n}": (randn_on(g, n, device=device), randn_on(g, n, device=device))
            for n in (1, 100, 256, 257, 1000, 100_003)}


def _add_run(fn: Callable, x: torch.Tensor, y: torch.Tensor):
    out = guarded_buffer(x.numel(), x.device.type)
    checked_call(fn, x, y, out, x.numel())
    return inside_guard(out, x.numel())


def _saxpy_cases(device: str) -> Cases:
    g = seeded_rng()
    shapes = [(1, 1, 32), (1000, 1, 32), (5, 64, 256), (100_003, 4, 128), (100_003, 1000, 256)]
    return {f"n={n}, {b} block(s) of {t}": (randn_on(g, n, device=device), randn_on(g, n, device=device), b, t)
            for n, b, t in shapes}


def _saxpy_run(fn: Callable, x: torch.Tensor, y: torch.Tensor, blocks: int, threads: int):
    out = guarded_buffer(x.numel(), x.device.type)
    checked_call(fn, x, y, out, 2.5, x.numel(), blocks, threads)
    return inside_guard(out, x.numel())


def _affine_cases(device: str) -> Cases:
    g = seeded_rng()
    return {f"{r} x {c}": (randn_on(g, r, c, device=device), randn_on(g, r, device=device),
                           randn_on(g, c, device=device))
            for r, c in [(1, 1), (1, 100), (100, 1), (17, 33), (300, 257)]}


def _affine_run(fn: Callable, x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor):
    rows, cols = x.shape
    out = guarded_buffer(x.numel(), x.device.type)
    checked_call(fn, x, scale, shift, out, rows, cols)
    return inside_guard(out, x.numel()).view(rows, cols)


def _affine_ref(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor):
    return x.double() * scale.double()[:, None] + shift.double()[None, :]


# ----------------------------------------------------------------------------- 5-6: errors


def _fill_cases(device: str) -> Cases:
    return {f"n={n}, {t} threads per block{': CUDA refuses' if t > 1024 else ''}": (n, t, device)
            for n, t in [(1000, 256), (1000, 1024), (1000, 1025), (5000, 2048)]}


def _fill_run(fn: Callable, n: int, threads: int, device: str):
    out = guarded_buffer(n, device)
    rc = fn(out, 1.5, n, threads)
    if threads > 1024 and rc == 0:
        raise AssertionError(f"fill_checked returned 0, but CUDA refuses a launch of {threads} threads per block "
                             "(at most 1024): return the error that cudaGetLastError() reports")
    if threads <= 1024 and rc != 0:
        raise AssertionError(f"fill_checked returned {rc} ({error_name(rc)}) for a valid launch")
    return inside_guard(out, n)


def _fill_ref(n: int, threads: int, device: str):
    return torch.full((n,), 1.5 if threads <= 1024 else NAN, device=device)  # a refused launch writes nothing


def _gather_cases(device: str) -> Cases:
    g = seeded_rng()
    m, n = 300, 1000
    idx = torch.randint(0, m, (n,), generator=g, dtype=torch.int32)
    too_big, negative = idx.clone(), idx.clone()
    too_big[517] = m
    negative[3] = -1
    x = randn_on(g, m, device=device)
    return {"all in range": (x, idx.to(device)), "idx[517] == m": (x, too_big.to(device)),
            "idx[3] == -1": (x, negative.to(device)), "all in range, after a bad call": (x, idx.to(device))}


def _gather_run(fn: Callable, x: torch.Tensor, idx: torch.Tensor):
    out = guarded_buffer(idx.numel(), x.device.type)
    rc = fn(x, idx, out, idx.numel(), x.numel())
    bad = bool(((idx < 0) | (idx >= x.numel())).any())
    if rc != (-1 if bad else 0):
        raise AssertionError(f"gather_status returned {rc}, expected {-1 if bad else 0}: "
                             + ("an index is out of range" if bad else "every index is in range"))
    return inside_guard(out, idx.numel())


def _gather_ref(x: torch.Tensor, idx: torch.Tensor):
    ok = (idx >= 0) & (idx < x.numel())
    return torch.where(ok, x[idx.long().clamp(0, x.numel() - 1)], 0.0)


# ----------------------------------------------------------------------------- 7-8: shared memory


def _reverse_cases(device: str) -> Cases:
    g = seeded_rng()
    return {f"n={n}": (randn_on(g, n, device=device),) for n in (256, 512, 256 * 100)}


def _reverse_run(fn: Callable, x: torch.Tensor):
    buf = guarded_buffer(x.numel(), x.device.type)
    buf[: x.numel()] = x  # reversed in place, in a copy: x itself stays for the reference
    checked_call(fn, buf, x.numel())
    return inside_guard(buf, x.numel(), "x")


def _tiles_cases(device: str) -> Cases:
    g = seeded_rng()
    return {f"{t} tile(s)": (randn_on(g, t, 32, 32, device=device),) for t in (1, 3, 64)}


def _tiles_run(fn: Callable, x: torch.Tensor):
    out, smem = guarded_buffer(x.numel(), x.device.type), guarded_buffer(1, x.device.type, torch.int32)
    checked_call(fn, x, out, x.shape[0], smem)
    result, padded = inside_guard(out, x.numel()).view(x.shape), 32 * 33 * 4
    nbytes = int(inside_guard(smem, 1, "smem_bytes")[0])
    if nbytes < padded:
        raise AssertionError(f"the kernel's shared memory is {nbytes} bytes: stage the tile in a padded "
                             f"__shared__ float tile[32][33] ({padded} bytes)")
    return result


# ----------------------------------------------------------------------------- 9-10: warp shuffles


def _warp_sums_cases(device: str) -> Cases:
    g = seeded_rng()
    return {f"n={n}": (randn_on(g, n, device=device),) for n in (32, 96, 32 * 1001)}


def _warp_sums_run(fn: Callable, x: torch.Tensor):
    out = guarded_buffer(x.numel() // 32, x.device.type)
    checked_call(fn, x, out, x.numel())
    return inside_guard(out, x.numel() // 32)


def _warp_max_cases(device: str) -> Cases:
    g = seeded_rng()
    return {f"n={n}": (randn_on(g, n, device=device),) for n in (1, 31, 32, 100, 1000, 100_003)}


def _warp_max_run(fn: Callable, x: torch.Tensor):
    out = guarded_buffer(x.numel(), x.device.type)
    checked_call(fn, x, out, x.numel())
    return inside_guard(out, x.numel())


def _warp_max_ref(x: torch.Tensor):
    return _chunks(x, 32, -torch.inf).amax(1).repeat_interleave(32)[: x.numel()]


# ----------------------------------------------------------------------------- 11-13: atomics


def _histogram_cases(device: str) -> Cases:
    g = seeded_rng()
    def ints(n: int, bins: int) -> torch.Tensor:
        return torch.randint(0, bins, (n,), generator=g, dtype=torch.int32).to(device)
    return {"n=1000, 10 bins": (ints(1000, 10), 10), "n=1, 10 bins": (ints(1, 10), 10),
            "n=100003, 256 bins": (ints(100_003, 256), 256), "n=100003, 1024 bins": (ints(100_003, 1024), 1024),
            "n=100000, all in bin 7": (torch.full((100_000,), 7, dtype=torch.int32, device=device), 10),
            "n=5000, 1 bin": (ints(5000, 1), 1)}


def _histogram_run(fn: Callable, x: torch.Tensor, bins: int):
    hist = guarded_buffer(bins, x.device.type, torch.int32)
    checked_call(fn, x, hist, x.numel(), bins)
    return inside_guard(hist, bins, "hist")


def _histogram_ref(x: torch.Tensor, bins: int):
    return torch.bincount(x.long(), minlength=bins).int()


def _compact_cases(device: str) -> Cases:
    g = seeded_rng()
    return {"n=1000": (randn_on(g, 1000, device=device),), "n=100003": (randn_on(g, 100_003, device=device),),
            "n=1, positive": (torch.tensor([0.5], device=device),),
            "none positive": (-randn_on(g, 777, device=device).abs(),),
            "all positive": (randn_on(g, 4099, device=device).abs() + 0.1,)}


def _compact_run(fn: Callable, x: torch.Tensor):
    out, count = guarded_buffer(x.numel(), x.device.type), guarded_buffer(1, x.device.type, torch.int32)
    checked_call(fn, x, out, count, x.numel())
    kept, expected = int(inside_guard(count, 1, "count")[0]), int((x > 0).sum())
    if kept != expected:
        raise AssertionError(f"count is {kept}, but {expected} of the {x.numel()} elements are positive")
    return inside_guard(out, x.numel())[:kept].sort().values  # any order will do: compared sorted


def _compact_ref(x: torch.Tensor):
    return x[x > 0].sort().values


# ----------------------------------------------------------------------------- 14-15: reductions


def _block_sums_cases(device: str) -> Cases:
    g = seeded_rng()
    return {f"n={n}": (randn_on(g, n, device=device),) for n in (1, 255, 256, 257, 100_003)}


def _block_sums_run(fn: Callable, x: torch.Tensor):
    blocks = -(-x.numel() // 256)
    out = guarded_buffer(blocks, x.device.type)
    checked_call(fn, x, out, x.numel())
    return inside_guard(out, blocks)


def _grid_sum_cases(device: str) -> Cases:
    g = seeded_rng()
    return {f"n={n}": (randn_on(g, n, device=device),) for n in (1, 1000, 2**20 + 3, 10_000_000)}


def _grid_sum_run(fn: Callable, x: torch.Tensor):
    partial, out = guarded_buffer(1024, x.device.type), guarded_buffer(1, x.device.type)
    checked_call(fn, x, partial, out, x.numel())
    inside_guard(partial, 1024, "partial")
    return inside_guard(out, 1)


# ----------------------------------------------------------------------------- 16-17: tiles


def _transpose_cases(device: str) -> Cases:
    g = seeded_rng()
    return {f"{r} x {c}": (randn_on(g, r, c, device=device),) for r, c in [(1, 1), (1, 100), (100, 1), (33, 65),
                                                                        (1000, 257)]}


def _transpose_run(fn: Callable, x: torch.Tensor):
    rows, cols = x.shape
    out = guarded_buffer(x.numel(), x.device.type)
    checked_call(fn, x, out, rows, cols)
    return inside_guard(out, x.numel()).view(cols, rows)


def _matmul_cases(device: str) -> Cases:
    g = seeded_rng()
    return {f"{m} x {k} @ {k} x {n}": (randn_on(g, m, k, device=device), randn_on(g, k, n, device=device))
            for m, n, k in [(1, 1, 1), (16, 16, 16), (64, 48, 1), (17, 33, 65), (129, 65, 257)]}


def _matmul_run(fn: Callable, a: torch.Tensor, b: torch.Tensor):
    (m, k), n = a.shape, b.shape[1]
    c = guarded_buffer(m * n, a.device.type)
    checked_call(fn, a, b, c, m, n, k)
    return inside_guard(c, m * n, "c").view(m, n)


# ----------------------------------------------------------------------------- 18-19: vectors, rows


def _float4_cases(device: str) -> Cases:
    g = seeded_rng()
    return {f"n={n}": (randn_on(g, n, device=device),) for n in (1, 3, 4, 7, 1000, 1027, 100_003)}


def _float4_run(fn: Callable, x: torch.Tensor):
    out = guarded_buffer(x.numel(), x.device.type)
    checked_call(fn, x, out, -1.5, x.numel())
    return inside_guard(out, x.numel())


def _softmax_cases(device: str) -> Cases:
    g = seeded_rng()
    cases = {f"{r} x {c}": (randn_on(g, r, c, device=device),) for r, c in [(1, 1), (3, 31), (5, 1000), (37, 4097)]}
    cases["4 x 100, logits up to ~3000"] = (1000 * randn_on(g, 4, 100, device=device),)
    return cases


def _softmax_run(fn: Callable, x: torch.Tensor):
    rows, cols = x.shape
    out = guarded_buffer(x.numel(), x.device.type)
    checked_call(fn, x, out, rows, cols)
    return inside_guard(out, x.numel()).view(rows, cols)


# ----------------------------------------------------------------------------- 20-21: sm_80 copies, tensor cores


def _cp_async_cases(device: str) -> Cases:
    g = seeded_rng()
    return {f"n={n}": (randn_on(g, n, device=device),) for n in (1024, 3 * 1024, 1024 * 100)}


def _cp_async_run(fn: Callable, x: torch.Tensor):
    out = guarded_buffer(x.numel(), x.device.type)
    checked_call(fn, x, out, x.numel())
    return inside_guard(out, x.numel())


def _wmma_cases(device: str) -> Cases:
    g = seeded_rng()
    return {f"{m} x {k} @ {k} x {n}": (randn_on(g, m, k, device=device, dtype=torch.float16),
                                       randn_on(g, k, n, device=device, dtype=torch.float16))
            for m, n, k in [(16, 16, 16), (32, 48, 64), (64, 16, 128)]}


def _wmma_run(fn: Callable, a: torch.Tensor, b: torch.Tensor):
    (m, k), n = a.shape, b.shape[1]
    c = guarded_buffer(m * n, a.device.type)
    checked_call(fn, a, b, c, m, n, k)
    return inside_guard(c, m * n, "c").view(m, n)


# ----------------------------------------------------------------------------- the exercises, in order

CUDALINGS: list[Cudaling] = [
    Cudaling("whoami", ("int*", "int*", "int", "int"), _whoami_cases, _whoami_run, _whoami_ref),
    Cudaling("add_guarded", ("float*", "float*", "float*", "int"), _add_cases, _add_run, lambda x, y: x + y),
    Cudaling("saxpy_grid_stride", ("float*", "float*", "float*", "float", "long long", "int", "int"), _saxpy_cases,
             _saxpy_run, lambda x, y, blocks, threads: 2.5 * x.double() + y.double()),
    Cudaling("affine_2d", ("float*", "float*", "float*", "float*", "int", "int"), _affine_cases, _affine_run,
             _affine_ref),
    Cudaling("fill_checked", ("float*", "float", "int", "int"), _fill_cases, _fill_run, _fill_ref),
    Cudaling("gather_status", ("float*", "int*", "float*", "int", "int"), _gather_cases, _gather_run, _gather_ref),
    Cudaling("reverse_block", ("float*", "int"), _reverse_cases, _reverse_run,
             lambda x: x.view(-1, 256).flip(1).flatten()),
    Cudaling("transpose_tiles", ("float*", "float*", "int", "int*"), _tiles_cases, _tiles_run,
             lambda x: x.transpose(1, 2)),
    Cudaling("warp_sums", ("float*", "float*", "int"), _warp_sums_cases, _warp_sums_run,
             lambda x: x.double().view(-1, 32).sum(1), atol=1e-4),
    Cudaling("warp_broadcast_max", ("float*", "float*", "int"), _warp_max_cases, _warp_max_run, _warp_max_ref),
    Cudaling("histogram", ("int*", "int*", "int", "int"), _histogram_cases, _histogram_run, _histogram_ref),
    Cudaling("histogram_shared", ("int*", "int*", "int", "int"), _histogram_cases, _histogram_run, _histogram_ref),
    Cudaling("compact_positive", ("float*", "float*", "int*", "int"), _compact_cases, _compact_run, _compact_ref),
    Cudaling("block_sums", ("float*", "float*", "int"), _block_sums_cases, _block_sums_run,
             lambda x: _chunks(x.double(), 256, 0.0).sum(1), atol=1e-4),
    Cudaling("grid_sum", ("float*", "float*", "float*", "int"), _grid_sum_cases, _grid_sum_run,
             lambda x: x.double().sum().reshape(1), atol=1e-2, rtol=1e-4),
    Cudaling("transpose", ("float*", "float*", "int", "int"), _transpose_cases, _transpose_run, lambda x: x.t()),
    Cudaling("matmul_tiled", ("float*", "float*", "float*", "int", "int", "int"), _matmul_cases, _matmul_run,
             lambda a, b: a.double() @ b.double(), atol=1e-4, rtol=1e-4),
    Cudaling("scale_float4", ("float*", "float*", "float", "int"), _float4_cases, _float4_run, lambda x: -1.5 * x),
    Cudaling("softmax_rows", ("float*", "float*", "int", "int"), _softmax_cases, _softmax_run,
             lambda x: torch.softmax(x.double(), dim=1), atol=1e-6, rtol=1e-4),
    Cudaling("reverse_cp_async", ("float*", "float*", "int"), _cp_async_cases, _cp_async_run,
             lambda x: x.view(-1, 1024).flip(1).flatten(), capability=(8, 0), arch="sm_80"),
    Cudaling("wmma_matmul", ("half*", "half*", "float*", "int", "int", "int"), _wmma_cases, _wmma_run,
             lambda a, b: a.double() @ b.double(), capability=(7, 0), atol=1e-2, rtol=1e-3),
]
SPECS: dict[str, Cudaling] = {c.name: c for c in CUDALINGS}


# ----------------------------------------------------------------------------- grading


def _say(name: str, message: str, quiet: bool) -> Verdict:
    if not quiet:
        print(message)
    return Verdict(name, False, message)


def _signature(fn: Callable) -> tuple[str, ...] | None:
    """The parameter types of a `%%cuda` function as the exercise lists them (None for anything else)."""
    params = getattr(fn, "params", None)
    if params is None:
        return None
    return tuple(p.ctype + ("*" if p.pointer else "") for p in params if p.ctype != "cudaStream_t")


def run_cases(spec: Cudaling, fn: Callable, device: str = "cuda", *, quiet: bool = False) -> Verdict:
    """Grade `fn` on the spec's cases built on `device` (grade_cudaling's GPU path; tests call it on CPU stand-ins)."""
    def attempt(*args):
        try:
            return spec.run(fn, *args)
        except CudaError as exc:
            if any(word in str(exc).lower() for word in _STICKY):
                raise CudaError(f"{exc}. A fault inside a kernel is sticky: every later CUDA call of this process "
                                "fails, so restart the Python kernel before running anything else") from exc
            raise

    return grade(spec.name, attempt, spec.reference, spec.cases(device), atol=spec.atol, rtol=spec.rtol, quiet=quiet)


def grade_cudaling(name: str, fn: Callable, *, quiet: bool = False) -> Verdict:
    """Grade the host function `fn` of cudaling `name` against PyTorch on every case: PASS, or "not solved yet" with
    the first case and element that differ. Prints its verdict and returns it (falsy unless passed), never raises for
    a wrong or crashing attempt; without a CUDA GPU, or on one older than the exercise needs, it only says so."""
    if name not in SPECS:
        raise ValueError(f"no cudaling named {name!r}; there are: {', '.join(SPECS)}")
    return grade_spec(SPECS[name], fn, quiet=quiet)


def grade_spec(spec: Cudaling, fn: Callable, *, quiet: bool = False) -> Verdict:
    """grade_cudaling for any spec (the lessons' CUDA exercises use it too)."""
    name = spec.name
    got = _signature(fn)
    if got is not None and got != spec.params:
        return _say(name, f"{name}: not solved yet: the host function takes ({', '.join(got)}), but the grader calls "
                          f"it with ({', '.join(spec.params)}): keep the stub's parameters", quiet)
    if not has_gpu():
        return _say(name, f"{name}: compiled; grading needs a CUDA GPU (this machine has none)", quiet)
    this = capability()  # the emulated one under GPU_ML_EMULATE
    if this is not None and this < spec.capability:
        need, have = ".".join(map(str, spec.capability)), ".".join(map(str, this))
        return _say(name, f"{name}: compiled; grading needs compute capability {need} or newer (this GPU has "
                          f"{have})", quiet)
    if got is None:  # a Python function would be graded without any kernel
        return _say(name, f"{name}: not solved yet: grade the host function a %%cuda cell built, not a "
                          f"{type(fn).__name__}", quiet)
    return run_cases(spec, fn, quiet=quiet)


def notebook_cells(path: str | Path, marker: str = "cudaling") -> dict[str, tuple[str, str]]:
    """name -> (the `%%cuda ...` line, the body as the magic receives it) of each `// cudaling: NAME` cell (or
    `// <marker>: NAME`) of the notebook at `path`, in order."""
    cells = {}
    for cell in json.loads(Path(path).read_text())["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] != "code" or not source.startswith("%%cuda"):
            continue
        line, _, body = source.partition("\n")
        match = re.match(rf"// {marker}: (\w+)\n", body)
        if match:
            cells[match.group(1)] = (line, body if body.endswith("\n") else body + "\n")
    return cells


def grade_notebook(path: str | Path) -> list[tuple[Cudaling, Verdict]]:
    """Build and grade, quietly, every cudaling cell of a learner's notebook at `path` (as saved). A cell that is
    missing or does not compile counts as not solved, with nvcc's first error; without a GPU a cell that compiles
    gets the grader's "compiled; grading needs a CUDA GPU"."""
    from gpu_ml import cuda

    cells, graded = notebook_cells(path), []
    for spec in CUDALINGS:
        if spec.name not in cells:
            graded.append((spec, Verdict(spec.name, False, f"{spec.name}: no '// cudaling: {spec.name}' cell")))
            continue
        body = cells[spec.name][1]
        try:
            fn = cuda.load_library(cuda.build(body, library=True, arch=spec.arch), body)[spec.name]
        except (cuda.CudaCompileError, KeyError, ValueError) as exc:
            first = next((line for line in str(exc).splitlines() if "error" in line), str(exc).splitlines()[0])
            graded.append((spec, Verdict(spec.name, False, f"{spec.name}: does not compile: {first.strip()}")))
            continue
        graded.append((spec, grade_cudaling(spec.name, fn, quiet=True)))
    return graded
