"""Solutions to the Python exercises of cuda/01-basics/03_coalescing_and_occupancy.ipynb (graded by
gpu_ml.exercises); the CUDA ones are in the folder of the same name."""

import torch


# Exercise 1: a thread's element starts at byte index * elem_bytes (the array starts on a sector boundary), and an
# aligned element of at most 16 bytes lies inside one 32-byte sector: the sector is that byte address // 32. A
# warp's load costs as many sectors as its 32 threads touch distinct ones.
def warp_sectors(index: torch.Tensor, elem_bytes: int) -> torch.Tensor:
    sectors = index.long() * elem_bytes // 32
    return torch.tensor([len(torch.unique(row)) for row in sectors])
