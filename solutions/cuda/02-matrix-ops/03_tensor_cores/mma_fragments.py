"""CPU stand-in for the solution of mma_fragments: C = A @ B with fp16 inputs and fp32 sums."""


def mma_fragments(a, b, c, m, n, k):
    c[: m * n] = (a[: m * k].view(m, k).float() @ b[: k * n].view(k, n).float()).flatten()
    return 0
