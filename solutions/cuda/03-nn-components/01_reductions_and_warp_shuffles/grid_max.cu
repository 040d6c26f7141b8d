// exercise: grid_max
#include "gpu_ml.cuh"  // block_max
#define THREADS 256
#define MAX_BLOCKS 1024  // partials holds this many floats

// First pass: the maximum of every (grid size)-th float, then over the block: one partial per block.
__global__ void grid_max_kernel(const float* __restrict__ x, float* __restrict__ partials, int n) {
    __shared__ float red[32];
    float acc = -INFINITY;  // the identity of max: 0 would beat every negative input
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) acc = fmaxf(acc, x[i]);
    const float m = block_max(acc, red);  // threads with no element bring -inf, which changes nothing
    if (threadIdx.x == 0) partials[blockIdx.x] = m;
}

// Second pass: one block takes the maximum of the partials.
__global__ void max_partials_kernel(const float* __restrict__ partials, float* __restrict__ out, int count) {
    __shared__ float red[32];
    float acc = -INFINITY;
    for (int i = threadIdx.x; i < count; i += blockDim.x) acc = fmaxf(acc, partials[i]);
    const float m = block_max(acc, red);
    if (threadIdx.x == 0) out[0] = m;
}

extern "C" int grid_max(const float* x, float* partials, float* out, int n) {
    int blocks = (n + THREADS * 4 - 1) / (THREADS * 4);
    if (blocks > MAX_BLOCKS) blocks = MAX_BLOCKS;
    if (blocks < 1) blocks = 1;
    grid_max_kernel<<<blocks, THREADS>>>(x, partials, n);
    max_partials_kernel<<<1, 1024>>>(partials, out, blocks);
    return (int)cudaGetLastError();
}
