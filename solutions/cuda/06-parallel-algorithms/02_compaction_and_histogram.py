"""Solutions to the Python exercises of cuda/06-parallel-algorithms/02_compaction_and_histogram.ipynb (graded by
gpu_ml.exercises); the CUDA ones are in the folder of the same name."""

import torch


# Exercise 3: the number of distinct keys is a sum over bins of "the bin occurs at least once". The expectation of a
# sum is the sum of the expectations (independence is not needed), and bin b is missed by all `lanes` independent
# draws with probability (1 - p_b)^lanes.
def expected_atomics_per_warp(p: torch.Tensor, lanes: int = 32) -> torch.Tensor:
    return (1 - (1 - p) ** lanes).sum()
