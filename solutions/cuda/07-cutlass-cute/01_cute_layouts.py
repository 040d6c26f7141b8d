"""Solutions to the exercises of cuda/07-cutlass-cute/01_cute_layouts.ipynb (graded by gpu_ml.exercises)."""


def _size(shape):
    if isinstance(shape, int):
        return shape
    result = 1
    for mode in shape:
        result *= _size(mode)
    return result


def _offset(index, shape, stride):
    """The offset of 1-D index `index` (< size(shape)): the first mode takes index mod its size, the rest goes on."""
    if isinstance(shape, int):
        return index * stride
    total = 0
    for mode_shape, mode_stride in zip(shape, stride, strict=True):
        size = _size(mode_shape)
        total += _offset(index % size, mode_shape, mode_stride)
        index //= size
    return total


# Exercise 1: colexicographic, recursively: every nested mode is a layout of its own.
def layout_offsets(shape, stride):
    return [_offset(i, shape, stride) for i in range(_size(shape))]


# Exercise 2: the group's heads (stride 0, they share a K/V head), then the groups (stride 1).
def gqa_layout(q_heads, kv_heads):
    return (q_heads // kv_heads, kv_heads), (0, 1)


# Exercise 3: inside a tile, a row down is `cols` elements and a column right 1; a tile down is tile_rows rows, a tile
# right tile_cols columns.
def tiled_layout(rows, cols, tile_rows, tile_cols):
    return ((tile_rows, tile_cols), (rows // tile_rows, cols // tile_cols)), ((cols, 1), (tile_rows * cols, tile_cols))
