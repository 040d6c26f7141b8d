// exercise: softmax_grouped
#include <cmath>
#define GROUP 8                  // lanes per row: 4 rows per warp
#define PER_LANE (32 / GROUP)    // values per lane: rows of up to 32 columns
#define THREADS 128

__global__ void softmax_grouped_kernel(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    const int g = threadIdx.x % GROUP;  // lane within its group; groups are 8 consecutive lanes of a warp
    const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / GROUP;
    const bool active = row < rows;  // no early return: the other groups of the warp still shuffle
    const float* xr = x + row * cols;
    float v[PER_LANE];
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < PER_LANE; ++k) {
        const int c = g + k * GROUP;
        v[k] = active && c < cols ? xr[c] : -INFINITY;  // past the end: neutral for max and exp
        m = fmaxf(m, v[k]);
    }
    // Butterflies over the 8 lanes of the group only: offsets 4, 2, 1, and width GROUP.
    for (int offset = GROUP / 2; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset, GROUP));
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < PER_LANE; ++k) {
        v[k] = expf(v[k] - m);
        s += v[k];
    }
    for (int offset = GROUP / 2; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset, GROUP);
    if (!active) return;  // after the last shuffle
#pragma unroll
    for (int k = 0; k < PER_LANE; ++k) {
        const int c = g + k * GROUP;
        if (c < cols) y[row * cols + c] = v[k] / s;
    }
}

extern "C" int softmax_grouped(const float* x, float* y, int rows, int cols) {
    if (cols < 1 || cols > 32) return (int)cudaErrorInvalidValue;  // a group holds at most 32 columns
    if (rows == 0) return 0;
    const long long threads = (long long)rows * GROUP;
    softmax_grouped_kernel<<<(unsigned)((threads + THREADS - 1) / THREADS), THREADS>>>(x, y, rows, cols);
    return (int)cudaGetLastError();
}
