// exercise: sgemm_vec_tile
// v6 on 64 x 64 tiles: float4 loads, A transposed in shared memory, each thread a 4 x 4 square of C.
// Whole tiles only: M % 64 == N % 64 == K % 8 == 0 (the host function refuses anything else).
constexpr int BM = 64, BN = 64, BK = 8, TM = 4, TN = 4;
constexpr int THREADS = (BM / TM) * (BN / TN);  // 256

__global__ void __launch_bounds__(THREADS)
sgemm_vec_tile_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                      int M, int N, int K) {
    __shared__ __align__(16) float As[BK][BM];  // transposed: As[k][r] = A[bm + r][k0 + k]
    __shared__ __align__(16) float Bs[BK][BN];  // Bs[k][c] = B[k0 + k][bn + c]
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN, t = threadIdx.x;
    const int trow = t / (BN / TN) * TM, tcol = t % (BN / TN) * TN;
    float acc[TM][TN] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        #pragma unroll
        for (int i = t; i < BM * BK / 4; i += THREADS) {  // the A tile as float4s: BK / 4 = 2 per row
            const int r = i / (BK / 4), k = i % (BK / 4) * 4;
            const float4 v = *reinterpret_cast<const float4*>(&A[(bm + r) * K + k0 + k]);
            As[k + 0][r] = v.x;  // transposed on the way in: 4 scalar stores
            As[k + 1][r] = v.y;
            As[k + 2][r] = v.z;
            As[k + 3][r] = v.w;
        }
        #pragma unroll
        for (int i = t; i < BK * BN / 4; i += THREADS) {  // the B tile: BN / 4 = 16 float4s per row
            const int k = i / (BN / 4), c = i % (BN / 4) * 4;
            *reinterpret_cast<float4*>(&Bs[k][c]) = *reinterpret_cast<const float4*>(&B[(k0 + k) * N + bn + c]);
        }
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float4 va = *reinterpret_cast<const float4*>(&As[k][trow]);  // rows trow .. trow + 3: one load
            const float4 vb = *reinterpret_cast<const float4*>(&Bs[k][tcol]);  // columns tcol .. tcol + 3
            const float a[TM] = {va.x, va.y, va.z, va.w}, b[TN] = {vb.x, vb.y, vb.z, vb.w};
            #pragma unroll
            for (int i = 0; i < TM; ++i)
                #pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        *reinterpret_cast<float4*>(&C[(bm + trow + i) * N + bn + tcol]) =
            make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
}

extern "C" int sgemm_vec_tile(const float* A, const float* B, float* C, int M, int N, int K) {
    if (M % BM || N % BN || K % BK) return (int)cudaErrorInvalidValue;  // whole tiles only, before any launch
    sgemm_vec_tile_kernel<<<dim3(N / BN, M / BM), THREADS>>>(A, B, C, M, N, K);
    return (int)cudaGetLastError();
}
