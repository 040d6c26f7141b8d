"""CPU stand-in for the solution of sgemm_vec_tile: refuses shapes that are not whole tiles, else C = A @ B."""


def sgemm_vec_tile(a, b, c, m, n, k):
    if m % 64 or n % 64 or k % 8:
        return 1  # cudaErrorInvalidValue, nothing written
    c[: m * n] = (a[: m * k].view(m, k) @ b[: k * n].view(k, n)).flatten()
    return 0
