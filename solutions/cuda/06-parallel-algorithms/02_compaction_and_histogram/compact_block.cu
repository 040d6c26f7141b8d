// exercise: compact_block
#define THREADS 1024  // one block walks the whole array, 1024 elements per step

// Stable compaction by one block. In each step a warp's ballot gives its kept lanes; after a barrier every thread
// scans the 32 warps' counts in the same order, so each kept element's place is carry + (kept in the warps before) +
// (kept in the lanes before), which keeps x's order. The second barrier keeps the next step from rewriting
// warp_kept while a slower warp still reads it.
__global__ void compact_block_kernel(const float* __restrict__ x, float* __restrict__ out, int* count, int n,
                                     float t) {
    __shared__ int warp_kept[THREADS / 32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int carry = 0;
    for (int start = 0; start < n; start += THREADS) {
        const int i = start + threadIdx.x;
        const bool keep = i < n && x[i] > t;
        const unsigned flags = __ballot_sync(0xffffffffu, keep);
        if (lane == 0) warp_kept[warp] = __popc(flags);
        __syncthreads();
        int before = 0, total = 0;
        for (int w = 0; w < THREADS / 32; ++w) {
            if (w == warp) before = total;
            total += warp_kept[w];
        }
        if (keep) out[carry + before + __popc(flags & ((1u << lane) - 1))] = x[i];
        carry += total;
        __syncthreads();
    }
    if (threadIdx.x == 0) *count = carry;
}

extern "C" int compact_block(const float* x, float* out, int* count, int n, float t) {
    if (n < 1) return -1;
    compact_block_kernel<<<1, THREADS>>>(x, out, count, n, t);
    return (int)cudaGetLastError();
}
