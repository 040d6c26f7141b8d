"""Solutions to the exercises of cuda/07-cutlass-cute/05_cutlass_hopper_gemm.ipynb (graded by gpu_ml.exercises)."""


def _round_up(x, multiple):
    return (x + multiple - 1) // multiple * multiple


# Exercise 1: the builder's StageCountAutoCarveout. A stage holds an M x K tile of A and an N x K tile of B (rounded up
# to 128 bytes) and two 8-byte mbarriers (full and empty); the epilogue's carve-out (rounded up to 128 bytes) comes off
# the 232448 bytes an sm_90 CTA may use, and as many whole stages as fit the rest are taken.
def builder_stages(tile, elem_bytes, carveout_bytes):
    m, n, k = tile
    stage = _round_up((m + n) * k * elem_bytes, 128) + 2 * 8
    return (232448 // 128 * 128 - _round_up(carveout_bytes, 128)) // stage


# Exercise 2: PersistentTileSchedulerSm90::get_work_idx_m_and_n. Along N, the major (fastest) direction is N and the
# CTAs of a cluster differ along M (the minor direction); along M the other way round. The linear index, divided by the
# cluster's extent along the minor direction (whose remainder is this CTA's place in its cluster), counts clusters
# laid out major-fastest; a swizzle of 2^s takes 2^s consecutive clusters down the minor direction before it steps
# along the major one.
def scheduled_tile(linear, blocks, cluster, raster, log_swizzle):
    (bm, bn), (cm, cn) = blocks, cluster
    minor_c, major_c, clusters_major = (cm, cn, bn // cn) if raster == "N" else (cn, cm, bm // cm)
    minor_offset = linear % minor_c
    cluster_id, major_offset = divmod(linear % (bm * bn) // minor_c, major_c)
    offset, extra = cluster_id % (1 << log_swizzle), cluster_id >> log_swizzle
    minor_group, cluster_major = divmod(extra, clusters_major)
    minor = (minor_group * (1 << log_swizzle) + offset) * minor_c + minor_offset
    major = cluster_major * major_c + major_offset
    return (minor, major) if raster == "N" else (major, minor)


# Exercise 3: the trees. A vector with one value per row of D (M values) is a column broadcast ("col"), one with a
# value per column (N values) a row broadcast ("row"); a residual added after the activation sits above it.
def evt_tree(name):
    acc, c = ("acc",), ("C",)
    alpha_acc_plus_bias = ("compute", "multiply_add", ("scalar", "alpha"), acc, ("row", "bias_n"))
    trees = {
        "alpha * acc + beta * C": ("compute", "multiply_add", ("scalar", "beta"), c,
                                   ("compute", "multiplies", ("scalar", "alpha"), acc)),
        "relu(acc + bias_m)": ("compute", "relu", ("compute", "plus", acc, ("col", "bias_m"))),
        "gelu(alpha * acc + bias_n)": ("compute", "gelu", alpha_acc_plus_bias),
        "C + relu(alpha * acc + bias_n)": ("compute", "plus", c, ("compute", "relu", alpha_acc_plus_bias)),
        "gelu(acc + bias_n) * scale_n": ("compute", "multiplies",
                                         ("compute", "gelu", ("compute", "plus", acc, ("row", "bias_n"))),
                                         ("row", "scale_n")),
    }
    return trees[name]
