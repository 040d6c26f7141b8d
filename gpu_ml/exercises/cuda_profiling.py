"""Exercises of cuda/05-profiling-and-debugging 01 (Nsight Compute) and 02 (roofline from counters): reading what
the counters count. 01: the 32-byte sectors a warp's loads touch (what `l1tex__t_sectors_..._op_ld` counts per
request), the top warp-stall reasons of a row of ncu's metrics, and the blocks per SM that registers, warps and shared
memory allow (what ncu's `launch__occupancy_limit_*` report). 02: FLOPs from instruction counters, a kernel's place
under its roof, and the DRAM bytes of a tiled matmul whose tiles the L2 does not keep. All are graded on any machine,
on invented counter values: they test the arithmetic a notebook applies to measured ones."""

from __future__ import annotations

import math

import torch

from gpu_ml.exercises.core import Cases, Exercise

NSIGHT = "cuda/05-profiling-and-debugging/01_nsight_compute.ipynb"
ROOFLINE = "cuda/05-profiling-and-debugging/02_roofline_from_counters.ipynb"

# ----------------------------------------------------------------------------- 5.1: sectors_touched

SECTOR = 32  # bytes: the unit in which L1 asks L2 (and L2 asks DRAM) for data


def _sectors_cases() -> Cases:
    lanes = range(32)
    return {"v1's load of A: 32 rows, K = 2048 floats apart": ([4 * 2048 * t for t in lanes], 4),
            "v2's load of B: 32 consecutive floats": ([4 * t for t in lanes], 4),
            "v2's load of A: one float for the whole warp (a broadcast)": ([4 * 777] * 32, 4),
            "32 floats starting 4 bytes into a sector": ([4 + 4 * t for t in lanes], 4),
            "every other float": ([8 * t for t in lanes], 4),
            "float4 loads, 16 bytes per lane, consecutive": ([16 * t for t in lanes], 16),
            "float4 loads, lanes 64 bytes apart": ([64 * t for t in lanes], 16),
            "doubles, a column of a 32 x 33 tile": ([8 * 33 * t for t in lanes], 8),
            "one lane active (the others masked off)": ([1000], 4)}


def _sectors_reference(addresses, size) -> torch.Tensor:
    """Distinct 32-byte sectors covered by the bytes [a, a + size) of every lane's access."""
    sectors = {b // SECTOR for a in addresses for b in range(a, a + size)}
    return torch.tensor(len(sectors), dtype=torch.int64)


# ----------------------------------------------------------------------------- 5.1: top_stalls

STALL_PREFIX, STALL_SUFFIX = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
STALL_REASONS = ("barrier", "branch_resolving", "dispatch_stall", "drain", "imc_miss", "lg_throttle",
                 "long_scoreboard", "math_pipe_throttle", "membar", "mio_throttle", "misc", "no_instruction",
                 "not_selected", "selected", "short_scoreboard", "sleeping", "tex_throttle", "wait")


def _stall_row(values: dict[str, float], **others: float | str) -> dict[str, float | str]:
    """A row of ncu metrics: every stall reason (0 unless given) and a few other metrics."""
    row: dict[str, float | str] = {f"{STALL_PREFIX}{r}{STALL_SUFFIX}": float(values.get(r, 0.0))
                                   for r in STALL_REASONS}
    row.update({"gpu__time_duration.sum": 1.5e6, "smsp__average_warps_active_per_issue_active.ratio": 9.5}, **others)
    return row


def _stalls_cases() -> Cases:
    return {"waiting on global memory": (_stall_row({"long_scoreboard": 21.0, "barrier": 3.5, "wait": 1.2,
                                                     "selected": 1.0, "not_selected": 0.4}), 3),
            "selected is issuing, not a stall": (_stall_row({"selected": 30.0, "mio_throttle": 2.0,
                                                             "short_scoreboard": 1.5, "wait": 0.3}), 2),
            "shared-memory bound": (_stall_row({"mio_throttle": 5.5, "short_scoreboard": 7.25, "barrier": 2.0,
                                                "math_pipe_throttle": 0.75, "selected": 1.0}), 4),
            "one reason": (_stall_row({"barrier": 0.01, "selected": 1.0}, **{"launch__grid_size": 512.0}), 1)}


def _stalls_reference(row, k) -> torch.Tensor:
    """Indices (into STALL_REASONS) of the k reasons with the most cycles per issued instruction, 'selected' left
    out, largest first."""
    stalls = {name[len(STALL_PREFIX):-len(STALL_SUFFIX)]: value for name, value in row.items()
              if name.startswith(STALL_PREFIX) and name.endswith(STALL_SUFFIX)}
    stalls.pop("selected")
    top = sorted(stalls, key=lambda r: -stalls[r])[:k]
    return torch.tensor([STALL_REASONS.index(r) for r in top], dtype=torch.int64)


def _stalls_call(fn, row, k) -> torch.Tensor:
    names = list(fn(dict(row), k))
    unknown = [n for n in names if n not in STALL_REASONS]
    if unknown:
        raise ValueError(f"not stall reasons: {unknown}; return the reasons as ncu spells them, e.g. 'barrier'")
    return torch.tensor([STALL_REASONS.index(n) for n in names], dtype=torch.int64)


# ----------------------------------------------------------------------------- 5.1: blocks_per_sm

# An H100/H200 SM (compute capability 9.0), as the exercise states it.
SM_WARPS, SM_BLOCKS, SM_REGISTERS, SM_SHARED = 64, 32, 65536, 228 * 1024
REGISTER_UNIT, SHARED_RESERVED = 256, 1024  # registers are given to a warp in units of 256; 1 KB per block reserved


def _blocks_cases() -> Cases:
    return {"v1: 1024 threads, 32 registers, no shared memory": (32, 1024, 0),
            "v3: 1024 threads, 38 registers, 8 KB shared": (38, 1024, 8192),
            "v4: 512 threads, 48 registers, 4 KB shared": (48, 512, 4096),
            "v8: 256 threads, 128 registers, 8.2 KB shared": (128, 256, 8320),
            "v9: 256 threads, 128 registers, 16.4 KB shared": (128, 256, 16640),
            "255 registers": (255, 128, 0),
            "registers rounded up: 33 per thread": (33, 256, 0),
            "shared memory sets the limit": (32, 64, 60 * 1024),
            "blocks set the limit": (16, 32, 0),
            "one warp of 64 registers": (64, 32, 1000)}


def _blocks_reference(regs, threads, smem) -> torch.Tensor:
    """[blocks per SM, occupancy in % of the SM's 64 warps]."""
    warps = math.ceil(threads / 32)
    per_warp = math.ceil(regs * 32 / REGISTER_UNIT) * REGISTER_UNIT
    limits = (SM_WARPS // warps, SM_BLOCKS, SM_REGISTERS // (per_warp * warps), SM_SHARED // (smem + SHARED_RESERVED))
    blocks = min(limits)
    return torch.tensor([blocks, 100.0 * blocks * warps / SM_WARPS], dtype=torch.float64)


# ----------------------------------------------------------------------------- 5.2: counted_flops

FLOP_METRICS = {  # metric -> FLOPs per count
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 2,
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": 1,
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum": 1,
    "sm__ops_path_tensor_op_hmma_src_fp16_dst_fp32_sparsity_off.sum": 1,
    "sm__ops_path_tensor_op_hgmma_src_fp16_sparsity_off.sum": 1,
}


def _flops_row(**counts: float) -> dict[str, float | str]:
    row: dict[str, float | str] = {name: 0.0 for name in FLOP_METRICS}
    # Other metrics of the same row, not FLOPs: a time, bytes, and a count of tensor-core instructions.
    row.update({"gpu__time_duration.sum": 2.5e5, "dram__bytes_read.sum": 3.3e7,
                "sm__inst_executed_pipe_tensor_op_hmma.sum": 77.0})
    for short, value in counts.items():
        row[next(n for n in FLOP_METRICS if f"_{short}_" in n or n.endswith(f"_{short}.sum"))] = float(value)
    return row


def _flops_cases() -> Cases:
    return {"an SGEMM: FFMA only": (_flops_row(ffma=2048.0**3),),
            "a softmax: adds, multiplies and a few FMAs": (_flops_row(fadd=3.0e7, fmul=1.6e7, ffma=4.0e6),),
            "mma.sync tensor cores and an fp32 epilogue": (_flops_row(hmma=1.37e11, fmul=1.6e7),),
            "wgmma tensor cores": (_flops_row(hgmma=2.75e11, ffma=1.0e6, fadd=5.0e5),),
            "nothing counted (an integer kernel)": (_flops_row(),)}


def _flops_reference(row) -> torch.Tensor:
    return torch.tensor(sum(float(row[name]) * per for name, per in FLOP_METRICS.items()), dtype=torch.float64)


# ----------------------------------------------------------------------------- 5.2: roof_distance


def _roof_cases() -> Cases:
    # (FLOPs, DRAM bytes, seconds, peak TFLOP/s, bandwidth GB/s)
    return {"a softmax (memory side)": (4.0e8, 2.7e8, 7.0e-5, 67.0, 4800.0),
            "an SGEMM (compute side)": (1.37e11, 2.0e8, 3.0e-3, 67.0, 4800.0),
            "a tensor-core GEMM": (1.37e11, 1.0e8, 2.2e-4, 989.5, 4800.0),
            "exactly at the ridge": (1.4e10, 1.0e9, 1.0e-3, 14.0, 1000.0),
            "a measured copy bandwidth as the roof": (1.0e6, 8.0e9, 2.0e-3, 67.0, 4243.0)}


def _roof_reference(flops, nbytes, seconds, peak, bandwidth) -> torch.Tensor:
    """[intensity FLOP/byte, achieved TFLOP/s, attainable TFLOP/s, achieved / attainable]."""
    intensity = flops / nbytes
    achieved = flops / seconds / 1e12
    attainable = min(peak, bandwidth * 1e9 * intensity / 1e12)
    return torch.tensor([intensity, achieved, attainable, achieved / attainable], dtype=torch.float64)


def _roof_call(fn, *args) -> torch.Tensor:
    return torch.tensor([float(v) for v in fn(*args)], dtype=torch.float64)


# ----------------------------------------------------------------------------- 5.2: tiled_matmul_bytes


def _tiled_cases() -> Cases:
    # (M, N, K, BM, BN, bytes per element)
    return {"fp32 4096^3, 128 x 128 tiles (v9)": (4096, 4096, 4096, 128, 128, 4),
            "fp32 2048^3, 32 x 32 tiles (v3)": (2048, 2048, 2048, 32, 32, 4),
            "fp16 4096^3, 128 x 256 tiles": (4096, 4096, 4096, 128, 256, 2),
            "edges: 1000 x 3000 x 500, 128 x 128 tiles": (1000, 3000, 500, 128, 128, 2),
            "one tile: 64 x 64 x 4096": (64, 64, 4096, 128, 128, 4),
            "MNIST layer: 128 x 512 x 784, 64 x 64 tiles": (128, 512, 784, 64, 64, 4)}


def _tiled_reference(M, N, K, BM, BN, elem) -> torch.Tensor:
    """Bytes if every block reads its rows of A and columns of B from DRAM: A once per column of tiles, B once per
    row of tiles, C written once."""
    return torch.tensor(elem * (M * K * math.ceil(N / BN) + K * N * math.ceil(M / BM) + M * N), dtype=torch.float64)


def _number(fn, *args) -> torch.Tensor:
    return torch.tensor(float(fn(*args)), dtype=torch.float64)


EXERCISES = [
    Exercise("sectors_touched", NSIGHT, "sectors_touched", _sectors_cases, reference=_sectors_reference,
             call=lambda fn, *args: torch.tensor(int(fn(*args)), dtype=torch.int64), atol=0, rtol=0),
    Exercise("top_stalls", NSIGHT, "top_stalls", _stalls_cases, reference=_stalls_reference, call=_stalls_call,
             atol=0, rtol=0),
    Exercise("blocks_per_sm", NSIGHT, "blocks_per_sm", _blocks_cases, reference=_blocks_reference,
             call=lambda fn, *args: torch.tensor([float(v) for v in fn(*args)], dtype=torch.float64),
             atol=1e-9, rtol=1e-9),
    Exercise("counted_flops", ROOFLINE, "counted_flops", _flops_cases, reference=_flops_reference, call=_number,
             atol=0, rtol=1e-12),
    Exercise("roof_distance", ROOFLINE, "roof_distance", _roof_cases, reference=_roof_reference, call=_roof_call,
             atol=0, rtol=1e-9),
    Exercise("tiled_matmul_bytes", ROOFLINE, "tiled_matmul_bytes", _tiled_cases, reference=_tiled_reference,
             call=_number, atol=0, rtol=0),
]
