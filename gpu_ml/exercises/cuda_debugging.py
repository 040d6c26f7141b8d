"""Exercises of cuda/05-profiling-and-debugging 03 (sanitizer and debugging) and 04 (PTX and SASS), all graded on any
machine: reading compute-sanitizer reports, a Triton mask fixed with the interpreter's help (gpu_ml.memviz), the idle
time of a GPU timeline, the width of each global access in a SASS listing, and two kernels changed until their SASS
and ptxas's report say what was asked (128-bit loads and stores; no spills in 32 registers). On a GPU those two are
also run and compared with PyTorch."""

from __future__ import annotations

from collections.abc import Callable

import torch

from gpu_ml import asm, memviz, timeline
from gpu_ml.env import has_gpu
from gpu_ml.exercises.core import Cases, Exercise
from gpu_ml.sanitize import findings
from gpu_ml.validate import kernel_device

SANITIZER = "cuda/05-profiling-and-debugging/03_sanitizer_and_debugging.ipynb"
SASS = "cuda/05-profiling-and-debugging/04_ptx_and_sass.ipynb"

# ----------------------------------------------------------------------------- 5.3: bug_line
# Reports as compute-sanitizer prints them, in its layouts old and new; the programs' own output between the records.

_MEMCHECK_NEW = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at scale_rows(float *, const float *, int, int)+0x1d0 in /home/learner/.cache/gpu_ml/cuda/3f2a/cell.cu:17
=========     by thread (96,0,0) in block (3,0,0)
=========     Access to 0x7f3a5e000fa0 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3a5e000000 of size 4,000 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: main [0x2b1c] in /home/learner/.cache/gpu_ml/cuda/3f2a/cell
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to \
cudaDeviceSynchronize.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: main [0x2b60] in /home/learner/.cache/gpu_ml/cuda/3f2a/cell
=========
========= ERROR SUMMARY: 2 errors
"""

_MEMCHECK_WRAPPED = """========= COMPUTE-SANITIZER
rows gathered: 512
========= Invalid __global__ read of size 4 bytes
=========     at gather_rows(const float *, const int *, float *, int)+0x90
=========         in /tmp/build/gather.cu:42
=========     by thread (3,0,0) in block (17,0,0)
=========     Access to 0x7b10c4a01000 is out of bounds
=========     and is 4,096 bytes after the nearest allocation at 0x7b10c4a00000 of size 4,096 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: launch_gather(float const*, int const*, float*, int) [0x1c40]
=========                in /tmp/build/gather
=========
========= ERROR SUMMARY: 1 error
"""

_MEMCHECK_OLD = """========= CUDA-MEMCHECK
step 1 done
========= Invalid __shared__ write of size 4
=========     at 0x000001b0 in /src/stencil.cu:58:stencil_1d(float const *, float*, int)
=========     by thread (255,0,0) in block (2,0,0)
=========     Address 0x00000400 is out of bounds
=========     Device Frame:/src/stencil.cu:58:stencil_1d(float const *, float*, int) (stencil_1d : 0x1b0)
=========     Saved host backtrace up to driver entry point at kernel launch time
=========     Host Frame:/usr/lib/x86_64-linux-gnu/libcuda.so.1 (cuLaunchKernel + 0x2b8) [0x222dc8]
=========
========= ERROR SUMMARY: 1 error
"""

_RACECHECK = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at block_sum(const float *, float *)+0x150 in /x/cell.cu:23
=========     and Read access at block_sum(const float *, float *)+0x1f0 in /x/cell.cu:27 [7936 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""

_SYNCCHECK = """========= COMPUTE-SANITIZER
========= Barrier error detected. Divergent thread(s) in warp
=========     at tile_sum(const int *, int *, int)+0x2a0 in /x/cell.cu:19
=========     by thread (48,0,0) in block (0,0,0)
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: main [0x1f8a] in /x/cell
=========
========= ERROR SUMMARY: 16 errors
"""

_INITCHECK_AFTER_API_ERROR = """========= COMPUTE-SANITIZER
========= Program hit cudaErrorInvalidValue (error 1) due to "invalid argument" on CUDA API call to cudaMemcpy.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: copy_in(float*, float const*, unsigned long) in /src/app.cu:120 [0x3310]
=========         Host Frame: main in /src/app.cu:151 [0x3398]
=========
========= Uninitialized __global__ memory read of size 4 bytes
=========     at column_sums(const float *, float *, int, int)+0x110 in /src/app.cu:31
=========     by thread (40,0,0) in block (0,0,0)
=========     Address 0x7f11c2000a0
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: main in /src/app.cu:160 [0x33f0]
=========
========= ERROR SUMMARY: 25 errors
"""


def _report_cases() -> Cases:
    return {"memcheck": (_MEMCHECK_NEW,), "memcheck, the location on two lines": (_MEMCHECK_WRAPPED,),
            "cuda-memcheck's older layout": (_MEMCHECK_OLD,), "racecheck": (_RACECHECK,), "synccheck": (_SYNCCHECK,),
            "initcheck after an API error": (_INITCHECK_AFTER_API_ERROR,)}


def _bug_line_reference(report: str) -> torch.Tensor:
    """The first source line that a record of the report names (API errors name none: their host frames are not
    the kernel's code)."""
    return torch.tensor([next(f.line for f in findings(report) if f.line is not None)])


# ----------------------------------------------------------------------------- 5.3: row_sums (Triton, interpreter)


def _row_sums_cases() -> Cases:
    g = torch.Generator().manual_seed(0)
    shapes = [(1, 1), (3, 5), (2, 64), (4, 100), (7, 33), (16, 1000)]
    return {f"{m} x {n}": (torch.randn(m, n, generator=g).to(kernel_device()),) for m, n in shapes}


def _row_sums_call(kernel: Callable, x: torch.Tensor) -> torch.Tensor:
    """The kernel traced in the interpreter first (no access may fall outside x and out: gpu_ml.memviz), then
    launched as usual, one program per row with BLOCK the next power of two of the row's length."""
    import triton

    rows, cols = x.shape
    block = triton.next_power_of_2(cols)
    out = torch.full((rows,), float("nan"), device=x.device)
    traced = memviz.trace(kernel, (rows,), x, out, cols, BLOCK=block)
    if traced.out_of_bounds:
        raise AssertionError(f"{len(traced.out_of_bounds)} accesses outside x and out (gpu_ml.memviz), e.g. "
                             f"{traced.out_of_bounds[0]}")
    kernel[(rows,)](x, out, cols, BLOCK=block)
    return out


# ----------------------------------------------------------------------------- 5.3: idle_time


def _spans_cases() -> Cases:
    return {"one kernel": ([(10.0, 5.0)],),
            "three in a row with gaps": ([(0.0, 4.0), (6.0, 1.5), (10.0, 2.0)],),
            "back to back (no gap)": ([(0.0, 3.0), (3.0, 3.0), (6.0, 1.0)],),
            "two streams overlapping": ([(0.0, 10.0), (2.0, 3.0), (8.0, 6.0), (20.0, 1.0)],),
            "one inside another": ([(5.0, 20.0), (7.0, 2.0), (30.0, 5.0)],),
            "out of order": ([(50.0, 5.0), (0.0, 10.0), (20.0, 10.0), (25.0, 10.0)],)}


def _idle_reference(spans: list[tuple[float, float]]) -> torch.Tensor:
    b = timeline.busy(timeline.Span("k", start, duration) for start, duration in spans)
    return torch.tensor([b.busy, b.idle], dtype=torch.float64)


# ----------------------------------------------------------------------------- 5.4: access_bytes

_ACCESS_KERNELS = r"""
#include <cuda_fp16.h>
__global__ void saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
__global__ void copy_bytes(const unsigned char* __restrict__ x, unsigned char* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + 1;
}
__global__ void copy_doubles(const double* x, double* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0 * x[i];
}
__global__ void copy_int4(const int4* __restrict__ x, int4* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
__global__ void scale_half8(const __half* x, __half* y, float a, int n) {  // y may alias x: loads and stores alternate
    int i = 8 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (i + 8 <= n)
        for (int k = 0; k < 8; ++k) y[i + k] = __float2half(a * __half2float(x[i + k]));
}
__global__ void gather_float2(const float2* __restrict__ x, const int* __restrict__ idx, float2* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[idx[i]];
}
"""
_ACCESS_NAMES = ("saxpy", "copy_bytes", "copy_doubles", "copy_int4", "scale_half8", "gather_float2")


def _access_cases() -> Cases:
    return {name: (asm.sass(_ACCESS_KERNELS, arch="sm_90a", kernel=name),) for name in _ACCESS_NAMES}


def _access_width(opcode: str) -> int:
    """Bytes moved per thread by a global load or store: LDG.E is 4, .64 8, .128 16, .U16/.S16 2, .U8/.S8 1."""
    modifiers = opcode.split(".")[1:]
    for modifier, size in (("128", 16), ("64", 8), ("U16", 2), ("S16", 2), ("U8", 1), ("S8", 1)):
        if modifier in modifiers:
            return size
    return 4


def _access_reference(listing: str) -> torch.Tensor:
    return torch.tensor([_access_width(i.opcode) for i in asm.instructions(listing) if i.mnemonic in ("LDG", "STG")],
                        dtype=torch.int64)


# ----------------------------------------------------------------------------- 5.4: row_scale_source, spill_free_source


def _arch_cases() -> Cases:
    return {"sm_80": ("sm_80",), "sm_90a": ("sm_90a",)}


def _host_function(source: str, name: str):
    """The extern "C" function `name` of `source`, built for this GPU (gpu_ml.cuda)."""
    from gpu_ml import cuda

    functions = cuda.load_library(cuda.build(source, library=True), source)
    if name not in functions:
        raise AssertionError(f'the source defines no extern "C" function {name}(); keep the stub\'s host function')
    return functions[name]


def _row_scale_call(make_source: Callable[[], str], arch: str) -> torch.Tensor:
    """The SASS of row_scale_kernel for `arch`: a 128-bit global load, only 128-bit global stores, and no more than
    one narrower load (the row's scale); on a GPU also y == x * s[:, None] on a few shapes."""
    source = make_source()
    found = asm.instructions(asm.sass(source, arch=arch, kernel="row_scale_kernel"))
    loads = [i.opcode for i in found if i.mnemonic == "LDG"]
    stores = [i.opcode for i in found if i.mnemonic == "STG"]
    wide_load = any(_access_width(op) == 16 for op in loads)
    narrow_loads = sum(_access_width(op) < 16 for op in loads)
    if not wide_load or narrow_loads > 1 or not stores or any(_access_width(op) < 16 for op in stores):
        raise AssertionError(f"row_scale_kernel for {arch} loads with {loads} and stores with {stores}: x should be "
                             "read with one 128-bit load per thread (LDG.E.128) and y written with one STG.E.128")
    if has_gpu():
        fn = _host_function(source, "row_scale")
        for rows, cols in ((1, 4), (3, 100), (37, 1024)):
            x, s = torch.randn(rows, cols, device="cuda"), torch.randn(rows, device="cuda")
            y = torch.full_like(x, float("nan"))
            if fn(x, s, y, rows, cols) != 0:
                raise AssertionError(f"row_scale() refused a contiguous {rows} x {cols} matrix")
            if not torch.equal(y, x * s[:, None]):
                raise AssertionError(f"row_scale() is wrong on a {rows} x {cols} matrix")
    return torch.tensor([1, 1], dtype=torch.int64)


def _spill_free_call(make_source: Callable[[], str], arch: str) -> torch.Tensor:
    """ptxas's report on column_sums_kernel for `arch`: at most 32 registers and no spilled bytes; on a GPU also
    out == x.sum(0) on a few shapes."""
    source = make_source()
    found = {asm.symbol_name(k): r for k, r in asm.resources(source, arch=arch).items()}
    if "column_sums_kernel" not in found:
        raise AssertionError(f"no kernel column_sums_kernel in the source (kernels: {', '.join(found) or 'none'})")
    r = found["column_sums_kernel"]
    if r.registers > 32 or r.spill_store_bytes or r.spill_load_bytes:
        raise AssertionError(f"column_sums_kernel for {arch}: {r.registers} registers, {r.spill_store_bytes} bytes "
                             f"spill stores, {r.spill_load_bytes} bytes spill loads: it must fit in 32 registers (2 "
                             "blocks of 1024 threads on an SM) without spilling")
    if has_gpu():
        fn = _host_function(source, "column_sums")
        for rows, cols in ((1, 32), (5, 1024), (300, 4096)):
            x = torch.randn(rows, cols, device="cuda")
            out = torch.full((cols,), float("nan"), device="cuda")
            if fn(x, out, rows, cols) != 0:
                raise AssertionError(f"column_sums() refused a {rows} x {cols} matrix")
            torch.testing.assert_close(out, x.sum(0), atol=1e-4, rtol=1e-4)
    return torch.tensor([1, 1, 1], dtype=torch.int64)


EXERCISES = [
    Exercise("bug_line", SANITIZER, "bug_line", _report_cases, reference=_bug_line_reference,
             call=lambda fn, report: torch.tensor([int(fn(report))]), atol=0, rtol=0),
    Exercise("row_sums", SANITIZER, "row_sums_kernel", _row_sums_cases, reference=lambda x: x.sum(1),
             call=_row_sums_call, atol=1e-4, rtol=1e-5),
    Exercise("idle_time", SANITIZER, "idle_time", _spans_cases, reference=_idle_reference,
             call=lambda fn, spans: torch.tensor([float(v) for v in fn(spans)], dtype=torch.float64),
             atol=1e-9, rtol=0),
    Exercise("access_bytes", SASS, "access_bytes", _access_cases, reference=_access_reference,
             call=lambda fn, listing: torch.tensor([int(b) for b in fn(listing)], dtype=torch.int64), atol=0, rtol=0),
    Exercise("row_scale_source", SASS, "row_scale_source", _arch_cases,
             reference=lambda arch: torch.tensor([1, 1], dtype=torch.int64), call=_row_scale_call, atol=0, rtol=0),
    Exercise("spill_free_source", SASS, "spill_free_source", _arch_cases,
             reference=lambda arch: torch.tensor([1, 1, 1], dtype=torch.int64), call=_spill_free_call, atol=0,
             rtol=0),
]
