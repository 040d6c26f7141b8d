// cudaling: softmax_rows
#include <cmath>
#define WARPS 4  // rows per block, one warp each

__global__ void softmax_rows_kernel(const float* x, float* out, int rows, int cols) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = blockIdx.x * WARPS + warp;
    if (row >= rows) return;  // the whole warp leaves together
    const float* xr = x + (size_t)row * cols;
    float* yr = out + (size_t)row * cols;
    float m = -INFINITY;
    for (int c = lane; c < cols; c += 32) m = fmaxf(m, xr[c]);
    for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
    float s = 0.0f;
    for (int c = lane; c < cols; c += 32) s += expf(xr[c] - m);  // exp of at most 0: no overflow
    for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
    for (int c = lane; c < cols; c += 32) yr[c] = expf(xr[c] - m) / s;
}

extern "C" int softmax_rows(const float* x, float* out, int rows, int cols) {
    softmax_rows_kernel<<<(rows + WARPS - 1) / WARPS, WARPS * 32>>>(x, out, rows, cols);
    return (int)cudaGetLastError();
}
