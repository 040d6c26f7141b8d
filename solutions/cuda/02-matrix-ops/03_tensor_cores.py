"""Solutions of the Python exercises of cuda/02-matrix-ops/03_tensor_cores.ipynb (the CUDA ones are in the folder of
the same name)."""


# exercise: swizzle
def swizzle(r: int, c: int, chunks: int) -> int:
    """Where chunk c (16 bytes) of row r goes in a shared tile whose rows are `chunks` chunks long."""
    if chunks >= 8:  # a row covers all 8 bank groups (or more): the 8 rows of a read start in the same group
        return c ^ (r % 8)
    rows_per_line = 8 // chunks  # rows that fit in 128 bytes sit in different groups already
    return c ^ ((r // rows_per_line) % chunks)  # shift each later set of rows to other groups
