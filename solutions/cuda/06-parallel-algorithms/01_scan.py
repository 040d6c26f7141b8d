"""Solutions to the Python exercises of cuda/06-parallel-algorithms/01_scan.ipynb (graded by gpu_ml.exercises); the
CUDA ones are in the folder of the same name."""

import torch


# Exercise 3: a key's place after one radix-sort pass is digit-major: every key with a smaller digit comes first (from
# every tile), then the keys of its own digit from the tiles before its own. So lay the counts out digit by digit,
# counts.T, and their exclusive scan is every (digit, tile)'s offset.
def radix_offsets(counts: torch.Tensor) -> torch.Tensor:
    flat = counts.T.reshape(-1)
    exclusive = flat.cumsum(0) - flat  # integers: exact
    return exclusive.view(counts.shape[1], counts.shape[0]).T
