"""CPU stand-in for compact_block.cu (what the kernel writes, for tests/test_exercises_cuda.py): the elements of x
greater than t, in their order, in out[:k], and k in count[0]."""


def compact_block(x, out, count, n, t):
    kept = x[:n][x[:n] > t]
    out[: kept.numel()] = kept
    count[0] = kept.numel()
    return 0
