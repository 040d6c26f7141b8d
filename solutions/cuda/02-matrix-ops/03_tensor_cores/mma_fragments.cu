// exercise: mma_fragments
#include <cuda_fp16.h>
#include <cstdint>

// D (16 x 8, fp32) += A (16 x 16, fp16) * B (16 x 8, fp16): one tensor-core instruction issued by a whole warp.
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two fp16 values in one 32-bit register: lo (the lower-numbered element) in bits 0-15, hi in bits 16-31.
__device__ __forceinline__ uint32_t pack2(half lo, half hi) {
    return (uint32_t)__half_as_ushort(lo) | ((uint32_t)__half_as_ushort(hi) << 16);
}

// Warp w computes the 16 x 8 tile of C = A @ B at rows m0 .. m0 + 15, columns n0 .. n0 + 7.
__global__ void mma_fragments_kernel(const half* A, const half* B, float* C, int M, int N, int K) {
    const int w = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    const int tiles_n = N / 8;
    if (w >= (M / 16) * tiles_n) return;  // the whole warp leaves together: mma.sync needs all 32 lanes
    const int m0 = w / tiles_n * 16, n0 = w % tiles_n * 8;
    const int g = lane / 4, t = lane % 4;  // the group of 4 lanes, and the lane within it
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k0 = 0; k0 < K; k0 += 16) {
        const half* a = A + (size_t)m0 * K + k0;  // a[r * K + c]: element (r, c) of this step's 16 x 16 piece of A
        const half* b = B + (size_t)k0 * N + n0;  // b[r * N + c]: element (r, c) of this step's 16 x 8 piece of B
        uint32_t af[4], bf[2];
        af[0] = pack2(a[g * K + 2 * t], a[g * K + 2 * t + 1]);                  // a0, a1: row g
        af[1] = pack2(a[(g + 8) * K + 2 * t], a[(g + 8) * K + 2 * t + 1]);      // a2, a3: row g + 8
        af[2] = pack2(a[g * K + 2 * t + 8], a[g * K + 2 * t + 9]);              // a4, a5: row g, columns + 8
        af[3] = pack2(a[(g + 8) * K + 2 * t + 8], a[(g + 8) * K + 2 * t + 9]);  // a6, a7: row g + 8, columns + 8
        bf[0] = pack2(b[(2 * t) * N + g], b[(2 * t + 1) * N + g]);              // b0, b1: k 2t, 2t + 1, column g
        bf[1] = pack2(b[(2 * t + 8) * N + g], b[(2 * t + 9) * N + g]);          // b2, b3: k + 8
        mma_16816(d, af, bf);
    }
    float* c = C + (size_t)m0 * N + n0;
    c[g * N + 2 * t] = d[0];  // d0, d1: row g, columns 2t, 2t + 1
    c[g * N + 2 * t + 1] = d[1];
    c[(g + 8) * N + 2 * t] = d[2];  // d2, d3: row g + 8
    c[(g + 8) * N + 2 * t + 1] = d[3];
}

extern "C" int mma_fragments(const half* A, const half* B, float* C, int M, int N, int K) {
    if (M <= 0 || N <= 0 || M % 16 || N % 8 || K % 16) return (int)cudaErrorInvalidValue;  // whole tiles only
    const int warps = (M / 16) * (N / 8);  // one per 16 x 8 tile of C, 4 per block
    mma_fragments_kernel<<<(warps + 3) / 4, 128>>>(A, B, C, M, N, K);
    return (int)cudaGetLastError();
}
