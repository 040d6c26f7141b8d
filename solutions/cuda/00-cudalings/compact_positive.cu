// cudaling: compact_positive
__global__ void compact_kernel(const float* x, float* out, int* count, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const bool keep = i < n && x[i] > 0.0f;
    const unsigned mask = __ballot_sync(0xffffffffu, keep);  // bit l set: lane l keeps its element
    if (mask == 0) return;  // the same mask in every lane: the whole warp leaves
    const int lane = threadIdx.x % 32;
    const int leader = __ffs(mask) - 1;  // the lowest lane that keeps one
    int base = 0;
    if (lane == leader) base = atomicAdd(count, __popc(mask));  // one atomic reserves room for the whole warp
    base = __shfl_sync(0xffffffffu, base, leader);
    if (keep) out[base + __popc(mask & ((1u << lane) - 1))] = x[i];  // + how many lower lanes keep one
}

extern "C" int compact_positive(const float* x, float* out, int* count, int n) {
    cudaError_t err = cudaMemset(count, 0, sizeof(int));
    if (err != cudaSuccess) return (int)err;
    compact_kernel<<<(n + 255) / 256, 256>>>(x, out, count, n);
    return (int)cudaGetLastError();
}
