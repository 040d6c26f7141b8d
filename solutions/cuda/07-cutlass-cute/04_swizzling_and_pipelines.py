"""Solutions to the exercises of cuda/07-cutlass-cute/04_swizzling_and_pipelines.ipynb (graded by gpu_ml.exercises)."""


# Exercise 1: the access starts at byte elem_bytes * layout(row, column); bank = (byte // 4) % 32, and an access of
# 8 or 16 bytes covers the next words too, one bank each.
def lane_banks(shape, stride, coords, elem_bytes, width):
    words = max(1, width // 4)
    banks = []
    for row, col in coords:
        start = elem_bytes * (row * stride[0] + col * stride[1])
        banks.append([(start // 4 + k) % 32 for k in range(words)])
    return banks


# Exercise 2: offset = row * row_elems + col, then Swizzle<B, M, S>: the B bits from bit M + max(0, S) (YYY) are
# XORed into the B bits from bit M - min(0, S) (ZZZ); with S < 0, YYY sits below ZZZ and moves up.
def swizzled_offset(bits, base, shift, row, col, row_elems):
    offset = row * row_elems + col
    yyy = ((1 << bits) - 1) << (base + max(0, shift))
    moved = offset & yyy
    return offset ^ (moved >> shift if shift > 0 else moved << -shift)


# Exercise 3: keep a 16-byte chunk whole (M = log2(16 / elem_bytes)); XOR the chunk index with as many row bits as
# 8 consecutive rows need to reach 8 different bank groups: 3 when a row covers all 8 groups (128 bytes or more),
# fewer for shorter rows (rows of 64 bytes already alternate between two halves of the banks). YYY starts at the
# first row bit that a 128-byte line does not already separate: offset bit log2(max(row_bytes, 128) / elem_bytes),
# which is M + S.
def swizzle_for(row_bytes, elem_bytes):
    bits = min(row_bytes // 16, 8).bit_length() - 1
    base = (16 // elem_bytes).bit_length() - 1
    shift = (max(row_bytes, 128) // 16).bit_length() - 1
    return bits, base, shift
