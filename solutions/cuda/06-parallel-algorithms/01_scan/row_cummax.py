"""CPU stand-in for row_cummax.cu (what the kernel writes, for tests/test_exercises_cuda.py): the running maximum of
each row of x in y."""

import torch


def row_cummax(x, y, rows, cols):
    y[: rows * cols] = torch.cummax(x[: rows * cols].view(rows, cols), dim=1).values.flatten()
    return 0
