"""CPU stand-in for grid_max.cu (what the kernels write, for tests/test_exercises.py): the maximum of x in out[0]."""


def grid_max(x, partials, out, n):
    out[0] = x[:n].max()
    return 0
