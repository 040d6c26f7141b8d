// cudaling: reverse_block
#define BLOCK 256

__global__ void reverse_kernel(float* x) {
    __shared__ float tile[BLOCK];
    float* chunk = x + blockIdx.x * BLOCK;
    const int t = threadIdx.x;
    tile[t] = chunk[t];
    __syncthreads();  // every element is in the tile before any thread overwrites the chunk
    chunk[t] = tile[BLOCK - 1 - t];
}

extern "C" int reverse_block(float* x, int n) {  // n: a multiple of BLOCK
    reverse_kernel<<<n / BLOCK, BLOCK>>>(x);
    return (int)cudaGetLastError();
}
