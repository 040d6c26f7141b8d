"""CPU stand-in for transpose_batched.cu (what the kernel writes, for tests/test_exercises.py): out holds each
rows x cols matrix of in transposed, batch after batch."""


def transpose_batched(x, out, batch, rows, cols):
    out[: x.numel()] = x.view(batch, rows, cols).transpose(1, 2).flatten()
    return 0
