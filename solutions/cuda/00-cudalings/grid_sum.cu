// cudaling: grid_sum
#define THREADS 256
#define MAX_BLOCKS 1024

// (given) Every thread of the block calls it; every thread gets the block's sum.
__device__ float block_reduce(float v) {
    __shared__ float partial[THREADS];
    partial[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    return partial[0];
}

__global__ void partial_sums(const float* x, float* partial, int n) {  // pass 1: one sum per block
    float v = 0.0f;
    for (int i = blockIdx.x * THREADS + threadIdx.x; i < n; i += gridDim.x * THREADS) v += x[i];
    v = block_reduce(v);
    if (threadIdx.x == 0) partial[blockIdx.x] = v;
}

__global__ void final_sum(const float* partial, float* out, int blocks) {  // pass 2: one block adds them up
    float v = 0.0f;
    for (int i = threadIdx.x; i < blocks; i += THREADS) v += partial[i];
    v = block_reduce(v);
    if (threadIdx.x == 0) out[0] = v;
}

extern "C" int grid_sum(const float* x, float* partial, float* out, int n) {  // partial: room for MAX_BLOCKS
    int blocks = (n + THREADS - 1) / THREADS;
    if (blocks > MAX_BLOCKS) blocks = MAX_BLOCKS;
    partial_sums<<<blocks, THREADS>>>(x, partial, n);
    final_sum<<<1, THREADS>>>(partial, out, blocks);  // same stream: runs after pass 1 has finished
    return (int)cudaGetLastError();
}
