"""Solutions of the Python exercises of cuda/02-matrix-ops/02_matmul_register_tiling.ipynb (the CUDA ones are in the
folder of the same name)."""


def passes_4b(word_addresses):
    per_bank = {}
    for w in word_addresses:
        per_bank.setdefault(w % 32, set()).add(w)
    return max(len(s) for s in per_bank.values())


# exercise: v5_read_degree
def v5_read_degree(tn: int) -> int:
    """Conflict degree of a warp's scalar read Bs[k][tcol] (j = 0) when thread t's tcol is tn * (t % 16)."""
    words = [tn * (t % 16) for t in range(32)]  # row k adds k * BN = k * 128 words: the same banks
    return passes_4b(words)
