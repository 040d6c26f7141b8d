// exercise: softmax_backward_block
#include "gpu_ml.cuh"  // block_sum
#define THREADS 256

// One block per row: dx = y * (dy - sum_j dy_j y_j), the sum a block reduction.
__global__ void softmax_backward_block_kernel(const float* __restrict__ y, const float* __restrict__ dy,
                                              float* __restrict__ dx, int cols) {
    __shared__ float red[32];
    const long long row = (long long)blockIdx.x * cols;  // rows are cols floats apart; long long: no int overflow
    float dot = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dot += y[row + c] * dy[row + c];
    dot = block_sum(dot, red);  // every thread gets the row's sum (threads with no column brought 0)
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dx[row + c] = y[row + c] * (dy[row + c] - dot);
}

extern "C" int softmax_backward_block(const float* y, const float* dy, float* dx, int rows, int cols) {
    if (rows == 0) return 0;  // a grid of 0 blocks is an error
    softmax_backward_block_kernel<<<rows, THREADS>>>(y, dy, dx, cols);
    return (int)cudaGetLastError();
}
