"""CPU stand-in for warp_sort32.cu (what the kernel writes, for tests/test_exercises_cuda.py): every 32 consecutive
values of x sorted, in y."""

import torch.nn.functional as F


def warp_sort32(x, y, n):
    groups = F.pad(x[:n].long(), (0, -n % 32), value=2**31 - 1).view(-1, 32)
    y[:n] = groups.sort(dim=1).values.flatten()[:n].to(y.dtype)
    return 0
