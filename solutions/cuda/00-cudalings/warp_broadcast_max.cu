// cudaling: warp_broadcast_max
#include <cmath>

__global__ void warp_max_kernel(const float* x, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : -INFINITY;  // lanes past the end take part in the shuffles with -inf
    for (int offset = 16; offset > 0; offset /= 2)  // butterfly: after 5 steps every lane has the maximum
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    if (i < n) out[i] = v;
}

extern "C" int warp_broadcast_max(const float* x, float* out, int n) {
    warp_max_kernel<<<(n + 255) / 256, 256>>>(x, out, n);
    return (int)cudaGetLastError();
}
