"""CPU stand-in for adam_step.cu: updates p, m and v in place as the kernel does (fp32), returns 0."""

import torch


def adam_step(p, g, m, v, lr, beta1, beta2, eps, bc1, bc2, n):
    mi = beta1 * m[:n] + (1 - beta1) * g
    vi = beta2 * v[:n] + (1 - beta2) * g * g
    m[:n], v[:n] = mi, vi
    p[:n] -= lr * (mi / bc1) / (torch.sqrt(vi / bc2) + eps)
    return 0
