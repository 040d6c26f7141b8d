// exercise: sgemm_thread_tile
// 2-D block tiling: a block of 256 threads computes a 64 x 64 tile of C, each thread a 4 x 4 square of it,
// walking K in steps of 8. Any shape: loads outside A and B are 0, stores outside C are skipped.
constexpr int BM = 64, BN = 64, BK = 8, TM = 4, TN = 4;
constexpr int THREADS = (BM / TM) * (BN / TN);  // 16 x 16 = 256

__global__ void __launch_bounds__(THREADS)
sgemm_thread_tile_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[BM][BK];  // As[r][k] = A[bm + r][k0 + k]
    __shared__ float Bs[BK][BN];  // Bs[k][c] = B[k0 + k][bn + c]
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN, t = threadIdx.x;
    const int trow = t / (BN / TN) * TM, tcol = t % (BN / TN) * TN;  // this thread's square: rows trow.., cols tcol..
    float acc[TM][TN] = {}, a[TM], b[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        #pragma unroll
        for (int i = t; i < BM * BK; i += THREADS) {  // 2 elements of each tile per thread
            const int r = i / BK, k = i % BK;
            As[r][k] = (bm + r < M && k0 + k < K) ? A[(bm + r) * K + k0 + k] : 0.0f;
        }
        #pragma unroll
        for (int i = t; i < BK * BN; i += THREADS) {
            const int k = i / BN, c = i % BN;
            Bs[k][c] = (k0 + k < K && bn + c < N) ? B[(k0 + k) * N + bn + c] : 0.0f;
        }
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            #pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[trow + i][k];  // 4 + 4 shared loads ...
            #pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k][tcol + j];
            #pragma unroll
            for (int i = 0; i < TM; ++i)
                #pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];  // ... for 16 FMAs from registers
        }
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j)
            if (bm + trow + i < M && bn + tcol + j < N) C[(bm + trow + i) * N + bn + tcol + j] = acc[i][j];
}

extern "C" int sgemm_thread_tile(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
    sgemm_thread_tile_kernel<<<grid, THREADS>>>(A, B, C, M, N, K);
    return (int)cudaGetLastError();
}
