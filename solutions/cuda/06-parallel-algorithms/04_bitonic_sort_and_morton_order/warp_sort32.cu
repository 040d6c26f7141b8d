// exercise: warp_sort32
#include <climits>

// The pair (lane, lane ^ j) is ascending where (lane & k) == 0; its lower lane ((lane & j) == 0) keeps the minimum
// of an ascending pair and the maximum of a descending one: the lane keeps the minimum where the two tests agree.
__global__ void warp_sort32_kernel(const int* __restrict__ x, int* __restrict__ y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x % 32;
    int v = i < n ? x[i] : INT_MAX;  // past the end: the largest int, which sorts last; every lane must shuffle
    for (int k = 2; k <= 32; k *= 2) {
        for (int j = k / 2; j >= 1; j /= 2) {
            const int other = __shfl_xor_sync(0xffffffffu, v, j);
            const bool up = (lane & k) == 0, lower = (lane & j) == 0;
            v = up == lower ? min(v, other) : max(v, other);
        }
    }
    if (i < n) y[i] = v;
}

extern "C" int warp_sort32(const int* x, int* y, int n) {
    if (n < 1) return -1;
    warp_sort32_kernel<<<(n + 255) / 256, 256>>>(x, y, n);
    return (int)cudaGetLastError();
}
