"""Solutions to the exercises of cuda/07-cutlass-cute/02_cute_tensors_and_copies.ipynb (graded by gpu_ml.exercises)."""


def _layout(shape, stride):
    """The function (i, j) -> i * stride[0] + j * stride[1] of a 2-D layout with integer modes."""
    return lambda i, j: i * stride[0] + j * stride[1]


# Exercise 1: make_tiled_copy lays the value block (VM x VN) once per thread, the blocks placed as the thread layout
# says (a raked product). So thread thr(tm, tn) owns rows tm * VM .. + VM - 1 and columns tn * VN .. + VN - 1, and
# its value val(vm, vn) is element (tm * VM + vm, tn * VN + vn).
def tv_coords(thr_shape, thr_stride, val_shape, val_stride):
    (tms, tns), (vms, vns) = thr_shape, val_shape
    thr, val = _layout(thr_shape, thr_stride), _layout(val_shape, val_stride)
    table = [[None] * (vms * vns) for _ in range(tms * tns)]
    for tm in range(tms):
        for tn in range(tns):
            for vm in range(vms):
                for vn in range(vns):
                    table[thr(tm, tn)][val(vm, vn)] = (tm * vms + vm, tn * vns + vn)
    return table


# Exercise 2: local_partition tiles the tensor by the thread layout's shape and gives thread thr(i, j) position
# (i, j) of every tile: element (r, c) sits at position (r mod TM, c mod TN) of its tile.
def partition_owner(thr_shape, thr_stride, rows, cols):
    tms, tns = thr_shape
    thr = _layout(thr_shape, thr_stride)
    return [[thr(r % tms, c % tns) for c in range(cols)] for r in range(rows)]


# Exercise 3: the tile starts at element (coord[0] * tile[0], coord[1] * tile[1]) of the matrix, and inside it a step
# along either mode is the matrix's own step: same strides, the tile's shape.
def tile_view(shape, stride, tile, coord):
    start = coord[0] * tile[0] * stride[0] + coord[1] * tile[1] * stride[1]
    return start, tuple(tile), tuple(stride)
