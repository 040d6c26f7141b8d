"""CPU stand-in for softmax_grouped.cu (what the kernel writes, for tests/test_exercises.py): the softmax of every
row."""

import torch


def softmax_grouped(x, y, rows, cols):
    y[: rows * cols] = torch.softmax(x[: rows * cols].view(rows, cols).double(), dim=1).flatten().float()
    return 0
