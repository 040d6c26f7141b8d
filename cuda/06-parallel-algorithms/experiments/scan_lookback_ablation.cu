// Variants of the single-pass scan of 01_scan.ipynb, side by side, to find what holds it below a copy on an H200.
// int32, 2^28 elements, inclusive; each variant's result is checked against a running sum on the host.
// Build and run (on a GPU machine, from the repository root):
//   nvcc -O3 -arch=sm_90a -std=c++17 -I gpu_ml/include -I gpu_ml/kernels \
//        -o /tmp/ablation cuda/06-parallel-algorithms/experiments/scan_lookback_ablation.cu && /tmp/ablation
// Its output on an H200 is kept beside it in scan_lookback_ablation.txt.
#include <cstdio>
#include <vector>
#include "cuda/scan.cuh"
#include "ablation_timing.cuh"  // timed(): mean ms of 50 launches after 5

// No look-back at all: each tile scanned on its own (the result is wrong; the speed is the ceiling of the tiles).
template <int VECS, bool COUNTER, bool SCAN>
__global__ void __launch_bounds__(SCAN_WARPS * 32) tile_only(const int* __restrict__ x, int* __restrict__ y,
                                                             unsigned* counter, long long n) {
    __shared__ int totals[SCAN_WARPS];
    __shared__ int tile_number;
    int tile;
    if (COUNTER) {
        if (threadIdx.x == 0) tile_number = (int)atomicAdd(counter, 1u);
        __syncthreads();
        tile = tile_number;
    } else {
        tile = blockIdx.x;
    }
    const long long start = (long long)tile * SCAN_WARPS * 128 * VECS;
    int v[VECS][4], before;
    load_tile<int, VECS>(x, start, n, true, v);
    if (SCAN) {
        block_tile_scan<int, VECS>(v, false, totals, before);
        add_offset<int, VECS>(v, before);
    }
    store_tile<int, VECS>(y, start, n, true, v);
}


// The tile's loads and stores: IO = 0 through scan_tile_io.cuh (load_tile / store_tile, whose full tiles are 16-byte
// loads and 16-byte streaming stores), IO = 1 as plain int4 loads and stores with no bounds check (n is a multiple of
// the tile here).
template <int VECS, int IO>
__device__ __forceinline__ void load_io(const int* __restrict__ x, long long start, long long n, int (&v)[VECS][4]) {
    if (IO == 0) { load_tile<int, VECS>(x, start, n, true, v); return; }
    const long long first = tile_first<VECS>(start);
#pragma unroll
    for (int r = 0; r < VECS; ++r) {
        const int4 q = *reinterpret_cast<const int4*>(x + first + 128 * r);
        v[r][0] = q.x; v[r][1] = q.y; v[r][2] = q.z; v[r][3] = q.w;
    }
}
template <int VECS, int IO>
__device__ __forceinline__ void store_io(int* __restrict__ y, long long start, long long n, const int (&v)[VECS][4]) {
    if (IO == 0) { store_tile<int, VECS>(y, start, n, true, v); return; }
    const long long first = tile_first<VECS>(start);
#pragma unroll
    for (int r = 0; r < VECS; ++r)
        *reinterpret_cast<int4*>(y + first + 128 * r) = make_int4(v[r][0], v[r][1], v[r][2], v[r][3]);
}

// The look-back of scan_status.cuh with the status words PAD words apart (PAD = 1: packed side by side, as before).
template <int K, int PAD>
__device__ int look_back_pad(ScanWord* status, int tile) {
    const int lane = threadIdx.x % 32;
    int prefix = 0;
    for (int end = tile;; end -= 32 * K) {
        ScanWord w[K];
#pragma unroll
        for (int m = 0; m < K; ++m) {
            const int j = end - 1 - K * lane - m;
            w[m] = j >= 0 ? ScanWordRef(status[(long long)j * PAD]).load(cuda::memory_order_relaxed) : (ScanWord)SCAN_PREFIX << 32;
        }
        for (;;) {
            bool empty = false;
#pragma unroll
            for (int m = 0; m < K; ++m) empty |= flag_of(w[m]) == SCAN_EMPTY;
            if (!__any_sync(0xffffffffu, empty)) break;
#pragma unroll
            for (int m = 0; m < K; ++m)
                if (flag_of(w[m]) == SCAN_EMPTY)
                    w[m] = ScanWordRef(status[(long long)(end - 1 - K * lane - m) * PAD]).load(cuda::memory_order_relaxed);
        }
        int first = K;
#pragma unroll
        for (int m = K - 1; m >= 0; --m) if (flag_of(w[m]) == SCAN_PREFIX) first = m;
        const unsigned prefixes = __ballot_sync(0xffffffffu, first < K);
        const int stop = prefixes ? __ffs(prefixes) - 1 : 32;
        int mine = 0;
#pragma unroll
        for (int m = 0; m < K; ++m) if (lane < stop || (lane == stop && m <= first)) mine += scan_value<int>(w[m]);
        prefix += warp_total(mine);
        if (prefixes) return prefix;
    }
}

// Warp 0 looks back after the tile is loaded and scanned, as 01_scan's kernel does (there with PAD = 16).
template <int VECS, int K, int PAD, int IO>
__global__ void __launch_bounds__(SCAN_WARPS * 32) lookback_pad(const int* __restrict__ x, int* __restrict__ y,
                                                                ScanWord* status, unsigned* counter, long long n) {
    __shared__ int totals[SCAN_WARPS];
    __shared__ int tile_prefix, tile_number;
    if (threadIdx.x == 0) tile_number = (int)atomicAdd(counter, 1u);
    __syncthreads();
    const int tile = tile_number;
    const long long start = (long long)tile * SCAN_WARPS * 128 * VECS;
    int v[VECS][4], before;
    load_io<VECS, IO>(x, start, n, v);
    const int aggregate = block_tile_scan<int, VECS>(v, false, totals, before);
    if (threadIdx.x < 32) {
        int prefix = 0;
        if (tile > 0) {
            if (threadIdx.x == 0) publish(status + (long long)tile * PAD, SCAN_AGGREGATE, aggregate);
            prefix = look_back_pad<K, PAD>(status, tile);
        }
        if (threadIdx.x == 0) { publish(status + (long long)tile * PAD, SCAN_PREFIX, prefix + aggregate); tile_prefix = prefix; }
    }
    __syncthreads();
    add_offset<int, VECS>(v, tile_prefix + before);
    store_io<VECS, IO>(y, start, n, v);
}

// A ninth warp looks back while the eight tile warps load and scan, as 01_scan's kernel does: the two branches meet at
// one __syncthreads call site, and the ninth warp's branch has a barrier of its own (bar.sync 2, 32: that warp alone)
// to match the tile warps' named barrier 1, without which compute-sanitizer's racecheck reports a hazard on the
// hand-off.
template <int VECS, int K, int MINB, int PAD, int IO>
__global__ void __launch_bounds__(SCAN_WARPS * 32 + 32, MINB) lookback_ws(const int* __restrict__ x, int* __restrict__ y,
                                                                          ScanWord* status, unsigned* counter, long long n) {
    __shared__ int totals[SCAN_WARPS];
    __shared__ int tile_prefix, tile_aggregate, tile_number;
    if (threadIdx.x == 0) tile_number = (int)atomicAdd(counter, 1u);
    __syncthreads();
    const int tile = tile_number;
    const bool lookback_warp = threadIdx.x >= SCAN_WARPS * 32;
    const long long start = (long long)tile * SCAN_WARPS * 128 * VECS;
    int v[VECS][4], before = 0;
    if (lookback_warp) {  // starts at once, while the tile is still loading
        const int prefix = tile > 0 ? look_back_pad<K, PAD>(status, tile) : 0;
        if (threadIdx.x == SCAN_WARPS * 32) tile_prefix = prefix;
        asm volatile("bar.sync 2, 32;" ::: "memory");
    } else {
        load_io<VECS, IO>(x, start, n, v);
        const int aggregate = block_tile_scan<int, VECS, 1>(v, false, totals, before);  // named barrier 1: tile warps
        if (threadIdx.x == 0) {
            if (tile > 0) publish(status + (long long)tile * PAD, SCAN_AGGREGATE, aggregate);
            tile_aggregate = aggregate;
        }
    }
    __syncthreads();
    if (lookback_warp) {
        if (threadIdx.x == SCAN_WARPS * 32)
            publish(status + (long long)tile * PAD, SCAN_PREFIX, tile_prefix + tile_aggregate);
        return;
    }
    add_offset<int, VECS>(v, tile_prefix + before);
    store_io<VECS, IO>(y, start, n, v);
}

int main() {
    const long long n = 1LL << 28;
    int *x, *y;
    long long* status;
    cudaMalloc(&x, n * 4); cudaMalloc(&y, n * 4); cudaMalloc(&status, (n / 1024 + 8) * 8 * 16);
    std::vector<int> h(n), out(n);
    for (long long i = 0; i < n; ++i) h[i] = (int)(i % 7) - 3;
    cudaMemcpy(x, h.data(), n * 4, cudaMemcpyHostToDevice);
    auto right = [&] {
        cudaMemcpy(out.data(), y, n * 4, cudaMemcpyDeviceToHost);
        long long run = 0;
        for (long long i = 0; i < n; ++i) { run += h[i]; if ((int)run != out[i]) return false; }
        return true;
    };
    auto gbs = [&](float ms) { return 8.0 * n / ms / 1e6; };
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    const float copy = timed([&] { cudaMemcpyAsync(y, x, n * 4, cudaMemcpyDeviceToDevice); });
    printf("%s; int32 scans of 2^28 elements, 8 bytes per element counted; mean of 50 launches after 5\n", prop.name);
    printf("%-58s %5.0f GB/s\n", "cudaMemcpy device to device (read + write)", gbs(copy));
    auto report = [&](const char* name, float ms, bool checked) {
        printf("%-58s %5.0f GB/s %.3fx copy%s\n", name, gbs(ms), copy / ms, checked ? (right() ? ", right" : ", WRONG") : "");
    };
    {
        const long long tiles = scan_tile_count(n, 8);
        report("tiles scanned on their own, no look-back (not a scan)", timed([&] {
            cudaMemsetAsync(status, 0, 8);
            tile_only<8, true, true><<<(unsigned)tiles, SCAN_WARPS * 32>>>(x, y, (unsigned*)status, n);
        }), false);
    }
#define AFTER(NAME, V, K, PAD, IO)                                                                                 \
    {                                                                                                          \
        const long long tiles = scan_tile_count(n, V);                                                         \
        report(NAME, timed([&] {                                                                               \
            cudaMemsetAsync(status, 0, (tiles * PAD + 1) * 8);                                                 \
            lookback_pad<V, K, PAD, IO><<<(unsigned)tiles, 256>>>(x, y, (ScanWord*)status,                         \
                                                              (unsigned*)(status + tiles * PAD), n);          \
        }), true);                                                                                             \
    }
#define NINTH(NAME, V, K, PAD, IO)                                                                                 \
    {                                                                                                          \
        const long long tiles = scan_tile_count(n, V);                                                         \
        report(NAME, timed([&] {                                                                               \
            cudaMemsetAsync(status, 0, (tiles * PAD + 1) * 8);                                                 \
            lookback_ws<V, K, 4, PAD, IO><<<(unsigned)tiles, 288>>>(x, y, (ScanWord*)status,                        \
                                                                (unsigned*)(status + tiles * PAD), n);        \
        }), true);                                                                                             \
    }
    AFTER("words packed, window 32, warp 0 after the tile", 8, 1, 1, 0)
    AFTER("words packed, window 128, warp 0 after the tile", 8, 4, 1, 0)
    AFTER("a line per word, window 32, warp 0 after the tile", 8, 1, 16, 0)
    AFTER("a line per word, window 128, warp 0 after the tile", 8, 4, 16, 0)
    AFTER("the same, plain int4 loads and stores", 8, 1, 16, 1)
    NINTH("words packed, window 32, a ninth warp meanwhile", 8, 1, 1, 0)
    NINTH("a line per word, window 32, a ninth warp meanwhile", 8, 1, 16, 0)
    NINTH("the same, plain int4 loads and stores", 8, 1, 16, 1)
    for (int items : {8, 16, 32}) {
        char name[80];
        snprintf(name, sizeof name, "launch_scan_lookback (01_scan now), %d per thread", items);
        report(name, timed([&] {
            launch_scan_lookback<int>(x, y, status, scan_status_words(n, items), n, false, items, 0);
        }), true);
    }
    const cudaError_t err = cudaGetLastError();
    printf("%s\n", err == cudaSuccess ? "no CUDA error" : cudaGetErrorString(err));
    return err == cudaSuccess ? 0 : 1;
}
