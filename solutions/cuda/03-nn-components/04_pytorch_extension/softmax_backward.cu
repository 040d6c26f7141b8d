// exercise: softmax_backward
#define WARPS 4  // rows per block of 128 threads: one warp per row

// dx = y * (dy - sum_c dy[c] y[c]), row by row: the backward of y = softmax(x), from the saved output y.
__global__ void softmax_backward_kernel(const float* y, const float* dy, float* dx, int rows, int cols) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = blockIdx.x * WARPS + warp;
    if (row >= rows) return;  // the whole warp leaves together
    const float* yr = y + (long long)row * cols;
    const float* dyr = dy + (long long)row * cols;
    float* dxr = dx + (long long)row * cols;
    float dot = 0.0f;
    for (int c = lane; c < cols; c += 32) dot += dyr[c] * yr[c];
    // butterfly: every lane ends with the whole row's sum (a shfl_down reduction would leave it in lane 0 only)
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    for (int c = lane; c < cols; c += 32) dxr[c] = yr[c] * (dyr[c] - dot);
}

extern "C" int softmax_backward(const float* y, const float* dy, float* dx, int rows, int cols) {
    softmax_backward_kernel<<<(rows + WARPS - 1) / WARPS, WARPS * 32>>>(y, dy, dx, rows, cols);
    return (int)cudaGetLastError();
}
