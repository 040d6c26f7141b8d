"""Solutions to the exercises of cuda/08-multi-gpu/01_collectives_from_scratch.ipynb (graded by gpu_ml.exercises)."""

import math

import torch
import torch.distributed as dist

from gpu_ml.kernels.distributed.collectives import chunks_of, exchange


# Exercise 1: in step k every rank swaps its whole partial sum with the rank whose number differs in bit k, and both
# add. After log2 p steps each rank has summed all p vectors (each step doubles how many it has seen). Both partners
# add the same two numbers in the same order (the lower rank's first), so every rank ends with the same bits.
def recursive_doubling_all_reduce(x):
    rank, p = dist.get_rank(), dist.get_world_size()
    total, incoming = x.flatten().clone(), torch.empty(x.numel(), dtype=x.dtype, device=x.device)
    mask = 1
    while mask < p:
        partner = rank ^ mask
        exchange(total, partner, incoming, partner)
        total = incoming + total if partner < rank else total + incoming
        mask <<= 1
    return total.view_as(x)


# Exercise 2: number the ranks from the root along the ring, me = (rank - root) % p. Rank me receives piece i in step
# me - 1 + i and forwards it to the right in step me + i, while it receives piece i + 1: a pipeline. With k pieces the
# last rank has everything after p - 2 + k steps of one piece each, instead of p - 1 steps of the whole message.
def ring_broadcast(x, root, pieces):
    rank, p = dist.get_rank(), dist.get_world_size()
    me = (rank - root) % p
    out = x.flatten().clone()
    parts = chunks_of(out, pieces)
    right, left = (rank + 1) % p, (rank - 1) % p
    for step in range(p + len(parts) - 2):
        send, recv = step - me, step - me + 1  # the pieces this rank sends and receives in this step
        exchange(parts[send] if me < p - 1 and 0 <= send < len(parts) else None, right,
                 parts[recv] if me > 0 and 0 <= recv < len(parts) else None, left)
    return out.view_as(x)


# Exercise 3: equate 2(p-1)(alpha + n beta / p) with 2 L (alpha + n beta), L = ceil(log2 p), and solve for n.
def crossover_bytes(p, alpha, beta):
    rounds = math.ceil(math.log2(p))
    return ((p - 1) - rounds) * alpha / ((rounds - (p - 1) / p) * beta)
