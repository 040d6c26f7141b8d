"""Solutions to the exercises of cuda/05-profiling-and-debugging/04_ptx_and_sass.ipynb (graded by gpu_ml.exercises)."""

import re

_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]+\*/\s*(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
_WIDTHS = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16}


# Exercise 1: the opcode is the first word after the address and the optional predicate; its width is one of its
# dot-separated modifiers, or 4 bytes when none of them is a width.
def access_bytes(listing):
    found = []
    for line in listing.splitlines():
        match = _INSTRUCTION.match(line)
        if match and match.group(1).split(".")[0] in ("LDG", "STG"):
            modifiers = match.group(1).split(".")[1:]
            found.append(next((_WIDTHS[m] for m in modifiers if m in _WIDTHS), 4))
    return found


# Exercise 2: a row starts at a multiple of cols floats, and cols is a multiple of 4, so the 4 floats of a thread
# start at a multiple of 16 bytes from x whenever x itself is 16-byte aligned: the host function checks that, and the
# kernel reads and writes them as one float4 each.
ROW_SCALE = r'''
#include <cstdint>

__global__ void row_scale_kernel(const float* __restrict__ x, const float* __restrict__ s, float* __restrict__ y,
                                 int rows, int cols) {
    const int quads = cols / 4;
    const long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= (long long)rows * quads) return;
    const int r = q / quads, c = 4 * (q % quads);
    float4 v = *reinterpret_cast<const float4*>(x + (long long)r * cols + c);
    const float f = s[r];
    v.x *= f;
    v.y *= f;
    v.z *= f;
    v.w *= f;
    *reinterpret_cast<float4*>(y + (long long)r * cols + c) = v;
}

extern "C" int row_scale(const float* x, const float* s, float* y, int rows, int cols) {
    if (cols % 4 || (uintptr_t)x % 16 || (uintptr_t)y % 16) return 1;
    const long long quads = (long long)rows * (cols / 4);
    if (quads == 0) return 0;
    row_scale_kernel<<<(quads + 255) / 256, 256>>>(x, s, y, rows, cols);
    return (int)cudaGetLastError();
}
'''


def row_scale_source():
    return ROW_SCALE


# Exercise 3: the 32 sums need not be live at once. The thread walks its columns in chunks of 8 and, for each, down
# the rows with 8 running sums: 8 accumulators, a pointer and two counters fit in 32 registers. Each row is read
# 4 times instead of once, mostly from L1 and L2.
COLUMN_SUMS = r'''
constexpr int COLS = 32;  // columns per thread
constexpr int CHUNK = 8;  // of them summed at a time

__global__ void __launch_bounds__(1024, 2) column_sums_kernel(const float* __restrict__ x, float* __restrict__ out,
                                                              int rows, int cols) {
    const int col0 = (blockIdx.x * blockDim.x + threadIdx.x) * COLS;
    if (col0 >= cols) return;
    for (int c0 = col0; c0 < col0 + COLS; c0 += CHUNK) {
        float acc[CHUNK];
#pragma unroll
        for (int c = 0; c < CHUNK; ++c) acc[c] = 0.0f;
        for (int r = 0; r < rows; ++r) {
            const float* row = x + (long long)r * cols + c0;
#pragma unroll
            for (int c = 0; c < CHUNK; ++c) acc[c] += row[c];
        }
#pragma unroll
        for (int c = 0; c < CHUNK; ++c) out[c0 + c] = acc[c];
    }
}

extern "C" int column_sums(const float* x, float* out, int rows, int cols) {
    if (cols % COLS) return 1;
    const int threads = cols / COLS;
    column_sums_kernel<<<(threads + 1023) / 1024, 1024>>>(x, out, rows, cols);
    return (int)cudaGetLastError();
}
'''


def spill_free_source():
    return COLUMN_SUMS
