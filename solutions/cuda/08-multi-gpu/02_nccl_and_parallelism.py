"""Solutions to the exercises of cuda/08-multi-gpu/02_nccl_and_parallelism.ipynb (graded by gpu_ml.exercises)."""

import torch
import torch.distributed as dist

from gpu_ml.kernels.distributed.collectives import chunks_of, ring_all_gather, ring_all_gather_, ring_reduce_scatter


# Exercise 1: reduce-scatter gives each rank the summed gradient of its own chunk only; it updates that chunk of the
# weights (its optimizer state would be a chunk too: ZeRO), and all-gather hands every rank the whole updated vector.
# Together they move what one all-reduce moves, and each rank computes 1/p of the update.
def zero_sgd_step(params, grads, lr):
    rank, p = dist.get_rank(), dist.get_world_size()
    mean = ring_reduce_scatter(grads) / p
    mine = chunks_of(params, p)[rank] - lr * mean
    return ring_all_gather(mine, params.numel())


# Exercise 2: the columns of y are the rows of y.T, which is contiguous when built row-major: so gather y.T, whose
# rank-r block of rows is this rank's x @ w_shard transposed, with the ring all-gather on chunks of those sizes.
def column_parallel_gather(x, w_shard, n_out):
    rank, p = dist.get_rank(), dist.get_world_size()
    widths = [c.numel() for c in chunks_of(torch.arange(n_out), p)]  # every rank's number of columns
    yt = torch.empty(n_out, x.shape[0], dtype=x.dtype, device=x.device)
    blocks = list(yt.split(widths))  # contiguous row blocks of y.T
    blocks[rank].copy_((x @ w_shard).T)
    ring_all_gather_([b.view(-1) for b in blocks])
    return yt.T
