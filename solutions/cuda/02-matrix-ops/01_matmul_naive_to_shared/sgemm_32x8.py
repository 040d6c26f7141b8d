"""CPU stand-in for the solution of sgemm_32x8: what the kernel writes, into the same output."""


def sgemm_32x8(a, b, c, m, n, k):
    c[: m * n] = (a[: m * k].view(m, k) @ b[: k * n].view(k, n)).flatten()
    return 0
