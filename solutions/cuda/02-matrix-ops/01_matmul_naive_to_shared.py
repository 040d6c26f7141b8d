"""Solutions of the Python exercises of cuda/02-matrix-ops/01_matmul_naive_to_shared.ipynb (the CUDA ones are in the
folder of the same name)."""


def conflict_degree(word_addresses):
    """Passes a warp needs for one 4-byte shared-memory access: the most distinct words in one bank."""
    per_bank = {}
    for w in word_addresses:
        per_bank.setdefault(w % 32, set()).add(w)
    return max(len(words) for words in per_bank.values())


# exercise: double_column_degree
def double_column_degree(pad: int) -> int:
    """Conflict degree of lanes 0-15 reading tile[lane][3] of a `double tile[32][32 + pad]`."""
    words = []
    for lane in range(16):
        e = lane * (32 + pad) + 3  # the double's index in the tile
        words += [2 * e, 2 * e + 1]  # the two 4-byte words it covers
    return conflict_degree(words)
