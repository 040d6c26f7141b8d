// exercise: sgemm_32x8
// C = A @ B (fp32, row-major), one thread per output, blocks of 32 x 8 threads.
__global__ void sgemm_32x8_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;  // a warp: 32 consecutive columns of one row
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {  // the last blocks hang over the edges of C
        float acc = 0.0f;
        for (int k = 0; k < K; ++k)
            acc += A[row * K + k] * B[k * N + col];  // A: one address per warp; B: 32 consecutive floats
        C[row * N + col] = acc;                      // one 128-byte line per warp
    }
}

extern "C" int sgemm_32x8(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 block(32, 8);
    dim3 grid((N + 31) / 32, (M + 7) / 8);  // x covers the columns, y the rows
    sgemm_32x8_kernel<<<grid, block>>>(A, B, C, M, N, K);
    return (int)cudaGetLastError();
}
