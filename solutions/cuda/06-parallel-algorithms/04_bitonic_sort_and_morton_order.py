"""Solutions to the Python exercises of cuda/06-parallel-algorithms/04_bitonic_sort_and_morton_order.ipynb (graded by
gpu_ml.exercises); the CUDA one is in the folder of the same name."""

import torch


# Exercise 2: at stage (k, j) key i meets key i ^ j. It keeps the minimum where it is the lower key (i & j == 0) of an
# ascending pair (i & k == 0), or the upper key of a descending one: where the two tests agree.
def bitonic_sort_torch(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[-1]
    i = torch.arange(n, device=x.device)
    k = 2
    while k <= n:
        j = k // 2
        while j >= 1:
            partner = x[:, i ^ j]
            keep_min = ((i & j) == 0) == ((i & k) == 0)
            x = torch.where(keep_min, torch.minimum(x, partner), torch.maximum(x, partner))
            j //= 2
        k *= 2
    return x


# Exercise 3: compact every third bit into the low 10, the reverse of spreading 10 bits two apart: each step halves
# the distance between groups (2, 4, 8, 16 places), each mask keeps the bits in their new places.
def _compact1by2(v: torch.Tensor) -> torch.Tensor:
    v = v & 0x09249249
    v = (v | (v >> 2)) & 0x030C30C3
    v = (v | (v >> 4)) & 0x0300F00F
    v = (v | (v >> 8)) & 0x030000FF
    v = (v | (v >> 16)) & 0x000003FF
    return v


def morton3_decode(code: torch.Tensor):
    return _compact1by2(code), _compact1by2(code >> 1), _compact1by2(code >> 2)
