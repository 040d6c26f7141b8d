// exercise: layer_norm_welford
#include "gpu_ml.cuh"
#define THREADS 256

struct Stats {
    float n, mean, m2;  // count, mean, sum of squared deviations from the mean
};

// Chan's merge of two (n, mean, M2) triples over disjoint parts of a row.
__device__ Stats welford_merge(Stats a, Stats b) {
    const float n = a.n + b.n;
    if (n == 0.0f) return a;  // both empty: delta * b.n / n would be 0 / 0 = NaN
    const float delta = b.mean - a.mean, fb = b.n / n;
    return {n, a.mean + delta * fb, a.m2 + b.m2 + delta * delta * a.n * fb};
}

// One block per row, any width: each thread streams its strided share of the row with Welford's update,
// the triples are merged across the warp and the block, and a second pass writes y.
__global__ void layer_norm_welford_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                          const float* __restrict__ b, float* __restrict__ y, int cols, float eps) {
    __shared__ Stats red[32];
    const float* xr = x + (long long)blockIdx.x * cols;
    float* yr = y + (long long)blockIdx.x * cols;
    Stats s = {0.0f, 0.0f, 0.0f};
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {  // Welford's update, one element at a time
        const float v = xr[c];
        s.n += 1.0f;
        const float d = v - s.mean;
        s.mean += d / s.n;
        s.m2 += d * (v - s.mean);
    }
    for (int offset = 16; offset > 0; offset /= 2) {  // butterfly over the warp; every lane takes part
        const Stats o = {__shfl_xor_sync(0xffffffffu, s.n, offset), __shfl_xor_sync(0xffffffffu, s.mean, offset),
                         __shfl_xor_sync(0xffffffffu, s.m2, offset)};
        s = welford_merge(s, o);
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) red[warp] = s;
    __syncthreads();
    Stats t = {0.0f, 0.0f, 0.0f};  // every thread merges the warps' triples, in the same order
    for (int k = 0; k < blockDim.x / 32; ++k) t = welford_merge(t, red[k]);
    const float mean = t.mean, rstd = rsqrtf(t.m2 / cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
}

extern "C" int layer_norm_welford(const float* x, const float* w, const float* b, float* y, int rows, int cols,
                                  float eps) {
    if (rows == 0) return 0;
    layer_norm_welford_kernel<<<rows, THREADS>>>(x, w, b, y, cols, eps);
    return (int)cudaGetLastError();
}
