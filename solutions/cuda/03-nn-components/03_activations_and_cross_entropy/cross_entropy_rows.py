"""CPU stand-in for cross_entropy_rows.cu: writes each row's loss and gradient as the kernel does, returns 0."""

import torch

IGNORE_INDEX = -100


def cross_entropy_rows(logits, targets, loss, grad, rows, V):
    for r in range(rows):
        x, t = logits[r], int(targets[r])
        m = x.max()
        s = torch.exp(x - m).sum() if m > float("-inf") else torch.tensor(0.0)  # (-inf, 0) when nothing is finite
        log_s = torch.log(s)
        if t == IGNORE_INDEX:
            loss[r], grad[r * V:(r + 1) * V] = 0.0, 0.0
            continue
        loss[r] = (m - x[t]) + log_s if 0 <= t < V else float("nan")
        g = torch.exp(x - m - log_s)
        if 0 <= t < V:
            g[t] -= 1.0
        grad[r * V:(r + 1) * V] = g
    return 0
