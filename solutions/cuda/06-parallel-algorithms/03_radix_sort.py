"""Solutions to the Python exercises of cuda/06-parallel-algorithms/03_radix_sort.ipynb (graded by gpu_ml.exercises);
the CUDA one is in the folder of the same name."""

import torch


# Exercise 1: section 2's sign-flip trick with 16-bit constants. Every NaN becomes the largest key (last, tied, so in
# input order), -0.0 becomes +0.0 (tied), a negative value has all 16 bits flipped, a non-negative one its sign set.
def half_order_key(x: torch.Tensor) -> torch.Tensor:
    bits = x.view(torch.int16).long() & 0xFFFF
    bits = torch.where(bits == 0x8000, 0, bits)
    key = torch.where(bits >= 0x8000, bits ^ 0xFFFF, bits | 0x8000)
    return torch.where(x.isnan(), 0xFFFF, key)


# Exercise 2: LSD with two 32-bit digits. Sort the indices by the low half, then, stably, by the high half with its sign
# bit flipped (two's complement, as for int32 keys); the second pass reads the high halves in the first pass's order.
def sort_int64_by_halves(x: torch.Tensor, sort_pairs) -> torch.Tensor:
    low = x & 0xFFFFFFFF
    high = ((x >> 32) & 0xFFFFFFFF) ^ 0x80000000
    _, order = sort_pairs(low, torch.arange(x.numel()))
    _, order = sort_pairs(high[order], order)
    return order
