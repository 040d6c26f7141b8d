// Variants of the stable single-pass compaction of 02_compaction_and_histogram.ipynb, side by side: which of its two
// changes over the first version (a ninth warp that looks back while the tile loads, as in 01_scan; the kept elements
// staged in shared memory and written out as one run) buys what. float32, 2^28 normal values, t = 0 (half kept);
// 4n + 4k bytes counted; each result is checked against the host.
// Build and run (on a GPU machine, from the repository root):
//   nvcc -O3 -arch=sm_90a -std=c++17 -I gpu_ml/include -I gpu_ml/kernels \
//        -o /tmp/compaction cuda/06-parallel-algorithms/experiments/compaction_ablation.cu && /tmp/compaction
// Its output on an H200 is kept beside it in compaction_ablation.txt.
#include <cstdio>
#include <random>
#include <vector>
#include "cuda/compact.cuh"
#include "ablation_timing.cuh"  // timed(): mean ms of 50 launches after 5

// NINTH: a ninth warp looks back meanwhile (else warp 0 looks back after the tile is placed). STAGED: the kept
// elements go through shared memory and out as one run (else each thread stores its own, 4 bytes at a time).
template <int VECS, bool NINTH, bool STAGED>
__global__ void __launch_bounds__(NINTH ? SCAN_LOOKBACK_THREADS : SCAN_WARPS * 32)
    variant(const float* __restrict__ x, float* __restrict__ out, int* count, ScanWord* status, unsigned* counter,
            long long n) {
    constexpr int TILE = SCAN_WARPS * 128 * VECS, THREADS = NINTH ? SCAN_LOOKBACK_THREADS : SCAN_WARPS * 32;
    __shared__ ScanHandOff<int> s;
    __shared__ float staged[STAGED ? TILE : 1];
    __shared__ int tile_number;
    if (threadIdx.x == 0) tile_number = (int)atomicAdd(counter, 1u);
    __syncthreads();
    const int tile = tile_number;
    ScanWord* mine = status + status_slot(tile);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float v[VECS][4];
    unsigned kept = 0;
    int place[VECS], before = 0;
    if (NINTH && warp == SCAN_WARPS) {
        const int prefix = tile > 0 ? look_back<int>(status, tile) : 0;
        if (lane == 0) s.prefix = prefix;
        asm volatile("bar.sync 2, 32;" ::: "memory");
    } else {
        const long long start = (long long)tile * TILE;
        load_tile<float, VECS>(x, start, n, true, v);
        const int left = (int)min(n - tile_first<VECS>(start), (long long)TILE);
        int warp_kept = 0;
#pragma unroll
        for (int r = 0; r < VECS; ++r) {
            place[r] = warp_kept;
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const bool keep = 128 * r + c < left && v[r][c] > 0.0f;
                kept |= (unsigned)keep << (4 * r + c);
                const unsigned column = __ballot_sync(0xffffffffu, keep);
                place[r] += __popc(column & ((1u << lane) - 1));
                warp_kept += __popc(column);
            }
        }
        if (lane == 0) s.totals[warp] = warp_kept;
        asm volatile("bar.sync 1, %0;" ::"n"(SCAN_WARPS * 32) : "memory");
        int aggregate = 0;
#pragma unroll
        for (int w = 0; w < SCAN_WARPS; ++w) {
            if (w == warp) before = aggregate;
            aggregate += s.totals[w];
        }
        if (threadIdx.x == 0) {
            s.aggregate = aggregate;
            if (tile > 0) publish(mine, SCAN_AGGREGATE, aggregate);
        }
        if (STAGED)
#pragma unroll
            for (int r = 0; r < VECS; ++r) {
                int at = before + place[r];
#pragma unroll
                for (int c = 0; c < 4; ++c)
                    if ((kept >> (4 * r + c)) & 1u) staged[at++] = v[r][c];
            }
        if (!NINTH && warp == 0) {  // the first version: warp 0 looks back once the tile is placed
            const int prefix = tile > 0 ? look_back<int>(status, tile) : 0;
            if (lane == 0) s.prefix = prefix;
        }
    }
    __syncthreads();
    const int prefix = s.prefix, aggregate = s.aggregate;
    if (threadIdx.x == (NINTH ? SCAN_WARPS * 32 : 0)) {
        publish(mine, SCAN_PREFIX, prefix + aggregate);
        if (tile == (int)gridDim.x - 1) *count = prefix + aggregate;
    }
    if (STAGED) {
        for (int i = threadIdx.x; i < aggregate; i += THREADS) __stcs(out + prefix + i, staged[i]);
    } else if (warp < SCAN_WARPS) {
#pragma unroll
        for (int r = 0; r < VECS; ++r) {
            int at = prefix + before + place[r];
#pragma unroll
            for (int c = 0; c < 4; ++c)
                if ((kept >> (4 * r + c)) & 1u) out[at++] = v[r][c];
        }
    }
}

int main() {
    const long long n = 1LL << 28;
    float *x, *out;
    int* count;
    long long* status;
    const long long words = scan_status_words(n, 4);  // the most lines: tiles of 1024
    cudaMalloc(&x, n * 4); cudaMalloc(&out, n * 4); cudaMalloc(&count, 4); cudaMalloc(&status, words * 8);
    std::vector<float> h(n), got(n);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (auto& e : h) e = normal(rng);
    cudaMemcpy(x, h.data(), n * 4, cudaMemcpyHostToDevice);
    long long k = 0;
    for (float e : h) k += e > 0.0f;
    const double bytes = 4.0 * n + 4.0 * k;
    const float copy = timed([&] { cudaMemcpyAsync(out, x, n * 4, cudaMemcpyDeviceToDevice); });
    auto right = [&] {
        int c = -1;
        cudaMemcpy(&c, count, 4, cudaMemcpyDeviceToHost);
        if (c != k) return false;
        cudaMemcpy(got.data(), out, k * 4, cudaMemcpyDeviceToHost);
        long long j = 0;
        for (float e : h)
            if (e > 0.0f && got[j++] != e) return false;
        return true;
    };
    auto report = [&](const char* name, float ms) {
        printf("%-56s %.3f ms %5.0f GB/s %.3fx copy, %s\n", name, ms, bytes / ms / 1e6, (bytes / ms) / (8.0 * n / copy),
               right() ? "right" : "WRONG");
    };
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("%s; 2^28 float32, t = 0: %lld kept; 4n + 4k bytes counted; mean of 50 launches after 5\n", prop.name, k);
    printf("%-56s %.3f ms %5.0f GB/s\n", "cudaMemcpy device to device of 2^28 (read + write)", copy, 8.0 * n / copy / 1e6);
#define VARIANT(NAME, V, NINTH, STAGED)                                                                         \
    {                                                                                                           \
        const long long tiles = scan_tile_count(n, V);                                                          \
        report(NAME, timed([&] {                                                                                \
            cudaMemsetAsync(status, 0, (status_slot(tiles) + 1) * 8);                                           \
            variant<V, NINTH, STAGED><<<(unsigned)tiles, NINTH ? SCAN_LOOKBACK_THREADS : SCAN_WARPS * 32>>>(    \
                x, out, count, (ScanWord*)status, (unsigned*)(status + status_slot(tiles)), n);                 \
        }));                                                                                                    \
    }
    VARIANT("warp 0 looks back after the tile, own stores, 16/thread", 4, false, false)
    VARIANT("warp 0 looks back after the tile, staged, 16/thread", 4, false, true)
    VARIANT("a ninth warp looks back meanwhile, own stores, 16/thread", 4, true, false)
    VARIANT("a ninth warp looks back meanwhile, staged, 16/thread", 4, true, true)
    VARIANT("warp 0 looks back after the tile, own stores, 32/thread", 8, false, false)
    VARIANT("warp 0 looks back after the tile, staged, 32/thread", 8, false, true)
    VARIANT("a ninth warp looks back meanwhile, own stores, 32/thread", 8, true, false)
    VARIANT("a ninth warp looks back meanwhile, staged, 32/thread", 8, true, true)
    for (int items : {8, 16, 32}) {
        char name[80];
        snprintf(name, sizeof name, "launch_compact (the notebook's now), %d per thread", items);
        report(name, timed([&] { launch_compact<float>(x, out, count, status, words, n, 0.0f, items, 0); }));
    }
    const cudaError_t err = cudaGetLastError();
    printf("%s\n", err == cudaSuccess ? "no CUDA error" : cudaGetErrorString(err));
    return err == cudaSuccess ? 0 : 1;
}
