"""CPU stand-in for layer_norm_welford.cu (what the kernel writes, for tests/test_exercises.py): LayerNorm of every
row, computed in float64 and stored in float32."""

import torch.nn.functional as F


def layer_norm_welford(x, w, b, y, rows, cols, eps):
    x2 = x[: rows * cols].view(rows, cols).double()
    y[: rows * cols] = F.layer_norm(x2, (cols,), w[:cols].double(), b[:cols].double(), eps).flatten().float()
    return 0
