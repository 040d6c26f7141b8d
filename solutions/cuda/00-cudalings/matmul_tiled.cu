// cudaling: matmul_tiled
#define TILE 16

__global__ void matmul_kernel(const float* a, const float* b, float* c, int m, int n, int k) {
    __shared__ float as[TILE][TILE], bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < k; k0 += TILE) {
        // every thread loads one element of each tile (zero outside the matrices) and takes part in the syncs
        as[ty][tx] = row < m && k0 + tx < k ? a[(size_t)row * k + k0 + tx] : 0.0f;
        bs[ty][tx] = k0 + ty < k && col < n ? b[(size_t)(k0 + ty) * n + col] : 0.0f;
        __syncthreads();  // both tiles loaded
        for (int kk = 0; kk < TILE; ++kk) acc += as[ty][kk] * bs[kk][tx];
        __syncthreads();  // everyone is done with them before the next loads
    }
    if (row < m && col < n) c[(size_t)row * n + col] = acc;
}

extern "C" int matmul_tiled(const float* a, const float* b, float* c, int m, int n, int k) {
    dim3 block(TILE, TILE);
    dim3 grid((n + TILE - 1) / TILE, (m + TILE - 1) / TILE);
    matmul_kernel<<<grid, block>>>(a, b, c, m, n, k);
    return (int)cudaGetLastError();
}
