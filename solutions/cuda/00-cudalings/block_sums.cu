// cudaling: block_sums
#define BLOCK 256

__global__ void block_sums_kernel(const float* x, float* out, int n) {
    __shared__ float partial[BLOCK];
    const int t = threadIdx.x, i = blockIdx.x * BLOCK + t;
    partial[t] = i < n ? x[i] : 0.0f;  // past the end: add nothing
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s /= 2) {  // halve the active threads each step
        if (t < s) partial[t] += partial[t + s];
        __syncthreads();  // outside the if: every thread of the block must reach it
    }
    if (t == 0) out[blockIdx.x] = partial[0];
}

extern "C" int block_sums(const float* x, float* out, int n) {
    block_sums_kernel<<<(n + BLOCK - 1) / BLOCK, BLOCK>>>(x, out, n);
    return (int)cudaGetLastError();
}
