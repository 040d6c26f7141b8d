// cudaling: warp_sums
__global__ void warp_sums_kernel(const float* x, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;  // n is a multiple of 32: whole warps leave together
    float v = x[i];
    for (int offset = 16; offset > 0; offset /= 2)  // lane l adds lane l + offset's value
        v += __shfl_down_sync(0xffffffffu, v, offset);
    if (threadIdx.x % 32 == 0) out[i / 32] = v;  // lane 0 holds the warp's sum
}

extern "C" int warp_sums(const float* x, float* out, int n) {  // n: a multiple of 32
    warp_sums_kernel<<<(n + 255) / 256, 256>>>(x, out, n);
    return (int)cudaGetLastError();
}
