"""Solutions to the exercises of cuda/07-cutlass-cute/06_cute_dsl.ipynb (graded by gpu_ml.exercises)."""


# Exercise 1: the tile has R = tr * vr rows (column-major offsets: row + R * column). A thread (i, j) of the row-major
# thread grid, numbered j fastest, starts at row i * vr, column j * vc; its value (a, b), numbered b fastest, adds row
# a and column b.
def tv_layout(thread_shape, value_shape):
    (tr, tc), (vr, vc) = thread_shape, value_shape
    rows = tr * vr
    return ((tc, tr), (vc, vr)), ((vc * rows, vr), (rows, 1))


# Exercise 2: BM / warpgroups rows per warpgroup, 64 per instruction, BK / 16 steps along K; the BM x BN fp32
# accumulators over 128 * warpgroups threads; one stage holds BM x BK of A and BN x BK of B, 2 bytes each.
def wgmma_plan(BM, BN, BK, warpgroups):
    return BM // warpgroups // 64 * (BK // 16), BM * BN // (128 * warpgroups), (BM + BN) * BK * 2


# Exercise 3: inside a tile a row down is `cols` elements and a column right 1; a tile down is tile_rows rows, a tile
# right tile_cols columns.
def row_major_tiles(rows, cols, tile_rows, tile_cols):
    return ((tile_rows, tile_cols), (rows // tile_rows, cols // tile_cols)), ((cols, 1), (tile_rows * cols, tile_cols))
