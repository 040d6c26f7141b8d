// exercise: lookback_scan
#include <cuda/atomic>
#include "cuda/scan_warp.cuh"  // scan_add, warp_inclusive_scan
#define THREADS 1024           // a tile: one element per thread

using Word = unsigned long long;  // a status word: the flag (0 empty, 1 aggregate, 2 prefix) << 32 | the value's bits
__device__ Word read_word(Word* w) {
    return cuda::atomic_ref<Word, cuda::thread_scope_device>(*w).load(cuda::memory_order_relaxed);
}
__device__ void publish(Word* w, unsigned flag, int value) {
    cuda::atomic_ref<Word, cuda::thread_scope_device>(*w).store(((Word)flag << 32) | (unsigned)value,
                                                                cuda::memory_order_relaxed);
}

// The sum of every element before tile `tile` (> 0), found by one thread: walk back one tile at a time, wait while
// a tile's word is empty, add its value, and stop after the first inclusive prefix (flag 2).
__device__ int look_back(Word* status, int tile) {
    int prefix = 0;
    for (int j = tile - 1; j >= 0; --j) {
        Word w = read_word(status + j);
        while ((w >> 32) == 0) w = read_word(status + j);  // tile j has not published yet (it has started: it will)
        prefix = scan_add(prefix, (int)(unsigned)w);
        if ((w >> 32) == 2) break;  // an inclusive prefix covers every tile before j too
    }
    return prefix;
}

__global__ void lookback_scan_kernel(const int* __restrict__ x, int* __restrict__ y, Word* status, unsigned* counter,
                                     int n) {
    __shared__ int tile_number, tile_prefix, totals[THREADS / 32];
    if (threadIdx.x == 0) tile_number = (int)atomicAdd(counter, 1u);  // tiles in the order blocks start
    __syncthreads();
    const int tile = tile_number, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const long long i = (long long)tile * THREADS + threadIdx.x;
    const int v = warp_inclusive_scan(i < n ? x[i] : 0);
    if (lane == 31) totals[warp] = v;
    __syncthreads();
    int before = 0, aggregate = 0;
    for (int w = 0; w < THREADS / 32; ++w) {
        if (w == warp) before = aggregate;
        aggregate = scan_add(aggregate, totals[w]);
    }
    if (threadIdx.x == 0) {
        int prefix = 0;
        if (tile > 0) {
            publish(status + tile, 1, aggregate);
            prefix = look_back(status, tile);
        }
        publish(status + tile, 2, scan_add(prefix, aggregate));
        tile_prefix = prefix;
    }
    __syncthreads();
    if (i < n) y[i] = scan_add(scan_add(tile_prefix, before), v);
}

// status: tiles + 1 words (the last one holds the tile counter), zeroed here before the launch.
extern "C" int lookback_scan(const int* x, int* y, long long* status, int n) {
    if (n < 1) return -1;
    const int tiles = (n + THREADS - 1) / THREADS;
    cudaError_t err = cudaMemset(status, 0, (tiles + 1) * sizeof(long long));
    if (err != cudaSuccess) return (int)err;
    Word* words = reinterpret_cast<Word*>(status);
    lookback_scan_kernel<<<tiles, THREADS>>>(x, y, words, reinterpret_cast<unsigned*>(words + tiles), n);
    return (int)cudaGetLastError();
}
