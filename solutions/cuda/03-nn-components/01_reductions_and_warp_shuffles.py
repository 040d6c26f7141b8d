"""Solutions to the Python exercises of cuda/03-nn-components/01_reductions_and_warp_shuffles.ipynb (graded by
gpu_ml.exercises); the CUDA ones are in the folder of the same name."""


# Exercise 3: every launch turns n values into ceil(n / 256) block sums, until one is left; every level but the last
# goes to the scratch buffer (the last launch writes straight to out).
def tree_plan(n: int) -> tuple[int, int]:
    levels = [-(-n // 256)]
    while levels[-1] > 1:
        levels.append(-(-levels[-1] // 256))
    return len(levels), sum(levels[:-1])
