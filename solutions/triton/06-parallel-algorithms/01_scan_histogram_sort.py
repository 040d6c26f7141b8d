"""Solutions to the exercises of triton/06-parallel-algorithms/01_scan_histogram_sort.ipynb (graded by
gpu_ml.exercises)."""

import torch


# Exercise 1: one NaN for all NaNs, the bits read as int32; a negative float's bits read as a negative int whose
# order is backwards, so its 31 lower bits are flipped (the sign stays set: still below every non-negative key).
def sortable_keys(x):
    bits = torch.where(x.isnan(), float("nan"), x).view(torch.int32)
    return torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


# Exercise 2: y[end - 1] is the sum of everything before each segment's end; consecutive differences leave each
# segment's own sum, the first one as it is.
def segment_sums(y, ends):
    totals = y[ends - 1]
    return torch.cat([totals[:1], totals[1:] - totals[:-1]])
