"""Solutions to the exercises of cuda/07-cutlass-cute/03_cute_mma_and_gemm.ipynb (graded by gpu_ml.exercises)."""


# Exercise 1: invert the PTX ISA's fragment tables. With g = lane // 4 and t = lane % 4: A (16 x k) value i sits at
# row g + 8 * bit 1 of i, column 2t + bit 0 of i + 8 * bit 2 of i; B (k x 8) value i at row 2t + bit 0 + 8 * bit 1,
# column g; C value i at row g + 8 * bit 1, column 2t + bit 0. So element (r, c) is found by reading those bits back.
def mma_owner(k, operand):
    if operand == "A":
        return [[((r % 8) * 4 + (c % 8) // 2, (c % 2) + 2 * (r // 8) + 4 * (c // 8)) for c in range(k)]
                for r in range(16)]
    if operand == "B":
        return [[(n * 4 + (r % 8) // 2, (r % 2) + 2 * (r // 8)) for n in range(8)] for r in range(k)]
    return [[((r % 8) * 4 + c // 2, (c % 2) + 2 * (r // 8)) for c in range(8)] for r in range(16)]


# Exercise 2: the same tables as (thread, value) -> offset. The thread splits as (t, g) = (lane % 4, lane // 4),
# shape (4, 8); each bit of the value index is a mode of size 2. Their strides are the steps in the column-major
# offset: A m + 16 k (t moves k by 2: 32, g moves m: 1; value bits: k + 1 = 16, m + 8 = 8, k + 8 = 128); B n + 8 k
# (t: k + 2 = 16, g: n = 1; value bits k + 1 = 8, k + 8 = 64); C m + 16 n (t: n + 2 = 32, g: 1; n + 1 = 16, m + 8).
def mma_tv_layout(k, operand):
    if operand == "A":
        if k == 16:
            return ((4, 8), (2, 2, 2)), ((32, 1), (16, 8, 128))
        return ((4, 8), (2, 2)), ((32, 1), (16, 8))
    if operand == "B":
        if k == 16:
            return ((4, 8), (2, 2)), ((16, 1), (8, 64))
        return ((4, 8), 2), ((16, 1), 8)
    return ((4, 8), (2, 2)), ((32, 1), (16, 8))


# Exercise 3: one block per BM x BN tile of C, K / BK k-tiles each; a stage holds a BM x BK tile of A and a BN x BK
# tile of B; a block resident on an SM takes its shared memory plus the 1 KiB CUDA reserves for it.
def gemm_plan(M, N, K, tile, stages, elem_bytes, smem_per_sm):
    bm, bn, bk = tile
    smem = stages * (bm + bn) * bk * elem_bytes
    return (M // bm) * (N // bn), K // bk, smem, smem_per_sm // (smem + 1024)
