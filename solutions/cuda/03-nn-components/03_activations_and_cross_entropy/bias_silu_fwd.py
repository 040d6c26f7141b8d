"""CPU stand-in for bias_silu_fwd.cu: writes what the kernel writes, returns 0."""

import torch


def bias_silu_fwd(x, b, y, rows, cols):
    z = x.view(rows, cols) + b
    y[: rows * cols] = (z / (1 + torch.exp(-z))).flatten()
    return 0
