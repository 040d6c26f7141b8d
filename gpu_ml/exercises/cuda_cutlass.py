"""Exercises of cuda/07-cutlass-cute 05 (a Hopper GEMM with CUTLASS 3.x): the stage count the collective builder
derives from the shared-memory carve-out, the tile the persistent scheduler gives a linear work index (raster order,
clusters and swizzle), and epilogue visitor trees written as data. All are graded on any machine: against the
builder's formula (`compute_stage_count_or_override` in cutlass/gemm/collective/builders/sm90_gmma_builder.inl), a
port of `PersistentTileSchedulerSm90::get_work_idx_m_and_n` (cutlass/gemm/kernel/sm90_tile_scheduler.hpp) and the
formula each tree must compute."""

from __future__ import annotations

import math

import torch

from gpu_ml.exercises.core import Cases, Exercise

_NB = "cuda/07-cutlass-cute/05_cutlass_hopper_gemm.ipynb"
SM90_SMEM_CAPACITY = 232448  # bytes of shared memory a CTA may use on sm_90 (detail::sm90_smem_capacity_bytes)


def _round_up(x: int, multiple: int) -> int:
    return (x + multiple - 1) // multiple * multiple


# ----------------------------------------------------------------------------- 1. builder_stages

def _stages_cases() -> Cases:
    # (tile (M, N, K), bytes per element of A and B, shared memory carved out for the epilogue in bytes)
    return {"fp16 128x256x64, this lesson's epilogue (17408 bytes)": ((128, 256, 64), 2, 17408),
            "fp16 128x128x64, the same epilogue": ((128, 128, 64), 2, 17408),
            "bf16 256x128x64, no carve-out": ((256, 128, 64), 2, 0),
            "fp16 64x256x64, a carve-out of 9216 bytes": ((64, 256, 64), 2, 9216),
            "fp8 128x256x128": ((128, 256, 128), 1, 17408),
            "tf32 (4 bytes) 128x128x32": ((128, 128, 32), 4, 8192),
            "a carve-out that is not a multiple of 128": ((128, 128, 64), 2, 1000)}


def _stages_reference(tile, elem_bytes, carveout_bytes) -> torch.Tensor:
    """StageCountAutoCarveout: (capacity - carve-out) // (bytes of A and B per stage + their two mbarriers), the
    capacity rounded down and the carve-out and the tiles' bytes rounded up to 128 bytes."""
    m, n, k = tile
    stage = _round_up((m + n) * k * elem_bytes, 128) + 16  # + a full and an empty barrier, 8 bytes each
    return torch.tensor((SM90_SMEM_CAPACITY // 128 * 128 - _round_up(carveout_bytes, 128)) // stage)


# ----------------------------------------------------------------------------- 2. scheduled_tile

def scheduled_tile(linear: int, blocks: tuple[int, int], cluster: tuple[int, int], raster: str,
                   log_swizzle: int) -> tuple[int, int]:
    """(m, n) of the CTA tile the persistent scheduler maps the linear work index `linear` to, for a grid of
    blocks = (CTA tiles along M, along N) (already rounded up to whole clusters and swizzle groups), clusters of
    cluster = (CTAs along M, along N), raster "N" or "M" and a swizzle of 2**log_swizzle clusters."""
    (bm, bn), (cm, cn) = blocks, cluster
    if raster == "N":  # the major (fastest) direction is N; a cluster's CTAs differ along M (the minor direction)
        minor_c, major_c, clusters_major = cm, cn, bn // cn
    else:
        minor_c, major_c, clusters_major = cn, cm, bm // cm
    minor_offset = linear % minor_c  # this CTA's place in its cluster, along the minor direction
    cluster_id, major_offset = divmod(linear % (bm * bn) // minor_c, major_c)
    offset, extra = cluster_id & ((1 << log_swizzle) - 1), cluster_id >> log_swizzle
    minor_group, cluster_major = divmod(extra, clusters_major)
    cluster_minor = minor_group * (1 << log_swizzle) + offset
    minor, major = cluster_minor * minor_c + minor_offset, cluster_major * major_c + major_offset
    return (minor, major) if raster == "N" else (major, minor)


def _schedule_cases() -> Cases:
    # (blocks (M, N) in CTA tiles, cluster (M, N), raster, log2 of the swizzle)
    return {"4096^2 in 128x256 tiles, clusters 2x1, along N": ((32, 16), (2, 1), "N", 0),
            "the same, swizzle 4": ((32, 16), (2, 1), "N", 2),
            "1000 x 3000, along M": ((8, 12), (2, 1), "M", 0),
            "3000 x 1000, along N, swizzle 2": ((24, 4), (2, 1), "N", 1),
            "clusters 1x2, along M, swizzle 8": ((16, 16), (1, 2), "M", 3),
            "no cluster, along N, swizzle 2": ((6, 10), (1, 1), "N", 1),
            "clusters 2x2, along N, swizzle 4": ((8, 8), (2, 2), "N", 2)}


def _schedule_reference(blocks, cluster, raster, log_swizzle) -> torch.Tensor:
    """[linear] -> (m, n) for every linear work index of the problem."""
    return torch.tensor([scheduled_tile(i, blocks, cluster, raster, log_swizzle) for i in range(math.prod(blocks))],
                        dtype=torch.int64)


def _schedule_call(fn, blocks, cluster, raster, log_swizzle) -> torch.Tensor:
    return torch.tensor([tuple(fn(i, blocks, cluster, raster, log_swizzle)) for i in range(math.prod(blocks))],
                        dtype=torch.int64)


# ----------------------------------------------------------------------------- 3. evt_tree

def _gelu(x: torch.Tensor) -> torch.Tensor:  # the tanh form, as CUTLASS's GELU_taylor and F.gelu(approximate="tanh")
    return 0.5 * x * (1 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))


OPS = {"multiply_add": (3, lambda a, b, c: a * b + c), "multiplies": (2, lambda a, b: a * b),
       "plus": (2, lambda a, b: a + b), "relu": (1, lambda x: torch.clamp(x, min=0)), "gelu": (1, _gelu)}
_M, _N = 5, 7  # M != N: a vector broadcast the wrong way does not fit


def evaluate(node, leaves: dict[str, torch.Tensor]) -> torch.Tensor:
    """The M x N result of an epilogue visitor tree given as nested tuples: ("acc",) the accumulators
    (Sm90AccFetch), ("C",) the source matrix (Sm90SrcFetch), ("scalar", name) (Sm90ScalarBroadcast), ("row", name) a
    vector of N values, one per column, broadcast down the rows (Sm90RowBroadcast), ("col", name) a vector of M
    values, one per row (Sm90ColBroadcast), ("compute", op, *children) (Sm90EVT<Sm90Compute<op>, children...>)."""
    if not isinstance(node, tuple) or not node:
        raise ValueError(f"a node is a non-empty tuple, got {node!r}")
    kind, *rest = node
    if kind in ("acc", "C"):
        return leaves[kind]
    if kind in ("scalar", "row", "col"):
        (name,) = rest
        value = leaves[name]
        if kind == "scalar":
            if value.dim() != 0:
                raise ValueError(f"{name!r} is a vector, not a scalar")
            return value.expand(_M, _N)
        if value.dim() != 1:
            raise ValueError(f"{name!r} is a scalar, not a vector")
        shaped = value[None, :] if kind == "row" else value[:, None]
        return shaped.expand(_M, _N)  # raises where the length does not fit
    if kind == "compute":
        op, *children = rest
        if op not in OPS:
            raise ValueError(f"unknown op {op!r}; the ops are {sorted(OPS)}")
        arity, fn = OPS[op]
        if len(children) != arity:
            raise ValueError(f"{op} takes {arity} children, got {len(children)}")
        return fn(*(evaluate(child, leaves) for child in children))
    raise ValueError(f"unknown node kind {kind!r}: acc, C, scalar, row, col or compute")


FORMULAS = {
    "alpha * acc + beta * C": lambda v: v["alpha"] * v["acc"] + v["beta"] * v["C"],
    "relu(acc + bias_m)": lambda v: torch.clamp(v["acc"] + v["bias_m"][:, None], min=0),
    "gelu(alpha * acc + bias_n)": lambda v: _gelu(v["alpha"] * v["acc"] + v["bias_n"][None, :]),
    "C + relu(alpha * acc + bias_n)": lambda v: v["C"] + torch.clamp(v["alpha"] * v["acc"] + v["bias_n"], min=0),
    "gelu(acc + bias_n) * scale_n": lambda v: _gelu(v["acc"] + v["bias_n"]) * v["scale_n"],
}


def _leaves() -> dict[str, torch.Tensor]:
    """acc and C (M x N), alpha and beta (scalars), bias_n and scale_n (N values: one per column of D), bias_m (M
    values: one per row), in float64."""
    g = torch.Generator().manual_seed(5)
    shapes = {"acc": (_M, _N), "C": (_M, _N), "alpha": (), "beta": (), "bias_n": (_N,), "scale_n": (_N,),
              "bias_m": (_M,)}
    return {name: torch.randn(shape, generator=g, dtype=torch.float64) for name, shape in shapes.items()}


def _evt_cases() -> Cases:
    return {name: (name,) for name in FORMULAS}


def _evt_reference(name) -> torch.Tensor:
    return FORMULAS[name](_leaves())


def _evt_call(fn, name) -> torch.Tensor:
    return evaluate(fn(name), _leaves())


EXERCISES = [
    Exercise("builder_stages", _NB, "builder_stages", _stages_cases, reference=_stages_reference,
             call=lambda fn, *args: torch.tensor(fn(*args), dtype=torch.int64), atol=0, rtol=0),
    Exercise("scheduled_tile", _NB, "scheduled_tile", _schedule_cases, reference=_schedule_reference,
             call=_schedule_call, atol=0, rtol=0),
    Exercise("evt_tree", _NB, "evt_tree", _evt_cases, reference=_evt_reference, call=_evt_call,
             atol=1e-12, rtol=1e-12),
]
