"""Solutions to the exercises of cuda/05-profiling-and-debugging/01_nsight_compute.ipynb (graded by
gpu_ml.exercises)."""

import math


# Exercise 1: a lane's access covers the bytes [a, a + size); a sector is 32 aligned bytes, so byte b is in sector
# b // 32. The request needs every distinct sector any active lane touches, once (a broadcast costs one).
def sectors_touched(addresses, size):
    return len({b // 32 for a in addresses for b in range(a, a + size)})


# Exercise 2: the stall metrics are smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio; keep those,
# strip prefix and suffix, drop "selected" (the warp was issuing: not a stall) and sort by cycles, largest first.
def top_stalls(row, k):
    prefix, suffix = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
    stalls = {name[len(prefix):-len(suffix)]: value for name, value in row.items()
              if name.startswith(prefix) and name.endswith(suffix)}
    stalls.pop("selected", None)
    return sorted(stalls, key=lambda reason: -stalls[reason])[:k]


# Exercise 3: each resource allows some whole blocks; the SM holds the fewest of them. Registers go to a warp in
# units of 256 (regs * 32 rounded up), shared memory costs the block's bytes plus 1 KB the system reserves.
def blocks_per_sm(regs, threads, smem):
    warps = math.ceil(threads / 32)
    per_warp = math.ceil(regs * 32 / 256) * 256
    blocks = min(64 // warps, 32, 65536 // (per_warp * warps), (228 * 1024) // (smem + 1024))
    return blocks, 100 * blocks * warps / 64
